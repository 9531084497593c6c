"""This host's memory, as the memory checks and the benchmarks read it (bytes)."""

from __future__ import annotations

import sys


def available_memory_bytes() -> int:
    """Memory this host can still give: Linux's MemAvailable, read from /proc/meminfo;
    psutil's figure elsewhere (imported only there: 1.8 MB in every MPI rank)."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    import psutil

    return int(psutil.virtual_memory().available)


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux: KiB
