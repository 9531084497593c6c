"""Writing a simulation's results: JSON, CSV matrices, heatmaps, a trace, a summary.

Every file is written atomically (see ``workload.results``).
"""

from __future__ import annotations

import gc
import html
import json
import math
import statistics
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np

import topologies
from workload.collectives import NCCL_ALGORITHMS
from workload.results import (
    _jsonable,
    atomic_write,
    chrome_trace,
    counted,
    versions,
    write_csv,
    write_json,
    write_text,
)
from workload.timeline import op_events
from workload.units import MB, bytes_per_s_to_gb_per_s, format_bytes

from . import _compiled, arenas, sizecheck
from .report import table
from .simulate import PhaseResult, SimResult
from .sizecheck import DENSE_MAX_ENDPOINTS, SERIES_CSV_MAX_POINTS, TRACE_MAX_EVENTS

DEFAULT_PREFIX = "sim_"  # of every file a run writes


def link_name(key: tuple) -> str:
    a, b = key
    return f"{a}->{b}"


SERIES_HEADER = ["phase", "link", "time_s", "rate_bytes_per_s", "utilisation"]


class _FloatText(dict):
    """``str`` of floats, each distinct value made once: a run's link series repeat a
    few times and rates (the links of a step change at one instant, to a few shares)
    millions of times, a matrix its few route bandwidths. Zeros are not kept unless
    given (``-0.0 == 0.0`` would share an entry): ``_FloatText({0.0: "0.0"})`` for
    values known to hold no -0.0. Only for floats (``1 == 1.0`` too)."""

    __slots__ = ()

    def __missing__(self, x: float) -> str:
        text = str(x)
        if x:
            self[x] = text
        return text


def write_series_csv(path: Path, res: SimResult) -> Path:
    """The links' rate series as CSV: ``phase, link, time_s, rate_bytes_per_s,
    utilisation`` per change point, links in name order (the rows ``write_csv`` would
    write of them, a link's at a time)."""
    text = _FloatText().__getitem__

    def w(f: Any) -> None:
        f.write(",".join(SERIES_HEADER) + "\n")
        for p in res.phases:
            for k in sorted(p.link_series, key=link_name):
                points = p.link_series[k]
                if not len(points):
                    continue
                head, cap = f"{p.name},{link_name(k)}", p.link_capacity_bytes_per_s[k]
                times, rates = points[:, 0].tolist(), points[:, 1].tolist()
                shares = [r / cap for r in rates]
                cells = zip(repeat(head), map(text, times), map(text, rates), map(text, shares))
                f.write("\n".join(map(",".join, cells)) + "\n")

    return atomic_write(path, w)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def matrix_rows(m: np.ndarray) -> list[list[object]]:
    """The rows of ``write_matrix_csv``: the row's number, then its values (Python ints
    of an integer matrix; of a float one Python floats, None where not finite)."""
    if m.dtype.kind in "iu":
        return [[i, *row] for i, row in enumerate(m.tolist())]
    if m.dtype.kind != "f":
        return [[i, *(int(v) for v in row)] for i, row in enumerate(m)]
    finite = np.isfinite(m).all(axis=1).tolist() if m.size else [True] * len(m)
    return [
        [i, *row] if ok else [i, *(v if math.isfinite(v) else None for v in row)]
        for i, (row, ok) in enumerate(zip(m.tolist(), finite, strict=True))
    ]


def routed_only(bw: np.ndarray) -> np.ndarray:
    """A copy of a route bandwidth matrix (bytes/s) with NaN where there is no route, a
    pair to or from an endpoint failed links cut off (bandwidth 0 in the result): an
    empty cell or null, as an endpoint to itself, not a figure."""
    bw = bw.astype(float)
    bw[bw == 0.0] = np.nan
    return bw


def write_matrix_csv(path: Path, m: np.ndarray, corner: str) -> Path:
    """An n x n matrix as CSV: a header of ``corner`` and the column numbers, then per
    row its number and values (``matrix_rows``; a non-finite value, such as the route
    bandwidth from an endpoint to itself, as an empty cell: a missing value to CSV
    readers)."""
    n = m.shape[0]
    header = [corner, *map(str, range(n))]
    if m.dtype.kind != "f":
        return write_csv(path, header, matrix_rows(m))
    # Each distinct value's text made once (zeros too when the matrix holds no -0.0).
    known: dict[float | None, str] = {None: ""}
    if not np.signbit(m[m == 0]).any():
        known[0.0] = "0.0"
    text = _FloatText(known).__getitem__

    def w(f: Any) -> None:
        f.write(",".join(header) + "\n")
        f.writelines([f"{row[0]}," + ",".join(map(text, row[1:])) + "\n" for row in matrix_rows(m)])

    return atomic_write(path, w)


HEATMAP_MAX_SIDE = 512
"""Cells per side of a heatmap drawn from the sparse pairs: larger runs are drawn in
blocks of consecutive endpoints."""

PAIR_HEADER = [
    "phase",
    "src",
    "dst",
    "bytes",
    "busy_s",
    "achieved_bytes_per_s",
    "route_bandwidth_bytes_per_s",
    "route_latency_s",
]


def dense_outputs(res: SimResult, matrices: str = "auto") -> bool:
    """Whether ``write_all`` writes the n x n matrices (:func:`sizecheck.dense_matrices`
    for the result's endpoints)."""
    return sizecheck.dense_matrices(res.graph.graph["num_endpoints"], matrices)


def pair_header(res: SimResult) -> list[str]:
    """The pairs file's columns: ``PAIR_HEADER``, and ``job`` when jobs shared the run."""
    return PAIR_HEADER + (["job"] if res.jobs is not None else [])


def pair_rows(res: SimResult) -> list[list[object]]:
    """Rows of :func:`pair_header`: every (src, dst) endpoint pair that sent messages in a
    phase, in (phase, src, dst) order; bytes over all simulated iterations, busy seconds
    with a message of the pair in flight, their ratio (None when never busy: a rank's
    copy to itself, which crosses no link, has no rate), the pair's
    route (bottleneck bandwidth, latency) and, with jobs, the job whose ranks they are."""
    pairs = sorted({k for p in res.phases for k in p.pair_bytes})
    if not pairs:
        return []
    bw, lat = res.pair_routes(pairs)
    route = {
        k: (_finite(b), x)
        for k, b, x in zip(
            pairs, bw.astype(float).tolist(), lat.astype(float).tolist(), strict=True
        )
    }
    owner = (
        {e: j.name for j in res.jobs.jobs for e in j.endpoints} if res.jobs is not None else None
    )
    rows: list[list[object]] = []
    for p in res.phases:
        for k in sorted(p.pair_bytes):
            b = p.pair_bytes[k]
            busy = p.pair_busy.get(k, 0.0)
            row = [p.name, k[0], k[1], b, busy, b / busy if busy > 0 else None, *route[k]]
            if owner is not None:  # jobs' endpoints are disjoint: a pair is one job's
                row.append(owner[k[0]])
            rows.append(row)
    return rows


