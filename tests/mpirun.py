"""Launching MPI jobs from tests: always in a subprocess, always with a timeout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

MPIEXEC = shutil.which("mpiexec") or "mpiexec"


def mpirun(
    n: int, module: str, *args: str, timeout: float = 180.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``mpiexec -n n python -m module args`` and return its result."""
    # e.g. MPIEXEC_FLAGS="--oversubscribe" to run the suite under Open MPI's mpiexec.
    flags = os.environ.get("MPIEXEC_FLAGS", "").split()
    cmd = [MPIEXEC, *flags, "-n", str(n), sys.executable, "-m", module, *args]
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=full_env, stdin=subprocess.DEVNULL
    )


def run_json(tmp_path: Path, n: int, module: str, *args: str, timeout: float = 180.0) -> dict:
    out = tmp_path / f"{module.rsplit('.', 1)[-1]}-{n}.json"
    r = mpirun(n, module, *args, "--json", str(out), timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(out.read_text())


def run_without_cache(
    tmp_path: Path, module: str, *args: str, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` with a home of its own under ``tmp_path`` (no cached host
    calibration to find, none written where the user's is): for a command that must
    refuse before any calibration starts."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": ""},
    )
