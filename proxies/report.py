"""Figures of a proxy run: per rank, aggregated on rank 0, printed and saved."""

from __future__ import annotations

import argparse
import math
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from workload.models import Model
from workload.program import Workload
from workload.results import chrome_trace, counted, versions, write_json
from workload.run_result import ProxyRun
from workload.timeline import Breakdown, op_events
from workload.units import format_bytes

from .mpi_executor import PhaseRun


def _mean(values: Iterable[float]) -> float:
    """The mean (statistics.fmean's, without loading statistics into every rank)."""
    vals = list(values)
    return math.fsum(vals) / len(vals)


def rank_figures(run: PhaseRun, breakdown: Callable[..., Breakdown]) -> dict[str, Any]:
    """One rank's figures of one phase (seconds)."""
    starts = run.iteration_starts
    iters = [b - a for a, b in zip(starts, [*starts[1:], run.total_s], strict=True)]
    parts = [breakdown(run.ops, s, e) for s, e in zip(run.starts, run.ends, strict=True)]
    return {
        "phase": run.name,
        "iterations": len(iters),
        "total_s": run.total_s,
        "runtime_per_iteration_s": run.total_s / max(1, len(iters)),
        "iteration_s": iters,
        "compute_s": _mean(p.compute_s for p in parts),
        "comm_s": _mean(p.comm_s for p in parts),
        "exposed_comm_s": _mean(p.exposed_comm_s for p in parts),
    }


def trace_events(rank: int, runs: list[PhaseRun]) -> list[dict[str, Any]]:
    """Every timed operation of this rank as a trace event (``timeline.op_events``)."""
    events = []
    offset = 0.0
    for run in runs:
        events += op_events(rank, run.name, run.ops, run.starts, run.ends, offset)
        offset += run.total_s
    return events


def _phase_summary(name: str, per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    n_it = per_rank[0]["iterations"]
    # An iteration lasts as long as its slowest rank.
    per_iter = [max(r["iteration_s"][i] for r in per_rank) for i in range(n_it)]
    slowest = max(per_rank, key=lambda r: r["runtime_per_iteration_s"])
    out: dict[str, Any] = {
        "phase": name,
        "iterations": n_it,
        "runtime_per_iteration_s": {
            "rank0": per_rank[0]["runtime_per_iteration_s"],
            "slowest": slowest["runtime_per_iteration_s"],
            "slowest_rank": slowest["rank"],
        },
        "iteration_s": {
            "mean": _mean(per_iter),
            "min": min(per_iter),
            "max": max(per_iter),
        },
    }
    for key in ("compute_s", "comm_s", "exposed_comm_s"):
        vals = [r[key] for r in per_rank]
        out[key] = {"mean": _mean(vals), "max": max(vals)}
    return out


def document(
    model: Model,
    workload: Workload,
    ns: argparse.Namespace,
    settings: Any,
    everyone: list[dict[str, Any]],
    phase_runs: list[PhaseRun],
    *,
    library: str,
    thread_level: str,
    warmup: int,
    runs: int,
    wall_s: float,
) -> dict[str, Any]:
    """The JSON document of a run (rank 0), from every rank's gathered figures."""
    phases = []
    for i, run in enumerate(phase_runs):
        per_rank = [dict(r["phases"][i], rank=r["rank"]) for r in everyone]
        summary = _phase_summary(run.name, per_rank)
        calls: Counter[str] = Counter()
        nbytes: Counter[str] = Counter()
        for r in everyone:
            calls.update(r["program"][i]["calls_by_group"])
            nbytes.update(r["program"][i]["call_bytes_by_group"])
        summary["per_iteration_all_ranks"] = {
            "calls_by_group": dict(calls),
            "call_bytes_by_group": dict(nbytes),
        }
        summary["per_rank"] = [
            {k: v for k, v in pr.items() if k != "iteration_s"}
            | {"iteration_s": pr["iteration_s"], "program": everyone[j]["program"][i]}
            for j, pr in enumerate(per_rank)
        ]
        phases.append(summary)
    return ProxyRun(
        model=model.name,
        description=model.description,
        world_size=workload.world_size,
        params=workload.params,
        info=workload.info,
        groups={k: [list(g) for g in v] for k, v in workload.groups.items()},
        options=dict(vars(ns)),
        iterations={"warmup": warmup, "timed": runs},
        mpi={
            "library": library,
            "thread_level": thread_level,
            "progress_throttle": settings.throttle,
            "progress": settings.progress,
            "throttle_reason": settings.throttle_reason,
            "env": settings.env,
        },
        units={
            "time": "seconds",
            "bytes": "call bytes: count x 4 B float32 per MPI call "
            "(alltoall: bytes to the other peers)",
        },
        versions=versions(),
        wall_s=wall_s,
        peak_rss_bytes_per_rank=[r["peak_rss_bytes"] for r in everyone],
        phases=phases,
    ).to_json()


def emit(workload: Workload, doc: dict[str, Any], quiet: bool = False) -> None:
    """Print the reference's summary line(s) and, unless quiet, a table."""
    for ph in doc["phases"]:
        # As the reference: every rank's line for the models whose ranks all print.
        ranks = ph["per_rank"] if workload.summary_all_ranks else ph["per_rank"][:1]
        for r in ranks:
            runtime = r["runtime_per_iteration_s"]
            line = (
                workload.summary(r["rank"], runtime, ph["phase"])
                if workload.summary
                else f"runtime per iteration = {runtime:.6f} s"
            )
            print(line, flush=True)
    if quiet:
        return
    for ph in doc["phases"]:
        it = ph["iteration_s"]
        print(
            f"\nphase {ph['phase']}: {counted(ph['iterations'], 'timed iteration')} "
            f"(times in seconds; GB = 1e9 bytes)"
        )
        print(
            f"  {'iteration (slowest rank per iteration)':42s} mean {it['mean']:.6f}  "
            f"min {it['min']:.6f}  max {it['max']:.6f}"
        )
        rpi = ph["runtime_per_iteration_s"]
        print(
            f"  {'runtime per iteration, slowest rank':42s} {rpi['slowest']:.6f} "
            f"(rank {rpi['slowest_rank']})"
        )
        for key, label in (
            ("compute_s", "compute"),
            ("comm_s", "communication in flight"),
            ("exposed_comm_s", "exposed communication"),
        ):
            print(f"  {label:42s} mean {ph[key]['mean']:.6f}  max {ph[key]['max']:.6f}")
        g = ph["per_iteration_all_ranks"]
        print(f"  {'group':8s} {'calls/iter':>12s} {'call bytes/iter':>16s}  (all ranks)")
        for kind in sorted(g["calls_by_group"]):
            print(
                f"  {kind:8s} {g['calls_by_group'][kind]:12d} "
                f"{format_bytes(g['call_bytes_by_group'][kind]):>16s}"
            )
    wall = doc["wall_s"]  # a short run in milliseconds, not "0.0 s"
    print(f"wall time {wall:.3f} s" if wall < 10 else f"wall time {wall:.1f} s", flush=True)


def save_json(path: str, doc: dict[str, Any]) -> None:
    write_json(path, doc)


def save_trace(path: str, per_rank_events: list[list[dict[str, Any]]]) -> None:
    """A Chrome trace of these ranks' events (each event's pid is its rank)."""
    events = [e for evs in per_rank_events for e in evs]
    names = {e["pid"]: f"rank {e['pid']}" for e in events}
    write_json(path, chrome_trace(events, names))
