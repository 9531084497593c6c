"""Streamed NCCL trees: a tree's pipeline as one message per edge and way."""

from __future__ import annotations

import itertools
import sys

import networkx as nx
import pytest
import simpy

import simnet
import topologies
from simnet.network import FlowNetwork
from simnet.tree_stream import TreePipeline, pipeline_delays_s
from tests.test_streamed_rings import _cluster, _mesh
from workload.collectives import (
    ELEM_BYTES,
    build_schedule,
    nccl_tree_layout,
    nccl_tree_messages,
    stream_tree,
)


def _reduced_into(sched, r: int) -> int:
    """Bytes member ``r`` receives to reduce (its children's partial sums)."""
    return sum(
        b
        for q in range(sched.group_size)
        for _, sends in sched.rank_plan(q)
        for dst, b, reduce in sends
        if dst == r and reduce
    )


@pytest.mark.parametrize(("p", "count", "local"), [(16, 100_000, 4), (24, 12_345, 8), (6, 7, 3)])
def test_a_streamed_tree_moves_the_same_bytes_in_one_message_per_edge_and_way(p, count, local):
    steps = build_schedule("allreduce", "nccl_tree", p, count, local_size=local)
    streamed = build_schedule("allreduce", "nccl_tree", p, count, local_size=local, streamed=True)
    assert streamed.pair_bytes() == steps.pair_bytes()
    trees, k = nccl_tree_layout(p, count, local_size=local)
    assert stream_tree(streamed) == (trees, k) and stream_tree(steps) is None
    assert streamed.num_steps == 1
    for r in range(p):
        plan = streamed.rank_plan(r)
        edges = sum((parent[r] >= 0) + parent.count(r) for parent in trees)
        assert sum(len(sends) for _, sends in plan) == edges
        assert nccl_tree_messages(p, count, r, streamed=True, local_size=local) == edges
        assert nccl_tree_messages(p, count, r, local_size=local) == k * edges
        # What it receives to reduce, from its children, is what it did step by step.
        assert _reduced_into(streamed, r) == _reduced_into(steps, r) > 0
        assert sum(b for _, sends in plan for _, b, _ in sends) == steps.bytes_sent(r)


def _route(g: nx.DiGraph):
    """Hop-count shortest paths of ``g`` as directed edges (FlowNetwork's route)."""
    return lambda src, dst: tuple(itertools.pairwise(nx.shortest_path(g, src, dst)))


def test_the_pipeline_delay_of_a_two_member_tree_is_its_fill_and_drain():
    # Member 1 under member 0, one 1 GB/s link each way (1 us): 4 chunks of 1 MB. Up, the
    # leaf sends chunk j in step j (steps 0-3); down, the root sends it in step j + 1
    # (steps 1-4): both members take part in all 5 steps of 1 ms + 1 us. The stream: 4 MB
    # each way at once, 4 ms + 1 us.
    g = nx.DiGraph()
    g.add_edge(0, 1, bandwidth=1e9, latency=1e-6)
    g.add_edge(1, 0, bandwidth=1e9, latency=1e-6)
    net = FlowNetwork(simpy.Environment(), g, _route(g))
    delays = pipeline_delays_s([[-1, 0]], 4, [4_000_000], [0, 1], net)
    want = 5 * (1e-3 + 1e-6) - (4e-3 + 1e-6)
    assert delays.tolist() == [pytest.approx(want, rel=1e-12)] * 2
    # Two members on one endpoint cross no link: alpha a chunk (0 here), no delay.
    assert pipeline_delays_s([[-1, 0]], 4, [4_000_000], [0, 0], net).tolist() == [0.0, 0.0]


