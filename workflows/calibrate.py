"""``python -m simnet calibrate MICROBENCH.json``: fit the network model to micro-benchmarks.

Input: the JSON document of ``mpirun -n P python -m proxies.microbench --json PATH``
(``"kind": "microbench"``; one row per op, algorithm and message size).

Point-to-point rows (``pingpong``: one-way time; ``stream``: time per message)
give the model's two link parameters by least squares of the Hockney model

    time = alpha + size / bandwidth

where alpha is the per-message overhead *with the route's latency folded in*:
the written file therefore sets ``link_latency_us`` to 0, so that a
configuration using it does not count the latency twice. The fit minimises
the squared *relative* residuals (sizes span many decades: an absolute fit
would ignore the small messages that determine alpha); alpha is kept >= 0.

Collective rows get an *effective* alpha and bandwidth per (op, algorithm),
fitted the same way against the closed-form cost of the algorithm (for
``"algorithm": "mpi"``: the one MPICH would choose at each size, after
Thakur, Rabenseifner & Gropp 2005; see :func:`mpich_algorithm` and
:func:`cost_terms`). The reduction cost (gamma) is not separated: it is folded
into the effective bandwidth. Each fit is reported with its R^2 and maximum
relative error, and so is the error of the point-to-point parameters used in
the same closed forms.

Output: the link-parameter file, JSON with the top-level keys of
:data:`simnet.config.LINK_PARAM_KEYS` (null: not calibrated) plus a ``fit``
section (per-op details, source, world size, MPI library, date). A
configuration uses it with ``"network": {"link_params_file": "link_params.json"}``.

``--report DIR`` simulates every measured (op, size) with the calibrated
model (``simnet.collective_time`` on a switch, or ring, of ``world_size``
endpoints with the calibrated bandwidth, latency 0 and the calibrated alpha;
point-to-point rows as one simulated message) and writes measured vs
predicted per row, as CSV, text and one log-log plot per op.

Units: times in seconds inside (``_s``), microseconds in the file and on the
terminal (``_us``); bandwidths in bytes/s inside, GB/s in the file with
GB = 1e9 bytes.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simnet.config import LINK_PARAM_KEYS, NetworkSection
from workload import collectives
from workload.brief_argparse import BriefParser
from workload.units import ELEM_BYTES, GB, KB, MB, bytes_per_s_to_gb_per_s
from workload.units import US_PER_S as US  # the file's and the terminal's unit

EXIT_USAGE = 2

P2P_OPS = ("pingpong", "stream")
COLLECTIVE_OPS = ("allreduce", "allgather", "reduce_scatter", "alltoall", "bcast", "reduce")
KNOWN_OPS = (*COLLECTIVE_OPS, *P2P_OPS)
STATS = ("avg", "min", "max")
PLAUSIBLE_ALPHA_S = 0.1
PLAUSIBLE_BANDWIDTH_BYTES_PER_S = 1e6
"""Beyond these a fit is told to be suspect (times in another unit than seconds, most
likely): no network has a per-message cost of 0.1 s, or moves less than 1 MB/s."""
EAGER_THRESHOLD_BYTES: int = NetworkSection.model_fields["eager_threshold_bytes"].default
"""simnet's default eager threshold (bytes): the calibration's closed forms count a
request-to-send for every message above it, as the simulator does."""
TOPOLOGIES = ("switch", "ring")


class CalibrationError(ValueError):
    """A problem with the input, worded for the user in one line."""


# -- the cost models -----------------------------------------------------------------
def _lg(p: int) -> float:
    return math.log2(p)


def _ceil_lg(p: int) -> int:
    return (p - 1).bit_length()


def _floor_lg(p: int) -> int:
    return p.bit_length() - 1


def _pow2(p: int) -> bool:
    return p > 0 and p & (p - 1) == 0


def mpich_algorithm(op: str, p: int, count_elems: int) -> str:
    """The algorithm MPICH's historical defaults choose: the one table of them,
    :data:`workload.collectives.MPICH_RULES` (its docstring states the choices),
    in MPICH's names (e.g. reduce_scatter "pairwise"), whose closed forms
    :func:`cost_terms` knows. The simulator runs it, or the stand-in of the same
    choice (:func:`workload.collectives.default_algorithm`).

    ``count_elems`` has MPI count semantics (workload.ops).
    """
    try:
        return collectives.mpich_algorithm(op, p, count_elems)
    except ValueError as e:
        raise CalibrationError(f"no MPICH default for {op!r} on {p} ranks: {e}") from None


def cost_terms(op: str, algorithm: str, p: int, count_elems: int) -> tuple[float, float]:
    """Coefficients ``(k_alpha, k_bytes)`` of the closed-form cost
    ``k_alpha * alpha + k_bytes * beta`` (beta = 1 / bandwidth, gamma folded into beta).

    The table of collective-costs.md, with n as it defines it (the vector for
    allreduce, reduce-scatter and bcast; the total gathered for allgather; for
    alltoall m = bytes per destination). ``direct`` alltoall (all blocks posted
    at once; not in the table) is costed as simnet models it: one overhead,
    the p-1 blocks through the sender's link. Algorithms without a closed form
    here (e.g. hierarchical, multiring) fall back to the Hockney time of the
    project's schedule (``workload.collectives.alpha_beta_time_s``).
    """
    if p < 2:
        return 0.0, 0.0
    c = count_elems * ELEM_BYTES
    f = (p - 1) / p
    key = (op, algorithm)
    if op in P2P_OPS:
        return 1.0, float(c)
    if op == "allreduce":
        n = c
        if algorithm == "ring":
            return 2.0 * (p - 1), 2 * f * n
        if algorithm == "recursive_doubling":
            steps = _lg(p) if _pow2(p) else _floor_lg(p) + 2  # fold in and out
            return float(steps), n * steps
        if algorithm == "rabenseifner":
            if _pow2(p):
                return 2 * _lg(p), 2 * f * n
            # Folded to p' = 2^floor(lg p) ranks: the vector in, Rabenseifner among p',
            # the result out. collective-costs.md writes 2 (p-1)/p for the middle term;
            # the ranks that exchange are p' (at p = 3: 3 n, not 3.33 n), as MPICH and
            # the simulator run it.
            q = 1 << _floor_lg(p)
            return 2.0 * _floor_lg(p) + 2, (2 * (q - 1) / q + 2) * n
    elif op in ("allgather", "reduce_scatter"):
        n = p * c  # total gathered / whole vector
        steps = {
            ("allgather", "ring"): p - 1,
            ("allgather", "bruck"): _ceil_lg(p),
            ("reduce_scatter", "ring"): p - 1,
            ("reduce_scatter", "pairwise"): p - 1,
        }
        if _pow2(p):
            steps[("allgather", "recursive_doubling")] = _lg(p)
            steps[("reduce_scatter", "recursive_halving")] = _lg(p)
        if key in steps:
            return float(steps[key]), f * n
    elif op == "alltoall":
        m = c
        if algorithm == "pairwise":
            return float(p - 1), float((p - 1) * m)
        if algorithm == "bruck":
            # collective-costs.md's p m / 2 a step holds for a power of two; MPICH sends
            # the blocks at the positions with bit t set, fewer on other p
            from workload.collectives import bruck_blocks

            steps = _ceil_lg(p)
            return float(steps), float(m * sum(bruck_blocks(p, t) for t in range(steps)))
        if algorithm == "direct":
            return 1.0, float((p - 1) * m)
        if algorithm == "scattered":  # MPICH's batches of ALLTOALL_THROTTLE, one alpha each
            from workload.collectives import ALLTOALL_THROTTLE

            return float(-(-p // ALLTOALL_THROTTLE)), float((p - 1) * m)
    elif op == "bcast":
        n = c
        if algorithm == "binomial":
            return float(_ceil_lg(p)), float(_ceil_lg(p) * n)
        if algorithm == "scatter_recursive_doubling_allgather":
            return 2 * _lg(p), 2 * f * n
        if algorithm == "scatter_ring_allgather":
            # (the scatter's binomial tree has ceil(lg p) levels: collective-costs.md's
            # lg p is for a power of two, and MPICH runs this one at any p)
            return float(_ceil_lg(p) + p - 1), 2 * f * n
    elif op == "reduce":
        n = c
        if algorithm == "binomial":
            return float(_ceil_lg(p)), float(_ceil_lg(p) * n)
        if algorithm == "rabenseifner" and _pow2(p):
            return 2 * _lg(p), 2 * f * n
    return _schedule_terms(*key, p, count_elems)


def handshakes(
    op: str, algorithm: str, p: int, count_elems: int, eager_threshold_bytes: int
) -> float:
    """How many rendezvous request-to-sends (each one more alpha in simnet) lie on the
    critical path of ``op`` with ``algorithm`` (MPICH's name or one of the project's):
    the messages above ``eager_threshold_bytes`` along it. A pingpong's one message
    has one when it is larger; a stream's window of messages posted together pays
    theirs side by side, counted as none; a collective's are counted on the project's
    schedule of that algorithm (or of the stand-in simnet runs for it,
    :func:`workload.collectives.stand_in`)."""
    if p < 2 or eager_threshold_bytes < 0:
        return 0.0
    if op == "pingpong":
        return 1.0 if count_elems * ELEM_BYTES > eager_threshold_bytes else 0.0
    if op in P2P_OPS:
        return 0.0
    from workload.collectives import ALGORITHMS, alpha_beta_time_s, schedule_for, stand_in

    alg = stand_in(op, algorithm, p)  # as simnet runs MPICH's choice
    if alg not in ALGORITHMS.get(op, ()):
        return 0.0
    try:
        s = schedule_for(op, alg, p, count_elems)
    except (ValueError, TypeError, KeyError):
        return 0.0  # (cost_terms says what has no model)
    return alpha_beta_time_s(s, 0.0, 0.0, 1.0, eager_threshold_bytes)


def _schedule_terms(op: str, algorithm: str, p: int, count_elems: int) -> tuple[float, float]:
    from workload.collectives import alpha_beta_time_s, schedule_for

    try:
        s = schedule_for(op, algorithm, p, count_elems)
        return alpha_beta_time_s(s, 1.0, 0.0), alpha_beta_time_s(s, 0.0, 1.0)
    except (ValueError, TypeError, KeyError) as e:
        raise CalibrationError(
            f"no cost model for {op} with algorithm {algorithm!r} on {p} ranks: {e}"
        ) from None


# -- the input -----------------------------------------------------------------------
@dataclass
class Row:
    """One measured row: an op at one size. Times in seconds."""

    index: int
    op: str
    algorithm: str
    size_bytes: int
    count_elems: int
    iterations: int
    time_s: float


@dataclass
class Microbench:
    path: Path
    world_size: int
    mpi: dict[str, Any]
    options: dict[str, Any]
    versions: dict[str, Any]
    rows: list[Row]
    skipped: list[str] = field(default_factory=list)


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def load_microbench(path: str | Path, stat: str = "avg") -> Microbench:
    """Read and check a microbench document; raise CalibrationError (one line)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise CalibrationError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CalibrationError(f"{p}: cannot read: {e}") from None
    except json.JSONDecodeError as e:
        raise CalibrationError(f"{p}: not JSON ({e}); expected a microbench document") from None
    if not isinstance(doc, dict) or doc.get("kind") != "microbench":
        kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
        raise CalibrationError(
            f"{p}: not a microbench document (kind {kind!r}, expected 'microbench': "
            "the --json output of `mpirun -n P python -m proxies.microbench`)"
        )
    ws = doc.get("world_size")
    if not isinstance(ws, int) or isinstance(ws, bool) or ws < 1:
        raise CalibrationError(f"{p}: world_size must be a positive integer (got {ws!r})")
    results = doc.get("results")
    if not isinstance(results, list) or not results:
        raise CalibrationError(f"{p}: 'results' must be a non-empty list of measured rows")
    rows: list[Row] = []
    unmodelled: dict[str, list[int]] = {}  # op -> its rows
    for i, r in enumerate(results):
        where = f"{p}: results[{i}]"
        if not isinstance(r, dict):
            raise CalibrationError(f"{where} is not an object")
        op = r.get("op")
        if op not in KNOWN_OPS:
            unmodelled.setdefault(repr(op), []).append(i)
            continue
        for key in ("size_bytes", "count_elems"):
            v = r.get(key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise CalibrationError(f"{where}: {key} must be an integer >= 0 (got {v!r})")
        t = r.get("time_s")
        v = t.get(stat) if isinstance(t, dict) else None
        if not _num(v) or v <= 0:
            raise CalibrationError(f"{where}: time_s.{stat} must be a number > 0 (got {v!r})")
        alg = r.get("algorithm", "mpi")
        rows.append(
            Row(
                index=i,
                op=op,
                algorithm=str(alg) if alg is not None else "mpi",
                size_bytes=r["size_bytes"],
                count_elems=r["count_elems"],
                iterations=int(r.get("iterations") or 0),
                time_s=float(v),
            )
        )
    if not any(r.op in P2P_OPS for r in rows):
        raise CalibrationError(
            f"{p}: no point-to-point rows (op 'pingpong' or 'stream'); alpha and bandwidth "
            "are fitted from them: run the micro-benchmark with point-to-point tests"
        )
    if ws < 2:
        raise CalibrationError(f"{p}: world_size {ws}: point-to-point rows need 2 ranks or more")
    for field_name in ("mpi", "options", "versions"):
        if not isinstance(doc.get(field_name) or {}, dict):
            raise CalibrationError(
                f"{p}: {field_name!r} is a {type(doc[field_name]).__name__}, not an object "
                "(the micro-benchmark writes an object): not a micro-benchmark document"
            )
    return Microbench(
        path=p,
        world_size=ws,
        mpi=dict(doc.get("mpi") or {}),
        options=dict(doc.get("options") or {}),
        versions=dict(doc.get("versions") or {}),
        rows=rows,
        skipped=[
            f"op {op}: {len(idx)} row{'s' if len(idx) > 1 else ''} not modelled "
            f"(results[{idx[0]}]{'...' if len(idx) > 1 else ''}; known: {', '.join(KNOWN_OPS)})"
            for op, idx in unmodelled.items()
        ],
    )


# -- fitting -------------------------------------------------------------------------
@dataclass
class Fit:
    """``time = k_alpha * alpha + k_bytes / bandwidth`` fitted to measured times."""

    op: str
    algorithm: str
    cost_model: str
    rows: list[Row]
    k_alpha: np.ndarray
    k_bytes: np.ndarray
    alpha_s: float | None = None
    bandwidth_bytes_per_s: float | None = None  # inf: bytes cost nothing in the fit
    r2: float | None = None
    max_rel_error: float | None = None
    p2p_model_max_rel_error: float | None = None
    # The same, simulated (simnet with the point-to-point parameters; see predict).
    p2p_simulated_max_rel_error: float | None = None
    algorithms_used: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def model_time_s(self, alpha_s: float, beta_s_per_byte: float) -> np.ndarray:
        return self.k_alpha * alpha_s + self.k_bytes * beta_s_per_byte

    @property
    def measured_s(self) -> np.ndarray:
        return np.array([r.time_s for r in self.rows])

    @property
    def fitted_s(self) -> np.ndarray | None:
        if self.alpha_s is None or self.bandwidth_bytes_per_s is None:
            return None
        return self.model_time_s(self.alpha_s, 1.0 / self.bandwidth_bytes_per_s)

    def as_dict(self) -> dict[str, Any]:
        bw = self.bandwidth_bytes_per_s
        sizes = [r.size_bytes for r in self.rows]
        fitted = self.fitted_s
        return {
            "op": self.op,
            "algorithm": self.algorithm,
            "cost_model": self.cost_model,
            "points": len(self.rows),
            "size_bytes_range": [min(sizes), max(sizes)],
            "alpha_us": None if self.alpha_s is None else self.alpha_s * US,
            "bandwidth_gb_per_s": (
                None if bw is None or math.isinf(bw) else bytes_per_s_to_gb_per_s(bw)
            ),
            "r2": self.r2,
            "max_rel_error": self.max_rel_error,
            "p2p_model_max_rel_error": self.p2p_model_max_rel_error,
            "p2p_simulated_max_rel_error": self.p2p_simulated_max_rel_error,
            "algorithms_used": self.algorithms_used,
            "notes": self.notes,
            "rows": [
                {
                    "size_bytes": r.size_bytes,
                    "count_elems": r.count_elems,
                    "measured_us": r.time_s * US,
                    "fitted_us": None if fitted is None else float(fitted[i]) * US,
                    "k_alpha": float(self.k_alpha[i]),
                    "k_bytes": float(self.k_bytes[i]),
                }
                for i, r in enumerate(self.rows)
            ],
        }


def least_squares(
    k_alpha: np.ndarray, k_bytes: np.ndarray, times_s: np.ndarray
) -> tuple[float, float, str | None]:
    """``(alpha_s, beta_s_per_byte, note)`` minimising the squared relative residuals
    of ``k_alpha * alpha + k_bytes * beta`` against ``times_s``, with alpha, beta >= 0.

    Raises CalibrationError when the points cannot separate the two.
    """
    a = np.asarray(k_alpha, float) / times_s
    b = np.asarray(k_bytes, float) / times_s
    m = np.column_stack([a, b])
    y = np.ones_like(times_s)
    if np.linalg.matrix_rank(m) < 2:
        raise CalibrationError(
            "the sizes cannot separate alpha from bandwidth: measure at least two "
            "message sizes (e.g. 8 B and 4 MB)"
        )
    (alpha, beta), *_ = np.linalg.lstsq(m, y, rcond=None)
    note = None
    if alpha < 0:
        alpha, beta = 0.0, float(b @ y / (b @ b))
        note = "the unconstrained fit gave alpha < 0: alpha fixed at 0"
    if beta <= 0:
        alpha, beta = float(a @ y / (a @ a)), 0.0
        note = "the unconstrained fit gave bandwidth <= 0: time fitted as alpha only"
    return float(alpha), float(beta), note


def _quality(measured: np.ndarray, model: np.ndarray) -> tuple[float | None, float]:
    res = measured - model
    ss_tot = float(((measured - measured.mean()) ** 2).sum())
    r2 = 1.0 - float((res**2).sum()) / ss_tot if ss_tot > 0 else None
    return r2, float(np.max(np.abs(res) / measured))


def group_rows(rows: list[Row]) -> dict[tuple[str, str], list[Row]]:
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.op, r.algorithm), []).append(r)
    for g in groups.values():
        g.sort(key=lambda r: (r.size_bytes, r.index))
    return groups


