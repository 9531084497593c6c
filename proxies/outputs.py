"""The proxies' result files (--json, --trace), checked before any MPI work."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from workload.results import output_file_problem


def output_files_problem(
    ns: argparse.Namespace, ranks: Iterable[int] = (0,), json: bool = True
) -> str | None:
    """Why ``--json`` (unless ``json`` is False) or ``--trace`` cannot be written,
    checked before any MPI work rather than found after the run; a ``{rank}`` pattern of
    --trace is checked for each rank of ``ranks``.

    Before MPI starts every rank checks rank 0's file (the same answer everywhere, so
    all stop together); once it has started, each rank checks its own
    (:func:`proxies.run.trace_files_problem`): one file-system check a rank, where each
    rank checking every rank's file made P^2 of them (16,384 ranks: 1.2 s a rank here,
    and 268M paths looked up on a cluster's shared file system)."""
    json_path, trace = ns.json, getattr(ns, "trace", None)
    if json and json_path and "{rank}" in json_path:
        return (
            f"--json {json_path}: the results are one file, written by rank 0; {{rank}} "
            "is for --trace"
        )
    tried: dict = {}  # folders found writable or not: one test file each, not one a rank
    if json and json_path:
        problem = output_file_problem(json_path, "--json", tried)
        if problem:
            return problem
    if not trace:
        return None
    per_rank = "{rank}" in trace
    same = os.path.realpath(json_path) if json_path else None
    for rank in ranks if per_rank else (0,):
        path = trace.replace("{rank}", str(rank))
        option = f"--trace (rank {rank}'s file)" if per_rank else "--trace"
        if same is not None and os.path.realpath(path) == same and not _written_into(same):
            return (
                f"{option} {path} is the --json file too: the trace would replace the "
                "results; name two files"
            )
        problem = output_file_problem(path, option, tried)
        if problem:
            return problem
    return None


def _written_into(path: str) -> bool:
    """Whether ``path`` is written into rather than replaced (a device such as /dev/null,
    or a FIFO): then the JSON and the trace can both go to it, neither replacing the
    other."""
    return os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path)


class ReaderGoneStdout:
    """Standard output that outlives its reader: once a write finds the pipe closed
    (``proxy | head``), file descriptor 1 is pointed at /dev/null and what follows is
    dropped, so the run still finishes, writes its result files and exits as it would
    have. One wrapper of ``sys.stdout`` rather than a ``try`` around every print: the
    executor's progress lines are printed in the middle of a phase too."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._drop()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._drop()

    def _drop(self) -> None:
        # The stream's buffer still holds the unwritten text: with fd 1 on /dev/null,
        # its next flush (at the latest the interpreter's, at exit) succeeds silently.
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def outlive_stdout_reader() -> None:
    """Make ``sys.stdout`` drop its output, rather than raise BrokenPipeError, once its
    reader has gone (see :class:`ReaderGoneStdout`); calling it again changes nothing."""
    if not isinstance(sys.stdout, ReaderGoneStdout):
        sys.stdout = ReaderGoneStdout(sys.stdout)
