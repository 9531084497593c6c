"""What a streamed NCCL ring's runs of steps take beyond their streams.

A streamed "nccl_ring" (``workload.collectives.stream_steps``) sends each run of a ring's
steps as one message per hop carrying all the blocks the run's ``n`` steps would. Step
by step, every member sends one block to its successor and receives one from its
predecessor in each step of the run (on each channel's ring), a member's step ends when
both have, and each message starts once both its ends have begun the step (NCCL waits
for its receiver). A hop takes alpha plus its route's latency plus its block over what
its links leave it, each link's capacity shared by the bytes a step of every hop of the
run crossing it (every channel's).

Over the steps the members' ends settle into the pace of the slowest hop: each step
adds that pace to every member's time, the members nearer the slowest hops ending
later (on 8-GPU nodes whose rings leave each node through a NIC, the GPUs between two
NIC hops end up to 4 NVLink steps' difference earlier). The steps are computed with
numpy until every member's time moves by the pace alone, then the rest added at that
pace. A ring that takes long to settle (hops nearly, not quite, as slow as the slowest;
one slow hop far from many members) is computed for at most ``SETTLE_HOP_STEPS`` hops
times steps (at least ``SETTLE_STEPS`` steps: every step of a run of 8,192 hops); then
every member is given the latest member's time plus the rest at the pace, an upper
bound (the latest member moves by at most the pace a step).

Each member's delay is its end so found less when its part of the stream ends (its
messages of all ``n`` blocks at once). From a common start and with no two hops sharing
a link at once, this is the step-by-step simulation's own arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .tree_stream import next_step, stream_ends

# Steps computed one by one at most, before the rest of a run is added at its pace: a
# budget of hops times steps (about 0.06 s of numpy here), and at least this many steps.
SETTLE_HOP_STEPS = 10_000_000
SETTLE_STEPS = 64


class RingRun:
    """One run of a streamed ring schedule's steps over a group: its hops (each member
    to its successor, every channel), what each takes a step and its stream.

    ``hops``: ``(sender, receiver, bytes of its stream)`` by member index, the stream
    carrying the bytes of all ``steps`` steps; ``endpoints[m]``: member ``m``'s endpoint;
    ``net``: the ``FlowNetwork`` whose paths and ``alpha_s`` the messages take. A hop
    between members on one endpoint crosses no link: it takes alpha a step.
    """

    def __init__(
        self,
        hops: Sequence[tuple[int, int, float]],
        steps: int,
        endpoints: Sequence[Any],
        net: Any,
    ) -> None:
        self.members = len(endpoints)
        self.steps = steps
        paths = []
        load: dict[object, float] = {}  # link -> bytes a step of the hops crossing it
        for src, dst, nbytes in hops:
            a, b = endpoints[src], endpoints[dst]
            path = None if a == b else net.path_between(a, b)
            paths.append(path)
            if path is not None:
                for link in path.links:
                    load[link] = load.get(link, 0.0) + nbytes / steps
        fixed = np.array([net.alpha_s + (p.latency_s if p else 0.0) for p in paths])
        transfer = np.array(
            [
                max((load[link] / link.capacity_bytes_per_s for link in p.links), default=0.0)
                if p
                else 0.0
                for p in paths
            ]
        )
        self.src = np.array([h[0] for h in hops], dtype=np.int64)
        self.dst = np.array([h[1] for h in hops], dtype=np.int64)
        self.step_s = fixed + transfer  # seconds a hop takes a step
        self.stream_s = fixed + steps * transfer  # and its stream
        self.pace_s = float(self.step_s.max()) if len(hops) else 0.0

    def delays_s(self) -> np.ndarray:
        """Seconds each member spends after its part of the stream, the members starting
        together, never below 0: when its last step would end step by step, less when
        its messages of the stream end."""
        begin = np.zeros(self.members)
        return np.maximum(self.ends_s(begin) - self.stream_ends_s(begin), 0.0)

    def ends_s(self, begin_s: Sequence[float] | np.ndarray) -> np.ndarray:
        """Seconds at which each member's last step of the run would end step by step,
        the members beginning at ``begin_s`` (seconds, one a member)."""
        ready = np.array(begin_s, dtype=float)
        pace = self.pace_s
        limit = min(self.steps, max(SETTLE_STEPS, SETTLE_HOP_STEPS // max(len(self.src), 1)))
        for done in range(1, limit + 1):
            new = next_step(ready, self.src, self.dst, self.step_s)
            # (within rounding of the times themselves, however late a member began)
            tol = 1e-12 * pace + 4 * np.spacing(np.abs(new).max())
            settled = np.all(np.abs(new - ready - pace) <= tol)
            ready = new
            if settled:
                return ready + (self.steps - done) * pace
        if limit == self.steps:
            return ready
        return np.full_like(ready, ready.max() + (self.steps - limit) * pace)

    def stream_ends_s(self, begin_s: Sequence[float] | np.ndarray) -> np.ndarray:
        """Seconds at which each member's part of the stream ends, the members beginning
        at ``begin_s`` and every hop's stream taking what it takes with all hops busy at
        once (``simnet.tree_stream.stream_ends``)."""
        begin = np.array(begin_s, dtype=float)
        return stream_ends(begin, self.src, self.dst, self.stream_s)