def make_fit(
    op: str,
    algorithm: str,
    rows: list[Row],
    p: int,
    eager_threshold_bytes: int = EAGER_THRESHOLD_BYTES,
) -> Fit:
    """A Fit with its cost coefficients (not yet fitted): the closed form, plus one
    alpha per rendezvous request-to-send on its critical path (:func:`handshakes`), as
    simnet adds them (``network.rendezvous_handshake``, on by default) to messages
    above ``eager_threshold_bytes`` (-1: none counted)."""
    ka, kb, used = [], [], {}
    for r in rows:
        if op in P2P_OPS:
            alg = "message"
            terms = (1.0, float(r.size_bytes))
            extra = handshakes(op, alg, p, r.count_elems, eager_threshold_bytes)
        else:
            alg = mpich_algorithm(op, p, r.count_elems) if algorithm == "mpi" else algorithm
            terms = cost_terms(op, alg, p, r.count_elems)
            extra = handshakes(op, alg, p, r.count_elems, eager_threshold_bytes)
        used[alg] = used.get(alg, 0) + 1
        ka.append(terms[0] + extra)
        kb.append(terms[1])
    if op in P2P_OPS:
        model = "alpha + size / bandwidth (route latency folded into alpha)"
    elif algorithm == "mpi":
        model = (
            "closed form of the algorithm MPICH's defaults choose per size (collective-costs.md)"
        )
    else:
        model = f"closed form of {algorithm}"
    if eager_threshold_bytes >= 0 and op != "stream":
        model += (
            f", plus alpha per rendezvous request-to-send (messages above "
            f"{eager_threshold_bytes:,} B) on the critical path"
        )
    return Fit(op, algorithm, model, rows, np.array(ka), np.array(kb), algorithms_used=used)


