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
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

from proxies.launch import launch_info

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


def _die_with_parent(parent: int) -> None:
    """A local worker's initializer: end when the process that started it ends, however
    it ends (SIGKILL too), instead of waiting forever for tasks (Linux; elsewhere the
    workers end when their queue closes)."""
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
    """End a local pool's worker processes now (the tasks they run are lost; their
    files are written atomically, so none is left half-written)."""
    procs = getattr(pool, "_processes", None) or {}  # (ProcessPoolExecutor's own)
    for proc in list(procs.values()):
        proc.terminate()


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
        # _die_with_parent watches for.
        fork = "fork" in multiprocessing.get_all_start_methods()
        ex = ProcessPoolExecutor(
            max_workers=n,
            mp_context=multiprocessing.get_context("fork") if fork else None,
            initializer=_die_with_parent if fork else None,
            initargs=(os.getpid(),) if fork else (),
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
