"""Rank programs, process layouts and the workload a model describes.

A :class:`Workload` is everything an executor needs: the world size, the
groups of each kind (the communicators), and for each timed phase a function
giving a rank's operations for one iteration. Models build workloads with a
:class:`ProgramBuilder`, which numbers requests and applies ``--scale``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .ops import Collective, Compute, Op, Recv, Send, Testany, Wait


class LayoutError(ValueError):
    """A world size or argument the model's process layout cannot accept."""


def scale_count(count_elems: int, scale: float) -> int:
    """Message size after ``--scale``: ``max(1, round(count_elems * scale))``.

    Zero stays zero (a barrier has no payload).
    """
    if count_elems == 0:
        return 0
    return max(1, round(count_elems * scale))


@dataclass(frozen=True)
class BuildOptions:
    """Options shared by every model.

    scale: multiplier of every message size (whole elements, at least 1).
    per_tensor: one message per tensor instead of aggregated gradients.
    fix_quirks: repair the reference's quirks instead of reproducing them.
    algorithm: a collective algorithm name to use for every collective
      (None: the MPI library's / simnet's default policy).
    rings: ring orders (global ranks) for the multiring algorithm.
    """

    scale: float = 1.0
    per_tensor: bool = False
    fix_quirks: bool = False
    algorithm: str | None = None
    rings: tuple[tuple[int, ...], ...] | None = None


class ProgramBuilder:
    """Accumulates one rank's operations; request ids are allocated in order."""

    def __init__(self, options: BuildOptions | None = None) -> None:
        self.options = options or BuildOptions()
        self.ops: list[Op] = []
        self._next_req = 0

    def _req(self, blocking: bool) -> int | None:
        if blocking:
            return None
        r = self._next_req
        self._next_req += 1
        return r

    def _count(self, count_elems: int) -> int:
        return scale_count(count_elems, self.options.scale)

    def compute(self, duration_us: float, label: str = "compute") -> None:
        self.ops.append(Compute(float(duration_us), label))

    def send(
        self,
        peer: int,
        count_elems: int,
        *,
        tag: int,
        group: str,
        blocking: bool = True,
        label: str = "send",
    ) -> int | None:
        req = self._req(blocking)
        self.ops.append(Send(peer, self._count(count_elems), tag, group, req, label))
        return req

    def recv(
        self,
        peer: int,
        count_elems: int,
        *,
        tag: int,
        group: str,
        blocking: bool = True,
        label: str = "recv",
    ) -> int | None:
        req = self._req(blocking)
        self.ops.append(Recv(peer, self._count(count_elems), tag, group, req, label))
        return req

    def collective(
        self,
        op: str,
        group: str,
        count_elems: int = 0,
        *,
        blocking: bool = True,
        root: int = 0,
        label: str = "",
    ) -> int | None:
        req = self._req(blocking)
        self.ops.append(
            Collective(
                op, group, self._count(count_elems), req, self.options.algorithm, root, label or op
            )
        )
        return req

    def allreduce(
        self, group: str, count_elems: int, *, blocking: bool = True, label: str = "allreduce"
    ) -> int | None:
        return self.collective("allreduce", group, count_elems, blocking=blocking, label=label)

    def wait(self, *reqs: int | None, label: str = "wait") -> None:
        live = tuple(r for r in reqs if r is not None)
        if live:
            self.ops.append(Wait(live, label))

    def testany(self, reqs: Sequence[int | None], label: str = "testany") -> None:
        live = tuple(r for r in reqs if r is not None)
        if live:
            self.ops.append(Testany(live, label))


@dataclass(frozen=True)
class Phase:
    """A separately timed part of a proxy (most proxies have one)."""

    name: str
    program: Callable[[int], list[Op]]  # rank -> one iteration's operations


@dataclass
class Workload:
    """A model instantiated for a world size.

    groups: group kind -> the groups of that kind, each a tuple of global
      ranks in communicator order. Every kind partitions the world.
    info: figures for the summary (total params, global batch, ...).
    """

    model: str
    world_size: int
    params: dict[str, int]
    groups: dict[str, list[tuple[int, ...]]]
    phases: list[Phase]
    info: dict[str, object] = field(default_factory=dict)
    summary: Callable[[int, float, str], str] | None = None
    summary_all_ranks: bool = False  # the reference prints the summary on every rank
    # Parameters of the project's collective schedules: "rings" (multiring
    # orders, group indices), "local_size" (hierarchical group size).
    collective_params: dict[str, Any] = field(default_factory=dict)

    def group_of(self, kind: str, rank: int) -> tuple[int, ...]:
        """The group of kind ``kind`` that contains global ``rank``."""
        index = self._index(kind)
        return index[rank]

    def _index(self, kind: str) -> dict[int, tuple[int, ...]]:
        cache = self.__dict__.setdefault("_group_index", {})
        if kind not in cache:
            if kind not in self.groups:
                raise KeyError(f"workload {self.model} has no group kind {kind!r}")
            cache[kind] = {r: g for g in self.groups[kind] for r in g}
        return cache[kind]


def world_groups(world_size: int) -> list[tuple[int, ...]]:
    return [tuple(range(world_size))]


def block_groups(world_size: int, size: int) -> list[tuple[int, ...]]:
    """Consecutive blocks of ``size`` ranks: [0..size), [size..2 size), ..."""
    return [tuple(range(s, s + size)) for s in range(0, world_size, size)]


def strided_groups(world_size: int, stride: int) -> list[tuple[int, ...]]:
    """Ranks with the same ``rank % stride``, ordered by rank."""
    return [tuple(range(s, world_size, stride)) for s in range(stride)]


def require_multiple(model: str, world_size: int, divisor: int, rule: str) -> None:
    """Raise LayoutError unless world_size is a positive multiple of divisor."""
    if world_size < 1 or world_size % divisor:
        below = (world_size // divisor) * divisor
        above = below + divisor
        near = [n for n in (below, above) if n > 0]
        raise LayoutError(
            f"{model}: {rule} (world size {world_size}); "
            f"nearest valid world sizes: {', '.join(map(str, near))}"
        )