def fit_group(fit: Fit) -> Fit:
    """Fill in the fitted alpha/bandwidth and quality; notes explain what could not be fitted."""
    t = fit.measured_s
    try:
        alpha, beta, note = least_squares(fit.k_alpha, fit.k_bytes, t)
    except CalibrationError as e:
        fit.notes.append(str(e))
        return fit
    if note:
        fit.notes.append(note)
    fit.alpha_s = alpha
    fit.bandwidth_bytes_per_s = 1.0 / beta if beta > 0 else math.inf
    fit.r2, fit.max_rel_error = _quality(t, fit.model_time_s(alpha, beta))
    return fit


@dataclass
class Calibration:
    bench: Microbench
    stat: str
    p2p: Fit
    fits: list[Fit]  # every (op, algorithm), the point-to-point one included
    notes: list[str]
    eager_threshold_bytes: int = -1  # messages above pay a request-to-send (-1: none)

    @property
    def alpha_s(self) -> float:
        assert self.p2p.alpha_s is not None
        return self.p2p.alpha_s

    @property
    def bandwidth_bytes_per_s(self) -> float:
        assert self.p2p.bandwidth_bytes_per_s is not None
        return self.p2p.bandwidth_bytes_per_s


def calibrate(
    bench: Microbench,
    stat: str = "avg",
    p2p_source: str = "auto",
    eager_threshold_bytes: int = EAGER_THRESHOLD_BYTES,
) -> Calibration:
    """Fit every (op, algorithm) group; the point-to-point one gives alpha and bandwidth.
    ``eager_threshold_bytes``: messages above it pay a request-to-send (one more alpha)
    in the closed forms, as in simnet with that threshold (-1: no handshake counted)."""
    p = bench.world_size
    groups = group_rows(bench.rows)
    present = [op for op in P2P_OPS if any(k[0] == op for k in groups)]
    if not present:
        raise CalibrationError(
            f"{bench.path}: no point-to-point rows ({', '.join(P2P_OPS)}) to fit alpha and "
            "bandwidth from; run the micro-benchmark with --ops pingpong too"
        )
    source = present[0] if p2p_source == "auto" else p2p_source
    if source not in present:
        raise CalibrationError(
            f"{bench.path}: no {source!r} rows (point-to-point rows present: "
            f"{', '.join(present)}); use --p2p {present[0]} or --p2p auto"
        )
    fits, skipped = [], []
    for (op, alg), rows in groups.items():
        try:
            fits.append(fit_group(make_fit(op, alg, rows, p, eager_threshold_bytes)))
        except CalibrationError as e:  # e.g. a schedule that needs parameters
            skipped.append(f"{op} ({alg}): not fitted: {e}")
    p2p_fits = [f for f in fits if f.op == source]
    if len(p2p_fits) > 1:  # one p2p op measured with several algorithms: fit them together
        rows = [r for f in p2p_fits for r in f.rows]
        p2p = fit_group(
            make_fit(
                source, "+".join(f.algorithm for f in p2p_fits), rows, p, eager_threshold_bytes
            )
        )
    else:
        p2p = p2p_fits[0]
    if (
        p2p.alpha_s is None
        or not p2p.bandwidth_bytes_per_s
        or math.isinf(p2p.bandwidth_bytes_per_s)
    ):
        why = "; ".join(p2p.notes) or "no bandwidth term"
        raise CalibrationError(
            f"{bench.path}: cannot fit alpha and bandwidth from the {source} rows: {why}"
        )
    beta = 1.0 / p2p.bandwidth_bytes_per_s
    for f in fits:
        model = f.model_time_s(p2p.alpha_s, beta)
        f.p2p_model_max_rel_error = float(np.max(np.abs(f.measured_s - model) / f.measured_s))
    notes = [
        f"alpha and bandwidth from the {source} rows ({bench.path.name}); "
        "the route latency is folded into alpha, so link_latency_us = 0",
        f"times: the {stat} over iterations of each row",
        "collectives: effective alpha and bandwidth against the closed form; "
        "the reduction cost (gamma) is folded into the effective bandwidth",
        (
            f"rendezvous: messages above {eager_threshold_bytes:,} B pay one more alpha "
            "(their request-to-send) in every fit but a stream's (its window pays them side "
            "by side), as simnet adds it; the file sets eager_threshold_bytes to that"
            if eager_threshold_bytes >= 0
            else "rendezvous: no request-to-send counted (--eager-threshold -1)"
        ),
        *bench.skipped,
        *skipped,
    ]
    if bench.options.get("send_buffer", "filled") == "filled":
        notes.append(
            "send buffers: filled before timing (the micro-benchmark's default, as "
            "nccl-tests and OSU); the proxies send from never-written buffers, which copies "
            "read faster: to predict their runs measure with --send-buffer zero"
        )
    return Calibration(bench, stat, p2p, fits, notes, eager_threshold_bytes)


