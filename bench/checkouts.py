"""Running a benchmark script of this folder on another checkout's code, side by side.

The scripts import their sibling modules from this folder (never as ``bench.x``, which
would put this checkout's root, and so its ``simnet``, first on the path): the other
checkout's code comes first through ``PYTHONPATH`` and the working directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def run_on(
    tree: Path,
    script: Path,
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    tool: Sequence[str] = (),
    timeout: float | None = 3600,
) -> subprocess.CompletedProcess:
    """Run ``script`` with ``args`` in a fresh Python process on the code of ``tree``
    (its root first on the path and the working directory), under ``tool`` (a command
    prefix, e.g. valgrind's) if any. The simulator's switches (``COMMSIM_PURE_PYTHON``,
    ``COMMSIM_HUGE_PAGES``) are unset unless ``env`` sets them; ``timeout`` in seconds."""
    e = dict(os.environ, PYTHONPATH=str(tree))
    for name in ("COMMSIM_PURE_PYTHON", "COMMSIM_HUGE_PAGES"):
        e.pop(name, None)
    e.update(env or {})
    return subprocess.run(
        [*tool, sys.executable, str(script), *args],
        env=e,
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def last_json(proc: subprocess.CompletedProcess, what: str) -> Any:
    """The JSON of the last line ``proc`` printed; SystemExit with the end of its stderr,
    saying it was ``what``, if it failed."""
    if proc.returncode:
        raise SystemExit(f"{what} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
