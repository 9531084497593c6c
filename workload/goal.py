"""A workload's point-to-point expansion in the GOAL text format (the schedules that
LogGOPSim reads and ATLAHS builds on).

Every collective is expanded into the sends and receives of its schedule
(:mod:`workload.collectives`: the algorithm a ``choose`` function names, by default
MPICH's choice). Each rank becomes a block of labelled operations and dependencies::

    num_ranks 2

    rank 0 {
    l1: calc 15000
    l2: send 4096b to 1 tag 1000000
    l2 requires l1
    }

- ``calc N``: compute, N nanoseconds (the project's microseconds x 1000, rounded);
- ``send Nb to R tag T`` / ``recv Nb from R tag T``: N bytes to or from global rank R;
- ``lA requires lB``: A starts when B has finished.

Ordering follows the project's execution rules: a blocking operation requires what
came before it (the last blocking operation and anything waited for since); a
non-blocking one requires the same but nothing waits for it until the program's
Wait; every transfer of a collective's step s requires all of the rank's transfers of
step s - 1 (each step's receives and sends are posted together and completed
together); a collective in stream order (as NCCL runs a communicator's: see
:func:`workload.collectives.in_stream_order`) also requires the rank's previous one on
its group. Tags keep communicators and collectives apart, as MPI's contexts do: a
point-to-point message of the k-th group kind (kinds sorted by name, from 0) carries
``1,000,000 (k + 1) + tag``; the transfers of a group's n-th collective (from 0) carry
``1,000,000,000 + 1000 n + k``, below 2^31 for up to a million collectives per group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from .collectives import default_algorithm, in_stream_order, runs_as_nccl, schedule_for
from .ops import Collective, Compute, Recv, Send, Testany, Wait
from .program import Workload
from .results import atomic_write

P2P_TAG_BASE = 1_000_000
COLLECTIVE_TAG_BASE = 1_000_000_000
MAX_GROUP_KINDS = 1000

Chooser = Callable[[Collective, int], tuple[str, dict[str, Any]]]


def default_chooser(workload: Workload) -> Chooser:
    """MPICH's algorithm (:func:`default_algorithm`) or the op's named one, with the
    workload's collective parameters."""

    def choose(op: Collective, p: int) -> tuple[str, dict[str, Any]]:
        return op.algorithm or default_algorithm(op.op, p, op.count_elems), dict(
            workload.collective_params
        )

    return choose


def _collective_tag(kind_index: int, seq: int) -> int:
    """The tag of a group's ``seq``-th collective (0-based) of group kind ``kind_index``:
    unique per group and collective, so overlapping collectives never match each
    other's messages."""
    return COLLECTIVE_TAG_BASE + seq * MAX_GROUP_KINDS + kind_index


