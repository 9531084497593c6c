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
messages with every hop busy at once), from a common start. Members that begin at
different times (a straggler, compute noise, the previous allreduce ending at different
times) hold back the whole pipeline step by step, not only their tree neighbours as in
the stream: ``TreePipeline.ends_s`` runs the same steps from their starts, which the
simulator (``simnet.executor._StreamStarts``) waits for. Where no two hops share a link
at once this is the step-by-step simulation's own arithmetic, whenever each member
begins. Two hops busy in one step on a link need not overlap step by step (the one that
ends first leaves the link to the other, or one starts late and the other has the link
alone until then): there it is an approximation, as a streamed ring's is. On a GPU
cluster every inner member of a tree of 3 or more nodes takes both children's chunks
over its one NIC link in the same step, so it is exact there only for members that
begin together.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any, NamedTuple

import numpy as np

from workload.collectives import tree_heights


def pipeline_delays_s(
    trees: Sequence[Sequence[int]],
    chunks: int,
    tree_bytes: Sequence[int],
    endpoints: Sequence[Any],
    net: Any,
) -> np.ndarray:
    """Seconds each member of a streamed tree allreduce spends after its stream, the
    members starting together (``TreePipeline.delays_s`` with no offsets); one value a
    member. The arguments are ``TreePipeline``'s."""
    return TreePipeline(trees, chunks, tree_bytes, endpoints, net).delays_s()


class _Hops(NamedTuple):
    """A streamed tree allreduce's hops (an edge, one way) for its pipeline's steps."""

    # Per stretch of steps with the same busy hops: (its steps, the busy hops' senders,
    # receivers and seconds a chunk).
    stretches: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]
    src: np.ndarray  # each hop's sender
    dst: np.ndarray  # and receiver (member indices)
    streamed: np.ndarray  # seconds each hop's stream takes, all hops at once


