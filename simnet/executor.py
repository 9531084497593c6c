"""The simnet executor: runs rank programs as simpy processes on a FlowNetwork.

Each rank is a process that walks its operations. Point-to-point messages are
matched like MPI: one FIFO per (group kind, source, destination, tag), so
messages between a pair with the same tag never overtake each other.
Collectives expand into the point-to-point schedules of
``workload.collectives``; the messages of one collective are matched on their
own channels (keyed by the collective's sequence number on its group), so
concurrent non-blocking collectives never mix.

Protocol: a message of at most ``eager_threshold_bytes`` is sent eagerly (the
data leaves when the send is posted and the send completes at once); a larger
one uses rendezvous (the data leaves once both sides have posted, and both
complete when it is delivered).

Implementation: a rank "process" is a small state machine, not a simpy
generator: it runs its operations until one must wait, and the completion of
what it waits for (a compute timeout, or the delivery of a message, which the
network reports by callback from its batched wake-ups) runs it on. So the
messages of a bulk-synchronous step cost no simpy event each; simulated
times are those of the event-per-message formulation.
"""

from __future__ import annotations

import gc
import operator
import time
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import simpy

try:
    import cython
except ImportError:  # no Cython here: this module runs as the Python it is
    from . import _nocython as cython

from workload.collectives import (
    LIBRARIES,
    NCCL_ALGORITHMS,
    FlatPlan,
    Schedule,
    default_channels,
    in_stream_order,
    mpich_algorithm,
    runs_as_nccl,
    schedule_for,
    stand_in,
    stand_in_note,
    stream_steps,
    stream_tree,
)
from workload.ops import Collective, Compute, Op, Recv, Send, Testany, Wait
from workload.program import Workload
from workload.results import counted
from workload.step_table import StepTable
from workload.units import ELEM_BYTES, S_PER_US

from .network import FlowNetwork, _IntTable, _Path, _Sink
from .ring_stream import RingRun
from .tree_stream import TreePipeline

DEFAULT_EAGER_THRESHOLD_BYTES = 65536

# A step of a member's plan (``Schedule.rank_plan``): the members it receives from, and
# its sends as (member, size_bytes, reduce).
_PlanStep = tuple[tuple[int, ...], tuple[tuple[int, int, bool], ...]]
# The same step as the executor keeps it, one flat tuple: the number of members it
# receives from, those members, then (member, size_bytes) per send. One object a step,
# not three: a data-parallel step of thousands of ranks keeps one per rank and step.
_FlatStep = tuple[int, ...]
# Rank plans up to this many steps per group (all members) are kept for reuse.
_PLAN_CACHE_STEPS = 1 << 22


