"""A ``concurrent.futures.Executor`` for a study, chosen by how we were launched.

* ``mpiexec -n K python -m mpi4py.futures -m simnet sweep ...``: rank 0 runs the
  command and the other K-1 ranks form mpi4py's shared pool of workers
  (``MPIPoolExecutor`` uses them; nothing is spawned). The documented way.
* ``mpiexec -n K python -m simnet sweep ...`` (every rank runs the command):
  rank 0 submits, the others serve. Both forms go through
  ``MPICommExecutor(COMM_WORLD, root=0)``, which uses the shared pool when
  there is one.
* no MPI launcher: a local ``ProcessPoolExecutor`` (or ``serial``: in-process).

Every form is an ``Executor`` (submit / as_completed), so the study code is
the same on a laptop and on a cluster. mpi4py is imported only for ``mpi``.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from proxies.launch import launch_info

from .sim import PointOutcome

POOL_KINDS = ("auto", "local", "mpi", "serial")


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``timeout``, a Slurm time limit), taken as an interrupt that
    does not wait for the work under way."""


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While inside, SIGTERM raises :class:`Terminated` in the main thread (so a study
    records what it finished, as on Ctrl-C, instead of vanishing); the previous handler
    is restored after."""

    def handler(signum: int, frame: object) -> None:
        raise Terminated

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _worker_init(parent: int | None) -> None:
    """A local worker's initializer. Ctrl-C reaches the whole process group: a worker
    ignores it, so that the task it runs finishes (the driver decides what stops, see
    :func:`run_tasks`). Forked (``parent``: the driver's pid), it also ends when the
    driver ends, however it ends (SIGKILL too), instead of waiting forever for tasks
    (Linux; elsewhere the workers end when their queue closes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent is None:
        return
    # (a handler of the parent's, e.g. sigterm_interrupts', is copied by fork: a worker
    # just ends)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it ended before the line above
        os._exit(1)


def stop_workers(pool: Executor) -> None:
    """End a local pool's worker processes now and wait for them to be gone (the tasks
    they run are lost; their files are written atomically, so none is left
    half-written). An MPI pool's workers are not processes of this one: left alone."""
    procs = list((getattr(pool, "_processes", None) or {}).values())  # (ProcessPoolExecutor's)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)


class InlineExecutor(Executor):
    """Runs every task at submission, in this process (debugging, tiny sweeps)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        f: Future = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as e:
            f.set_exception(e)
            if isinstance(e, KeyboardInterrupt):
                raise
        return f


def in_mpi4py_futures_pool() -> bool:
    """True when running under ``python -m mpi4py.futures`` (rank 0 of a shared pool).

    mpi4py records the shared pool in ``mpi4py.futures._core.SharedPool`` (not a
    public name, hence the defensive lookup); it is only set when that module was
    already imported by ``-m mpi4py.futures``.
    """
    core = sys.modules.get("mpi4py.futures._core")
    return getattr(core, "SharedPool", None) is not None


def launched_under_mpi() -> bool:
    """An MPI launcher started several processes (from its environment, without MPI)."""
    return in_mpi4py_futures_pool() or launch_info().world_size > 1


def launch_rank() -> int:
    """This process's rank as the launcher says (0 without a launcher)."""
    return launch_info().rank


def resolve_kind(kind: str) -> str:
    if kind not in POOL_KINDS:
        raise ValueError(f"--executor must be one of {', '.join(POOL_KINDS)} (got {kind!r})")
    if kind == "auto":
        return "mpi" if launched_under_mpi() else "local"
    return kind


@contextmanager
def open_pool(
    kind: str = "auto", workers: int | None = None
) -> Iterator[tuple[Executor | None, str]]:
    """Yield ``(executor, description)``; the executor is None on MPI ranks that serve.

    ``workers``: local pool size (default: the cores of this machine); for
    ``mpi`` without a launcher, the number of workers to spawn.
    """
    kind = resolve_kind(kind)
    if kind == "serial":
        yield InlineExecutor(), "serial (in this process)"
        return
    if kind == "local":
        n = max(1, workers or os.cpu_count() or 1)
        # Forked workers (as Linux's default was before Python 3.14, which forks a
        # server that starts them): their parent is this process, the one whose end
        # _worker_init watches for.
        fork = "fork" in multiprocessing.get_all_start_methods()
        ex = ProcessPoolExecutor(
            max_workers=n,
            mp_context=multiprocessing.get_context("fork") if fork else None,
            initializer=_worker_init,
            initargs=(os.getpid() if fork else None,),
        )
        try:
            yield ex, f"local process pool ({n} workers)"
        except BaseException:
            ex.shutdown(wait=False, cancel_futures=True)
            raise
        ex.shutdown(wait=True)
        return
    from mpi4py import MPI
    from mpi4py.futures import MPICommExecutor, MPIPoolExecutor

    size = MPI.COMM_WORLD.Get_size()
    if size > 1 or in_mpi4py_futures_pool():
        # MPICommExecutor also recognises mpi4py.futures' shared pool and then uses it.
        how = (
            "mpi4py.futures shared pool"
            if in_mpi4py_futures_pool()
            else "MPICommExecutor on COMM_WORLD"
        )
        with MPICommExecutor(MPI.COMM_WORLD, root=0) as ex:
            yield ex, f"MPI pool ({how}, {max(1, size - 1)} workers)"
        return
    n = max(1, workers or 1)
    with MPIPoolExecutor(max_workers=n) as ex:
        yield ex, f"MPI pool ({n} spawned workers)"


def pool_slots(pool: Executor) -> int:
    """How many tasks ``pool`` runs at once: its workers (mpi4py's ``num_workers``,
    ProcessPoolExecutor's ``_max_workers``); 1 for one that runs them in this process."""
    n = getattr(pool, "num_workers", None)
    if not isinstance(n, int):
        n = getattr(pool, "_max_workers", None)
    return max(1, n) if isinstance(n, int) else 1


PROGRESS_EVERY_S = 15.0
"""While tasks run, a line saying which and for how long at least this often."""


class Interrupts:
    """Ctrl-C (SIGINT) while a study runs: the first is counted (:func:`run_tasks` then
    starts no other task and lets the running ones finish); the second raises
    KeyboardInterrupt (stop them at once); any later one, and any once the results are
    being written (:attr:`finishing`), is ignored, so that the table of what is complete
    is written. The handler only counts: it never prints (a print it interrupted would
    fail as a reentrant call)."""

    def __init__(self) -> None:
        self.count = 0
        self.finishing = False

    def _handler(self, signum: int, frame: object) -> None:
        self.count += 1
        if self.count == 2 and not self.finishing:
            raise KeyboardInterrupt

    @contextmanager
    def installed(self) -> Iterator[Interrupts]:
        """Handle SIGINT so while inside (the main thread only: elsewhere, as before)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        old = signal.signal(signal.SIGINT, self._handler)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, old)


@dataclass
class TaskRun:
    """How :func:`run_tasks` ended. ``interrupted``: None (every task ran), "ctrl-c" (no
    task started after the first Ctrl-C; those running then finished), "at once" (a
    second Ctrl-C) or "terminated" (SIGTERM); ``lost``: the tasks stopped while running;
    ``not_started``: those never handed out."""

    interrupted: str | None = None
    lost: list[Any] = field(default_factory=list)
    not_started: list[Any] = field(default_factory=list)


WORKER_DIED = (
    "its simulation worker died (killed, e.g. by the out-of-memory killer), which "
    "stops the pool's other simulations too"
)


def _outcome(fut: Future) -> PointOutcome:
    """A finished task's outcome; the pool's failure (a worker died) as one."""
    try:
        return fut.result()
    except BrokenProcessPool:
        return PointOutcome(error=WORKER_DIED, kind="pool")
    except Exception as e:
        return PointOutcome(error=f"{type(e).__name__}: {e}", kind="pool")


def run_tasks(
    pool: Executor,
    tasks: Sequence[tuple[Any, Callable[..., PointOutcome], tuple[Any, ...]]],
    on_result: Callable[[Any, PointOutcome], None],
    *,
    stop: Interrupts,
    say: Callable[[str], None],
    progress: Callable[[str], None] | None = None,
    describe: Callable[[Any], str] = str,
    what: str = "points",
) -> TaskRun:
    """Run ``tasks`` (key, function, arguments) on ``pool``, ``on_result(key, outcome)``
    as each finishes. No more are handed out than the pool has workers: a task queued
    in an executor cannot be withdrawn, so after a Ctrl-C (counted by ``stop``) none
    starts and only those running finish. A second Ctrl-C, or SIGTERM (``Terminated``),
    stops the running ones at once (a local pool's workers are ended). ``progress``
    gets, every :data:`PROGRESS_EVERY_S`, which tasks run and for how long."""
    run = TaskRun()
    queue = list(tasks)
    slots = pool_slots(pool)
    running: dict[Future, tuple[Any, float]] = {}
    started = last_line = time.perf_counter()
    told = False
    # The task being handed out: off the queue, not yet counted running (a serial executor
    # runs it inside submit): a second Ctrl-C there must still count it somewhere.
    handing: Any = None
    try:
        while queue or running:
            while queue and not stop.count and len(running) < slots:
                key, fn, args = queue[0]
                handing = key
                del queue[0]
                try:
                    fut = pool.submit(fn, *args)
                except (BrokenProcessPool, RuntimeError):  # (it broke: a worker died)
                    handing = None
                    on_result(key, PointOutcome(error=WORKER_DIED, kind="pool"))
                    continue
                running[fut] = (key, time.perf_counter())
                handing = None
            if stop.count and not told:
                told = True
                run.interrupted = "ctrl-c"
                run.not_started = [key for key, _fn, _args in queue]
                queue.clear()
                keys = [describe(k) for k, _t in running.values()]
                say(
                    f"\ninterrupted: no other {what[:-1]} starts"
                    + (
                        f"; waiting for the {len(keys)} being simulated ({', '.join(keys)}; "
                        "Ctrl-C again: stop them at once)"
                        if keys
                        else ""
                    )
                )
            if not running:
                break
            # (short waits: a Ctrl-C is seen, and said, within a second)
            done, _ = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
            for fut in done:
                key, _t = running.pop(fut)
                if isinstance(fut.exception(), KeyboardInterrupt):
                    # Ctrl-C reached the worker (an MPI pool's ranks all get it, and do not
                    # ignore it): the task was stopped, not failed; no second Ctrl-C here.
                    run.lost.append(key)
                    run.interrupted = run.interrupted or "ctrl-c"
                    continue
                on_result(key, _outcome(fut))
            now = time.perf_counter()
            if progress is not None and running and now - last_line >= PROGRESS_EVERY_S:
                last_line = now
                progress(
                    f"[{now - started:7.1f} s] simulating "
                    + ", ".join(f"{describe(k)} ({now - t0:.0f} s)" for k, t0 in running.values())
                )
    except KeyboardInterrupt as e:
        stop.finishing = True  # (what follows is the table: no further Ctrl-C stops it)
        run.interrupted = "terminated" if isinstance(e, Terminated) else "at once"
        run.not_started += [key for key, _fn, _args in queue]
        if handing is not None:  # (run inside submit by a serial executor: stopped there)
            (run.lost if isinstance(pool, InlineExecutor) else run.not_started).append(handing)
        if running:
            say(
                f"\n{'terminated' if isinstance(e, Terminated) else 'interrupted again'}: "
                f"stopping the {what} being simulated"
            )
        for fut in running:
            fut.cancel()
        stop_workers(pool)
        for fut, (key, _t) in running.items():
            # A task that finished as the interrupt came is kept; the others are lost.
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                on_result(key, fut.result())
            else:
                run.lost.append(key)
        pool.shutdown(wait=False, cancel_futures=True)
    stop.finishing = True
    if run.interrupted == "ctrl-c" and not run.not_started and not run.lost:
        run.interrupted = None  # (Ctrl-C with nothing left to start: every task ran)
    return run