# -- the link-parameter file ---------------------------------------------------------
def link_params_document(cal: Calibration, topology: str = "switch") -> dict[str, Any]:
    """The JSON document of the link-parameter file."""
    b = cal.bench
    doc: dict[str, Any] = dict.fromkeys(LINK_PARAM_KEYS)
    doc["alpha_us"] = cal.alpha_s * US
    doc["bandwidth_limit_gb_per_s"] = bytes_per_s_to_gb_per_s(cal.bandwidth_bytes_per_s)
    doc["link_latency_us"] = 0.0
    if cal.eager_threshold_bytes >= 0:
        doc["eager_threshold_bytes"] = cal.eager_threshold_bytes
    from workload.results import versions

    doc["fit"] = {
        "kind": "link-params",
        "source": str(b.path.resolve()),
        "world_size": b.world_size,
        "mpi": b.mpi,
        "microbench_options": b.options,
        "microbench_versions": b.versions,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "statistic": cal.stat,
        "topology": topology,
        "model": "time = alpha + size / bandwidth per message, one alpha more for a "
        "rendezvous message's request-to-send (above eager_threshold_bytes); alpha includes "
        "the route latency, so link_latency_us is 0",
        "units": {
            "alpha_us": "microseconds",
            "bandwidth_limit_gb_per_s": "GB/s, GB = 1e9 bytes",
        },
        "point_to_point": cal.p2p.as_dict(),
        "ops": [f.as_dict() for f in cal.fits],
        "not_calibrated": [k for k, v in doc.items() if v is None and k in LINK_PARAM_KEYS],
        "notes": cal.notes,
        "versions": versions(),
    }
    return doc


