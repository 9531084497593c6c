"""Collective schedules against the closed forms of collective-costs.md.

Expected volumes, step counts and times are computed here from the formulas
(Thakur, Rabenseifner & Gropp 2005), never from the module; data movement is
checked by running every schedule on symbolic data (multisets of
contributions), which also catches double-counted reductions and ranks
forwarding data before they received it.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from workload.collectives import (
    ALGORITHMS,
    ELEM_BYTES,
    Schedule,
    Transfer,
    alpha_beta_time_s,
    build_schedule,
    default_algorithm,
    nccl_ring_orders,
    nccl_tree_parents,
)

PS = [1, 2, 3, 4, 5, 6, 8, 16]
# 10080 = 2^5 3^2 5 7: divisible by p * len(rings) for every case below.
EXACT_COUNT = 10080
RAGGED_COUNTS = [0, 1, 3, 1001]
ALPHA_S = 2e-6
BETA_S_PER_BYTE = 1e-9


def lg(p: int) -> float:
    return math.log2(p)


def ceil_lg(p: int) -> int:
    return math.ceil(math.log2(p)) if p > 1 else 0


def is_pow2(p: int) -> bool:
    return 2 ** round(math.log2(p)) == p


def pof2_of(p: int) -> int:
    return 2 ** math.floor(math.log2(p))


def divisors(p: int) -> list[int]:
    return [g for g in range(1, p + 1) if p % g == 0]


def rings_for(p: int, n: int) -> list[list[int]]:
    rng = random.Random(p * 1000 + n)
    out = [list(range(p)), list(reversed(range(p)))]
    while len(out) < n:
        perm = list(range(p))
        rng.shuffle(perm)
        out.append(perm)
    return out[:n]


def cases(p: int) -> list[tuple[str, str, dict]]:
    """Every (op, algorithm, extra kwargs) valid for group size p."""
    out: list[tuple[str, str, dict]] = []
    for op, algs in ALGORITHMS.items():
        for alg in algs:
            pow2_only = alg == "recursive_halving" or (op, alg) in (
                ("allgather", "recursive_doubling"),
                ("bcast", "scatter_recursive_doubling_allgather"),
            )
            if pow2_only and not is_pow2(p):
                continue
            if alg == "hierarchical":
                out += [(op, alg, {"local_size": g}) for g in divisors(p)]
            elif alg == "multiring":
                out += [(op, alg, {"rings": rings_for(p, n)}) for n in (1, 2, 3)]
            elif alg == "nccl_ring":
                out.append((op, alg, {}))
                out += [(op, alg, {"local_size": g, "channels": 2}) for g in divisors(p)]
            elif alg == "nccl_tree":
                out.append((op, alg, {"pipeline_chunks": 3}))
                out += [
                    (op, alg, {"local_size": g, "channels": c, "pipeline_chunks": 2})
                    for g in divisors(p)
                    for c in (1, 2)
                ]
            elif op in ("bcast", "reduce"):
                out += [(op, alg, {"root": r}) for r in sorted({0, p // 2, p - 1})]
            else:
                out.append((op, alg, {}))
    return out


ALL_CASES = [(p, op, alg, kw) for p in PS for op, alg, kw in cases(p)]


def case_id(c: tuple) -> str:
    p, op, alg, kw = c
    extra = ",".join(f"{k}={len(v) if k == 'rings' else v}" for k, v in kw.items())
    return f"p{p}-{op}-{alg}" + (f"-{extra}" if extra else "")


# ---------------------------------------------------------------- symbolic run

State = list[dict[int, Counter]]


def chunks_per_block(s: Schedule) -> int:
    return len(s.chunk_elems) // s.group_size


def initial_state(s: Schedule) -> State:
    p, nch = s.group_size, len(s.chunk_elems)
    state: State = [{} for _ in range(p)]
    for r in range(p):
        if s.op in ("allreduce", "reduce_scatter", "reduce"):
            owned = range(nch)
        elif s.op == "allgather":
            per = chunks_per_block(s)
            owned = range(r * per, (r + 1) * per)
        elif s.op == "bcast":
            owned = range(nch) if r == s.root else range(0)
        elif s.op == "alltoall":
            owned = range(r * p, (r + 1) * p)
        else:
            owned = range(0)
        state[r] = {c: Counter({r: 1}) for c in owned}
    return state


def run_symbolic(s: Schedule) -> State:
    """Execute ``s`` step by step on contribution multisets.

    Sends read the state from before the step; reduce adds, copy overwrites.
    """
    state = initial_state(s)
    nch = len(s.chunk_elems)
    for i, step in enumerate(s.steps):
        assert step, "empty steps must not be emitted"
        payloads = []
        written: set[tuple[int, int]] = set()
        for t in step:
            chunks = [(t.first_chunk + j) % nch for j in range(t.num_chunks)] if nch else []
            assert t.count_elems == sum(s.chunk_elems[c] for c in chunks)
            load = {}
            for c in chunks:
                if s.chunk_elems[c] == 0:
                    continue
                held = state[t.src].get(c)
                assert held, f"step {i}: rank {t.src} sends chunk {c} it does not hold"
                load[c] = Counter(held)
                if not t.reduce:
                    assert (t.dst, c) not in written, f"step {i}: chunk {c} written twice"
                    written.add((t.dst, c))
            payloads.append((t, load))
        for t, load in payloads:
            for c, data in load.items():
                if t.reduce:
                    assert state[t.dst].get(c), f"step {i}: rank {t.dst} reduces into nothing"
                    state[t.dst][c] += data
                else:
                    state[t.dst][c] = data
    return state


def check_bruck(s: Schedule) -> None:
    """Bruck's all-to-all moved as MPICH moves it: after the rotation, position k of rank
    i holds the block from i to i + k; in step t each rank sends i + 2^t the blocks at
    the positions with bit t set (their count times the block, in one message). At the
    end position k of rank r holds the block from r - k to r: every block arrived."""
    p, c = s.group_size, s.count_elems
    held = [{k: (i, (i + k) % p) for k in range(p)} for i in range(p)]
    steps = [st for st in s.steps]
    assert len(steps) == (math.ceil(math.log2(p)) if p > 1 and c else 0)
    for t, step in enumerate(steps):
        d = 1 << t
        moving = [k for k in range(p) if k & d]
        assert sorted((x.src, x.dst, x.count_elems) for x in step) == sorted(
            (i, (i + d) % p, c * len(moving)) for i in range(p)
        )
        sent = [{k: held[i][k] for k in moving} for i in range(p)]
        for i in range(p):
            held[(i + d) % p].update(sent[i])
    if c:
        for r in range(p):
            assert held[r] == {k: ((r - k) % p, r) for k in range(p)}, r


def check_semantics(s: Schedule) -> None:
    p = s.group_size
    everyone = Counter(range(p))
    state = run_symbolic(s)
    live = [c for c, n in enumerate(s.chunk_elems) if n > 0]
    if s.op == "allreduce":
        for r in range(p):
            for c in live:
                assert state[r].get(c) == everyone, (r, c)
    elif s.op == "reduce":
        for c in live:
            assert state[s.root].get(c) == everyone
    elif s.op == "reduce_scatter":
        per = chunks_per_block(s)
        for r in range(p):
            for c in live:
                if c // per == r:
                    assert state[r].get(c) == everyone, (r, c)
    elif s.op == "allgather":
        per = chunks_per_block(s)
        for r in range(p):
            for c in live:
                assert state[r].get(c) == Counter({c // per: 1}), (r, c)
    elif s.op == "bcast":
        for r in range(p):
            for c in live:
                assert state[r].get(c) == Counter({s.root: 1})
    elif s.op == "alltoall":
        for r in range(p):
            for i in range(p):
                if s.chunk_elems[i * p + r]:
                    assert state[r].get(i * p + r) == Counter({i: 1}), (r, i)
    elif s.op == "barrier":
        # Dissemination: everyone must (transitively) have heard from everyone.
        heard = [{r} for r in range(p)]
        for step in s.steps:
            new = [set(h) for h in heard]
            for t in step:
                new[t.dst] |= heard[t.src]
            heard = new
        assert all(h == set(range(p)) for h in heard)


@pytest.mark.parametrize("case", ALL_CASES, ids=case_id)
@pytest.mark.parametrize("count", [EXACT_COUNT, *RAGGED_COUNTS])
def test_semantics_and_structure(case, count):
    p, op, alg, kw = case
    s = build_schedule(op, alg, p, count, **kw)
    assert (s.op, s.algorithm, s.group_size, s.count_elems) == (op, alg, p, count)
    for step in s.steps:
        for t in step:
            assert 0 <= t.src < p and 0 <= t.dst < p and t.src != t.dst
            # Empty chunks of a non-empty collective still go (zero-byte messages).
            assert t.count_elems > 0 or op == "barrier" or count > 0
            assert t.size_bytes == ELEM_BYTES * t.count_elems
    if p == 1:
        assert s.steps == ()
    if (op, alg) == ("alltoall", "bruck"):
        check_bruck(s)
    else:
        check_semantics(s)
    # rank views partition the transfers, in step order
    sends = [t for r in range(p) for snd, _ in s.rank_steps(r) for t in snd]
    recvs = [t for r in range(p) for _, rcv in s.rank_steps(r) for t in rcv]
    assert Counter(sends) == Counter(recvs) == Counter(t for st in s.steps for t in st)
    for r in range(p):
        idx = s.rank_step_indices(r)
        assert idx == sorted(set(idx)) and len(idx) == len(s.rank_steps(r))
        assert all(snd or rcv for snd, rcv in s.rank_steps(r))
    assert sum(s.pair_bytes().values()) == s.total_bytes == sum(s.bytes_sent(r) for r in range(p))
    assert s.total_bytes == sum(s.bytes_received(r) for r in range(p))
    # element ranges cover exactly count_elems (Bruck's blocks are no range: sizes only)
    for step in s.steps:
        for t in step:
            covered = sum(b - a for a, b in s.element_ranges(t))
            assert covered == (0 if (op, alg) == ("alltoall", "bruck") else t.count_elems)


# ---------------------------------------------------------------- volumes


def expected_sent_bytes(op, alg, p, count, r, kw) -> float | None:
    """Bytes rank r sends, from the closed forms (None: checked elsewhere)."""
    n = ELEM_BYTES * count  # whole vector (allreduce) or per-rank block
    if op == "allreduce":
        if alg in ("ring", "multiring", "nccl_ring"):
            return 2 * (p - 1) / p * n
        if alg == "nccl_tree":
            return None  # per rank it depends on the trees: test_nccl_tree_volumes
        if alg == "hierarchical":
            g = kw["local_size"]
            k = p // g
            return 2 * (g - 1) / g * n + 2 * (k - 1) / k * (n / g)
        pof2 = pof2_of(p)
        rem = p - pof2
        core = lg(pof2) * n if alg == "recursive_doubling" else 2 * (pof2 - 1) / pof2 * n
        if r < 2 * rem:
            # MPICH: even ranks hand their vector to the next (odd) rank and sit out; the
            # odd ones take part and send the result back
            return core + n if r % 2 else n
        return core
    if op in ("allgather", "reduce_scatter"):
        total = p * n  # gathered / reduced vector
        return (p - 1) / p * total
    if op == "alltoall":
        if alg == "bruck":  # per step, the blocks at the positions with that bit set
            return n * sum(sum(1 for k in range(p) if k >> t & 1) for t in range(ceil_lg(p)))
        return (p - 1) * n
    if op == "barrier":
        return 0
    return None


@pytest.mark.parametrize("case", ALL_CASES, ids=case_id)
def test_bytes_sent_match_closed_form(case):
    p, op, alg, kw = case
    for count in (EXACT_COUNT, 1001):
        s = build_schedule(op, alg, p, count, **kw)
        for r in range(p):
            want = expected_sent_bytes(op, alg, p, count, r, kw)
            if want is None:
                continue
            got = s.bytes_sent(r)
            # NCCL's rings split the vector in p blocks per channel
            nch = kw.get("channels") or kw.get("local_size") or p
            ragged = alg == "nccl_ring" and count % (p * nch)
            if count == EXACT_COUNT and not ragged:
                assert got == pytest.approx(want, abs=1e-6), (r, got, want)
            else:
                msgs = sum(len(snd) for snd, _ in s.rank_steps(r))
                assert abs(got - want) <= 2 * ELEM_BYTES * msgs, (r, got, want)
        if op in ("bcast", "reduce") and alg == "binomial":
            n = ELEM_BYTES * count
            root = kw["root"]
            moved = s.bytes_received if op == "bcast" else s.bytes_sent
            for r in range(p):
                assert moved(r) == (0 if r == root else n)
            assert s.total_bytes == (p - 1) * n
        if op == "bcast" and alg != "binomial" and count == EXACT_COUNT:
            # The scatter hands relative rank v its subtree's pieces (min(v & -v, p - v)
            # of the p), then the allgather brings each rank, the root too, the p - 1
            # pieces it lacks.
            piece = ELEM_BYTES * count // p
            for r in range(p):
                v = (r - kw["root"]) % p
                subtree = min(v & -v, p - v) if v else 0
                assert s.bytes_received(r) == (subtree + p - 1) * piece, r
        if op == "reduce" and alg == "rabenseifner" and count == EXACT_COUNT:
            # Folded in (rem vectors), halved (each of pof2 ranks sends (pof2 - 1) of its
            # pof2 blocks), gathered (n/2 a step over lg pof2 steps); a root that sat out
            # of the fold (an odd one below 2 rem, in MPICH's reduce) first gets block 0.
            n, q = ELEM_BYTES * count, pof2_of(p)
            rem, root = p - q, kw["root"]
            sat_out = root < 2 * rem and root % 2 == 1
            want = rem * n + (q - 1) * n + round(lg(q)) * n // 2 + sat_out * n // q
            assert s.total_bytes == want
            # No message reaches the root after the gather: the root gathers itself.
            assert p == 1 or all(t.dst == root for t in s.steps[-1])


@pytest.mark.parametrize("p,g,c", [(8, 4, 1), (8, 4, 2), (16, 2, 1), (12, 4, 2), (6, 6, 3)])
def test_nccl_tree_volumes(p, g, c):
    # Every rank but a tree's root sends its share of that tree up once and receives
    # it back once: in all, every tree edge carries its share both ways.
    k = 4
    count = 2 * c * k * 10
    s = build_schedule(
        "allreduce", "nccl_tree", p, count, local_size=g, channels=c, pipeline_chunks=k
    )
    share = ELEM_BYTES * count // (2 * c)
    assert s.total_bytes == 2 * c * 2 * (p - 1) * share
    for r in range(p):
        assert s.bytes_received(r) - s.bytes_sent(r) in (
            # a root of some trees: it sends down twice (or once) what it got up
            *(share * j for j in range(-2 * c, 2 * c + 1)),
        )


def test_nccl_tree_loads_every_nic_of_a_node_alike():
    # 4 nodes of 8 GPUs, the default 8 channels: a channel's two trees share their chain
    # head, so every GPU of a node sends as many bytes to other nodes (node 1 and 2 are
    # inside one tree and leaves of the other: 4 tree shares; nodes 0 and 3 a leaf and a
    # root with one child: 2).
    p, g, k = 32, 8, 2
    count = 2 * g * k * 64
    s = build_schedule("allreduce", "nccl_tree", p, count, local_size=g, pipeline_chunks=k)
    share = ELEM_BYTES * count // (2 * g)
    out = [0] * p
    for r in range(p):
        for sends, _ in s.rank_steps(r):
            out[r] += sum(t.count_elems * ELEM_BYTES for t in sends if t.dst // g != r // g)
    assert [out[m * g : (m + 1) * g] for m in range(p // g)] == [
        [n * share] * g for n in (2, 4, 4, 2)
    ]


def test_nccl_tree_sends_a_small_message_in_one_chunk_per_tree():
    # Chunks of NCCL's 512 KiB step: 4 KiB per tree is one chunk (one message up and one
    # down per tree edge), 64 MiB per tree the most, 64.
    def messages(nbytes: int) -> int:
        sched = build_schedule("allreduce", "nccl_tree", 16, nbytes // ELEM_BYTES, local_size=8)
        return sum(len(sends) for r in range(16) for sends, _ in sched.rank_steps(r))

    edges = 2 * 8 * 2 * 15  # trees x (up + down) x tree edges over 16 ranks
    assert messages(16 * 4096) == edges
    assert messages(16 * (3 << 19)) == 3 * edges
    assert messages(16 << 26) == messages(16 << 30) == 64 * edges


def test_nccl_ring_channels_enter_nodes_at_their_gpu():
    assert nccl_ring_orders(8, 4, 2) == [[0, 1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 0, 5, 6, 7, 4]]
    # More channels than GPUs per node wrap around.
    assert nccl_ring_orders(4, 2, 3)[2] == [0, 1, 2, 3]
    # One node (no GPUs per node given): one channel by default, more when asked.
    assert nccl_ring_orders(3) == [[0, 1, 2]]
    assert nccl_ring_orders(3, None, 3) == [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    # Nodes of 80 GPUs: 64 channels by default (NCCL's most).
    assert len(nccl_ring_orders(160, 80)) == 64


def test_nccl_double_binary_tree_by_hand():
    # 4 nodes of 2 GPUs. Node tree 0 (in order): node 3 the root, 1 under it, 0 and 2
    # under 1; tree 1 mirrored: node 0 the root, 2 under it, 3 and 1 under 2. Chain
    # heads: GPU 0 (tree 0), GPU 1 (tree 1).
    assert nccl_tree_parents(8, 2, 0, mirrored=False) == [2, 0, 6, 2, 2, 4, -1, 6]
    assert nccl_tree_parents(8, 2, 1, mirrored=True) == [1, -1, 3, 5, 5, 1, 7, 5]
    # An odd number of nodes shifts tree 1 by one node: node tree 0 over 3 nodes has
    # node 1 at the root; shifted, node 2.
    assert nccl_tree_parents(3, 1, 0, mirrored=False) == [1, -1, 1]
    assert nccl_tree_parents(3, 1, 0, mirrored=True) == [2, 2, -1]


def test_ragged_split_follows_array_split():
    s = build_schedule("allreduce", "ring", 4, 10)
    assert s.chunk_elems == (3, 3, 2, 2)
    s = build_schedule("allreduce", "ring", 4, 2)
    assert s.chunk_elems == (1, 1, 0, 0)
    # MPICH posts the empty blocks' sends too: every step has all 4 messages.
    assert [sorted(t.count_elems for t in st) for st in s.steps] == [[0, 0, 1, 1]] * 6
    assert s.total_bytes == 2 * 3 * 2 * ELEM_BYTES
    assert build_schedule("allreduce", "ring", 4, 0).steps == ()


@pytest.mark.parametrize(
    ("alg", "kw", "steps"),
    [("ring", {}, 2 * 15), ("hierarchical", {"local_size": 8}, 2 * 7 + 2 * 1)],
)
def test_fewer_elements_than_ranks_still_take_every_step(alg, kw, steps):
    # 2 elements over 16 ranks: most blocks are empty, yet every rank sends and receives
    # in every step (zero-byte messages), so the collective pays every step's latency.
    s = build_schedule("allreduce", alg, 16, 2, **kw)
    assert s.num_steps == steps
    for r in range(16):
        plan = s.rank_plan(r)
        assert len(plan) == steps
        assert all(len(srcs) == 1 and len(sends) == 1 for srcs, sends in plan)
    assert sum(1 for st in s.steps for t in st if t.count_elems == 0) > 0


def test_ring_allreduce_total_volume_exact_when_ragged():
    for p in (3, 5, 16):
        n = ELEM_BYTES * 1001
        assert build_schedule("allreduce", "ring", p, 1001).total_bytes == 2 * (p - 1) * n


def test_multiring_same_pair_in_one_step():
    # two identical rings put two transfers 0 -> 1 in every step, in ring order
    s = build_schedule("allreduce", "multiring", 3, 60, rings=[[0, 1, 2], [0, 1, 2]])
    step0 = [t for t in s.steps[0] if (t.src, t.dst) == (0, 1)]
    assert [t.first_chunk // 3 for t in step0] == [0, 1]
    check_semantics(s)


def test_bruck_ranges_wrap_around():
    s = build_schedule("allgather", "bruck", 5, 2)
    t = next(t for t in s.steps[1] if t.src == 4)
    assert (t.dst, t.first_chunk, t.num_chunks) == (2, 4, 2)
    assert s.element_ranges(t) == ((8, 10), (0, 2))


def test_binomial_bcast_forwards_after_receiving():
    s = build_schedule("bcast", "binomial", 8, 16, root=3)
    for r in range(8):
        steps = s.rank_steps(r)
        if r == 3:
            assert all(not rcv for _, rcv in steps)
        else:
            assert len(steps[0][1]) == 1 and not steps[0][0]
            assert all(not rcv for _, rcv in steps[1:])


def test_barrier_keeps_zero_element_messages():
    s = build_schedule("barrier", "dissemination", 5, 123)
    assert s.num_steps == 3
    assert all(t.count_elems == 0 for st in s.steps for t in st)
    assert [[(t.src, t.dst) for t in st if t.src == 0] for st in s.steps] == [
        [(0, 1)],
        [(0, 2)],
        [(0, 4)],
    ]
    assert set(s.pair_bytes().values()) == {0}


def test_transfer_is_small():
    t = Transfer(0, 1, 5)
    assert not hasattr(t, "__dict__")
    assert t.size_bytes == 20


# ---------------------------------------------------------------- steps


def expected_steps(op, alg, p, kw) -> int:
    if p == 1:
        return 0
    pof2_steps = math.floor(lg(p)) + (0 if is_pow2(p) else 2)  # folding adds two
    if alg == "hierarchical":
        g = kw["local_size"]
        return 2 * (g - 1) + 2 * (p // g - 1)
    if alg == "nccl_tree":
        # Pipelined over k chunks: the last chunk leaves the deepest leaf in step k - 1,
        # reaches the root H steps later, and is back at the deepest leaf after H more.
        # H = the node tree's height, floor(lg(nodes)), plus the chain below a head.
        g = kw.get("local_size") or p
        height = math.floor(lg(p // g)) + g - 1
        return kw["pipeline_chunks"] + 2 * height - 1
    if alg == "nccl_ring":
        return (2 if op == "allreduce" else 1) * (p - 1)
    return {
        ("allreduce", "ring"): 2 * (p - 1),
        ("allreduce", "multiring"): 2 * (p - 1),
        ("allreduce", "recursive_doubling"): pof2_steps,
        ("allreduce", "rabenseifner"): 2 * math.floor(lg(p)) + (0 if is_pow2(p) else 2),
        ("allgather", "ring"): p - 1,
        ("allgather", "multiring"): p - 1,
        ("allgather", "recursive_doubling"): round(lg(p)),
        ("allgather", "bruck"): ceil_lg(p),
        ("reduce_scatter", "ring"): p - 1,
        ("reduce_scatter", "multiring"): p - 1,
        ("reduce_scatter", "recursive_halving"): round(lg(p)),
        ("alltoall", "pairwise"): p - 1,
        ("alltoall", "direct"): 1,
        # MPICH's batches of 32 distances, the first counting the rank itself
        ("alltoall", "scattered"): math.ceil(p / 32),
        ("alltoall", "bruck"): ceil_lg(p),
        ("bcast", "binomial"): ceil_lg(p),
        ("bcast", "scatter_recursive_doubling_allgather"): 2 * round(lg(p)),
        ("bcast", "scatter_ring_allgather"): ceil_lg(p) + p - 1,
        ("reduce", "binomial"): ceil_lg(p),
        ("reduce", "rabenseifner"): (0 if is_pow2(p) else 1)
        + 2 * math.floor(lg(p))
        + (kw.get("root", 0) < 2 * (p - pof2_of(p)) and kw.get("root", 0) % 2 == 1),
        ("barrier", "dissemination"): ceil_lg(p),
    }[(op, alg)]


@pytest.mark.parametrize("case", ALL_CASES, ids=case_id)
def test_step_counts(case):
    p, op, alg, kw = case
    s = build_schedule(op, alg, p, EXACT_COUNT, **kw)
    assert s.num_steps == expected_steps(op, alg, p, kw)


# ---------------------------------------------------------------- alpha-beta


def closed_form_time(op, alg, p, count, a, b) -> float | None:
    """Table of collective-costs.md with gamma = 0 (n in the table's sense)."""
    vec = ELEM_BYTES * count
    if op == "allreduce":
        n = vec
        if alg == "ring":
            return 2 * (p - 1) * a + 2 * (p - 1) / p * n * b
        if alg == "recursive_doubling" and is_pow2(p):
            return lg(p) * a + n * lg(p) * b
        if alg == "rabenseifner" and is_pow2(p):
            return 2 * lg(p) * a + 2 * (p - 1) / p * n * b
    if op == "allgather":
        n = p * vec  # total gathered
        if alg == "ring":
            return (p - 1) * a + (p - 1) / p * n * b
        if alg == "recursive_doubling":
            return lg(p) * a + (p - 1) / p * n * b
        if alg == "bruck":
            return ceil_lg(p) * a + (p - 1) / p * n * b
    if op == "reduce_scatter":
        n = p * vec  # whole vector
        if alg == "ring":
            return (p - 1) * a + (p - 1) / p * n * b
        if alg == "recursive_halving":
            return lg(p) * a + (p - 1) / p * n * b
    if op == "alltoall" and alg == "pairwise":
        n = (p - 1) * vec  # total a process sends
        return (p - 1) * a + n * b
    if op in ("bcast", "reduce") and alg == "binomial":
        return ceil_lg(p) * (a + vec * b)
    if is_pow2(p) and (op, alg) in (
        ("bcast", "scatter_recursive_doubling_allgather"),
        ("reduce", "rabenseifner"),
    ):
        return 2 * lg(p) * a + 2 * (p - 1) / p * vec * b
    if is_pow2(p) and (op, alg) == ("bcast", "scatter_ring_allgather"):
        return (lg(p) + p - 1) * a + 2 * (p - 1) / p * vec * b
    return None


TIMED = [
    c
    for c in ALL_CASES
    if c[0] > 1 and closed_form_time(c[1], c[2], c[0], EXACT_COUNT, 1, 1) is not None
]


@pytest.mark.parametrize("case", TIMED, ids=case_id)
def test_alpha_beta_matches_closed_form(case):
    p, op, alg, kw = case
    s = build_schedule(op, alg, p, EXACT_COUNT, **kw)
    want = closed_form_time(op, alg, p, EXACT_COUNT, ALPHA_S, BETA_S_PER_BYTE)
    assert alpha_beta_time_s(s, ALPHA_S, BETA_S_PER_BYTE) == pytest.approx(want, rel=0.01)


@pytest.mark.parametrize("p,g", [(4, 2), (8, 2), (8, 4), (6, 3), (16, 4)])
def test_alpha_beta_hierarchical_two_level_formula(p, g):
    k = p // g
    n = ELEM_BYTES * EXACT_COUNT
    a, b = ALPHA_S, BETA_S_PER_BYTE
    want = 2 * (g - 1) * a + 2 * (g - 1) / g * n * b + 2 * (k - 1) * a
    want += 2 * (k - 1) / k * (n / g) * b
    s = build_schedule("allreduce", "hierarchical", p, EXACT_COUNT, local_size=g)
    assert alpha_beta_time_s(s, a, b) == pytest.approx(want, rel=0.01)


@pytest.mark.parametrize("p", [3, 5, 6, 12])
def test_alpha_terms_non_power_of_two_allreduce(p):
    # beta = 0 isolates the alpha terms of the table
    rab = build_schedule("allreduce", "rabenseifner", p, EXACT_COUNT)
    want = (2 * math.floor(lg(p)) + 2) * ALPHA_S
    assert alpha_beta_time_s(rab, ALPHA_S, 0.0) == pytest.approx(want, rel=1e-9)
    rd = build_schedule("allreduce", "recursive_doubling", p, EXACT_COUNT)
    assert alpha_beta_time_s(rd, ALPHA_S, 0.0) == pytest.approx(
        (math.floor(lg(p)) + 2) * ALPHA_S, rel=1e-9
    )


def test_alpha_beta_hand_example():
    # step 0: 0->1 ends at 2; step 1: 1->2 starts at 2, 3->2 starts at 0.
    s = Schedule(
        "custom",
        "hand",
        4,
        ((Transfer(0, 1, 1),), (Transfer(1, 2, 1), Transfer(3, 2, 1))),
    )
    assert alpha_beta_time_s(s, 1.0, 0.25) == pytest.approx(4.0)
    assert alpha_beta_time_s(build_schedule("allreduce", "ring", 1, 10), 1.0, 1.0) == 0.0
    with pytest.raises(ValueError, match="alpha_s"):
        alpha_beta_time_s(s, -1.0, 0.0)


# ---------------------------------------------------------------- defaults


@pytest.mark.parametrize(
    "op,p,count,want",
    [
        ("allreduce", 8, 512, "recursive_doubling"),  # 2048 B <= 2048
        ("allreduce", 8, 513, "rabenseifner"),
        ("allreduce", 1024, 600, "recursive_doubling"),  # count < pof2
        ("allreduce", 1024, 1024, "rabenseifner"),
        ("allgather", 8, 16383, "recursive_doubling"),  # total 524,256 B
        ("allgather", 8, 16384, "ring"),  # total 524,288 B
        ("allgather", 6, 3413, "bruck"),  # total 81,912 B
        ("allgather", 6, 3414, "ring"),  # total 81,936 B
        ("reduce_scatter", 8, 16383, "recursive_halving"),
        ("reduce_scatter", 8, 16384, "ring"),
        ("reduce_scatter", 6, 10, "ring"),
        ("alltoall", 16, 8192, "scattered"),  # 32,768 B per destination
        ("alltoall", 16, 8193, "pairwise"),
        ("bcast", 64, 1 << 20, "scatter_ring_allgather"),  # 4 MiB
        ("bcast", 64, 3072, "binomial"),  # 12,288 B: MPICH's tuning file takes it as short
        ("bcast", 64, 3073, "scatter_recursive_doubling_allgather"),
        ("bcast", 64, 131072, "scatter_recursive_doubling_allgather"),  # 524,288 B
        ("bcast", 64, 131073, "scatter_ring_allgather"),
        ("bcast", 48, 3073, "scatter_ring_allgather"),  # (not a power of two)
        ("bcast", 6, 1 << 20, "binomial"),  # fewer than 8 ranks
        ("bcast", 2048, 1 << 20, "binomial"),  # the ring's p (p - 1) transfers: stand-in
        ("reduce", 64, 1 << 20, "rabenseifner"),
        ("reduce", 64, 512, "binomial"),  # 2,048 B
        ("reduce", 64, 513, "rabenseifner"),
        ("reduce", 1024, 600, "binomial"),  # count < pof2
        ("barrier", 64, 0, "dissemination"),
    ],
)
def test_default_algorithm_thresholds(op, p, count, want):
    assert default_algorithm(op, p, count) == want


@pytest.mark.parametrize("op", list(ALGORITHMS))
def test_default_algorithm_is_buildable(op):
    for p in (1, 2, 3, 6, 8):
        for count in (0, 1, 100, 20000):
            alg = default_algorithm(op, p, count)
            assert alg in ALGORITHMS[op]
            build_schedule(op, alg, p, count)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        (("gather", "ring", 4, 1), {}, "op must be one of"),
        (("allreduce", "tree", 4, 1), {}, "algorithm for op 'allreduce' must be one of"),
        (("allreduce", "ring", 0, 1), {}, "group_size must be an integer >= 1"),
        (("allreduce", "ring", 4, -1), {}, "count_elems must be an integer >= 0"),
        (("allreduce", "ring", 4, 1.5), {}, "count_elems"),
        (("bcast", "binomial", 4, 1), {"root": 4}, r"root must be an integer in 0\.\.3"),
        (("allreduce", "hierarchical", 8, 1), {"local_size": 3}, "local_size must be"),
        (("allreduce", "hierarchical", 8, 1), {}, "local_size must be"),
        (("allreduce", "ring", 8, 1), {"local_size": 2}, "local_size is only used"),
        (("allreduce", "multiring", 4, 1), {}, "rings is required"),
        (("allgather", "multiring", 4, 1), {"rings": []}, "rings is required"),
        (("allreduce", "multiring", 3, 1), {"rings": [[0, 1, 1]]}, r"rings\[0\] must be"),
        (("allreduce", "multiring", 3, 1), {"rings": [[0, 1, 2], [0, 1]]}, r"rings\[1\]"),
        (("allreduce", "ring", 3, 1), {"rings": [[0, 1, 2]]}, "rings is only used"),
        (("allgather", "recursive_doubling", 6, 1), {}, "power of two"),
        (("reduce_scatter", "recursive_halving", 12, 1), {}, "power of two"),
    ],
)
def test_invalid_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_schedule(*args, **kwargs)


