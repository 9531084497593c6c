"""Every member's plan of a collective at once, as arrays: :class:`StepTable`.

A schedule whose every step has each member receive from at most one member and send
to at most one (the recursive allreduces, a step an exchange with one partner; a ring,
from the previous member to the next) can
give its plans for all members as four ``(steps, members)`` arrays instead of one tuple
of steps per member (``Schedule.rank_flat``). At 16,384 ranks the eight ResNet-152
bucket sizes' plans as tuples take 300 MB and 1.7 CPU s to make, one Python object per
step and member; as arrays 63 MB, made with numpy a level at a time.

The arrays are step-major: member ``r``'s step ``k`` is entry ``[k, r]``, and a
simulator that runs the members' k-th steps one after another, as a bulk-synchronous
collective does, reads neighbouring entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is loaded by the schedules that make tables, not here
    import numpy as np


@dataclass(frozen=True, eq=False)
class StepTable:
    """Member ``r``'s plan is column ``r`` of the ``(steps, members)`` arrays, its first
    ``nsteps[r]`` entries: at step ``k`` it receives from member ``src[k, r]`` (-1: from
    none) and sends ``nbytes[k, r]`` bytes to member ``dst[k, r]`` (-1: to none; a send
    may be of zero bytes), reduction data if ``reduce[k, r]``. Entries past a member's
    steps are -1, 0 and False. ``messages[r]`` counts member r's sends.

    ``src`` and ``dst`` are int32, ``nbytes``, ``nsteps`` and ``messages`` int64,
    ``reduce`` bool; members are group indices.
    """

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    reduce: np.ndarray
    nsteps: np.ndarray
    messages: np.ndarray

    @property
    def group_size(self) -> int:
        return int(self.src.shape[1])

    def rank_flat(
        self, r: int
    ) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...], tuple[int, ...], int]:
        """Member ``r``'s plan in ``Schedule.rank_flat``'s form (``FlatPlan``): its steps
        as flat tuples, its reduced and copied bytes per destination in step order, its
        sends. For tests and for executors that take tuples."""
        n = int(self.nsteps[r])
        src = self.src[:n, r].tolist()
        dst = self.dst[:n, r].tolist()
        nbytes = self.nbytes[:n, r].tolist()
        reduce = self.reduce[:n, r].tolist()
        steps: list[tuple[int, ...]] = []
        red: dict[int, int] = {}  # bytes per destination, in the order first sent to
        copy: dict[int, int] = {}
        for s, d, b, red_k in zip(src, dst, nbytes, reduce, strict=True):
            step = (1, s) if s >= 0 else (0,)
            if d >= 0:
                step += (d, b)
                tot = red if red_k else copy
                tot[d] = tot.get(d, 0) + b
            steps.append(step)
        return (
            tuple(steps),
            tuple(x for d, b in red.items() for x in (d, b)),
            tuple(x for d, b in copy.items() for x in (d, b)),
            int(self.messages[r]),
        )
