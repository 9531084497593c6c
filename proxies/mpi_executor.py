"""The MPI executor: runs rank programs as real mpi4py calls on scratch buffers.

This is the only module that calls MPI. Import it only after
``launch.prepare_mpi`` (importing it initialises MPI).

Buffers are shared scratch space (contents do not matter to a proxy): every
send reads from one never-written buffer, every receive and in-place
collective writes into one receive buffer, so a rank holds about its largest
message rather than the sum of its messages.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np
from mpi4py import MPI

from .accounting import buffer_needs
from .ops import Collective, Compute, Op, Recv, Send, Testany, Wait
from .program import Workload

SCHEDULE_TAG = 30000  # tag of the project's own collective schedules (MPI_TAG_UB >= 32767)
COMPUTE_MODES = ("sleep", "spin", "none")
PROGRESS_MODES = ("blocking", "poll")


def describe(op: Op) -> str:
    """A human-readable operation, for timeouts and traces."""
    if isinstance(op, Compute):
        return f"{op.label} ({op.duration_us:g} us compute)"
    if isinstance(op, Send):
        return f"{op.label}: send {op.size_bytes} B to rank {op.peer} (tag {op.tag}, {op.group})"
    if isinstance(op, Recv):
        return f"{op.label}: recv {op.size_bytes} B from rank {op.peer} (tag {op.tag}, {op.group})"
    if isinstance(op, Collective):
        kind = op.op if op.req is None else "i" + op.op
        return f"{op.label}: {kind} of {op.count_elems} elements on the {op.group} group"
    if isinstance(op, Wait):
        return f"{op.label} for requests {list(op.reqs)}"
    return f"{op.label} on requests {list(op.reqs)}"


class Watchdog:
    """Aborts the job when one operation blocks longer than ``timeout_s``.

    Runs in a thread that never calls MPI: it prints and exits the process,
    and the launcher then tears the other ranks down.
    """

    def __init__(self, rank: int, timeout_s: float) -> None:
        self.rank = rank
        self.timeout_s = timeout_s
        self.what = "start-up"
        self.since = time.perf_counter()
        if timeout_s > 0:
            threading.Thread(target=self._watch, daemon=True, name="watchdog").start()

    def enter(self, what: str) -> None:
        self.what, self.since = what, time.perf_counter()

    def _watch(self) -> None:
        period = min(1.0, self.timeout_s / 4)
        while True:
            time.sleep(period)
            stuck = time.perf_counter() - self.since
            if stuck > self.timeout_s:
                sys.stderr.write(
                    f"error: rank {self.rank} timed out after {stuck:.0f} s (--timeout "
                    f"{self.timeout_s:g}) in {self.what}; aborting the job\n"
                )
                sys.stderr.flush()
                os._exit(124)


@dataclass
class PhaseRun:
    """One rank's timings of one phase; times in seconds from the phase start."""

    name: str
    ops: list[Op]
    iteration_starts: list[float]
    total_s: float
    starts: list[list[float]] = field(default_factory=list)  # per timed iteration, per op
    ends: list[list[float]] = field(default_factory=list)