def node_layout(
    members: Sequence[int], placement: Sequence[int], local_size: int | None
) -> tuple[int | tuple[int, ...] | None, tuple[int, ...] | None]:
    """How a group of ranks ``members`` sits on the nodes, ranks on endpoints by
    ``placement``: (how many of them each node holds, the member indices node by node
    where the group's order is not: None when it is). The count is a tuple, each
    node's, when the nodes hold different numbers of them, and None without a node size
    (``local_size``). Nodes are blocks of ``local_size`` endpoints, taken in the order
    the group first reaches them, each node's members in group order, as NCCL orders a
    communicator's GPUs by node whatever their ranks."""
    if not local_size:
        return None, None
    by_node: dict[int, list[int]] = {}
    for i, m in enumerate(members):
        by_node.setdefault(placement[m] // local_size, []).append(i)
    sizes = tuple(len(v) for v in by_node.values())
    order = tuple(i for v in by_node.values() for i in v)
    return (
        sizes[0] if len(set(sizes)) == 1 else sizes,
        None if order == tuple(range(len(members))) else order,
    )


class ProgramsStuckError(RuntimeError):
    """The rank programs cannot all run to their end: a rank waits for a message nobody
    sends, or messages are left unmatched (a workload or trace MPI could not run)."""


@dataclass
class AlgorithmPolicy:
    """Which schedule a collective runs.

    by_op: op -> algorithm name, overriding the default policy.
    fixed: one algorithm for every op that supports it (e.g. "ring").
    local_size: group size of the hierarchical algorithm; GPUs per node of the
      NCCL algorithms (a group is laid out over the nodes its ranks sit on, however
      many of them each holds; where that is not known, a group it does not divide
      is laid out as one node).
    rings: ring orders of the multiring algorithm (group indices).
    channels, pipeline_chunks: of the NCCL algorithms (None: their defaults).
    streamed_rings: "nccl_ring" run as NCCL runs it streams each run of its ring steps
      (``workload.collectives.stream_steps``).
    streamed_trees: "nccl_tree" run as NCCL runs it streams its pipeline, one message per
      tree edge and way (``workload.collectives.stream_tree``).
    Otherwise the MPICH-like ``default_algorithm`` picks by size.
    """

    by_op: dict[str, str] = field(default_factory=dict)
    fixed: str | None = None
    local_size: int | None = None
    rings: list[list[int]] | None = None
    channels: int | None = None
    pipeline_chunks: int | None = None
    streamed_rings: bool = False
    streamed_trees: bool = False
    # Why an asked-for algorithm was not used, one line per distinct case (in order).
    fallbacks: dict[str, None] = field(default_factory=dict)
    # How the NCCL algorithms laid their groups out, one line per distinct case.
    layouts: dict[str, None] = field(default_factory=dict)
    # Where MPICH's default is not run (not implemented, or not at this size) and a
    # stand-in ran, one line per case.
    stand_ins: dict[str, None] = field(default_factory=dict)
    # The NCCL algorithms that streamed (nccl_ring, nccl_tree), in order.
    streamed: dict[str, None] = field(default_factory=dict)

    def choose(self, op: Collective, p: int, per_node: int | tuple[int, ...] | None = None) -> str:
        from workload.collectives import ALGORITHMS

        name = op.algorithm or self.by_op.get(op.op) or self.fixed
        mpich = mpich_algorithm(op.op, p, op.count_elems)
        default = stand_in(op.op, mpich, p)
        if not name:
            if mpich != default:
                note = stand_in_note(op.op, mpich, default)
                if note:
                    self.stand_ins[note] = None
            return default
        algs = ALGORITHMS[op.op]
        if name in NCCL_ALGORITHMS and name not in algs and "nccl_ring" in algs:
            # NCCL has its tree for allreduce only: it runs the others with its ring.
            name = self._fallback(
                op.op, name, "nccl_ring", f"NCCL runs {op.op} with its ring, not a tree"
            )
        if name not in ALGORITHMS[op.op]:
            return self._fallback(
                op.op,
                name,
                default,
                f"{op.op} has no {name!r} schedule (it has {', '.join(sorted(ALGORITHMS[op.op]))})",
            )
        if name == "hierarchical" and (not self.local_size or p % self.local_size):
            why = (
                "no group size is set"
                if not self.local_size
                else f"group size {self.local_size} does not divide {p} ranks"
            )
            return self._fallback(op.op, name, default, why)
        if name == "multiring" and (not self.rings or len(self.rings[0]) != p):
            why = (
                "no ring orders are set"
                if not self.rings
                else f"the ring orders have {len(self.rings[0])} ranks, the group {p}"
            )
            alt = "ring" if "ring" in ALGORITHMS[op.op] else default
            return self._fallback(op.op, name, alt, why)
        if (
            name in NCCL_ALGORITHMS
            and self.local_size
            and per_node is None
            and self._nccl_local(p, per_node) is None
        ):
            self.fallbacks[
                f"{op.op}: {name!r} over {p} ranks, which nodes of {self.local_size} GPUs "
                "do not divide: laid out as one node"
            ] = None
        return name

    def _nccl_local(self, p: int, per_node: int | tuple[int, ...] | None) -> int | None:
        """GPUs per node of a group of ``p`` for the NCCL algorithms: as the group sits on
        the nodes (``per_node``; None where its nodes hold different numbers of it), else
        (where it is not known) the node size if it divides ``p``, else None."""
        if per_node is not None:
            return per_node if type(per_node) is int else None
        local = self.local_size
        return local if local and p % local == 0 else None

    def params(
        self,
        p: int,
        per_node: int | tuple[int, ...] | None = None,
        node_order: tuple[int, ...] | None = None,
        alg: str | None = None,
    ) -> dict[str, Any]:
        """The schedule parameters for a group of ``p`` ranks (``schedule_for``'s params)
        running ``alg`` (None: any; it decides whether an NCCL algorithm streams);
        ``per_node``: how many of them each node holds, if known (a tuple, each node's,
        where they differ); ``node_order``: the members node by node where the group's
        own order is not (member indices)."""
        local = self._nccl_local(p, per_node)
        sizes = per_node if type(per_node) is tuple else None
        return {
            "rings": self.rings,
            "local_size": self.local_size,
            "nccl_local_size": local,
            "nccl_node_sizes": sizes,
            "node_order": node_order if local or sizes else None,
            "channels": self.channels,
            "pipeline_chunks": self.pipeline_chunks,
            "streamed": (alg == "nccl_ring" and self.streamed_rings)
            or (alg == "nccl_tree" and self.streamed_trees),
        }

    def params_for(
        self,
        op: Collective,
        alg: str,
        p: int,
        per_node: int | tuple[int, ...] | None,
        node_order: tuple[int, ...] | None,
        library: str,
    ) -> dict[str, Any]:
        """:meth:`params` for ``op`` run with ``alg`` under ``library``: rings and trees
        stream only where they run as NCCL runs them (no per-message host overhead,
        handshake or step cost, which a stream standing for many steps would pay once)."""
        params = self.params(p, per_node, node_order, alg)
        if params["streamed"] and not runs_as_nccl(op.algorithm, alg, library):
            params["streamed"] = False
            what = "rings" if alg == "nccl_ring" else "trees"
            self.fallbacks[
                f"{op.op} {alg}: not streamed (collectives.streamed_{what}), it runs "
                "with MPI's protocol (collectives.library or the program's own schedule)"
            ] = None
        elif params["streamed"]:
            self.streamed[alg] = None
        return params

    def note_layout(self, op: str, alg: str, p: int, params: dict[str, Any]) -> None:
        """Record how an NCCL algorithm lays out a group of ``p`` (``params`` as
        :meth:`params` made them): its nodes and channels."""
        local = params["nccl_local_size"]
        sizes = params.get("nccl_node_sizes")
        c = params["channels"] or default_channels(min(sizes) if sizes else local)
        if sizes:
            nodes = f"{len(sizes)} nodes of {'+'.join(map(str, sizes))}"
        elif local is None:  # (no node structure)
            nodes = "laid out as one node"
        else:
            nodes = f"one node of {p}" if local == p else f"{p // local} nodes of {local}"
        if params.get("node_order") is not None:
            # (NCCL orders a group's GPUs by node whatever their ranks: so does the layout)
            nodes += " (its ranks taken node by node)"
        kind = "tree pair" if alg == "nccl_tree" else "ring"
        given = "" if params["channels"] else " (the default)"
        streamed = ""
        if params.get("streamed"):
            streamed = (
                ", each run of its steps streamed (one message per hop, then what its steps "
                "take beyond it)"
                if alg == "nccl_ring"
                else ", its pipeline streamed (one message per edge and way, then what its "
                "steps take beyond it)"
            )
        self.layouts[
            f"{op} {alg} over {p} ranks: {nodes}, {counted(c, 'channel')}{given}, a {kind} "
            f"per channel{streamed}"
        ] = None

    def _fallback(self, op: str, asked: str, used: str, why: str) -> str:
        self.fallbacks[f"{op}: {asked!r} asked for, {used!r} used: {why}"] = None
        return used


def _flatten(plan: tuple) -> FlatPlan:
    """A schedule's ``rank_plan`` as ``_Plan`` keeps it (``workload.collectives.FlatPlan``,
    what ``Schedule.rank_flat`` gives where the schedule makes it directly): its steps
    flattened, the bytes sent per destination member (reduced, copied) and the messages
    sent, over all steps.

    The byte totals are flat tuples ``(member, bytes, member, bytes, ...)``, members in
    the order they are first sent to. Equal steps are one shared tuple: each distinct
    one is flattened once and its bytes counted once, times its uses (a ring's
    thousands of steps are a few distinct ones), and equal flattened steps are one
    tuple too (a step that reduces and one that copies the same size to the same
    peer flatten equal: plans are much of a big run's memory)."""
    uses: dict[int, list] = {}  # id -> [step, uses, flattened]
    same: dict[tuple, tuple] = {}
    flat: list[_FlatStep] = []
    for st in plan:
        u = uses.get(id(st))
        if u is None:
            recvs = st[0]
            f = [len(recvs)]
            f.extend(recvs)
            for send in st[1]:
                f.append(send[0])
                f.append(send[1])
            t = tuple(f)
            u = uses[id(st)] = [st, 0, same.setdefault(t, t)]
        u[1] += 1
        flat.append(u[2])
    copy: dict[int, int] = {}
    reduce: dict[int, int] = {}
    messages = 0
    for u in uses.values():
        st = u[0]
        n = u[1]
        sends = st[1]
        messages += n * len(sends)
        for send in sends:
            tot = reduce if send[2] else copy
            peer = send[0]
            tot[peer] = tot.get(peer, 0) + n * send[1]
    return tuple(flat), _pairs_flat(reduce), _pairs_flat(copy), messages


def _pairs_flat(d: dict) -> tuple:
    """``{k: v, ...}`` as ``(k, v, ...)``: 264 bytes for 14 pairs, the dict 632."""
    out = []
    for k, v in d.items():
        out.append(k)
        out.append(v)
    return tuple(out)


class _RowSums:
    """The pair totals that one rank's tallies add to while they settle, summed in small
    dicts (one for each pair-total dict they add to), then added to those dicts once a
    pair (``add_up``): a rank's tallies add to the same few pairs again and again, and
    the totals' dicts (hundreds of thousands of pairs on a big run) are too large for the
    caches, a miss an update. Each small dict holds its pairs in the order of their
    first update, so the pairs new to a total come into it in the order they would have
    one update at a time: the totals and their order are the same."""

    __slots__ = ("accts", "sums")

    def __init__(self) -> None:
        self.accts: list[dict[int, int]] = []
        self.sums: list[dict[int, int]] = []

    def of(self, acct: dict[int, int]) -> dict[int, int]:
        """The small dict that stands for the pair totals ``acct`` until ``add_up``."""
        for i in range(len(self.accts)):
            if self.accts[i] is acct:
                return self.sums[i]
        d: dict[int, int] = {}
        self.accts.append(acct)
        self.sums.append(d)
        return d

    def add_up(self) -> None:
        """Add the sums to the totals they stand for, and start afresh."""
        for i in range(len(self.accts)):
            acct = self.accts[i]
            for key, b in self.sums[i].items():
                total = acct.get(key, 0)
                acct[key] = total + b
        self.accts = []
        self.sums = []


def _add_bytes(adds: tuple, calls: int, into: _RowSums) -> None:
    """Count ``calls`` calls' bytes of a collective's part (see ``PhaseSim._prepare``):
    each of ``adds`` is ``(pair counts, row key, members, (member, bytes, ...))``; the
    pair counts summed in ``into`` first."""
    for add in adds:
        acct = into.of(add[0])
        row = add[1]
        members = add[2]
        tot = add[3]
        for i in range(0, len(tot), 2):
            # Compiled, the arithmetic is on C integers and the key made once: two new
            # objects a pair, not three (millions of pairs at the end of a big run).
            j = tot[i]
            member = members[j]
            size = tot[i + 1]
            key = row + member
            total = acct.get(key, 0)
            acct[key] = total + calls * size


class _Tally:
    """The bytes one rank's calls of one collective send (``adds``, as ``_add_bytes``
    takes them) and how many of its calls are not counted in yet (-1: none ever made);
    ``row``: the row key (rank * world) of the pairs they add to.

    Calls are counted here and their bytes added per pair in bulk when the totals are
    read (``PhaseSim._settle_bytes``): a call of a collective on thousands of ranks
    would otherwise update a dozen or more pair totals in dictionaries too large for
    the caches, the run's largest source of cache misses."""

    __slots__ = ("adds", "calls", "row")

    def __init__(self, adds: tuple, row: int) -> None:
        self.adds = adds
        self.calls = -1
        self.row = row

    def settle(self, into: _RowSums) -> None:
        """Add the calls counted since the last time to the pair totals (summed in
        ``into``, the rank's, first)."""
        n = self.calls
        if n > 0:
            _add_bytes(self.adds, n, into)
            self.calls = 0


class _TableTally(_Tally):
    """A ``_Tally`` whose bytes are read from a step table (member ``me``'s column, its
    members' ranks ``members``) when settled, into ``reduced`` / ``copied`` (pair totals,
    None where the member sends none of that part): no per-member totals are kept."""

    __slots__ = ("copied", "me", "members", "reduced", "table")

    def __init__(
        self,
        table: _StepTable,
        me: int,
        members: tuple[int, ...],
        reduced: dict[int, int] | None,
        copied: dict[int, int] | None,
        row: int,
    ) -> None:
        _Tally.__init__(self, (), row)
        self.table = table
        self.me = me
        self.members = members
        self.reduced = reduced
        self.copied = copied

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def settle(self, into: _RowSums) -> None:
        n = self.calls
        if n <= 0:
            return
        self.calls = 0
        # The rank's sums standing for the two totals while it settles (see _RowSums).
        reduced = into.of(self.reduced) if self.reduced is not None else None
        copied = into.of(self.copied) if self.copied is not None else None
        t = self.table
        s = t.s
        me = self.me
        # Consecutive sends of one part to one member are added up first (a ring's
        # thousands of steps are two such runs): the pair totals see each run once, in
        # the order of its first step, as they would see each send.
        last = -1  # the run's member, -1: none yet
        red = 0
        run_bytes = 0
        for i in range(t.nsteps[me]):
            k = me * s + i
            d = t.dst[k]
            if d < 0:
                continue
            if d != last or t.reduce[k] != red:
                if last >= 0:
                    self._add(reduced if red else copied, last, n * run_bytes)
                last = d
                red = t.reduce[k]
                run_bytes = 0
            run_bytes += t.nbytes[k]
        if last >= 0:
            self._add(reduced if red else copied, last, n * run_bytes)

    def _add(self, acct: dict[int, int], member: int, nbytes: int) -> None:
        """Add ``nbytes`` to the pair total from this rank to ``member`` in ``acct``."""
        key = self.row + self.members[member]
        total = acct.get(key, 0)
        acct[key] = total + nbytes


def _tally_row(tally: _Tally) -> int:
    """The row key (rank * world) of the pairs a tally adds to."""
    return tally.row


def _count_call(tally: _Tally, sim: PhaseSim) -> None:
    """One more call of ``tally``'s collective part; listed in ``sim``'s on its first."""
    n = tally.calls
    if n < 0:
        sim._tallies.append(tally)
        n = 0
    tally.calls = n + 1


class _Seq:
    """A rank's collective calls on one group: the number of its next (every member's
    k-th call on the group is the same instance) and, with stream order, the stream
    they run in one at a time (made at its first call in stream order). Shared by the
    rank's prepared calls of every collective on that group (``_Call.seq``)."""

    __slots__ = ("n", "stream")

    def __init__(self) -> None:
        self.n = 0
        self.stream: _Stream | None = None


class _Call:
    """What every call of one collective on one rank shares, made by
    ``PhaseSim._prepare`` at its first call: ``steps`` (the schedule's ``_StepTable``, or
    the rank's flat steps; None for a group of one), ``tally`` (its calls' bytes, counted
    lazily; None: it sends none), ``messages`` it sends a call, ``delays`` (seconds after
    each step; None: none), ``me`` (its index in the group), ``endpoints`` (the group's,
    in member order), ``prows`` (the group's kept paths, or None), ``streamed`` (a call
    waits for the rank's earlier ones on the group), ``nccl`` (it runs as NCCL runs it),
    ``owned`` (a non-blocking call moves on only in its rank's MPI calls), ``pipes`` (a
    streamed ring's or tree's, see ``PhaseSim._stream_pipes``; else None).

    ``seq`` numbers the rank's calls on the group (and holds their stream);
    instance k's channels are numbered from ``base + k * stride`` (see ``_start_call``)."""

    __slots__ = (
        "base",
        "delays",
        "endpoints",
        "me",
        "messages",
        "nccl",
        "owned",
        "pipes",
        "prows",
        "rank",
        "seq",
        "sim",
        "steps",
        "streamed",
        "stride",
        "tally",
    )


def _call(c: _Call, op: Collective, done: Callable[[], None] | None) -> bool:
    """The rank of ``c`` calls ``op`` (prepared as ``c``); True if it completed at once,
    else ``done`` is called when it completes. With stream order it starts once the
    rank's earlier collectives on its group have completed."""
    # Its instance number is taken now, in call order, whenever it starts: every
    # member's k-th call on the group is the same collective.
    seq = c.seq
    k = seq.n
    seq.n = k + 1
    if not c.streamed:
        return _start_call(c, op, done, k)
    stream = seq.stream
    if stream is None:
        stream = seq.stream = _Stream(c.sim)
    return stream.call(op, done, c, k)


def _start_call(c: _Call, op: Collective, done: Callable[[], None] | None, k: int) -> bool:
    """Start instance ``k`` of the rank's calls of ``op`` (prepared as ``c``) now; True
    if it completed at once, else ``done`` is called when it completes."""
    if c.steps is None:  # a group of one
        return True
    # Bytes count when the collective starts (all its data will go).
    if c.tally is not None:
        _count_call(c.tally, c.sim)
    coll = _Coll(
        c.sim, c.steps, c.base + k * c.stride, c.me, c.endpoints, done, c.delays, c.prows, c.nccl
    )
    coll.late = c.pipes
    if c.owned and op.req is not None:
        coll.owner = c.sim.ranks[c.rank]
    return coll.advance()


class _StepTable:
    """A schedule's :class:`~workload.step_table.StepTable` as ``_Coll.advance`` reads it:
    the arrays flattened member-major (member ``me``'s step ``i`` at ``me * s + i``, ``s``
    the schedule's steps), as C
    arrays when compiled (typed memoryviews over numpy's), as Python memoryviews over
    them in Python (lists would take 36 bytes an entry where the arrays take 4 or 8).
    ``reduces`` / ``copies``: per member, whether it sends any reduction / copied data;
    ``reduced_into``: whether it receives any data to reduce (it pays gamma for it).
    ``row``: per step, the number of its row of destinations among the distinct rows of
    the tables given the same ``row_ids`` (a step's members' paths are kept by it, see
    ``PhaseSim._path_rows``); ``rows``: the table's distinct row numbers.
    """

    __slots__ = (
        "copies",
        "dst",
        "messages",
        "nbytes",
        "nsteps",
        "p",
        "reduce",
        "reduced_into",
        "reduces",
        "row",
        "rows",
        "s",
        "src",
    )

    def __init__(self, table: StepTable, row_ids: dict[bytes, int]) -> None:

        self.p = table.group_size
        self.messages = table.messages.tolist()
        sends = table.dst >= 0
        self.reduces = (sends & table.reduce).any(axis=0).tolist()
        self.copies = (sends & ~table.reduce).any(axis=0).tolist()
        into = np.bincount(table.dst[sends & table.reduce], minlength=self.p) > 0
        self.reduced_into = into.tolist()
        # Equal rows (the same destinations of every member: a recursive schedule's
        # halving and doubling steps at one distance, every step of a ring) share a
        # number, and so the paths kept for them.
        by_step = np.ascontiguousarray(table.dst, dtype=np.intc)
        row = np.array(
            [row_ids.setdefault(by_step[i].tobytes(), len(row_ids)) for i in range(len(by_step))],
            dtype=np.longlong,
        )
        # Member-major: a member's steps, taken one after another, are neighbours in
        # memory (16 a cache line of src or dst), where step-major put each of them in
        # another line (the table's row of that step for all members).
        self.s = len(by_step)
        src = np.ascontiguousarray(table.src.T, dtype=np.intc).ravel()
        dst = np.ascontiguousarray(table.dst.T, dtype=np.intc).ravel()
        nbytes = np.ascontiguousarray(table.nbytes.T, dtype=np.longlong).ravel()
        reduce = np.ascontiguousarray(table.reduce.T, dtype=np.uint8).ravel()
        nsteps = np.ascontiguousarray(table.nsteps, dtype=np.longlong)
        self.rows = sorted(set(row.tolist()))
        # Compiled, the typed fields take the arrays; in Python, memoryviews over them
        # (indexed as lists are, at the arrays' size in memory).
        view = _same if cython.compiled else memoryview
        self.src = view(src)
        self.dst = view(dst)
        self.nbytes = view(nbytes)
        self.reduce = view(reduce)
        self.nsteps = view(nsteps)
        self.row = view(row)

    def steps_of(self, m: int) -> int:
        """The steps member ``m`` takes part in."""
        return self.nsteps[m]


def _same(x: object) -> object:
    return x


def _reduced_bytes_received(table: _StepTable) -> np.ndarray | None:
    """``(members, steps)``: the bytes to reduce that each member receives at each of its
    steps (a member's steps as ``table`` numbers them, its own), or None if the table's
    sends and receives do not pair up. A pair's transfers are in step order on both
    sides, so the k-th receive of member r from member j is the k-th send of j to r."""
    p = table.p
    s = table.s
    src = np.asarray(table.src).reshape(p, s)
    dst = np.asarray(table.dst).reshape(p, s)
    nbytes = np.asarray(table.nbytes).reshape(p, s)
    reduce = np.asarray(table.reduce).reshape(p, s) != 0
    sm, si = np.nonzero(dst >= 0)  # each send: its member and step
    rm, ri = np.nonzero(src >= 0)  # each receive
    if len(sm) != len(rm):
        return None
    to = dst[sm, si]
    frm = src[rm, ri]
    so = np.lexsort((si, to, sm))  # by sender, then receiver, then step
    ro = np.lexsort((ri, rm, frm))
    if not (np.array_equal(sm[so], frm[ro]) and np.array_equal(to[so], rm[ro])):
        return None
    sm, si, rm, ri = sm[so], si[so], rm[ro], ri[ro]
    red = reduce[sm, si]
    out = np.zeros((p, s), dtype=np.int64)
    out[rm[red], ri[red]] = nbytes[sm[red], si[red]]
    return out


def _delay_lists(table: _StepTable, costs: tuple[float, float]) -> list | None:
    """Every member's ``SimExecutor._delays`` under ``costs`` (gamma s/B, s per step)
    from its step table, by member; members with equal delays share one list. None if
    the table's transfers do not pair up (see ``_reduced_bytes_received``)."""
    got = _reduced_bytes_received(table)
    if got is None:
        return None
    gamma, step_s = costs
    # As _delays: gamma times the step's (integer) bytes, then plus the step's cost.
    delays = step_s + gamma * got.astype(np.float64)
    nsteps = np.asarray(table.nsteps)
    shared: dict[bytes, list[float]] = {}
    out = []
    for m in range(table.p):
        row = delays[m, : nsteps[m]]
        b = row.tobytes()
        lst = shared.get(b)
        if lst is None:
            lst = shared[b] = row.tolist()
        out.append(lst)
    return out


@dataclass(frozen=True, slots=True)
class _Plan:
    """One member's part of a collective, for the executor, in member indices (the
    same for every group of that size: a group's own members and their endpoints are
    applied as it runs).

    ``steps``: the schedule's step table (``_StepTable``, every member's steps; then
    ``reduce_bytes`` and ``copy_bytes`` are empty: the table has them), or its
    ``rank_flat``, or its ``rank_plan`` with each step
    flattened (``_FlatStep``: the
    number of members it receives from, those members, then ``member, size_bytes`` per
    send; equal steps stay one shared tuple); ``reduce_bytes`` / ``copy_bytes``:
    bytes it sends per destination member, over all steps, flat (``member, bytes, ...``,
    members in the order first sent to); ``messages``: how many
    messages it sends, over all steps; ``delays``: per step, the seconds it then spends
    reducing what it received (None: none).
    """

    steps: tuple[_FlatStep, ...] | _StepTable
    reduce_bytes: tuple[int, ...]
    copy_bytes: tuple[int, ...]
    messages: int
    delays: list[float] | None = None


@dataclass
class RankTimeline:
    """Start and end (seconds) of every operation of one rank, per iteration."""

    starts: list[list[float]] = field(default_factory=list)
    ends: list[list[float]] = field(default_factory=list)


class SimExecutor:
    """Simulates the phases of a workload; one fresh network per phase."""

    def __init__(
        self,
        workload: Workload,
        make_network: Callable[[simpy.Environment], FlowNetwork],
        placement: Sequence[int],
        *,
        policy: AlgorithmPolicy | None = None,
        eager_threshold_bytes: int = DEFAULT_EAGER_THRESHOLD_BYTES,
        compute_scale: float = 1.0,
        gamma_s_per_byte: float = 0.0,
        gamma_for_named_algorithms: bool = False,
        step_latency_s: float = 0.0,
        step_latency_by_op_s: dict[str, float] | None = None,
        compute_overhead_s: float = 0.0,
        compute_stretch: float = 0.0,
        async_progress: bool = True,
        rank_compute_factors: Sequence[float] | None = None,
        compute_noise: Callable[[int], Callable[[], float]] | None = None,
        stream_order: bool | None = None,
        library: str = "auto",
    ) -> None:
        """``gamma_s_per_byte``: the reduction cost (seconds per byte received in a
        reducing step) of the collectives the MPI library runs, i.e. those whose
        program names no algorithm: the proxies' own schedules move data without
        reducing it. ``gamma_for_named_algorithms`` applies it to those too (a
        question about the library's algorithm by name, as ``collective_time``).
        ``step_latency_s``: a cost per step of those same collectives, paid at the
        step's end (a library without a progress thread advances a collective only when
        the program tests it, so each step waits for the next test);
        ``step_latency_by_op_s``: op -> that cost (s) for that collective instead.
        ``compute_overhead_s`` and ``compute_stretch``: an emulated compute of d
        seconds takes ``d (1 + stretch) + overhead`` (a sleep wakes up late).
        ``async_progress`` False: a non-blocking collective moves on to its next step
        only while its rank is inside an MPI call (waiting, testing, or blocked in
        another operation), as in an MPI library without a progress thread; True: in
        the background, as with one (or a network that offloads collectives).
        ``rank_compute_factors``: per rank, a multiplier of its compute (stragglers);
        ``compute_noise(rank)`` returns that rank's source of random factors, one drawn
        per compute operation (a what-if's noise).
        ``library``: what runs the collectives a program leaves to its library (names no
        algorithm): "mpi" (MPI's protocol: eager below the threshold, rendezvous above,
        with the network's handshake; gamma and step latency), "nccl" (as NCCL runs
        them: every message waits for its receiver, no handshake, no host reduction
        cost or progress steps), or "auto": NCCL's way for those the policy gives an
        NCCL algorithm (nccl_ring, nccl_tree), MPI's for the others.
        ``stream_order``: True: a rank's collectives on one group run one at a time, in
        the order it calls them, as NCCL runs a communicator's collectives on its CUDA
        stream (one called while an earlier one runs starts when that ends; a blocking
        one waits for the earlier ones too); False: non-blocking collectives on a group
        progress together, as in MPI libraries; None: stream order for those run as
        NCCL runs them. A call with nothing to send (zero elements) returns at once."""
        if not gamma_s_per_byte >= 0:
            raise ValueError(f"gamma_s_per_byte must be >= 0 (got {gamma_s_per_byte!r})")
        if not step_latency_s >= 0:
            raise ValueError(f"step_latency_s must be >= 0 (got {step_latency_s!r})")
        self.gamma = float(gamma_s_per_byte)
        self.step_latency = float(step_latency_s)
        self.step_latency_by_op = {k: float(v) for k, v in (step_latency_by_op_s or {}).items()}
        for op, v in self.step_latency_by_op.items():
            if not v >= 0:
                raise ValueError(f"step_latency_by_op_s[{op!r}] must be >= 0 (got {v!r})")
        self.gamma_named = gamma_for_named_algorithms
        self.workload = workload
        self.make_network = make_network
        self.placement = list(placement)
        self.policy = policy or AlgorithmPolicy()
        # The workload's own schedule parameters (e.g. the ring trainer's rings) win.
        cp = workload.collective_params
        if cp.get("rings"):
            self.policy.rings = [list(r) for r in cp["rings"]]
        if cp.get("local_size"):
            self.policy.local_size = cp["local_size"]
        # Several jobs: each job's collectives run on a policy of its own, with its own
        # schedule parameters, as alone (policy 0 is the workload's; job i's is i + 1).
        # A group is one job's, so its first member says whose policy lays it out.
        self._policies: list[AlgorithmPolicy] = [self.policy]
        self._policy_names: list[str] = [""]
        self._rank_policy: list[int] | None = None
        if workload.jobs:
            self._rank_policy = [0] * workload.world_size
            for job in workload.jobs:
                jp = job.collective_params
                own = replace(
                    self.policy,
                    by_op=dict(self.policy.by_op),
                    rings=[list(r) for r in jp["rings"]] if jp.get("rings") else None,
                    local_size=jp.get("local_size") or None,
                    fallbacks={},
                    layouts={},
                    stand_ins={},
                    streamed={},
                )
                self._rank_policy[job.first : job.stop] = [len(self._policies)] * (
                    job.stop - job.first
                )
                self._policies.append(own)
                self._policy_names.append(job.name)
        self.eager = eager_threshold_bytes
        self.compute_scale = compute_scale
        self.compute_overhead = float(compute_overhead_s)
        self.async_progress = async_progress
        self.compute_stretch = float(compute_stretch)
        self.rank_compute_factors = (
            None if rank_compute_factors is None else [float(f) for f in rank_compute_factors]
        )
        self.compute_noise = compute_noise
        if library not in LIBRARIES:
            raise ValueError(f"library must be one of {', '.join(LIBRARIES)} (got {library!r})")
        self.library = library
        self.stream_order = None if stream_order is None else bool(stream_order)
        self._schedules: dict[tuple, tuple[Schedule, str]] = {}
        self._members: dict[tuple[str, int], tuple[tuple[int, ...], int]] = {}
        # id of a group -> (the group, its node layout, the order's number): _node_layout worked
        # out once per group, not once per member (the group is kept, so its id stays
        # its own)
        self._node_layouts: dict[
            int, tuple[Sequence[int], int | tuple[int, ...] | None, tuple[int, ...] | None, int]
        ] = {}
        self._orders: dict[tuple[int, ...], int] = {}  # a node order -> its number (from 1)
        # id of a group (the workload keeps it) -> {rank: its first index in the group}
        self._positions: dict[int, dict[int, int]] = {}
        # Member plans: (schedule id, member, costs) -> _Plan; schedule id -> _StepTable
        # (None: the schedule makes none).
        self._plans: dict[tuple, _Plan] = {}
        self._tables: dict[int, _StepTable | None] = {}
        # (step table id, costs) -> every member's delays (see _table_delays)
        self._table_delay_lists: dict[tuple, list | None] = {}
        self._row_ids: dict[bytes, int] = {}  # a step table's row of destinations -> its number
        self._world = max(workload.world_size, 1)

    # -- helpers -------------------------------------------------------------------
    def _group(self, kind: str, rank: int) -> tuple[tuple[int, ...], int]:
        key = (kind, rank)
        hit = self._members.get(key)
        if hit is None:
            g = self.workload.group_of(kind, rank)
            # Each member's index, found once per group: g.index(rank) for every member
            # of a 16,384-rank group would compare 134 million ranks.
            where = self._positions.get(id(g))
            if where is None:
                where = self._positions[id(g)] = {}
                for i, r in enumerate(g):
                    where.setdefault(r, i)
            hit = self._members[key] = (g, where[rank])
        return hit

    def schedule(
        self, op: Collective, p: int, members: Sequence[int] | None = None
    ) -> tuple[Schedule, str]:
        """The schedule of ``op`` over a group of ``p`` ranks and the algorithm's name;
        ``members`` (global ranks, in group order) let the NCCL algorithms see how the
        group sits on the nodes."""
        per_node = order = None
        order_id = 0
        if members is not None:
            known = self._node_layouts.get(id(members))
            if known is None or known[0] is not members:
                per_node, order = self._node_layout(members)
                # (a 16,384-member order is hashed once here, not in every key below)
                order_id = (
                    0 if order is None else self._orders.setdefault(order, len(self._orders) + 1)
                )
                known = self._node_layouts[id(members)] = (members, per_node, order, order_id)
            _, per_node, order, order_id = known
        which = self._policy_of(members)
        policy = self._policies[which]
        key = (op.op, op.algorithm, p, op.count_elems, op.root, per_node, order_id, which)
        hit = self._schedules.get(key)
        if hit is None:
            alg = policy.choose(op, p, per_node)
            params = policy.params_for(op, alg, p, per_node, order, self.library)
            sched = schedule_for(op.op, alg, p, op.count_elems, root=op.root, params=params)
            hit = self._schedules[key] = (sched, alg)
            if alg in NCCL_ALGORITHMS:
                policy.note_layout(op.op, alg, p, params)
        return hit

    def _policy_of(self, members: Sequence[int] | None) -> int:
        """The number of the policy that lays out a group of ``members`` (0: the
        workload's; a job's with several jobs)."""
        if self._rank_policy is None or not members:
            return 0
        return self._rank_policy[members[0]]

    def streamed_algorithms(self) -> set[str]:
        """The NCCL algorithms whose rings or trees streamed, in any policy (any job)."""
        return {alg for pol in self._policies for alg in pol.streamed}

    def policy_notes(self) -> list[str]:
        """What the policies said, as the summary's ``assumed:`` lines: the fallbacks,
        then the NCCL layouts, then the stand-ins; with several jobs, each line names
        the jobs it is true of ("job a: ...", "jobs a, b: ..."), in job order."""
        out: list[str] = []
        for kind in ("fallbacks", "layouts", "stand_ins"):
            said: dict[str, list[str]] = {}
            for pol, name in zip(self._policies, self._policy_names, strict=True):
                for line in getattr(pol, kind):
                    said.setdefault(line, []).append(name)
            for line, names in said.items():
                jobs = [n for n in names if n]
                if not jobs:
                    out.append(line)
                else:
                    out.append(f"{'job' if len(jobs) == 1 else 'jobs'} {', '.join(jobs)}: {line}")
        return out

    def _node_layout(
        self, members: Sequence[int]
    ) -> tuple[int | tuple[int, ...] | None, tuple[int, ...] | None]:
        """:func:`node_layout` of a group on this run's placement and its job's node
        size."""
        g = self._policies[self._policy_of(members)].local_size
        return node_layout(members, self.placement, g)

    def _plan(
        self,
        sched: Schedule,
        me: int,
        group_size: int,
        costs: tuple[float, float] = (0.0, 0.0),
    ) -> _Plan:
        """Member ``me``'s part of ``sched`` (see :class:`_Plan`), with ``costs``: the
        reduction cost (s/B) and the cost per step (s) it pays. From the schedule's step
        table where it makes one (kept per schedule, shared by its members), else its
        member's flat plan, kept for reuse unless it is very large."""
        gamma, step_s = costs
        table = self.step_table(sched)
        if table is not None:  # every member's steps are in the table: nothing per member
            delays = self._table_delays(sched, table, me, costs)
            return _Plan(table, (), (), table.messages[me], delays)
        key = (id(sched), me, costs)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        flat = sched.rank_flat(me)
        if flat is None:
            flat = _flatten(sched.rank_plan(me))
        steps, reduce_bytes, copy_bytes, messages = flat
        delays = None
        if step_s > 0 or gamma > 0:
            delays = self._delays(sched, me, costs)
            if not any(delays):  # (gamma only, and nothing reduced into this member)
                delays = None
        plan = _Plan(steps, reduce_bytes, copy_bytes, messages, delays)
        if len(steps) * group_size <= _PLAN_CACHE_STEPS:
            self._plans[key] = plan
        return plan

    def step_table(self, sched: Schedule) -> _StepTable | None:
        """``sched``'s step table as the executor reads it (made once per schedule, shared
        by its members), or None where the schedule makes none."""
        # The schedule is kept in self._schedules, so its id is stable.
        table = self._tables.get(id(sched), _UNASKED)
        if table is _UNASKED:
            made = sched.rank_table()
            table = self._tables[id(sched)] = (
                None if made is None else _StepTable(made, self._row_ids)
            )
        return table

    def _table_delays(
        self, sched: Schedule, table: _StepTable, me: int, costs: tuple[float, float]
    ) -> list[float] | None:
        """``_delays`` of member ``me`` from ``sched``'s step table ``table``, None where
        it pays nothing after its steps (no cost per step, nothing reduced into it): every
        member's at once the first time a table is asked for with ``costs`` (numpy over
        the table; members with equal delays share one list, which no one changes),
        where member by member they cost a walk of its steps as transfer objects (63 us
        a member of a 1,024-rank Rabenseifner allreduce, 16,384 of them a bucket at
        16,384 ranks). The same floats: each the cost per step plus gamma times the
        step's reduced bytes, an integer."""
        gamma, step_s = costs
        if not (step_s > 0 or (gamma > 0 and table.reduced_into[me])):
            return None
        key = (id(table), costs)
        lists = self._table_delay_lists.get(key, _UNASKED)
        if lists is _UNASKED:
            lists = self._table_delay_lists[key] = _delay_lists(table, costs)
        if lists is None:  # (the table's sends and receives did not pair up)
            return self._delays(sched, me, costs)
        return lists[me]

    @staticmethod
    def _delays(sched: Schedule, me: int, costs: tuple[float, float]) -> list[float]:
        """Seconds member ``me`` spends after each of its steps: the cost per step plus
        gamma (s/B) times the bytes it reduces in that step."""
        gamma, step_s = costs
        return [
            step_s + gamma * sum(t.size_bytes for t in recvs if t.reduce)
            for _, recvs in sched.rank_steps(me)
        ]

    def release_plans(self) -> None:
        """Forget the members' plans and the step tables once no phase will run again.
        Plans of schedules without a table can be the bulk of what a big run keeps (a
        million small tuples per thousand ranks of a ring step): freed now by reference
        counting, they are not traced by the cyclic collector's first pass after the run,
        which saw every one of them as new."""
        self._plans.clear()
        self._tables.clear()
        self._table_delay_lists.clear()
        self._row_ids.clear()  # (new tables number their rows afresh, as new phases do)

    # -- running -------------------------------------------------------------------
    def run_phase(
        self,
        phase_index: int = 0,
        iterations: int = 1,
        progress: Callable[[PhaseSim], None] | None = None,
    ) -> PhaseSim:
        phase = self.workload.phases[phase_index]
        env = simpy.Environment(0.0)  # a float clock from the start, in both cores
        net = self.make_network(env)
        sim = PhaseSim(self, phase.name, env, net)
        # Building the programs and running them allocate millions of objects
        # (operations, flows, messages) that reference counting frees or that live
        # to the end: the cyclic collector would only rescan them over and over.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            programs = [phase.program(r) for r in range(self.workload.world_size)]
            sim.programs = programs
            if progress is not None:
                sim.expected_messages = sim.count_messages() * iterations
            starts = self.workload.rank_start_s
            for rank, ops in enumerate(programs):
                walker = _Rank(sim, rank, ops, iterations)
                if starts and starts[rank] > 0:
                    net.call_later(starts[rank], _start, walker)
                else:
                    walker.run()
            if progress is None:
                env.run()
            else:
                # Run in growing slices of simulated time, only to report progress.
                # Stepping (not env.run(until=...), whose stop event stays queued)
                # ends with the last event.
                slice_s = 1e-4
                end_s = slice_s
                peek, step = env.peek, env.step
                clock = time.perf_counter
                while peek() != float("inf"):
                    t0 = clock()
                    cut = False
                    while peek() <= end_s:
                        step()
                        # A slice that runs into busier simulated times is reported
                        # on before its end (one had taken 54 s of wall at 16,384
                        # ranks); the same events run in the same order either way.
                        # (One step may take a second: a contended fabric's wake-up
                        # recomputes up to network._FAST_FORWARD_RATES rates.)
                        if clock() - t0 > 2.0:
                            cut = True
                            break
                    progress(sim)
                    if cut:
                        slice_s /= 2
                        continue
                    # Aim at a report a second: busier simulated times come later.
                    took = clock() - t0
                    slice_s *= min(2.0, max(0.05, 1.0 / took)) if took > 0 else 2.0
                    end_s += slice_s
            sim.finish()
        finally:
            if gc_was_enabled:
                gc.enable()
        return sim


def _start(walker: _Rank) -> None:
    """A rank that starts late (``Workload.rank_start_s``) begins its program."""
    walker.run()


class PhaseSim:
    """The state and results of one simulated phase."""

    def __init__(
        self, ex: SimExecutor, name: str, env: simpy.Environment, net: FlowNetwork
    ) -> None:
        self.ex = ex
        self.name = name
        self.env = env
        self.net = net
        self._seqs: dict[tuple[str, int], _Seq] = {}  # (group kind, rank) -> its calls there
        self.timelines: dict[int, RankTimeline] = {}
        self.programs: list[list[Op]] = []
        self.algorithms: dict[str, set[str]] = defaultdict(set)
        self.makespan_s = 0.0
        self.expected_messages = 0  # set before a run that reports progress
        self.iteration_ends: dict[int, list[float]] = {}
        self.ranks: dict[int, _Rank] = {}  # for collectives that progress in MPI calls
        # Unmatched messages, one FIFO per channel: the posted sends (and
        # receives) that wait for their other side, by channel number (see _push).
        # A collective's channel is the int instance * world^2 + src * p + dst (member
        # indices, p members; see _Call); a point-to-point channel ("p", group
        # kind, src, dst, tag) is numbered in order of first use (_p2p_ids, and back:
        # _p2p_keys), in tables of its own.
        self._sends = _IntTable()
        self._recvs = _IntTable()
        self._p2p_sends = _IntTable()
        self._p2p_recvs = _IntTable()
        self._p2p_ids: dict[tuple, int] = {}
        self._p2p_keys: list[tuple] = []
        # What a collective's steps match their messages in (each _Coll holds it).
        self._channels = _Channels(self._sends, self._recvs, ex.eager)
        # Every message waits for its receiver, zero-byte ones too (_Coll).
        self._channels_nccl = _Channels(self._sends, self._recvs, -1)
        self._world = ex._world  # the plans' channel pairs use the same multiplier
        self._world2 = self._world * self._world
        # Collective instance k of group id g is number g + k * ngroups; a group's id
        # is given on first use: (kind, first member) -> id, and back.
        self._ngroups = max(sum(len(gs) for gs in ex.workload.groups.values()), 1)
        self._gids: dict[tuple[str, int], int] = {}
        self._gid_names: list[tuple[str, int]] = []
        # The ranks' prepared calls (see _prepared): by operation (its fields, as a
        # tuple), a dict by rank, and the same dicts by the id of an operation object.
        self._coll_cache: dict[tuple, dict[int, _Call]] = {}
        self._calls_by_op: dict[int, dict[int, _Call]] = {}
        self._shared_calls: dict[tuple, tuple] = {}  # see _prepare and _shared_call
        self.nccl_ran = False  # a collective ran as NCCL runs it (see _prepare)
        # op -> the algorithms that ran as NCCL runs them (the rest of ``algorithms`` ran
        # as MPI does: under the default library an alltoall falls back to MPI's)
        self.nccl_algorithms: dict[str, set[str]] = defaultdict(set)
        # a collective's program named no algorithm (the configured choice applied), and
        # one ran as the MPI library runs it (the host costs applied)
        self.chosen_ran = False
        self.library_ran = False
        self._group_endpoints: dict[tuple[str, int], tuple[int, ...]] = {}  # see _prepare
        self._stream_pipe_cache: dict[tuple, tuple | None] = {}  # see _stream_pipes
        # A streamed step of an instance (its channel base + the step) -> its members'
        # starts, until every member has had its delay (see _StreamStarts).
        self._stream_starts: dict[int, _StreamStarts] = {}
        # The paths a group's collectives from step tables send on, kept where the
        # network routes every pair one way: group -> per table row number (see
        # _StepTable.row) a list of each member's path to its destination in that row
        # (None: not used yet; made when first used, as the network would make it). A
        # bulk-synchronous step reads its members' paths side by side, where the
        # network's table of paths by pair scatters them.
        self._path_rows: dict[tuple[str, int], list] | None = {} if net.routes_per_pair else None
        self._path_tables: set[tuple[int, tuple[str, int]]] = set()  # (id(table), group) ready
        # Bytes per (group kind, part) and int pair key src * world + dst; parts
        # are "reduce" / "copy" (data of a collective) and "p2p".
        self._bytes: dict[tuple[str, str], dict[int, int]] = {}
        self._tallies: list[_Tally] = []  # collective calls whose bytes are counted lazily

    # -- accounting ----------------------------------------------------------------
    def _settle_bytes(self) -> None:
        """Add the bytes of the collective calls counted since the last time to the
        pair totals (see ``_Tally``)."""
        # Rank by rank (a stable sort of the calls by their row of pairs): a rank's
        # collectives add to the same few pairs, which stay in the caches from one call
        # to the next; in call order every rank's pairs came back only after all other
        # ranks' (3.7 million updates of dictionaries of 229k pairs at 16,384 ranks).
        # The totals are the same; only the pairs' order in the dictionaries moves.
        # A rank's tallies' pairs are summed in small dicts first (see _RowSums).
        self._tallies.sort(key=_tally_row)
        into = _RowSums()
        row = -1
        for tally in self._tallies:
            if tally.row != row:
                into.add_up()
                row = tally.row
            tally.settle(into)
        into.add_up()

    def _account(self, group: str, part: str) -> dict[int, int]:
        acct = self._bytes.get((group, part))
        if acct is None:
            acct = self._bytes[(group, part)] = {}
        return acct

    @property
    def messages_done(self) -> int:
        """Messages whose data has started (every message is one network transfer)."""
        return self.net.transfers_started

    @property
    def wire_bytes_by_group(self) -> dict[str, int]:
        """Bytes of all messages started between two ranks, per group kind (a rank's
        messages to itself cross no wire: :attr:`self_bytes`)."""
        self._settle_bytes()
        out: dict[str, int] = defaultdict(int)
        w1 = self._world + 1
        for (group, _), acct in self._bytes.items():
            out[group] += sum(b for k, b in acct.items() if k % w1)
        return out

    @property
    def self_bytes(self) -> int:
        """Bytes of the messages a rank sent to itself (a copy; in no wire's count)."""
        self._settle_bytes()
        w1 = self._world + 1
        return sum(b for acct in self._bytes.values() for k, b in acct.items() if not k % w1)

    @property
    def part_bytes(self) -> dict[str, dict[tuple[int, int], int]]:
        """Bytes per (src rank, dst rank) by part: "reduce" (reduction data of a
        collective), "copy" (copied data of a collective), "p2p"."""
        self._settle_bytes()
        accounts: dict[str, list[dict[int, int]]] = {}  # a part's, one a group kind
        for (_, part), acct in self._bytes.items():
            accounts.setdefault(part, []).append(acct)
        out: dict[str, dict[tuple[int, int], int]] = {}
        for part, (acct, *more) in accounts.items():
            if more:  # (a new dict: the first account itself stays as it is)
                acct = dict(acct)
                for other in more:
                    for k, b in other.items():
                        acct[k] = acct.get(k, 0) + b
            # The keys split by numpy (the totals stay the Python integers they are):
            # 229k pairs at 16,384 ranks.
            src, dst = np.divmod(np.fromiter(acct, dtype=np.int64, count=len(acct)), self._world)
            out[part] = dict(
                zip(zip(src.tolist(), dst.tolist(), strict=True), acct.values(), strict=True)
            )
        return out

    @property
    def channels(self) -> dict[object, tuple[int, int]]:
        """Channels with unmatched messages: key -> (pending sends, pending receives);
        a point-to-point channel's key is ("p", group kind, src, dst, tag), a
        collective's its number (see ``_channel_name``)."""
        out: dict[object, tuple[int, int]] = {}
        names = self._p2p_keys
        for sends, recvs, name in (
            (self._p2p_sends, self._p2p_recvs, names.__getitem__),
            (self._sends, self._recvs, int),
        ):
            for k, q in sorted(sends.items()):
                out[name(k)] = (len(q) if type(q) is _Fifo else 1, 0)
            for k, q in sorted(recvs.items()):
                key = name(k)
                out[key] = (out.get(key, (0, 0))[0], len(q) if type(q) is _Fifo else 1)
        return out

    def _channel_name(self, key: object) -> object:
        if isinstance(key, int):
            w = self._world
            inst, pair = divmod(key, w * w)
            seq, gid = divmod(inst, self._ngroups)
            kind, first = self._gid_names[gid]
            members = self.ex._group(kind, first)[0]
            src, dst = divmod(pair, len(members))
            return ("c", kind, first, seq, members[src], members[dst])
        return key

    # -- messages ------------------------------------------------------------------
    # A channel holds its pending sends (or receives) in self._sends (self._recvs):
    # the one item itself, or a _Fifo of several. A pending send is an _Eager (eager
    # data already started), or the tuple (send waiter, src, dst, size_bytes, posted at
    # s) of a rendezvous send (a collective's: see _Coll); a pending receive is its
    # waiter. A waiter is ticked once per completed operation.

    def _p2p_channel(self, key: tuple) -> int:
        """The number of the point-to-point channel ``key`` (given on first use)."""
        ids = self._p2p_ids
        n = len(ids)
        c = ids.setdefault(key, n)
        if c == n:
            self._p2p_keys.append(key)
        return c

    def _post_send(
        self,
        key: tuple,
        src: int,
        dst: int,
        size_bytes: int,
        acct: dict[int, int],
        waiter: _Waiter,
    ) -> bool:
        """Post a send on the point-to-point channel ``key``; True if it completes now,
        else ``waiter`` is ticked once when it does."""
        c = self._p2p_channel(key)
        pair = src * self._world + dst
        acct[pair] = acct.get(pair, 0) + size_bytes
        pl = self.ex.placement
        eager = size_bytes <= self.ex.eager
        rw = _pop(self._p2p_recvs, c)
        if eager:
            if rw is not None:
                self.net.start_transfer(pl[src], pl[dst], size_bytes, None, None, rw)
            else:
                msg = _Eager()
                self.net.start_transfer(pl[src], pl[dst], size_bytes, None, None, msg)
                _push(self._p2p_sends, c, msg)
            # The send completes when its sender has paid LogGP's o for it (the data
            # leaves then; the sender's messages pay it one after another), at once
            # without one.
            net = self.net
            if net.send_overhead_s > 0.0 and pl[src] != pl[dst]:
                delay = net._send_free[pl[src]] - self.env.now
                if delay > 0.0:
                    net.call_later(delay, _overhead_paid, waiter)
                    return False
            return True
        # Rendezvous: the send pays its overhead now, as it is posted (its request-to-send).
        posted = self.net.send_overhead_end(pl[src], pl[dst], self.env.now)
        if rw is not None:
            self.net.start_rendezvous(pl[src], pl[dst], size_bytes, None, waiter, posted, rw)
        else:
            _push(self._p2p_sends, c, (waiter, src, dst, size_bytes, posted))
        return False

    def _post_recv(self, key: tuple, waiter: _Waiter) -> bool:
        """Post a receive on the point-to-point channel ``key``; True if it completes now,
        else ``waiter`` is ticked once when it does."""
        c = self._p2p_channel(key)
        item = _pop(self._p2p_sends, c)
        if item is None:
            _push(self._p2p_recvs, c, waiter)
            return False
        if type(item) is _Eager:  # eager data, already on its way
            if item.arrived:
                return True
            item.receiver = waiter
            return False
        sw, src, dst, size_bytes, posted_s = item
        pl = self.ex.placement
        self.net.start_rendezvous(pl[src], pl[dst], size_bytes, None, sw, posted_s, waiter)
        return False

    # -- collectives -----------------------------------------------------------------
    def _prepared(self, rank: int, op: Collective) -> _Call:
        """The calls of ``op`` on ``rank`` as ``_prepare`` makes them, at the first call of
        an operation equal to ``op`` on the rank. Found by the operation object (the
        programs hold theirs to the end of the run, and the ranks of a data-parallel
        phase share them): the ranks' calls of equal operations are one dict by rank (a
        dict, not a list: an operation of a few ranks' would cost a list of them all)."""
        calls = self._calls_by_op.get(id(op))
        if calls is None:
            ckey = (op.group, op.op, op.count_elems, op.algorithm, op.root)
            calls = self._coll_cache.get(ckey)
            if calls is None:
                calls = self._coll_cache[ckey] = {}
            self._calls_by_op[id(op)] = calls
        c = calls.get(rank)
        if c is None:
            c = calls[rank] = self._prepare(rank, op)
        return c

    @cython.locals(c=_Call, group=_Call, table=_StepTable, accounts=list)
    def _prepare(self, rank: int, op: Collective) -> _Call:
        """What every call of ``op`` on ``rank`` shares (see ``_Call``)."""
        ex = self.ex
        members, me = ex._group(op.group, rank)
        p = len(members)
        c = _Call()
        c.sim = self
        c.rank = rank
        seq_key = (op.group, rank)
        seq = self._seqs.get(seq_key)
        if seq is None:
            seq = self._seqs[seq_key] = _Seq()
        c.seq = seq
        if p == 1:
            c.steps = c.tally = c.delays = c.prows = c.pipes = None
            c.base = c.stride = c.messages = c.me = 0
            c.endpoints = ()
            c.streamed = c.nccl = c.owned = False
            return c
        # What the group's members share, found by the first of them (at 16,384 ranks
        # these were most of the 131,072 calls' cost, each member finding them again).
        gkey = (op.group, members[0])
        skey = (op.op, op.count_elems, op.algorithm, op.root, gkey)
        shared = self._shared_calls.get(skey)
        if shared is None:
            shared = self._shared_calls[skey] = self._shared_call(op, members, gkey)
        group, sched, costs, table, accounts, streams = shared
        # The plan's byte totals per peer, not pairs made from them: kept for every rank
        # and collective, those would be the largest part of a big run's memory.
        row = rank * self._world
        tally: _Tally | None = None
        if table is not None:  # every member's steps are in the table (see ex._plan)
            steps = table
            messages = table.messages[me]
            delays = ex._table_delays(sched, table, me, costs)
            if table.reduces[me] or table.copies[me]:
                # (the group kind's accounts, asked for when first needed, as before)
                reduced = copied = None
                if table.reduces[me]:
                    reduced = accounts[0]
                    if reduced is None:
                        reduced = accounts[0] = self._account(op.group, "reduce")
                if table.copies[me]:
                    copied = accounts[1]
                    if copied is None:
                        copied = accounts[1] = self._account(op.group, "copy")
                tally = _TableTally(table, me, members, reduced, copied, row)
            own = table.steps_of(me)
        else:
            plan = ex._plan(sched, me, p, costs)
            steps = plan.steps
            messages = plan.messages
            delays = plan.delays
            adds = []
            for tot, part in ((plan.reduce_bytes, "reduce"), (plan.copy_bytes, "copy")):
                if tot:
                    adds.append((self._account(op.group, part), row, members, tot))
            if adds:
                tally = _Tally(tuple(adds), row)
            own = len(steps)
        if group.pipes is not None:
            # (what _StreamStarts gives where all begin at once; set, they also send the
            # step's end through _Coll.fire, which asks _StreamStarts: see _tick)
            delays = [common[me] for _, common in group.pipes]
        c.steps = steps
        c.tally = tally
        c.messages = messages
        c.delays = delays
        c.me = me
        c.streamed = own > 0 and streams
        # the group's
        c.nccl = group.nccl
        c.owned = group.owned
        c.endpoints = group.endpoints
        c.prows = group.prows
        c.pipes = group.pipes
        c.base = group.base
        c.stride = group.stride
        return c

    def _shared_call(self, op: Collective, members: tuple[int, ...], gkey: tuple) -> tuple:
        """What every member's calls of ``op`` on the group ``gkey`` (its members
        ``members``) share, for ``_prepare``: (a ``_Call`` with the fields its members
        have in common, the schedule, the costs its members pay (reduction s/B, s per
        step), the schedule's ``_StepTable`` or None, the group kind's reduced and copied
        byte accounts once asked for (a list), whether its members' calls with steps wait
        for their earlier ones). Notes the algorithm and how it runs in the phase's
        records."""
        ex = self.ex
        p = len(members)
        sched, alg = ex.schedule(op, p, members)
        self.algorithms[op.op].add(alg)
        if op.algorithm is None:
            self.chosen_ran = True
        # As NCCL runs it: GPU kernels (no host reduction cost or progress steps), no
        # rendezvous handshake, one collective at a time per communicator.
        nccl = runs_as_nccl(op.algorithm, alg, ex.library)
        if nccl:
            self.nccl_ran = True
            self.nccl_algorithms[op.op].add(alg)
        library = (op.algorithm is None or ex.gamma_named) and not nccl
        if library:
            self.library_ran = True
        step_s = ex.step_latency_by_op.get(op.op, ex.step_latency)
        costs = (ex.gamma, step_s) if library else (0.0, 0.0)
        gid = self._gids.get(gkey)
        if gid is None:
            gid = self._gids[gkey] = len(self._gid_names)
            self._gid_names.append(gkey)
            if gid >= self._ngroups:
                raise RuntimeError(f"group {gkey} is not one of the workload's groups")
            pl = ex.placement
            self._group_endpoints[gkey] = tuple(pl[m] for m in members)
        table = ex.step_table(sched)
        group = _Call()
        group.sim = self
        group.nccl = nccl
        # (NCCL's kernels progress on the GPU, whatever the host does)
        group.owned = not ex.async_progress and not nccl
        group.endpoints = self._group_endpoints[gkey]
        group.prows = None
        if table is not None and self._path_rows is not None:
            group.prows = self._kept_paths(table, gkey, p)
        group.pipes = self._stream_pipes(sched, gkey)
        # Instance k of group id g is number g + k * ngroups, its channels from that
        # times world ** 2 (C integers when compiled: below 2 ** 63 while instances
        # number under 2 ** 63 / world ** 2, 3e10 at 16,384 ranks).
        group.base = gid * self._world2
        group.stride = self._ngroups * self._world2
        streams = in_stream_order(ex.stream_order, nccl, 1)  # (for a call with steps)
        return group, sched, costs, table, [None, None], streams

    def _stream_pipes(
        self, sched: Schedule, gkey: tuple[str, int]
    ) -> tuple[tuple[RingRun | TreePipeline, list[float]], ...] | None:
        """For a streamed ring or tree schedule on group ``gkey``, per step of it: what
        its steps would take step by step (``simnet.ring_stream.RingRun`` for each run
        of a ring's steps, ``simnet.tree_stream.TreePipeline`` for a tree's pipeline)
        and the seconds each member spends after that step's stream when all members
        begin it together; None for any other schedule. Made once per group and
        schedule."""
        key = (id(sched), gkey)
        got = self._stream_pipe_cache.get(key, False)
        if got is not False:
            return got
        ends = self._group_endpoints[gkey]
        runs = stream_steps(sched)
        pipes: list[RingRun | TreePipeline] = []
        if runs is not None:
            plans = [sched.rank_plan(m) for m in range(len(ends))]
            for i, n in enumerate(runs):
                hops = [
                    (m, dst, nbytes)
                    for m, plan in enumerate(plans)
                    for dst, nbytes, _ in plan[i][1]
                ]
                pipes.append(RingRun(hops, n, ends, self.net))
        elif (tree := stream_tree(sched)) is not None:
            trees, k = tree
            sizes = sched.chunk_elems
            tree_bytes = [ELEM_BYTES * sum(sizes[t * k : (t + 1) * k]) for t in range(len(trees))]
            pipes.append(TreePipeline(trees, k, tree_bytes, ends, self.net))
        got = tuple((pipe, pipe.delays_s().tolist()) for pipe in pipes) if pipes else None
        self._stream_pipe_cache[key] = got
        return got

    def _stream_begin(self, coll: _Coll, i: int) -> None:
        """``coll``'s member begins step ``i`` of a streamed schedule now."""
        key = coll.base + i  # (bases are world ** 2 apart)
        starts = self._stream_starts.get(key)
        if starts is None:
            starts = self._stream_starts[key] = _StreamStarts(self, key, coll.late[i])
        starts.begin(coll.me, self.env.now)

    def _stream_ended(self, coll: _Coll, i: int) -> bool:
        """``coll``'s stream of step ``i`` has ended: True if it now waits (then its
        ``_reduced``), False if it goes on at once (``_StreamStarts.ended``)."""
        return self._stream_starts[coll.base + i].ended(coll)

    def _kept_paths(self, table: _StepTable, gkey: tuple[str, int], p: int) -> list:
        """The group's kept paths by row number (``_path_rows``), with a list for each
        of ``table``'s rows (the table is kept by the executor: its id is stable)."""
        prows = self._path_rows.setdefault(gkey, [])
        if (id(table), gkey) not in self._path_tables:
            self._path_tables.add((id(table), gkey))
            for r in table.rows:
                if r >= len(prows):
                    prows.extend([None] * (r + 1 - len(prows)))
                if prows[r] is None:
                    prows[r] = [None] * p
        return prows

    def count_messages(self) -> int:
        """Messages one iteration of every rank's program sends (each one network
        transfer): for a progress bar, before the run. Resolves (and caches for the
        run) every collective's plan."""
        total = 0
        for rank, ops in enumerate(self.programs):
            for op in ops:
                if isinstance(op, Send):
                    total += 1
                elif isinstance(op, Collective):
                    total += self._prepared(rank, op).messages
        return total

    def release(self) -> None:
        """Break the reference cycles of the run's state once its results are read: each
        rank's continuation is a bound method of itself, which its requests hold too, so
        the ranks, and everything they reach (programs, plans, routes), would wait for
        the cyclic collector, which traces them all (a third of a second of a two-second
        run at 1,024 ranks, growing with the run); reference counting frees them at
        once. The phase's collective calls (see _prepare) go too: the run is over."""
        for r in self.ranks.values():
            r.resume = None
            r.reqs = {}
            r.deferred = []
        self.ranks = {}
        self._settle_bytes()
        self._tallies = []
        self._coll_cache = {}
        self._calls_by_op = {}
        self._shared_calls = {}
        self._stream_starts = {}
        self._stream_pipe_cache = {}  # (their hop arrays: megabytes at thousands of GPUs)
        self._seqs = {}  # (and the streams they hold)
        if self._path_rows is not None:
            self._path_rows = {}
            self._path_tables = set()

    # -- running -----------------------------------------------------------------------
    def finish(self) -> None:
        # The last rank's end, not env.now: a progress-reporting run advances the
        # clock in slices past the last event.
        ends = [e[-1] for e in self.iteration_ends.values() if e]
        self.makespan_s = max(ends) if ends else 0.0
        stuck = [r for r in range(len(self.programs)) if r not in self.iteration_ends]
        if stuck:
            raise ProgramsStuckError(
                f"phase {self.name!r}: ranks {stuck[:8]}{'...' if len(stuck) > 8 else ''} "
                "never finished (deadlock: they wait for messages nobody sends)"
            )
        unmatched = list(self.channels)
        if unmatched:
            raise ProgramsStuckError(
                f"phase {self.name!r}: {len(unmatched)} unmatched message channel(s), "
                f"first {self._channel_name(unmatched[0])}: the rank programs do not pair "
                "their sends and receives"
            )


class _Fifo(deque):
    """Several pending items of one channel (one is stored as itself)."""

    __slots__ = ()


def _push(table: _IntTable, channel: int, item: object) -> None:
    """Queue ``item`` on ``channel`` of ``table``: as itself when the channel is empty,
    else in a _Fifo behind what it holds (one probe of the table when it is empty)."""
    q = table.add(channel, item)
    if q is None:
        return
    if type(q) is _Fifo:
        q.append(item)
    else:
        table.put(channel, _Fifo((q, item)))


def _pop(table: _IntTable, channel: int) -> Any:
    """The first pending item of ``channel``, removed; None if there is none (one probe
    of the table unless the channel holds several)."""
    q = table.take(channel)
    if q is None or type(q) is not _Fifo:
        return q
    item = q.popleft()
    if q:
        table.put(channel, q)  # the rest stay queued
    return item


_OP_TYPES = (Collective, Compute, Send, Recv, Wait, Testany)
_OP_TYPE_SET = frozenset(_OP_TYPES)


def _base_op_type(op: object) -> type | None:
    """The operation type ``op`` is an instance of (None: not an operation)."""
    return next((k for k in _OP_TYPES if isinstance(op, k)), None)


_UNASKED = object()  # a schedule not yet asked for its step table


def _overhead_paid(w: _Waiter) -> None:
    """An eager send's sender has paid its overhead: the send is complete (a Python-level
    callable for the network's timer, where ``_tick`` is a C function when compiled)."""
    _tick(w)


def _tick(w: _Waiter) -> None:
    """One of ``w``'s completions; the last fires it (a collective's part directly)."""
    n = w.n - 1
    w.n = n
    if not n:
        if type(w) is _Coll:
            c = w  # typed in the compiled build: its fields and advance() are C accesses
            if c.delays is None and c.owner is None:
                if c.advance() and c.done is not None:
                    c.done()
                return
        w.fire()


class _Eager(_Sink):
    """An eager message sent before its receive was posted, waiting in its channel:
    ``receiver`` is the receive's waiter once posted (None before); ``arrived`` once its
    data has arrived (the network's ``_Sink``: ``delivered``)."""

    __slots__ = ("arrived", "receiver")

    def __init__(self) -> None:
        self.arrived = False
        self.receiver: _Waiter | None = None

    def delivered(self, _tag: object) -> None:
        if self.receiver is None:
            self.arrived = True
        else:
            _tick(self.receiver)


class _Channels:
    """Where a collective's messages meet their other side: the posted sends and
    receives waiting for it, by channel number (``PhaseSim._sends`` and ``_recvs``), and
    the largest message sent eagerly (bytes; -1: none, every message waits for its
    receiver, as NCCL's do)."""

    __slots__ = ("eager", "recvs", "sends")

    def __init__(self, sends: _IntTable, recvs: _IntTable, eager: int) -> None:
        self.sends = sends
        self.recvs = recvs
        # (a C integer when compiled: no message comes near 2 ** 62 bytes)
        self.eager = min(eager, 1 << 62)


class _Waiter(_Sink):
    """Something that waits for ``n`` completions, then fires once."""

    __slots__ = ("n",)

    def fire(self) -> None:
        raise NotImplementedError

    def delivered(self, sw: _Waiter | None) -> None:
        """A message to this receiver arrived (the network's ``_Sink``, as ``tag2``):
        tick it, then its sender ``sw`` (rendezvous; None for eager data). The network
        hands both over: no tuple or callback per message."""
        _tick(self)
        if sw is not None:
            _tick(sw)


class _Req(_Waiter):
    """A request (non-blocking operation, or a blocking one being waited for)."""

    __slots__ = ("then",)

    def __init__(self, then: Callable[[], None] | None = None) -> None:
        self.n = 1
        self.then = then  # called when complete

    def fire(self) -> None:
        then = self.then
        if then is not None:
            then()

    def complete(self) -> None:
        self.n = 0
        self.fire()


class _WaitAll(_Waiter):
    """A Wait on several requests: ticked by each."""

    __slots__ = ("rank",)

    def __init__(self, rank: _Rank, n: int) -> None:
        self.n = n
        self.rank = rank

    def tick(self) -> None:
        n = self.n - 1
        self.n = n
        if not n:
            self.rank.resume()

    def fire(self) -> None:
        self.rank.resume()


class _Coll(_Waiter):
    """One rank's part of one collective: its plan's steps, one after the other.

    A step posts all its receives, then all its sends; ``n`` counts those not
    complete, and the last to complete (``fire``) starts the next step. The
    matching is that of ``PhaseSim._post_send`` / ``_post_recv``, inlined; the
    channels of one instance are numbered by member indices (``base`` + src * group
    size + dst), and a pending rendezvous send holds endpoints, not ranks.
    With ``delays``, a step's end is followed by its reduction time before the
    next step starts (Thakur, Rabenseifner & Gropp's gamma term).

    The steps are a tuple of flat steps (``steps``) or a column of a step table
    (``table``: no object per step to reach, the table's entries of a bulk-synchronous
    step's members side by side). With a table, ``prows`` (where the network routes
    every pair one way) holds the group's paths by table row and member
    (``PhaseSim._path_rows``): a send finds its path there, not by its pair. A pending
    rendezvous send is ``(sender, its row's kept paths or None, bytes, posted at)``.
    """

    __slots__ = (
        "base",
        "channels",
        "delayed",
        "delays",
        "done",
        "endpoints",
        "handshake",
        "i",
        "late",
        "me",
        "net",
        "nsteps",
        "owner",
        "prows",
        "sim",
        "steps",
        "table",
    )

    def __init__(
        self,
        sim: PhaseSim,
        steps: tuple[_FlatStep, ...] | _StepTable,
        base: int,
        me: int,
        endpoints: tuple[int, ...],
        done: Callable[[], None] | None,
        delays: list[float] | None = None,
        prows: list | None = None,
        nccl: bool = False,
    ) -> None:
        self.sim = sim
        # As NCCL runs it: every message waits for its receiver (a free buffer slot), as
        # a rendezvous without the request-to-send (its buffers are set up beforehand).
        self.channels = sim._channels_nccl if nccl else sim._channels
        self.handshake = not nccl
        self.net = sim.net
        self.prows = prows
        if type(steps) is _StepTable:
            self.table = steps
            self.steps = None
            self.nsteps = self.table.nsteps[me]  # through the typed field when compiled
        else:
            self.table = None
            self.steps = steps
            self.nsteps = len(steps)
        self.base = base  # + src * group size + dst (member indices): a channel of this instance
        self.me = me  # the rank's index in its group
        self.endpoints = endpoints  # of the group's members, in member order
        self.i = 0
        self.n = 0
        self.done = done
        self.delays = delays
        self.delayed = 0  # steps whose reduction time has been spent
        # A streamed ring's or tree's step pipelines (PhaseSim._stream_pipes), whose
        # members' starts its delays wait for; None: not streamed.
        self.late: tuple | None = None
        # The rank whose MPI calls move this (non-blocking) collective on; None: it
        # moves on by itself.
        self.owner: _Rank | None = None

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def advance(self) -> bool:
        """Post steps until one must wait; True if the collective is complete."""
        i = self.i
        nsteps = self.nsteps
        if i == nsteps:
            return True
        t_now = self.net._clock()
        base = self.base
        me = self.me
        endpoints = self.endpoints
        p = len(endpoints)
        row = base + me * p
        steps = self.steps
        table = self.table
        prows = self.prows
        while i < nsteps:
            pending = 0
            if self.late is not None:
                self.sim._stream_begin(self, i)
            if table is None:
                step = steps[i]
                n = len(step)
                nr = step[0]
                j = 1
                while j <= nr:
                    pending += self._recv(base + step[j] * p + me)
                    j += 1
                while j < n:
                    dst = step[j]
                    pending += self._send(row + dst, None, dst, step[j + 1], t_now)
                    j += 2
            else:
                k = me * table.s + i
                src = table.src[k]
                if src >= 0:
                    pending += self._recv(base + src * p + me)
                dst = table.dst[k]
                if dst >= 0:
                    plist = None if prows is None else prows[table.row[i]]
                    pending += self._send(row + dst, plist, dst, table.nbytes[k], t_now)
            i += 1
            if pending:
                self.i = i
                self.n = pending
                return False
            if self.late is not None:
                self.i = i
                self.delayed = i
                if not self.sim._stream_ended(self, i - 1):
                    continue
                return False
            if self.delays is not None and self.delays[i - 1] > 0:
                self.i = i
                self.delayed = i
                self.sim.net.call_later(self.delays[i - 1], self._reduced)
                return False
        self.i = i
        return True

    def _recv(self, key: int) -> int:
        """Post the receive of channel ``key``; 1 if it must wait for its data, else 0."""
        chan = self.channels
        item = _pop(chan.sends, key)
        if item is None:
            _push(chan.recvs, key, self)
            return 1
        if type(item) is _Eager:  # eager data, already on its way
            msg = item  # (typed when compiled)
            if msg.arrived:
                return 0
            msg.receiver = self
            return 1
        sc = item[0]  # a rendezvous send waiting: (sender, its kept paths, bytes, posted at)
        path = self._path_of(item[1], sc.me, self.me)
        self.net.rendezvous_on_path(path, item[2], None, sc, item[3], self, sc.handshake)
        return 1

    def _send(self, key: int, plist: list | None, dst: int, size_bytes: int, t_now: float) -> int:
        """Post the send of ``size_bytes`` bytes on channel ``key`` to member ``dst``; 1 if
        it must wait for its receive (rendezvous), else 0 (eager: on its way). ``plist``:
        the kept paths of its step's row, by member, or None (see ``_path_of``)."""
        chan = self.channels
        rw = _pop(chan.recvs, key)
        size = size_bytes  # (a C integer when compiled, for the comparisons)
        eager = size <= chan.eager
        if not eager and self.handshake and self.net.send_overhead_s > 0.0:
            # Rendezvous: the send pays its overhead now, as it is posted (NCCL's pays
            # none: no host work per message).
            t_now = self.net.send_overhead_end(self.endpoints[self.me], self.endpoints[dst], t_now)
        if rw is None and not eager:
            _push(chan.sends, key, (self, plist, size_bytes, t_now))
            return 1
        path = self._path_of(plist, self.me, dst)
        if rw is not None:
            if eager:
                self.net.start_on_path(path, size_bytes, None, None, rw)
                return 0
            self.net.rendezvous_on_path(path, size_bytes, None, self, t_now, rw, self.handshake)
            return 1
        msg = _Eager()
        self.net.start_on_path(path, size_bytes, None, None, msg)
        _push(chan.sends, key, msg)
        return 0

    def _path_of(self, plist: list | None, src: int, dst: int) -> _Path:
        """The path from member ``src`` to member ``dst``: kept in ``plist`` (by sender,
        made on its first transfer) or, without kept paths, the network's for the pair.
        Asked only where a transfer starts, so the network makes its paths and links in
        the order its transfers start."""
        if plist is None:
            return self.net.path_between(self.endpoints[src], self.endpoints[dst])
        path = plist[src]
        if path is None:
            path = plist[src] = self.net.path_between(self.endpoints[src], self.endpoints[dst])
        return path

    def fire(self) -> None:
        if self.late is not None:
            if self.delayed != self.i:
                self.delayed = self.i
                if self.sim._stream_ended(self, self.i - 1):
                    return
        else:
            delays = self.delays
            if delays is not None and self.delayed != self.i and delays[self.i - 1] > 0:
                self.delayed = self.i
                self.sim.net.call_later(delays[self.i - 1], self._reduced)
                return
        owner = self.owner
        if owner is not None and not owner.in_mpi:
            owner.deferred.append(self)  # until its rank next enters an MPI call
            return
        if self.advance():
            done = self.done
            if done is not None:
                done()

    def _reduced(self, _arg: object = None) -> None:
        """The current step's reduction is done: go on."""
        self.fire()


class _StreamStarts:
    """When each member of a streamed ring's or tree's step (of one instance) began it,
    for the seconds each spends after its stream (``simnet.ring_stream``,
    ``simnet.tree_stream``).

    Where all began at once, a member waits its delay of a common start after its
    stream. Otherwise, once the last has begun, a member ends when its steps would end
    step by step from those starts (the pipeline's ``ends_s``), later by what its
    stream took beyond its time with every hop busy (``stream_ends_s``: an upper bound
    of the stream's own time, so only other traffic makes it later). A member whose
    stream ends before the last member begins waits for that: step by step no member
    ends before every member's data has gone round the ring, or to the root and back."""

    __slots__ = ("begun", "ends", "key", "left", "missing", "parked", "pipe", "sim", "streams")

    def __init__(
        self, sim: PhaseSim, key: int, pipe: tuple[RingRun | TreePipeline, list[float]]
    ) -> None:
        self.sim = sim
        self.key = key  # in sim._stream_starts
        self.pipe = pipe  # (its pipeline, the delays of a common start)
        p = pipe[0].members
        self.begun = [0.0] * p  # seconds (simulated) each member began
        self.missing = p  # members yet to begin
        self.left = p  # members yet to be given their delay
        # Seconds each member's steps and its part of the stream end, from the members'
        # starts; None: they began together.
        self.ends: list[float] | None = None
        self.streams: list[float] | None = None
        self.parked: list[tuple[_Coll, float]] = []  # (member, when its stream ended)

    def begin(self, me: int, now: float) -> None:
        """Member ``me`` begins the step at ``now`` (seconds)."""
        self.begun[me] = now
        self.missing -= 1
        if self.missing:
            return
        first = min(self.begun)
        if max(self.begun) != first:
            offsets = [t - first for t in self.begun]
            self.ends = (self.pipe[0].ends_s(offsets) + first).tolist()
            self.streams = (self.pipe[0].stream_ends_s(offsets) + first).tolist()
        for coll, ended in self.parked:
            self._given()
            coll.net.call_later(max(self._end(coll.me, ended) - now, 0.0), coll._reduced)
        self.parked = []

    def _end(self, me: int, ended: float) -> float:
        """When member ``me``, whose stream ended at ``ended``, ends (seconds)."""
        if self.ends is None:
            return ended + self.pipe[1][me]
        return self.ends[me] + max(ended - self.streams[me], 0.0)

    def ended(self, coll: _Coll) -> bool:
        """``coll``'s stream has ended: True if it now waits (its delay, or the last
        member's start, then its ``_reduced``), False if it goes on at once."""
        now = coll.net.env.now
        if self.missing:
            self.parked.append((coll, now))
            return True
        self._given()
        # (the common start's delay as it was made: now + d - now need not be d)
        d = self.pipe[1][coll.me] if self.ends is None else self._end(coll.me, now) - now
        if d > 0:
            coll.net.call_later(d, coll._reduced)
            return True
        return False

    def _given(self) -> None:
        self.left -= 1
        if not self.left:
            del self.sim._stream_starts[self.key]


class _Stream:
    """A rank's collectives on one group, run one at a time in call order (NCCL's CUDA
    stream of a communicator): a collective called while another runs waits in
    ``queue`` with the callback of its completion."""

    __slots__ = ("busy", "done", "queue", "sim")

    def __init__(self, sim: PhaseSim) -> None:
        self.sim = sim
        self.busy = False
        self.done: Callable[[], None] | None = None  # of the running collective
        # (op, its caller's callback, its prepared calls, its instance number)
        self.queue: deque[tuple[Collective, Callable[[], None] | None, _Call, int]] = deque()

    def call(self, op: Collective, done: Callable[[], None] | None, c: _Call, seq: int) -> bool:
        """The rank calls ``op`` (instance ``seq``, prepared as ``c``); True if it
        completed at once, else ``done`` is called when it completes."""
        if self.busy:
            self.queue.append((op, done, c, seq))
            return False
        return self._start(op, done, c, seq)

    def _start(self, op: Collective, done: Callable[[], None] | None, c: _Call, seq: int) -> bool:
        self.busy = True
        self.done = done
        if _start_call(c, op, self._finished, seq):
            self.busy = False
            self.done = None
            return True
        return False

    def _finished(self) -> None:
        """The running collective completed: the queued ones start (those completing at
        once too), then their callers hear of it, earliest first. A collective a
        callback calls goes behind any still queued."""
        completed = [self.done]
        self.busy = False
        self.done = None
        queue = self.queue
        while queue:
            op, done, c, seq = queue.popleft()
            if not self._start(op, done, c, seq):
                break
            completed.append(done)
        for done in completed:
            if done is not None:
                done()


class _Rank:
    """One rank walking its operations; it runs until an operation must wait."""

    __slots__ = (
        "deferred",
        "ends",
        "i",
        "in_mpi",
        "it",
        "iterations",
        "noise",
        "ops",
        "overhead",
        "rank",
        "reqs",
        "resume",
        "scale",
        "sim",
        "starts",
        "tl",
    )

    def __init__(
        self,
        sim: PhaseSim,
        rank: int,
        ops: list[Op],
        iterations: int,
    ) -> None:
        self.sim = sim
        self.rank = rank
        self.ops = ops if type(ops) is list else list(ops)
        self.iterations = operator.index(iterations)
        self.it = 0
        self.i = 0
        self.reqs: dict[int, _Waiter | None] = {}
        self.tl = sim.timelines[rank] = RankTimeline()
        self.starts = [0.0] * len(ops)
        self.ends = [0.0] * len(ops)
        ex = sim.ex
        self.scale = ex.compute_scale * (1.0 + ex.compute_stretch)
        if ex.rank_compute_factors is not None:
            self.scale *= ex.rank_compute_factors[rank]
        self.noise = None if ex.compute_noise is None else ex.compute_noise(rank)
        self.overhead = sim.ex.compute_overhead
        self.resume = self._resume  # one bound method, reused as the continuation
        self.in_mpi = False  # blocked in an MPI call, which moves collectives on
        self.deferred: list[_Coll] = []  # collectives waiting for that
        sim.ranks[rank] = self

    def _resume(self, _ev: object = None) -> None:
        """The current operation completed now: record its end, go on."""
        i = self.i
        self.ends[i] = self.sim.env._now
        self.i = i + 1
        self.run()

    def run(self) -> None:
        sim = self.sim
        env = sim.env
        ops = self.ops
        n_ops = len(ops)
        rank = self.rank
        starts, ends = self.starts, self.ends
        i = self.i
        self.in_mpi = False
        if self.it >= self.iterations:  # zero iterations
            sim.iteration_ends[rank] = []
            return
        while True:
            if i == n_ops:
                self.tl.starts.append(starts)
                self.tl.ends.append(ends)
                self.it += 1
                if self.it >= self.iterations:
                    self.i = i
                    sim.iteration_ends[rank] = [e[-1] if e else 0.0 for e in self.tl.ends]
                    # Finished: from here on it sits in MPI (finalising), which moves on
                    # whatever it left unwaited.
                    self._block()
                    return
                starts = self.starts = [0.0] * n_ops
                ends = self.ends = [0.0] * n_ops
                self.reqs = {}
                i = 0
                continue
            op = ops[i]
            now = env._now
            starts[i] = now
            t = type(op)
            if t not in _OP_TYPE_SET:  # a subclass: dispatch on the operation it extends
                t = _base_op_type(op)
            if t is Collective:
                if op.req is None:
                    self.i = i
                    if not _call(sim._prepared(rank, op), op, self.resume):
                        self._block()
                        return
                else:
                    req = _Req()
                    at_once = _call(sim._prepared(rank, op), op, req.complete)
                    self.reqs[op.req] = None if at_once else req
            elif t is Compute:
                if op.duration_us > 0:
                    self.i = i
                    d = op.duration_us * S_PER_US * self.scale
                    if self.noise is not None:
                        d *= self.noise()
                    sim.net.call_later(d + self.overhead, self.resume)
                    return
            elif t is Send or t is Recv:
                if op.req is None:
                    waiter = _Req(self.resume)
                    self.i = i
                    if not self._p2p(op, waiter):
                        self._block()
                        return
                else:
                    waiter = _Req()
                    self.reqs[op.req] = None if self._p2p(op, waiter) else waiter
            elif t is Wait:
                reqs = self.reqs
                pending = []
                for r in op.reqs:
                    w = reqs.pop(r)
                    if w is not None and w.n:
                        pending.append(w)
                if pending:
                    self.i = i
                    wait = _WaitAll(self, len(pending))
                    for w in pending:
                        w.then = wait.tick
                    self._block()
                    return
            elif t is Testany and self.deferred:
                # A test moves the rank's collectives on, once, without blocking.
                self.in_mpi = True
                self._progress()
                self.in_mpi = False
            # Else not an operation.
            ends[i] = now
            i += 1

    def _block(self) -> None:
        """The rank now waits inside an MPI call: its deferred collectives move on
        (this may complete what it waits for, and resume it)."""
        self.in_mpi = True
        if self.deferred:
            self._progress()

    def _progress(self) -> None:
        pending, self.deferred = self.deferred, []
        for c in pending:
            c.fire()

    def _p2p(self, op: Send | Recv, waiter: _Req) -> bool:
        """Post a point-to-point operation; True if it completed at once."""
        sim = self.sim
        rank = self.rank
        if type(op) is Send:
            return sim._post_send(
                ("p", op.group, rank, op.peer, op.tag),
                rank,
                op.peer,
                op.size_bytes,
                sim._account(op.group, "p2p"),
                waiter,
            )
        return sim._post_recv(("p", op.group, op.peer, rank, op.tag), waiter)
