"""Launching real MPI runs of the proxies from simnet's tools.

Every run gets its own process group, so a timeout or Ctrl-C stops mpiexec
and all its ranks together.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simnet.config import Config

EXIT_TIMEOUT = 124
NO_SCHEDULE_ALGORITHMS = ("multiring", "hierarchical")  # need parameters a proxy lacks


def mpiexec() -> str:
    """The MPI launcher: the one beside the Python that runs this (a virtual or conda
    environment's ``bin/``, where the MPI wheel puts it, so that an environment need not
    be activated), else the first on ``PATH``."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("mpiexec") or "mpiexec"


def as_mpi_run(cfg: Config) -> tuple[Config, list[str]]:
    """The configuration that predicts a real run of the proxies, and a note: the run
    sends every collective as MPI messages (an NCCL algorithm's schedule too), so the
    prediction runs them as MPI does (``collectives.library = mpi``) unless the
    configuration says otherwise."""
    if cfg.collectives.library is not None:
        return cfg, []
    mpi = cfg.model_copy(
        update={"collectives": cfg.collectives.model_copy(update={"library": "mpi"})}
    )
    notes = (
        [
            "prediction: collectives as MPI runs them (collectives.library = mpi), as the "
            "real run sends them, not as NCCL would"
        ]
        if cfg.collectives.names_nccl
        else []
    )
    return mpi, notes


def proxy_command(
    cfg: Config,
    out_json: Path,
    out_trace: Path,
    iters: int | None,
    warmup: int | None,
) -> tuple[list[str], list[str]]:
    """The mpiexec command line of the configured proxy, and notes on it."""
    from simnet.simulate import run_spec

    w = cfg.workload
    notes = []
    alg = cfg.collectives.algorithm
    algorithm = alg if alg and alg not in NO_SCHEDULE_ALGORITHMS else None
    spec = run_spec(cfg).replace(algorithm=algorithm, iters=iters, warmup=warmup)
    cmd = [
        mpiexec(),
        "-n",
        str(cfg.world_size),
        sys.executable,
        *spec.proxy_argv(),
        "--json",
        str(out_json),
        "--trace",
        str(out_trace),
    ]
    if algorithm:
        notes.append(f"real run: every collective with the project's {alg} schedule")
    else:
        if alg:
            notes.append(
                f"real run: the MPI library's collectives (collectives.algorithm = {alg} "
                "needs parameters a proxy run does not take)"
            )
        if cfg.collectives.by_op:
            notes.append(
                "real run: the MPI library's collectives; collectives.by_op applies to "
                "the prediction only"
            )
    if w.compute_scale != 1:
        notes.append(
            f"prediction: compute scaled by {w.compute_scale:g} (workload.compute_scale); "
            "the real run sleeps the programs' compute as written"
        )
    return cmd, notes


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM it if this process dies (Linux), so that a
    launcher killed outright (SIGKILL, OOM) does not leave mpiexec and its ranks
    running; mpiexec passes the signal on to its ranks."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the signal handlers below still hold
        pass


def start_group(cmd: Sequence[str], **popen_kw: Any) -> subprocess.Popen:
    """``subprocess.Popen(cmd)`` in a session of its own that gets SIGTERM if this
    process dies, with stdin from /dev/null.

    A Ctrl-C that lands while Popen forks is raised inside the parent's at-fork handlers
    (logging's lock release), where Python prints "Exception ignored" and drops it: the
    run would go on as if no one had asked it to stop. So SIGINT is noted here as well as
    raised, and a noted one stops the new group and is raised again once Popen returns.
    """
    noted: list[int] = []

    def note(signum: int, _frame: object) -> None:
        noted.append(signum)
        raise KeyboardInterrupt

    ours = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    old = signal.signal(signal.SIGINT, note) if ours else None
    try:
        proc = subprocess.Popen(
            list(cmd),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
            **popen_kw,
        )
    finally:
        if ours:
            signal.signal(signal.SIGINT, old)
    if noted:
        stop_group(proc)
        raise KeyboardInterrupt
    return proc


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP (``kill``, a closed terminal or ssh session) raise
    KeyboardInterrupt here, as Ctrl-C does, so the caller stops every process it
    started; the previous handlers come back afterwards. Only in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    old = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def stops_on_signals(main: Callable[..., int]) -> Callable[..., int]:
    """A command's ``main`` with SIGTERM and SIGHUP turned into KeyboardInterrupt for all
    of its run (:func:`stop_on_signals`), not only while a subprocess runs: killed while
    it predicts or writes, it stopped with exit 143 and no word."""

    @functools.wraps(main)
    def run(*args: Any, **kw: Any) -> int:
        with stop_on_signals():
            return main(*args, **kw)

    return run


def ignored_settings(cfg: Config) -> list[str]:
    """Notes on configuration fields these commands (the main job, validate, the testbed)
    read but do not act on, to be printed rather than silently ignored."""
    notes = []
    if not cfg.logging.enable_metrics:
        notes.append(
            "logging.enable_metrics = false is not used: the run's measurements and their "
            "comparison with the prediction are its results, and every file is written"
        )
    return notes


