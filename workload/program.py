"""Rank programs, process layouts and the workload a model describes.

A :class:`Workload` is everything an executor needs: the world size, the
groups of each kind (the communicators), and for each timed phase a function
giving a rank's operations for one iteration. Models build workloads with a
:class:`ProgramBuilder`, which numbers requests and applies ``--scale``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Required, TypedDict, Unpack

from .ops import Collective, Compute, Op, Recv, Send, Testany, Wait


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


class Message(TypedDict, total=False):
    """How a point-to-point message is sent: MPI tag and group kind (required),
    blocking (default True) and the operation's label (default "send"/"recv")."""

    tag: Required[int]
    group: Required[str]
    blocking: bool
    label: str


class ProgramBuilder:
    """Accumulates one rank's operations; request ids are allocated in order."""

    def __init__(self, options: BuildOptions | None = None) -> None:
        self.options = options or BuildOptions()
        self.ops: list[Op] = []
        self._next_req = 0
        # Blocking collectives and computes are frozen and carry no request id: equal ones
        # are one object (a pipeline's rank repeats each per micro-batch; GPT-3 at 384
        # ranks built 880k operations). The executors accept shared objects: they key
        # what they keep about an operation by the object, position-free.
        self._shared: dict[tuple, Op] = {}

    def _req(self, blocking: bool) -> int | None:
        if blocking:
            return None
        r = self._next_req
        self._next_req += 1
        return r

    def _count(self, count_elems: int) -> int:
        scale = self.options.scale
        if scale == 1.0 and type(count_elems) is int and count_elems >= 0:
            return count_elems  # (scale_count's result, without its float round trip)
        return scale_count(count_elems, scale)

    def compute(self, duration_us: float, label: str = "compute") -> None:
        key = ("compute", duration_us, label)
        op = self._shared.get(key)
        if op is None:
            op = self._shared[key] = Compute(float(duration_us), label)
        self.ops.append(op)

    def send(self, peer: int, count_elems: int, **how: Unpack[Message]) -> int | None:
        """Send ``count_elems`` float32 elements to ``peer`` (a rank of ``group``);
        returns the request id of a non-blocking send, else None."""
        return self._message(Send, peer, count_elems, how)

    def recv(self, peer: int, count_elems: int, **how: Unpack[Message]) -> int | None:
        """Receive ``count_elems`` float32 elements from ``peer``; as :meth:`send`."""
        return self._message(Recv, peer, count_elems, how)

    def _message(
        self, kind: type[Send] | type[Recv], peer: int, count_elems: int, how: Message
    ) -> int | None:
        req = self._req(how.get("blocking", True))
        label = how.get("label", kind.__name__.lower())
        self.ops.append(kind(peer, self._count(count_elems), how["tag"], how["group"], req, label))
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
        if blocking:
            key = (op, group, count_elems, root, label)
            shared = self._shared.get(key)
            if shared is None:
                shared = self._shared[key] = Collective(
                    op,
                    group,
                    self._count(count_elems),
                    None,
                    self.options.algorithm,
                    root,
                    label or op,
                )
            self.ops.append(shared)
            return None
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


def every_rank(build: Callable[[], list[Op]]) -> Callable[[int], list[Op]]:
    """A phase's program for ranks that all run the same operations (data parallelism):
    ``build()`` runs once, on the first call, and every rank gets its own list of the same
    (frozen) operations. Building ResNet-152's program took 73 us, 1.2 s for 16,384
    ranks' copies, each holding its own operation objects."""
    ops: list[Op] | None = None

    def program(rank: int) -> list[Op]:
        nonlocal ops
        if ops is None:
            ops = build()
        return list(ops)

    return program


@dataclass(frozen=True)
class Phase:
    """A separately timed part of a proxy (most proxies have one)."""

    name: str
    program: Callable[[int], list[Op]]  # rank -> one iteration's operations


@dataclass(frozen=True)
class JobRanks:
    """One job's block of a workload that runs several jobs side by side: its ranks
    ``first`` .. ``stop - 1`` and the schedule parameters its collectives run with,
    complete ("rings": multiring orders in group indices, "local_size": hierarchical
    group size and GPUs per node; None where the job has none), as when it runs alone."""

    name: str
    first: int
    stop: int
    collective_params: dict[str, Any]


@dataclass
class Workload:
    """A model instantiated for a world size.

    groups: group kind -> the groups of that kind, each a tuple of global
      ranks in communicator order. Every kind partitions the world.
    info: figures for the summary (total params, global batch, ...).
    """

    model: str
    world_size: int
    params: dict[str, Any]
    groups: dict[str, list[tuple[int, ...]]]
    phases: list[Phase]
    info: dict[str, object] = field(default_factory=dict)
    summary: Callable[[int, float, str], str] | None = None
    summary_all_ranks: bool = False  # the reference prints the summary on every rank
    # Parameters of the project's collective schedules: "rings" (multiring
    # orders, group indices), "local_size" (hierarchical group size).
    collective_params: dict[str, Any] = field(default_factory=dict)
    # Seconds after the start at which each rank begins (None: all at 0), e.g. the
    # ranks of jobs submitted later onto a shared network.
    rank_start_s: list[float] | None = None
    # Several jobs on one network: each job's ranks and schedule parameters (a
    # collective on a group of a job's ranks uses the job's, not collective_params).
    jobs: tuple[JobRanks, ...] = ()
    # What a proxy's start line adds after its rank count: a choice of the build that
    # the command line may not show (the strong-scaling row resnet152_scal emulates).
    start_note: str = ""
    # Message sizes relative to the model's full size (--scale, workload.scale, times the
    # scale a replayed trace set was exported at); None: unknown (a trace set that does
    # not record its scale). A Chakra export records it.
    scale: float | None = 1.0

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
