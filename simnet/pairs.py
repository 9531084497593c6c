"""Endpoint-pair figures kept sparse, as ``{(src endpoint, dst endpoint): value}``, made
dense on demand (an n x n matrix is 2.7 GB at 18,522 endpoints)."""

from __future__ import annotations

from typing import Any

import numpy as np


def dense_matrix(pairs: dict[tuple[int, int], Any], n: int, dtype: Any) -> np.ndarray:
    """An n x n matrix holding ``pairs`` ((row, column) -> value), zeros elsewhere."""
    out = np.zeros((n, n), dtype=dtype)
    if pairs:
        idx = np.fromiter((i for key in pairs for i in key), dtype=np.int64, count=2 * len(pairs))
        out[idx[0::2], idx[1::2]] = np.fromiter(pairs.values(), dtype=dtype, count=len(pairs))
    return out
