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
part directly, in ``O(steps)``, identical to what the built steps give.

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
one extra element (``numpy.array_split``). Zero-element transfers are
omitted, except the barrier's.

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

from .units import ELEM_BYTES

ALGORITHMS: dict[str, tuple[str, ...]] = {
    "allreduce": ("ring", "recursive_doubling", "rabenseifner", "hierarchical", "multiring"),
    "allgather": ("ring", "recursive_doubling", "bruck", "multiring"),
    "reduce_scatter": ("ring", "recursive_halving", "multiring"),
    "alltoall": ("pairwise", "direct"),
    "bcast": ("binomial",),
    "reduce": ("binomial",),
    "barrier": ("dissemination",),
}

# MPICH's historical thresholds (bytes, or processes for _PROCS), see
# shared/reference/collective-costs.md; used by MPICH_RULES.
BCAST_SHORT_MSG_BYTES = 12_288
BCAST_LONG_MSG_BYTES = 524_288
BCAST_MIN_PROCS = 8
ALLGATHER_LONG_MSG_BYTES = 524_288
ALLGATHER_SHORT_MSG_BYTES = 81_920
ALLREDUCE_SHORT_MSG_BYTES = 2_048
REDSCAT_LONG_MSG_BYTES = 524_288
ALLTOALL_SHORT_MSG_BYTES = 256
ALLTOALL_MIN_PROCS = 8
ALLTOALL_MEDIUM_MSG_BYTES = 32_768


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
    def num_transfers(self) -> int:
        return sum(len(step) for step in self.steps)

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

    __slots__ = ("_n", "_prefix", "steps")

    def __init__(self, chunk_elems: Sequence[int]) -> None:
        prefix = [0]
        for c in chunk_elems:
            prefix.append(prefix[-1] + c)
        self._prefix = prefix
        self._n = len(chunk_elems)
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
        if count == 0 and not keep_empty:
            return
        steps = self.steps
        while len(steps) <= step:
            steps.append([])
        steps[step].append(Transfer(src, dst, count, first, num, reduce))


def _ring_reduce_scatter(
    b: _Builder, step0: int, order: Sequence[int], blocks: Sequence[tuple[int, int]]
) -> int:
    """Ring reduce-scatter along ``order``; position q ends with block q reduced.

    ``blocks[q]`` is the (first_chunk, num_chunks) owned by position q.
    Returns the next free step index.
    """
    m = len(order)
    for s in range(m - 1):
        for q in range(m):
            first, num = blocks[(q - s - 1) % m]
            b.add(step0 + s, order[q], order[(q + 1) % m], first, num, True)
    return step0 + max(m - 1, 0)


def _ring_allgather(
    b: _Builder, step0: int, order: Sequence[int], blocks: Sequence[tuple[int, int]]
) -> int:
    """Ring allgather along ``order``; position q starts with block q."""
    m = len(order)
    for s in range(m - 1):
        for q in range(m):
            first, num = blocks[(q - s) % m]
            b.add(step0 + s, order[q], order[(q + 1) % m], first, num, False)
    return step0 + max(m - 1, 0)


def _halving(b: _Builder, step0: int, pof2: int, real: Callable[[int], int], width: int) -> int:
    """Recursive-halving reduce-scatter over ``pof2`` blocks of ``width`` chunks.

    Distances pof2/2, ..., 1; the lower rank of a pair keeps the lower half,
    so new rank i ends with block i. Returns the next free step index.
    """
    lo = [0] * pof2
    size = pof2
    step = step0
    mask = pof2 >> 1
    while mask:
        half = size // 2
        for nr in range(pof2):
            if nr & mask:
                send_lo, lo[nr] = lo[nr], lo[nr] + half
            else:
                send_lo = lo[nr] + half
            b.add(step, real(nr), real(nr ^ mask), send_lo * width, half * width, True)
        size = half
        mask >>= 1
        step += 1
    return step


def _doubling_allgather(
    b: _Builder, step0: int, pof2: int, real: Callable[[int], int], width: int
) -> int:
    """Recursive-doubling allgather over ``pof2`` blocks; new rank i starts with block i."""
    step = step0
    mask = 1
    while mask < pof2:
        for nr in range(pof2):
            lo = nr & ~(mask - 1)
            b.add(step, real(nr), real(nr ^ mask), lo * width, mask * width, False)
        mask <<= 1
        step += 1
    return step