def interrupt_cause(e: KeyboardInterrupt) -> str:
    """What interrupted the run, for its one line: the signal :func:`stop_on_signals`
    turned into ``e`` (SIGTERM: ``kill``; SIGHUP: a closed terminal), else Ctrl-C."""
    text = str(e)
    if text.startswith("signal SIG"):
        return text.removeprefix("signal ")
    return "Ctrl-C"


def run_proxy(cmd: list[str], timeout_s: float, echo: bool = True) -> tuple[int, str]:
    """Run ``cmd`` in its own process group; returns (exit code, output).

    Output is echoed as it comes (when ``echo``). Past ``timeout_s`` the whole
    group is stopped and the code is :data:`EXIT_TIMEOUT`; what the stop makes the
    processes print (mpiexec's "Press Ctrl-C again", the ranks' "interrupted (SIGINT:
    Ctrl-C ...)") is kept in the output returned but not echoed: it reads as a Ctrl-C
    and hid the caller's one-line reason, printed after this returns. Ctrl-C, SIGTERM
    and SIGHUP stop the group and raise KeyboardInterrupt; if this process dies
    outright, the group gets SIGTERM.
    """
    proc = start_group(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines: list[str] = []
    timed_out = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if echo and not timed_out.is_set():
                sys.stdout.write(line)
                sys.stdout.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        with stop_on_signals():
            rc = proc.wait(timeout=timeout_s if timeout_s > 0 else None)
    except subprocess.TimeoutExpired:
        timed_out.set()
        stop_group(proc)
        rc = EXIT_TIMEOUT
    except KeyboardInterrupt:
        stop_group(proc, interrupted=True)
        raise
    reader.join(timeout=5)
    return rc, "".join(lines)


@dataclass
class CommandResult:
    returncode: int | None  # None: killed after the timeout
    output: str
    wall_s: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def run_command(
    cmd: Sequence[str],
    timeout_s: float,
    log_path: Path | None = None,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> CommandResult:
    """Run ``cmd`` in its own process group, capturing stdout+stderr.

    After ``timeout_s`` (or on Ctrl-C, SIGTERM, SIGHUP) the whole group is stopped:
    SIGINT, SIGTERM, then SIGKILL, a few seconds apart; the interruption is re-raised
    as KeyboardInterrupt.
    """
    started = time.perf_counter()
    proc = start_group(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd
    )
    try:
        with stop_on_signals():
            out, _ = proc.communicate(timeout=timeout_s if timeout_s > 0 else None)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        stop_group(proc)
        try:
            out, _ = proc.communicate(timeout=10.0)
        except subprocess.TimeoutExpired:  # a grandchild in another group holds the pipe
            out = ""
        rc = None
    except KeyboardInterrupt:
        stop_group(proc, interrupted=True)
        raise
    result = CommandResult(rc, out or "", time.perf_counter() - started)
    if log_path is not None:
        from workload.results import write_text

        write_text(log_path, f"$ {' '.join(cmd)}\n{result.output}")
    return result


HYDRA_TEMP_PREFIX = "/tmp/hydra_hwloc_xmlfile_"
"""MPICH's launcher (each host's hydra_pmi_proxy) writes the machine's topology there
for its ranks, holds it open and removes it as it exits: a proxy killed outright
leaves it behind."""


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (from /proc; the launcher's proxies and ranks
    move to process groups of their own, so the group alone does not find them)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def _hydra_temp_files(pids: Sequence[int]) -> set[str]:
    """The MPICH launcher's temporary files the processes ``pids`` hold open."""
    held = set()
    for p in pids:
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{p}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(HYDRA_TEMP_PREFIX):
                held.add(target)
    return held


def stop_group(proc: subprocess.Popen, interrupted: bool = False) -> None:
    """Stop a process started with ``start_new_session=True`` and all its children.

    SIGINT, then SIGTERM, then SIGKILL to the whole group, a few seconds apart,
    until the leader exits; then SIGKILL to whatever is left of the group (a
    child that ignored the signals would otherwise keep running, and keep the
    output pipe open). More Ctrl-Cs (or SIGTERM, SIGHUP) while it stops do not cut
    the stop short: they are noted and dropped (three Ctrl-Cs 0.1 s apart used to
    interrupt the wait, and MPICH's launcher, killed, left its temporary files). The
    launcher's temporary files its processes held are removed if they are still there.
    ``interrupted``: the stop answers a Ctrl-C, SIGTERM or SIGHUP, so the process is on
    its way out: Ctrl-C stays ignored for the rest of it, so that another one does not
    cut its clean-up short (a testbed's namespaces) or, landing as the interpreter shuts
    down (where Python's handler is gone), turn its exit code 130 into a death by SIGINT.
    """
    calm = threading.current_thread() is threading.main_thread()
    old = {}
    if calm:  # first: a second Ctrl-C may be 0.1 s behind the first
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            old[sig] = signal.signal(sig, lambda *_: None)  # the stop is under way
    held: set[str] = set()
    try:
        held = _hydra_temp_files(_descendants(proc.pid))
        for sig, grace in ((signal.SIGINT, 3.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                continue
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, signal.SIG_IGN if interrupted and sig == signal.SIGINT else handler)
        for path in held:  # (a proxy that exited in order removed its own)
            with contextlib.suppress(OSError):
                os.unlink(path)
