"""What a streamed NCCL tree's pipeline takes beyond its stream.

A streamed "nccl_tree" (``workload.collectives.stream_tree``) sends each tree edge's
chunks, each way, as one message, all at once. Step by step, chunk ``j`` leaves a member
at height ``h`` above its tree's leaves for its parent in step ``j + h`` and leaves a
member at depth ``d`` for its children in step ``j + H + d`` (``H`` the tree's height), so
every hop (an edge, one way) is busy ``k`` consecutive steps, and the pipeline fills,
runs full and drains over ``k + 2 H - 1`` steps. A step takes the pace of its slowest
busy hop: alpha plus the route's latency plus the hop's chunk over what its links leave
it (each link's capacity shared by the bytes of every hop busy in that step crossing it,
those of other trees and channels too). The set of busy hops changes only where one
begins or ends, at most ``4 H`` times, so the sum of the paces is computed once per such
stretch, with numpy over every hop's links (half a million hops at 16,384 GPUs).

On hops that nothing else shares, the step-by-step simulation keeps that lockstep (a
member's step waits for its receives, which wait for the slowest hop feeding them), and
the sum is its time; the simulator then adds the sum less what the stream takes with
every hop busy at once. Where the trees share links with other traffic, the stream is an
approximation, as a streamed ring's is.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from workload.collectives import tree_heights


def pipeline_delay_s(
    trees: Sequence[Sequence[int]],
    chunks: int,
    tree_bytes: Sequence[int],
    endpoints: Sequence[Any],
    net: Any,
) -> float:
    """Seconds a streamed tree allreduce spends after its stream: the sum over its
    pipeline's steps of each step's pace, less the stream's own time (all hops at once,
    each with its ``chunks`` chunks), never below 0.

    ``trees``: each tree's parent of every member (-1 for its root); ``chunks``: the
    chunks each tree's share is pipelined in; ``tree_bytes[t]``: bytes of tree ``t``'s
    share (all its chunks); ``endpoints[m]``: member ``m``'s endpoint; ``net``: the
    ``FlowNetwork`` whose paths and ``alpha_s`` the messages take. A hop between members
    on one endpoint crosses no link and is left out, as the stream sends nothing there.
    """
    k = chunks
    starts: list[int] = []
    fixed: list[float] = []
    chunk_bytes: list[float] = []
    hop_links: list[int] = []
    hop_ptr = [0]
    link_ids: dict[object, int] = {}
    capacity: list[float] = []
    alpha = net.alpha_s

    def hop(src: int, dst: int, start: int, nbytes: float) -> None:
        a, b = endpoints[src], endpoints[dst]
        if a == b:
            return
        path = net.path_between(a, b)
        for link in path.links:
            i = link_ids.get(link)
            if i is None:
                i = link_ids[link] = len(capacity)
                capacity.append(link.capacity_bytes_per_s)
            hop_links.append(i)
        hop_ptr.append(len(hop_links))
        starts.append(start)
        fixed.append(alpha + path.latency_s)
        chunk_bytes.append(nbytes)

    for parent, share in zip(trees, tree_bytes, strict=True):
        order, height, depth = tree_heights(parent)
        top = height[order[0]]
        per_chunk = share / k
        for r in order:
            par = parent[r]
            if par >= 0:
                hop(r, par, height[r], per_chunk)  # the reduction, up
                hop(par, r, top + depth[par], per_chunk)  # the result, down
    if not starts:
        return 0.0
    start = np.asarray(starts, dtype=np.int64)
    fixed_s = np.asarray(fixed)
    per_hop = np.asarray(chunk_bytes)
    links = np.asarray(hop_links, dtype=np.int64)
    cap = np.asarray(capacity)
    ptr = np.asarray(hop_ptr[:-1], dtype=np.int64)
    owner = np.repeat(np.arange(len(starts)), np.diff(hop_ptr))
    entry_bytes = per_hop[owner]

    def transfers(busy: np.ndarray) -> np.ndarray:
        """Each hop's chunk time (s) with the hops ``busy`` sharing the links."""
        load = np.bincount(links, weights=entry_bytes * busy[owner], minlength=len(cap))
        return np.maximum.reduceat(load[links] / cap[links], ptr)

    # The steps where the busy hops change, and the pace of each stretch between them.
    bounds = np.unique(np.concatenate((start, start + k)))
    total = 0.0
    for a, b in pairwise(bounds):
        busy = (start <= a) & (start + k > a)
        if busy.any():
            pace = (fixed_s + transfers(busy.astype(float)))[busy].max()
            total += float(b - a) * float(pace)
    stream = float((fixed_s + k * transfers(np.ones(len(starts)))).max())
    return max(total - stream, 0.0)
