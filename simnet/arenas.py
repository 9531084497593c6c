"""The simulator's Python objects on transparent huge pages, when the system allows it.

A simulation of thousands of ranks holds millions of small Python objects (flows,
links, paths, plans, waiters) and reaches them in no particular order; on 4 KiB pages
most of those reaches also miss the processor's address-translation cache. ``enable``
(called by :func:`simnet.simulate`) serves CPython's object arenas from one region
advised for 2 MiB pages (see ``simnet/_arenas.pyx``, built with the compiled core): the
fat-tree benchmark's 1,024-, 4,096- and 16,384-rank cases ran 1.19x, 1.24x and 1.25x
faster with it in a slow hour of this machine, 1.0-1.1x in a fast one, the GPT-3 case
1.11x (``bench/bench_simnet.py --against-no-huge-pages``; docs/simnet-speed.md).
Results do not change: only where the objects live.

It is process-wide and stays on: arenas freed later are kept for reuse rather than
returned to the system, so a process's memory stays at its peak until it exits.
``COMMSIM_HUGE_PAGES=0`` turns it off. It needs Linux's transparent huge pages in
``always`` or ``madvise`` mode (``/sys/kernel/mm/transparent_hugepage/enabled``); where
they are off, or the module is not compiled, everything runs as before.

Blocks of more than 512 bytes (a long list's items, a big dict's table) come from the
C library's ``malloc`` and stay on ordinary pages: putting those on huge pages too
(glibc's ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``) measured no faster.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ENV", "enable", "stats", "status", "thp_mode"]

ENV = "COMMSIM_HUGE_PAGES"
"""Environment variable: ``0`` (or ``off``, ``no``, ``false``) keeps the default arenas."""

_THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
# Address space tried for the region, largest first (bytes): reserved, not allocated,
# so only an address-space limit (ulimit -v) can refuse it.
_RESERVE_BYTES = (1 << 38, 1 << 36, 1 << 34, 1 << 32, 1 << 30)

_status: str | None = None


def thp_mode(path: Path = _THP) -> str | None:
    """The system's transparent-huge-page mode (``always``, ``madvise`` or ``never``),
    None where there is no such setting (not Linux, or a kernel without them)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def enable() -> str:
    """Serve Python's object arenas from huge pages from now on, if this process can;
    returns :func:`status`. Safe to call again (it decides once per process)."""
    global _status
    if _status is not None:
        return _status
    if os.environ.get(ENV, "").strip().lower() in ("0", "off", "no", "false"):
        _status = f"off ({ENV}={os.environ[ENV]})"
        return _status
    mode = thp_mode()
    if mode is None or mode == "never":
        _status = "off (transparent huge pages are not available on this system)"
        return _status
    try:
        from . import _arenas  # type: ignore[attr-defined]
    except ImportError:
        _status = "off (the compiled helper simnet/_arenas is not built)"
        return _status
    if not any(_arenas.install(size) for size in _RESERVE_BYTES):
        _status = "off (no address space could be reserved for the arenas)"
        return _status
    _status = f"on (object arenas; transparent huge pages: {mode})"
    return _status


def status() -> str:
    """One line: whether the arenas are on huge pages (``off (why)`` if not; ``not yet``
    before the first :func:`enable`)."""
    return _status if _status is not None else "not yet (no simulation has run)"


def stats() -> dict[str, int | bool]:
    """The arena region's counters in bytes (empty when it is not installed)."""
    if _status is None or not _status.startswith("on"):
        return {}
    from . import _arenas  # type: ignore[attr-defined]

    return _arenas.stats()
