"""Compiling a C or C++ MPI program for a benchmark with the MPI wrapper compilers
beside ``mpiexec`` (the MPICH wheel ships ``mpicc`` and ``mpicxx``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from bench.bench_executor import MPIEXEC


def mpi_compile(source: Path, exe: Path, wrapper: str, who: str, timeout_s: float = 300) -> Path:
    """``source`` built into ``exe`` with ``wrapper -O2`` (``"mpicc"`` or ``"mpicxx"``),
    found beside mpiexec or on PATH; SystemExit naming ``who`` and what is missing."""
    compiler = Path(MPIEXEC).with_name(wrapper)
    if not compiler.is_file():
        compiler = Path(shutil.which(wrapper) or wrapper)
    try:
        subprocess.run(
            [str(compiler), "-O2", "-o", str(exe), str(source)],
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise SystemExit(
            f"{who}: cannot build {source.name} with {compiler} ({detail.strip()[:300]}); "
            f"it needs {wrapper} (the mpich wheel's, beside mpiexec) and its compiler"
        ) from None
    return exe
