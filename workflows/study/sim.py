"""One simulation as a small, picklable task: what sweeps and scaling studies
submit to a pool (local processes or MPI workers).

Functions here are top-level so that ``concurrent.futures`` and
``mpi4py.futures`` can pickle them by reference. A task returns a
:class:`PointOutcome`: the point's :class:`PointResult`, or why it failed.
"""

from __future__ import annotations

import os
import statistics
import time
import traceback
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from simnet.config import ConfigError, read_json_file
from workload.results import versions, write_json

from .util import StudyError


def read_base_config(path: str | Path) -> dict[str, Any]:
    """The JSON object in ``path`` (a study's ``--config``), not yet validated.

    Raises StudyError naming the problem.
    """
    try:
        data = read_json_file(path)
    except ConfigError as e:
        raise StudyError(f"--config: {path}: {e}") from None
    if not isinstance(data, dict):
        raise StudyError(f"--config: {path} must hold a JSON object")
    return data


@dataclass(frozen=True, slots=True)
class PointResult:
    """The figures a study keeps of one simulated configuration.

    Times in seconds per iteration (``compute_s``, ``comm_s``,
    ``exposed_comm_s``: means over ranks); bytes per iteration, all ranks;
    ``phases`` the same per phase; ``sim_wall_s`` the simulator's wall time.
    Stored as the ``"result"`` object of a point file (:meth:`to_json`).
    """

    model: str
    world_size: int
    params: dict[str, Any]
    info: dict[str, Any]
    iteration_time_s: float
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    wire_bytes_by_group: dict[str, float | int]
    traffic_bytes_total: int
    phases: list[dict[str, Any]]
    topology: dict[str, Any]
    assumed: list[str]
    sim_wall_s: float
    scenario: list[str] = field(default_factory=list)  # its what-ifs, as the summary says

    def to_json(self) -> dict[str, Any]:
        """The JSON object of a point file's ``"result"`` (keys in field order)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, doc: Any) -> PointResult | None:
        """The result :meth:`to_json` wrote; None if ``doc`` is not one."""
        if not isinstance(doc, dict):
            return None
        try:  # (a point written before a field with a default was added has it not)
            return cls(**{f.name: doc[f.name] for f in fields(cls) if f.name in doc})
        except TypeError:
            return None


@dataclass(frozen=True, slots=True)
class PointOutcome:
    """What a task returns for one point: its result, or why it failed.

    ``kind`` of failure: "config" (an invalid configuration), "exception" (a
    bug or a resource problem, with its ``traceback``) or "pool" (the pool
    itself failed); ``wall_s``: seconds the task took, when it succeeded.
    """

    result: PointResult | None = None
    error: str | None = None
    kind: str | None = None
    traceback: str | None = None
    wall_s: float | None = None


def summarise(res: Any) -> PointResult:
    """The figures of a SimResult a study keeps (seconds, bytes; per iteration)."""
    phases = []
    wire: dict[str, float] = {}
    totals = {"compute_s": 0.0, "comm_s": 0.0, "exposed_comm_s": 0.0}
    for ph in res.phases:
        per_it = {k: v / ph.iterations for k, v in ph.wire_bytes_by_group.items()}
        for k, v in per_it.items():
            wire[k] = wire.get(k, 0.0) + v
        means = {key: statistics.fmean(r[key] for r in ph.per_rank) for key in totals}
        for key, v in means.items():
            totals[key] += v
        phases.append(
            {
                "phase": ph.name,
                "iteration_time_s": ph.iteration_time_s,
                "wire_bytes_by_group": per_it,
                "messages": ph.messages,
                **means,
            }
        )
    w = res.workload
    return PointResult(
        model=w.model,
        world_size=w.world_size,
        params=w.params,
        info=w.info,
        iteration_time_s=res.iteration_time_s,
        **totals,
        wire_bytes_by_group={k: _int_if_whole(v) for k, v in sorted(wire.items())},
        traffic_bytes_total=int(res.traffic_bytes.sum()) // max(1, res.phases[0].iterations),
        phases=phases,
        topology={
            "name": res.graph.graph.get("name"),
            "num_endpoints": res.graph.graph["num_endpoints"],
        },
        assumed=list(res.assumed),
        sim_wall_s=sum(p.sim_wall_s for p in res.phases),
        scenario=list(res.scenario),
    )


def _int_if_whole(v: float) -> float | int:
    return int(v) if float(v).is_integer() else v


RESULT_VERSION = 2
"""What a point's figures mean: a resumed sweep simulates again the points of another
version. Raise it when the same configuration would give other figures: 2 (2026-11-27):
a rank's messages to itself left the wire bytes; MPICH's scatter + allgather bcasts and
reduce-scatter + gather reduce are the defaults where MPICH runs them."""


def _mpi_worker_outlives_sigterm() -> None:
    """In an MPI pool's worker rank (``python -m mpi4py.futures``), ignore SIGTERM: a
    Slurm time limit or ``scancel`` sends it to every rank, and a worker that died of it
    made ``mpiexec`` kill rank 0 while rank 0 wrote the table of the points complete. Rank
    0 decides: it writes the table, and its exit aborts the job (the workers with it).
    A local pool's workers keep the default (they are ended with SIGTERM)."""
    import signal
    import sys
    import threading

    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or threading.current_thread() is not threading.main_thread():
        return
    if mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_rank() > 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def simulate_point(
    config: dict[str, Any], out_path: str | None = None, extra: dict[str, Any] | None = None
) -> PointOutcome:
    """Simulate one configuration; never raises.

    With ``out_path`` the point file (result, config, versions, ``extra``,
    ``"complete": true``) is also written there atomically, by the process
    that simulated it.
    """
    from simnet.simulate import simulate

    _mpi_worker_outlives_sigterm()
    started = time.perf_counter()
    try:
        res = simulate(config, record_series=False)  # no per-link series: less memory
        result = summarise(res)
        cfg = res.config.as_run()  # (as sim_results.json records it)
    except ConfigError as e:
        return PointOutcome(error=str(e), kind="config")
    except Exception as e:  # a bug or a resource problem: keep the other points going
        return PointOutcome(
            error=f"{type(e).__name__}: {e}", kind="exception", traceback=traceback.format_exc()
        )
    doc = {
        "kind": "simnet-sweep-point",
        "result_version": RESULT_VERSION,
        **(extra or {}),
        "result": result.to_json(),
        "config": cfg,
        "versions": versions(),
        "units": {"time": "seconds", "bytes": "bytes per iteration"},
        "worker_pid": os.getpid(),
        "wall_s": time.perf_counter() - started,
        "complete": True,
    }
    if out_path is not None:
        write_json(out_path, doc)
    return PointOutcome(result, wall_s=doc["wall_s"])
