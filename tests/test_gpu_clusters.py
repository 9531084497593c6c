"""GPU-cluster building blocks: rail-optimised nodes, dragonfly, NCCL-style collectives.

Each uncontended case is checked against its closed form; the routes against the
fabric's rule (PXN on rails, minimal routing on a dragonfly).
"""

from __future__ import annotations

import itertools

import pytest

import simnet
import topologies
from simnet.config import load_config
from simnet.simulate import build_policy, build_topology, program_time
from workload.collectives import nccl_ring_orders
from workload.ops import Collective

NVLINK = 300e9  # bytes/s per GPU and direction (A100)
NIC = 25e9  # 200 Gb/s HDR, bytes/s
GIB = 1 << 30


# ---------------------------------------------------------------- rail-optimised


def test_rail_optimised_structure():
    g = topologies.rail_optimised(3, 4, NVLINK, NIC, 0.2e-6, 1e-6)
    assert g.graph["num_endpoints"] == 12
    assert g.number_of_edges() == 4 * 12
    # GPU 6 is GPU 2 of node 1: its NVLink to nvl1, its NIC to rail 2.
    assert set(g.successors(6)) == {"nvl1", "leaf2"}
    assert g.edges[6, "nvl1"]["bandwidth"] == NVLINK
    assert g.edges["leaf2", 6]["bandwidth"] == NIC
    assert sorted(n for n in g.predecessors("leaf2")) == [2, 6, 10]


def test_rail_optimised_routes_cross_nvlink_first_as_pxn():
    g = topologies.rail_optimised(2, 4, NVLINK, NIC, 0.2e-6, 1e-6)
    r = topologies.Router(g)
    assert r.path(0, 3) == ((0, "nvl0"), ("nvl0", 3))  # same node: NVLink
    assert r.path(1, 5) == ((1, "leaf1"), ("leaf1", 5))  # same rail: the NIC only
    # GPU 0 of node 0 to GPU 3 of node 1: over NVLink to GPU 3 of node 0, then rail 3.
    assert r.path(0, 7) == ((0, "nvl0"), ("nvl0", 3), (3, "leaf3"), ("leaf3", 7))
    assert topologies.path_latency_s(g, r.path(0, 7)) == pytest.approx(2.4e-6)


@pytest.mark.parametrize(
    ("nodes", "gpus", "channels"), [(2, 8, 8), (4, 8, 8), (4, 4, 2), (3, 2, 2)]
)
def test_nccl_ring_allreduce_on_rails_is_nic_bound(nodes, gpus, channels):
    # Every channel's inter-node hop is on its own rail, so each NIC carries one ring:
    # 2 (p - 1) steps of S / (channels p) bytes at the NIC rate, plus each step's
    # latency (the slowest route of a step: two NIC hops, and two NVLink hops on the
    # PXN way for the channels that leave a node from another GPU than their rail's).
    lat_nvl, lat_nic = 0.2e-6, 1e-6
    g = topologies.rail_optimised(nodes, gpus, NVLINK, NIC, lat_nvl, lat_nic)
    p = nodes * gpus
    size = GIB - GIB % (4 * channels * p)  # whole float32 blocks
    t = simnet.collective_time(
        g, "allreduce", "nccl_ring", size, local_size=gpus, channels=channels
    )
    step_latency = 2 * lat_nic + (2 * lat_nvl if gpus > 1 else 0)
    want = 2 * (p - 1) * (step_latency + size / (channels * p) / NIC)
    assert t == pytest.approx(want, rel=1e-9)
    busbw = 2 * (p - 1) / p * size / t
    assert busbw == pytest.approx(channels * NIC, rel=0.02)


def test_plain_ring_on_rails_uses_one_nic_per_node():
    # A rank-order ring leaves every node through one GPU: 1 NIC's worth, 8x slower.
    g = topologies.rail_optimised(2, 8, NVLINK, NIC)
    p = 16
    t = simnet.collective_time(g, "allreduce", "ring", GIB)
    assert t == pytest.approx(2 * (p - 1) / p * GIB / NIC, rel=1e-9)
    t8 = simnet.collective_time(g, "allreduce", "nccl_ring", GIB, local_size=8)
    assert t / t8 == pytest.approx(8, rel=1e-9)


def test_nccl_ring_orders_use_every_rail_once():
    g = topologies.rail_optimised(4, 8, NVLINK, NIC)
    r = topologies.Router(g)
    rails_used = []
    for order in nccl_ring_orders(32, 8, 8):
        hops = zip(order, order[1:] + order[:1], strict=True)
        rails = {
            v for a, b in hops if a // 8 != b // 8 for _, v in r.path(a, b) if "leaf" in str(v)
        }
        rails_used.append(rails)
    assert rails_used == [{f"leaf{c}"} for c in range(8)]


