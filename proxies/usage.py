"""Usage errors of the MPI commands: one message from rank 0, the same exit code
everywhere (so no rank waits for another that gave up)."""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from collections.abc import Sequence

EXIT_USAGE = 2


def parse_quietly(
    parser: argparse.ArgumentParser, argv: Sequence[str], rank: int
) -> argparse.Namespace:
    """Parse on every rank; only rank 0 prints usage errors (all exit with code 2)."""
    if rank == 0:
        return parser.parse_args(argv)
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        return parser.parse_args(argv)


def fail(rank: int, message: str, code: int = EXIT_USAGE) -> None:
    """Rank 0 prints ``error: message``; every rank exits with ``code``."""
    if rank == 0:
        sys.stderr.write(f"error: {message}\n")
        sys.stderr.flush()
    raise SystemExit(code)
