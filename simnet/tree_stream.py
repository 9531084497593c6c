"""What a streamed NCCL tree's pipeline takes beyond its stream.

A streamed "nccl_tree" (``workload.collectives.stream_tree``) sends each tree edge's
chunks, each way, as one message, all at once. Step by step, chunk ``j`` leaves a member
at height ``h`` above its tree's leaves for its parent in step ``j + h`` and leaves a
member at depth ``d`` for its children in step ``j + H + d`` (``H`` the tree's height), so
every hop (an edge, one way) is busy ``k`` consecutive steps, and the pipeline fills,
runs full and drains over ``k + 2 H - 1`` steps. A member's step ends when every message
it sends or receives in it has (each starts once both ends have begun that step, as NCCL
waits for its receiver), and its next step begins then: the step-by-step ends are a
critical path over the members' steps, computed here step by step with numpy over the
hops busy in each step. A hop takes alpha plus its route's latency plus its chunk over
what its links leave it, each link's capacity shared by the bytes of every hop busy in
that step crossing it (those of other trees and channels too); the busy hops change only
where one begins or ends, at most ``4 H`` times, so those shares are computed once per
such stretch (half a million hops at 16,384 GPUs).

Each member's delay is its end so found less when its part of the stream ends (its
messages with every hop busy at once). The path runs from a common start: where the
members begin together and no two hops share a link at once this is the step-by-step
simulation's own arithmetic. A member that starts late holds back only its tree
neighbours in the stream (not the whole pipeline, as step by step), and two hops busy in
one step on a link need not overlap step by step: there the stream is an approximation,
as a streamed ring's is.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from workload.collectives import tree_heights


def pipeline_delays_s(
    trees: Sequence[Sequence[int]],
    chunks: int,
    tree_bytes: Sequence[int],
    endpoints: Sequence[Any],
    net: Any,
) -> np.ndarray:
    """Seconds each member of a streamed tree allreduce spends after its stream: when its
    pipeline's last step would end step by step, less when its messages of the stream
    end (all hops at once, each with its ``chunks`` chunks), never below 0; one value a
    member.

    ``trees``: each tree's parent of every member (-1 for its root); ``chunks``: the
    chunks each tree's share is pipelined in; ``tree_bytes[t]``: bytes of tree ``t``'s
    share (all its chunks); ``endpoints[m]``: member ``m``'s endpoint; ``net``: the
    ``FlowNetwork`` whose paths and ``alpha_s`` the messages take. A hop between members
    on one endpoint crosses no link and is left out, as the stream sends nothing there.
    """
    k = chunks
    p = len(endpoints)
    hops: list[tuple[int, int, int]] = []  # (sender, receiver, first step)
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
        hops.append((src, dst, start))
        fixed.append(alpha + path.latency_s)
        chunk_bytes.append(nbytes)

    for parent, share in zip(trees, tree_bytes, strict=True):
        order, height, depth, _ = tree_heights(parent)
        top = height[order[0]]
        per_chunk = share / k
        for r in order:
            par = parent[r]
            if par >= 0:
                hop(r, par, height[r], per_chunk)  # the reduction, up
                hop(par, r, top + depth[par], per_chunk)  # the result, down
    if not hops:
        return np.zeros(p)
    src, dst, start = (np.asarray(x, dtype=np.int64) for x in zip(*hops, strict=True))
    fixed_s = np.asarray(fixed)
    per_hop = np.asarray(chunk_bytes)
    links = np.asarray(hop_links, dtype=np.int64)
    cap = np.asarray(capacity)
    ptr = np.asarray(hop_ptr[:-1], dtype=np.int64)
    owner = np.repeat(np.arange(len(hops)), np.diff(hop_ptr))
    entry_bytes = per_hop[owner]

    def times(busy: np.ndarray) -> np.ndarray:
        """Each hop's seconds for a chunk (alpha and latency included), the hops ``busy``
        (a 0/1 weight per hop) sharing the links."""
        load = np.bincount(links, weights=entry_bytes * busy[owner], minlength=len(cap))
        return fixed_s + np.maximum.reduceat(load[links] / cap[links], ptr)

    # Step by step: every member's time at the end of its latest step (from a common
    # start), each step's hops starting once both their ends are there.
    ready = np.zeros(p)
    bounds = np.unique(np.concatenate((start, start + k)))
    for a, b in pairwise(bounds):
        busy = (start <= a) & (start + k > a)
        if not busy.any():
            continue
        took = times(busy.astype(float))[busy]
        s, d = src[busy], dst[busy]
        for _ in range(int(b - a)):
            end = np.maximum(ready[s], ready[d]) + took
            new = ready.copy()
            np.maximum.at(new, s, end)
            np.maximum.at(new, d, end)
            ready = new
    # The stream: each hop's k chunks at once, every hop busy; a member's part ends with
    # the last of its messages.
    streamed = fixed_s + k * (times(np.ones(len(hops))) - fixed_s)
    stream_end = np.zeros(p)
    np.maximum.at(stream_end, src, streamed)
    np.maximum.at(stream_end, dst, streamed)
    return np.maximum(ready - stream_end, 0.0)
