"""The ranks' message buffers: float32 zeros MPI takes as they are, filled in blocks."""

from __future__ import annotations

import struct

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