def _fold(p: int) -> tuple[int, int, Callable[[int], int]]:
    """MPICH non-power-of-two folding: (pof2, rem, new rank -> group index)."""
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2

    def real(nr: int) -> int:
        return 2 * nr if nr < rem else nr + rem

    return pof2, rem, real


Built = tuple[tuple[int, ...], _Builder]


# Chunk layouts of the algorithms that can be generated per rank (see _LazyRanks).
def _chunks_allreduce_ring(p: int, count: int, **_: object) -> list[int]:
    return _split(count, p)


def _chunks_allreduce_hierarchical(
    p: int, count: int, *, local_size: int, **_: object
) -> list[int]:
    return [c for shard in _split(count, local_size) for c in _split(shard, p // local_size)]


def _chunks_allreduce_multiring(
    p: int, count: int, *, rings: list[list[int]], **_: object
) -> list[int]:
    return [c for part in _split(count, len(rings)) for c in _split(part, p)]


def _chunks_blocks_multiring(
    p: int, count: int, *, rings: list[list[int]], **_: object
) -> list[int]:
    return _split(count, len(rings)) * p


def _chunks_per_rank(p: int, count: int, **_: object) -> list[int]:
    return [count] * p


def _chunks_alltoall(p: int, count: int, **_: object) -> list[int]:
    return [count] * (p * p)


def _allreduce_ring(p: int, count: int, **_: object) -> Built:
    chunks = _chunks_allreduce_ring(p, count)
    b = _Builder(chunks)
    blocks = [(q, 1) for q in range(p)]
    order = list(range(p))
    step = _ring_reduce_scatter(b, 0, order, blocks)
    _ring_allgather(b, step, order, blocks)
    return tuple(chunks), b


def _allreduce_recursive_doubling(p: int, count: int, **_: object) -> Built:
    chunks = [count]
    b = _Builder(chunks)
    pof2, rem, real = _fold(p)
    step = 0
    if rem:
        for r in range(rem):
            b.add(0, 2 * r + 1, 2 * r, 0, 1, True)
        step = 1
    mask = 1
    while mask < pof2:
        for nr in range(pof2):
            b.add(step, real(nr), real(nr ^ mask), 0, 1, True)
        mask <<= 1
        step += 1
    for r in range(rem):
        b.add(step, 2 * r, 2 * r + 1, 0, 1, False)
    return tuple(chunks), b


def _allreduce_rabenseifner(p: int, count: int, **_: object) -> Built:
    pof2, rem, real = _fold(p)
    chunks = _split(count, pof2)
    b = _Builder(chunks)
    step = 0
    if rem:
        for r in range(rem):
            b.add(0, 2 * r + 1, 2 * r, 0, pof2, True)
        step = 1
    step = _halving(b, step, pof2, real, 1)
    step = _doubling_allgather(b, step, pof2, real, 1)
    for r in range(rem):
        b.add(step, 2 * r, 2 * r + 1, 0, pof2, False)
    return tuple(chunks), b


def _allreduce_hierarchical(p: int, count: int, *, local_size: int, **_: object) -> Built:
    g = local_size
    k = p // g
    chunks = _chunks_allreduce_hierarchical(p, count, local_size=local_size)
    b = _Builder(chunks)
    shard_blocks = [(loc * k, k) for loc in range(g)]
    groups = [list(range(grp * g, grp * g + g)) for grp in range(k)]
    step1 = g - 1  # intra-group reduce-scatter, then inter-group ring allreduce
    step3 = step1 + 2 * (k - 1)  # then intra-group allgather
    for order in groups:
        _ring_reduce_scatter(b, 0, order, shard_blocks)
    for loc in range(g):
        order = [loc + grp * g for grp in range(k)]
        blocks = [(loc * k + grp, 1) for grp in range(k)]
        step2 = _ring_reduce_scatter(b, step1, order, blocks)
        _ring_allgather(b, step2, order, blocks)
    for order in groups:
        _ring_allgather(b, step3, order, shard_blocks)
    return tuple(chunks), b


def _allreduce_multiring(p: int, count: int, *, rings: list[list[int]], **_: object) -> Built:
    chunks = _chunks_allreduce_multiring(p, count, rings=rings)
    b = _Builder(chunks)
    for j, order in enumerate(rings):
        blocks = [(j * p + r, 1) for r in order]
        step = _ring_reduce_scatter(b, 0, order, blocks)
        _ring_allgather(b, step, order, blocks)
    return tuple(chunks), b


def _allgather_ring(p: int, count: int, **_: object) -> Built:
    chunks = [count] * p
    b = _Builder(chunks)
    _ring_allgather(b, 0, list(range(p)), [(r, 1) for r in range(p)])
    return tuple(chunks), b


def _allgather_recursive_doubling(p: int, count: int, **_: object) -> Built:
    chunks = [count] * p
    b = _Builder(chunks)
    _doubling_allgather(b, 0, p, lambda r: r, 1)
    return tuple(chunks), b


def _allgather_bruck(p: int, count: int, **_: object) -> Built:
    chunks = [count] * p
    b = _Builder(chunks)
    dist, step = 1, 0
    while dist < p:
        n = min(dist, p - dist)
        for i in range(p):
            b.add(step, i, (i - dist) % p, i, n, False)
        dist <<= 1
        step += 1
    return tuple(chunks), b


def _blocks_multiring(p: int, count: int, rings: list[list[int]], reduce_scatter: bool) -> Built:
    nrings = len(rings)
    chunks = _chunks_blocks_multiring(p, count, rings=rings)
    b = _Builder(chunks)
    for j, order in enumerate(rings):
        blocks = [(r * nrings + j, 1) for r in order]
        if reduce_scatter:
            _ring_reduce_scatter(b, 0, order, blocks)
        else:
            _ring_allgather(b, 0, order, blocks)
    return tuple(chunks), b


def _allgather_multiring(p: int, count: int, *, rings: list[list[int]], **_: object) -> Built:
    return _blocks_multiring(p, count, rings, reduce_scatter=False)


def _reduce_scatter_ring(p: int, count: int, **_: object) -> Built:
    chunks = [count] * p
    b = _Builder(chunks)
    _ring_reduce_scatter(b, 0, list(range(p)), [(r, 1) for r in range(p)])
    return tuple(chunks), b


def _reduce_scatter_recursive_halving(p: int, count: int, **_: object) -> Built:
    chunks = [count] * p
    b = _Builder(chunks)
    _halving(b, 0, p, lambda r: r, 1)
    return tuple(chunks), b


def _reduce_scatter_multiring(p: int, count: int, *, rings: list[list[int]], **_: object) -> Built:
    return _blocks_multiring(p, count, rings, reduce_scatter=True)


def _alltoall_pairwise(p: int, count: int, **_: object) -> Built:
    chunks = [count] * (p * p)
    b = _Builder(chunks)
    for s in range(1, p):
        for i in range(p):
            dst = (i + s) % p
            b.add(s - 1, i, dst, i * p + dst, 1, False)
    return tuple(chunks), b


def _alltoall_direct(p: int, count: int, **_: object) -> Built:
    chunks = [count] * (p * p)
    b = _Builder(chunks)
    for i in range(p):
        for s in range(1, p):
            dst = (i + s) % p
            b.add(0, i, dst, i * p + dst, 1, False)
    return tuple(chunks), b


def _bcast_binomial(p: int, count: int, *, root: int, **_: object) -> Built:
    chunks = [count]
    b = _Builder(chunks)
    levels = _ceil_lg(p)
    for step in range(levels):
        m = 1 << (levels - 1 - step)
        for vr in range(0, p - m, 2 * m):
            b.add(step, (vr + root) % p, (vr + m + root) % p, 0, 1, False)
    return tuple(chunks), b


def _reduce_binomial(p: int, count: int, *, root: int, **_: object) -> Built:
    chunks = [count]
    b = _Builder(chunks)
    for step in range(_ceil_lg(p)):
        m = 1 << step
        for vr in range(m, p, 2 * m):
            b.add(step, (vr + root) % p, (vr - m + root) % p, 0, 1, True)
    return tuple(chunks), b


def _barrier_dissemination(p: int, count: int, **_: object) -> Built:
    b = _Builder(())
    for step in range(_ceil_lg(p)):
        dist = 1 << step
        for i in range(p):
            b.add(step, i, (i + dist) % p, 0, 0, False, keep_empty=True)
    return (), b


_BUILDERS: dict[tuple[str, str], Callable[..., Built]] = {
    ("allreduce", "ring"): _allreduce_ring,
    ("allreduce", "recursive_doubling"): _allreduce_recursive_doubling,
    ("allreduce", "rabenseifner"): _allreduce_rabenseifner,
    ("allreduce", "hierarchical"): _allreduce_hierarchical,
    ("allreduce", "multiring"): _allreduce_multiring,
    ("allgather", "ring"): _allgather_ring,
    ("allgather", "recursive_doubling"): _allgather_recursive_doubling,
    ("allgather", "bruck"): _allgather_bruck,
    ("allgather", "multiring"): _allgather_multiring,
    ("reduce_scatter", "ring"): _reduce_scatter_ring,
    ("reduce_scatter", "recursive_halving"): _reduce_scatter_recursive_halving,
    ("reduce_scatter", "multiring"): _reduce_scatter_multiring,
    ("alltoall", "pairwise"): _alltoall_pairwise,
    ("alltoall", "direct"): _alltoall_direct,
    ("bcast", "binomial"): _bcast_binomial,
    ("reduce", "binomial"): _reduce_binomial,
    ("barrier", "dissemination"): _barrier_dissemination,
}
assert set(_BUILDERS) == {(op, a) for op, algs in ALGORITHMS.items() for a in algs}

_POW2_ONLY = {("allgather", "recursive_doubling"), ("reduce_scatter", "recursive_halving")}


# ---------------------------------------------------------------- per rank

# Algorithms whose schedules are lazy, with their chunk layouts.
_LAZY_CHUNKS: dict[tuple[str, str], Callable[..., list[int]]] = {
    ("allreduce", "ring"): _chunks_allreduce_ring,
    ("allreduce", "hierarchical"): _chunks_allreduce_hierarchical,
    ("allreduce", "multiring"): _chunks_allreduce_multiring,
    ("allgather", "ring"): _chunks_per_rank,
    ("allgather", "multiring"): _chunks_blocks_multiring,
    ("reduce_scatter", "ring"): _chunks_per_rank,
    ("reduce_scatter", "multiring"): _chunks_blocks_multiring,
    ("alltoall", "pairwise"): _chunks_alltoall,
    ("alltoall", "direct"): _chunks_alltoall,
}

# A ring of a per-rank description: order (group indices by position), position of
# each rank, blocks (first_chunk, num_chunks) by position, and their element counts.
_Ring = tuple[list[int], dict[int, int], list[tuple[int, int]], list[int]]
# A run of ring steps: first step, number of steps, and per ring (ring, shift), shift 1
# meaning reduce-scatter (position q sends block q - s - 1 in step s, reduced) and 0
# allgather (block q - s, copied); the rings of one run share its steps.
_Segment = tuple[int, int, list[tuple[_Ring, int]]]


class _LazyRanks:
    """One rank's part of a ring-based or all-to-all schedule, without its other ranks.

    Mirrors the builders above transfer for transfer: a rank's sends (and its
    receives) of a step come in the order the builder adds them, and every
    step of these algorithms holds a transfer when ``count_elems > 0`` (each
    step moves every block once), so step indices need no renumbering.
    """

    __slots__ = ("algorithm", "count", "local_size", "op", "p", "prefix", "rings", "rings_cache")

    def __init__(
        self,
        op: str,
        algorithm: str,
        p: int,
        count: int,
        chunks: Sequence[int],
        rings: list[list[int]],
        local_size: int | None,
    ) -> None:
        self.op = op
        self.algorithm = algorithm
        self.p = p
        self.count = count
        self.rings = rings
        self.local_size = local_size
        prefix = [0]
        for c in chunks:
            prefix.append(prefix[-1] + c)
        self.prefix = prefix
        self.rings_cache: dict[object, _Ring] = {}

    def build_steps(self) -> tuple[tuple[Transfer, ...], ...]:
        _, b = _BUILDERS[(self.op, self.algorithm)](
            self.p, self.count, root=0, local_size=self.local_size, rings=self.rings
        )
        return tuple(tuple(step) for step in b.steps if step)

    def _ring(
        self, key: object, make: Callable[[], tuple[list[int], list[tuple[int, int]]]]
    ) -> _Ring:
        """The ring ``make()`` describes as (order, blocks), cached under ``key``."""
        ring = self.rings_cache.get(key)
        if ring is None:
            order, blocks = make()
            prefix = self.prefix
            counts = [prefix[f + n] - prefix[f] for f, n in blocks]
            pos = {r: q for q, r in enumerate(order)}
            ring = self.rings_cache[key] = (order, pos, blocks, counts)
        return ring

    def _segments(self, r: int) -> list[_Segment]:
        p, op, alg = self.p, self.op, self.algorithm
        if alg == "hierarchical":
            g = self.local_size
            assert g is not None
            k = p // g
            grp, loc = divmod(r, g)
            group = self._ring(
                ("group", grp),
                lambda: (list(range(grp * g, grp * g + g)), [(x * k, k) for x in range(g)]),
            )
            column = self._ring(
                ("column", loc),
                lambda: ([loc + x * g for x in range(k)], [(loc * k + x, 1) for x in range(k)]),
            )
            s1, s2 = g - 1, g - 1 + k - 1
            s3 = s2 + k - 1
            return [
                (0, g - 1, [(group, 1)]),
                (s1, k - 1, [(column, 1)]),
                (s2, k - 1, [(column, 0)]),
                (s3, g - 1, [(group, 0)]),
            ]
        if alg == "ring":
            rings = [self._ring(0, lambda: (list(range(p)), [(q, 1) for q in range(p)]))]
        else:
            # Blocks of multiring: allreduce ring j owns chunks j * p + x; the
            # block ops' block x is split in one part per ring, part j on ring j.
            nr = len(self.rings)
            if op == "allreduce":
                rings = [
                    self._ring(j, lambda j=j, o=o: (o, [(j * p + x, 1) for x in o]))
                    for j, o in enumerate(self.rings)
                ]
            else:
                rings = [
                    self._ring(j, lambda j=j, o=o: (o, [(x * nr + j, 1) for x in o]))
                    for j, o in enumerate(self.rings)
                ]
        if op == "allreduce":
            return [
                (0, p - 1, [(ring, 1) for ring in rings]),
                (p - 1, p - 1, [(ring, 0) for ring in rings]),
            ]
        shift = 1 if op == "reduce_scatter" else 0
        return [(0, p - 1, [(ring, shift) for ring in rings])]

    def rank_steps(self, r: int) -> tuple[tuple[int, RankStep], ...]:
        """``(step index, (sends, recvs))`` of rank r, as ``Schedule._by_rank`` has them."""
        p, c = self.p, self.count
        out: list[tuple[int, RankStep]] = []
        if self.op == "alltoall":
            if self.algorithm == "pairwise":
                for s in range(1, p):
                    dst, src = (r + s) % p, (r - s) % p
                    out.append(
                        (
                            s - 1,
                            (
                                (Transfer(r, dst, c, r * p + dst, 1, False),),
                                (Transfer(src, r, c, src * p + r, 1, False),),
                            ),
                        )
                    )
            else:
                sends = tuple(
                    Transfer(r, (r + s) % p, c, r * p + (r + s) % p, 1, False) for s in range(1, p)
                )
                recvs = tuple(Transfer(i, r, c, i * p + r, 1, False) for i in range(p) if i != r)
                out.append((0, (sends, recvs)))
            return tuple(out)
        for step0, nsteps, rings in self._segments(r):
            for s in range(nsteps):
                sends: list[Transfer] = []
                recvs: list[Transfer] = []
                for (order, pos, blocks, counts), shift in rings:
                    m = len(order)
                    q = pos[r]
                    b = (q - s - shift) % m
                    if counts[b]:
                        first, num = blocks[b]
                        sends.append(
                            Transfer(r, order[(q + 1) % m], counts[b], first, num, shift == 1)
                        )
                    b = (b - 1) % m
                    if counts[b]:
                        first, num = blocks[b]
                        recvs.append(
                            Transfer(order[(q - 1) % m], r, counts[b], first, num, shift == 1)
                        )
                if sends or recvs:
                    out.append((step0 + s, (tuple(sends), tuple(recvs))))
        return tuple(out)

    def rank_plan(self, r: int) -> tuple[PlanStep, ...]:
        """``Schedule.rank_plan(r)``, generated directly (equal steps share one tuple)."""
        p, size = self.p, ELEM_BYTES * self.count
        if self.op == "alltoall":
            if self.algorithm == "pairwise":
                return tuple((((r - s) % p,), (((r + s) % p, size, False),)) for s in range(1, p))
            return (
                (
                    tuple(i for i in range(p) if i != r),
                    tuple(((r + s) % p, size, False) for s in range(1, p)),
                ),
            )
        out: list[PlanStep] = []
        append = out.append
        for _, nsteps, rings in self._segments(r):
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
                    got = counts[b]
                    key = sent if got else ~sent
                    st = memo.get(key)
                    if st is None:
                        st = memo[key] = (
                            src if got else (),
                            ((dst, ELEM_BYTES * sent, reduce),) if sent else (),
                        )
                    if sent or got:
                        append(st)
                continue
            for s in range(nsteps):
                srcs = []
                sends = []
                for (order, pos, _, counts), shift in rings:
                    m = len(order)
                    q = pos[r]
                    b = (q - s - shift) % m
                    if counts[b]:
                        sends.append((order[(q + 1) % m], ELEM_BYTES * counts[b], shift == 1))
                    if counts[b - 1]:
                        srcs.append(order[(q - 1) % m])
                if srcs or sends:
                    append((tuple(srcs), tuple(sends)))
        return tuple(out)


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


def _check_rings(rings: Sequence[Sequence[int]] | None, p: int) -> list[list[int]]:
    if rings is None or len(rings) == 0:
        raise ValueError(
            "rings is required by algorithm 'multiring': a non-empty list of rank orders, "
            f"each a permutation of range({p})"
        )
    out = []
    for j, ring in enumerate(rings):
        order = list(ring)
        if sorted(order) != list(range(p)) or not all(_is_int(r) for r in order):
            raise ValueError(f"rings[{j}] must be a permutation of range({p}) (got {order!r})")
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
) -> Schedule:
    """Expand collective ``op`` with ``algorithm`` over ``group_size`` ranks.

    ``count_elems`` follows MPI argument semantics (see the module docstring).
    ``root`` is used by bcast and reduce; ``local_size`` (ranks per group,
    dividing ``group_size``) only by allreduce "hierarchical"; ``rings`` (rank
    orders, each a permutation of ``range(group_size)``) only by "multiring".
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
    if algorithm == "hierarchical":
        if not _is_int(local_size) or local_size < 1 or p % local_size:
            raise ValueError(
                f"local_size must be an integer >= 1 dividing group_size={p} for "
                f"algorithm 'hierarchical' (got {local_size!r})"
            )
    elif local_size is not None:
        raise ValueError(
            f"local_size is only used by algorithm 'hierarchical' (got {local_size!r} "
            f"with {algorithm!r}); pass None"
        )
    if algorithm == "multiring":
        ring_list = _check_rings(rings, p)
    elif rings is not None:
        raise ValueError(f"rings is only used by algorithm 'multiring' (got it with {algorithm!r})")
    else:
        ring_list = []

    chunk_fn = _LAZY_CHUNKS.get((op, algorithm))
    if chunk_fn is None:
        chunks, b = _BUILDERS[(op, algorithm)](
            p, count_elems, root=root, local_size=local_size, rings=ring_list
        )
        steps = tuple(tuple(step) for step in b.steps if step) if p > 1 else ()
        return Schedule(op, algorithm, p, steps, count_elems, root, tuple(chunks))
    chunks = chunk_fn(p, count_elems, local_size=local_size, rings=ring_list)
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
    s.__dict__["_lazy"] = _LazyRanks(op, algorithm, p, count_elems, chunks, ring_list, local_size)
    return s


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
    ("alltoall", "direct", lambda p, c, n: n <= ALLTOALL_MEDIUM_MSG_BYTES),
    ("alltoall", "pairwise", _always),
    ("bcast", "binomial", lambda p, c, n: n < BCAST_SHORT_MSG_BYTES or p < BCAST_MIN_PROCS),
    (
        "bcast",
        "scatter_recursive_doubling_allgather",
        lambda p, c, n: n < BCAST_LONG_MSG_BYTES and _is_pow2(p),
    ),
    ("bcast", "scatter_ring_allgather", _always),
    ("reduce", "binomial", _always),
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
- reduce and barrier are not in the document's list: binomial tree and
  dissemination are assumed.
"""

NEAREST_IMPLEMENTED: dict[tuple[str, str], str] = {
    # the same cost row in collective-costs.md ("pairwise exchange / ring")
    ("reduce_scatter", "pairwise"): "ring",
    # Bruck's log-step alltoall is not implemented: every block posted at once
    ("alltoall", "bruck"): "direct",
    # scatter + allgather broadcasts are not implemented
    ("bcast", "scatter_recursive_doubling_allgather"): "binomial",
    ("bcast", "scatter_ring_allgather"): "binomial",
}
"""(op, MPICH's algorithm) -> the implemented algorithm that stands in for it."""


def mpich_algorithm(op: str, group_size: int, count_elems: int) -> str:
    """The algorithm MPICH's historical defaults choose (:data:`MPICH_RULES`).

    ``count_elems`` has MPI count semantics (float32 elements; thresholds are
    in bytes). The name may be one of MPICH's that is not implemented here
    (e.g. alltoall "bruck"); :func:`default_algorithm` gives the implemented one.
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
    implemented one is returned (:data:`NEAREST_IMPLEMENTED`): bcast is always
    "binomial" (MPICH switches to scatter + allgather for n >= 12,288 B and
    p >= 8); reduce_scatter's pairwise exchange is "ring" (same cost); alltoall
    uses "direct" (isend/irecv of all blocks) where MPICH would use Bruck
    (<= 256 B per destination, p >= 8).
    """
    algorithm = mpich_algorithm(op, group_size, count_elems)
    return NEAREST_IMPLEMENTED.get((op, algorithm), algorithm)


def alpha_beta_time_s(schedule: Schedule, alpha_s: float, beta_s_per_byte: float) -> float:
    """Hockney time of ``schedule`` with no contention (seconds).

    Steps run in order; a transfer of step s starts when both its ends are
    ready (as of before step s) and takes ``alpha_s + size_bytes * beta``;
    a rank is ready after step s at the latest end of its transfers in it.
    """
    if alpha_s < 0 or beta_s_per_byte < 0:
        raise ValueError(
            f"alpha_s and beta_s_per_byte must be >= 0 (got {alpha_s}, {beta_s_per_byte})"
        )
    ready = [0.0] * schedule.group_size
    for step in schedule.steps:
        after: dict[int, float] = {}
        for t in step:
            end = max(ready[t.src], ready[t.dst]) + alpha_s + t.size_bytes * beta_s_per_byte
            for r in (t.src, t.dst):
                if end > after.get(r, -1.0):
                    after[r] = end
        for r, end in after.items():
            ready[r] = end
    return max(ready)


def schedule_for(
    op: str,
    algorithm: str,
    group_size: int,
    count_elems: int,
    *,
    root: int = 0,
    params: Mapping[str, object] | None = None,
) -> Schedule:
    """``build_schedule`` with a workload's collective parameters.

    ``params`` may hold "rings" (used by multiring) and "local_size" (used by
    hierarchical); each is passed only to the algorithm that takes it.
    """
    params = params or {}
    kw: dict[str, object] = {"root": root}
    if algorithm == "multiring":
        kw["rings"] = params.get("rings")
    if algorithm == "hierarchical":
        kw["local_size"] = params.get("local_size")
    return build_schedule(op, algorithm, group_size, count_elems, **kw)  # type: ignore[arg-type]
