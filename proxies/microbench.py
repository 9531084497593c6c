"""Collective and point-to-point micro-benchmarks in the conventions of nccl-tests and OSU.

    mpirun -n P python -m proxies.microbench [-b 8] [-e 4M] [-f 2] [--ops allreduce,pingpong]

One harness, one small spec per operation (as nccl-tests): an :class:`OpSpec`
says how many elements an array of S bytes gives and what the bus-bandwidth
factor is; the harness turns every (operation, size) into a phase of a
:class:`~workload.program.Workload` whose rank programs hold one collective per
iteration (or the point-to-point pattern), and the MPI executor runs and
times it. This module never calls MPI itself.

Sizes follow nccl-tests: S is the whole array (allreduce, bcast, reduce: the
vector; allgather: everything gathered, p x count x 4; reduce_scatter: the
whole input, p x count x 4; alltoall: the whole send buffer, p x count x 4;
pingpong, stream and exchange: one message). ``count_elems`` is the MPI count argument
(workload/ops.py semantics) of float32 elements, rounded down to whole
elements per rank; the size reported is the array those elements make.

Times: a collective's iteration takes as long as its slowest rank (each
rank's own call duration, so no synchronised clocks are assumed); avg, min
and max are over the timed iterations. pingpong: half of rank 0's round
trip; stream: rank 0's time from its first send to the receiver's
acknowledgement, divided by the window; exchange (every rank sends to the
next and receives from the previous at once): the times of the slowest rank
(largest mean), as a proxy reports its iterations, so p x size / time is what
the ranks move together. algbw = size / avg time,
busbw = algbw x bus factor, GB = 1e9 bytes.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from workload.accounting import BASE_RANK_BYTES, buffer_needs
from workload.collectives import ALGORITHMS, build_schedule
from workload.layout import world_groups
from workload.ops import ELEM_BYTES, Op
from workload.program import BuildOptions, Phase, ProgramBuilder, Workload
from workload.results import counted, versions, write_json
from workload.units import GB, GIB, KIB, MIB, s_to_us

from .cli import EXIT_USAGE, add_mpi_options, fail, output_files_problem, parse_quietly
from .launch import MPISettings, launch_info, prepare_mpi

PROG = "mpirun -n P python -m proxies.microbench"
DEFAULT_MINBYTES = 8
DEFAULT_MAXBYTES = 4 * MIB
DEFAULT_STEPFACTOR = 2
DEFAULT_STEPBYTES = MIB
DEFAULT_ITERS = 20  # nccl-tests' defaults
DEFAULT_WARMUP = 5
DEFAULT_WINDOW = 64  # OSU's bandwidth test window
MAX_SIZES = 1000
MPI_ALGORITHM = "mpi"
# Schedules that need parameters the micro-benchmark does not take.
_PARAMETRISED = ("hierarchical", "multiring")
DATA_TAG, ACK_TAG = 1, 2


# ---------------------------------------------------------------- the specs


@dataclass(frozen=True)
class OpSpec:
    """One benchmarked operation: how S bytes become a count, and its bus factor.

    per_rank: S is p blocks of ``count_elems`` (allgather, reduce_scatter,
      alltoall); otherwise S is ``count_elems`` elements.
    bus_rule: "2(n-1)/n", "(n-1)/n" or "1" (nccl-tests; workflows.md section 3).
    p2p: point-to-point messages (no collective algorithm to choose).
    pair_only: only ranks 0 and 1 take part (and only rank 0's times count).
    """

    name: str
    per_rank: bool
    bus_rule: str
    p2p: bool = False
    pair_only: bool = False

    def count_elems(self, size_bytes: int, world_size: int) -> int:
        elems = size_bytes // ELEM_BYTES
        return elems // world_size if self.per_rank else elems

    def array_bytes(self, count_elems: int, world_size: int) -> int:
        return count_elems * ELEM_BYTES * (world_size if self.per_rank else 1)

    def min_bytes(self, world_size: int) -> int:
        """The smallest S that gives one element (per rank)."""
        return ELEM_BYTES * (world_size if self.per_rank else 1)

    def bus_factor(self, world_size: int) -> float:
        n = world_size
        if self.bus_rule == "2(n-1)/n":
            return 2 * (n - 1) / n
        if self.bus_rule == "(n-1)/n":
            return (n - 1) / n
        return 1.0


SPECS: dict[str, OpSpec] = {
    s.name: s
    for s in (
        OpSpec("allreduce", False, "2(n-1)/n"),
        OpSpec("allgather", True, "(n-1)/n"),
        OpSpec("reduce_scatter", True, "(n-1)/n"),
        OpSpec("alltoall", True, "(n-1)/n"),
        OpSpec("bcast", False, "1"),
        OpSpec("reduce", False, "1"),
        OpSpec("pingpong", False, "1", p2p=True, pair_only=True),
        OpSpec("stream", False, "1", p2p=True, pair_only=True),
        OpSpec("exchange", False, "1", p2p=True),
    )
}
SCHEDULES = tuple(
    sorted({a for op, s in SPECS.items() if not s.p2p for a in ALGORITHMS[op]} - set(_PARAMETRISED))
)


# ---------------------------------------------------------------- arguments


class UsageError(Exception):
    """A bad command line (reported on one line by rank 0, exit code 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


_SIZE_RE = re.compile(r"(\d+)([KMG]?)", re.IGNORECASE)
_UNITS = {"": 1, "K": KIB, "M": MIB, "G": GIB}


def parse_size(text: str) -> int:
    """Bytes from "8", "64K", "128M", "1G" (1024-based, as nccl-tests)."""
    m = _SIZE_RE.fullmatch(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: whole bytes with an optional K, M or G suffix "
            "(1024-based), e.g. 8, 64K, 128M"
        )
    return int(m[1]) * _UNITS[m[2].upper()]


def parse_ops(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if names == ["all"]:
        return list(SPECS)
    bad = [n for n in names if n not in SPECS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown operation {', '.join(map(repr, bad)) or repr(text)}; "
            f"choose from {','.join(SPECS)} (or all)"
        )
    return list(dict.fromkeys(names))


def format_size(size_bytes: int) -> str:
    """The shortest exact form with a 1024-based suffix: 4194304 -> "4M"."""
    for suffix in ("G", "M", "K"):
        unit = _UNITS[suffix]
        if size_bytes >= unit and size_bytes % unit == 0:
            return f"{size_bytes // unit}{suffix}"
    return str(size_bytes)


def message_sizes(
    min_bytes: int, max_bytes: int, step_factor: int, step_bytes: int, limit: int = MAX_SIZES
) -> list[int]:
    """The sizes nccl-tests visits: from min, times the factor (or plus the step), up to max."""
    sizes: list[int] = []
    size = min_bytes
    while size <= max_bytes:
        if len(sizes) == limit:
            raise ValueError(f"more than {limit} sizes from -b/-e/-f/-i; use a larger step")
        sizes.append(size)
        size = size * step_factor if step_factor > 1 else size + step_bytes
    return sizes


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Collective and point-to-point micro-benchmarks (nccl-tests / OSU "
        "conventions): one row per operation and size with time avg/min/max (us), "
        "algbw and busbw (GB/s, GB = 1e9 bytes).",
    )
    g = p.add_argument_group("what to measure")
    g.add_argument(
        "--ops",
        type=parse_ops,
        default=list(SPECS),
        metavar="LIST",
        help=f"comma-separated operations (default all: {','.join(SPECS)})",
    )
    g.add_argument(
        "--algorithm",
        default=MPI_ALGORITHM,
        metavar="NAME",
        help="mpi (the MPI library's collectives, default) or one of the project's "
        f"schedules: {', '.join(SCHEDULES)}; operations without that schedule are skipped",
    )
    g.add_argument(
        "--window",
        type=int,
        default=DEFAULT_WINDOW,
        metavar="N",
        help=f"stream: non-blocking sends per acknowledgement (default {DEFAULT_WINDOW})",
    )
    g.add_argument(
        "--exchange-window",
        type=int,
        default=1,
        metavar="N",
        help="exchange: messages each rank has in flight to its neighbour at once (default 1)",
    )
    g.add_argument(
        "--send-buffer",
        choices=("filled", "zero"),
        default="filled",
        help="filled (default, as nccl-tests and OSU: every page of the send buffer written, "
        "so copies read real memory) or zero: never written, as the proxies' buffers (every "
        "page the kernel's one zero page, always in cache); the host calibration uses zero",
    )
    g = p.add_argument_group("sizes (nccl-tests: S is the whole array, suffixes K M G = 1024)")
    g.add_argument(
        "-b",
        "--minbytes",
        type=parse_size,
        default=DEFAULT_MINBYTES,
        metavar="SIZE",
        help=f"smallest size (default {DEFAULT_MINBYTES})",
    )
    g.add_argument(
        "-e",
        "--maxbytes",
        type=parse_size,
        default=DEFAULT_MAXBYTES,
        metavar="SIZE",
        help=f"largest size (default {format_size(DEFAULT_MAXBYTES)})",
    )
    g.add_argument(
        "-f",
        "--stepfactor",
        type=int,
        default=DEFAULT_STEPFACTOR,
        metavar="F",
        help=f"multiply the size by F (default {DEFAULT_STEPFACTOR}); 1: add -i instead",
    )
    g.add_argument(
        "-i",
        "--stepbytes",
        type=parse_size,
        default=DEFAULT_STEPBYTES,
        metavar="SIZE",
        help=f"increment when -f is 1 (default {format_size(DEFAULT_STEPBYTES)})",
    )
    g.add_argument(
        "-n",
        "--iters",
        type=int,
        default=DEFAULT_ITERS,
        metavar="N",
        help=f"timed iterations per size (default {DEFAULT_ITERS})",
    )
    g.add_argument(
        "-w",
        "--warmup",
        "--warmup_iters",
        dest="warmup",
        type=int,
        default=DEFAULT_WARMUP,
        metavar="N",
        help=f"untimed iterations before each size (default {DEFAULT_WARMUP})",
    )
    g = p.add_argument_group("MPI and safety (as the proxies)")
    add_mpi_options(g, poll_by_default=False, timeout_flags=("-T", "--timeout"))
    g.add_argument("--json", default=None, metavar="PATH", help="write the results as JSON")
    return p


def check_options(ns: argparse.Namespace) -> str | None:
    """The first problem with the options, or None."""
    if ns.minbytes < 1:
        return f"-b/--minbytes must be >= 1 byte (got {ns.minbytes})"
    if ns.maxbytes < ns.minbytes:
        return f"-e/--maxbytes ({ns.maxbytes}) must be >= -b/--minbytes ({ns.minbytes})"
    if ns.stepfactor < 1:
        return f"-f/--stepfactor must be >= 1 (got {ns.stepfactor})"
    if ns.stepfactor == 1 and ns.stepbytes < 1:
        return f"-i/--stepbytes must be >= 1 byte when -f is 1 (got {ns.stepbytes})"
    if ns.iters < 1:
        return f"-n/--iters must be >= 1 (got {ns.iters})"
    if ns.warmup < 0:
        return f"-w/--warmup must be >= 0 (got {ns.warmup})"
    if ns.window < 1:
        return f"--window must be >= 1 (got {ns.window})"
    if ns.exchange_window < 1:
        return f"--exchange-window must be >= 1 (got {ns.exchange_window})"
    if not (ns.timeout >= 0 and math.isfinite(ns.timeout)):
        return f"--timeout must be >= 0 seconds (got {ns.timeout})"
    if ns.algorithm != MPI_ALGORITHM and ns.algorithm not in SCHEDULES:
        return (
            f"--algorithm must be {MPI_ALGORITHM} or one of {', '.join(SCHEDULES)} "
            f"(got {ns.algorithm!r})"
        )
    try:
        message_sizes(ns.minbytes, ns.maxbytes, ns.stepfactor, ns.stepbytes)
    except ValueError as e:
        return str(e)
    return output_files_problem(ns)


# ---------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Case:
    """One row: an operation at one size, run as one phase of the workload."""

    spec: OpSpec
    algorithm: str
    requested_bytes: int
    count_elems: int
    size_bytes: int
    window: int = 1

    @property
    def phase(self) -> str:
        return f"{self.spec.name} {self.size_bytes} B (S={self.requested_bytes})"


def _builds(op: str, algorithm: str, world_size: int) -> bool:
    """Whether ``algorithm`` has a schedule of ``op`` over ``world_size`` ranks."""
    try:
        build_schedule(op, algorithm, world_size, 1)
    except ValueError:
        return False
    return True


def plan_cases(
    ops: Sequence[str],
    sizes: Sequence[int],
    world_size: int,
    algorithm: str,
    window: int,
    exchange_window: int = 1,
) -> tuple[list[Case], dict[str, list[str]]]:
    """The rows to run, and per operation the notes on what is skipped and why."""
    cases: list[Case] = []
    notes: dict[str, list[str]] = {op: [] for op in ops}
    p = world_size
    for op in ops:
        spec = SPECS[op]
        if spec.p2p and p < 2:
            notes[op].append(f"{op} skipped: it needs 2 ranks (world size {p})")
            continue
        alg = MPI_ALGORITHM if spec.p2p else algorithm
        if alg != MPI_ALGORITHM:
            if alg not in ALGORITHMS[op]:
                notes[op].append(
                    f"{op} skipped: no {alg!r} schedule for it (its schedules: "
                    f"{', '.join(a for a in ALGORITHMS[op] if a not in _PARAMETRISED)})"
                )
                continue
            try:
                build_schedule(op, alg, p, 1)
            except ValueError as e:
                # The schedule's own suggestion may name one this tool does not take
                # (multiring, which needs its rings): suggest those that run here.
                why = str(e).split("; use one of")[0]
                usable = [a for a in ALGORITHMS[op] if a not in _PARAMETRISED and _builds(op, a, p)]
                if usable:
                    why += f"; use one of {', '.join(usable)}"
                notes[op].append(f"{op} skipped: {why}")
                continue
        small = [s for s in sizes if spec.count_elems(s, p) < 1]
        if small:
            per = f" per rank with {p} ranks" if spec.per_rank else ""
            notes[op].append(
                f"{op}: {len(small)} size(s) below {spec.min_bytes(p)} B skipped "
                f"(less than one float32 element{per}): {', '.join(map(str, small))}"
            )
        seen: dict[int, list[int]] = {}  # array bytes -> the sizes asked that give it
        for s in sizes:
            count = spec.count_elems(s, p)
            if count >= 1:
                size = spec.array_bytes(count, p)
                if size in seen:  # rounded to whole elements, it is a size measured already
                    seen[size].append(s)
                    continue
                seen[size] = [s]
                w = window if op == "stream" else exchange_window if op == "exchange" else 1
                cases.append(Case(spec, alg, s, count, size, w))
        for size, asked in seen.items():
            if len(asked) > 1:
                notes[op].append(
                    f"{op}: sizes {', '.join(map(str, asked))} B are all {size} B in whole "
                    f"float32 elements{' per rank' if spec.per_rank else ''}: measured once"
                )
    return cases, notes


def rank_program(case: Case, world_size: int, wait_each: bool = False) -> Callable[[int], list[Op]]:
    """One iteration of ``case`` for a rank: one collective, or the p2p pattern.

    stream: the window's non-blocking sends (receives), one wait for all of
    them (``wait_each``: one wait per message, in order), then the ack.
    exchange: every rank sends one message to the next rank and receives one
    from the previous, both non-blocking, then waits for both.
    """
    alg = None if case.algorithm == MPI_ALGORITHM else case.algorithm
    op, n = case.spec.name, case.count_elems

    def program(rank: int) -> list[Op]:
        b = ProgramBuilder(BuildOptions(algorithm=alg))
        if op == "pingpong":
            if rank == 0:
                b.send(1, n, tag=DATA_TAG, group="world", label="ping")
                b.recv(1, n, tag=DATA_TAG, group="world", label="pong")
            elif rank == 1:
                b.recv(0, n, tag=DATA_TAG, group="world", label="ping")
                b.send(0, n, tag=DATA_TAG, group="world", label="pong")
        elif op == "stream":
            if rank in (0, 1):
                peer = 1 - rank
                post = b.send if rank == 0 else b.recv
                reqs = [
                    post(peer, n, tag=DATA_TAG, group="world", blocking=False, label="stream")
                    for _ in range(case.window)
                ]
                if wait_each:
                    for r in reqs:
                        b.wait(r, label="wait for one message of the window")
                else:
                    b.wait(*reqs, label="wait for the window")
                ack = b.recv if rank == 0 else b.send
                ack(peer, 1, tag=ACK_TAG, group="world", label="ack")
        elif op == "exchange":
            # Every rank at once: a ring shift, so all the host's ranks copy together.
            right, left = (rank + 1) % world_size, (rank - 1) % world_size
            reqs = []
            for _ in range(case.window):
                reqs.append(
                    b.recv(left, n, tag=DATA_TAG, group="world", blocking=False, label="exchange")
                )
                reqs.append(
                    b.send(right, n, tag=DATA_TAG, group="world", blocking=False, label="exchange")
                )
            b.wait(*reqs, label="wait for the exchange")
        else:
            b.collective(op, "world", n, label=op)
        return b.ops

    return program


def build_workload(cases: Sequence[Case], world_size: int, wait_each: bool = False) -> Workload:
    return Workload(
        model="microbench",
        world_size=world_size,
        params={},
        groups={"world": world_groups(world_size)},
        phases=[Phase(c.phase, rank_program(c, world_size, wait_each)) for c in cases],
    )


def rank_need_bytes(workload: Workload, phase: Phase, case: Case, rank: int) -> int:
    """Resident bytes of ``rank`` running ``case``: both buffers are written here."""
    needs = buffer_needs(workload, rank, [phase.program(rank)])
    return needs.resident_bytes + needs.send_elems * ELEM_BYTES


def host_need_bytes(
    workload: Workload, phase: Phase, case: Case, rank: int, ranks_on_host: int
) -> int:
    """Estimated resident bytes of this host's ranks while ``case`` runs.

    Collectives: every rank holds the same buffers. Point-to-point: only
    ranks 0 and 1 hold buffers, and at most two of them share this host.
    """
    if case.spec.pair_only:
        extra = rank_need_bytes(workload, phase, case, 0) - BASE_RANK_BYTES
        return ranks_on_host * BASE_RANK_BYTES + min(2, ranks_on_host) * extra
    return ranks_on_host * rank_need_bytes(workload, phase, case, rank)


# ---------------------------------------------------------------- figures


def iteration_times(
    starts: Sequence[Sequence[float]], ends: Sequence[Sequence[float]]
) -> list[float]:
    """Seconds per timed iteration on this rank: first operation start to last end."""
    return [e[-1] - s[0] for s, e in zip(starts, ends, strict=True) if s]


def row(case: Case, world_size: int, per_rank: Sequence[Sequence[float]], iters: int) -> dict:
    """The result row from every rank's iteration times (rank order)."""
    if case.spec.name == "pingpong":
        times = [t / 2 for t in per_rank[0]]
    elif case.spec.name == "stream":
        times = [t / case.window for t in per_rank[0]]
    elif case.spec.name == "exchange":
        # Neighbours only wait for each other: a rank's iterations follow one another
        # whatever the others' are doing, so its mean is its throughput, and the slowest
        # rank's mean is the job's (a proxy's figure, and nccl-tests' per-rank mean
        # reduced by max). The slowest rank of each iteration would add every rank's
        # stalls: 205-215 us against 74-100 us at 1 KiB, 4 ranks on 2 cores.
        mine = [r for r in per_rank if r]
        slowest_rank = max(mine, key=lambda r: sum(r))
        times = [t / case.window for t in slowest_rank]
    else:
        times = [max(ts) for ts in zip(*[r for r in per_rank if r], strict=True)]
    avg = sum(times) / len(times)
    algbw = case.size_bytes / avg if avg > 0 else 0.0
    return {
        "op": case.spec.name,
        "algorithm": case.algorithm,
        "size_bytes": case.size_bytes,
        "count_elems": case.count_elems,
        "iterations": iters,
        "time_s": {"avg": avg, "min": min(times), "max": max(times)},
        "algbw_bytes_per_s": algbw,
        "busbw_bytes_per_s": algbw * case.spec.bus_factor(world_size),
    }


COLUMNS = (
    ("op", 14),
    ("size (B)", 12),
    ("count (elems)", 13),
    ("time avg (us)", 13),
    ("min (us)", 11),
    ("max (us)", 11),
    ("algbw (GB/s)", 12),
    ("busbw (GB/s)", 12),
)


def column_header() -> str:
    name, width = COLUMNS[0]
    return "# " + f"{name:<{width}}" + "".join(f"  {n:>{w}}" for n, w in COLUMNS[1:])


def format_row(r: dict[str, Any]) -> str:
    t = r["time_s"]
    cells = (
        r["size_bytes"],
        r["count_elems"],
        f"{s_to_us(t['avg']):.2f}",
        f"{s_to_us(t['min']):.2f}",
        f"{s_to_us(t['max']):.2f}",
        f"{r['algbw_bytes_per_s'] / GB:.3f}",
        f"{r['busbw_bytes_per_s'] / GB:.3f}",
    )
    width = COLUMNS[0][1]
    return (
        "  "
        + f"{r['op']:<{width}}"
        + "".join(f"  {c!s:>{w}}" for c, (_, w) in zip(cells, COLUMNS[1:], strict=True))
    )


# ---------------------------------------------------------------- running


def main(argv: Sequence[str] | None = None) -> None:
    info = launch_info()
    try:
        ns = parse_quietly(build_parser(), sys.argv[1:] if argv is None else argv, info.rank)
    except UsageError as e:
        fail(info.rank, f"microbench: {e} (see --help)")
    problem = check_options(ns)
    if problem:
        fail(info.rank, f"microbench: {problem}")
    throttle = {"auto": None, "on": True, "off": False}[ns.throttle]
    settings = prepare_mpi(info, ns.thread_level, throttle)
    run(ns, settings, started=time.perf_counter())


def run(ns: argparse.Namespace, settings: MPISettings, started: float) -> None:
    """Everything after MPI initialisation (importing the executor initialises MPI)."""
    from workload.hostmem import available_memory_bytes

    from . import mpi_executor as mx
    from .buffers import fill
    from .outputs import outlive_stdout_reader
    from .run import MEMORY_HEADROOM, over_limit

    comm = mx.MPI.COMM_WORLD
    rank, p = comm.Get_rank(), comm.Get_size()
    outlive_stdout_reader()  # (``| head``: the rest of the table dropped, --json written)

    def say(message: str) -> None:  # progress, rank 0, stderr
        if rank == 0:
            sys.stderr.write(f"[{time.perf_counter() - started:7.1f} s] {message}\n")
            sys.stderr.flush()

    def out(line: str) -> None:  # the table, rank 0, stdout
        if rank == 0:
            print(line, flush=True)

    try:
        progress = ns.progress
        if progress == "auto":
            # Latency is what this tool measures, and polling's sleeps dominate it
            # (4 ranks on 2 cores, 8 B allreduce: 39 us blocking, 853 us polled).
            progress = "blocking"
        settings.progress = progress
        sizes = message_sizes(ns.minbytes, ns.maxbytes, ns.stepfactor, ns.stepbytes)
        cases, notes = plan_cases(ns.ops, sizes, p, ns.algorithm, ns.window, ns.exchange_window)

        # Memory: refuse the sizes whose buffers this host cannot hold.
        full = build_workload(cases, p)
        _, ranks_on_host, avail = mx.node_memory_check(
            comm, BASE_RANK_BYTES, available_memory_bytes()
        )
        needs = [
            host_need_bytes(full, ph, c, rank, ranks_on_host)
            for ph, c in zip(full.phases, cases, strict=True)
        ]
        refuse = [n > avail * MEMORY_HEADROOM and not ns.force for n in needs]
        if mx.any_true(comm, any(refuse)):
            refuse = [mx.any_true(comm, r) for r in refuse]  # agreed by every host
        kept = []
        for c, need, refused in zip(cases, needs, refuse, strict=True):
            if not refused:
                kept.append(c)
                continue
            why = (
                f"the {ranks_on_host} ranks on this host would need about {need / GIB:.1f} GiB, "
                f"{over_limit(avail)}"
                if need > avail * MEMORY_HEADROOM
                else "another host of the job lacks the memory"
            )
            notes[c.spec.name].append(
                f"{c.spec.name} {c.size_bytes} B refused: {why} "
                "(lower -e, or --force to run anyway)"
            )
        if not kept:
            for op in ns.ops:
                for n in notes[op]:
                    out(f"# note: {n}")
            if rank == 0:
                sys.stderr.write(
                    "error: microbench: nothing to run: every size was skipped or refused "
                    "(see the '# note' lines)\n"
                )
            mx.MPI.Finalize()
            raise SystemExit(EXIT_USAGE)

        # Polled progress sleeps between tests, and MPICH completes one message
        # per test: waiting for the whole window at once costs a sleep per
        # message (measured: 1.1 ms instead of 3 us per 8 B message), so the
        # stream waits for its messages one by one, in order, when polling.
        workload = build_workload(kept, p, wait_each=progress == "poll")
        ex = mx.MPIExecutor(
            workload,
            compute="none",
            timeout_s=ns.timeout,
            comm=comm,
            **settings.executor_options(),
        )
        ex.create_communicators()
        ex.allocate()
        # Initialise the buffers, as nccl-tests and OSU do: a never-written send
        # buffer maps every page to the kernel's one zero page, which is always
        # in cache, and inflates the bandwidth of large messages. The proxies send
        # from such a buffer, as the reference does: --send-buffer zero measures that.
        if ns.send_buffer == "filled":
            fill(ex.sbuf, 1.0)
        fill(ex.rbuf, 0.0)
        library = mx.library_version()
        thread_level = mx.thread_level_name(mx.MPI.Query_thread())
        if library.startswith("MPICH"):
            throttle = f"throttle {'on' if settings.throttle else 'off'}: "
            throttle += settings.throttle_reason
        else:  # the throttle variables are MPICH's
            throttle = "no MPICH throttle"
        out(
            f"# commsim microbench: {library.split(',')[0]}; {p} rank{'s' * (p != 1)}; "
            f"thread level {thread_level}; progress {settings.progress_text()} ({throttle}); "
            f"algorithm {ns.algorithm}"
        )
        out(
            f"# {ns.iters} timed + {ns.warmup} warm-up iterations per size; time = the slowest "
            "rank per iteration, then avg/min/max over iterations; pingpong: one-way "
            f"(round trip / 2); stream: per message (window {ns.window}); exchange: per "
            f"message (window {ns.exchange_window}), the slowest rank's iterations; "
            f"send buffer {ns.send_buffer}; collectives out of place (a send and a receive "
            "buffer, as nccl-tests' out-of-place columns; bcast has one, 1 rank in place); "
            "algbw = size / avg time; busbw = algbw x bus factor; GB = 1e9 bytes"
        )
        out(column_header())
        results: list[dict[str, Any]] = []
        by_op = {op: [c for c in kept if c.spec.name == op] for op in ns.ops}
        for op in ns.ops:
            spec = SPECS[op]
            for n in notes[op]:
                out(f"# note: {n}")
            todo = by_op[op]
            if not todo:
                continue
            say(
                f"{op}: {counted(len(todo), 'size')}, {todo[0].size_bytes} .. "
                f"{todo[-1].size_bytes} B "
                f"(bus factor {spec.bus_rule} = {spec.bus_factor(p):.3f})"
            )
            for c in todo:
                r = ex.run_phase(c.phase, ns.warmup, ns.iters)
                mine = iteration_times(r.starts, r.ends)
                if spec.pair_only and rank != 0:
                    mine = []
                everyone = mx.gather(comm, mine)
                if rank == 0:
                    results.append(row(c, p, everyone, ns.iters))
                    out(format_row(results[-1]))
        if rank == 0:
            say(f"done: {len(results)} rows")
            if ns.json:
                doc = {
                    "kind": "microbench",
                    "world_size": p,
                    "mpi": {
                        "library": library,
                        "thread_level": thread_level,
                        "progress": progress,
                        "poll_pause_s": settings.poll_pause_s if progress == "poll" else None,
                    },
                    "options": dict(vars(ns)),
                    "versions": versions(),
                    "results": results,
                }
                write_json(ns.json, doc)
    except SystemExit:
        raise
    except BaseException:
        mx.abort_job(comm, rank)


if __name__ == "__main__":
    main()