# ---------------------------------------------------------------- NCCL tree


def test_nccl_tree_two_ranks_pipelines_the_vector_up_and_down_one_chain():
    # Two ranks, one channel: both trees on one chain 0 <- 1 (NCCL runs a channel's two
    # trees on the same GPUs and NICs), each carrying half the vector in k chunks of
    # S / 2k. Up 1 -> 0 in steps 0..k-1, down 0 -> 1 in steps 1..k, both trees at once:
    # k + 1 steps of S / k bytes.
    bw = 10e9
    g = topologies.switch(2, bw)
    for k in (1, 4, 16):
        t = simnet.collective_time(
            g, "allreduce", "nccl_tree", 1 << 24, channels=1, pipeline_chunks=k
        )
        assert t == pytest.approx((k + 1) * (1 << 24) / k / bw, rel=1e-9)


def test_nccl_tree_pipeline_fill_costs_steps():
    # Deeper pipelines amortise the fill and drain: on a chain of 4 ranks more chunks
    # bring the time down towards its bandwidth bound.
    g = topologies.switch(4, 10e9)
    times = [
        simnet.collective_time(g, "allreduce", "nccl_tree", 1 << 24, channels=1, pipeline_chunks=k)
        for k in (1, 4, 64)
    ]
    assert times[0] > times[1] > times[2]


# ---------------------------------------------------------------- dragonfly


def test_dragonfly_structure_and_gateways():
    g = topologies.dragonfly(5, 2, 2, 10e9, 20e9, 5e9, 0.1e-6, 0.2e-6, 1e-6)
    assert g.graph["num_endpoints"] == 20
    n, groups, a = 20, 5, 2
    assert g.number_of_edges() == 2 * n + groups * a * (a - 1) + 3 * groups * (groups - 1)
    # Group 0's port to group j is (j - 1) mod 5, dealt round-robin to 2 routers.
    assert [topologies.dragonfly_gateway(5, 2, 0, j) for j in range(1, 5)] == [0, 1, 0, 1]
    assert g.has_edge("r0.1", "gw0.2") and g.has_edge("gw0.2", "gw2.0")
    assert g.edges["gw0.2", "gw2.0"]["latency"] == 1e-6
    assert g.edges["gw0.2", "gw2.0"]["bandwidth"] == 5e9


def test_dragonfly_routes_are_minimal_and_unique():
    g = topologies.dragonfly(5, 2, 2, 10e9, 10e9, 10e9)  # equal latencies: hops decide
    r = topologies.Router(g)
    for s, d in itertools.permutations(range(20), 2):
        route = r.path(s, d)
        globals_ = [e for e in route if str(e[0]).startswith("gw") and str(e[1]).startswith("gw")]
        same_group = s // 4 == d // 4
        assert len(globals_) == (0 if same_group else 1), (s, d, route)
        assert r.num_paths(s, d) == 1
    # Endpoint 2 (router 1 of group 0) to 13 (router 0 of group 3): local hop to the
    # gateway r0.0 (port 2), the global link, then r3.0 holds group 3's port to group 0.
    assert [v for _, v in r.path(2, 13)] == ["r0.1", "r0.0", "gw0.3", "gw3.0", "r3.1", "r3.0", 13]