class TreePipeline:
    """A streamed tree allreduce's pipeline: made once per group and schedule, then asked
    for each member's delay of a common start, and for when each member's pipeline ends
    from any starts.

    ``trees``: each tree's parent of every member (-1 for its root); ``chunks``: the
    chunks each tree's share is pipelined in; ``tree_bytes[t]``: bytes of tree ``t``'s
    share (all its chunks); ``endpoints[m]``: member ``m``'s endpoint; ``net``: the
    ``FlowNetwork`` whose paths and ``alpha_s`` the messages take. A hop between members
    on one endpoint crosses no link: it takes alpha a chunk. The hops' arrays are made on
    the first question and kept for the next (members that begin apart ask again each
    instance): at 16,384 GPUs they are tens of megabytes a schedule, their members as
    32-bit integers.
    """

    def __init__(
        self,
        trees: Sequence[Sequence[int]],
        chunks: int,
        tree_bytes: Sequence[int],
        endpoints: Sequence[Any],
        net: Any,
    ) -> None:
        self.members = len(endpoints)
        self._args = (trees, chunks, tree_bytes, endpoints, net)
        self._kept: _Hops | None = None

    def _kept_hops(self) -> _Hops:
        if self._kept is None:
            self._kept = self._hops()
        return self._kept

    def _hops(self) -> _Hops:
        trees, chunks, tree_bytes, endpoints, net = self._args
        k = chunks
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
            # (between members on one endpoint: no link, alpha only, as the network
            # charges that message)
            path = None if a == b else net.path_between(a, b)
            for link in () if path is None else path.links:
                i = link_ids.get(link)
                if i is None:
                    i = link_ids[link] = len(capacity)
                    capacity.append(link.capacity_bytes_per_s)
                hop_links.append(i)
            hop_ptr.append(len(hop_links))
            hops.append((src, dst, start))
            fixed.append(alpha + (0.0 if path is None else path.latency_s))
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
        # Per stretch of steps with the same busy hops: (its steps, the busy hops'
        # senders, receivers and seconds a chunk).
        stretches: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
        if not hops:
            none = np.zeros(0, dtype=np.int64)
            return _Hops(stretches, none, none, np.zeros(0))
        src, dst, start = (np.asarray(x, dtype=np.int64) for x in zip(*hops, strict=True))
        fixed_s = np.asarray(fixed)
        per_hop = np.asarray(chunk_bytes)
        links = np.asarray(hop_links, dtype=np.int64)
        cap = np.asarray(capacity)
        ptr = np.asarray(hop_ptr[:-1], dtype=np.int64)
        linked = np.diff(hop_ptr) > 0  # (reduceat would give an empty range the next value)
        owner = np.repeat(np.arange(len(hops)), np.diff(hop_ptr))
        entry_bytes = per_hop[owner]

        def times(busy: np.ndarray) -> np.ndarray:
            """Each hop's seconds for a chunk (alpha and latency included), the hops
            ``busy`` (a 0/1 weight per hop) sharing the links."""
            load = np.bincount(links, weights=entry_bytes * busy[owner], minlength=len(cap))
            transfer = np.zeros(len(fixed_s))
            if len(links):
                transfer[linked] = np.maximum.reduceat(load[links] / cap[links], ptr[linked])
            return fixed_s + transfer

        bounds = np.unique(np.concatenate((start, start + k)))
        for a, b in pairwise(bounds):
            busy = (start <= a) & (start + k > a)
            if busy.any():
                took = times(busy.astype(float))[busy]
                s32, d32 = src[busy].astype(np.int32), dst[busy].astype(np.int32)
                stretches.append((int(b - a), s32, d32, took))
        # The stream: each hop's k chunks at once, every hop busy.
        return _Hops(stretches, src, dst, fixed_s + k * (times(np.ones(len(hops))) - fixed_s))

    def delays_s(self) -> np.ndarray:
        """Seconds each member spends after its part of the stream, the members starting
        together, never below 0: when its pipeline's last step would end step by step,
        less when its messages of the stream end (all hops at once, each with all its
        chunks)."""
        hops = self._kept_hops()
        begin = np.zeros(self.members)
        ready = _ends(hops, begin)
        return np.maximum(ready - stream_ends(begin, hops.src, hops.dst, hops.streamed), 0.0)

    def ends_s(self, begin_s: Sequence[float] | np.ndarray) -> np.ndarray:
        """Seconds at which each member's pipeline's last step would end step by step,
        the members beginning at ``begin_s`` (seconds, one a member): a member's step
        ends when every message it sends or receives in it has, each starting once both
        its ends have begun the step. A member that begins late holds back the whole
        pipeline through its tree neighbours' steps."""
        return _ends(self._kept_hops(), np.array(begin_s, dtype=float))

    def stream_ends_s(self, begin_s: Sequence[float] | np.ndarray) -> np.ndarray:
        """Seconds at which each member's part of the stream ends, the members beginning
        at ``begin_s`` and every hop's stream taking what it takes with all hops busy at
        once (``stream_ends``)."""
        hops = self._kept_hops()
        return stream_ends(np.array(begin_s, dtype=float), hops.src, hops.dst, hops.streamed)


def _ends(hops: _Hops, ready: np.ndarray) -> np.ndarray:
    """Each member's time (seconds) at the end of its last step, from its time ``ready``
    at the start of its first."""
    for n, s, d, took in hops.stretches:
        for _ in range(n):
            ready = next_step(ready, s, d, took)
    return ready


def stream_ends(
    begin: np.ndarray, src: np.ndarray, dst: np.ndarray, stream_s: np.ndarray
) -> np.ndarray:
    """Each member's time (seconds) at the end of its part of a stream that it begins at
    ``begin``, hop ``h`` (``src[h]`` to ``dst[h]``) starting once both its ends have
    begun and taking ``stream_s[h]`` seconds (a member with no hops ends at once)."""
    end = begin.copy()
    if len(src):
        ended = np.maximum(begin[src], begin[dst]) + stream_s
        np.maximum.at(end, src, ended)
        np.maximum.at(end, dst, ended)
    return end


def next_step(ready: np.ndarray, src: np.ndarray, dst: np.ndarray, took: np.ndarray) -> np.ndarray:
    """Each member's time (seconds) at the end of a step that begins at ``ready``, in
    which hop ``h`` sends from member ``src[h]`` to ``dst[h]``, starting once both have
    begun it and taking ``took[h]`` seconds: a member's step ends when all its hops'
    messages have (one with none ends it at once)."""
    end = np.maximum(ready[src], ready[dst]) + took
    new = ready.copy()
    np.maximum.at(new, src, end)
    np.maximum.at(new, dst, end)
    return new