# -- prediction report ---------------------------------------------------------------
def build_graph(topology: str, p: int, bandwidth_bytes_per_s: float):  # -> nx.DiGraph
    import topologies

    if topology == "ring":
        return topologies.ring(p, bandwidth_bytes_per_s=bandwidth_bytes_per_s, latency_s=0.0)
    return topologies.switch(p, bandwidth_bytes_per_s=bandwidth_bytes_per_s, latency_s=0.0)


def predict(cal: Calibration, topology: str = "switch") -> list[dict[str, Any]]:
    """Measured vs simulated time of every row (seconds)."""
    from simnet.simulate import collective_time, message_time

    p = cal.bench.world_size
    bw, alpha = cal.bandwidth_bytes_per_s, cal.alpha_s
    thr = cal.eager_threshold_bytes
    graph = build_graph(topology, p, bw)
    out = []
    for f in cal.fits:
        for r in f.rows:
            note = ""
            if r.op in P2P_OPS:
                sim_alg = "one message"
                # A stream's messages are posted together, their request-to-sends side
                # by side: a message of it costs none, as the fit counts it (handshakes).
                pred: float | None = message_time(
                    graph,
                    0,
                    1,
                    r.size_bytes,
                    alpha,
                    eager_threshold_bytes=thr,
                    rendezvous_handshake=thr >= 0 and r.op == "pingpong",
                )
                closed = (1 + handshakes(r.op, sim_alg, p, r.count_elems, thr)) * alpha
                closed += r.size_bytes / bw
            else:
                sim_alg = (
                    collectives.default_algorithm(r.op, p, r.count_elems)
                    if r.algorithm == "mpi"
                    else r.algorithm
                )
                try:
                    pred = collective_time(
                        graph,
                        r.op,
                        sim_alg,
                        r.count_elems * ELEM_BYTES,
                        alpha,
                        eager_threshold_bytes=thr,
                        rendezvous_handshake=thr >= 0,
                    )
                except (ValueError, TypeError, KeyError) as e:
                    pred, note = None, f"not simulated: {e}"
                mpich = (
                    mpich_algorithm(r.op, p, r.count_elems) if r.algorithm == "mpi" else r.algorithm
                )
                try:
                    ka, kb = cost_terms(r.op, mpich, p, r.count_elems)
                    ka += handshakes(r.op, mpich, p, r.count_elems, thr)
                    closed = ka * alpha + kb / bw
                except CalibrationError:
                    closed = math.nan
            err = None if pred is None else 100.0 * (pred - r.time_s) / r.time_s
            out.append(
                {
                    "op": r.op,
                    "algorithm": r.algorithm,
                    "simulated_algorithm": sim_alg,
                    "size_bytes": r.size_bytes,
                    "count_elems": r.count_elems,
                    "measured_s": r.time_s,
                    "predicted_s": pred,
                    "closed_form_s": closed,
                    "error_pct": err,
                    "note": note,
                }
            )
    return out