class MPIExecutor:
    """Runs a workload's phases on COMM_WORLD."""

    def __init__(
        self,
        workload: Workload,
        *,
        compute: str = "sleep",
        timeout_s: float = 300.0,
        progress: str = "blocking",
        comm: MPI.Intracomm | None = None,
    ) -> None:
        if compute not in COMPUTE_MODES:
            raise ValueError(f"compute must be one of {COMPUTE_MODES} (got {compute!r})")
        self.world = comm or MPI.COMM_WORLD
        self.rank = self.world.Get_rank()
        self.workload = workload
        self.compute_mode = compute
        if progress not in PROGRESS_MODES:
            raise ValueError(f"progress must be one of {PROGRESS_MODES} (got {progress!r})")
        self.progress = progress
        self.watchdog = Watchdog(self.rank, timeout_s)
        self.programs = {ph.name: ph.program(self.rank) for ph in workload.phases}
        self.needs = buffer_needs(workload, self.rank, list(self.programs.values()))
        self.comms: dict[str, MPI.Intracomm] = {}
        self.index: dict[str, dict[int, int]] = {}
        self.sbuf = np.zeros(0, np.float32)
        self.rbuf = np.zeros(0, np.float32)
        self._leftover: list[MPI.Request] = []

    # -- set-up -----------------------------------------------------------------
    def create_communicators(self) -> None:
        """One communicator per group kind, split from the world in a fixed order."""
        self.watchdog.enter("communicator creation")
        for kind, groups in self.workload.groups.items():
            color, key = MPI.UNDEFINED, 0
            for i, g in enumerate(groups):
                if self.rank in g:
                    color, key = i, g.index(self.rank)
                    break
            comm = self.world.Split(color, key)
            if comm != MPI.COMM_NULL:
                self.comms[kind] = comm
                group = self.workload.group_of(kind, self.rank)
                self.index[kind] = {r: i for i, r in enumerate(group)}

    def allocate(self) -> None:
        # np.zeros commits no page until written: the send buffer, never
        # written, stays on the shared zero page.
        self.sbuf = np.zeros(max(1, self.needs.send_elems), np.float32)
        self.rbuf = np.zeros(max(1, self.needs.recv_elems), np.float32)

    # -- compiling operations into calls ---------------------------------------
    def _compute(self, duration_us: float) -> Callable[[], None]:
        d = duration_us * 1e-6
        if self.compute_mode == "none" or d <= 0:
            return _noop
        if self.compute_mode == "sleep":
            return partial(time.sleep, d)

        def spin() -> None:
            end = time.perf_counter() + d
            while time.perf_counter() < end:
                pass

        return spin

    def _complete(self, start: Callable[[], MPI.Request]) -> Callable[[], None]:
        """A blocking call: MPI's own, or (poll mode) its non-blocking form polled."""
        return partial(_poll_one, start)

    def _compile(self, op: Op, reqs: list[MPI.Request]) -> Callable[[], None]:
        poll = self.progress == "poll"
        if isinstance(op, Compute):
            return self._compute(op.duration_us)
        if isinstance(op, (Send, Recv)):
            comm, peer = self.comms[op.group], self.index[op.group][op.peer]
            buf = (self.sbuf if isinstance(op, Send) else self.rbuf)[: op.count_elems]
            post = comm.Isend if isinstance(op, Send) else comm.Irecv
            if op.req is not None:
                return partial(_post, reqs, op.req, post, buf, peer, op.tag)
            if poll:
                return self._complete(partial(post, buf, peer, op.tag))
            call = comm.Send if isinstance(op, Send) else comm.Recv
            return partial(call, buf, peer, op.tag)
        if isinstance(op, Collective):
            return self._compile_collective(op, reqs)
        if isinstance(op, Wait):
            ids = op.reqs
            if poll:
                return lambda: _poll_all([reqs[i] for i in ids])
            return lambda: MPI.Request.Waitall([reqs[i] for i in ids])
        if isinstance(op, Testany):
            ids = op.reqs

            def testany() -> None:
                pending = [reqs[i] for i in ids]
                MPI.Request.Testany(pending)
                for i, r in zip(ids, pending, strict=True):
                    reqs[i] = r

            return testany
        raise TypeError(f"unknown operation {op!r}")

    def _compile_collective(self, op: Collective, reqs: list[MPI.Request]) -> Callable[[], None]:
        comm = self.comms[op.group]
        p, n = comm.Get_size(), op.count_elems
        if op.algorithm is not None:
            return self._compile_schedule(op, comm, reqs)
        # Poll mode runs blocking collectives through their non-blocking form.
        nb = op.req is not None or self.progress == "poll"
        rb, sb = self.rbuf, self.sbuf
        if op.op == "allreduce":
            f = partial(comm.Iallreduce if nb else comm.Allreduce, MPI.IN_PLACE, rb[:n], MPI.SUM)
        elif op.op == "allgather":
            f = partial(comm.Iallgather if nb else comm.Allgather, MPI.IN_PLACE, rb[: n * p])
        elif op.op == "reduce_scatter":
            f = partial(
                comm.Ireduce_scatter_block if nb else comm.Reduce_scatter_block,
                MPI.IN_PLACE,
                rb[: n * p],
                MPI.SUM,
            )
        elif op.op == "alltoall":
            f = partial(comm.Ialltoall if nb else comm.Alltoall, sb[: n * p], rb[: n * p])
        elif op.op == "bcast":
            f = partial(comm.Ibcast if nb else comm.Bcast, rb[:n], op.root)
        elif op.op == "reduce":
            f = partial(comm.Ireduce if nb else comm.Reduce, sb[:n], rb[:n], MPI.SUM, op.root)
        elif op.op == "barrier":
            f = comm.Ibarrier if nb else comm.Barrier
        else:
            raise ValueError(f"unknown collective {op.op!r}")
        if op.req is not None:
            return partial(_post_call, reqs, op.req, f)
        if nb:
            return self._complete(f)
        return f

    def _compile_schedule(
        self, op: Collective, comm: MPI.Intracomm, reqs: list[MPI.Request]
    ) -> Callable[[], None]:
        """Run the project's point-to-point schedule for this collective.

        Schedules run to completion when posted: a non-blocking collective with
        a named algorithm is complete (a null request) by the time it returns.
        """
        from .collectives import build_schedule

        sched = build_schedule(op.op, op.algorithm, comm.Get_size(), op.count_elems, root=op.root)
        steps = sched.rank_steps(comm.Get_rank())
        sb, rb = self.sbuf, self.rbuf

        def run() -> None:
            for sends, recvs in steps:
                pending = [comm.Irecv(rb[: t.count_elems], t.src, SCHEDULE_TAG) for t in recvs]
                pending += [comm.Isend(sb[: t.count_elems], t.dst, SCHEDULE_TAG) for t in sends]
                MPI.Request.Waitall(pending)
            if op.req is not None:
                reqs[op.req] = MPI.REQUEST_NULL

        return run

    # -- running ----------------------------------------------------------------
    def run_phase(
        self, name: str, warmup: int, runs: int, progress: Callable[[str], None] | None = None
    ) -> PhaseRun:
        ops = self.programs[name]
        nreq = 1 + max((o.req for o in ops if getattr(o, "req", None) is not None), default=-1)
        reqs: list[MPI.Request] = [MPI.REQUEST_NULL] * nreq
        calls = [self._compile(op, reqs) for op in ops]
        what = [f"operation #{i} of phase {name!r}: {describe(op)}" for i, op in enumerate(ops)]
        waited = {r for op in ops if isinstance(op, Wait) for r in op.reqs}
        unwaited = [r for r in range(nreq) if r not in waited]
        wd = self.watchdog
        for it in range(warmup):
            for call, w in zip(calls, what, strict=True):
                wd.enter(f"{w} (warm-up iteration {it})")
                call()
            self._leftover += [reqs[r] for r in unwaited]
        wd.enter(f"the barrier before phase {name!r}")
        self.world.Barrier()
        perf = time.perf_counter
        run = PhaseRun(name, ops, [], 0.0)
        t0 = perf()
        for it in range(runs):
            starts = [0.0] * len(calls)
            ends = [0.0] * len(calls)
            run.iteration_starts.append(perf() - t0)
            for i, call in enumerate(calls):
                t = perf()
                wd.since, wd.what = t, what[i]
                call()
                starts[i] = t - t0
                ends[i] = perf() - t0
            self._leftover += [reqs[r] for r in unwaited]
            run.starts.append(starts)
            run.ends.append(ends)
            if progress is not None:
                progress(f"{name}: iteration {it + 1}/{runs}")
        run.total_s = perf() - t0
        wd.enter(f"completing the requests the reference never waits for (phase {name!r})")
        MPI.Request.Waitall(self._leftover)
        self._leftover.clear()
        return run


