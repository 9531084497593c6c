"""One simulation as a small, picklable task: what sweeps and scaling studies
submit to a pool (local processes or MPI workers).

Functions here are top-level so that ``concurrent.futures`` and
``mpi4py.futures`` can pickle them by reference; they return plain dicts.
"""

from __future__ import annotations

import os
import statistics
import time
import traceback
from typing import Any

from simnet.config import ConfigError
from workload.results import versions, write_json


def summarise(res: Any) -> dict[str, Any]:
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
    return {
        "model": w.model,
        "world_size": w.world_size,
        "params": w.params,
        "info": w.info,
        "iteration_time_s": res.iteration_time_s,
        **totals,
        "wire_bytes_by_group": {k: _int_if_whole(v) for k, v in sorted(wire.items())},
        "traffic_bytes_total": int(res.traffic_bytes.sum()) // max(1, res.phases[0].iterations),
        "phases": phases,
        "topology": {
            "name": res.graph.graph.get("name"),
            "num_endpoints": res.graph.graph["num_endpoints"],
        },
        "assumed": list(res.assumed),
        "sim_wall_s": sum(p.sim_wall_s for p in res.phases),
    }


def _int_if_whole(v: float) -> float | int:
    return int(v) if float(v).is_integer() else v


def simulate_point(
    config: dict[str, Any], out_path: str | None = None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Simulate one configuration; never raises.

    Returns ``{"status": "ok", "result": {...}}`` or ``{"status": "failed",
    "error": "..."}``. With ``out_path`` the document (result, config, versions,
    ``extra``, ``"complete": true``) is also written there atomically, by the
    process that simulated it.
    """
    from simnet.simulate import simulate

    started = time.perf_counter()
    try:
        res = simulate(config, record_series=False)  # no per-link series: less memory
        result = summarise(res)
        cfg = res.config.model_dump()
    except ConfigError as e:
        return {"status": "failed", "error": str(e), "kind": "config"}
    except Exception as e:  # a bug or a resource problem: keep the other points going
        return {
            "status": "failed",
            "error": f"{type(e).__name__}: {e}",
            "kind": "exception",
            "traceback": traceback.format_exc(),
        }
    doc = {
        "kind": "simnet-sweep-point",
        **(extra or {}),
        "result": result,
        "config": cfg,
        "versions": versions(),
        "units": {"time": "seconds", "bytes": "bytes per iteration"},
        "worker_pid": os.getpid(),
        "wall_s": time.perf_counter() - started,
        "complete": True,
    }
    if out_path is not None:
        write_json(out_path, doc)
    return {"status": "ok", "result": result, "wall_s": doc["wall_s"]}