def test_invalid_default_and_rank_queries():
    with pytest.raises(ValueError, match="op must be one of"):
        default_algorithm("scan", 4, 1)
    with pytest.raises(ValueError, match="group_size"):
        default_algorithm("allreduce", 0, 1)
    s = build_schedule("allreduce", "ring", 4, 8)
    with pytest.raises(ValueError, match=r"rank must be in 0\.\.3"):
        s.bytes_sent(4)


def test_hierarchical_allreduce_steps_by_hand():
    # p=4, groups of 2: chunks of 2 elements; shard 0 = chunks 0-1, shard 1 = chunks 2-3.
    s = build_schedule("allreduce", "hierarchical", 4, 8, local_size=2)
    assert s.chunk_elems == (2, 2, 2, 2)
    T = Transfer
    assert s.steps == (
        # reduce-scatter inside groups {0,1} and {2,3}: position 0 keeps shard 0
        (T(0, 1, 4, 2, 2, True), T(1, 0, 4, 0, 2, True),
         T(2, 3, 4, 2, 2, True), T(3, 2, 4, 0, 2, True)),
        # ring allreduce of each shard across groups: columns {0,2} and {1,3}
        (T(0, 2, 2, 1, 1, True), T(2, 0, 2, 0, 1, True),
         T(1, 3, 2, 3, 1, True), T(3, 1, 2, 2, 1, True)),
        (T(0, 2, 2, 0, 1, False), T(2, 0, 2, 1, 1, False),
         T(1, 3, 2, 2, 1, False), T(3, 1, 2, 3, 1, False)),
        # allgather inside groups
        (T(0, 1, 4, 0, 2, False), T(1, 0, 4, 2, 2, False),
         T(2, 3, 4, 0, 2, False), T(3, 2, 4, 2, 2, False)),
    )  # fmt: skip
    assert s.rank_steps(2) == [
        ((T(2, 3, 4, 2, 2, True),), (T(3, 2, 4, 0, 2, True),)),
        ((T(2, 0, 2, 0, 1, True),), (T(0, 2, 2, 1, 1, True),)),
        ((T(2, 0, 2, 1, 1, False),), (T(0, 2, 2, 0, 1, False),)),
        ((T(2, 3, 4, 0, 2, False),), (T(3, 2, 4, 2, 2, False),)),
    ]


