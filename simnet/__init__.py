"""simnet: a simpy network model that predicts the communication of rank programs.

Python API::

    import simnet, topologies
    res = simnet.simulate("config.json")          # a path, a dict or a Config
    res.iteration_time_s, res.traffic_bytes, res.bandwidth_bytes_per_s
    t = simnet.collective_time(topologies.ring(8, bandwidth_bytes_per_s=10e9,
                                               latency_s=5e-6),
                               "allreduce", "ring", size_bytes=2**28)
"""

from . import _compiled

_compiled.select()  # compiled or source modules, before anything imports them

from .config import Config, ConfigError, load_config, schema  # noqa: E402
from .simulate import (  # noqa: E402
    SimResult,
    collective_time,
    exchange_time,
    message_time,
    program_time,
    simulate,
)

__all__ = [
    "Config",
    "ConfigError",
    "SimResult",
    "collective_time",
    "exchange_time",
    "load_config",
    "message_time",
    "program_time",
    "schema",
    "simulate",
]