def test_dragonfly_global_link_is_shared_and_ring_is_uncontended():
    bw = 10e9
    g = topologies.dragonfly(2, 2, 2, bw, bw, bw)
    size = 1 << 24
    # Two senders of group 0 to two receivers of group 1 share the one global link.
    assert simnet.message_time(g, 0, 4, size) == pytest.approx(size / bw)

    def two_flows(rank: int) -> list:
        from workload.program import ProgramBuilder

        b = ProgramBuilder()
        pairs = {0: 4, 2: 6}
        if rank in pairs:
            b.send(pairs[rank], size // 4, tag=1, group="world")
        elif rank in pairs.values():
            b.recv(rank - 4, size // 4, tag=1, group="world")
        return b.ops

    assert program_time(g, two_flows) == pytest.approx(2 * size / bw)
    # A rank-order ring crosses each link once per direction: no contention.
    p = 8
    t = simnet.collective_time(g, "allreduce", "ring", size)
    assert t == pytest.approx(2 * (p - 1) / p * size / bw, rel=1e-9)


# ---------------------------------------------------------------- configuration


def test_config_builds_gpu_topologies_and_policy():
    cfg = load_config(
        {
            "distributed": {"num_nodes": 16, "bandwidth_limit_gb_per_s": 300},
            "topology": {
                "type": "rail_optimised",
                "group_size": 8,
                "inter_bandwidth_gb_per_s": 25,
            },
            "collectives": {"algorithm": "nccl_ring", "channels": 4},
        }
    )
    g, assumed = build_topology(cfg)
    assert g.graph["name"] == "rail_optimised"
    assert g.graph["params"]["num_nodes"] == 2
    assert g.graph["params"]["nic_bandwidth_bytes_per_s"] == 25e9
    assert assumed == []
    policy = build_policy(cfg)
    assert (policy.local_size, policy.channels, policy.fixed) == (8, 4, "nccl_ring")

    cfg = load_config(
        {
            "distributed": {"num_nodes": 24, "bandwidth_limit_gb_per_s": 25},
            "topology": {
                "type": "dragonfly",
                "routers_per_group": 3,
                "endpoints_per_router": 2,
                "global_bandwidth_gb_per_s": 12.5,
                "global_latency_us": 2,
            },
        }
    )
    g, _ = build_topology(cfg)
    assert g.graph["params"]["num_groups"] == 4
    assert g.edges["gw0.1", "gw1.0"]["bandwidth"] == 12.5e9
    assert g.edges["gw0.1", "gw1.0"]["latency"] == pytest.approx(2e-6)


@pytest.mark.parametrize(
    ("topology", "message"),
    [
        ({"type": "dragonfly"}, "a dragonfly needs both"),
        (
            {"type": "dragonfly", "routers_per_group": 3, "endpoints_per_router": 3},
            r"distributed.num_nodes=16 must be a multiple of topology.routers_per_group \* "
            r"endpoints_per_router = 9",
        ),
        ({"type": "rail_optimised", "group_size": 5}, "group_size=5 must divide"),
    ],
)
def test_config_errors_name_the_field(topology, message):
    with pytest.raises(Exception, match=message):
        load_config({"distributed": {"num_nodes": 16}, "topology": topology})


def test_nccl_algorithm_on_groups_not_whole_nodes_says_so():
    from simnet.executor import AlgorithmPolicy
    from workload.ops import Collective

    policy = AlgorithmPolicy(fixed="nccl_ring", local_size=8)
    op = Collective("allreduce", "dp", 1024)
    assert policy.choose(op, 12) == "nccl_ring"
    assert policy.params(12)["nccl_local_size"] is None
    assert list(policy.fallbacks) == [
        "allreduce: 'nccl_ring' over 12 ranks, which nodes of 8 GPUs do not divide: laid "
        "out as one node"
    ]


def test_nccl_groups_are_laid_out_by_where_their_ranks_sit():
    # 4 nodes of 8 GPUs. A group of one GPU per node (a tensor group strided over the
    # nodes) is 4 nodes of 1; a group inside one node is one node; a group of 2 GPUs on
    # each of 2 nodes is 2 nodes of 2; ranks interleaved over nodes fit no layout.
    from simnet.executor import AlgorithmPolicy, SimExecutor
    from workload.program import Workload

    wl = Workload("t", 32, {}, {"world": [tuple(range(32))]}, [])
    ex = SimExecutor(wl, lambda env: None, list(range(32)), policy=AlgorithmPolicy(local_size=8))
    assert ex._node_layout([3, 11, 19, 27]) == (1, None)
    assert ex._node_layout([0, 1, 2, 3]) == (4, None)
    assert ex._node_layout([6, 7, 8, 9]) == (2, None)
    # Interleaved over two nodes: 2 a node, taken node by node (members 0, 2 on node 0).
    assert ex._node_layout([0, 8, 1, 9]) == (2, (0, 2, 1, 3))
    assert ex._node_layout([9, 0, 8, 1]) == (2, (0, 2, 1, 3))
    assert ex._node_layout([0, 1, 8]) == ((2, 1), None)  # 2 GPUs on node 0, 1 on node 1
    assert ex._node_layout([8, 0, 1]) == ((1, 2), None)
    assert ex._node_layout([0, 8, 1]) == ((2, 1), (0, 2, 1))
    op = Collective("allreduce", "tp", 4096, algorithm="nccl_ring")
    sched, alg = ex.schedule(op, 4, [3, 11, 19, 27])
    assert alg == "nccl_ring" and sched.total_bytes == 2 * 3 * 4096 * 4  # one ring of 4
    assert not ex.policy.fallbacks
    # Each group's layout is its own, however its list is made (a list freed and another
    # made at its address is another group).
    op8 = Collective("allreduce", "dp", 4096, algorithm="nccl_ring")
    a, _ = ex.schedule(op8, 8, list(range(8)))  # 1 node of 8
    b, _ = ex.schedule(op8, 8, [0, 8, 1, 9, 2, 10, 3, 11])  # interleaved: 2 nodes of 4
    c, _ = ex.schedule(op8, 8, [0, 1, 2, 3, 8, 9, 10, 11])  # the same GPUs, node-major
    assert a is not b and b is not c and not ex.policy.fallbacks
    # The interleaved group's rings are the node-major group's, member by member: its
    # members 0, 2, 4, 6 are node 0's GPUs 0-3, its members 1, 3, 5, 7 node 1's.
    to_major = {0: 0, 2: 1, 4: 2, 6: 3, 1: 4, 3: 5, 5: 6, 7: 7}
    for m in range(8):
        mine = b.rank_plan(m)
        theirs = c.rank_plan(to_major[m])
        assert [
            (sorted(to_major[x] for x in recv), sorted((to_major[d], *rest) for d, *rest in sends))
            for recv, sends in mine
        ] == [(sorted(recv), sorted(sends)) for recv, sends in theirs]
    assert list(ex.policy.layouts) == [
        "allreduce nccl_ring over 4 ranks: 4 nodes of 1, 1 channel (the default), a ring per "
        "channel",
        "allreduce nccl_ring over 8 ranks: one node of 8, 8 channels (the default), a ring "
        "per channel",
        "allreduce nccl_ring over 8 ranks: 2 nodes of 4 (its ranks taken node by node), 4 "
        "channels (the default), a ring per channel",
        "allreduce nccl_ring over 8 ranks: 2 nodes of 4, 4 channels (the default), a ring "
        "per channel",
    ]


def test_nccl_group_spread_unevenly_over_nodes_is_laid_out_node_by_node():
    # 16 ranks on nodes of 8: 8 on node 0, 4 on node 1, 4 on node 2. NCCL's rings still
    # run node by node, each node's GPUs in turn, with the channels the smallest node has
    # GPUs for; before, such a group was laid out as one node with one channel.
    from simnet.executor import AlgorithmPolicy, SimExecutor
    from workload.collectives import nccl_ring_orders, schedule_for
    from workload.program import Workload

    placement = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19]
    wl = Workload("t", 16, {}, {"world": [tuple(range(16))]}, [])
    ex = SimExecutor(wl, lambda env: None, placement, policy=AlgorithmPolicy(local_size=8))
    op = Collective("allreduce", "dp", 1 << 20, algorithm="nccl_ring")
    sched, alg = ex.schedule(op, 16, list(range(16)))
    assert alg == "nccl_ring"
    want = schedule_for(
        "allreduce", "nccl_ring", 16, 1 << 20, params={"nccl_node_sizes": (8, 4, 4)}
    )
    assert [sched.rank_plan(r) for r in range(16)] == [want.rank_plan(r) for r in range(16)]
    # Channel c enters each node at its GPU c mod (its GPUs): 4 channels, node 0's GPUs
    # 0-7, node 1's 8-11, node 2's 12-15.
    assert nccl_ring_orders(16, node_sizes=[8, 4, 4])[1] == [
        1, 2, 3, 4, 5, 6, 7, 0, 9, 10, 11, 8, 13, 14, 15, 12,
    ]  # fmt: skip
    assert len(nccl_ring_orders(16, node_sizes=[8, 4, 4])) == 4
    assert not ex.policy.fallbacks
    assert list(ex.policy.layouts) == [
        "allreduce nccl_ring over 16 ranks: 3 nodes of 8+4+4, 4 channels (the default), a "
        "ring per channel"
    ]


def test_nccl_ring_over_uneven_nodes_is_its_closed_form():
    # 6 GPUs of node 0 and 2 of node 1 on a rail-optimised pair of 8-GPU nodes (NVLink
    # 300 GB/s, NICs 25 GB/s, no latency): 2 channels (the smaller node's GPUs), channel
    # c between the nodes on rail c both ways, so each ring carries half the vector over
    # an uncontended NIC: 2 (p - 1) steps of S / (2 p) at 25 GB/s, 7/8 S / B; laid out as
    # one node (one ring, both node crossings on rail 0) it took twice that.
    from simnet.executor import AlgorithmPolicy, SimExecutor
    from simnet.network import FlowNetwork
    from workload.program import Phase, ProgramBuilder, Workload

    g = topologies.rail_optimised(2, 8, 300e9, 25e9, 0.0, 0.0)
    router = topologies.Router(g)
    size = 64 << 20

    def program(rank: int) -> list:
        b = ProgramBuilder()
        b.collective("allreduce", "world", size // 4)
        return b.ops

    wl = Workload("t", 8, {}, {"world": [tuple(range(8))]}, [Phase("p", program)])
    ex = SimExecutor(
        wl,
        lambda env: FlowNetwork(env, g, router.path),
        [0, 1, 2, 3, 4, 5, 8, 9],
        policy=AlgorithmPolicy(fixed="nccl_ring", local_size=8),
        eager_threshold_bytes=-1,
    )
    t = ex.run_phase().makespan_s
    assert t == pytest.approx(7 / 8 * size / 25e9, rel=1e-9)
    assert list(ex.policy.layouts) == [
        "allreduce nccl_ring over 8 ranks: 2 nodes of 6+2, 2 channels (the default), a ring "
        "per channel"
    ]


def test_node_sizes_are_checked():
    from workload.collectives import build_schedule

    with pytest.raises(ValueError, match=r"node_sizes must add up to group_size=8 \(got \[6, 1\]"):
        build_schedule("allreduce", "nccl_ring", 8, 64, node_sizes=[6, 1])
    with pytest.raises(ValueError, match="node_sizes must be integers >= 1"):
        build_schedule("allreduce", "nccl_tree", 8, 64, node_sizes=[8, 0])
    with pytest.raises(ValueError, match="give local_size or node_sizes, not both"):
        build_schedule("allreduce", "nccl_ring", 8, 64, local_size=4, node_sizes=[6, 2])
    with pytest.raises(ValueError, match="node_sizes is only used by algorithm"):
        build_schedule("allreduce", "ring", 8, 64, node_sizes=[6, 2])
    # A tree pair over nodes of 6 and 2: each node's chain from its head (GPUs 0 and 6),
    # the heads joined, node 1's the root of one tree and node 0's of the other.
    tree = build_schedule("allreduce", "nccl_tree", 8, 64, channels=1, node_sizes=[6, 2])
    assert {d for _, sends in tree.rank_plan(6) for d, *_ in sends} == {0, 7}
    assert {d for _, sends in tree.rank_plan(7) for d, *_ in sends} == {6}
    assert {d for _, sends in tree.rank_plan(0) for d, *_ in sends} == {1, 6}


def test_nccl_channel_limits_are_the_configurations():
    from workload.collectives import MAX_NCCL_CHANNELS, MAX_PIPELINE_CHUNKS, schedule_for

    g = topologies.rail_optimised(2, 4, 100e9, 25e9, 0.5e-6, 1e-6)
    with pytest.raises(ValueError, match="channels must be an integer from 1 to 64"):
        simnet.collective_time(g, "allreduce", "nccl_ring", 1 << 20, channels=100)
    with pytest.raises(ValueError, match="pipeline_chunks must be an integer from 1 to 1024"):
        schedule_for("allreduce", "nccl_tree", 8, 1024, params={"pipeline_chunks": 1025})
    assert MAX_NCCL_CHANNELS == 64 and MAX_PIPELINE_CHUNKS == 1024
    for key, value, most in (("channels", 65, 64), ("pipeline_chunks", 1025, 1024)):
        with pytest.raises(Exception, match=f"less than or equal to {most}"):
            load_config({"collectives": {key: value}})


def _rails(**extra: dict) -> dict:
    """2 nodes x 4 GPUs on rails, ResNet-152's allreduces as NCCL rings."""
    cfg = {
        "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 100},
        "topology": {"type": "rail_optimised", "group_size": 4},
        "collectives": {"algorithm": "nccl_ring"},
        "workload": {"name": "resnet152", "world_size": 8, "scale": 0.01},
    }
    for section, values in extra.items():
        cfg.setdefault(section, {}).update(values)
    return cfg


def _said(res: simnet.SimResult, word: str) -> list[str]:
    from simnet.output import summary_text

    return [line for line in summary_text(res).splitlines() if word in line]


def test_node_order_is_checked_and_read_by_the_nccl_algorithms_only():
    from workload.collectives import build_schedule

    with pytest.raises(ValueError, match=r"node_order must be a permutation of range\(4\)"):
        build_schedule("allreduce", "nccl_ring", 4, 64, local_size=2, node_order=[0, 1, 1, 3])
    with pytest.raises(ValueError, match="node_order is only used by algorithm"):
        build_schedule("allreduce", "ring", 4, 64, node_order=[0, 2, 1, 3])
    # Members 0, 2 on one node, 1, 3 on the other: channel 0's ring runs 0, 2, 1, 3.
    s = build_schedule("allreduce", "nccl_ring", 4, 64, local_size=2, node_order=[0, 2, 1, 3])
    assert {d for _, sends in s.rank_plan(0) for d, *_ in sends} == {2, 3}  # two rings
    tree = build_schedule(
        "allreduce", "nccl_tree", 4, 64, local_size=2, channels=1, node_order=[0, 2, 1, 3]
    )
    # Each node's chain: head then its other GPU; the heads 0 and 1 join the trees.
    assert {d for _, sends in tree.rank_plan(2) for d, *_ in sends} == {0}


@pytest.mark.parametrize("algorithm", ["nccl_ring", "nccl_tree"])
def test_nccl_layout_follows_the_gpus_not_the_rank_numbers(algorithm):
    # The same 8 GPUs, ranks numbered node-major or alternating between the 2 nodes:
    # NCCL orders a communicator's GPUs by node whatever their ranks, so the time is the
    # same; before, the alternating group was laid out as one node with one channel
    # (about 2x slower).
    major = simnet.simulate(_rails(collectives={"algorithm": algorithm}), record_series=False)
    alternating = _rails(
        collectives={"algorithm": algorithm}, topology={"placement": [0, 4, 1, 5, 2, 6, 3, 7]}
    )
    res = simnet.simulate(alternating, record_series=False)
    assert res.iteration_time_s == pytest.approx(major.iteration_time_s, rel=1e-9)
    kind = "tree pair" if algorithm == "nccl_tree" else "ring"
    assert [line.strip() for line in _said(res, "node by node")] == [
        f"assumed: allreduce {algorithm} over 8 ranks: 2 nodes of 4 (its ranks taken node "
        f"by node), 4 channels (the default), a {kind} per channel"
    ]
    assert not _said(res, "one node")
    sent = {
        r: sum(b for p in res.phases for (s, _), b in p.pair_bytes.items() if s == r)
        for r in range(8)
    }
    sent_major = {
        r: sum(b for p in major.phases for (s, _), b in p.pair_bytes.items() if s == r)
        for r in range(8)
    }
    # (blocks split unevenly by member index: a rank's bytes move by a few elements)
    assert sum(sent.values()) == sum(sent_major.values())
    assert sorted(sent.values()) == pytest.approx(sorted(sent_major.values()), abs=64)


def test_host_costs_given_but_not_paid_by_nccl_collectives_are_named():
    plain = simnet.simulate(_rails(), record_series=False)
    costs = {"collectives": {"gamma_s_per_byte": 1e-9, "step_latency_us": 50}}
    res = simnet.simulate(_rails(**costs, network={"send_overhead_us": 5}), record_series=False)
    # Its collectives are all NCCL rings: the host costs change nothing ...
    assert res.iteration_time_s == plain.iteration_time_s
    # ... and the summary says so, naming each.
    (line,) = _said(res, "not paid")
    assert line.strip() == (
        "assumed: collectives.gamma_s_per_byte, collectives.step_latency_us, "
        "network.send_overhead_us: not paid by the collectives run as NCCL runs them "
        "(GPU kernels), only by the messages MPI sends"
    )
    assert not _said(plain, "not paid")


def test_the_summary_names_the_library_that_ran_the_collectives():
    for library, said in (
        (None, "(run as NCCL runs them: the default)"),
        ("nccl", "(run as NCCL runs them: collectives.library = nccl)"),
        ("mpi", "(run as MPI runs them: collectives.library = mpi)"),
    ):
        extra = {"collectives": {"library": library}} if library else {}
        res = simnet.simulate(_rails(**extra), record_series=False)
        (line,) = _said(res, "algorithms:")
        assert line.endswith(said), line
        assert res.phases[0].library == ("mpi" if library == "mpi" else "nccl")


def test_an_alltoall_that_falls_back_to_mpi_is_not_said_to_run_as_nccl():
    # DLRM under the default library with nccl_ring: its allreduces run as NCCL runs
    # them, its alltoall (no NCCL schedule: MPI's) as MPI runs it, and pays MPI's step
    # latency; the phase was labelled "nccl", its alltoall said to run as NCCL's.
    cfg = _rails(workload={"name": "dlrm", "world_size": 8}, collectives={"step_latency_us": 50})
    mixed = simnet.simulate(cfg, record_series=False)
    p = mixed.phases[0]
    assert p.library == "nccl+mpi" and p.nccl_algorithms == {"allreduce": ["nccl_ring"]}
    assert p.algorithms == {"allreduce": ["nccl_ring"], "alltoall": ["scattered"]}
    (line,) = _said(mixed, "algorithms:")
    assert line.endswith(
        "(allreduce=nccl_ring run as NCCL runs them, the others as MPI runs them: the default)"
    )
    assert (
        "collectives.step_latency_us: not paid by the collectives run as NCCL runs them (GPU "
        "kernels), only by the collectives run as MPI runs them (alltoall=scattered) and the "
        "messages MPI sends"
    ) in mixed.assumed
    # Its alltoall pays the step latency, as under collectives.library = mpi it would.
    free = simnet.simulate({**cfg, "collectives": {"algorithm": "nccl_ring"}}, record_series=False)
    assert mixed.iteration_time_s > free.iteration_time_s
    nccl = simnet.simulate(_rails(workload={"name": "dlrm", "world_size": 8},
                                  collectives={"step_latency_us": 50, "library": "nccl"}),
                           record_series=False)  # fmt: skip
    assert nccl.phases[0].library == "nccl"
    assert nccl.phases[0].nccl_algorithms == {"allreduce": ["nccl_ring"], "alltoall": ["scattered"]}


def test_a_library_that_ran_nothing_is_not_blamed():
    # library nccl, but the program names every algorithm (the ring trainer's rings):
    # they run as MPI messages because the program names them, not because of the library.
    doc = {"distributed": {"num_nodes": 4}, "topology": {"type": "switch"},
           "collectives": {"library": "nccl"}}  # fmt: skip
    (line,) = _said(simnet.simulate(doc, record_series=False), "algorithms:")
    assert line.endswith(
        "(run as MPI runs them: the program names their algorithms, sent as MPI messages)"
    )


def test_topology_fields_the_type_does_not_read_are_named():
    extra = {"topology": {"k": 4, "dims": [2, 4], "global_latency_us": 3, "bidirectional": False}}
    res = simnet.simulate(_rails(**extra), record_series=False)
    (line,) = _said(res, "not used by")
    assert "not used by a rail_optimised topology: topology.bidirectional, topology.dims, " \
        "topology.global_latency_us, topology.k (" in line  # fmt: skip
    assert res.iteration_time_s == simnet.simulate(_rails(), record_series=False).iteration_time_s
    topology = {"type": "torus", "dims": [4, 4], "num_nodes": 99, "permutations": [1]}
    torus = {"distributed": {"num_nodes": 16}, "topology": topology,
             "workload": {"name": "dlrm", "world_size": 16}}  # fmt: skip
    (line,) = _said(simnet.simulate(torus, record_series=False), "not used by")
    assert "not used by a torus topology: topology.num_nodes, topology.permutations (" in line
    # The fields of its own type, and values equal to the defaults, are not named.
    own = {"topology": {"intra_latency_us": 1, "oversubscription": 1.0}}
    assert not _said(simnet.simulate(_rails(**own), record_series=False), "not used by")


def test_a_latency_under_a_nanosecond_is_pointed_out():
    res = simnet.simulate(_rails(topology={"inter_latency_us": 1e-6}), record_series=False)
    (line,) = _said(res, "less than any link's latency")
    assert line.strip() == (
        "assumed: topology.inter_latency_us = 1e-06 us is 1 ps, less than any link's "
        "latency: latencies here are in microseconds"
    )
    assert not _said(simnet.simulate(_rails(), record_series=False), "less than any link")


def test_nccl_layouts_and_channels_are_said():
    res = simnet.simulate(_rails(), record_series=False)
    assert _said(res, "channel") == [
        "  assumed: allreduce nccl_ring over 8 ranks: 2 nodes of 4, 4 channels (the default), "
        "a ring per channel"
    ]
    res = simnet.simulate(_rails(collectives={"channels": 2}), record_series=False)
    assert "2 nodes of 4, 2 channels, a ring per channel" in _said(res, "channel")[0]
    # Ranks 0-3 on node 0, 4-5 on node 1, 6-7 on node 2: 3 nodes, 2 channels.
    uneven = _rails(topology={"placement": [0, 1, 2, 3, 4, 5, 8, 9]})
    uneven["distributed"]["num_nodes"] = 12
    said = _said(simnet.simulate(uneven, record_series=False), "channel")
    assert [line.strip() for line in said] == [
        "assumed: allreduce nccl_ring over 8 ranks: 3 nodes of 4+2+2, 2 channels (the "
        "default), a ring per channel",
    ]
    # A group that is one whole node: a channel per GPU, as on many nodes.
    one = _rails()
    one["distributed"]["num_nodes"] = one["workload"]["world_size"] = 4
    said = _said(simnet.simulate(one, record_series=False), "channel")
    assert "allreduce nccl_ring over 4 ranks: one node of 4, 4 channels (the default)" in said[0]


@pytest.mark.parametrize("algorithm", ["ring", "nccl_ring"])
def test_a_tiny_ring_allreduce_pays_every_step_at_the_slowest_hop_whatever_its_blocks(algorithm):
    # 2 nodes x 2 GPUs: hops 0.5 + 0.5 us inside a node, 0.5 + 1 + 1 + 0.5 us between
    # nodes (NVLink to the switch and back, NIC to the rail and back). collective_time's
    # steps wait for their receivers, so 6 steps cost 6 x 3 us however many of the 4
    # blocks are empty (a 4-byte vector has 3 empty ones; they cost 1-2 us less each).
    g = topologies.rail_optimised(2, 2, 300e9, 25e9, 0.5e-6, 1e-6)
    kw = {"channels": 1} if algorithm == "nccl_ring" else {}
    times = [simnet.collective_time(g, "allreduce", algorithm, s, **kw) for s in (4, 8, 12, 16)]
    assert times == pytest.approx([6 * 3e-6] * 4, abs=5e-9)


def test_pipeline_chunks_under_nccl_ring_is_said_to_be_unused():
    # Only nccl_tree cuts its trees' shares into chunks: under nccl_ring the setting
    # changes nothing, and the note said only NCCL algorithms read it (nccl_ring ran).
    base = {
        "distributed": {"num_nodes": 16, "bandwidth_limit_gb_per_s": 25},
        "topology": {"type": "rail_optimised", "group_size": 8},
        "workload": {"name": "resnet50", "scale": 0.01},
    }
    ring = {**base, "collectives": {"algorithm": "nccl_ring"}}
    chunked = {**base, "collectives": {"algorithm": "nccl_ring", "pipeline_chunks": 4}}
    plain, res = simnet.simulate(ring), simnet.simulate(chunked)
    assert res.iteration_time_s == plain.iteration_time_s
    said = [a for a in res.assumed if a.startswith("collectives.pipeline_chunks")]
    assert said == [
        "collectives.pipeline_chunks: not used, only nccl_tree reads them (its chunks per "
        "tree) and it did not run"
    ]
    assert not any(a.startswith("collectives.pipeline_chunks") for a in plain.assumed)


@pytest.mark.parametrize(
    ("p", "count", "kw"),
    [
        (16, 1 << 20, {"local_size": 8}),
        (16, 1000, {"local_size": 4, "channels": 3}),
        (12, 7, {"node_sizes": [8, 4]}),
        (8, 5, {}),
        (24, 100_000, {"local_size": 8, "pipeline_chunks": 3}),
        (16, 4096, {"local_size": 8, "node_order": [*range(0, 16, 2), *range(1, 16, 2)]}),
        (5, 1 << 22, {"node_sizes": [2, 2, 1]}),
        (16, 0, {"local_size": 8}),
    ],
)
def test_nccl_tree_messages_are_its_schedules_without_making_it(p, count, kw):
    # The memory check counts a member's nccl_tree messages from the trees alone (making
    # the schedules of 4,096 ranks took it 34 s); each is what the rank plan holds.
    from workload.collectives import build_schedule, nccl_tree_messages

    sched = build_schedule("allreduce", "nccl_tree", p, count, **kw)
    want = [sum(len(sends) for _, sends in sched.rank_plan(m)) for m in range(p)]
    assert [nccl_tree_messages(p, count, m, **kw) for m in range(p)] == want
    assert count == 0 or min(want) > 0


def test_the_memory_check_counts_nccl_trees_without_their_schedules(monkeypatch):
    import workload.collectives as coll
    from simnet.config import load_config
    from simnet.simulate import _rank0_counts, build_workload

    cfg = load_config(_rails(collectives={"algorithm": "nccl_tree"}))
    wl = build_workload(cfg)
    counted = _rank0_counts(cfg, wl)
    real = coll.schedule_for

    def refuse_trees(op, alg, *a, **k):
        assert alg != "nccl_tree", "an nccl_tree schedule made to count its messages"
        return real(op, alg, *a, **k)

    monkeypatch.setattr(coll, "schedule_for", refuse_trees)
    assert _rank0_counts(cfg, wl) == counted
    # (ResNet-152's ten allreduces over 8 ranks as 2 nodes of 4: 4 channels, tree pairs)
    assert counted.messages > 0 and counted.ring_run_messages == 0


def test_the_memory_check_counts_uneven_groups_as_they_are_laid_out():
    # 12 ranks on 8-GPU nodes: the run lays the allreduces out as 2 nodes of 8+4 with 4
    # channels; the memory check counted them as one node with 1 channel (a quarter of
    # the messages) when it did not know where the ranks sit.
    from simnet.config import load_config
    from simnet.simulate import _rank0_counts, build_workload

    cfg = {
        "distributed": {"num_nodes": 16, "bandwidth_limit_gb_per_s": 100},
        "topology": {"type": "rail_optimised", "group_size": 8},
        "collectives": {"algorithm": "nccl_ring"},
        "workload": {"name": "resnet152", "world_size": 12, "scale": 0.01},
    }
    c = load_config(cfg)
    counted = _rank0_counts(c, build_workload(c))
    res = simnet.simulate(cfg, record_series=False)
    # (a ring's every member sends as many messages)
    assert counted.messages * 12 == sum(p.messages for p in res.phases) == 12 * 880


def test_collective_time_lays_out_nodes_that_do_not_divide_the_ranks():
    # 12 endpoints of a 25 GB/s switch as nodes of 8: 8 + 4, 4 rings each carrying a
    # quarter, sharing every endpoint's link: 2 (p - 1) steps of S / p at 25 GB/s plus 2
    # hops of 1 us, as one ring; it was refused ("laid out as one node").
    g = topologies.switch(12, bandwidth_bytes_per_s=25e9, latency_s=1e-6)
    size = 3 << 20  # (786,432 elements: 4 channels of 12 equal blocks)
    t = simnet.collective_time(g, "allreduce", "nccl_ring", size, local_size=8)
    assert t == pytest.approx(22 * (size / 12 / 25e9 + 2e-6), rel=1e-9)
