"""Static figures of a rank program: operation counts, call bytes, buffer needs.

Derived from the operations alone, so every executor reports the same
figures for the same program.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from .ops import ELEM_BYTES, Collective, Compute, Op, Recv, Send, call_bytes
from .program import Workload
from .units import MIB

BASE_RANK_BYTES = 80 * MIB  # interpreter, mpi4py and MPI's own state (measured 42-46 MB)


@dataclass
class ProgramStats:
    """Per-rank, per-iteration figures (bytes are call bytes, see ops.call_bytes)."""

    op_counts: Counter[str] = field(default_factory=Counter)  # "send", "allreduce", ...
    calls_by_group: Counter[str] = field(default_factory=Counter)
    bytes_by_group: Counter[str] = field(default_factory=Counter)
    compute_us: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "op_counts": dict(self.op_counts),
            "calls_by_group": dict(self.calls_by_group),
            "call_bytes_by_group": dict(self.bytes_by_group),
            "compute_us": self.compute_us,
        }


def op_name(op: Op) -> str:
    if isinstance(op, Collective):
        return op.op if op.req is None else "i" + op.op
    name = type(op).__name__.lower()
    if isinstance(op, (Send, Recv)) and op.req is not None:
        return "i" + name
    return name


def program_stats(workload: Workload, rank: int, ops: Sequence[Op]) -> ProgramStats:
    s = ProgramStats()
    for op in ops:
        s.op_counts[op_name(op)] += 1
        if isinstance(op, Compute):
            s.compute_us += op.duration_us
        elif isinstance(op, (Send, Recv, Collective)):
            size = len(workload.group_of(op.group, rank))
            s.calls_by_group[op.group] += 1
            s.bytes_by_group[op.group] += call_bytes(op, size)
    return s


@dataclass(frozen=True)
class BufferNeeds:
    """Scratch buffers one rank allocates, in float32 elements.

    send_elems: the send-only buffer (never written, so it stays on the zero page);
      collectives over two or more ranks send from it too.
    recv_elems: the receive buffer (in place for a group of one rank), as allocated.
    mpi_temp_bytes: the largest temporary MPI itself allocates for a reduction
      (MPICH's reduce-scatter/allreduce algorithms copy the vector once).
    touched_recv_elems: the part of the receive buffer MPI writes, so resident (None:
      all of it). An in-place collective over a group of one rank moves nothing, so
      its buffer, allocated but never written, stays off the memory (measured:
      ``gpt3 4 2`` on 16 ranks, estimated 29.8 GiB counting them, peaked at 3.1 GiB).
    """

    send_elems: int
    recv_elems: int
    mpi_temp_bytes: int
    touched_recv_elems: int | None = None

    @property
    def resident_bytes(self) -> int:
        touched = self.recv_elems if self.touched_recv_elems is None else self.touched_recv_elems
        return BASE_RANK_BYTES + touched * ELEM_BYTES + self.mpi_temp_bytes


def buffer_needs(workload: Workload, rank: int, programs: Sequence[Sequence[Op]]) -> BufferNeeds:
    send = recv = touched = temp = 0
    for ops in programs:
        for op in ops:
            if isinstance(op, Send):
                send = max(send, op.count_elems)
            elif isinstance(op, Recv):
                recv = max(recv, op.count_elems)
                touched = max(touched, op.count_elems)
            elif isinstance(op, Collective):
                p = len(workload.group_of(op.group, rank))
                n = op.count_elems
                got = n * p if op.op in ("allgather", "reduce_scatter", "alltoall") else n
                recv = max(recv, got)
                # Over one rank only alltoall and reduce copy (send -> receive buffer);
                # the in-place ones leave the buffer untouched (a project schedule
                # over one rank has no step at all).
                if p > 1 or (op.algorithm is None and op.op in ("alltoall", "reduce")):
                    touched = max(touched, got)
                whole = n * p if op.op in ("allgather", "reduce_scatter", "alltoall") else n
                # Sent from the send buffer: alltoall and reduce always, the others
                # over two or more ranks (over one they run in place).
                sent = {"alltoall": whole, "reduce": whole}
                if p > 1:
                    sent |= {"allreduce": n, "reduce_scatter": whole, "allgather": n}
                send = max(send, sent.get(op.op, 0))
                if op.algorithm is not None:
                    # The project's schedules send slices of the send buffer.
                    send = max(send, whole)
                if p > 1 and op.op in ("allreduce", "reduce_scatter", "reduce"):
                    vec = n * p if op.op == "reduce_scatter" else n
                    temp = max(temp, vec * ELEM_BYTES)
    return BufferNeeds(send, recv, temp, touched)