def test_alltoall_steps_by_hand():
    T = Transfer
    pairwise = build_schedule("alltoall", "pairwise", 3, 1)
    assert pairwise.steps == (
        (T(0, 1, 1, 1, 1), T(1, 2, 1, 5, 1), T(2, 0, 1, 6, 1)),
        (T(0, 2, 1, 2, 1), T(1, 0, 1, 3, 1), T(2, 1, 1, 7, 1)),
    )
    assert pairwise.rank_steps(1) == [
        ((T(1, 2, 1, 5, 1),), (T(0, 1, 1, 1, 1),)),
        ((T(1, 0, 1, 3, 1),), (T(2, 1, 1, 7, 1),)),
    ]
    direct = build_schedule("alltoall", "direct", 3, 1)
    assert direct.steps == ((
        T(0, 1, 1, 1, 1), T(0, 2, 1, 2, 1), T(1, 2, 1, 5, 1),
        T(1, 0, 1, 3, 1), T(2, 0, 1, 6, 1), T(2, 1, 1, 7, 1),
    ),)  # fmt: skip
    assert direct.rank_steps(1) == [
        ((T(1, 2, 1, 5, 1), T(1, 0, 1, 3, 1)), (T(0, 1, 1, 1, 1), T(2, 1, 1, 7, 1))),
    ]