def _fmt_size(n: float) -> str:
    for unit, size in (("GB", GB), ("MB", MB), ("KB", KB)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def report_text(cal: Calibration, rows: list[dict[str, Any]], topology: str) -> str:
    b = cal.bench
    lines = [
        f"prediction report: {b.path.name}, {b.world_size} ranks, {b.mpi.get('library', '?')}",
        f"model: {topology} of {b.world_size} endpoints, bandwidth "
        f"{bytes_per_s_to_gb_per_s(cal.bandwidth_bytes_per_s):.4g} GB/s (GB = 1e9 B), "
        "latency 0, alpha "
        f"{cal.alpha_s * US:.4g} us; collectives measured with 'mpi' are simulated with "
        "simnet's MPICH-like default algorithm",
        "",
        f"{'op':15s} {'algorithm':12s} {'simulated as':20s} {'size (B)':>11s} "
        f"{'measured (us)':>14s} {'predicted (us)':>15s} {'error':>8s}",
    ]
    for r in rows:
        pred = "-" if r["predicted_s"] is None else f"{r['predicted_s'] * US:15.3f}"
        err = "-" if r["error_pct"] is None else f"{r['error_pct']:+7.1f}%"
        lines.append(
            f"{r['op']:15s} {r['algorithm']:12s} {r['simulated_algorithm']:20s} "
            f"{r['size_bytes']:11d} {r['measured_s'] * US:14.3f} {pred:>15s} {err:>8s}"
            + (f"  {r['note']}" if r["note"] else "")
        )
    errs = [abs(r["error_pct"]) for r in rows if r["error_pct"] is not None]
    if errs:
        lines += ["", f"max |error| {max(errs):.1f}%, median {float(np.median(errs)):.1f}%"]
    return "\n".join(lines) + "\n"


def set_simulated_errors(cal: Calibration, rows: list[dict[str, Any]]) -> None:
    """Each fit's ``p2p_simulated_max_rel_error`` from :func:`predict`'s ``rows``: how far
    simnet with the point-to-point alpha and bandwidth is from the op's measurements
    (None where no row of it was simulated)."""
    for f in cal.fits:
        errs = [
            abs(r["error_pct"]) / 100.0
            for r in rows
            if r["op"] == f.op and r["algorithm"] == f.algorithm and r["error_pct"] is not None
        ]
        f.p2p_simulated_max_rel_error = max(errs) if errs else None


def write_report(
    cal: Calibration,
    out: Path,
    topology: str = "switch",
    rows: list[dict[str, Any]] | None = None,
) -> tuple[list[Path], list[dict[str, Any]]]:
    """The prediction report's files in ``out``; ``rows``: :func:`predict`'s, if made."""
    from simnet import plots
    from workload.results import remove_others, write_csv, write_text

    if rows is None:
        rows = predict(cal, topology)
    files = [
        write_csv(
            out / "calibration_report.csv",
            [
                "op",
                "algorithm",
                "simulated_algorithm",
                "size_bytes",
                "count_elems",
                "measured_s",
                "predicted_s",
                "closed_form_s",
                "error_pct",
            ],
            (
                [
                    r["op"],
                    r["algorithm"],
                    r["simulated_algorithm"],
                    r["size_bytes"],
                    r["count_elems"],
                    repr(r["measured_s"]),
                    "" if r["predicted_s"] is None else repr(r["predicted_s"]),
                    repr(r["closed_form_s"]),
                    "" if r["error_pct"] is None else f"{r['error_pct']:.3f}",
                ]
                for r in rows
            ),
        ),
        write_text(out / "calibration_report.txt", report_text(cal, rows, topology)),
    ]
    by_op: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        by_op.setdefault(r["op"], {}).setdefault(r["algorithm"], []).append(r)
    for op, algs in by_op.items():
        for alg, rs in algs.items():
            pts = [r for r in rs if r["predicted_s"] is not None and r["size_bytes"] > 0]
            if not pts:
                continue
            name = (
                f"calibration_report_{op}.png"
                if len(algs) == 1
                else f"calibration_report_{op}_{alg}.png"
            )
            files.append(
                plots.measured_vs_predicted(
                    [r["size_bytes"] for r in pts],
                    [r["measured_s"] * US for r in pts],
                    [r["predicted_s"] * US for r in pts],
                    out / name,
                    title=f"{op} ({alg}, {cal.bench.world_size} ranks): measured vs simulated "
                    f"({topology}, calibrated)",
                    xlabel="size (B, nccl-tests convention)",
                    ylabel="time (us)",
                    logx=True,
                    logy=True,
                )
            )
    remove_others(out, "calibration_report_*.png", files)
    return files, rows


def write_fit_plots(cal: Calibration, out: Path) -> list[Path]:
    """One plot per fitted (op, algorithm): measured vs its own fitted closed form."""
    from simnet import plots
    from workload.results import remove_others

    files = []
    for f in cal.fits:
        fitted = f.fitted_s
        if fitted is None:
            continue
        keep = [i for i, r in enumerate(f.rows) if r.size_bytes > 0]
        if not keep:
            continue
        alg = f.algorithm.replace("/", "_")
        files.append(
            plots.measured_vs_predicted(
                [f.rows[i].size_bytes for i in keep],
                [f.rows[i].time_s * US for i in keep],
                [float(fitted[i]) * US for i in keep],
                out / f"fit_{f.op}_{alg}.png",
                title=f"{f.op} ({f.algorithm}): fit alpha {f.alpha_s * US:.3g} us, "
                f"bandwidth {_bw_text(f.bandwidth_bytes_per_s)}",
                xlabel="size (B, nccl-tests convention)",
                ylabel="time (us)",
                logx=True,
                logy=True,
            )
        )
    remove_others(out, "fit_*.png", files)
    return files


def _bw_text(bw: float | None) -> str:
    if bw is None:
        return "-"
    if math.isinf(bw):
        return "inf"
    return f"{bytes_per_s_to_gb_per_s(bw):.4g} GB/s"


POOR_FIT_R2 = 0.9
"""A fit explaining less of its measurements' variance than this is flagged as poor (a
negative R^2: worse than their mean); calibrate-host flags its fits by it too."""


def summary_text(cal: Calibration, out_path: Path | None) -> str:
    b, p2p = cal.bench, cal.p2p
    sizes = [r.size_bytes for r in p2p.rows]
    lines = [
        f"calibration from {b.path}: {b.world_size} ranks, "
        f"{b.mpi.get('library', 'MPI library not recorded')}; time statistic: {cal.stat}",
        f"point-to-point ({p2p.op}, {len(p2p.rows)} rows, {_fmt_size(min(sizes))} .. "
        f"{_fmt_size(max(sizes))}): alpha = {cal.alpha_s * US:.4g} us, bandwidth = "
        f"{bytes_per_s_to_gb_per_s(cal.bandwidth_bytes_per_s):.4g} GB/s (GB = 1e9 B); R^2 "
        f"{_r2_text(p2p.r2)}, max relative error {100 * (p2p.max_rel_error or 0):.2f}%",
        "  the route latency is folded into alpha (the file sets link_latency_us = 0)",
    ]
    lines += [f"  note: {n}" for n in p2p.notes]
    if p2p.r2 is not None and p2p.r2 < POOR_FIT_R2:
        lines.append(
            f"  poor fit: the point-to-point times are not alpha + size / bandwidth here (R^2 "
            f"{_r2_text(p2p.r2)} < {POOR_FIT_R2}); the file's alpha and bandwidth describe "
            "them badly (a noisy run? more iterations, a quieter hour; times in seconds?)"
        )
    implausible = []
    if p2p.alpha_s is not None and p2p.alpha_s > PLAUSIBLE_ALPHA_S:
        implausible.append(f"alpha {p2p.alpha_s * US:,.0f} us")
    bw = p2p.bandwidth_bytes_per_s
    if bw is not None and bw < PLAUSIBLE_BANDWIDTH_BYTES_PER_S:
        implausible.append(f"bandwidth {bytes_per_s_to_gb_per_s(bw):.3g} GB/s")
    if implausible:
        lines.append(
            f"  warning: {' and '.join(implausible)} is no network's (alpha above "
            f"{PLAUSIBLE_ALPHA_S * US:,.0f} us, bandwidth below "
            f"{PLAUSIBLE_BANDWIDTH_BYTES_PER_S / 1e6:g} MB/s): the file's times are read as "
            "seconds (time_s); were they written in another unit?"
        )
    lines += [
        "",
        "effective alpha and bandwidth per (op, algorithm), fitted to the closed form "
        "(gamma folded into bandwidth); last column: max relative error of simnet's "
        "prediction with the point-to-point alpha and bandwidth (the closed forms may count "
        "steps the simulation overlaps, e.g. a binomial bcast's eager sends from the root, "
        "so the effective alpha can differ from it where the model fits)",
        f"  {'op':15s} {'algorithm':20s} {'rows':>4s} {'alpha (us)':>11s} "
        f"{'bw (GB/s)':>10s} {'R^2':>8s} {'max err':>8s} {'sim err':>8s}",
    ]
    for f in cal.fits:
        alpha = "-" if f.alpha_s is None else f"{f.alpha_s * US:.4g}"
        bw = "-" if f.bandwidth_bytes_per_s is None else _bw_text(f.bandwidth_bytes_per_s)
        bw = bw.replace(" GB/s", "")
        err = "-" if f.max_rel_error is None else f"{100 * f.max_rel_error:.1f}%"
        sim = f.p2p_simulated_max_rel_error
        perr = "-" if sim is None else f"{100 * sim:.1f}%"
        poor = f.r2 is not None and f.r2 < POOR_FIT_R2
        lines.append(
            f"  {f.op:15s} {f.algorithm:20s} {len(f.rows):4d} {alpha:>11s} {bw:>10s} "
            f"{_r2_text(f.r2):>8s} {err:>8s} {perr:>8s}" + ("  poor fit" if poor else "")
        )
        if f.op not in P2P_OPS and f.algorithm == "mpi":
            used = ", ".join(f"{k} x{v}" for k, v in f.algorithms_used.items())
            lines.append(f"  {'':15s} cost model: {used}")
        lines += [f"  {'':15s} note: {n}" for n in f.notes]
    lines += [
        f"note: {n}"
        for n in cal.notes
        if "not fitted" in n or "not modelled" in n or n.startswith("send buffers:")
    ]
    if out_path is not None:
        lines += [
            "",
            f"wrote {out_path}; use it with "
            f'"network": {{"link_params_file": "{out_path.name}"}} in a configuration '
            "(a relative path is taken from the configuration file's directory)",
        ]
    return "\n".join(lines) + "\n"


def _r2_text(r2: float | None) -> str:
    return "-" if r2 is None else f"{r2:.5f}"


# -- command line --------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = BriefParser(
        prog="python -m simnet calibrate",
        description="Fit the network model (per-message overhead alpha, bandwidth) to the "
        "results of `mpirun -n P python -m proxies.microbench --json MICROBENCH.json`, and "
        "write a link-parameter file that configurations reference with "
        '"network": {"link_params_file": PATH}. Units: us, GB/s (GB = 1e9 B).',
    )
    p.add_argument("microbench", metavar="MICROBENCH.json", help="the micro-benchmark's JSON")
    p.add_argument(
        "-o",
        "--output",
        default="link_params.json",
        metavar="PATH",
        help="link-parameter file to write (default: link_params.json)",
    )
    p.add_argument(
        "--topology",
        choices=TOPOLOGIES,
        default="switch",
        help="topology of the prediction report, recorded in the file (default: switch)",
    )
    p.add_argument("--plot", metavar="DIR", default=None, help="write one fit plot per op here")
    p.add_argument(
        "--report",
        metavar="DIR",
        default=None,
        help="simulate every measured op and size with the calibrated model and write "
        "measured vs predicted (CSV, text, one plot per op) here",
    )
    p.add_argument(
        "--stat",
        choices=STATS,
        default="avg",
        help="which time of each row to fit (default: avg, as nccl-tests)",
    )
    p.add_argument(
        "--eager-threshold",
        type=int,
        default=EAGER_THRESHOLD_BYTES,
        metavar="BYTES",
        help="messages above it are sent by rendezvous and pay a request-to-send (one more "
        "alpha) in the fits and the report, as simnet adds it; written to the file as "
        f"eager_threshold_bytes (default: simnet's, {EAGER_THRESHOLD_BYTES:,}; -1: no "
        "handshake counted, for a configuration with rendezvous_handshake false)",
    )
    p.add_argument(
        "--p2p",
        choices=("auto", *P2P_OPS),
        default="auto",
        help="rows giving alpha and bandwidth (auto: pingpong if present, else stream)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    from workload.results import output_dir_problem, output_file_problem, write_json, write_text

    problem = output_file_problem(ns.output, "-o/--output")
    for option, folder in (("--plot", ns.plot), ("--report", ns.report)):
        if folder and not problem:
            problem = output_dir_problem(folder, option)
            problem = problem and f"{option}: {problem}"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        bench = load_microbench(ns.microbench, ns.stat)
        if ns.eager_threshold < -1:
            raise CalibrationError(
                f"--eager-threshold: {ns.eager_threshold} is no size (bytes >= 0, or -1)"
            )
        cal = calibrate(bench, ns.stat, ns.p2p, ns.eager_threshold)
    except CalibrationError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    rows = predict(cal, ns.topology)
    set_simulated_errors(cal, rows)
    out = Path(ns.output)
    doc = link_params_document(cal, ns.topology)
    write_json(out, doc)
    text = summary_text(cal, out)
    print(text, end="")
    if ns.plot:
        files = write_fit_plots(cal, Path(ns.plot))
        print(f"wrote {len(files)} fit plots to {ns.plot}/")
    if ns.report:
        rdir = Path(ns.report)
        files, rows = write_report(cal, rdir, ns.topology, rows)
        files.append(write_text(rdir / "calibration.txt", text))
        errs = [abs(r["error_pct"]) for r in rows if r["error_pct"] is not None]
        worst = f"; max |error| {max(errs):.1f}%" if errs else ""
        print(f"prediction report: {len(rows)} rows{worst}; wrote {len(files)} files to {rdir}/")
    return 0