def block_size(n: int, max_side: int = HEATMAP_MAX_SIDE) -> int:
    """Endpoints per heatmap block so that n endpoints fit in ``max_side`` cells."""
    return max(1, -(-n // max_side))


def _block_sums(pairs: dict[tuple[int, int], float], n: int, b: int) -> np.ndarray:
    """An m x m matrix (m = ceil(n / b)): the sum of ``pairs``' values per block pair."""
    m = -(-n // b)
    out = np.zeros((m, m))
    if pairs:
        idx = np.fromiter((i for k in pairs for i in k), dtype=np.int64, count=2 * len(pairs))
        vals = np.fromiter(pairs.values(), dtype=np.float64, count=len(pairs))
        np.add.at(out, (idx[0::2] // b, idx[1::2] // b), vals)
    return out


def block_matrices(res: SimResult, b: int) -> dict[str, np.ndarray]:
    """The traffic heatmaps' matrices in blocks of ``b`` endpoints, from the sparse
    pairs: ``traffic_bytes`` (bytes per block pair, all phases) and
    ``achieved_bytes_per_s`` (their bytes over their pairs' summed busy seconds)."""
    n = res.graph.graph["num_endpoints"]
    traffic: dict[tuple[int, int], float] = {}
    busy: dict[tuple[int, int], float] = {}
    for p in res.phases:
        for k, v in p.pair_bytes.items():
            traffic[k] = traffic.get(k, 0) + v
        for k, v in p.pair_busy.items():
            busy[k] = busy.get(k, 0.0) + v
    t = _block_sums(traffic, n, b)
    busy_blocks = _block_sums(busy, n, b)
    ach = np.zeros_like(t)
    np.divide(t, busy_blocks, out=ach, where=busy_blocks > 0)
    return {"traffic_bytes": t, "achieved_bytes_per_s": ach}


BANDWIDTH_SAMPLE_SIDE = 128
"""Cells per side of the route-bandwidth heatmap of a large run: each the smallest route
bandwidth of its block of endpoint pairs where the network has a closed form, else one
pair sampled (a route per cell, about 50 us each on a fat-tree with ECMP)."""


def block_bandwidth(res: SimResult, b: int) -> tuple[np.ndarray, bool]:
    """The route-bandwidth heatmap's matrix (bytes/s) in blocks of ``b`` endpoints, and
    whether it is exact: each cell the smallest route bandwidth of its block's pairs
    (``SimResult.bandwidth_blocks``), or, for a network without a closed form, one pair's
    (:func:`sampled_bandwidth`)."""
    exact = res.bandwidth_blocks(b) if res.bandwidth_blocks is not None else None
    if exact is not None:
        return exact, True
    return sampled_bandwidth(res, b), False


def node_bandwidth(res: SimResult, size: int) -> tuple[np.ndarray, bool]:
    """The smallest route bandwidth (bytes/s) inside each node of ``size`` consecutive
    endpoints (inf for a node of one), and whether it is exact: from the network's closed
    form (``SimResult.node_bandwidth``) or, without one, the smallest of each endpoint's
    route to the next endpoint of its node (round the node: a degraded link into or out
    of one endpoint is on one of them)."""
    exact = res.node_bandwidth(size) if res.node_bandwidth is not None else None
    if exact is not None:
        return exact, True
    n = res.graph.graph["num_endpoints"]
    pairs = [
        (a, first + (a - first + 1) % (min(n, first + size) - first))
        for first in range(0, n, size)
        for a in range(first, min(n, first + size))
    ]
    bw, _ = res.pair_routes(pairs)
    bw = np.where(np.array([s == d for s, d in pairs]), np.inf, bw)
    out = np.minimum.reduceat(bw, np.arange(0, n, size)) if n else bw
    return out, False


def _gb_per_s(bytes_per_s: float) -> str:
    return f"{bytes_per_s_to_gb_per_s(bytes_per_s):.4g} GB/s"


NODE_OUTLIERS_SHOWN = 5
"""Nodes named in the summary whose slowest inside route is below the most common one."""


def node_bandwidth_lines(
    slowest: np.ndarray, size: int, n: int, exact: bool, file: str
) -> tuple[list[str], dict[str, Any]]:
    """The summary's lines on the routes inside nodes (``slowest``: bytes/s per node of
    ``size`` of the ``n`` endpoints) and their entry in the results JSON: the most common slowest
    route and the nodes below it, slowest first."""
    finite = slowest[np.isfinite(slowest)]
    if not finite.size:
        return [], {}
    values, counts = np.unique(finite, return_counts=True)
    typical = float(values[np.argmax(counts)])
    below = sorted(np.flatnonzero(slowest < typical).tolist(), key=lambda k: (slowest[k], k))
    n_nodes = len(slowest)
    how = (
        ""
        if exact
        else " (sampled: each endpoint's route to the next of its node; this network's "
        "routes have no closed form)"
    )
    text = (
        f"  routes inside nodes ({size} endpoints each; {file}){how}: the slowest "
        f"{_gb_per_s(typical)} in "
        + (
            f"every one of its {n_nodes:,} nodes"
            if not below
            else f"{n_nodes - len(below):,} of its {n_nodes:,} nodes"
        )
    )
    if below:
        # (no route at all: failed links cut one of its endpoints off, or split the network
        # through it)
        shown = [
            f"node {k} (endpoints {k * size}-{min(k * size + size, n) - 1}) "
            + (_gb_per_s(slowest[k]) if slowest[k] > 0 else "no route between some of them")
            for k in below[:NODE_OUTLIERS_SHOWN]
        ]
        more = len(below) - NODE_OUTLIERS_SHOWN
        text += "; slower: " + ", ".join(shown) + (f" and {more:,} more" if more > 0 else "")
    entry = {
        "file": file,
        "endpoints_per_node": size,
        "exact": exact,
        "typical_bytes_per_s": typical,
        "slower_nodes": [{"node": k, "bytes_per_s": float(slowest[k])} for k in below],
    }
    return [text], entry


def sampled_pairs(n: int, b: int) -> list[tuple[int, int]]:
    """One endpoint pair per block pair of ``b`` x ``b`` endpoints, row by row: block
    ``(i, j)`` samples endpoint ``j mod b`` of block i to endpoint ``i mod b`` of block
    j (the last of a short block), and a block to itself its endpoint ``i mod b`` to the
    next one (its pair inside a node where blocks are nodes), so that the cells do not
    all show the first endpoint of each block (on a cluster of nodes of b GPUs, GPU 0
    of every node: one rail, no pair inside a node)."""
    m = -(-n // b)
    out = []
    for i in range(m):
        size = min(b, n - i * b)  # (the last block may be short)
        for j in range(m):
            if i == j:
                a = i * b + i % b % size
                out.append((a, i * b + (a - i * b + 1) % size))
            else:
                out.append((min(i * b + j % b, n - 1), min(j * b + i % b, n - 1)))
    return out


def sampled_bandwidth(res: SimResult, b: int) -> np.ndarray:
    """Route bandwidth (bytes/s) of one pair of each block of ``b`` x ``b`` endpoints
    (:func:`sampled_pairs`; inf from an endpoint to itself): a sample of
    ``bandwidth_bytes_per_s``."""
    n = res.graph.graph["num_endpoints"]
    m = -(-n // b)
    bw, _ = res.pair_routes(sampled_pairs(n, b))
    return bw.reshape(m, m)


def phase_summary(p: PhaseResult, dense: bool = True) -> dict[str, Any]:
    horizon = p.makespan_s or 1.0
    links = sorted(p.link_bytes, key=lambda k: (-p.link_busy_s.get(k, 0.0), link_name(k)))
    return {
        "phase": p.name,
        "iterations": p.iterations,
        "iteration_time_s": p.iteration_time_s,
        "makespan_s": p.makespan_s,
        "messages": p.messages,
        "sim_wall_s": p.sim_wall_s,
        "messages_per_wall_s": p.messages / p.sim_wall_s if p.sim_wall_s > 0 else None,
        "algorithms": p.algorithms,
        "library": p.library,
        "nccl_algorithms": p.nccl_algorithms,
        "wire_bytes_by_group": p.wire_bytes_by_group,
        "self_bytes": p.self_bytes,  # a rank's messages to itself: copies, in no wire count
        "per_rank": p.per_rank,
        "compute_s": _stat(p, "compute_s"),
        "comm_s": _stat(p, "comm_s"),
        "exposed_comm_s": _stat(p, "exposed_comm_s"),
        "max_link_load_over_capacity": p.max_link_overload,
        "links": [
            {
                "link": link_name(k),
                "bytes": p.link_bytes[k],
                "busy_s": p.link_busy_s.get(k, 0.0),
                "busy_fraction": p.link_busy_s.get(k, 0.0) / horizon,
                "capacity_bytes_per_s": p.link_capacity_bytes_per_s[k],
            }
            for k in links
        ],
        **({"traffic_bytes": p.traffic_bytes} if dense else {}),
    }


def _stat(p: PhaseResult, key: str) -> dict[str, float]:
    vals = [r[key] for r in p.per_rank]
    return {"mean": statistics.fmean(vals), "max": max(vals)}


def document(res: SimResult, dense: bool = True, prefix: str = "sim_") -> dict[str, Any]:
    """The results document; without ``dense`` its n x n matrices are left out and
    ``matrices`` names the pair file that holds the pairs that communicated; with it
    above :data:`DENSE_MAX_ENDPOINTS` endpoints (asked for) ``matrices`` names their
    CSVs instead of holding them."""
    cfg = res.config
    n = res.graph.graph["num_endpoints"]
    matrices: dict[str, Any]
    if dense and n > DENSE_MAX_ENDPOINTS:
        # (the n x n matrices are in their CSVs: as JSON 350 MB more at 4,394 endpoints)
        matrices = {
            "matrices": {
                "written": "dense",
                "traffic_bytes_csv": f"{prefix}traffic_bytes.csv",
                **(
                    {
                        "phase_traffic_bytes_csv": {
                            p.name: f"{prefix}traffic_bytes_{p.name}.csv" for p in res.phases
                        }
                    }
                    if len(res.phases) > 1
                    else {}
                ),
                "bandwidth_bytes_per_s_csv": f"{prefix}bandwidth_bytes_per_s.csv",
                "achieved_bytes_per_s_csv": f"{prefix}achieved_bytes_per_s.csv",
                "pairs_csv": f"{prefix}pairs.csv",
                "columns": pair_header(res),
                "why": f"more than {DENSE_MAX_ENDPOINTS} endpoints: the n x n matrices are in "
                "their CSVs only",
            }
        }
    elif dense:
        # Two n x n matrices (as nested lists a 4,096-endpoint one takes over 500 MB while
        # written): the others are in their CSVs, named here.
        matrices = {
            "traffic_bytes": res.traffic_bytes,
            "bandwidth_bytes_per_s": [
                [v if math.isfinite(v) and v > 0.0 else None for v in row]
                for row in res.bandwidth_bytes_per_s.astype(float).tolist()
            ],
            "matrices": {
                "written": "dense",
                "achieved_bytes_per_s_csv": f"{prefix}achieved_bytes_per_s.csv",
                "pairs_csv": f"{prefix}pairs.csv",
                "columns": pair_header(res),
                "phases": "a phase's traffic_bytes is in phases[i] when there are several",
            },
        }
    else:
        matrices = {
            "matrices": {
                "written": "sparse",
                "pairs_csv": f"{prefix}pairs.csv",
                "columns": pair_header(res),
                "why": f"more than {DENSE_MAX_ENDPOINTS} endpoints, or asked for "
                "(python -m simnet --matrices dense writes the n x n matrices)",
            }
        }
    return {
        "kind": "simnet-prediction",
        "config": cfg.as_run(),
        "versions": {
            **versions(),
            "simnet_core": _compiled.summary(),
            "simnet_huge_pages": arenas.status(),
        },
        "assumed": res.assumed,
        "whatif": res.scenario,
        "config_notes": res.config.deprecation_notes,
        "workload": {
            "model": res.workload.model,
            "world_size": res.workload.world_size,
            "params": res.workload.params,
            "info": res.workload.info,
        },
        # tokens/s and MFU where the workload states its tokens and FLOPs (as the summary)
        "throughput": throughput(
            res.workload.info, res.workload.world_size, res.iteration_time_s, _scales(res)
        ),
        "topology": {
            "name": res.graph.graph.get("name"),
            "params": res.graph.graph.get("params"),
            "num_endpoints": res.graph.graph["num_endpoints"],
        },
        "placement": res.placement,
        "units": {"time": "seconds", "traffic": "bytes", "bandwidth": "bytes/s"},
        "iteration_time_s": res.iteration_time_s,
        **matrices,
        # One phase's traffic is the run's (top-level traffic_bytes): not written twice.
        "phases": [
            phase_summary(p, dense and n <= DENSE_MAX_ENDPOINTS and len(res.phases) > 1)
            for p in res.phases
        ],
        **({"jobs": jobs_document(res.jobs)} if res.jobs is not None else {}),
    }


def jobs_document(report: Any) -> dict[str, Any]:
    """A shared-network run's jobs: each alone and shared, and the links they share."""
    return {
        "jobs": [
            {
                "name": j.name,
                "model": j.model,
                "first_rank": j.ranks[0],  # of the combined ranks, as in jobs.csv
                "num_ranks": j.ranks[1] - j.ranks[0],
                "endpoints": j.endpoints,
                "start_s": j.start_s,
                "scale": j.scale,
                "alone_s": j.alone_s,
                "shared_s": j.shared_s,
                "slowdown": j.slowdown,
                "traffic_bytes": j.total_bytes,
            }
            for j in report.jobs
        ],
        "contended_links": [_met_link(c) for c in report.contended],
        "links_met_not_full": [_met_link(c) for c in report.met_not_full],
        "links_shared_at_other_times": [link_name(k) for k in report.shared_apart],
    }


def _met_link(c: Any) -> dict:
    """A link where two or more jobs' bytes met (a ``jobs.ContendedLink``), for the JSON."""
    return {
        "link": link_name(c.link),
        "bytes_by_job": c.bytes_by_job,
        "jobs_meeting": c.meeting,
        "together_s": c.together_s,
        "full_together_s": c.full_s,
        "capacity_bytes_per_s": c.capacity_bytes_per_s,
        "peak_load_bytes_per_s": c.peak_load_bytes_per_s,
        "peak_together_bytes_per_s": c.peak_together_bytes_per_s,
        "busy_s": c.busy_s,
    }


def jobs_lines(report: Any, top: int = 5) -> list[str]:
    """The summary's lines on jobs sharing the network."""
    lines = [f"jobs sharing the network: {len(report.jobs)}"]
    for j in report.jobs:
        lines.append(
            f"  {j.name} ({j.model}, {j.ranks[1] - j.ranks[0]} ranks, start "
            f"{j.start_s * 1e3:.3f} ms): alone {j.alone_s * 1e3:.3f} ms, shared "
            f"{j.shared_s * 1e3:.3f} ms, slowdown x{j.slowdown:.3f}, "
            f"{format_bytes(sum(b for k, b in j.pair_bytes.items() if k[0] != k[1]))} sent "
            "between its ranks" + _own_copies(j.pair_bytes)
        )
    if report.contended:
        lines.append(
            "  contended links (two or more jobs' bytes on them at once while full): "
            f"{len(report.contended)}; the longest full first: "
            + "; ".join(
                f"{link_name(c.link)} (full together {c.full_s * 1e3:.4g} ms, together "
                f"{c.together_s * 1e3:.4g} ms of {c.busy_s * 1e3:.4g} ms busy; "
                + ", ".join(
                    f"{k} {format_bytes(b)}" + ("" if k in c.meeting else " at another time")
                    for k, b in c.bytes_by_job.items()
                )
                + ")"
                for c in report.contended[:top]
            )
        )
    elif report.met_not_full:
        lines.append(
            "  contended links: none (the jobs' bytes meet only on links they do not fill)"
        )
    elif report.shared_apart:
        lines.append(
            "  contended links: none (the jobs that share links send over them at other times)"
        )
    else:
        lines.append("  contended links: none (the jobs share no link)")
    if report.met_not_full:
        c = report.met_not_full[0]
        lines.append(
            "  links the jobs' bytes are on at once without filling them (no contention): "
            f"{len(report.met_not_full)}; the fullest: {link_name(c.link)} (at most "
            f"{_percent(c.together_fraction)} full while they were, together "
            f"{c.together_s * 1e3:.4g} ms of "
            f"{c.busy_s * 1e3:.4g} ms busy)"
        )
    if report.shared_apart:
        lines.append(f"  links shared at other times (no contention): {len(report.shared_apart)}")
    return lines


def _own_copies(pair_bytes: dict[tuple[int, int], int]) -> str:
    """The bytes of a job's ranks' messages to themselves (copies, no wire), said apart
    from those between its ranks; "" when none."""
    own = sum(b for k, b in pair_bytes.items() if k[0] == k[1])
    return f" (and {format_bytes(own)} from a rank to itself: copies, no wire)" if own else ""


def trace_events_per_rank(res: SimResult) -> list[int]:
    """Per rank, the timeline trace's events: its operations times its iterations,
    over the phases."""
    counts = [0] * res.workload.world_size
    for p in res.phases:
        sim = p.timeline
        if sim is None:
            continue
        for rank, ops in enumerate(sim.programs):
            counts[rank] += len(ops) * len(sim.timelines[rank].starts)
    return counts


def last_rank_to_finish(res: SimResult) -> int:
    """The rank whose last operation ends latest in the last phase with a timeline (the
    lowest such rank on a tie)."""
    for p in reversed(res.phases):
        sim = p.timeline
        if sim is None:
            continue
        ends = {
            r: max((max(e) for e in tl.ends if len(e)), default=0.0)
            for r, tl in sim.timelines.items()
        }
        return max(sorted(ends), key=lambda r: (ends[r], -r))
    return 0


def rank_spans(text: str) -> list[tuple[int, int]] | str:
    """``"0-63,517"`` as ranges ``[(0, 63), (517, 517)]``, or ``"all"`` / ``"none"``
    (any case); checked for form only (numbers, ranges that run forwards). Raises
    ValueError naming what is wrong."""
    word = text.strip().lower()
    if word in ("all", "none"):
        return word
    spans_: list[tuple[int, int]] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            a = int(lo)
            b = int(hi) if dash else a
        except ValueError:
            raise ValueError(
                f"{part.strip()!r} is not a rank or a range of ranks (e.g. 0-63,517, all, none)"
            ) from None
        if a > b:
            raise ValueError(f"{part.strip()!r}: the range runs backwards")
        spans_.append((a, b))
    return spans_


def parse_ranks(text: str, world_size: int) -> list[int]:
    """``"0-63,517"`` -> the ranks it names, sorted, each once; ``"all"`` every rank,
    ``"none"`` none. Raises ValueError naming what is wrong (a rank out of 0 ..
    world_size - 1 too)."""
    got = rank_spans(text)
    if got == "all":
        return list(range(world_size))
    if got == "none":
        return []
    ranks: set[int] = set()
    for a, b in got:
        if a < 0 or b >= world_size:
            given = f"{a}-{b}" if a != b else str(a)
            raise ValueError(f"{given!r}: ranks are 0 to {world_size - 1} ({world_size} ranks)")
        ranks.update(range(a, b + 1))
    return sorted(ranks)


def spans(ranks: Sequence[int]) -> str:
    """Sorted ranks as ``0-171, 1040``."""
    out: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(f"{ranks[i]}-{ranks[j]}" if j > i else f"{ranks[i]}")
        i = j + 1
    return ", ".join(out)


def choose_trace_ranks(
    res: SimResult, wanted: str | Sequence[int] = "auto", max_events: int = TRACE_MAX_EVENTS
) -> tuple[list[int], str | None]:
    """The ranks the timeline trace holds, and a note when they are not all of them.
    ``wanted``: ``"auto"`` (every rank when their events are at most ``max_events``,
    else the ranks from 0 up that fit with the last rank to finish), ``"all"``,
    ``"none"``, a rank list text (:func:`parse_ranks`) or the ranks themselves."""
    n = res.workload.world_size
    counts = trace_events_per_rank(res)
    total = sum(counts)
    if wanted != "auto":
        if isinstance(wanted, str):
            ranks = parse_ranks(wanted, n)
        else:
            ranks = sorted(set(wanted))
            wrong = [r for r in ranks if not 0 <= r < n]
            if wrong:
                raise ValueError(f"rank {wrong[0]} is none of the {n} ranks (0 to {n - 1})")
        if len(ranks) == n:
            return ranks, None
        held = sum(counts[r] for r in ranks)
        return ranks, (
            f"  timeline trace: ranks {spans(ranks)} of {n:,} ({held:,} of {total:,} events)"
            if ranks
            else "  timeline trace not written (asked for no rank)"
        )
    if total <= max_events:
        return list(range(n)), None
    last = last_rank_to_finish(res)
    room = max_events - counts[last]
    chosen = {last}
    for r in range(n):
        if r == last:
            continue
        if counts[r] > room:
            break
        room -= counts[r]
        chosen.add(r)
    ranks = sorted(chosen)
    held = sum(counts[r] for r in ranks)
    return ranks, (
        f"  timeline trace: ranks {spans(ranks)} of {n:,} ({held:,} of {total:,} events; "
        f"rank {last} finishes last; at most {max_events:,} by default, --trace-ranks all "
        "writes every rank's)"
    )


def write_trace(path: Path, res: SimResult, ranks: Sequence[int] | None = None) -> Path:
    """The simulated operations of ``ranks`` (default: every rank) as a Chrome/Perfetto
    trace (see :func:`trace`), written a rank at a time: its memory is one rank's
    events, not the run's."""
    chosen = range(res.workload.world_size) if ranks is None else sorted(set(ranks))
    compact = {"separators": (",", ":"), "default": _jsonable}

    def w(f: Any) -> None:
        f.write('{"traceEvents":[')
        head = chrome_trace([], _trace_names(res, chosen))["traceEvents"]
        first = not head
        if head:
            f.write(json.dumps(head, **compact)[1:-1])
        for events in _rank_events(res, chosen, as_json=True):
            if events:
                f.write(("" if first else ",") + events)
                first = False
        f.write('],"displayTimeUnit":"ms"}')

    return atomic_write(path, w)


def _rank_events(
    res: SimResult, ranks: Iterable[int], as_json: bool = False
) -> Iterator[list[dict] | str]:
    """The trace events of each of ``ranks`` in each phase, a rank's list at a time
    (phases one after another: each phase's times from the end of the one before); with
    ``as_json``, as their JSON text (``op_events``)."""
    chosen = list(ranks)
    offset = 0.0
    for p in res.phases:
        sim = p.timeline
        if sim is None:
            continue
        described: dict = {}  # the ranks' programs share operation objects
        for rank in chosen:
            tl = sim.timelines[rank]
            yield op_events(
                rank, p.name, sim.programs[rank], tl.starts, tl.ends, offset, described, as_json
            )
        offset += p.makespan_s


def trace(res: SimResult) -> dict[str, Any]:
    """Every simulated operation of every rank, Chrome/Perfetto format."""
    n = res.workload.world_size
    events = [e for rank in _rank_events(res, range(n)) for e in rank]
    return chrome_trace(events, _trace_names(res, range(n)))


def _trace_names(res: SimResult, ranks: Iterable[int]) -> dict[int, str]:
    """Each rank's name in the timeline trace: ``rank 5``, and with several jobs its job
    and rank in the job too (``rank 5 (b:1)``), as the per-rank chart labels it."""
    in_job = _job_ranks(res)
    return {r: f"rank {r} ({in_job[r]})" if r in in_job else f"rank {r}" for r in ranks}


def throughput(
    info: dict, world_size: int, iteration_s: float, scales: tuple[float, float] = (1.0, 1.0)
) -> dict[str, Any] | None:
    """Tokens per second and model FLOPs utilisation (a fraction) of a workload whose
    ``info`` gives ``tokens_per_iteration``, ``model_flops_per_iteration`` and
    ``peak_flops_per_device`` (FLOP/s); None otherwise. ``scales``: the workload's message
    and compute scales; away from 1 the figures would not be the full-size job's, and
    the result says so instead of giving them."""
    keys = ("tokens_per_iteration", "model_flops_per_iteration", "peak_flops_per_device")
    if iteration_s <= 0 or not all(k in info for k in keys):
        return None
    if scales != (1.0, 1.0):
        return {
            "not_given": f"messages at {scales[0]:g}x and compute at {scales[1]:g}x their full "
            "size (workload.scale, workload.compute_scale): not the full-size job's"
        }
    tokens, flops, peak = (float(info[k]) for k in keys)
    return {
        "tokens_per_s": tokens / iteration_s,
        "model_flops_utilisation": flops / iteration_s / (world_size * peak),
        "peak_flops_per_device": peak,
    }


def throughput_line(
    info: dict, world_size: int, iteration_s: float, scales: tuple[float, float] = (1.0, 1.0)
) -> str | None:
    """The summary's line of :func:`throughput`, or None."""
    t = throughput(info, world_size, iteration_s, scales)
    if t is None:
        return None
    if "not_given" in t:
        return f"  throughput: not given: {t['not_given']}"
    return (
        f"  throughput: {t['tokens_per_s']:,.0f} tokens/s; model FLOPs utilisation "
        f"{100 * t['model_flops_utilisation']:.1f}% of {world_size} x "
        f"{t['peak_flops_per_device'] / 1e12:g} TFLOP/s"
    )


def _library_note(p: PhaseResult, library: str | None) -> str:
    """What ran the phase's collectives, when NCCL could have: the library said
    (``collectives.library``) or NCCL's way taken for its algorithms."""
    said = f"collectives.library = {library}" if library else "the default"
    if p.library == "nccl":
        return f" (run as NCCL runs them: {said})"
    if p.library == "nccl+mpi":
        # (an alltoall under the default library: MPI's pairwise, with MPI's host costs)
        as_nccl = ", ".join(f"{k}={'/'.join(v)}" for k, v in sorted(p.nccl_algorithms.items()))
        return f" ({as_nccl} run as NCCL runs them, the others as MPI runs them: {said})"
    if library == "nccl":  # every one was named by the program
        return " (run as MPI runs them: the program names their algorithms, sent as MPI messages)"
    if library or any(a in NCCL_ALGORITHMS for v in p.algorithms.values() for a in v):
        return f" (run as MPI runs them: {said})"
    return ""


def _scales(res: SimResult) -> tuple[float, float]:
    """The workload's message and compute scales (several jobs: not one workload)."""
    w = res.config.workload
    return (w.scale, w.compute_scale) if res.jobs is None else (1.0, 1.0)


def _endpoints_said(res: SimResult) -> str:
    """The network's size as the headline says it: with hosts, its hosts and the rank
    endpoints they hold (what the matrices count)."""
    n = res.graph.graph["num_endpoints"]
    per = res.config.hosts.ranks_per_host
    if per:
        return f"{counted(n // per, 'host', 'hosts')} of {per} ranks: {n} rank endpoints"
    return f"{n} endpoints"


def summary_text(res: SimResult, files: list[Path] | None = None, notes: Sequence[str] = ()) -> str:
    w = res.workload
    lines = [
        f"simnet: {w.model} on {w.world_size} ranks, topology "
        f"{res.graph.graph.get('name')} ({_endpoints_said(res)})",
        f"predicted time of all jobs together (from 0 to the last job's end): "
        f"{res.iteration_time_s:.6f} s"
        if res.jobs is not None
        else f"predicted iteration time: {res.iteration_time_s:.6f} s",
    ]
    line = throughput_line(w.info, w.world_size, res.iteration_time_s, _scales(res))
    if line:
        lines.append(line)
    for a in res.assumed:
        lines.append(f"  assumed: {a}")
    for a in res.scenario:
        lines.append(f"  what-if: {a}")
    if res.jobs is not None:
        lines += jobs_lines(res.jobs)
    for p in res.phases:
        s = phase_summary(p, dense=False)
        # With jobs the phase is one run of them all, each its own iterations.
        per = "from 0 to the last job's end" if res.jobs is not None else "per iteration"
        lines.append(
            f"phase {p.name}: {p.iteration_time_s:.6f} s {per}, "
            f"{p.messages} messages simulated in {p.sim_wall_s:.2f} s wall "
            f"(simulator core: {_compiled.summary()}; huge pages: {arenas.status()})"
        )
        for key, label in (
            ("compute_s", "compute"),
            ("comm_s", "communication in flight"),
            ("exposed_comm_s", "exposed communication"),
        ):
            lines.append(f"  {label:28s} mean {s[key]['mean']:.6f} s  max {s[key]['max']:.6f} s")
        over = f" (over the {p.iterations} iterations)" if p.iterations > 1 else ""
        if res.jobs is not None:  # (the jobs' groups of a kind are one kind of the run)
            over = " kind, all jobs together (each job's total: in its line above)"
        lines.append(
            f"  wire bytes by group{over}: "
            + (
                ", ".join(
                    f"{k} {format_bytes(v)}" for k, v in sorted(p.wire_bytes_by_group.items())
                )
                or "none (no message)"
            )
            + (
                f"; a rank to itself (a copy, no wire): {format_bytes(p.self_bytes)}"
                if p.self_bytes
                else ""
            )
        )
        if p.algorithms:
            lines.append(
                "  algorithms: "
                + ", ".join(f"{k}={'/'.join(v)}" for k, v in sorted(p.algorithms.items()))
                + _library_note(p, res.config.collectives.library)
            )
        top = s["links"][:5]
        if top:
            lines.append(
                "  busiest links (share of the time busy): "
                + ", ".join(f"{t['link']} {_percent(t['busy_fraction'])}" for t in top)
            )
    lines += notes
    if files:
        lines.append("wrote: " + ", ".join(str(f) for f in files))
    return "\n".join(lines)


def _percent(fraction: float) -> str:
    """A share as a percentage, two significant digits below 10% (a link busy 0.4% of a
    compute-bound iteration is not "0%")."""
    pct = 100 * fraction
    return f"{pct:.0f}%" if pct >= 10 or pct == 0 else f"{pct:.2g}%"


def write_all(
    res: SimResult,
    out_dir: str | Path,
    prefix: str = DEFAULT_PREFIX,
    say: Callable[[str], None] | None = None,
    matrices: str = "auto",
    progress: Callable[[str], None] | None = None,
    trace_ranks: str | Sequence[int] = "auto",
    series_csv: bool | None = None,
) -> list[Path]:
    """Write every result file into ``out_dir``; returns the paths written. ``progress``
    is told each file as it is written (a big run's take minutes).

    ``trace_ranks``: the ranks of the timeline trace (see :func:`choose_trace_ranks`;
    by default all up to :data:`TRACE_MAX_EVENTS` events). ``series_csv``: write the link
    series CSV (True), not (False), or when it has at most
    :data:`SERIES_CSV_MAX_POINTS` points (None).

    ``matrices`` (see :func:`dense_outputs`): with the n x n matrices, the traffic,
    route-bandwidth and achieved-rate CSVs, full heatmaps and the matrices in the JSON;
    without them, the pairs that communicated (``pairs.csv``, written in both cases) and
    heatmaps in blocks of endpoints (:func:`block_matrices`)."""
    # Without the cyclic collector, as the simulation runs: a big run's result holds
    # millions of objects (2.4 million at 16,384 ranks), which each full collection
    # set off by the millions of rows and events made here would trace again (2 of
    # the 12 CPU seconds of writing that run's files); what is made here has no cycles.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _write_all(res, out_dir, prefix, say, matrices, progress, trace_ranks, series_csv)
    finally:
        if enabled:
            gc.enable()


def _write_all(
    res: SimResult,
    out_dir: str | Path,
    prefix: str,
    say: Callable[[str], None] | None,
    matrices: str,
    progress: Callable[[str], None] | None = None,
    trace_ranks: str | Sequence[int] = "auto",
    series_csv: bool | None = None,
) -> list[Path]:
    from . import plots

    dense = dense_outputs(res, matrices)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _remove_previous_run(out, prefix)
    files = _Written(progress)
    files.starting(f"{prefix}pairs.csv", f"{sum(len(p.pair_bytes) for p in res.phases):,} rows")
    rows = pair_rows(res)
    files.append(write_csv(out / f"{prefix}pairs.csv", pair_header(res), rows))
    n = res.graph.graph["num_endpoints"]
    notes: list[str] = []
    node_entry: dict[str, Any] = {}
    if dense:
        files.append(
            write_matrix_csv(out / f"{prefix}traffic_bytes.csv", res.traffic_bytes, "src\\dst")
        )
        if len(res.phases) > 1:
            for p in res.phases:
                files.append(
                    write_matrix_csv(
                        out / f"{prefix}traffic_bytes_{p.name}.csv", p.traffic_bytes, "src\\dst"
                    )
                )
        files.append(
            write_matrix_csv(
                out / f"{prefix}bandwidth_bytes_per_s.csv",
                routed_only(res.bandwidth_bytes_per_s),
                "src\\dst",
            )
        )
        # A pair that sent nothing, or only copies to itself (no link, never busy), has no
        # rate: an empty cell, as the route bandwidth of an endpoint to itself (0.0 would
        # read as a pair that got nowhere).
        achieved = res.achieved_bytes_per_s.astype(float)
        achieved[(res.traffic_bytes == 0) | (res.pair_busy_s == 0)] = np.nan
        files.append(
            write_matrix_csv(out / f"{prefix}achieved_bytes_per_s.csv", achieved, "src\\dst")
        )
    files.append(
        write_csv(
            out / f"{prefix}links.csv",
            ["phase", "link", "bytes", "busy_s", "busy_fraction", "capacity_bytes_per_s"],
            [
                [
                    p.name,
                    link_name(k),
                    p.link_bytes[k],
                    p.link_busy_s.get(k, 0.0),
                    p.link_busy_s.get(k, 0.0) / (p.makespan_s or 1.0),
                    p.link_capacity_bytes_per_s[k],
                ]
                for p in res.phases
                for k in sorted(p.link_bytes, key=link_name)
            ],
        )
    )
    points = sum(len(v) for p in res.phases for v in p.link_series.values())
    if points and (series_csv or (series_csv is None and points <= SERIES_CSV_MAX_POINTS)):
        # Piecewise constant: each rate holds from its time to the link's next point.
        files.starting(f"{prefix}link_series.csv", f"{points:,} rows")
        files.append(write_series_csv(out / f"{prefix}link_series.csv", res))
    elif points:
        notes.append(
            f"  link series CSV not written ({points:,} change points, about "
            f"{points * 50 / MB:,.0f} MB; "
            + (
                "not asked for"
                if series_csv is False
                else f"at most {SERIES_CSV_MAX_POINTS:,} by default, --series writes them"
            )
            + "): the utilisation plot draws the busiest links' series"
        )
    title = f"{res.workload.model}, {res.workload.world_size} ranks, {res.graph.graph['name']}"
    if dense:
        traffic = res.traffic_bytes
        bw = routed_only(res.bandwidth_bytes_per_s)
        np.fill_diagonal(bw, np.nan)  # an endpoint to itself
        ach = res.achieved_bytes_per_s.astype(float)
        labels = bw_labels = None
        axis = bw_axis = "endpoint"
        bw_what = f"achievable point-to-point bandwidth: {res.graph.graph['name']}"
    else:
        b = block_size(n)
        blocks = block_matrices(res, b)
        traffic, ach = blocks["traffic_bytes"], blocks["achieved_bytes_per_s"]
        labels = [str(i) for i in range(0, n, b)]
        axis = f"endpoint (blocks of {b})" if b > 1 else "endpoint"
        b_bw = block_size(n, BANDWIDTH_SAMPLE_SIDE)
        bw, exact = block_bandwidth(res, b_bw)
        bw = routed_only(bw)
        if b_bw == 1:
            np.fill_diagonal(bw, np.nan)
        bw_labels = [str(i) for i in range(0, n, b_bw)]
        bw_axis = f"endpoint (blocks of {b_bw})" if b_bw > 1 else "endpoint"
        bw_what = f"achievable point-to-point bandwidth: {res.graph.graph['name']}"
        if b_bw > 1:
            bw_what = (
                f"achievable bandwidth, smallest of each block: {res.graph.graph['name']}"
                if exact
                else f"achievable bandwidth, one pair a block: {res.graph.graph['name']}"
            )
        notes.append(
            f"  n x n matrices not written ({n:,} endpoints; --matrices dense writes them): "
            f"{prefix}pairs.csv holds the {len({(r[1], r[2]) for r in rows}):,} endpoint "
            f"pairs that communicated"
            + (f"; traffic heatmaps drawn in blocks of {b} endpoints" if b > 1 else "")
            + (
                (
                    f"; route bandwidth drawn as the smallest of each block of {b_bw}"
                    if exact
                    else f"; route bandwidth drawn from one pair of each block of {b_bw} "
                    "(this network's routes have no closed form: a route per cell)"
                )
                if b_bw > 1
                else ""
            )
        )
        size = topologies.endpoints_per_node(res.graph)
        if size is not None:
            slowest, exact_nodes = node_bandwidth(res, size)
            name = f"{prefix}node_bandwidth.csv"
            files.append(
                write_csv(
                    out / name,
                    ["node", "first_endpoint", "endpoints", "slowest_route_bytes_per_s"],
                    [
                        [k, k * size, min(size, n - k * size), "" if math.isinf(v) else v]
                        for k, v in enumerate(slowest.tolist())
                    ],
                )
            )
            lines, node_entry = node_bandwidth_lines(slowest, size, n, exact_nodes, name)
            notes += lines
    files.append(
        plots.traffic_heatmap(
            traffic,
            out / f"{prefix}traffic_heatmap.png",
            title=f"predicted traffic: {title}\n{_iterations_text(res)}",
            labels=labels,
            axis_name=axis,
            block=1 if dense else b,
        )
    )
    ach[ach == 0] = np.nan
    for matrix, name, what, names, axis_name in (
        (bw, "bandwidth", bw_what, bw_labels, bw_axis),
        (ach, "achieved_bandwidth", f"achieved rate under contention: {title}", labels, axis),
    ):
        files.append(
            plots.bandwidth_heatmap(
                matrix,
                out / f"{prefix}{name}_heatmap.png",
                title=what,
                labels=names,
                axis_name=axis_name,
            )
        )
    for p in res.phases:
        # One set of plots per phase (an epoch of the ring trainer, say), suffixed by its
        # name when there are several.
        suffix = f"_{p.name}" if len(res.phases) > 1 else ""
        busy = sorted(p.link_bytes, key=lambda k, p=p: (-p.link_busy_s.get(k, 0.0), link_name(k)))
        horizon = p.makespan_s or 1.0
        series = None
        if p.link_series:
            series = {link_name(k): p.link_series[k] for k in busy[:8] if k in p.link_series}
        files.append(
            plots.link_utilisation_plot(
                [link_name(k) for k in busy],
                [p.link_busy_s.get(k, 0.0) / horizon for k in busy],
                [p.link_bytes[k] for k in busy],
                out / f"{prefix}link_utilisation{suffix}.png",
                title=f"link utilisation ({p.name}): {title}",
                series=series,
                capacities_bytes_per_s={link_name(k): p.link_capacity_bytes_per_s[k] for k in busy},
            )
        )
        files.append(
            plots.timeline_bars(
                _rank_labels(res, [r["rank"] for r in p.per_rank]),
                [r["compute_s"] for r in p.per_rank],
                [r["exposed_comm_s"] for r in p.per_rank],
                [max(0.0, r["comm_s"] - r["exposed_comm_s"]) for r in p.per_rank],
                out / f"{prefix}rank_breakdown{suffix}.png",
                title=f"per-rank time ({p.name}): {title}",
                start_s=res.workload.rank_start_s,
            )
        )
    if res.jobs is not None:
        files += _write_jobs(res, out, prefix, title)
    ranks, note = choose_trace_ranks(res, trace_ranks)
    if note:
        notes.append(note)
    if ranks:
        files.starting(f"{prefix}timeline.trace.json")
        files.append(write_trace(out / f"{prefix}timeline.trace.json", res, ranks))
    from .report import write_report

    last = [out / f"{prefix}results.json", out / f"{prefix}summary.txt", out / report_name(prefix)]
    doc = document(res, dense, prefix)
    if node_entry:
        doc["node_bandwidth"] = node_entry
    # Every file of the run, so that the next run into this folder removes them first.
    doc[RUN_FILES_KEY] = [f.name for f in [*files, *last]]
    doc["output_notes"] = [n.strip() for n in notes]  # what was left out, and why
    files.append(write_json(last[0], doc))
    text = summary_text(res, [*files, *last[1:]], notes)
    files.append(write_text(last[1], text + "\n"))
    before, after = simulation_sections(res)
    files.append(
        write_report(
            out,
            f"simnet: {title}",
            text,
            files,
            config=res.config.as_run(),
            sections=before,
            details=after,
            name=last[2].name,
        )
    )
    if say:
        say(text)
    return files


class _Written(list):
    """The files written so far, each told to ``progress`` as it is added."""

    def __init__(self, progress: Callable[[str], None] | None) -> None:
        super().__init__()
        self._progress = progress

    def append(self, path: Path) -> None:
        super().append(path)
        if self._progress is not None:
            self._progress(f"writing: {len(self)} files, the last {Path(path).name}")

    def starting(self, name: str, what: str = "") -> None:
        """Say that a file that may take seconds to make is next (its line ends in
        " ...", which a progress printer shows at once)."""
        if self._progress is not None:
            more = f" ({what})" if what else ""
            self._progress(f"writing: {len(self)} files, now {name}{more} ...")

    def __iadd__(self, paths: Any) -> _Written:
        for p in paths:
            self.append(p)
        return self


def report_name(prefix: str) -> str:
    """The run's page: ``report.html`` with the default prefix, else prefixed like every
    other file (two runs into one folder under two prefixes keep their pages)."""
    from .report import REPORT_NAME

    return REPORT_NAME if prefix == DEFAULT_PREFIX else f"{prefix}{REPORT_NAME}"


RUN_FILES_KEY = "files"
"""The results JSON's list of every file its run wrote (names in its folder)."""


def _remove_previous_run(out: Path, prefix: str) -> None:
    """Remove the files an earlier run with ``prefix`` wrote into ``out``, as the last
    line of its summary lists them (a small file: its results JSON lists them too, but
    is megabytes to parse at 1,024 ranks), its summary, results and report first: a run
    into the same folder leaves none of another run's files beside its own, and an
    interrupted one leaves no summary of another run. Only files named with ``prefix``
    (or its report) are touched."""
    summary = out / f"{prefix}summary.txt"
    try:
        lines = summary.read_text().splitlines()
    except (OSError, ValueError):
        return
    if not lines or not lines[0].startswith("simnet: "):
        return  # not a summary this module wrote
    page = report_name(prefix)
    listed = [
        Path(f).name for line in lines if line.startswith("wrote: ") for f in line[7:].split(", ")
    ]
    for name in [summary.name, page, f"{prefix}results.json", *listed]:
        if name.startswith(prefix) or name == page:
            (out / name).unlink(missing_ok=True)


def _rank_labels(res: SimResult, ranks: list[int]) -> list[str]:
    """Each rank's label on the per-rank chart: its number, and with several jobs its
    job and rank in the job (``12 tune:4``)."""
    in_job = _job_ranks(res)
    return [f"{r} {in_job[r]}" if r in in_job else str(r) for r in ranks]


def _job_ranks(res: SimResult) -> dict[int, str]:
    """With several jobs, each combined rank's job and rank in it (``b:1``); else empty."""
    if res.jobs is None:
        return {}
    return {r: f"{j.name}:{r - j.ranks[0]}" for j in res.jobs.jobs for r in range(*j.ranks)}


def _write_jobs(res: SimResult, out: Path, prefix: str, title: str) -> list[Path]:
    """The jobs table, the contended links and one traffic heatmap per job over its own
    ranks (in blocks of ranks above ``HEATMAP_MAX_SIDE``)."""
    from . import plots

    report = res.jobs
    names = [j.name for j in report.jobs]
    files = [
        write_csv(
            out / f"{prefix}jobs.csv",
            ["job", "model", "ranks", "first_rank", "start_s", "alone_s", "shared_s", "slowdown"],
            [
                [
                    j.name,
                    j.model,
                    j.ranks[1] - j.ranks[0],
                    j.ranks[0],
                    j.start_s,
                    j.alone_s,
                    j.shared_s,
                    j.slowdown,
                ]
                for j in report.jobs
            ],
        ),
        write_csv(
            out / f"{prefix}contended_links.csv",
            [
                "link",
                "capacity_bytes_per_s",
                "busy_s",
                "together_s",
                "full_together_s",
                "peak_load_bytes_per_s",
                *(f"bytes_{n}" for n in names),
                "jobs_at_another_time",
            ],
            [
                [
                    link_name(c.link),
                    c.capacity_bytes_per_s,
                    c.busy_s,
                    c.together_s,
                    c.full_s,
                    c.peak_load_bytes_per_s,
                ]
                + [c.bytes_by_job.get(n, 0) for n in names]
                + [" ".join(c.apart())]
                for c in report.contended
            ],
        ),
    ]
    for j in report.jobs:
        # The job's own ranks only (the rest of the network is empty in its map).
        k = len(j.endpoints)
        rank_of = {e: i for i, e in enumerate(j.endpoints)}
        mine = {(rank_of[s], rank_of[d]): v for (s, d), v in j.pair_bytes.items()}
        b = block_size(k)
        files.append(
            plots.traffic_heatmap(
                _block_sums(mine, k, b),
                out / f"{prefix}traffic_heatmap_{j.name}.png",
                title=f"predicted traffic of job {j.name} ({j.model}) sharing: {title}",
                labels=[str(i) for i in range(0, k, b)],
                axis_name=f"rank of job {j.name}" + ("" if b == 1 else f" (blocks of {b})"),
                block=b,
            )
        )
    return files


MAX_RANK_ROWS = 256
"""Ranks listed per phase on the page (all of them are in ``sim_results.json``)."""


def simulation_sections(
    res: Any, top_links: int = 15
) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """The sections of a simulation's page (a ``SimResult``): those before the figures
    (the jobs, if several shared the network) and those after (per rank, links)."""
    out = []
    after = []
    if res.jobs is not None:
        doc = jobs_document(res.jobs)
        jobs = table(
            ["job", "model", "ranks", "start (ms)", "alone (ms)", "shared (ms)", "slowdown"],
            [
                (
                    j["name"],
                    j["model"],
                    j["num_ranks"],
                    f"{j['start_s'] * 1e3:.3f}",
                    f"{j['alone_s'] * 1e3:.3f}",
                    f"{j['shared_s'] * 1e3:.3f}",
                    f"x{j['slowdown']:.3f}",
                )
                for j in doc["jobs"]
            ],
        )
        names = [j["name"] for j in doc["jobs"]]
        links = table(
            [
                "link",
                "busy (ms)",
                "together (ms)",
                "full together (ms)",
                *(f"bytes of {n}" for n in names),
            ],
            [
                (
                    c["link"],
                    f"{c['busy_s'] * 1e3:.4g}",
                    f"{c['together_s'] * 1e3:.4g}",
                    f"{c['full_together_s'] * 1e3:.4g}",
                    *(c["bytes_by_job"].get(n, 0) for n in names),
                )
                for c in doc["contended_links"][:top_links]
            ],
        )
        if doc["links_met_not_full"]:
            links += "<h3>Links shared at once without filling them</h3>" + table(
                ["link", "busy (ms)", "together (ms)", "at most full together"],
                [
                    (
                        c["link"],
                        f"{c['busy_s'] * 1e3:.4g}",
                        f"{c['together_s'] * 1e3:.4g}",
                        _percent(c["peak_together_bytes_per_s"] / c["capacity_bytes_per_s"])
                        if c["capacity_bytes_per_s"] > 0
                        else "",
                    )
                    for c in doc["links_met_not_full"][:top_links]
                ],
            )
        out.append(("jobs", "Jobs sharing the network", jobs + "<h3>Contended links</h3>" + links))
    ranks = []
    link_parts = []
    for p in res.phases:
        shown = p.per_rank[:MAX_RANK_ROWS]
        note = (
            f"<p>ranks 0..{len(shown) - 1} of {len(p.per_rank)}; every rank is in "
            "sim_results.json</p>"
            if len(shown) < len(p.per_rank)
            else ""
        )
        ranks.append(
            f"<h3>phase {html.escape(p.name)}</h3>{note}"
            + table(
                ["rank", "compute (s)", "communication (s)", "exposed communication (s)"],
                [(r["rank"], r["compute_s"], r["comm_s"], r["exposed_comm_s"]) for r in shown],
            )
        )
        busy = sorted(p.link_bytes, key=lambda k, p=p: (-p.link_busy_s.get(k, 0.0), link_name(k)))
        horizon = p.makespan_s or 1.0
        link_parts.append(
            f"<h3>phase {html.escape(p.name)}</h3>"
            + table(
                ["link", "bytes", "busy (s)", "busy fraction", "capacity (GB/s)"],
                [
                    (
                        link_name(k),
                        p.link_bytes[k],
                        p.link_busy_s.get(k, 0.0),
                        f"{p.link_busy_s.get(k, 0.0) / horizon:.1%}",
                        p.link_capacity_bytes_per_s[k] / 1e9,
                    )
                    for k in busy[:top_links]
                ],
            )
        )
    per = "whole run: each job's iterations" if res.jobs is not None else "per iteration"
    after.append(("ranks", f"Per-rank breakdown ({per})", "".join(ranks)))
    after.append(("links", f"Busiest links (top {top_links})", "".join(link_parts)))
    return out, after


def _iterations_text(res: SimResult) -> str:
    """What a whole-run figure sums: e.g. "over 1 simulated iteration of each phase";
    with jobs, each job's iterations (its programs repeat them in one run)."""
    if res.jobs is not None:
        each = ", ".join(f"{j.name} {j.workload.iterations}" for j in res.config.jobs)
        return f"over the whole run (iterations: {each})"
    its = sorted({p.iterations for p in res.phases})
    n = "/".join(map(str, its))
    return f"over {n} simulated iteration{'s' if its != [1] else ''} of each phase"
