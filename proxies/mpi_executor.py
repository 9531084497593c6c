"""The MPI executor: runs rank programs as real mpi4py calls on scratch buffers.

This is the only module that calls MPI. Import it only after
``launch.prepare_mpi`` (importing it initialises MPI).

Buffers are shared scratch space (contents do not matter to a proxy): every
send reads from one never-written buffer, every receive writes into one receive
buffer, so a rank holds about its largest message rather than the sum of its
messages. Collectives pass a send and a receive buffer, as the reference proxies
do (they never use MPI_IN_PLACE), so the library runs the same code path: reading
the never-written send buffer reads the kernel's zero page, as the reference's
calloc'd send buffers do. Over a group of one rank they run in place, so that a
copy-only call (GPT-3's data-parallel allreduce of 1.8 GB on a small world)
commits no receive buffer (the reference copies it).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from mpi4py import MPI

from workload.accounting import buffer_needs
from workload.ops import ELEM_BYTES, Collective, Compute, Op, Recv, Send, Testany, Wait, describe
from workload.program import Workload
from workload.units import us_to_s

from .buffers import NO_ELEMENTS, zeros

# Tags of the project's own schedules: collective k (in program order) on a group
# uses SCHEDULE_TAG + k % SCHEDULE_TAGS, so concurrent non-blocking schedules on one
# communicator never match each other's messages. MPI_TAG_UB is at least 32767.
SCHEDULE_TAG = 20000
SCHEDULE_TAGS = 10000
MEASURE_TAG = 30001  # pairwise bandwidth measurement
COMPUTE_MODES = ("sleep", "spin", "none")
POLL_PAUSE_S = 1e-4  # the default pause; the proxies pass proxies.launch.poll_pause_s
PROGRESS_MODES = ("blocking", "poll")
EXIT_TIMEOUT = 124  # as coreutils' timeout reports a command it stopped


class Watchdog:
    """Aborts the job when one operation blocks longer than ``timeout_s``.

    Runs in a thread that makes no MPI call but the abort: it prints one line, then
    ends the job with exit code 124 (``EXIT_TIMEOUT``).
    """

    # Set-up steps (communicator creation, barriers) are not operations: on an
    # oversubscribed host they may take seconds, so they get at least this long.
    SETUP_ALLOWANCE_S = 120.0
    # In a deadlock every rank times out at once, and each would write its line before
    # the first one's abort ends it: rank r waits r x this longer (at most 8 x), so
    # that the lowest stuck rank reports alone, as a rule (a job's ranks: with ``comm``).
    REPORT_STAGGER_S = 0.05

    def __init__(self, rank: int, timeout_s: float, comm: MPI.Comm | None = None) -> None:
        """``comm``: the job's communicator, aborted with code 124 when this rank times
        out (None: only this process exits, with 124)."""
        self.rank = rank
        self.stagger_s = self.REPORT_STAGGER_S * min(rank, 8) if comm is not None else 0.0
        self.comm = comm
        self.timeout_s = timeout_s
        self.limit_s = max(timeout_s, self.SETUP_ALLOWANCE_S)
        self.what = "start-up"
        self.since = time.perf_counter()
        if timeout_s > 0:
            threading.Thread(target=self._watch, daemon=True, name="watchdog").start()

    def enter(self, what: str, setup: bool = False) -> None:
        """Start watching ``what``; ``setup`` steps get the set-up allowance."""
        self.limit_s = max(self.timeout_s, self.SETUP_ALLOWANCE_S) if setup else self.timeout_s
        self.what, self.since = what, time.perf_counter()

    def operation(self, what: str, since: float, planned_s: float = 0.0) -> None:
        """Hot-path form of ``enter`` for one operation of a timed loop; ``planned_s``:
        how long it is meant to take (an emulated compute's seconds), not blocking."""
        self.since, self.what, self.limit_s = since, what, self.timeout_s + planned_s

    def _watch(self) -> None:
        period = min(1.0, self.timeout_s / 4)
        while True:
            time.sleep(period)
            stuck = time.perf_counter() - self.since
            if stuck > self.limit_s + self.stagger_s:
                sys.stderr.write(
                    f"error: rank {self.rank} timed out after {stuck:.3g} s (--timeout "
                    f"{self.timeout_s:g}) in {self.what}; aborting the job\n"
                )
                abort_on_timeout(self.comm)


def _let_launcher_read(fd: int, limit_s: float = 0.5) -> None:
    """Wait (at most ``limit_s``) until the launcher has read what this process wrote
    to ``fd``, when ``fd`` is a pipe (as mpiexec's are): an abort may otherwise end
    the launcher's forwarding before the line is through (seen in one run of twelve).
    A fixed pause instead would let the other threads run on, even to a normal exit."""
    import fcntl
    import stat
    import struct
    import termios

    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return
        end = time.perf_counter() + limit_s
        while time.perf_counter() < end:
            unread = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
            if unread == 0:
                return
            time.sleep(0.001)
    except OSError:
        return


def abort_on_timeout(comm: MPI.Comm | None) -> None:
    """End the job with exit code 124 after a rank timed out (its error line written).

    The process leaving by itself is not enough: mpiexec then kills the other ranks,
    and a rank killed by a signal makes mpiexec's exit code that signal's (9, with a
    "BAD TERMINATION" banner) in about one run of four. MPI_Abort with 124 makes the
    launcher end every rank and exit with 124 (MPICH's Hydra and Open MPI's mpirun
    both). MPICH prints a line of its own for the abort: this rank's stderr goes to
    /dev/null first, so that the job's error is the one line already written."""
    sys.stdout.flush()
    sys.stderr.flush()
    if comm is None:
        os._exit(EXIT_TIMEOUT)
    _let_launcher_read(2)
    # MPI_Abort from this thread while the main one is blocked in MPI is beyond what the
    # thread levels below "multiple" promise: should it hang, the rank still ends.
    threading.Timer(5.0, os._exit, (EXIT_TIMEOUT,)).start()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    comm.Abort(EXIT_TIMEOUT)
    os._exit(EXIT_TIMEOUT)  # (MPI_Abort does not return; should it, this rank still ends)


class Pacer:
    """Holds every destination pair to at most ``limit_bytes_per_s``.

    Each chunk to ``dst`` owns a slot of ``size / limit`` seconds that starts
    when the previous chunk's slot ended (or now), and is released at the end
    of its slot: so over any span of chunks, bytes / elapsed <= limit.

    While a sender waits for a release it tests the requests it has posted
    (``sleep_until``'s ``pending``), every ``pause_s`` seconds: an MPI library
    without a progress thread moves a message's bytes only inside its calls, and
    a sender asleep between its chunks stalled the transfers of the chunks it had
    already sent, which a link held to the limit would carry meanwhile.
    """

    def __init__(
        self,
        limit_bytes_per_s: float,
        chunk_bytes: int = 1 << 20,
        pause_s: float = POLL_PAUSE_S,
    ) -> None:
        if limit_bytes_per_s <= 0:
            raise ValueError(f"bandwidth limit must be > 0 bytes/s (got {limit_bytes_per_s})")
        self.limit = float(limit_bytes_per_s)
        self.chunk_elems = max(1, chunk_bytes // ELEM_BYTES)
        self.pause_s = pause_s
        self.next_s: dict[int, float] = {}
        self.waited_s = 0.0

    def reserve(self, dst: int, size_bytes: int) -> float:
        """The release time (perf_counter seconds) of the next chunk to ``dst``."""
        now = time.perf_counter()
        release = max(now, self.next_s.get(dst, now)) + size_bytes / self.limit
        self.next_s[dst] = release
        return release

    def sleep_until(self, release: float, pending: list[MPI.Request] | None = None) -> None:
        """Return at ``release`` (perf_counter seconds), testing ``pending`` (requests
        already posted) meanwhile, so that their transfers go on while this rank waits."""
        delay = release - time.perf_counter()
        if delay <= 0:
            return
        self.waited_s += delay
        while pending and not MPI.Request.Testall(pending):
            left = release - time.perf_counter()
            if left <= 0:
                return
            time.sleep(min(left, self.pause_s))
        left = release - time.perf_counter()
        if left > 0:
            time.sleep(left)

    def wait(self, dst: int, size_bytes: int, pending: list[MPI.Request] | None = None) -> None:
        self.sleep_until(self.reserve(dst, size_bytes), pending)


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
        poll_pause_s: float = POLL_PAUSE_S,
    ) -> None:
        """``poll_pause_s``: seconds a waiting rank sleeps between tests in poll mode."""
        if compute not in COMPUTE_MODES:
            raise ValueError(f"compute must be one of {COMPUTE_MODES} (got {compute!r})")
        self.world = comm or MPI.COMM_WORLD
        self.rank = self.world.Get_rank()
        self.workload = workload
        self.compute_mode = compute
        if progress not in PROGRESS_MODES:
            raise ValueError(f"progress must be one of {PROGRESS_MODES} (got {progress!r})")
        self.progress = progress
        if not poll_pause_s > 0:
            raise ValueError(f"poll_pause_s must be > 0 (got {poll_pause_s!r})")
        self.poll_pause_s = float(poll_pause_s)
        self._poll = partial(_poll_all, pause_s=self.poll_pause_s)
        self.watchdog = Watchdog(self.rank, timeout_s, self.world)
        self.programs = {ph.name: ph.program(self.rank) for ph in workload.phases}
        self.needs = buffer_needs(workload, self.rank, list(self.programs.values()))
        self.comms: dict[str, MPI.Intracomm] = {}
        self.index: dict[str, dict[int, int]] = {}
        self.sbuf = NO_ELEMENTS
        self.rbuf = NO_ELEMENTS
        self._leftover: list[MPI.Request] = []
        self.pacer: Pacer | None = None
        self.buffer_bytes: int | None = None
        # Bytes this rank sent by the project's schedules and point-to-point
        # operations: (op label, reduced data?, destination rank) -> bytes.
        self.sent_bytes: dict[tuple[str, bool, int], int] = {}
        self.overruns: dict[tuple[str, int], dict] = {}
        self.step = 0  # iterations run so far (warm-up included)
        self._schedule_seq: dict[str, int] = {}  # schedules compiled per group kind

    # -- set-up -----------------------------------------------------------------
    def create_communicators(self) -> None:
        """One communicator per group kind, split from the world in a fixed order."""
        self.watchdog.enter("communicator creation", setup=True)
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
        self.sbuf = zeros(self.needs.send_elems)
        self.rbuf = zeros(self.needs.recv_elems)

    # -- compiling operations into calls ---------------------------------------
    def _compute(self, duration_us: float) -> Callable[[], None]:
        d = us_to_s(duration_us)
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
        return partial(_poll_one, start, self.poll_pause_s)

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
            complete = self._poll if poll else MPI.Request.Waitall
            return lambda: _wait_all([reqs[i] for i in ids], complete)
        if isinstance(op, Testany):
            ids = op.reqs

            def testany() -> None:
                # Schedules advance as far as they can; MPI's requests get one Testany.
                mpi_ids = [i for i in ids if isinstance(reqs[i], MPI.Request)]
                for i in ids:
                    if not isinstance(reqs[i], MPI.Request):
                        reqs[i].test()
                pending = [reqs[i] for i in mpi_ids]
                MPI.Request.Testany(pending)
                for i, r in zip(mpi_ids, pending, strict=True):
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
        alone = p == 1  # in place: nothing to send, and no receive buffer to commit
        if op.op == "allreduce":
            f = partial(
                comm.Iallreduce if nb else comm.Allreduce,
                MPI.IN_PLACE if alone else sb[:n],
                rb[:n],
                MPI.SUM,
            )
        elif op.op == "allgather":
            f = partial(
                comm.Iallgather if nb else comm.Allgather,
                MPI.IN_PLACE if alone else sb[:n],
                rb[: n * p],
            )
        elif op.op == "reduce_scatter":
            f = partial(
                comm.Ireduce_scatter_block if nb else comm.Reduce_scatter_block,
                MPI.IN_PLACE if alone else sb[: n * p],
                rb[: n * p] if alone else rb[:n],
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
        self, op: Collective, comm: MPI.Intracomm, reqs: list
    ) -> Callable[[], None]:
        """Run the project's point-to-point schedule for this collective.

        A blocking collective runs its steps to the end. A non-blocking one posts
        its first step and leaves a :class:`ScheduleRequest` that later Testany
        and Wait operations advance step by step, as an MPI library without an
        asynchronous progress thread would. Bytes sent are counted per (label,
        reduced?, destination rank); with a pacer, every transfer is cut into
        chunks sent no faster than its pair's limit; with a buffer size, larger
        transfers are recorded as overruns.
        """
        from workload.collectives import schedule_for

        sched = schedule_for(
            op.op,
            op.algorithm,
            comm.Get_size(),
            op.count_elems,
            root=op.root,
            params=self.workload.collective_params,
        )
        members = self.workload.group_of(op.group, self.rank)
        seq = self._schedule_seq.get(op.group, 0)
        self._schedule_seq[op.group] = seq + 1
        tag = SCHEDULE_TAG + seq % SCHEDULE_TAGS
        steps = []
        if sched.total_bytes and len(self.sbuf) < max(
            t.count_elems for step in sched.steps for t in step
        ):
            raise RuntimeError(
                f"{op.label}: the send buffer is smaller than the schedule's "
                "largest transfer (allocate() before compiling)"
            )
        for sends, recvs in sched.rank_steps(comm.Get_rank()):
            steps.append(
                (
                    [(t.src, _placed(self.chunks(t.count_elems))) for t in recvs],
                    [
                        (
                            t.dst,
                            members[t.dst],
                            _placed(self.chunks(t.count_elems)),
                            (op.label, t.reduce, members[t.dst]),
                            t.size_bytes,
                        )
                        for t in sends
                    ],
                )
            )
        sb, rb = self.sbuf, self.rbuf
        pacer, counts, buffer = self.pacer, self.sent_bytes, self.buffer_bytes

        def post(k: int) -> list[MPI.Request]:
            recvs, sends = steps[k]
            # A transfer's chunks come from (and land in) their own places of the
            # buffer, as a gradient's pieces would: chunks that all reused its first
            # megabyte stayed in the cache, and a paced run's copies ran 1.5x faster
            # than the same transfers sent whole (10 ranks on 2 cores: 323 against 482
            # ms per step of the seed job).
            pending = [
                comm.Irecv(rb[o : o + c], src, tag) for src, chunks in recvs for o, c in chunks
            ]
            paced = []
            for dst, dst_global, chunks, key, size in sends:
                counts[key] = counts.get(key, 0) + size
                if buffer and size > buffer:
                    self.overrun(op.label, dst_global, size)
                for o, c in chunks:
                    if pacer is None:
                        pending.append(comm.Isend(sb[o : o + c], dst, tag))
                    else:
                        paced.append((pacer.reserve(dst_global, c * ELEM_BYTES), dst, o, c))
            # Destinations are paced side by side: chunks leave in release order.
            for release, dst, o, c in sorted(paced):
                pacer.sleep_until(release, pending)
                pending.append(comm.Isend(sb[o : o + c], dst, tag))
            return pending

        complete = self._poll if self.progress == "poll" else MPI.Request.Waitall
        if op.req is None:
            return lambda: ScheduleRequest(post, len(steps), complete).wait()
        req = op.req

        def start() -> None:
            reqs[req] = ScheduleRequest(post, len(steps), complete)

        return start

    def chunks(self, count_elems: int) -> list[int]:
        """A transfer as sent: whole, or in paced chunks of ``chunk_elems``."""
        if self.pacer is None or count_elems <= self.pacer.chunk_elems:
            return [count_elems]
        k, rest = divmod(count_elems, self.pacer.chunk_elems)
        return [self.pacer.chunk_elems] * k + ([rest] if rest else [])

    def overrun(self, label: str, dst: int, size_bytes: int) -> None:
        key = (label, dst)
        first = self.overruns.get(key)
        if first is None:
            self.overruns[key] = {
                "op": label,
                "src": self.rank,
                "dst": dst,
                "size_bytes": size_bytes,
                "buffer_bytes": self.buffer_bytes,
                "first_step": self.step,
                "count": 1,
            }
        else:
            first["count"] += 1

    # -- running ----------------------------------------------------------------
    def run_phase(
        self, name: str, warmup: int, runs: int, progress: Callable[[str], None] | None = None
    ) -> PhaseRun:
        ops = self.programs[name]
        nreq = 1 + max((o.req for o in ops if getattr(o, "req", None) is not None), default=-1)
        reqs: list[MPI.Request] = [MPI.REQUEST_NULL] * nreq
        self._schedule_seq = {}
        calls = [self._compile(op, reqs) for op in ops]
        what = [f"operation #{i} of phase {name!r}: {describe(op)}" for i, op in enumerate(ops)]
        # An emulated compute is meant to take its time: the watchdog counts what is beyond.
        planned = [
            us_to_s(op.duration_us) if type(op) is Compute and self.compute_mode != "none" else 0.0
            for op in ops
        ]
        waited = {r for op in ops if isinstance(op, Wait) for r in op.reqs}
        unwaited = [r for r in range(nreq) if r not in waited]
        wd = self.watchdog
        for it in range(warmup):
            for call, w, plan in zip(calls, what, planned, strict=True):
                wd.operation(f"{w} (warm-up iteration {it})", time.perf_counter(), plan)
                call()
            self._leftover += [reqs[r] for r in unwaited]
            self.step += 1
        wd.enter(f"the barrier before phase {name!r}", setup=True)
        self.world.Barrier()
        perf = time.perf_counter
        run = PhaseRun(name, ops, [], 0.0)
        t0 = perf()
        last_report = t0
        for it in range(runs):
            starts = [0.0] * len(calls)
            ends = [0.0] * len(calls)
            run.iteration_starts.append(perf() - t0)
            for i, call in enumerate(calls):
                t = perf()
                wd.operation(what[i], t, planned[i])
                call()
                starts[i] = t - t0
                ends[i] = perf() - t0
            self._leftover += [reqs[r] for r in unwaited]
            self.step += 1
            run.starts.append(starts)
            run.ends.append(ends)
            # Progress lines cost terminal I/O inside the timed loop: at most one a second.
            if progress is not None and perf() - last_report >= 1.0:
                last_report = perf()
                progress(f"{name}: iteration {it + 1}/{runs}")
        run.total_s = perf() - t0
        wd.enter(
            f"completing the requests the reference never waits for (phase {name!r})", setup=True
        )
        _wait_all(self._leftover, MPI.Request.Waitall)
        self._leftover.clear()
        wd.enter(f"reporting phase {name!r}", setup=True)
        return run


class ScheduleRequest:
    """A collective in flight on the project's schedule: one step posted at a time.

    ``post(k)`` posts step k's receives and sends and returns their requests;
    ``complete`` waits for a list of requests (MPI's Waitall, or polling).
    """

    __slots__ = ("complete", "n", "pending", "post", "step")

    def __init__(
        self,
        post: Callable[[int], list[MPI.Request]],
        n: int,
        complete: Callable[[list[MPI.Request]], object],
    ) -> None:
        self.post, self.n, self.complete = post, n, complete
        self.step = 0
        self.pending = post(0) if n else []

    def test(self) -> bool:
        """Advance without blocking; True once every step is complete."""
        while self.step < self.n:
            if self.pending and not MPI.Request.Testall(self.pending):
                return False
            self._next()
        return True

    def wait(self) -> None:
        while self.step < self.n:
            self.complete(self.pending)
            self._next()

    def _next(self) -> None:
        self.step += 1
        self.pending = self.post(self.step) if self.step < self.n else []


def _wait_all(items: list, complete: Callable[[list[MPI.Request]], object]) -> None:
    """Wait for MPI requests and schedule requests alike."""
    mpi = [r for r in items if isinstance(r, MPI.Request)]
    if mpi:
        complete(mpi)
    for r in items:
        if not isinstance(r, MPI.Request):
            r.wait()


def _poll_all(pending: list[MPI.Request], pause_s: float = POLL_PAUSE_S) -> None:
    """Complete requests by testing, sleeping ``pause_s`` seconds while nothing completes.

    On an oversubscribed host a blocked rank then sleeps instead of spinning,
    leaving the cores to the ranks that have work (measured on 2 cores, 32
    ranks, 16 MB allreduce in groups of 4: 0.30 s polled, 0.77 s blocking).
    While requests keep completing it retests at once: MPICH may complete one
    request per test, and a sleep per request made a 64-message window ~90x slower.
    The pause is fixed (not growing) so that each step of a library collective,
    which moves on only inside a test, costs about the same: see proxies.launch.
    """
    while not MPI.Request.Testall(pending):
        if MPI.Request.Testsome(pending):
            continue
        time.sleep(pause_s)


def _poll_one(start: Callable[[], MPI.Request], pause_s: float = POLL_PAUSE_S) -> None:
    _poll_all([start()], pause_s)


def _noop() -> None:
    return None


def _post(
    reqs: list[MPI.Request],
    req: int,
    post: Callable[..., MPI.Request],
    buf: memoryview,
    peer: int,
    tag: int,
) -> None:
    reqs[req] = post(buf, peer, tag)


def _post_call(reqs: list[MPI.Request], req: int, f: Callable[[], MPI.Request]) -> None:
    reqs[req] = f()


def library_version() -> str:
    """The MPI library's version line (Open MPI's ends in NUL bytes: dropped)."""
    return " ".join(MPI.Get_library_version().replace("\x00", " ").split("\n")[0].split())


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


def _placed(chunks: list[int]) -> list[tuple[int, int]]:
    """(offset, count) in elements of each chunk of a transfer laid out end to end."""
    out = []
    o = 0
    for c in chunks:
        out.append((o, c))
        o += c
    return out


def pairwise_bandwidth(
    comm: MPI.Intracomm,
    size_bytes: int,
    *,
    reps: int = 3,
    pacer: Pacer | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[list[float]] | None:
    """Measure the one-way bandwidth (bytes/s) of every ordered pair, one pair at a time.

    The sender sends ``size_bytes`` (in paced chunks when a pacer is given),
    the receiver answers with one element; bandwidth = size / round trip, the
    best of ``reps``. Returns the matrix on rank 0 (diagonal 0), None elsewhere.
    """
    rank, n = comm.Get_rank(), comm.Get_size()
    count = max(1, size_bytes // ELEM_BYTES)
    buf = zeros(count)
    ack = zeros(1)
    chunk = pacer.chunk_elems if pacer else count
    pieces = [min(chunk, count - o) for o in range(0, count, chunk)]
    row = [0.0] * n
    for i in range(n):
        if progress and rank == 0:
            progress(f"bandwidth: sender {i + 1}/{n}")
        for j in range(n):
            if i == j:
                continue
            _poll_all([comm.Ibarrier()])
            if rank == i:
                best = float("inf")
                for _ in range(reps):
                    t0 = time.perf_counter()
                    reqs = []
                    for o, c in _placed(pieces):
                        if pacer is not None:
                            pacer.wait(j, c * ELEM_BYTES, reqs)
                        reqs.append(comm.Isend(buf[o : o + c], j, MEASURE_TAG))
                    reqs.append(comm.Irecv(ack, j, MEASURE_TAG + 1))
                    _poll_all(reqs)
                    best = min(best, time.perf_counter() - t0)
                row[j] = count * ELEM_BYTES / best
            elif rank == j:
                for _ in range(reps):
                    _poll_all(
                        [comm.Irecv(buf[o : o + c], i, MEASURE_TAG) for o, c in _placed(pieces)]
                    )
                    _poll_all([comm.Isend(ack, i, MEASURE_TAG + 1)])
    rows = comm.gather(row, root=0)
    return rows


EXIT_INTERRUPTED = 130  # as a shell reports a command ended by SIGINT


def abort_job(comm: MPI.Comm, rank: int) -> None:
    """After an unhandled error on this rank: say so, then abort every rank of the
    job (the others would otherwise wait for it forever). Ctrl-C (KeyboardInterrupt,
    which mpiexec forwards to every rank) is no error: rank 0 says so in one line and
    the job ends with exit code 130."""
    if isinstance(sys.exc_info()[1], KeyboardInterrupt):
        # mpiexec (and srun) forward SIGINT to every rank, so each leaves by itself:
        # MPI_Abort would add a line per rank, and MPICH's returns to the caller.
        if rank == 0:
            # Every rank gets SIGINT: from Ctrl-C, or from the command that started the
            # job stopping it (which then names what stopped it: SIGTERM, SIGHUP).
            sys.stderr.write(
                "interrupted (SIGINT: Ctrl-C, or the command that started the job stopping "
                "it): the job stops, nothing more is written\n"
            )
        # mpiexec kills the ranks still running once one has left with an error (a
        # "BAD TERMINATION" banner and exit code 9): every rank waits as long before
        # leaving, so that they leave together, each with 130.
        time.sleep(0.5)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)
    sys.stderr.write(f"rank {rank}: unhandled error, aborting the job\n")
    traceback.print_exc()
    sys.stderr.flush()
    comm.Abort(1)
