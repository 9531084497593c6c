"""Units and their conversions: the one place that defines them.

Conventions of the project (STYLE.md): every quantity carries its unit in
its name (``size_bytes``, ``count_elems``, ``latency_s``, ``compute_us``,
``bandwidth_gb_per_s``, ``bw_bytes_per_s``). Inside the code, sizes are bytes
or float32 elements, times seconds and rates bytes/s; configuration files and
link-parameter files use microseconds and GB/s, and are converted here.

GB is decimal (1 GB = 1e9 bytes, as nccl-tests and the seed configuration's
bandwidth); GiB (2**30 bytes) is used only for memory sizes.

The conversion functions keep the exact floating-point operations the code
used before they existed (``us * 1e-6``, ``s * 1e6``, ``gbps * 1e9``,
``bps / 1e9``): ``x * 1e-6`` and ``x / 1e6`` can differ in the last bit, and
results must not change.
"""

from __future__ import annotations

ELEM_BYTES = 4
"""Bytes per element: every message and buffer is float32."""

KB = 1e3
"""Bytes per KB (decimal), for display."""
MB = 1e6
"""Bytes per MB (decimal), for display."""
GB = 1e9
"""Bytes per GB (decimal): the unit of every bandwidth in GB/s."""
KIB = 2**10
"""Bytes per KiB."""
MIB = 2**20
"""Bytes per MiB."""
GIB = 2**30
"""Bytes per GiB: memory sizes."""

S_PER_US = 1e-6
"""Seconds per microsecond."""
US_PER_S = 1e6
"""Microseconds per second."""
MS_PER_S = 1e3
"""Milliseconds per second, for display."""


BYTE_UNITS: tuple[tuple[str, float], ...] = (
    ("PB", 1e15),
    ("TB", 1e12),
    ("GB", GB),
    ("MB", MB),
    ("KB", KB),
    ("B", 1.0),
)
"""Decimal byte units for display, largest first."""


def format_bytes(n_bytes: float) -> str:
    """``n_bytes`` in the largest decimal unit it fills, 3 significant digits:
    ``"1.23 GB"``, ``"999 B"``; a value that rounds up to 1000 of a unit is shown in the
    next (999,999 B is ``"1 MB"``, not ``"1e+03 KB"``)."""
    n = float(n_bytes)
    for i, (unit, size) in enumerate(BYTE_UNITS):
        if abs(n) >= size or unit == "B":
            text = f"{n / size:.3g}"
            if abs(float(text)) >= 1000 and i > 0:  # rounded up to the next unit
                unit, size = BYTE_UNITS[i - 1]
                text = f"{n / size:.3g}"
            return f"{text} {unit}"
    raise AssertionError("unreachable")


def elems_to_bytes(count_elems: int) -> int:
    """Bytes of ``count_elems`` float32 elements."""
    return count_elems * ELEM_BYTES


def us_to_s(us: float) -> float:
    """Microseconds to seconds (divided by 1e6, which is exact in binary: 5 us is 5e-06 s,
    where multiplying by 1e-6, which is not, gave 4.9999999999999996e-06)."""
    return us / US_PER_S


def s_to_us(s: float) -> float:
    """Seconds to microseconds."""
    return s * US_PER_S


def gb_per_s_to_bytes_per_s(gb_per_s: float) -> float:
    """GB/s (GB = 1e9 bytes) to bytes/s."""
    return gb_per_s * GB


def bytes_per_s_to_gb_per_s(bytes_per_s: float) -> float:
    """Bytes/s to GB/s (GB = 1e9 bytes)."""
    return bytes_per_s / GB