def test_hops_busy_together_share_their_links_in_the_delay():
    # Three members on a star through switch 9 (1 GB/s links, no latency): 1 and 2 under
    # 0. Up, both leaves send chunk j in step j over their own links into 9, then both
    # share 9 -> 0 (2 MB a step: 2 ms); down, the root sends to both in step j + 1, both
    # over 0 -> 9 (2 ms). Steps 0..k: k + 1 steps of 2 ms; the stream: 2 k ms.
    g = nx.DiGraph()
    for m in (0, 1, 2):
        g.add_edge(m, 9, bandwidth=1e9, latency=0.0)
        g.add_edge(9, m, bandwidth=1e9, latency=0.0)
    net = FlowNetwork(simpy.Environment(), g, _route(g))
    k = 3
    delays = pipeline_delays_s([[-1, 0, 0]], k, [k * 1_000_000], [0, 1, 2], net)
    assert delays.tolist() == [pytest.approx((k + 1) * 2e-3 - k * 2e-3, rel=1e-12)] * 3


def test_a_members_delay_follows_its_own_steps_not_the_slowest_hop_of_each():
    # A chain 0 <- 1 <- 2 (1's parent 0, 2's parent 1), one chunk. Links 1 <-> 2 run at
    # 1 GB/s, 0 <-> 1 at 0.1 GB/s; 1 MB a chunk, no latency. Step 0: 2 -> 1 (1 ms). Step
    # 1: 1 -> 0 (10 ms; 1 starts it at 1 ms). Step 2: 0 -> 1 (10 ms, from 11 ms). Step 3:
    # 1 -> 2 (1 ms, from 21 ms). Ends: 0 at 21 ms, 1 and 2 at 22 ms. Stream: each member's
    # longest message: 0 and 1 10 ms, 2 1 ms.
    g = nx.DiGraph()
    for a, b, bw in ((0, 1, 0.1e9), (1, 2, 1e9)):
        g.add_edge(a, b, bandwidth=bw, latency=0.0)
        g.add_edge(b, a, bandwidth=bw, latency=0.0)
    net = FlowNetwork(simpy.Environment(), g, _route(g))
    delays = pipeline_delays_s([[-1, 0, 1]], 1, [1_000_000], [0, 1, 2], net)
    assert delays.tolist() == [
        pytest.approx(21e-3 - 10e-3, rel=1e-12),
        pytest.approx(22e-3 - 10e-3, rel=1e-12),
        pytest.approx(22e-3 - 1e-3, rel=1e-12),
    ]


def test_a_late_member_holds_back_the_pipeline_by_what_its_slack_does_not_hide():
    # The chain above: steps end at 1, 11, 21 and 22 ms from a common start. The root
    # is first needed at 1 ms (step 1): 0.5 ms late is hidden, 5 ms late puts every
    # later step 4 ms on. The leaf is needed at once: 3 ms late, all 3 ms later.
    g = nx.DiGraph()
    for a, b, bw in ((0, 1, 0.1e9), (1, 2, 1e9)):
        g.add_edge(a, b, bandwidth=bw, latency=0.0)
        g.add_edge(b, a, bandwidth=bw, latency=0.0)
    net = FlowNetwork(simpy.Environment(), g, _route(g))
    pipe = TreePipeline([[-1, 0, 1]], 1, [1_000_000], [0, 1, 2], net)
    for begin, ends_ms in [
        ([0, 0, 0], [21, 22, 22]),
        ([0.5e-3, 0, 0], [21, 22, 22]),
        ([5e-3, 0, 0], [25, 26, 26]),
        ([0, 0, 3e-3], [24, 25, 25]),
    ]:
        want = [pytest.approx(ms * 1e-3, rel=1e-12) for ms in ends_ms]
        assert pipe.ends_s(begin).tolist() == want, begin


@pytest.mark.parametrize("chunks", [1, 4])
def test_a_streamed_tree_whose_slow_hops_are_at_different_heights_takes_the_step_by_step_time(
    chunks,
):
    # One tree pair over 8 GPUs, each on its own endpoint of a full mesh: no two hops ever
    # share a link, but two tree edges at different heights (0 -> 1, 5 -> 3) are slow. A
    # step's slowest hop is not every member's: the members wait for their own.
    g = _mesh(8, {(0, 1), (5, 3)})
    kw = {"local_size": 1, "channels": 1, "pipeline_chunks": chunks}
    steps = simnet.collective_time(g, "allreduce", "nccl_tree", 16 << 20, **kw)
    streamed = simnet.collective_time(g, "allreduce", "nccl_tree", 16 << 20, streamed=True, **kw)
    assert streamed == pytest.approx(steps, rel=1e-9)
    fast = simnet.collective_time(_mesh(8, set()), "allreduce", "nccl_tree", 16 << 20, **kw)
    assert steps > 1.3 * fast  # (the slow edges matter)