class _Rank:
    """One rank's GOAL block under construction."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.next = 0
        self.after: list[int] = []  # what the next blocking operation requires

    def op(self, text: str, requires: list[int]) -> int:
        self.next += 1
        label = self.next
        self.out.write(f"l{label}: {text}\n")
        for dep in requires:
            self.out.write(f"l{label} requires l{dep}\n")
        return label


def write_goal(
    workload: Workload,
    path: Path,
    choose: Chooser | None = None,
    progress: Callable[[int], None] | None = None,
    *,
    library: str = "auto",
    stream_order: bool | None = None,
) -> dict[str, int]:
    """Write one iteration of every phase of ``workload`` as a GOAL schedule to
    ``path`` (through :func:`workload.results.atomic_write`); returns counts of sends,
    receives, calcs and bytes sent. ``library`` and ``stream_order``: which collectives
    wait for the rank's previous one on their group, as simnet runs them
    (``collectives.library`` and ``collectives.stream_order``)."""
    order = (library, stream_order)
    choose = choose or default_chooser(workload)
    kinds = {k: i for i, k in enumerate(sorted(workload.groups))}
    if len(kinds) >= MAX_GROUP_KINDS:
        raise ValueError(f"GOAL export supports up to {MAX_GROUP_KINDS - 1} group kinds")
    counts = {"sends": 0, "recvs": 0, "calcs": 0, "bytes": 0}

    def write(out: TextIO) -> None:
        out.write(f"num_ranks {workload.world_size}\n")
        for rank in range(workload.world_size):
            out.write(f"\nrank {rank} {{\n")
            _write_rank(out, workload, rank, kinds, choose, counts, order)
            out.write("}\n")
            if progress is not None:
                progress(rank)

    # Through the project's writer: a link is followed and /dev/null written into,
    # never replaced by a file (a rename over them would).
    atomic_write(path, write)
    return counts


def _write_rank(
    out: TextIO,
    workload: Workload,
    rank: int,
    kinds: dict[str, int],
    choose: Chooser,
    counts: dict[str, int],
    order: tuple[str, bool | None],
) -> None:
    r = _Rank(out)
    seq: dict[tuple[str, int], int] = {}  # (kind, group's first rank) -> collectives so far
    # (kind, group's first rank) -> the last operations of the rank's previous collective
    # in stream order on that group
    streams: dict[tuple[str, int], list[int]] = {}
    for phase in workload.phases:
        ends: dict[int, list[int]] = {}  # request -> its last operations
        for op in phase.program(rank):
            if isinstance(op, Compute):
                label = r.op(f"calc {round(op.duration_us * 1000)}", r.after)
                counts["calcs"] += 1
                r.after = [label]
            elif isinstance(op, Wait):
                for req in op.reqs:
                    r.after = r.after + ends.pop(req, [])
            elif isinstance(op, Testany):
                continue
            elif isinstance(op, (Send, Recv)):
                tag = P2P_TAG_BASE * (kinds[op.group] + 1) + op.tag
                if isinstance(op, Send):
                    text = f"send {op.size_bytes}b to {op.peer} tag {tag}"
                    counts["sends"] += 1
                    counts["bytes"] += op.size_bytes
                else:
                    text = f"recv {op.size_bytes}b from {op.peer} tag {tag}"
                    counts["recvs"] += 1
                label = r.op(text, r.after)
                if op.req is None:
                    r.after = [label]
                else:
                    ends[op.req] = [label]
            else:
                last = _collective(
                    r, workload, rank, op, kinds, seq, choose, counts, order, streams
                )
                if op.req is None:
                    r.after = last or r.after
                else:
                    ends[op.req] = last
        for labels in ends.values():  # never waited for: complete before the next phase
            r.after = r.after + labels


def _collective(
    r: _Rank,
    workload: Workload,
    rank: int,
    op: Collective,
    kinds: dict[str, int],
    seq: dict[tuple[str, int], int],
    choose: Chooser,
    counts: dict[str, int],
    order: tuple[str, bool | None],
    streams: dict[tuple[str, int], list[int]],
) -> list[int]:
    members = workload.group_of(op.group, rank)
    p = len(members)
    key = (op.group, members[0])
    n = seq.get(key, 0)
    seq[key] = n + 1
    if p == 1 or (op.count_elems == 0 and op.op != "barrier"):
        return []
    algorithm, params = choose(op, p)
    schedule = schedule_for(op.op, algorithm, p, op.count_elems, root=op.root, params=params)
    me = members.index(rank)
    tag = _collective_tag(kinds[op.group], n)
    before = r.after
    library, stream_order = order
    steps = schedule.rank_steps(me)
    streamed = in_stream_order(
        stream_order, runs_as_nccl(op.algorithm, algorithm, library), len(steps)
    )
    if streamed:
        before = before + [x for x in streams.get(key, []) if x not in before]
    for sends, recvs in steps:
        step = []
        for t in recvs:
            step.append(r.op(f"recv {t.size_bytes}b from {members[t.src]} tag {tag}", before))
            counts["recvs"] += 1
        for t in sends:
            step.append(r.op(f"send {t.size_bytes}b to {members[t.dst]} tag {tag}", before))
            counts["sends"] += 1
            counts["bytes"] += t.size_bytes
        before = step
    if streamed:
        streams[key] = before
    return before


def iter_goal_ops(text: str) -> Iterator[tuple[int, str]]:
    """(rank, operation line) of a GOAL schedule's operations, for checks."""
    rank = -1
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("rank "):
            rank = int(line.split()[1])
        elif line.startswith("l") and ":" in line:
            yield rank, line.split(":", 1)[1].strip()
