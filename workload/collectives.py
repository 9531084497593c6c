"""Collective algorithms as plain data: per-step point-to-point schedules.

A collective over a group of ``p`` ranks (indices ``0..p-1`` *within the
group*) is expanded by :func:`build_schedule` into a :class:`Schedule`: a
tuple of steps, each a tuple of :class:`Transfer` messages. Both the network
simulator and the MPI executor run the same schedule.

Execution rule (what makes the data dependencies hold)
    A rank walks the steps in order. For each step in which it appears it
    posts all its receives and sends of that step (non-blocking), waits for
    all of them, then applies what it received; a rank with nothing in a step
    skips it. Every send of a step reads the rank's data as it was *before*
    the step (exchanges such as recursive doubling send and receive the same
    region in one step). Entirely empty steps are never emitted.
    A step may hold several transfers between the same (src, dst) pair (e.g.
    two rings of a multiring sharing an edge); post them in tuple order on
    both sides and MPI's non-overtaking rule matches them.

Large schedules are lazy. The ring-based algorithms (ring, multiring,
hierarchical) and the all-to-alls have ``O(p^2)`` transfers: their
``Schedule.steps`` are built on first access only, and
:meth:`Schedule.rank_steps` / :meth:`Schedule.rank_plan` generate one rank's
part directly, in ``O(steps)``, identical to what the built steps give. So do
the recursive allreduces (recursive doubling, Rabenseifner): ``O(p log p)``
transfers, but a simulator at tens of thousands of ranks needs each rank's
``log p`` steps, not the index of every transfer.

``count_elems`` has MPI argument semantics (elements are float32,
``ELEM_BYTES = 4``, ``size_bytes = 4 * count_elems``):

    ============== ==========================================================
    allreduce      the whole vector (MPI_Allreduce count)
    bcast, reduce  the whole vector
    allgather      each rank's contribution; p * count elements are gathered
    reduce_scatter each rank's result block (MPI_Reduce_scatter_block
                   recvcount); the reduced vector has p * count elements
    alltoall       elements sent to *each* peer (MPI_Alltoall sendcount)
    barrier        ignored (0-element messages)
    ============== ==========================================================

Splitting ``c`` elements into ``k`` chunks gives the first ``c % k`` chunks
one extra element (``numpy.array_split``). A collective of zero elements
sends nothing (MPI returns at once); otherwise every step of the algorithm is
sent even where its chunk is empty, as MPICH's ring and recursive algorithms
post their zero-count sends and receives: a ring allreduce of fewer elements
than ranks still pays the latency of its 2 (p - 1) steps. The barrier sends
zero-element messages by design.

Chunk annotations (what a transfer carries)
    ``Schedule.chunk_elems`` partitions the op's buffer into chunks, in buffer
    order. A transfer carries chunks ``first_chunk, first_chunk + 1, ...``
    (``num_chunks`` of them, indices taken modulo ``len(chunk_elems)``: Bruck
    ranges wrap around, giving two element ranges, see
    :meth:`Schedule.element_ranges`). ``reduce=True`` means the receiver adds
    the data into its own chunks; ``False`` means it overwrites them. Buffers:

    - allreduce, bcast, reduce: the ``count``-element vector;
    - allgather: the ``p * count`` receive buffer, rank r's contribution is
      block r; reduce_scatter: the ``p * count`` input vector, rank r's result
      is block r. With ``multiring`` and R rings every block is split into R
      parts and chunk ``r * R + j`` is part j of block r (travels on ring j);
    - alltoall: a virtual ``p * p * count`` buffer, chunk ``i * p + j`` being
      the block rank i sends to rank j (rank r's send buffer is chunks
      ``r*p .. r*p + p - 1``, its receive buffer chunks ``i*p + r``);
    - barrier: no chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate, pairwise

from .step_table import StepTable
from .units import ELEM_BYTES

ALGORITHMS: dict[str, tuple[str, ...]] = {
    "allreduce": (
        "ring",
        "recursive_doubling",
        "rabenseifner",
        "hierarchical",
        "multiring",
        "nccl_ring",
        "nccl_tree",
    ),
    "allgather": ("ring", "recursive_doubling", "bruck", "multiring", "nccl_ring"),
    "reduce_scatter": ("ring", "recursive_halving", "multiring", "nccl_ring"),
    "alltoall": ("pairwise", "scattered", "direct", "bruck"),
    "bcast": ("binomial", "scatter_recursive_doubling_allgather", "scatter_ring_allgather"),
    "reduce": ("binomial", "rabenseifner"),
    "barrier": ("dissemination",),
}

NCCL_ALGORITHMS = ("nccl_ring", "nccl_tree")
"""The algorithms laid out as NCCL lays them out on GPU nodes (see the NCCL section)."""

SCHEDULE_PARAM_READERS: dict[str, tuple[str, ...]] = {
    "local_size": ("hierarchical", *NCCL_ALGORITHMS),
    "rings": ("multiring",),
    "channels": NCCL_ALGORITHMS,
    "pipeline_chunks": ("nccl_tree",),
    "streamed": NCCL_ALGORITHMS,
}
"""The schedule parameters and the algorithms that read each (``build_schedule``
refuses a parameter given to another; the policy passes each only to its readers)."""

LIBRARIES = ("auto", "mpi", "nccl")
"""What runs the collectives a program leaves to its library (see :func:`runs_as_nccl`)."""


def runs_as_nccl(named: str | None, chosen: str, library: str) -> bool:
    """Whether a collective runs as NCCL runs it (GPU kernels, one at a time per
    communicator, no rendezvous handshake, no host reduction cost): one the program
    leaves to its library (``named`` None) when the ``library`` is "nccl", or "auto"
    and its ``chosen`` algorithm is an NCCL one; never one the program names (the
    proxies send their own schedules as MPI messages) or with library "mpi"."""
    if named is not None or library == "mpi":
        return False
    return library == "nccl" or chosen in NCCL_ALGORITHMS


def in_stream_order(stream_order: bool | None, nccl: bool, steps: int) -> bool:
    """Whether a rank's call of a collective waits for its earlier ones on the group:
    all with ``stream_order`` True, none with False, those run as NCCL runs them with
    None; never one in which the rank has no ``steps`` (a call of zero elements returns
    at once)."""
    return steps > 0 and (nccl if stream_order is None else stream_order)


# MPICH's historical thresholds (bytes, or processes for _PROCS), see
# shared/reference/collective-costs.md; used by MPICH_RULES.
BCAST_SHORT_MSG_BYTES = 12_288
BCAST_LONG_MSG_BYTES = 524_288
BCAST_MIN_PROCS = 8
ALLGATHER_LONG_MSG_BYTES = 524_288
ALLGATHER_SHORT_MSG_BYTES = 81_920
ALLREDUCE_SHORT_MSG_BYTES = 2_048
REDUCE_SHORT_MSG_BYTES = 2_048
REDSCAT_LONG_MSG_BYTES = 524_288
ALLTOALL_SHORT_MSG_BYTES = 256
ALLTOALL_MIN_PROCS = 8
ALLTOALL_MEDIUM_MSG_BYTES = 32_768
ALLTOALL_THROTTLE = 32
"""MPIR_CVAR_ALLTOALL_THROTTLE: the requests MPICH's medium-size ("scattered") alltoall
has outstanding at once, a batch of peers at a time (the first batch counts the rank's
own block)."""


@dataclass(frozen=True, slots=True)
class Transfer:
    """One message ``src -> dst`` of ``count_elems`` float32 elements.

    ``first_chunk``/``num_chunks`` name the chunks of the schedule's buffer
    it carries (modulo the number of chunks); ``reduce`` tells whether the
    receiver reduces (True) or overwrites (False).
    """

    src: int
    dst: int
    count_elems: int
    first_chunk: int = 0
    num_chunks: int = 0
    reduce: bool = False

    @property
    def size_bytes(self) -> int:
        return ELEM_BYTES * self.count_elems


RankStep = tuple[tuple[Transfer, ...], tuple[Transfer, ...]]

PlanStep = tuple[tuple[int, ...], tuple[tuple[int, int, bool], ...]]
"""One step of :meth:`Schedule.rank_plan`: ``(recv_srcs, sends)``, each send
``(dst, size_bytes, reduce)``; ranks are group indices."""

STEP_TABLE_MAX_ENTRIES = 1 << 24
"""The largest :class:`StepTable` a ring schedule makes (entries: steps x ranks, 17 bytes
each); beyond, executors take per-rank plans, made and dropped as they are used."""

FlatPlan = tuple[tuple[tuple[int, ...], ...], tuple[int, ...], tuple[int, ...], int]
"""A rank's plan as the simulator runs it (:meth:`Schedule.rank_flat`): ``(steps,
reduce_totals, copy_totals, messages)``. Each step is one flat tuple: the number of
ranks it receives from, those ranks, then ``dst, size_bytes`` per send; equal steps may
be one tuple. The totals are the bytes it sends per destination over all steps, reduced
and copied, as ``(dst, bytes, dst, bytes, ...)`` in the order of first sending;
``messages`` counts its sends."""


@dataclass(frozen=True)
class Schedule:
    """A collective expanded into steps of point-to-point transfers.

    ``count_elems`` is the MPI count the schedule was built for, ``root`` the
    root of bcast/reduce (0 otherwise), ``chunk_elems`` the sizes of the
    buffer's chunks that transfers refer to (see the module docstring).

    ``build_schedule`` returns the ring-based and all-to-all schedules lazily:
    ``steps`` is built on first access (then kept), while the per-rank
    queries generate only that rank's part.
    """

    op: str
    algorithm: str
    group_size: int
    steps: tuple[tuple[Transfer, ...], ...]
    count_elems: int = 0
    root: int = 0
    chunk_elems: tuple[int, ...] = ()

    def __getattr__(self, name: str) -> object:
        # Only reached when ``steps`` of a lazy schedule was never built.
        if name == "steps":
            lazy = self.__dict__.get("_lazy")
            if lazy is not None:
                steps = self.__dict__["steps"] = lazy.build_steps()
                return steps
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def total_bytes(self) -> int:
        return sum(t.count_elems for step in self.steps for t in step) * ELEM_BYTES

    @cached_property
    def _by_rank(self) -> tuple[tuple[tuple[int, RankStep], ...], ...]:
        lazy = self.__dict__.get("_lazy")
        if lazy is not None:
            return tuple(lazy.rank_steps(r) for r in range(self.group_size))
        index: list[list[tuple[int, list[Transfer], list[Transfer]]]] = [
            [] for _ in range(self.group_size)
        ]
        for s, step in enumerate(self.steps):
            for t in step:
                for r, side in ((t.src, 1), (t.dst, 2)):
                    entries = index[r]
                    if not entries or entries[-1][0] != s:
                        entries.append((s, [], []))
                    entries[-1][side].append(t)
        return tuple(
            tuple((s, (tuple(sends), tuple(recvs))) for s, sends, recvs in entries)
            for entries in index
        )

    def _rank_entries(self, r: int) -> tuple[tuple[int, RankStep], ...]:
        self._check_rank(r)
        lazy = self.__dict__.get("_lazy")
        if lazy is not None and "_by_rank" not in self.__dict__:
            return lazy.rank_steps(r)
        return self._by_rank[r]

    def _check_rank(self, r: int) -> None:
        if not 0 <= r < self.group_size:
            raise ValueError(f"rank must be in 0..{self.group_size - 1} (got {r})")

    def rank_steps(self, r: int) -> list[RankStep]:
        """(sends, recvs) of rank ``r`` for each step it takes part in, in order."""
        return [pair for _, pair in self._rank_entries(r)]

    def rank_step_indices(self, r: int) -> list[int]:
        """Global step indices matching :meth:`rank_steps`."""
        return [s for s, _ in self._rank_entries(r)]

    def rank_plan(self, r: int) -> tuple[PlanStep, ...]:
        """:meth:`rank_steps` of rank ``r`` in compact form, for executors.

        One ``(recv_srcs, sends)`` per step the rank takes part in, in order:
        the sources of its receives and its sends as ``(dst, size_bytes,
        reduce)``, each in the order of :meth:`rank_steps`. Equal steps may be
        one shared tuple. Plans of small schedules are kept; plans of lazy
        ones are generated on each call, without building ``steps``.
        """
        self._check_rank(r)
        lazy = self.__dict__.get("_lazy")
        if lazy is not None:
            return lazy.rank_plan(r)
        plans = self.__dict__.setdefault("_plans", {})
        plan = plans.get(r)
        if plan is None:
            plan = plans[r] = tuple(
                (
                    tuple(t.src for t in recvs),
                    tuple((t.dst, ELEM_BYTES * t.count_elems, t.reduce) for t in sends),
                )
                for _, (sends, recvs) in self._by_rank[r]
            )
        return plan

    def rank_flat(self, r: int) -> FlatPlan | None:
        """:meth:`rank_plan` of rank ``r`` already flattened (:data:`FlatPlan`), where
        the schedule makes that form directly (the recursive allreduces: every rank of
        a big data-parallel run needs one per collective size); None otherwise."""
        self._check_rank(r)
        make = getattr(self.__dict__.get("_lazy"), "rank_flat", None)
        return None if make is None else make(r)

    def rank_table(self) -> StepTable | None:
        """Every rank's :meth:`rank_flat` as one :class:`StepTable`, where the schedule
        makes one (the recursive allreduces, whose steps are exchanges with one partner,
        and ring schedules of one ring per run, up to ``STEP_TABLE_MAX_ENTRIES``
        entries); None otherwise."""
        make = getattr(self.__dict__.get("_lazy"), "table", None)
        return None if make is None else make()

    def bytes_sent(self, r: int) -> int:
        return ELEM_BYTES * sum(
            t.count_elems for _, (sends, _) in self._rank_entries(r) for t in sends
        )

    def bytes_received(self, r: int) -> int:
        return ELEM_BYTES * sum(
            t.count_elems for _, (_, recvs) in self._rank_entries(r) for t in recvs
        )

    def pair_bytes(self) -> dict[tuple[int, int], int]:
        """Bytes per (src, dst) pair that exchanges any message (barrier pairs map to 0)."""
        out: dict[tuple[int, int], int] = {}
        for step in self.steps:
            for t in step:
                key = (t.src, t.dst)
                out[key] = out.get(key, 0) + t.size_bytes
        return out

    @cached_property
    def chunk_offsets(self) -> tuple[int, ...]:
        """Element offset of every chunk in the buffer, plus the buffer length."""
        offsets = [0]
        for c in self.chunk_elems:
            offsets.append(offsets[-1] + c)
        return tuple(offsets)

    def element_ranges(self, t: Transfer) -> tuple[tuple[int, int], ...]:
        """Half-open element ranges ``(start, stop)`` of the buffer that ``t`` carries.

        One range, or two when the chunk range wraps around (Bruck); empty
        ranges are left out.
        """
        n = len(self.chunk_elems)
        if t.num_chunks == 0 or n == 0:
            return ()
        off = self.chunk_offsets
        first, last = t.first_chunk, t.first_chunk + t.num_chunks
        if last <= n:
            ranges = [(off[first], off[last])]
        else:
            ranges = [(off[first], off[n]), (0, off[last - n])]
        return tuple((a, b) for a, b in ranges if b > a)


# ---------------------------------------------------------------- building


def _split(total: int, k: int) -> list[int]:
    """``total`` elements in ``k`` chunks, the first ``total % k`` one larger."""
    q, r = divmod(total, k)
    return [q + 1] * r + [q] * (k - r)


def _is_pow2(p: int) -> bool:
    return p >= 1 and p & (p - 1) == 0


def _ceil_lg(p: int) -> int:
    return (p - 1).bit_length()


class _Builder:
    """Collects transfers into numbered steps, sizing them from the chunk layout."""

    __slots__ = ("_empty_ok", "_n", "_prefix", "chunks", "steps", "stream_tree")

    def __init__(self, chunk_elems: Sequence[int]) -> None:
        self.chunks = tuple(chunk_elems)
        self.stream_tree: tuple[list[list[int]], int] | None = None  # see stream_tree
        prefix = [0]
        for c in chunk_elems:
            prefix.append(prefix[-1] + c)
        self._prefix = prefix
        self._n = len(chunk_elems)
        # An empty chunk of a non-empty collective is still sent (a zero-byte message);
        # a collective of no elements sends nothing.
        self._empty_ok = prefix[-1] > 0
        self.steps: list[list[Transfer]] = []

    def add(
        self,
        step: int,
        src: int,
        dst: int,
        first: int,
        num: int,
        reduce: bool,
        keep_empty: bool = False,
    ) -> None:
        prefix, n = self._prefix, self._n
        last = first + num
        if last <= n:
            count = prefix[last] - prefix[first]
        else:
            count = prefix[n] - prefix[first] + prefix[last - n]
        if count == 0 and not (keep_empty or self._empty_ok):
            return
        steps = self.steps
        while len(steps) <= step:
            steps.append([])
        steps[step].append(Transfer(src, dst, count, first, num, reduce))


def _halving(
    b: _Builder,
    step0: int,
    pof2: int,
    real: Callable[[int], int],
    width: int,
    masks: Sequence[int] | None = None,
) -> tuple[int, list[int]]:
    """Recursive-halving reduce-scatter over ``pof2`` blocks of ``width`` chunks.

    ``masks``: the partner distances in step order; default pof2/2, ..., 1 (MPICH's
    reduce-scatter). The lower rank of a pair keeps the lower half. Returns the next free
    step index and the first block every new rank ends with.
    """
    lo = [0] * pof2
    size = pof2
    step = step0
    for mask in masks or _masks(pof2)[::-1]:
        half = size // 2
        for nr in range(pof2):
            if nr & mask:
                send_lo, lo[nr] = lo[nr], lo[nr] + half
            else:
                send_lo = lo[nr] + half
            b.add(step, real(nr), real(nr ^ mask), send_lo * width, half * width, True)
        size = half
        step += 1
    return step, lo


def _masks(pof2: int) -> list[int]:
    """1, 2, 4, ..., pof2 / 2."""
    return [1 << i for i in range(pof2.bit_length() - 1)]


def _doubling_allgather(
    b: _Builder,
    step0: int,
    pof2: int,
    real: Callable[[int], int],
    width: int,
    lo: Sequence[int] | None = None,
    masks: Sequence[int] | None = None,
) -> int:
    """Recursive-doubling allgather over ``pof2`` blocks: new rank i starts with block
    ``lo[i]`` (default i); at each distance of ``masks`` (default 1, 2, ..., pof2/2) a
    rank sends all it holds to its partner, and the two hold the union."""
    held = list(range(pof2)) if lo is None else list(lo)
    size = 1
    step = step0
    for mask in masks or _masks(pof2):
        for nr in range(pof2):
            b.add(step, real(nr), real(nr ^ mask), held[nr] * width, size * width, False)
        held = [min(held[nr], held[nr ^ mask]) for nr in range(pof2)]
        size *= 2
        step += 1
    return step


def _fold(p: int, evens: bool = False) -> tuple[int, int, Callable[[int], int]]:
    """MPICH non-power-of-two folding: (pof2, rem, new rank -> group index). Of the first
    2 rem ranks the even ones hand their data to the next (odd) rank and sit out; the odd
    ones and the ranks from 2 rem on go on as new ranks 0 .. pof2-1 (the testbed's byte
    counts per host pair show MPICH's odd survivors). ``evens``: the other way round, as
    MPICH's reduce folds (the odd ones hand down, so that rank 0 takes part)."""
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    odd = 0 if evens else 1

    def real(nr: int) -> int:
        return 2 * nr + odd if nr < rem else nr + rem

    return pof2, rem, real


Built = _Builder  # its steps and chunk layout


def _allreduce_recursive_doubling(p: int, count: int, **_: object) -> Built:
    b = _Builder([count])
    pof2, rem, real = _fold(p)
    step = 0
    if rem:
        for r in range(rem):
            b.add(0, 2 * r, 2 * r + 1, 0, 1, True)
        step = 1
    mask = 1
    while mask < pof2:
        for nr in range(pof2):
            b.add(step, real(nr), real(nr ^ mask), 0, 1, True)
        mask <<= 1
        step += 1
    for r in range(rem):
        b.add(step, 2 * r + 1, 2 * r, 0, 1, False)
    return b


def _allreduce_rabenseifner(p: int, count: int, **_: object) -> Built:
    pof2, rem, real = _fold(p)
    b = _Builder(_split(count, pof2))
    step = 0
    if rem:
        for r in range(rem):
            b.add(0, 2 * r, 2 * r + 1, 0, pof2, True)
        step = 1
    # MPICH's order: the reduce-scatter starts with partners at distance 1 (exchanging
    # half the vector), the allgather ends with them, so the largest messages go to
    # the nearest ranks.
    up = _masks(pof2)
    step, lo = _halving(b, step, pof2, real, 1, up)
    step = _doubling_allgather(b, step, pof2, real, 1, lo, up[::-1])
    for r in range(rem):
        b.add(step, 2 * r + 1, 2 * r, 0, pof2, False)
    return b


def _allgather_recursive_doubling(p: int, count: int, **_: object) -> Built:
    b = _Builder([count] * p)
    _doubling_allgather(b, 0, p, lambda r: r, 1)
    return b


def _allgather_bruck(p: int, count: int, **_: object) -> Built:
    b = _Builder([count] * p)
    dist, step = 1, 0
    while dist < p:
        n = min(dist, p - dist)
        for i in range(p):
            b.add(step, i, (i - dist) % p, i, n, False)
        dist <<= 1
        step += 1
    return b


def _reduce_scatter_recursive_halving(p: int, count: int, **_: object) -> Built:
    b = _Builder([count] * p)
    _halving(b, 0, p, lambda r: r, 1)
    return b


def _bcast_binomial(p: int, count: int, *, root: int, **_: object) -> Built:
    b = _Builder([count])
    levels = _ceil_lg(p)
    for step in range(levels):
        m = 1 << (levels - 1 - step)
        for vr in range(0, p - m, 2 * m):
            b.add(step, (vr + root) % p, (vr + m + root) % p, 0, 1, False)
    return b


def _reduce_binomial(p: int, count: int, *, root: int, **_: object) -> Built:
    b = _Builder([count])
    for step in range(_ceil_lg(p)):
        m = 1 << step
        for vr in range(m, p, 2 * m):
            b.add(step, (vr + root) % p, (vr - m + root) % p, 0, 1, True)
    return b


def _reduce_rabenseifner(p: int, count: int, *, root: int, **_: object) -> Built:
    """MPICH's reduce for long vectors (MPIR_Reduce_intra_reduce_scatter_gather): of the
    first 2 rem ranks the odd ones hand their vector to the even one below and sit out
    (the reverse of the allreduce's fold, so that root 0 takes part), a recursive-halving
    reduce-scatter among the pof2 others (distance 1 first), then a binomial gather of the
    blocks to the root, finest blocks first. A root that sat out first gets block 0 from
    rank 0 and takes rank 0's place in the gather."""
    pof2, rem, real = _fold(p, evens=True)
    b = _Builder(_split(count, pof2))
    step = 0
    if rem:
        for r in range(rem):
            b.add(0, 2 * r + 1, 2 * r, 0, pof2, True)
        step = 1
    up = _masks(pof2)
    step, held = _halving(b, step, pof2, real, 1, up)
    gather_real = real
    if root < 2 * rem and root % 2:
        # Block 0 (new rank 0's after the halving) to the root, which gathers as it.
        b.add(step, real(0), root, held[0], 1, False)
        step += 1
        new_root = 0

        def gather_real(nr: int) -> int:
            return root if nr == 0 else real(nr)

    else:
        new_root = root // 2 if root < 2 * rem else root - rem
    active = [True] * pof2
    size = 1
    for mask in up[::-1]:
        for nr in range(pof2):
            if active[nr] and (nr ^ new_root) & mask:
                b.add(step, gather_real(nr), gather_real(nr ^ mask), held[nr], size, False)
                held[nr ^ mask] = min(held[nr], held[nr ^ mask])
                active[nr] = False
        size *= 2
        step += 1
    return b


def _scatter(b: _Builder, p: int, root: int) -> int:
    """MPICH's binomial scatter of a bcast's vector in ``p`` chunks, chunk v for the
    rank ``v`` after the root (relative rank): each rank hands the part of its subtree
    below it on, halves first. Returns the next step. (MPICH cuts the bytes into pieces
    of ceil(bytes / p), the last shorter, and skips empty ones; here the pieces are whole
    elements, as numpy.array_split cuts them, and an empty one is still sent: each piece
    differs by under 4 bytes, and a piece is empty only below one element per rank.)"""
    levels = _ceil_lg(p)
    for step in range(levels):
        m = 1 << (levels - 1 - step)
        for vr in range(0, p - m, 2 * m):
            b.add(step, (vr + root) % p, (vr + m + root) % p, vr + m, min(m, p - vr - m), False)
    return levels


def _bcast_scatter_doubling(p: int, count: int, *, root: int, **_: object) -> Built:
    """MPICH's bcast for medium vectors on a power of two: the binomial scatter, then a
    recursive-doubling allgather of the pieces among the ranks relative to the root."""
    b = _Builder(_split(count, p))
    step = _scatter(b, p, root)
    _doubling_allgather(b, step, p, lambda vr: (vr + root) % p, 1)
    return b


def _bcast_scatter_ring(p: int, count: int, *, root: int, **_: object) -> Built:
    """MPICH's bcast for long vectors: the binomial scatter, then a ring allgather of
    the pieces (p - 1 steps, each relative rank passing on what it last received)."""
    b = _Builder(_split(count, p))
    step = _scatter(b, p, root)
    for s in range(p - 1):
        for vr in range(p):
            b.add(step + s, (vr + root) % p, (vr + 1 + root) % p, (vr - s) % p, 1, False)
    return b


def _barrier_dissemination(p: int, count: int, **_: object) -> Built:
    b = _Builder(())
    for step in range(_ceil_lg(p)):
        dist = 1 << step
        for i in range(p):
            b.add(step, i, (i + dist) % p, 0, 0, False, keep_empty=True)
    return b


_BUILDERS: dict[tuple[str, str], Callable[..., Built]] = {
    ("allreduce", "recursive_doubling"): _allreduce_recursive_doubling,
    ("allreduce", "rabenseifner"): _allreduce_rabenseifner,
    ("allgather", "recursive_doubling"): _allgather_recursive_doubling,
    ("allgather", "bruck"): _allgather_bruck,
    ("reduce_scatter", "recursive_halving"): _reduce_scatter_recursive_halving,
    ("bcast", "binomial"): _bcast_binomial,
    ("bcast", "scatter_recursive_doubling_allgather"): _bcast_scatter_doubling,
    ("bcast", "scatter_ring_allgather"): _bcast_scatter_ring,
    ("reduce", "binomial"): _reduce_binomial,
    ("reduce", "rabenseifner"): _reduce_rabenseifner,
    ("barrier", "dissemination"): _barrier_dissemination,
}

_POW2_ONLY = {
    ("allgather", "recursive_doubling"),
    ("reduce_scatter", "recursive_halving"),
    ("bcast", "scatter_recursive_doubling_allgather"),
}


# ---------------------------------------------------------------- ring algorithms
#
# The ring-based algorithms (and the all-to-alls below) have O(p^2) transfers, so
# they are written once, per rank: a rank's part is generated without its other
# ranks, and the whole schedule's steps are those parts put together (each
# position's sends, in order), built only when asked for.
#
# A ring algorithm is a list of rings and of runs over them. A ring is an order of
# group indices (by position) and the block (first_chunk, num_chunks) that each
# position owns. A run is a number of steps and the rings taking part, each with
# a shift: in step s of the run, position q sends its ring's block q - s - shift
# (mod the ring's length) to position q + 1; shift 1 is a reduce-scatter
# (reduced), shift 0 an allgather (copied). So position q receives block
# q - s - shift - 1 from position q - 1. Runs follow each other; in a step, the
# transfers come ring by ring in run order, position by position.

_RingDef = tuple[list[int], list[tuple[int, int]]]
"""A ring: its order (group indices by position) and the block each position owns."""

_RingAlgorithm = tuple[list[int], list[_RingDef], list[tuple[int, list[tuple[int, int]]]]]
"""``(chunk_elems, rings, runs)``, each run ``(steps, [(ring index, shift), ...])``."""


def _hierarchical_allreduce_def(
    p: int, count: int, *, local_size: int, **_: object
) -> _RingAlgorithm:
    # Ring reduce-scatter inside each group of g consecutive ranks (group rings),
    # ring allreduce of each shard across the groups (column rings), ring
    # allgather inside each group. Shard x of the vector is chunks x*k .. x*k + k - 1.
    g = local_size
    k = p // g
    chunks = [c for shard in _split(count, g) for c in _split(shard, k)]
    groups = [
        (list(range(grp * g, grp * g + g)), [(x * k, k) for x in range(g)]) for grp in range(k)
    ]
    columns = [
        ([loc + x * g for x in range(k)], [(loc * k + x, 1) for x in range(k)]) for loc in range(g)
    ]
    in_groups = list(range(k))
    in_columns = list(range(k, k + g))
    runs = [
        (g - 1, [(i, 1) for i in in_groups]),
        (k - 1, [(i, 1) for i in in_columns]),
        (k - 1, [(i, 0) for i in in_columns]),
        (g - 1, [(i, 0) for i in in_groups]),
    ]
    return chunks, groups + columns, runs


def _multiring_allreduce_def(
    p: int, count: int, *, rings: list[list[int]], **_: object
) -> _RingAlgorithm:
    # Ring j reduces part j of the vector: chunks j*p .. j*p + p - 1, one per rank.
    chunks = [c for part in _split(count, len(rings)) for c in _split(part, p)]
    defs = [(o, [(j * p + x, 1) for x in o]) for j, o in enumerate(rings)]
    idx = range(len(rings))
    return chunks, defs, [(p - 1, [(j, 1) for j in idx]), (p - 1, [(j, 0) for j in idx])]


def _multiring_blocks_def(shift: int) -> Callable[..., _RingAlgorithm]:
    """Multiring reduce-scatter (shift 1) or allgather (0): every block is split in
    one part per ring, chunk ``x * R + j`` being part j of block x (on ring j)."""

    def define(p: int, count: int, *, rings: list[list[int]], **_: object) -> _RingAlgorithm:
        nr = len(rings)
        defs = [(o, [(x * nr + j, 1) for x in o]) for j, o in enumerate(rings)]
        return _split(count, nr) * p, defs, [(p - 1, [(j, shift) for j in range(nr)])]

    return define


def _one_ring(multiring: Callable[..., _RingAlgorithm]) -> Callable[..., _RingAlgorithm]:
    """The ring algorithm: the multiring one on the single ring 0, 1, ..., p - 1."""

    def define(p: int, count: int, **_: object) -> _RingAlgorithm:
        return multiring(p, count, rings=[list(range(p))])

    return define


# ---------------------------------------------------------------- NCCL-style algorithms
#
# How NCCL lays its collectives out on GPU nodes, as far as a fluid network model can
# tell them apart (ranks are GPUs numbered node-major, ``local_size`` per node; one
# node of the whole group when it is not given):
#
# - "nccl_ring": NCCL's rings run through every node's GPUs one node after another, one
#   ring per channel, each channel carrying an equal share of the data. Channel c enters
#   every node at its GPU c mod local_size and visits the node's GPUs from there, so the
#   hop between nodes goes from GPU c - 1 of one node to GPU c of the next: on a
#   rail-optimised network (PXN routes) channel c's inter-node traffic is on rail c, and
#   ``local_size`` channels use every NIC once. NCCL pipelines each ring step in
#   chunks; in a fluid model a ring already keeps every link busy at the pace of its
#   slowest, so chunking would only move latency terms and is not modelled for rings.
# - "nccl_tree" (allreduce): NCCL's double binary tree. The nodes form two binary
#   trees in which a node that is a leaf of one is (for an even number of nodes) inside
#   the other: tree 0 is the in-order tree over node numbers (node m's depth from the
#   leaves is the number of trailing zeros of m + 1), tree 1 the same tree mirrored
#   (node m plays node M - 1 - m) for an even number M of nodes, shifted by one for an
#   odd one. Inside a node the GPUs form a chain whose head joins the inter-node tree.
#   Every channel c has both trees, both with chain head GPU c (mod local_size), so a
#   node's NIC carries a tree in which the node is inside (a parent and two children)
#   and one in which it is a leaf, as NCCL runs a channel's two trees on the same NICs;
#   by default local_size channels use every NIC (heads on other NICs for the two trees
#   would load an inner node's NIC three times its leaf NIC's on 3 nodes or more). The
#   data is split over the 2 * channels trees and each tree's share into chunks of
#   NCCL_TREE_CHUNK_BYTES (at least one, at most ``pipeline_chunks``, default 64), which
#   are pipelined: a rank at height h above its tree's leaves sends chunk k
#   to its parent (reduced) in step k + h, and the root's result comes down again, a
#   rank at depth d sending chunk k to its children in step k + H + d (H the root's
#   height), so the reduction and the broadcast overlap as in NCCL.
#
# Both lay their rings and trees out over the members node by node: the group's order,
# or ``node_order`` where its ranks alternate between nodes (NCCL orders a
# communicator's GPUs by node whatever their rank numbers).

MAX_NCCL_CHANNELS = 64
"""The most channels the NCCL algorithms take (NCCL's own limit, MAXCHANNELS)."""

MAX_PIPELINE_CHUNKS = 1024
"""The most chunks per tree "nccl_tree" takes (``pipeline_chunks``): a deeper pipeline
only adds messages to a simulation."""

DEFAULT_NCCL_TREE_CHUNKS = 64
"""The most chunks per tree of "nccl_tree" when ``pipeline_chunks`` is not given (a deep
enough pipeline that a tree's fill and drain, 2 H steps, is a small part of it)."""

NCCL_TREE_CHUNK_BYTES = 512 * 1024
"""Bytes of a chunk of "nccl_tree" when ``pipeline_chunks`` is not given: NCCL's step of
its default 4 MiB buffer (NCCL_BUFFSIZE / NCCL_STEPS = 8). A tree's share of a small
message is one chunk, as NCCL sends it, not 64 empty steps."""


def _nodes(
    p: int, local_size: int | None, node_sizes: Sequence[int] | None
) -> tuple[list[tuple[int, int]], int]:
    """The nodes of a group of ``p`` GPUs, node-major, as (first GPU, GPUs) each:
    ``node_sizes`` GPUs each where given, else ``local_size`` each (default ``p``: one
    node); and the default channels (:func:`default_channels` of the smallest node)."""
    if node_sizes is not None:
        starts = [0, *accumulate(node_sizes)]
        return list(zip(starts, node_sizes, strict=False)), default_channels(min(node_sizes))
    g = p if local_size is None else local_size
    return [(m * g, g) for m in range(p // g)], default_channels(local_size)


def nccl_ring_orders(
    p: int,
    local_size: int | None = None,
    channels: int | None = None,
    node_sizes: Sequence[int] | None = None,
) -> list[list[int]]:
    """The ring orders of "nccl_ring": channel c visits every node in turn, entering it
    at its GPU ``c mod`` (its GPUs) (ranks are GPUs, node-major; ``local_size`` GPUs per
    node, default ``p``: one node; or ``node_sizes``, each node's GPUs, where the nodes
    hold different numbers of the group's GPUs). ``channels`` defaults to
    :func:`default_channels` (of the smallest node: NCCL runs the fewest channels any
    of the group's GPUs found)."""
    nodes, default = _nodes(p, local_size, node_sizes)
    c = default if channels is None else channels
    return [[first + (ch + i) % g for first, g in nodes for i in range(g)] for ch in range(c)]


def default_channels(local_size: int | None) -> int:
    """Channels of the NCCL algorithms when none are given: one per GPU of a node
    (``local_size``), so that on a rail-optimised network every NIC carries one, at
    most :data:`MAX_NCCL_CHANNELS`; one where the group is laid out as one node
    (``local_size`` None), whose channels would all take the same ring's links (and a
    tree's chains nearly so): more would only multiply the messages."""
    return 1 if local_size is None else min(local_size, MAX_NCCL_CHANNELS)


def _btree_parents(m: int) -> list[int]:
    """Parent of each node 0..m-1 in the in-order binary tree (root's parent -1): the root
    of a range is the node whose number plus one has the most trailing zeros."""
    parents = [-1] * m

    def build(lo: int, hi: int, parent: int) -> None:
        if lo > hi:
            return
        root = max(range(lo, hi + 1), key=lambda v: ((v + 1) & -(v + 1), -v))
        parents[root] = parent
        build(lo, root - 1, root)
        build(root + 1, hi, root)

    build(0, m - 1, -1)
    return parents


def nccl_tree_parents(
    p: int,
    local_size: int | None,
    head: int,
    mirrored: bool,
    node_sizes: Sequence[int] | None = None,
) -> list[int]:
    """Parent of every rank (-1 for the root) in one tree of "nccl_tree": the node tree
    (tree 0, or tree 1 if ``mirrored``) joined through chain heads GPU ``head`` (mod
    the node's GPUs); a node's chain runs head, head + 1, ... (mod its GPUs), each
    GPU's parent the one before it. Nodes as :func:`nccl_ring_orders` takes them."""
    spans, _ = _nodes(p, local_size, node_sizes)
    nodes = len(spans)
    base = _btree_parents(nodes)
    if mirrored and nodes > 1:
        if nodes % 2 == 0:
            flip = [nodes - 1 - v for v in range(nodes)]
        else:
            flip = [(v + 1) % nodes for v in range(nodes)]
        node_parent = [-1] * nodes
        for v in range(nodes):
            par = base[v]
            node_parent[flip[v]] = -1 if par < 0 else flip[par]
    else:
        node_parent = base
    parents = [-1] * p
    for m, (first, g) in enumerate(spans):
        chain = [first + (head + i) % g for i in range(g)]
        for prev, gpu in pairwise(chain):
            parents[gpu] = prev
        if node_parent[m] >= 0:
            up_first, up_g = spans[node_parent[m]]
            parents[chain[0]] = up_first + head % up_g
    return parents


def nccl_tree_layout(
    p: int,
    count: int,
    *,
    local_size: int | None = None,
    channels: int | None = None,
    pipeline_chunks: int | None = None,
    node_order: Sequence[int] | None = None,
    node_sizes: Sequence[int] | None = None,
    **_: object,
) -> tuple[list[list[int]], int]:
    """The trees of "nccl_tree" allreduce over ``p`` members of ``count`` elements (two a
    channel, each a parent per member, -1 for its root; parameters as
    :func:`build_schedule` takes them) and the chunks each tree's share is pipelined in."""
    _, default = _nodes(p, local_size, node_sizes)
    c = default if channels is None else channels
    if pipeline_chunks is None:
        share_bytes = -(-count * ELEM_BYTES // (2 * c))
        k = max(1, min(DEFAULT_NCCL_TREE_CHUNKS, -(-share_bytes // NCCL_TREE_CHUNK_BYTES)))
    else:
        k = pipeline_chunks
    trees = [
        nccl_tree_parents(p, local_size, ch, mirrored=t == 1, node_sizes=node_sizes)
        for ch in range(c)
        for t in range(2)
    ]
    if node_order is not None:  # position j of the layout is member node_order[j]
        relabelled = []
        for parents in trees:
            tree = [-1] * p
            for j, par in enumerate(parents):
                tree[node_order[j]] = -1 if par < 0 else node_order[par]
            relabelled.append(tree)
        trees = relabelled
    return trees, k


def nccl_tree_messages(
    p: int, count: int, member: int, streamed: bool = False, **params: object
) -> int:
    """The messages ``member`` sends in "nccl_tree" allreduce over ``p`` members of
    ``count`` elements (``params`` as :func:`nccl_tree_layout` takes them), as its rank
    plan holds them, without making the schedule (13 ms a member at 4,096 ranks, 0.9 s
    the schedule): in every tree, each chunk once to its parent and once to each child,
    an empty chunk too; ``streamed``, all the tree's chunks in one message to each."""
    if p <= 1 or count == 0:
        return 0
    trees, k = nccl_tree_layout(p, count, **params)
    edges = sum((parent[member] >= 0) + parent.count(member) for parent in trees)
    return edges if streamed else k * edges


def tree_heights(
    parent: Sequence[int],
) -> tuple[list[int], list[int], list[int], list[list[int]]]:
    """A tree given by each rank's parent (-1: the root) as (ranks top-down, each rank's
    height above its deepest leaf, each one's depth below the root, each one's children
    in rank order)."""
    p = len(parent)
    children: list[list[int]] = [[] for _ in range(p)]
    root = -1
    for r, par in enumerate(parent):
        if par < 0:
            root = r
        else:
            children[par].append(r)
    height = [0] * p
    depth = [0] * p
    order = [root]  # top-down
    for r in order:
        for ch in children[r]:
            depth[ch] = depth[r] + 1
            order.append(ch)
    for r in reversed(order):
        if children[r]:
            height[r] = 1 + max(height[ch] for ch in children[r])
    return order, height, depth, children


def _allreduce_nccl_tree(p: int, count: int, streamed: bool = False, **params: object) -> Built:
    trees, k = nccl_tree_layout(p, count, **params)  # type: ignore[arg-type]
    b = _Builder([x for part in _split(count, len(trees)) for x in _split(part, k)])
    if streamed:
        # Every tree edge at once, each way, with all of its tree's chunks (see
        # stream_tree): the same bytes between the same pairs, reduced by the same ranks.
        b.stream_tree = (trees, k)
        for ti, parent in enumerate(trees):
            order, _, _, _ = tree_heights(parent)
            for r in order:
                if parent[r] >= 0:
                    b.add(0, r, parent[r], ti * k, k, True)
            for r in order:
                if parent[r] >= 0:
                    b.add(0, parent[r], r, ti * k, k, False)
        return b
    for ti, parent in enumerate(trees):
        order, height, depth, children = tree_heights(parent)
        top = height[order[0]]
        for chunk in range(k):
            first = ti * k + chunk
            for r in order:
                if parent[r] >= 0:
                    b.add(chunk + height[r], r, parent[r], first, 1, True)
                for ch in children[r]:
                    b.add(chunk + top + depth[r], r, ch, first, 1, False)
    return b


_BUILDERS[("allreduce", "nccl_tree")] = _allreduce_nccl_tree


def _nccl(multiring: Callable[..., _RingAlgorithm]) -> Callable[..., _RingAlgorithm]:
    """A multiring algorithm on NCCL's channel rings (:func:`nccl_ring_orders`)."""

    def define(
        p: int,
        count: int,
        *,
        local_size: int | None = None,
        channels: int | None = None,
        node_order: Sequence[int] | None = None,
        node_sizes: Sequence[int] | None = None,
        **_: object,
    ) -> _RingAlgorithm:
        rings = nccl_ring_orders(p, local_size, channels, node_sizes)
        if node_order is not None:
            rings = [[node_order[x] for x in ring] for ring in rings]
        return multiring(p, count, rings=rings)

    return define


_RING_ALGORITHMS: dict[tuple[str, str], Callable[..., _RingAlgorithm]] = {
    ("allreduce", "ring"): _one_ring(_multiring_allreduce_def),
    ("allreduce", "hierarchical"): _hierarchical_allreduce_def,
    ("allreduce", "multiring"): _multiring_allreduce_def,
    ("allgather", "ring"): _one_ring(_multiring_blocks_def(0)),
    ("allgather", "multiring"): _multiring_blocks_def(0),
    ("reduce_scatter", "ring"): _one_ring(_multiring_blocks_def(1)),
    ("reduce_scatter", "multiring"): _multiring_blocks_def(1),
    ("allreduce", "nccl_ring"): _nccl(_multiring_allreduce_def),
    ("allgather", "nccl_ring"): _nccl(_multiring_blocks_def(0)),
    ("reduce_scatter", "nccl_ring"): _nccl(_multiring_blocks_def(1)),
}

RING_RUN_SCHEDULES = frozenset(_RING_ALGORITHMS)
"""(op, algorithm) of the schedules made of ring runs, generated per rank as they run
(nothing is kept per message: a simulation of millions of their messages holds about 16
bytes each at its peak, against hundreds for the others)."""

assert set(_BUILDERS) | set(_RING_ALGORITHMS) | {
    ("alltoall", "pairwise"),
    ("alltoall", "direct"),
    ("alltoall", "bruck"),
    ("alltoall", "scattered"),
} == {(op, a) for op, algs in ALGORITHMS.items() for a in algs}

# A ring as the generators use it: order, position of each group index, blocks by
# position and their element counts.
_Ring = tuple[list[int], dict[int, int], list[tuple[int, int]], list[int]]


def _ring_send(ring: _Ring, shift: int, q: int, s: int) -> Transfer:
    """What position ``q`` sends in step ``s`` of a run (possibly zero elements)."""
    order, _, blocks, counts = ring
    m = len(order)
    b = (q - s - shift) % m
    first, num = blocks[b]
    return Transfer(order[q], order[(q + 1) % m], counts[b], first, num, shift == 1)


def _streamed(ring: _Ring, shift: int, nsteps: int) -> _Ring:
    """``ring`` with one step standing for a run of ``nsteps``: the block position q
    sends in the step (``(q - shift) mod m``) counts the elements of the ``nsteps`` blocks
    it would send one after another (``q - shift``, ``q - shift - 1``, ...); blocks
    carry no chunk ranges (a stream is timing, not data)."""
    order, pos, _, counts = ring
    m = len(order)
    prefix = [0]
    for c in counts + counts:  # (twice round: a run's blocks wrap past block 0)
        prefix.append(prefix[-1] + c)
    summed = [0] * m
    for q in range(m):
        last = (q - shift) % m + m  # the run's first block, in the second round
        summed[(q - shift) % m] = prefix[last + 1] - prefix[last + 1 - nsteps]
    return order, pos, [(0, 0)] * m, summed


class _RingRanks:
    """A ring algorithm's schedule, generated per rank (see the section comment).

    Every step of a run moves every block once, empty blocks as zero-element
    messages, so no step is empty and step indices need no renumbering (a
    collective of zero elements has no schedule at all: ``build_schedule``).
    """

    __slots__ = ("by_rank", "p", "runs")

    def __init__(
        self, p: int, chunks: Sequence[int], alg: _RingAlgorithm, streamed: bool = False
    ) -> None:
        prefix = [0]
        for c in chunks:
            prefix.append(prefix[-1] + c)
        rings: list[_Ring] = []
        for order, blocks in alg[1]:
            counts = [prefix[f + n] - prefix[f] for f, n in blocks]
            rings.append((order, {r: q for q, r in enumerate(order)}, blocks, counts))
        self.p = p
        self.runs = [(nsteps, [(rings[i], shift) for i, shift in used]) for nsteps, used in alg[2]]
        if streamed:
            self.runs = [
                (1, [(_streamed(r, shift, n), shift) for r, shift in used]) for n, used in self.runs
            ]
        # Per run, per rank: the (ring, shift) pairs of the rings the rank is on.
        self.by_rank: list[list[list[tuple[_Ring, int]]]] = []
        for _, used in self.runs:
            mine: list[list[tuple[_Ring, int]]] = [[] for _ in range(p)]
            for ring, shift in used:
                for r in ring[0]:
                    mine[r].append((ring, shift))
            self.by_rank.append(mine)

    def build_steps(self) -> tuple[tuple[Transfer, ...], ...]:
        steps = []
        for nsteps, used in self.runs:
            for s in range(nsteps):
                step = []
                for ring, shift in used:
                    for q in range(len(ring[0])):
                        step.append(_ring_send(ring, shift, q, s))
                if step:
                    steps.append(tuple(step))
        return tuple(steps)

    def rank_steps(self, r: int) -> tuple[tuple[int, RankStep], ...]:
        """``(step index, (sends, recvs))`` of rank r, as ``Schedule._by_rank`` has them."""
        out: list[tuple[int, RankStep]] = []
        step0 = 0
        for (nsteps, _), mine in zip(self.runs, self.by_rank, strict=True):
            for s in range(nsteps):
                sends: list[Transfer] = []
                recvs: list[Transfer] = []
                for ring, shift in mine[r]:
                    q = ring[1][r]
                    sends.append(_ring_send(ring, shift, q, s))
                    recvs.append(_ring_send(ring, shift, q - 1, s))  # from the previous one
                if sends or recvs:
                    out.append((step0 + s, (tuple(sends), tuple(recvs))))
            step0 += nsteps
        return tuple(out)

    def table(self) -> StepTable | None:
        """Every rank's steps as one :class:`StepTable` where each run is one ring through
        all the ranks (then every step is a receive from the previous rank and a send to
        the next) and the table has at most ``STEP_TABLE_MAX_ENTRIES`` entries; else
        None (several rings a step, or a ring so long that per-rank plans, made and
        dropped as they are used, are the smaller form)."""
        p = self.p
        length = sum(nsteps for nsteps, _ in self.runs)
        if length * p > STEP_TABLE_MAX_ENTRIES:
            return None
        if any(len(used) != 1 or len(used[0][0][0]) != p for _, used in self.runs):
            return None
        import numpy as np

        src = np.empty((length, p), dtype=np.int32)
        dst = np.empty((length, p), dtype=np.int32)
        nbytes = np.empty((length, p), dtype=np.int64)
        reduce = np.empty((length, p), dtype=bool)
        row = 0
        for nsteps, ((order, _, _, counts), shift) in ((n, u[0]) for n, u in self.runs):
            ranks = np.asarray(order)
            q = np.empty(p, dtype=np.int64)
            q[ranks] = np.arange(p)  # each rank's position on the ring
            rows = slice(row, row + nsteps)
            src[rows] = ranks[(q - 1) % p]
            dst[rows] = ranks[(q + 1) % p]
            # Position q sends block (q - shift - s) mod p in step s (see _ring_send).
            blocks = (q[None, :] - shift - np.arange(nsteps)[:, None]) % p
            nbytes[rows] = ELEM_BYTES * np.asarray(counts, dtype=np.int64)[blocks]
            reduce[rows] = shift == 1
            row += nsteps
        nsteps_each = np.full(p, length, dtype=np.int64)
        return StepTable(src, dst, nbytes, reduce, nsteps_each, nsteps_each.copy())

    def rank_plan(self, r: int) -> tuple[PlanStep, ...]:
        """``Schedule.rank_plan(r)``, generated directly (equal steps share one tuple).

        The blocks are those of :func:`_ring_send`, walked without making transfers.
        """
        out: list[PlanStep] = []
        append = out.append
        for (nsteps, _), mine in zip(self.runs, self.by_rank, strict=True):
            rings = mine[r]
            if len(rings) == 1:
                # One ring: the same peers every step, and few distinct sizes.
                (order, pos, _, counts), shift = rings[0]
                m = len(order)
                q = pos[r]
                src = (order[(q - 1) % m],)
                dst = order[(q + 1) % m]
                reduce = shift == 1
                memo: dict[int, PlanStep] = {}
                b = (q - shift) % m  # the block sent in the first step; then b - 1, ...
                for _ in range(nsteps):
                    sent = counts[b]
                    b -= 1  # negative indices wrap around, as (b - 1) % m would
                    st = memo.get(sent)
                    if st is None:
                        st = memo[sent] = (src, ((dst, ELEM_BYTES * sent, reduce),))
                    append(st)
                continue
            for s in range(nsteps):
                srcs = []
                sends = []
                for (order, pos, _, counts), shift in rings:
                    m = len(order)
                    q = pos[r]
                    b = (q - s - shift) % m
                    sends.append((order[(q + 1) % m], ELEM_BYTES * counts[b], shift == 1))
                    srcs.append(order[(q - 1) % m])
                append((tuple(srcs), tuple(sends)))
        return tuple(out)


class _AlltoallRanks:
    """An all-to-all's schedule, generated per rank.

    Rank i sends rank j the block (chunk) ``i * p + j``: "pairwise" one peer per
    step, as MPICH: with p a power of two the peer of step d (1 .. p-1) is ``i ^ d``
    (both send each other at once), otherwise rank i sends to ``i + d`` and receives
    from ``i - d``; "direct" all in one step, by distance; "scattered" (MPICH's
    MPIR_Alltoall_intra_scattered, for medium blocks) by distance too, in batches of
    :data:`ALLTOALL_THROTTLE` distances (0 .. 31, the rank's own block, then 32 .. 63,
    ...), each batch waited for before the next. The whole steps are the ranks' sends
    put together in rank order.

    "bruck" (MPICH's MPIR_Alltoall_intra_brucks, for short blocks): after a local
    rotation, position k of rank i holds the block for rank i + k; in step t every rank
    sends rank i + 2^t the blocks at the positions with bit t set, packed in one message,
    and receives as many from i - 2^t into the same positions, so a block crosses
    ceil(lg p) messages at most. Those positions are no one range of chunks: its
    transfers carry their sizes only (``num_chunks`` 0; :func:`bruck_blocks` counts
    the blocks).
    """

    __slots__ = ("batches", "bruck", "count", "direct", "p")

    def __init__(
        self, p: int, count: int, direct: bool, bruck: bool = False, throttle: int = 0
    ) -> None:
        self.p = p
        self.count = count
        self.direct = direct or throttle > 0
        self.bruck = bruck
        # "direct": one batch of every distance; "scattered": MPICH's batches of
        # ``throttle`` distances, the first counting the rank itself (0 .. throttle - 1).
        width = throttle or max(p, 1)
        self.batches = [
            range(max(1, b), min(p, b + width)) for b in range(0, p, width) if min(p, b + width) > 1
        ] or [range(1, 1)]

    def _bruck_step(self, r: int, t: int) -> tuple[Transfer, Transfer]:
        """Rank r's send and receive of Bruck's step t."""
        p, dist = self.p, 1 << t
        size = self.count * bruck_blocks(p, t)
        return (
            Transfer(r, (r + dist) % p, size, 0, 0, False),
            Transfer((r - dist) % p, r, size, 0, 0, False),
        )

    def _block(self, i: int, j: int) -> Transfer:
        return Transfer(i, j, self.count, i * self.p + j, 1, False)

    def _to(self, r: int, d: int) -> int:
        """Whom rank r sends to in pairwise step d (1 .. p-1)."""
        p = self.p
        return r ^ d if p & (p - 1) == 0 else (r + d) % p

    def _from(self, r: int, d: int) -> int:
        p = self.p
        return r ^ d if p & (p - 1) == 0 else (r - d) % p

    def _sends(self, r: int) -> list[tuple[Transfer, ...]]:
        """Rank r's sends, per step."""
        if self.bruck:
            return [(self._bruck_step(r, t)[0],) for t in range(_ceil_lg(self.p))]
        if self.direct:
            return [tuple(self._block(r, (r + d) % self.p) for d in ds) for ds in self.batches]
        return [(self._block(r, self._to(r, d)),) for d in range(1, self.p)]

    def build_steps(self) -> tuple[tuple[Transfer, ...], ...]:
        per_rank = [self._sends(r) for r in range(self.p)]
        return tuple(
            tuple(t for sends in per_rank for t in sends[s]) for s in range(len(per_rank[0]))
        )

    def rank_steps(self, r: int) -> tuple[tuple[int, RankStep], ...]:
        """``(step index, (sends, recvs))`` of rank r, as ``Schedule._by_rank`` has them."""
        p = self.p
        sends = self._sends(r)
        if self.bruck:
            recvs = [(self._bruck_step(r, t)[1],) for t in range(_ceil_lg(p))]
        elif self.direct:
            recvs = [
                tuple(self._block(i, r) for i in sorted((r - d) % p for d in ds))
                for ds in self.batches
            ]
        else:
            recvs = [(self._block(self._from(r, d), r),) for d in range(1, p)]
        return tuple(enumerate(zip(sends, recvs, strict=True)))

    def rank_plan(self, r: int) -> tuple[PlanStep, ...]:
        """``Schedule.rank_plan(r)``, generated directly."""
        p, size = self.p, ELEM_BYTES * self.count
        if self.bruck:
            return tuple(
                (
                    ((r - (1 << t)) % p,),
                    (((r + (1 << t)) % p, size * bruck_blocks(p, t), False),),
                )
                for t in range(_ceil_lg(p))
            )
        if self.direct:
            return tuple(
                (
                    tuple(sorted((r - d) % p for d in ds)),
                    tuple(((r + d) % p, size, False) for d in ds),
                )
                for ds in self.batches
            )
        return tuple(((self._from(r, d),), ((self._to(r, d), size, False),)) for d in range(1, p))


def bruck_blocks(p: int, t: int) -> int:
    """How many blocks a rank sends in step t of Bruck's all-to-all: the positions
    0 .. p - 1 with bit t set, counted without listing them (every full period of
    2^(t+1) positions has 2^t with the bit set, and the rest of p those beyond 2^t)."""
    return ((p >> (t + 1)) << t) + max(0, (p & ((2 << t) - 1)) - (1 << t))


class _RecursiveRanks:
    """Allreduce by recursive doubling or by Rabenseifner (recursive-halving reduce-scatter,
    then recursive-doubling allgather), generated per rank: the transfers that
    :func:`_allreduce_recursive_doubling` and :func:`_allreduce_rabenseifner` build,
    without building them all.

    Rank r's part follows from its own new rank alone (MPICH's fold, :func:`_fold`): in
    the halving, partners hold the same block range, so each sends the other half; in the
    allgather of Rabenseifner, the blocks a new rank holds after t steps are its final
    reduce-scatter block with the low t bits cleared (that block is the new rank's bits
    reversed), and its partner's differ in bit t.
    """

    __slots__ = (
        "_levels",
        "_served",
        "chunks",
        "count",
        "fold",
        "halving",
        "masks",
        "p",
        "peers",
        "prefix",
        "sizes",
    )

    def __init__(self, p: int, count: int, halving: bool) -> None:
        self.p = p
        self.count = count
        self.halving = halving
        # The plans of all p ranks are kept by executors: their peers (as 1-tuples, whose
        # int is also the one in a send) and sizes are made once and shared, which makes
        # a big group's plans a third smaller.
        self.peers: dict[int, tuple[int]] = {}
        self.sizes: dict[int, int] = {}
        # What every rank's walk needs, worked out once for the p ranks' walks.
        self.fold = _fold(p)
        self.masks = _masks(self.fold[0])
        self.chunks = _split(count, self.fold[0]) if halving else [count]
        prefix = [0]
        for c in self.chunks:
            prefix.append(prefix[-1] + c)
        self.prefix = prefix
        self._levels: tuple | None = None  # see _level_tables
        self._served = 0  # rank_flat calls since the tables were made: they go at p

    def _level_tables(self) -> tuple:
        """Every new rank's walk at once (rows: new ranks; columns: the levels, in the
        order of ``masks``): its partner's group index, and with halving the bytes it
        sends at that level in the reduce-scatter and in the allgather step of that
        level (else None for both). numpy arrays, made on the first ``rank_flat``: a big
        group's ranks then cost a row each, not a walk in Python each."""
        if self._levels is not None:
            return self._levels
        import numpy as np  # here: the proxies import this module, and need no numpy for it

        pof2, rem, _ = self.fold
        nr = np.arange(pof2, dtype=np.int64)
        partners = np.empty((pof2, len(self.masks)), dtype=np.int64)
        for level, mask in enumerate(self.masks):
            q = nr ^ mask
            partners[:, level] = np.where(q < rem, 2 * q + 1, q + rem)  # _fold's real()
        sent = got = None
        if self.halving:
            prefix = np.asarray(self.prefix, dtype=np.int64)
            sent = np.empty_like(partners)
            got = np.empty_like(partners)
            lo = np.zeros(pof2, dtype=np.int64)
            size = pof2
            for level, mask in enumerate(self.masks):  # as _walk's halving
                half = size // 2
                upper = (nr & mask) != 0
                first = np.where(upper, lo, lo + half)
                lo = np.where(upper, lo + half, lo)
                sent[:, level] = ELEM_BYTES * (prefix[first + half] - prefix[first])
                size = half
            size = 1
            for level in reversed(range(len(self.masks))):  # its allgather
                held = lo & ~(size - 1)
                got[:, level] = ELEM_BYTES * (prefix[held + size] - prefix[held])
                lo = np.minimum(held, (lo ^ size) & ~(size - 1))
                size *= 2
        self._levels = (partners, sent, got)
        self._served = 0
        return self._levels

    def build_steps(self) -> tuple[tuple[Transfer, ...], ...]:
        build = _allreduce_rabenseifner if self.halving else _allreduce_recursive_doubling
        return tuple(tuple(step) for step in build(self.p, self.count).steps if step)

    def _walk(self, r: int) -> list[tuple[int, tuple | None, tuple | None]]:
        """Rank r's steps: ``(step, send, recv)``, each ``(peer, first chunk, chunks,
        reduce)`` or None."""
        pof2, rem, real = self.fold
        whole = len(self.prefix) - 1  # chunks in the buffer
        out: list[tuple[int, tuple | None, tuple | None]] = []
        step = 0
        folded = r < 2 * rem
        if rem:
            if folded:
                if r % 2 == 0:
                    out.append((0, (r + 1, 0, whole, True), None))
                else:
                    out.append((0, None, (r - 1, 0, whole, True)))
            step = 1
        nr = -1 if folded and r % 2 == 0 else (r // 2 if folded else r - rem)
        if nr >= 0:
            up = self.masks
            if self.halving:
                lo, size = 0, pof2
                for mask in up:
                    half = size // 2
                    peer = real(nr ^ mask)
                    if nr & mask:
                        sent, got = lo, lo + half
                        lo += half
                    else:
                        sent, got = lo + half, lo
                    out.append((step, (peer, sent, half, True), (peer, got, half, True)))
                    size = half
                    step += 1
                size = 1
                for mask in reversed(up):
                    peer = real(nr ^ mask)
                    low = size - 1  # size = 1 << (steps of the allgather so far)
                    held, theirs = lo & ~low, (lo ^ size) & ~low
                    out.append((step, (peer, held, size, False), (peer, theirs, size, False)))
                    lo = held if held < theirs else theirs
                    size *= 2
                    step += 1
            else:
                for mask in up:
                    peer = real(nr ^ mask)
                    out.append((step, (peer, 0, 1, True), (peer, 0, 1, True)))
                    step += 1
        if folded:
            # The last step, after all of the new ranks' (an even rank took none).
            step = 1 + (pof2.bit_length() - 1) * (2 if self.halving else 1)
            if r % 2:
                out.append((step, (r - 1, 0, whole, False), None))
            else:
                out.append((step, None, (r + 1, 0, whole, False)))
        return out

    def rank_steps(self, r: int) -> tuple[tuple[int, RankStep], ...]:
        """``(step index, (sends, recvs))`` of rank r, as ``Schedule._by_rank`` has them."""
        prefix = self.prefix
        out = []
        for step, send, recv in self._walk(r):
            sends: tuple[Transfer, ...] = ()
            recvs: tuple[Transfer, ...] = ()
            if send is not None:
                peer, first, num, reduce = send
                n = prefix[first + num] - prefix[first]
                sends = (Transfer(r, peer, n, first, num, reduce),)
            if recv is not None:
                peer, first, num, reduce = recv
                n = prefix[first + num] - prefix[first]
                recvs = (Transfer(peer, r, n, first, num, reduce),)
            out.append((step, (sends, recvs)))
        return tuple(out)

    def rank_plan(self, r: int) -> tuple[PlanStep, ...]:
        """``Schedule.rank_plan(r)``, generated directly (the simulator takes
        :meth:`rank_flat` instead)."""
        prefix, peers, sizes = self.prefix, self.peers, self.sizes
        out: list[PlanStep] = []
        for _, send, recv in self._walk(r):
            srcs: tuple[int, ...] = ()
            if recv is not None:
                srcs = peers.get(recv[0]) or peers.setdefault(recv[0], (recv[0],))
            if send is None:
                out.append((srcs, ()))
            else:
                peer, first, num, reduce = send
                one = peers.get(peer) or peers.setdefault(peer, (peer,))
                size = ELEM_BYTES * (prefix[first + num] - prefix[first])
                size = sizes.setdefault(size, size)
                out.append((srcs, ((one[0], size, reduce),)))
        return tuple(out)

    def rank_flat(self, r: int) -> FlatPlan:
        """``Schedule.rank_flat(r)``: :meth:`_walk`'s steps and totals, made directly.
        A reduce-scatter step and the allgather step of its level send the same size to
        the same peer: one tuple for both."""
        rem = self.fold[1]
        prefix, peers, sizes = self.prefix, self.peers, self.sizes

        def peer_of(q: int) -> int:  # the group's one int object for rank q
            return (peers.get(q) or peers.setdefault(q, (q,)))[0]

        def size_of(first: int, num: int) -> int:  # bytes of chunks first.., one object
            n = ELEM_BYTES * (prefix[first + num] - prefix[first])
            return sizes.setdefault(n, n)

        steps: list[tuple[int, ...]] = []
        reduce: list[int] = []
        copy: list[int] = []
        folded = r < 2 * rem
        if folded:
            q = peer_of(r + 1 if r % 2 == 0 else r - 1)
            if r % 2 == 0:  # hands its data to the next rank, and sits out
                n = size_of(0, len(prefix) - 1)
                steps.append((0, q, n))
                reduce += (q, n)
            else:
                steps.append((1, q))
        nr = -1 if folded and r % 2 == 0 else (r // 2 if folded else r - rem)
        if nr >= 0:
            peer_rows, sent_rows, got_rows = self._level_tables()
            pget, pset, sset = peers.get, peers.setdefault, sizes.setdefault
            # The group's one int object per rank and per size (see __init__).
            row = [(pget(q) or pset(q, (q,)))[0] for q in peer_rows[nr].tolist()]
            if self.halving:
                made = [
                    (1, q, q, sset(n, n)) for q, n in zip(row, sent_rows[nr].tolist(), strict=True)
                ]
                # The allgather walks the levels back down; a step sending what the
                # reduce-scatter step of its level sent is that step's tuple.
                gathered = [
                    t if n == t[3] else (1, t[1], t[1], sset(n, n))
                    for t, n in zip(reversed(made), reversed(got_rows[nr].tolist()), strict=True)
                ]
            else:
                n = size_of(0, 1)
                made = [(1, q, q, n) for q in row]
                gathered = []
            steps += made
            steps += gathered
            for t in made:
                reduce += (t[1], t[3])
            for t in gathered:
                copy += (t[1], t[3])
        self._served += 1
        if self._served >= self.p:
            self._levels = None  # every rank has its plan (a rank asking again: made again)
        if folded:
            q = peer_of(r - 1 if r % 2 else r + 1)
            if r % 2:  # hands the result back
                n = size_of(0, len(prefix) - 1)
                steps.append((0, q, n))
                copy += (q, n)
            else:
                steps.append((1, q))
        return tuple(steps), tuple(reduce), tuple(copy), (len(reduce) + len(copy)) // 2

    def table(self) -> StepTable:
        """Every rank's :meth:`rank_flat` at once (:class:`StepTable`), made a level at a
        time from :meth:`_level_tables` (not kept: the executor that asks keeps it for as
        long as it runs the schedule)."""
        import numpy as np

        pof2, rem, _ = self.fold
        p = self.p
        partners, sent, got = self._level_tables()
        self._levels = None  # the table holds what rank_flat would take from them
        levels = len(self.masks)
        per_new = 2 * levels if self.halving else levels  # steps of a new rank
        length = per_new + (2 if rem else 0)
        src = np.full((length, p), -1, dtype=np.int32)
        dst = np.full((length, p), -1, dtype=np.int32)
        nbytes = np.zeros((length, p), dtype=np.int64)
        reduce = np.zeros((length, p), dtype=bool)
        whole = ELEM_BYTES * self.prefix[-1]
        if self.halving:
            # The halving's levels in mask order, then the allgather's back down.
            walk = [(k, sent[:, k], True) for k in range(levels)]
            walk += [(k, got[:, k], False) for k in reversed(range(levels))]
        else:
            walk = [(k, np.full(pof2, whole), True) for k in range(levels)]
        # New rank nr is rank 2 nr + 1 below rem (a folded odd rank, whose levels follow
        # its fold step), else rank nr + rem from its first step: two strided blocks of
        # the table's columns (slices, not index arrays: numpy copies them as blocks).
        blocks = ((slice(2 * rem, p), slice(rem, pof2), 0),)
        if rem:
            blocks += ((slice(1, 2 * rem, 2), slice(0, rem), 1),)
        for cols, new, first in blocks:
            for step, (k, size, red) in enumerate(walk):
                row = first + step
                src[row, cols] = partners[new, k]
                dst[row, cols] = partners[new, k]
                nbytes[row, cols] = size[new]
                reduce[row, cols] = red
        nsteps = np.full(p, per_new, dtype=np.int64)
        if rem:
            even = np.arange(0, 2 * rem, 2)
            odd = even + 1
            # An even folded rank hands its data to the next and sits out until the
            # result comes back; the odd one reduces it in, and hands the result back last.
            dst[0, even] = odd
            nbytes[0, even] = whole
            reduce[0, even] = True
            src[1, even] = odd
            src[0, odd] = even
            dst[length - 1, odd] = even
            nbytes[length - 1, odd] = whole
            nsteps[even] = 2
            nsteps[odd] = length
        messages = (dst >= 0).sum(axis=0, dtype=np.int64)
        return StepTable(src, dst, nbytes, reduce, nsteps, messages)


# ---------------------------------------------------------------- validation


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_op(op: str) -> None:
    if op not in ALGORITHMS:
        raise ValueError(f"op must be one of {', '.join(ALGORITHMS)} (got {op!r})")


def _check_size(group_size: int, count_elems: int) -> None:
    if not _is_int(group_size) or group_size < 1:
        raise ValueError(f"group_size must be an integer >= 1 (got {group_size!r})")
    if not _is_int(count_elems) or count_elems < 0:
        raise ValueError(f"count_elems must be an integer >= 0 (got {count_elems!r})")


def _check_rings(
    rings: Sequence[Sequence[int]] | None, p: int, name: str = "rings"
) -> list[list[int]]:
    if rings is None or len(rings) == 0:
        raise ValueError(
            "rings is required by algorithm 'multiring': a non-empty list of rank orders, "
            f"each a permutation of range({p})"
        )
    out = []
    for j, ring in enumerate(rings):
        order = list(ring)
        if sorted(order) != list(range(p)) or not all(_is_int(r) for r in order):
            where = name if name != "rings" else f"rings[{j}]"
            raise ValueError(f"{where} must be a permutation of range({p}) (got {order!r})")
        out.append(order)
    return out


def build_schedule(
    op: str,
    algorithm: str,
    group_size: int,
    count_elems: int,
    *,
    root: int = 0,
    local_size: int | None = None,
    rings: Sequence[Sequence[int]] | None = None,
    channels: int | None = None,
    pipeline_chunks: int | None = None,
    node_order: Sequence[int] | None = None,
    node_sizes: Sequence[int] | None = None,
    streamed: bool = False,
) -> Schedule:
    """Expand collective ``op`` with ``algorithm`` over ``group_size`` ranks.

    ``count_elems`` follows MPI argument semantics (see the module docstring).
    ``root`` is used by bcast and reduce; ``local_size`` (ranks per group,
    dividing ``group_size``) by allreduce "hierarchical" and, as GPUs per node
    (default: all ranks on one node), by "nccl_ring" and "nccl_tree"; ``rings``
    (rank orders, each a permutation of ``range(group_size)``) only by
    "multiring"; ``channels`` by the NCCL algorithms (1 to
    :data:`MAX_NCCL_CHANNELS`; default: :func:`default_channels`, ``local_size``
    rings or tree pairs, one on one node) and ``pipeline_chunks`` (chunks per tree,
    1 to :data:`MAX_PIPELINE_CHUNKS`; default: a tree's share in
    :data:`NCCL_TREE_CHUNK_BYTES` chunks, 1 to :data:`DEFAULT_NCCL_TREE_CHUNKS`) by
    "nccl_tree"; ``node_order`` (the members node by node, a permutation of
    ``range(group_size)``: node i holds members ``node_order[i * local_size : (i + 1) *
    local_size]``; default: the group's order) by the NCCL algorithms, which lay their
    rings and trees out over it as NCCL orders a group's GPUs by node; ``node_sizes``
    (the GPUs of each node in that order, positive integers summing to ``group_size``)
    by the NCCL algorithms in place of ``local_size`` where the nodes hold different
    numbers of the group's GPUs. ``streamed`` (the NCCL algorithms) makes each run of a
    ring's steps one message per hop carrying the run's bytes (see :func:`stream_steps`),
    and a tree's pipeline one message per edge and way (see :func:`stream_tree`).
    Raises ValueError on invalid input.
    """
    _check_op(op)
    if algorithm not in ALGORITHMS[op]:
        raise ValueError(
            f"algorithm for op {op!r} must be one of {', '.join(ALGORITHMS[op])} "
            f"(got {algorithm!r})"
        )
    _check_size(group_size, count_elems)
    p = group_size
    if not _is_int(root) or not 0 <= root < p:
        raise ValueError(f"root must be an integer in 0..{p - 1} (got {root!r})")
    if (op, algorithm) in _POW2_ONLY and not _is_pow2(p):
        raise ValueError(
            f"group_size must be a power of two for {op} {algorithm!r} (got {p}); "
            f"use one of {', '.join(a for a in ALGORITHMS[op] if (op, a) not in _POW2_ONLY)}"
        )
    nccl = algorithm in NCCL_ALGORITHMS
    if algorithm == "hierarchical" or (nccl and local_size is not None):
        if not _is_int(local_size) or local_size < 1 or p % local_size:
            raise ValueError(
                f"local_size must be an integer >= 1 dividing group_size={p} for "
                f"algorithm {algorithm!r} (got {local_size!r})"
            )
    elif local_size is not None and not nccl:
        raise ValueError(
            f"local_size is only used by algorithms 'hierarchical', 'nccl_ring' and "
            f"'nccl_tree' (got {local_size!r} with {algorithm!r}); pass None"
        )
    for name, value, users, most in (
        ("channels", channels, SCHEDULE_PARAM_READERS["channels"], MAX_NCCL_CHANNELS),
        (
            "pipeline_chunks",
            pipeline_chunks,
            SCHEDULE_PARAM_READERS["pipeline_chunks"],
            MAX_PIPELINE_CHUNKS,
        ),
    ):
        if value is None:
            continue
        if algorithm not in users:
            raise ValueError(
                f"{name} is only used by algorithm(s) {', '.join(users)} (got {value!r} "
                f"with {algorithm!r}); pass None"
            )
        if not _is_int(value) or not 1 <= value <= most:
            raise ValueError(f"{name} must be an integer from 1 to {most} (got {value!r})")
    for name, value in (("node_order", node_order), ("node_sizes", node_sizes)):
        if value is not None and not nccl:
            raise ValueError(
                f"{name} is only used by algorithm(s) {', '.join(NCCL_ALGORITHMS)} "
                f"(got it with {algorithm!r}); pass None"
            )
    if node_order is not None:
        node_order = _check_rings([node_order], p, "node_order")[0]
    if node_sizes is not None:
        node_sizes = list(node_sizes)
        if local_size is not None:
            raise ValueError("give local_size or node_sizes, not both")
        if not node_sizes or not all(_is_int(g) and g >= 1 for g in node_sizes):
            raise ValueError(f"node_sizes must be integers >= 1 (got {node_sizes!r})")
        if sum(node_sizes) != p:
            raise ValueError(
                f"node_sizes must add up to group_size={p} (got {node_sizes!r}, "
                f"{sum(node_sizes)} in all)"
            )
    if streamed and algorithm not in SCHEDULE_PARAM_READERS["streamed"]:
        raise ValueError(
            f"streamed is only used by algorithm(s) "
            f"{', '.join(SCHEDULE_PARAM_READERS['streamed'])} (got it with {algorithm!r})"
        )
    if algorithm == "multiring":
        ring_list = _check_rings(rings, p)
    elif rings is not None:
        raise ValueError(f"rings is only used by algorithm 'multiring' (got it with {algorithm!r})")
    else:
        ring_list = []

    lazy: _RingRanks | _AlltoallRanks | _RecursiveRanks
    define = _RING_ALGORITHMS.get((op, algorithm))
    if op == "allreduce" and algorithm in ("recursive_doubling", "rabenseifner"):
        lazy = _RecursiveRanks(p, count_elems, halving=algorithm == "rabenseifner")
        chunks = lazy.chunks
    elif define is not None:
        ring_alg = define(
            p,
            count_elems,
            local_size=local_size,
            rings=ring_list,
            channels=channels,
            node_order=node_order,
            node_sizes=node_sizes,
        )
        chunks = ring_alg[0]
        lazy = _RingRanks(p, chunks, ring_alg, streamed=streamed)
    elif op == "alltoall":
        # (Bruck's transfers carry sizes, no chunk ranges: no p^2 layout for them, 134 MB
        # at 4,096 ranks)
        chunks = [] if algorithm == "bruck" else [count_elems] * (p * p)
        lazy = _AlltoallRanks(
            p,
            count_elems,
            direct=algorithm == "direct",
            bruck=algorithm == "bruck",
            throttle=ALLTOALL_THROTTLE if algorithm == "scattered" else 0,
        )
    else:
        b = _BUILDERS[(op, algorithm)](
            p,
            count_elems,
            root=root,
            local_size=local_size,
            rings=ring_list,
            channels=channels,
            pipeline_chunks=pipeline_chunks,
            node_order=node_order,
            node_sizes=node_sizes,
            **({"streamed": True} if streamed else {}),
        )
        steps = tuple(tuple(step) for step in b.steps if step) if p > 1 else ()
        sched = Schedule(op, algorithm, p, steps, count_elems, root, b.chunks)
        if streamed and steps:
            sched.__dict__["_stream_tree"] = b.stream_tree
        return sched
    if p == 1 or count_elems == 0:  # every transfer would be empty
        return Schedule(op, algorithm, p, (), count_elems, root, tuple(chunks))
    # Lazy: ``steps`` is left unset, for Schedule.__getattr__ to build on first use.
    s = object.__new__(Schedule)
    fields = {
        "op": op,
        "algorithm": algorithm,
        "group_size": p,
        "count_elems": count_elems,
        "root": root,
        "chunk_elems": tuple(chunks),
    }
    s.__dict__.update(fields)
    s.__dict__["_lazy"] = lazy
    if streamed:
        s.__dict__["_stream_steps"] = tuple(n for n, _ in ring_alg[2])
    return s


def stream_tree(sched: Schedule) -> tuple[list[list[int]], int] | None:
    """The trees (each member's parent, -1 for the root) and the chunks per tree of a
    streamed "nccl_tree" schedule (None: not one).

    A streamed tree ("nccl_tree" with ``streamed``) is one step in which every tree edge
    carries, each way at once, all the chunks its pipeline would send over it one step at
    a time (the reduction up to the parent, the result down to each child): the same
    bytes between the same pairs, 2 (p - 1) messages a tree, not k times as many. A
    simulator adds after it what the pipeline's k + 2 H - 1 steps would take beyond the
    stream (H the trees' height), the steps' paces summed as they fill, run full and
    drain; where the trees' hops share links with other traffic the stream is an
    approximation, as a streamed ring's is (:func:`stream_steps`)."""
    return sched.__dict__.get("_stream_tree")


def stream_steps(sched: Schedule) -> tuple[int, ...] | None:
    """The ring steps each step of a streamed schedule stands for (None: not streamed).

    A streamed ring ("nccl_ring" with ``streamed``) sends each run of a ring's steps as
    one message per hop carrying all the blocks the run's steps would (the same bytes
    between the same pairs), so a run of s steps over p GPUs and C channels is C p
    messages, not C p s. A simulator adds after it what the s steps would take beyond
    the stream (``simnet.ring_stream``: each member's steps, which settle into the pace
    of the ring's slowest hop, less the stream's own time: ``(s - 1) (alpha + latency)``
    on a ring of like hops), which makes it the step-by-step ring's time where the hops
    are uncontended. Where ring hops share
    links the stream pays its steps' latencies after its transfers, which steps in
    lockstep partly hide behind other hops' transfers: more time, not less."""
    return sched.__dict__.get("_stream_steps")


def _always(p: int, count_elems: int, nbytes: int) -> bool:
    return True


MpichRule = tuple[str, str, Callable[[int, int, int], bool]]
"""``(op, algorithm, condition)``; the condition takes ``(p, count_elems, nbytes)``
with ``nbytes = ELEM_BYTES * count_elems`` (the MPI count in bytes)."""

MPICH_RULES: tuple[MpichRule, ...] = (
    # allreduce: n = the vector; "count < pof2" is Rabenseifner's lower limit.
    (
        "allreduce",
        "recursive_doubling",
        lambda p, c, n: n <= ALLREDUCE_SHORT_MSG_BYTES or c < 1 << (p.bit_length() - 1),
    ),
    ("allreduce", "rabenseifner", _always),
    # allgather: thresholds on the total gathered, p * n.
    (
        "allgather",
        "recursive_doubling",
        lambda p, c, n: p * n < ALLGATHER_LONG_MSG_BYTES and _is_pow2(p),
    ),
    ("allgather", "bruck", lambda p, c, n: p * n < ALLGATHER_SHORT_MSG_BYTES),
    ("allgather", "ring", _always),
    # reduce_scatter (commutative): threshold on the whole vector, p * n.
    (
        "reduce_scatter",
        "recursive_halving",
        lambda p, c, n: p * n < REDSCAT_LONG_MSG_BYTES and _is_pow2(p),
    ),
    ("reduce_scatter", "pairwise", _always),
    # alltoall: n = bytes per destination.
    (
        "alltoall",
        "bruck",
        lambda p, c, n: n <= ALLTOALL_SHORT_MSG_BYTES and p >= ALLTOALL_MIN_PROCS,
    ),
    ("alltoall", "scattered", lambda p, c, n: n <= ALLTOALL_MEDIUM_MSG_BYTES),
    ("alltoall", "pairwise", _always),
    # bcast: MPICH's tuning file (maint/tuning/coll/mpir/generic.json) takes the sizes
    # inclusively ("avg_msg_size<=12288"), where collective-costs.md writes "<".
    ("bcast", "binomial", lambda p, c, n: n <= BCAST_SHORT_MSG_BYTES or p < BCAST_MIN_PROCS),
    (
        "bcast",
        "scatter_recursive_doubling_allgather",
        lambda p, c, n: n <= BCAST_LONG_MSG_BYTES and _is_pow2(p),
    ),
    ("bcast", "scatter_ring_allgather", _always),
    # reduce (a built-in, commutative operation): MPICH's reduce-scatter + gather above
    # its short-message size, and only when every rank of pof2 gets an element.
    (
        "reduce",
        "binomial",
        lambda p, c, n: n <= REDUCE_SHORT_MSG_BYTES or c < 1 << (p.bit_length() - 1),
    ),
    ("reduce", "rabenseifner", _always),
    ("barrier", "dissemination", _always),
)
"""MPICH's historical default choice, the one table of it: for an op, the first
row whose condition holds names the algorithm (MPICH's names, some of them not
implemented here: see :data:`NEAREST_IMPLEMENTED`). From collective-costs.md, with
two decisions where that document leaves a gap:

- reduce_scatter: the document picks recursive halving below 524,288 B for any
  p; MPICH's recursive halving folds a non-power-of-two group first, which
  neither this project's schedules nor the document's cost table describe
  (their recursive halving is for powers of two). Non-power-of-two groups
  therefore get pairwise exchange, whose cost row is the ring's.
- reduce and barrier are not in the document's list: reduce follows MPICH's
  MPIR_Reduce defaults (binomial up to 2,048 B, MPIR_CVAR_REDUCE_SHORT_MSG_SIZE, and
  below one element per rank of the power of two; reduce-scatter + gather, the
  document's "reduce, Rabenseifner" row, above), barrier is dissemination.
"""

NEAREST_IMPLEMENTED: dict[tuple[str, str], str] = {
    # the same cost row in collective-costs.md ("pairwise exchange / ring")
    ("reduce_scatter", "pairwise"): "ring",
}
"""(op, MPICH's algorithm) -> the implemented algorithm that stands in for it."""

RING_BCAST_MAX_RANKS = 1024
"""The scatter + ring allgather bcast builds its p (p - 1) transfers at once: above
this many ranks the default policy runs the binomial bcast instead (and says so)."""

_STAND_IN_EFFECTS: dict[tuple[str, str], str | None] = {
    # the same steps and bytes per rank, other partners: not worth a line per run
    ("reduce_scatter", "pairwise"): None,
    ("bcast", "scatter_ring_allgather"): f"above {RING_BCAST_MAX_RANKS:,} ranks: the whole "
    "vector down a binomial tree, ceil(lg p) times on the root's path, where the scatter "
    "and ring allgather move 2 (p - 1) / p of it between ring neighbours",
}


def stand_in_note(op: str, mpich: str, used: str) -> str | None:
    """A line saying that ``used`` ran where MPICH's default is ``mpich`` (not
    implemented, or not run at this size), and what that changes (times and traffic);
    None where it changes neither the steps nor the bytes."""
    effect = _STAND_IN_EFFECTS.get((op, mpich), "other steps and pairs")
    if effect is None:
        return None
    return f"{op}: MPICH's default here is {mpich!r}; {used!r} stands in ({effect})"


def mpich_algorithm(op: str, group_size: int, count_elems: int) -> str:
    """The algorithm MPICH's historical defaults choose (:data:`MPICH_RULES`).

    ``count_elems`` has MPI count semantics (float32 elements; thresholds are
    in bytes). The name may be one of MPICH's that is not implemented here
    (reduce_scatter "pairwise"); :func:`default_algorithm` gives the one that runs.
    """
    _check_op(op)
    _check_size(group_size, count_elems)
    nbytes = ELEM_BYTES * count_elems
    for rule_op, algorithm, holds in MPICH_RULES:
        if rule_op == op and holds(group_size, count_elems, nbytes):
            return algorithm
    raise AssertionError(f"MPICH_RULES has no unconditional row for {op!r}")


def default_algorithm(op: str, group_size: int, count_elems: int) -> str:
    """MPICH's default choice (:func:`mpich_algorithm`) among the implemented algorithms.

    Where MPICH would pick an algorithm not implemented here the nearest
    implemented one is returned (:func:`stand_in`): reduce_scatter's pairwise exchange
    is "ring" (same cost); the scatter + ring allgather bcast above
    :data:`RING_BCAST_MAX_RANKS` ranks is "binomial".
    """
    algorithm = mpich_algorithm(op, group_size, count_elems)
    return stand_in(op, algorithm, group_size)


def stand_in(op: str, mpich: str, group_size: int) -> str:
    """The implemented algorithm that runs for MPICH's choice ``mpich``: itself, or
    :data:`NEAREST_IMPLEMENTED`'s stand-in (the binomial bcast for the scatter + ring
    allgather above :data:`RING_BCAST_MAX_RANKS` ranks)."""
    if (op, mpich) == ("bcast", "scatter_ring_allgather") and group_size > RING_BCAST_MAX_RANKS:
        return "binomial"
    return NEAREST_IMPLEMENTED.get((op, mpich), mpich)


def alpha_beta_time_s(
    schedule: Schedule,
    alpha_s: float,
    beta_s_per_byte: float,
    handshake_s: float = 0.0,
    eager_threshold_bytes: int = -1,
) -> float:
    """Hockney time of ``schedule`` with no contention (seconds).

    Steps run in order; a transfer of step s starts when both its ends are
    ready (as of before step s) and takes ``alpha_s + size_bytes * beta``, plus
    ``handshake_s`` when it is larger than ``eager_threshold_bytes`` (a rendezvous
    message's request-to-send); a rank is ready after step s at the latest end of its
    transfers in it.
    """
    if alpha_s < 0 or beta_s_per_byte < 0 or handshake_s < 0:
        raise ValueError(
            f"alpha_s, beta_s_per_byte and handshake_s must be >= 0 (got {alpha_s}, "
            f"{beta_s_per_byte}, {handshake_s})"
        )
    ready = [0.0] * schedule.group_size
    for step in schedule.steps:
        after: dict[int, float] = {}
        for t in step:
            end = max(ready[t.src], ready[t.dst]) + alpha_s + t.size_bytes * beta_s_per_byte
            if t.size_bytes > eager_threshold_bytes:
                end += handshake_s
            for r in (t.src, t.dst):
                if end > after.get(r, -1.0):
                    after[r] = end
        for r, end in after.items():
            ready[r] = end
    return max(ready)


def schedule_keywords(algorithm: str, params: Mapping[str, object] | None) -> dict[str, object]:
    """:func:`build_schedule`'s keywords for ``algorithm`` from a workload's collective
    parameters: ``params`` may hold "rings" (used by multiring), "local_size" (used by
    hierarchical, and by the NCCL algorithms unless "nccl_local_size" is given: GPUs per
    node for a group it divides, None otherwise), "channels" (NCCL) and
    "pipeline_chunks" (nccl_tree), "streamed" (NCCL), "node_order" (NCCL: the
    members node by node),
    "nccl_node_sizes" (NCCL: the GPUs of each node where they differ); each is passed
    only to the algorithms that take it."""
    params = params or {}
    kw: dict[str, object] = {}
    if algorithm == "multiring":
        kw["rings"] = params.get("rings")
    if algorithm == "hierarchical":
        kw["local_size"] = params.get("local_size")
    if algorithm in NCCL_ALGORITHMS:
        kw["local_size"] = params.get("nccl_local_size", params.get("local_size"))
        kw["channels"] = params.get("channels")
        kw["node_order"] = params.get("node_order")
        kw["node_sizes"] = params.get("nccl_node_sizes")
    if algorithm == "nccl_tree":
        kw["pipeline_chunks"] = params.get("pipeline_chunks")
    if algorithm in NCCL_ALGORITHMS:
        kw["streamed"] = bool(params.get("streamed"))
    return kw


def schedule_for(
    op: str,
    algorithm: str,
    group_size: int,
    count_elems: int,
    *,
    root: int = 0,
    params: Mapping[str, object] | None = None,
) -> Schedule:
    """``build_schedule`` with a workload's collective parameters (``params``, as
    :func:`schedule_keywords` passes them)."""
    kw: dict[str, object] = {"root": root, **schedule_keywords(algorithm, params)}
    return build_schedule(op, algorithm, group_size, count_elems, **kw)  # type: ignore[arg-type]