def test_pairwise_alltoall_pairs_ranks_as_mpich():
    # A power of two: step d pairs rank r with r ^ d, both ways at once.
    s = build_schedule("alltoall", "pairwise", 4, 3)
    assert [sorted((t.src, t.dst) for t in st) for st in s.steps] == [
        [(0, 1), (1, 0), (2, 3), (3, 2)],
        [(0, 2), (1, 3), (2, 0), (3, 1)],
        [(0, 3), (1, 2), (2, 1), (3, 0)],
    ]
    # Otherwise step d sends to r + d and receives from r - d.
    s = build_schedule("alltoall", "pairwise", 3, 3)
    assert [sorted((t.src, t.dst) for t in st) for st in s.steps] == [
        [(0, 1), (1, 2), (2, 0)],
        [(0, 2), (1, 0), (2, 1)],
    ]
    for p in (3, 4, 6, 8):  # every block once, from its own sender to its own receiver
        s = build_schedule("alltoall", "pairwise", p, 2)
        blocks = sorted(t.first_chunk for st in s.steps for t in st)
        assert blocks == sorted(i * p + j for i in range(p) for j in range(p) if i != j)
        for st in s.steps:
            for t in st:
                assert t.first_chunk == t.src * p + t.dst
        for r in range(p):  # the per-rank view agrees with the whole steps
            assert [x[0][0].dst for x in s.rank_steps(r)] == [
                t.dst for st in s.steps for t in st if t.src == r
            ]