POLL_FIRST_S = 2e-5
POLL_MAX_S = 1e-3


def _poll_all(pending: list[MPI.Request]) -> None:
    """Complete requests by testing with a growing sleep in between.

    On an oversubscribed host a blocked rank then sleeps instead of spinning,
    leaving the cores to the ranks that have work (measured on 2 cores, 32
    ranks, 16 MB allreduce in groups of 4: 0.30 s polled, 0.77 s blocking).
    """
    if MPI.Request.Testall(pending):
        return
    pause = POLL_FIRST_S
    while not MPI.Request.Testall(pending):
        time.sleep(pause)
        pause = min(2 * pause, POLL_MAX_S)


def _poll_one(start: Callable[[], MPI.Request]) -> None:
    _poll_all([start()])


def _noop() -> None:
    return None


def _post(
    reqs: list[MPI.Request],
    req: int,
    post: Callable[..., MPI.Request],
    buf: np.ndarray,
    peer: int,
    tag: int,
) -> None:
    reqs[req] = post(buf, peer, tag)


def _post_call(reqs: list[MPI.Request], req: int, f: Callable[[], MPI.Request]) -> None:
    reqs[req] = f()


def library_version() -> str:
    return MPI.Get_library_version().strip().splitlines()[0]


def thread_level_name(level: int) -> str:
    names = {
        MPI.THREAD_SINGLE: "single",
        MPI.THREAD_FUNNELED: "funneled",
        MPI.THREAD_SERIALIZED: "serialized",
        MPI.THREAD_MULTIPLE: "multiple",
    }
    return names.get(level, str(level))


def node_memory_check(
    comm: MPI.Intracomm, resident_bytes: int, available_bytes: int
) -> tuple[int, int, int]:
    """Sum the resident-memory estimates of the ranks sharing this host.

    Returns (estimated bytes on this host, ranks on this host, available bytes
    seen by the host's first rank), as agreed by the ranks of the host.
    """
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    total = node.allreduce(resident_bytes, op=MPI.SUM)
    avail = node.bcast(available_bytes, root=0)
    size = node.Get_size()
    node.Free()
    return total, size, avail


def gather(comm: MPI.Intracomm, obj: object) -> list | None:
    return comm.gather(obj, root=0)


def any_true(comm: MPI.Intracomm, flag: bool) -> bool:
    return bool(comm.allreduce(int(flag), op=MPI.MAX))
