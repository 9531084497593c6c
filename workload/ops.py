"""Operations of a rank program: what one rank does in one iteration.

A model never calls MPI or a simulator; it describes each rank's iteration as
a list of these operations. Executors (the MPI executor, simnet, the trace
recorder) interpret them.

Units, once for the whole project:
- message sizes are ``count_elems`` float32 elements (``ELEM_BYTES`` = 4 bytes
  each); ``size_bytes`` properties convert;
- compute durations are ``duration_us`` microseconds.

``count_elems`` of a collective follows the MPI call's count argument:
allreduce, bcast, reduce: the whole vector; allgather: each rank's
contribution; reduce_scatter: each rank's block (``MPI_Reduce_scatter_block``);
alltoall: the elements sent to each peer; barrier: ignored (0).

Point-to-point peers are *global* ranks; ``group`` names the group kind whose
communicator carries the message ("pp", "dp", "tp", "mp", "moe", "ep",
"world"). A non-blocking operation has a ``req`` id, unique within the rank's
iteration, that a later :class:`Wait` or :class:`Testany` names.
"""

from __future__ import annotations

from dataclasses import dataclass

from .units import ELEM_BYTES

COLLECTIVE_OPS = (
    "allreduce",
    "allgather",
    "reduce_scatter",
    "alltoall",
    "bcast",
    "reduce",
    "barrier",
)


@dataclass(frozen=True, slots=True)
class Compute:
    """Emulated computation of ``duration_us`` microseconds."""

    duration_us: float
    label: str = "compute"


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``count_elems`` float32 elements to global rank ``peer``.

    Blocking when ``req`` is None, otherwise a non-blocking send.
    """

    peer: int
    count_elems: int
    tag: int
    group: str
    req: int | None = None
    label: str = "send"

    @property
    def size_bytes(self) -> int:
        return self.count_elems * ELEM_BYTES


@dataclass(frozen=True, slots=True)
class Recv:
    """Receive ``count_elems`` float32 elements from global rank ``peer``."""

    peer: int
    count_elems: int
    tag: int
    group: str
    req: int | None = None
    label: str = "recv"

    @property
    def size_bytes(self) -> int:
        return self.count_elems * ELEM_BYTES


@dataclass(frozen=True, slots=True)
class Collective:
    """A collective on this rank's group of kind ``group``.

    ``count_elems`` has MPI count semantics (see the module docstring).
    ``algorithm`` None means the MPI library's own choice (MPI executor) or the
    default policy (simnet); a name from ``workload.collectives.ALGORITHMS``
    selects the project's point-to-point schedule.
    """

    op: str
    group: str
    count_elems: int
    req: int | None = None
    algorithm: str | None = None
    root: int = 0
    label: str = ""

    @property
    def size_bytes(self) -> int:
        return self.count_elems * ELEM_BYTES


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait for all the listed requests (``MPI_Waitall``)."""

    reqs: tuple[int, ...]
    label: str = "wait"


@dataclass(frozen=True, slots=True)
class Testany:
    """Test the listed requests once (``MPI_Testany``): drives progress only."""

    __test__ = False  # not a pytest test class

    reqs: tuple[int, ...]
    label: str = "testany"


Op = Compute | Send | Recv | Collective | Wait | Testany

COMM_OPS = (Send, Recv, Collective, Wait, Testany)


def call_bytes(op: Op, group_size: int) -> int:
    """Bytes named by a communication call (0 for compute, waits and tests).

    Send/Recv: the message. allreduce, bcast, reduce: the vector.
    allgather: the rank's contribution. reduce_scatter: the whole input
    vector (group_size blocks). alltoall: the bytes sent to the other
    ``group_size - 1`` peers. These are algorithm-independent call sizes, not
    wire bytes (which depend on the collective algorithm).
    """
    if isinstance(op, (Send, Recv)):
        return op.count_elems * ELEM_BYTES
    if isinstance(op, Collective):
        b = op.count_elems * ELEM_BYTES
        if op.op == "reduce_scatter":
            return b * group_size
        if op.op == "alltoall":
            return b * (group_size - 1)
        if op.op == "barrier":
            return 0
        return b
    return 0


def describe(op: Op) -> str:
    """A human-readable operation, for timeouts and traces."""
    if isinstance(op, Compute):
        return f"{op.label} ({op.duration_us:g} us compute)"
    if isinstance(op, Send):
        return f"{op.label}: send {op.size_bytes} B to rank {op.peer} (tag {op.tag}, {op.group})"
    if isinstance(op, Recv):
        return f"{op.label}: recv {op.size_bytes} B from rank {op.peer} (tag {op.tag}, {op.group})"
    if isinstance(op, Collective):
        kind = op.op if op.req is None else "i" + op.op
        return f"{op.label}: {kind} of {op.count_elems} elements on the {op.group} group"
    if isinstance(op, Wait):
        return f"{op.label} for requests {list(op.reqs)}"
    return f"{op.label} on requests {list(op.reqs)}"