_RAIL = topologies.rail_optimised(3, 8, 450e9, 25e9, 0.5e-6, 1e-6)


@pytest.mark.parametrize(
    ("graph", "size", "kw"),
    [
        (_RAIL, 1 << 30, {}),  # 3 nodes of 8 GPUs: an odd number of nodes
        (
            topologies.rail_optimised(4, 8, 450e9, 25e9, 0.5e-6, 1e-6),
            1 << 30,
            {"pipeline_chunks": 8},
        ),
        (topologies.hierarchical(16, 4, 100e9, 10e9, 0.5e-6, 2e-6), 64 << 20, {}),
        (topologies.switch(16, 10e9, 1e-6), 64 << 20, {"local_size": 4}),
        (topologies.rail_optimised(4, 8, 450e9, 25e9, 0.5e-6, 1e-6), 1 << 20, {}),  # 1 chunk
        (topologies.rail_optimised(4, 8, 450e9, 25e9, 0.5e-6, 1e-6), 1 << 30, {"channels": 2}),
    ],
)
def test_a_streamed_tree_on_uncontended_hops_takes_the_step_by_step_time(graph, size, kw):
    steps = simnet.collective_time(graph, "allreduce", "nccl_tree", size, **kw)
    streamed = simnet.collective_time(graph, "allreduce", "nccl_tree", size, streamed=True, **kw)
    assert streamed == pytest.approx(steps, rel=1e-9)


@pytest.mark.parametrize("size", [1 << 20, 16 << 20])
def test_a_streamed_tree_where_hops_collide_is_an_approximation(size):
    # A k=8 fat-tree spreads flows over its cores by hashing: some hops of a step meet on
    # one link. The delay counts them sharing it for the whole step; step by step, the
    # one that ends first leaves the link to the other (8% above at 1 MiB, 5% at 16 MiB,
    # 1% at 256 MiB, as measured when this was written).
    g = topologies.fat_tree(8, 25e9, 1e-6)
    steps = simnet.collective_time(g, "allreduce", "nccl_tree", size, local_size=8)
    streamed = simnet.collective_time(
        g, "allreduce", "nccl_tree", size, local_size=8, streamed=True
    )
    assert streamed != pytest.approx(steps, rel=1e-3)  # (the case has collisions)
    assert 0.9 * steps < streamed < 1.15 * steps


def test_a_large_step_by_step_nccl_tree_run_says_streamed_trees_exist(monkeypatch):
    monkeypatch.setattr(sys.modules["simnet.simulate"], "STREAM_HINT_MESSAGES", 1000)
    res = simnet.simulate(_cluster(False, "nccl_tree"), record_series=False)
    hint = [x for x in res.assumed if "collectives.streamed_trees = true" in x]
    assert hint == [
        f"nccl_tree's trees ran step by step ({res.phases[0].messages:,} messages in the run): "
        "collectives.streamed_trees = true sends each tree edge's chunks as one message each "
        "way (as many times fewer as a tree has chunks), the same time where its hops are "
        "uncontended"
    ]


def test_the_stream_carries_a_trees_share_in_elements():
    # 10 elements over 2 trees of 1 chunk: 5 elements (20 bytes) a tree, each way.
    sched = build_schedule("allreduce", "nccl_tree", 2, 10, streamed=True, channels=1)
    sends = [s for r in range(2) for _, ss in sched.rank_plan(r) for s in ss]
    assert sorted(b for _, b, _ in sends) == [5 * ELEM_BYTES] * 4
