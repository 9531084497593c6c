"""The ranks' message buffers: float32 zeros MPI takes as they are, filled in blocks."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from proxies.buffers import NO_ELEMENTS, fill, zeros

BLOCK = 1 << 18  # fill's block, in elements


def test_zeros_are_float32_elements_and_at_least_one():
    b = zeros(1000)
    assert (len(b), b.format, b.itemsize, b.nbytes) == (1000, "f", 4, 4000)
    assert not any(b)
    assert len(zeros(0)) == 1
    view = b[10:20]  # a view, counted in elements
    view[0] = 2.5
    assert (len(view), b[10]) == (10, 2.5)


@pytest.mark.parametrize("n", [1, 7, BLOCK, BLOCK + 3, 2 * BLOCK + 1])
def test_fill_sets_every_element_across_blocks(n):
    b = zeros(n + 2)
    fill(b[1 : n + 1], 1.5)
    assert (b[0], b[n + 1]) == (0.0, 0.0)  # its neighbours untouched
    assert b[1 : n + 1].tobytes() == struct.pack("f", 1.5) * n


def test_fill_of_nothing_is_nothing():
    fill(NO_ELEMENTS, 1.0)
    assert len(NO_ELEMENTS) == 0


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_reading_a_fresh_buffer_commits_no_memory():
    # A shared anonymous mapping (mmap.mmap(-1, n)'s default) allocates a page on every
    # read fault, and MPICH's single-copy transfer reads it 1.5x slower; a private one
    # maps the zero page. Read one element per 4 KiB page of a 32 MiB buffer.
    n = 8 << 20
    before = {f: _rss_kib(f) for f in ("RssAnon", "RssShmem")}
    buf = zeros(n)
    assert sum(buf[::1024]) == 0.0
    grown = {f: _rss_kib(f) - before[f] for f in before}
    assert grown["RssShmem"] < 4096, grown
    assert grown["RssAnon"] < 4096, grown
