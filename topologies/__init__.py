"""Network topologies as networkx graphs, and routing on them.

Builders (:mod:`topologies.builders`) return an ``nx.DiGraph`` whose endpoints are the ints
``0..n-1`` (``kind="endpoint"``), switches are strings (``kind="switch"``), and every directed
edge has ``bandwidth`` (bytes/s) and ``latency`` (seconds, per hop). :class:`Router` gives
deterministic, cached shortest routes (optionally ECMP). This package imports neither
``proxies`` nor ``simnet``.
"""

from topologies.builders import (
    BUILDERS,
    DEFAULT_GROUP_SIZE,
    build,
    dragonfly,
    dragonfly_gateway,
    fat_tree,
    hierarchical,
    rail_optimised,
    ring,
    switch,
    torus,
)
from topologies.errors import TopologyError
from topologies.hosts import endpoints_per_node
from topologies.placement import apply_placement
from topologies.routing import (
    Edge,
    Path,
    Router,
    endpoints,
    path_bandwidth_bytes_per_s,
    path_latency_s,
    validate,
)

__all__ = [
    "BUILDERS",
    "DEFAULT_GROUP_SIZE",
    "Edge",
    "Path",
    "Router",
    "TopologyError",
    "apply_placement",
    "build",
    "dragonfly",
    "dragonfly_gateway",
    "endpoints",
    "endpoints_per_node",
    "fat_tree",
    "hierarchical",
    "path_bandwidth_bytes_per_s",
    "path_latency_s",
    "rail_optimised",
    "ring",
    "switch",
    "torus",
    "validate",
]