@pytest.mark.parametrize("alg", ["recursive_doubling", "rabenseifner"])
def test_recursive_allreduce_rank_parts_equal_the_built_steps(alg):
    # Each rank's part is generated on its own (no index of every transfer); it must be
    # what indexing the whole schedule's steps gives, at every p (folds of every size)
    # and for counts below, at and above the number of blocks.
    for p in [*range(1, 40), 64, 96, 127, 129]:
        for count in (1, 3, 7, 100, 1001):
            lazy = build_schedule("allreduce", alg, p, count)
            eager = Schedule("allreduce", alg, p, lazy.steps, count, 0, lazy.chunk_elems)
            assert "_by_rank" not in lazy.__dict__
            for r in range(p):
                assert lazy.rank_steps(r) == eager.rank_steps(r), (p, count, r)
                assert lazy.rank_step_indices(r) == eager.rank_step_indices(r), (p, count, r)
                assert lazy.rank_plan(r) == eager.rank_plan(r), (p, count, r)


def test_rabenseifner_reduce_on_six_ranks_is_mpichs():
    # MPICH's reduce_scatter_gather at p = 6 (rem 2): the odd ranks 1, 3 hand their
    # vector to 0, 2; 0, 2, 4, 5 halve (distance 1 first) and gather, finest first.
    # Root 0 gathers with no extra message; an odd root that sat out (1) first gets
    # block 0 from rank 0 and gathers in its place. 24 elements: 96 B, blocks of 24 B.
    def steps(root):
        s = build_schedule("reduce", "rabenseifner", 6, 24, root=root)
        return [sorted((t.src, t.dst, t.size_bytes) for t in st) for st in s.steps]

    common = [
        [(1, 0, 96), (3, 2, 96)],
        [(0, 2, 48), (2, 0, 48), (4, 5, 48), (5, 4, 48)],
        [(0, 4, 24), (2, 5, 24), (4, 0, 24), (5, 2, 24)],
    ]
    assert steps(0) == [*common, [(4, 0, 24), (5, 2, 24)], [(2, 0, 48)]]
    assert steps(2) == [*common, [(4, 0, 24), (5, 2, 24)], [(0, 2, 48)]]
    assert steps(1) == [*common, [(0, 1, 24)], [(4, 1, 24), (5, 2, 24)], [(2, 1, 48)]]


def test_scattered_alltoall_goes_in_mpichs_batches_of_32():
    # 70 ranks: distances 1-31 (with the rank's own block, 32), 32-63, 64-69; each batch
    # sent to r + d and received from r - d, waited for before the next.
    s = build_schedule("alltoall", "scattered", 70, 2)
    steps = s.rank_steps(5)
    assert [len(snd) for snd, _ in steps] == [31, 32, 6]
    assert [t.dst for t in steps[2][0]] == [(5 + d) % 70 for d in range(64, 70)]
    assert sorted(t.src for t in steps[2][1]) == sorted((5 - d) % 70 for d in range(64, 70))
    # Up to 32 ranks it is the direct alltoall: one batch.
    d = build_schedule("alltoall", "direct", 32, 2)
    assert build_schedule("alltoall", "scattered", 32, 2).steps == d.steps
