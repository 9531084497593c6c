"""What-if scenarios: degraded and failed links, stragglers and compute noise."""

from __future__ import annotations

import numpy as np
import pytest

import simnet
import topologies
from simnet import whatif
from simnet.config import ConfigError, load_config
from simnet.executor import SimExecutor
from simnet.network import FlowNetwork
from simnet.whatif import ComputeNoise
from workload.program import Phase, ProgramBuilder, Workload

MSG = 808960 * 4  # bytes of one GPT-2 activation message (see test_calibrate)
BW = 10e9  # bytes/s: 10 GB/s
LAT = 5e-6  # s per link


def pingpong(topology: dict, whatif: dict) -> dict:
    """GPT-2 with 2 stages and 1 micro-batch on ranks 0 and 1, no compute: one message
    forward, one back. Rendezvous without its handshake, so each message costs its
    route's latency plus its bytes over the bottleneck."""
    return {
        "distributed": {"num_nodes": 2, "bandwidth_limit_gb_per_s": 10.0},
        "topology": {"link_latency_us": 5.0, **topology},
        "workload": {"name": "gpt2", "args": [8, 2, 1], "compute_scale": 0, "world_size": 2},
        "network": {"rendezvous_handshake": False},
        "whatif": whatif,
        "logging": {"log_dir": "unused"},
    }


def test_a_degraded_link_slows_the_direction_it_names():
    one_way = {"link": [0, "sw"], "bandwidth_factor": 0.5, "one_way": True}
    res = simnet.simulate(pingpong({"type": "switch"}, {"degraded_links": [one_way]}))
    # Forward 0 -> 1 at 5 GB/s (0's uplink), back 1 -> 0 at 10 GB/s (sw -> 0 untouched).
    want = 2 * 2 * LAT + MSG / (BW / 2) + MSG / BW
    assert res.iteration_time_s == pytest.approx(want, rel=1e-12)
    assert res.scenario == ["link 0 -> 'sw' at 0.5x bandwidth (10 GB/s -> 5 GB/s)"]
    both = {"link": ["sw", 0], "bandwidth_factor": 0.25}
    res = simnet.simulate(pingpong({"type": "switch"}, {"degraded_links": [both]}))
    assert res.iteration_time_s == pytest.approx(2 * (2 * LAT + MSG / (BW / 4)), rel=1e-12)
    # Bytes do not change with the bandwidth.
    assert res.traffic_bytes[0, 1] == res.traffic_bytes[1, 0] == MSG


def test_a_dragonfly_global_link_is_changed_whole():
    # Two groups of one router and one endpoint: 0 -> 1 crosses the global link, drawn
    # as three edges (router -> port -> port -> router) at 2.5 GB/s, the bottleneck.
    topo = {"type": "dragonfly", "routers_per_group": 1, "endpoints_per_router": 1}
    topo["global_bandwidth_gb_per_s"] = 2.5
    base = simnet.simulate(pingpong(topo, {}))
    up = {"link": ["gw0.1", "gw1.0"], "bandwidth_factor": 4}
    res = simnet.simulate(pingpong(topo, {"degraded_links": [up]}))
    # At 4x the global link runs at 10 GB/s, as fast as the endpoints' links: both
    # messages gain MSG / 2.5 GB/s - MSG / 10 GB/s (the latencies are the same).
    gain = 2 * (MSG / 2.5e9 - MSG / BW)
    assert base.iteration_time_s - res.iteration_time_s == pytest.approx(gain, rel=1e-9)
    assert res.scenario == [
        "link 'gw0.1' <-> 'gw1.0' at 4x bandwidth (2.5 GB/s -> 10 GB/s, its 3 edges)"
    ]
    # Named by an outer edge, one way: only the forward message gains.
    fwd = {"link": ["r0.0", "gw0.1"], "bandwidth_factor": 4, "one_way": True}
    res = simnet.simulate(pingpong(topo, {"degraded_links": [fwd]}))
    assert base.iteration_time_s - res.iteration_time_s == pytest.approx(gain / 2, rel=1e-9)


def test_a_failed_link_reroutes_the_long_way_round():
    topo = {"type": "ring", "num_nodes": 4}
    base = simnet.simulate(pingpong(topo, {}))
    assert base.iteration_time_s == pytest.approx(2 * (LAT + MSG / BW), rel=1e-12)
    res = simnet.simulate(pingpong(topo, {"failed_links": [[0, 1]]}))
    # 0 -> 3 -> 2 -> 1 and back: three hops each way, same bottleneck.
    assert res.iteration_time_s == pytest.approx(2 * (3 * LAT + MSG / BW), rel=1e-12)
    # Pairs whose shortest route used 0 <-> 1: (0,1), (1,0) and, of the ties at distance
    # 2, the routes the router had taken through it.
    note = res.scenario[0]
    assert note.startswith("failed: 0 <-> 1; ") and "of 12 endpoint pairs rerouted" in note
    assert np.array_equal(res.traffic_bytes, base.traffic_bytes)


def test_a_degraded_link_that_carried_nothing_says_so():
    # Ranks 0 and 1 on a switch of 4: endpoint 3's link carries none of their messages,
    # so slowing it changes nothing, and the note says why; endpoint 0's does change.
    topo = {"type": "switch", "num_nodes": 4}
    idle = {"link": [3, "sw"], "bandwidth_factor": 0.5}
    busy = {"link": [0, "sw"], "bandwidth_factor": 0.5, "one_way": True}
    base = simnet.simulate(pingpong(topo, {}))
    res = simnet.simulate(pingpong(topo, {"degraded_links": [idle, busy]}))
    assert res.scenario == [
        "link 3 <-> 'sw' at 0.5x bandwidth (10 GB/s -> 5 GB/s); it carried no traffic in this run",
        "link 0 -> 'sw' at 0.5x bandwidth (10 GB/s -> 5 GB/s)",
    ]
    assert res.iteration_time_s == pytest.approx(base.iteration_time_s + MSG / BW, rel=1e-12)


def test_a_degraded_host_link_that_carried_nothing_says_so():
    # Hosts of 2 ranks on a switch of 3: GPT-2's 4 ranks on hosts 0 and 1, host 2 holds
    # none: its link is idle, host 0's is not.
    cfg = {
        "distributed": {"num_nodes": 4},
        "topology": {"type": "switch", "num_nodes": 3},
        "hosts": {"ranks_per_host": 2, "copy_bandwidth_gb_per_s": 10},
        "workload": {"name": "gpt2", "args": [8, 2, 1], "compute_scale": 0, "world_size": 4},
        "whatif": {
            "degraded_links": [
                {"link": ["host2", "sw"], "bandwidth_factor": 0.5},
                {"link": ["host0", "sw"], "bandwidth_factor": 0.5},
            ]
        },
    }
    res = simnet.simulate(cfg, record_series=False)
    assert [
        line.split(" at ")[0] + (" idle" if "no traffic" in line else "") for line in res.scenario
    ] == [
        "link 'host2' <-> 'sw' idle",
        "link 'host0' <-> 'sw'",
    ]


def test_a_failure_on_a_big_network_counts_the_reroutes_of_the_pairs_that_talked(monkeypatch):
    # Above 512 endpoints every pair's reroute is not counted before the run; after it,
    # those of the pairs that communicated are (here "big" is above 2 endpoints: the
    # ring of 4, ranks 0 and 1 exchanging both ways over the failed 0 <-> 1).
    monkeypatch.setattr(whatif, "_REROUTE_CHECK_MAX_ENDPOINTS", 2)
    res = simnet.simulate(pingpong({"type": "ring", "num_nodes": 4}, {"failed_links": [[0, 1]]}))
    assert res.scenario == [
        "failed: 0 <-> 1; 2 of the 2 endpoint pairs that communicated rerouted (2 on longer routes)"
    ]
    monkeypatch.setattr(whatif, "REROUTE_COUNT_MAX_PAIRS", 1)  # too many pairs: not counted
    res = simnet.simulate(pingpong({"type": "ring", "num_nodes": 4}, {"failed_links": [[0, 1]]}))
    assert res.scenario == [f"failed: 0 <-> 1; {whatif.REROUTES_NOT_COUNTED}"]


@pytest.mark.parametrize("ecmp", [False, True])
@pytest.mark.parametrize("big", [False, True])
def test_reroutes_are_counted_on_the_runs_own_routing(monkeypatch, ecmp, big):
    # A k=4 fat-tree without agg0.0 <-> core0: the routes compared are those the run
    # takes, with or without ECMP (they were always the fat-tree's default, ECMP), every
    # pair's before the run, or (above the size limit) the pairs that communicated.
    if big:
        monkeypatch.setattr(whatif, "_REROUTE_CHECK_MAX_ENDPOINTS", 2)
    cfg = {
        "distributed": {"num_nodes": 16, "bandwidth_limit_gb_per_s": 25.0},
        "topology": {"type": "fat_tree", "k": 4, "link_latency_us": 1.0, "ecmp": ecmp},
        "workload": {"name": "resnet50", "world_size": 16, "scale": 0.01},
        "whatif": {"failed_links": [["agg0.0", "core0"]]},
    }
    res = simnet.simulate(cfg, record_series=False)
    full = topologies.fat_tree(4, 25e9, 1e-6)
    cut = full.copy()
    cut.remove_edges_from([("agg0.0", "core0"), ("core0", "agg0.0")])
    r0, r1 = topologies.Router(full, ecmp=ecmp), topologies.Router(cut, ecmp=ecmp)
    pairs = (
        sorted({k for p in res.phases for k in p.pair_bytes})
        if big
        else [(s, d) for s in range(16) for d in range(16) if s != d]
    )
    moved = sum(r0.path(s, d) != r1.path(s, d) for s, d in pairs)
    what = "endpoint pairs that communicated" if big else "endpoint pairs"
    of = f"of the {len(pairs):,}" if big else f"of {len(pairs)}"
    assert res.scenario == [
        f"failed: 'agg0.0' <-> 'core0'; {moved} {of} {what} rerouted (0 on longer routes)"
    ]


def test_link_changes_on_a_one_way_ring_name_the_direction():
    """On a one-way ring (links i -> i + 1 only) the messages say which direction is
    missing: the reverse of a degraded link, the routes back to endpoint 0 of a cut."""
    cfg = {
        "distributed": {"num_nodes": 8},
        "topology": {"type": "ring", "bidirectional": False},
        "workload": {"name": "dlrm", "world_size": 8, "scale": 0.01},
    }
    with pytest.raises(ConfigError) as e:
        simnet.simulate(
            {**cfg, "whatif": {"degraded_links": [{"link": [3, 4], "bandwidth_factor": 0.5}]}}
        )
    assert str(e.value) == (
        "whatif.degraded_links[0]: the link 3 -> 4 is one-way (there is no 4 -> 3); set "
        "one_way to change it alone"
    )
    with pytest.raises(ConfigError) as e:
        simnet.simulate({**cfg, "whatif": {"failed_links": [[3, 4]]}})
    # 0 still reaches 1, 2 and 3; 4 .. 7 still reach 0.
    assert str(e.value) == (
        "whatif.failed_links: without 3 <-> 4 the network splits: endpoint 0 has no route "
        "to endpoint(s) [4, 5, 6, 7] and endpoint(s) [1, 2, 3] have no route to endpoint 0; "
        "fail fewer links"
    )


@pytest.mark.parametrize(
    ("whatif", "needle"),
    [
        (
            {"failed_links": [[1, "sw"]]},
            "whatif.failed_links: without 1 <-> 'sw' the network splits: endpoint(s) [1] "
            "and the other 1 endpoint with ranks have no route between them; fail fewer links",
        ),
        ({"failed_links": [[1, "spine"]]}, "no node 'spine' in the switch topology"),
        ({"failed_links": [[0, 1]]}, "there is no link 0 -> 1"),
        (
            {"degraded_links": [{"link": [0, "sw"], "bandwidth_factor": 0}]},
            "bandwidth_factor",
        ),
        ({"stragglers": {"5": 2.0}}, "whatif.stragglers: rank 5 does not exist (ranks 0..1)"),
        ({"stragglers": {"x": 2.0}}, "'x' is not a rank number"),
        ({"stragglers": {"01": 2.0}}, "whatif.stragglers: write rank '01' as '1'"),
        (
            {
                "degraded_links": [
                    {"link": [0, "sw"], "bandwidth_factor": 0.5},
                    {"link": ["sw", 0], "bandwidth_factor": 0.5},
                ]
            },
            "whatif.degraded_links[1]: the link 'sw' -> 0 is already changed by "
            "whatif.degraded_links[0]; give each link once (with one factor)",
        ),
        (
            {"failed_links": [[0, "sw"], ["sw", 0]]},
            "whatif.failed_links[1]: the link 'sw' -> 0 is already changed by "
            "whatif.failed_links[0]; give each link once",
        ),
        (
            {
                "degraded_links": [{"link": [1, "sw"], "bandwidth_factor": 0.5, "one_way": True}],
                "failed_links": [["sw", 1]],
            },
            "whatif.failed_links[0]: the link 1 -> 'sw' is already changed by "
            "whatif.degraded_links[0]",
        ),
        (
            {"degraded_links": [{"link": [0, "sw"], "bandwidth_factor": 1e-9}]},
            "whatif.degraded_links[0]: 10 GB/s x 1e-09 is below 1e-06 GB/s, the least "
            "bandwidth a link may have; to take the link out, list it in whatif.failed_links",
        ),
    ],
)
def test_impossible_what_ifs_are_refused_naming_the_fix(whatif, needle):
    with pytest.raises(ConfigError, match=None) as e:
        simnet.simulate(pingpong({"type": "switch"}, whatif))
    assert needle in str(e.value)
    assert "Value error" not in str(e.value) and "(top level)" not in str(e.value)


def test_a_wrong_node_type_in_a_link_is_one_line_without_pydantic_internals():
    with pytest.raises(ConfigError) as e:
        load_config({"whatif": {"failed_links": [[True, "sw"]]}})
    assert str(e.value) == (
        "config: invalid configuration\n"
        "  whatif.failed_links.0.0: a number is needed, not true (got True)"
    )


def _compute_then_allreduce(p: int) -> Workload:
    def program(rank: int) -> list:
        b = ProgramBuilder()
        b.compute(100.0)  # us
        b.collective("allreduce", "world", 256)  # 1 KiB: one exchange on 2 ranks
        return b.ops

    return Workload("t", p, {}, {"world": [tuple(range(p))]}, [Phase("x", program)])


def _run(p: int, **kw) -> float:
    g = topologies.switch(p, BW, LAT)
    router = topologies.Router(g)
    ex = SimExecutor(
        _compute_then_allreduce(p),
        lambda env: FlowNetwork(env, g, router.path),
        list(range(p)),
        **kw,
    )
    return ex.run_phase().makespan_s


def test_a_straggler_holds_up_the_collective():
    base = _run(2)
    slow = _run(2, rank_compute_factors=[1.0, 2.5])
    # One exchange: rank 0's data waits at rank 1, rank 1's leaves at 250 us, not 100 us.
    assert slow - base == pytest.approx(150e-6, rel=1e-9)


def test_compute_noise_is_seeded_and_per_rank():
    def noise(seed: int):
        return lambda rank: ComputeNoise(0.2, seed, rank).factor

    a = _run(4, compute_noise=noise(1))
    assert a == _run(4, compute_noise=noise(1))
    assert a != _run(4, compute_noise=noise(2))
    assert a > _run(4)
    # The draws: 1 + exponential of mean 0.2, a stream per (seed, rank).
    draws = np.array([ComputeNoise(0.2, 1, 0).factor() for _ in range(1)])
    f = ComputeNoise(0.2, 1, 3)
    many = np.array([f.factor() for _ in range(20000)])
    assert many.min() >= 1.0
    assert many.mean() == pytest.approx(1.2, abs=0.01)
    assert draws[0] != ComputeNoise(0.2, 1, 1).factor()


def test_the_summary_and_results_say_what_was_changed(tmp_path):
    cfg = pingpong({"type": "switch"}, {"stragglers": {"1": 1.5}, "compute_noise": 0.1})
    cfg["logging"]["log_dir"] = str(tmp_path)
    res = simnet.simulate(cfg)
    assert res.scenario == [
        "rank 1 computes 1.5x as long",
        "every compute takes d (1 + X), X exponential with mean 0.1 (seed 0)",
        # (a ping-pong has no compute)
        "the workload computes nothing: stragglers and noise change nothing",
    ]
    from simnet.output import document, summary_text

    assert document(res)["whatif"] == res.scenario
    assert "  what-if: rank 1 computes 1.5x as long" in summary_text(res)


def test_with_hosts_a_what_if_names_a_host_as_the_outputs_do():
    # sim_links.csv shows "host0->sw": the same name works in a what-if, for endpoint 0.
    def run(link: list) -> simnet.SimResult:
        return simnet.simulate({
            "distributed": {"num_nodes": 4},
            "topology": {"type": "switch", "num_nodes": 2},
            "hosts": {"ranks_per_host": 2, "copy_bandwidth_gb_per_s": 10},
            "whatif": {"degraded_links": [{"link": link, "bandwidth_factor": 0.5}]},
        })  # fmt: skip

    by_name, by_number = run(["host0", "sw"]), run([0, "sw"])
    # Said as the outputs name it, however the configuration named it.
    said = ["link 'host0' <-> 'sw' at 0.5x bandwidth (10 GB/s -> 5 GB/s)"]
    assert by_name.scenario == by_number.scenario == said
    assert by_name.iteration_time_s == by_number.iteration_time_s
    failed = simnet.simulate({
        "distributed": {"num_nodes": 4, "bandwidth_limit_gb_per_s": 12.5},
        "topology": {"type": "ring", "link_latency_us": 1},
        "workload": {"name": "resnet152", "world_size": 16, "scale": 0.05},
        "hosts": {"ranks_per_host": 4, "copy_bandwidth_gb_per_s": 20},
        "whatif": {"failed_links": [["host0", 1]]},
    })  # fmt: skip
    # A ring of 4 hosts: of the 12 host pairs, 0 -> 1 and 1 -> 0 go the long way round
    # (3 hops) and the 2-hop pairs through the cut link take the other side.
    note = failed.scenario[0]
    assert note.startswith("failed: 'host0' <-> 'host1'; ") and "of 12 host pairs" in note


@pytest.mark.parametrize(
    "link, message",
    [
        (
            ["host3", "edge0.0"],
            "whatif.failed_links[0]: there is no link 'host3' -> 'edge0.0' (from 'host3': "
            "'edge0.1')",
        ),
        (
            ["nosuch", 0],
            "whatif.failed_links[0]: no node 'nosuch' in the fat_tree topology; its nodes are "
            "the hosts host0..host15 (or 0..15) and the switches agg0.0,",
        ),
    ],
)
def test_with_hosts_a_what_if_error_names_the_hosts(link, message):
    cfg = {
        "distributed": {"num_nodes": 16, "bandwidth_limit_gb_per_s": 25},
        "topology": {"type": "fat_tree", "k": 4, "link_latency_us": 1},
        "hosts": {"ranks_per_host": 2, "copy_bandwidth_gb_per_s": 10},
        "workload": {"name": "resnet50", "world_size": 32, "scale": 0.01},
        "whatif": {"failed_links": [link]},
    }
    with pytest.raises(ConfigError) as e:
        simnet.simulate(cfg)
    assert str(e.value).startswith(message)


def test_a_bad_placement_is_named_before_a_failures_split():
    cfg = {
        "distributed": {"num_nodes": 4},
        "topology": {"type": "switch", "placement": [0, 1, 2, 9]},
        "workload": {"name": "dlrm", "world_size": 4, "scale": 0.01},
        "whatif": {"failed_links": [[0, "sw"]]},
    }
    with pytest.raises(ConfigError) as e:
        simnet.simulate(cfg)
    assert str(e.value) == (
        "topology.placement: rank 3 is placed on 9, not an endpoint of the switch topology; "
        "endpoints are 0..3"
    )


def test_a_failure_cutting_off_endpoints_without_ranks_is_noted_not_refused():
    # 16 endpoints on a switch, 8 ranks on 0..7: endpoint 15 down is a normal what-if.
    cfg = {
        "distributed": {"num_nodes": 16},
        "topology": {"type": "switch"},
        "workload": {"name": "dlrm", "world_size": 8, "scale": 0.01},
    }
    plain = simnet.simulate(cfg, record_series=False)
    res = simnet.simulate({**cfg, "whatif": {"failed_links": [[15, "sw"]]}}, record_series=False)
    assert res.iteration_time_s == plain.iteration_time_s
    assert "endpoint(s) [15] cut off by the failures (no rank there)" in res.scenario
    # Its routes: none (0 bandwidth, infinite latency); the others' as before.
    bw, lat = res.bandwidth_bytes_per_s, res.latency_s
    assert (bw[15, :15] == 0).all() and (bw[:15, 15] == 0).all() and bw[15, 15] == np.inf
    assert np.isinf(lat[15, :15]).all() and lat[15, 15] == 0.0
    assert np.array_equal(bw[:15, :15], plain.bandwidth_bytes_per_s[:15, :15])
    assert np.array_equal(lat[:15, :15], plain.latency_s[:15, :15])
    # A rank's endpoint cut off is refused, naming the side cut off (not the others).
    with pytest.raises(ConfigError) as e:
        simnet.simulate({**cfg, "whatif": {"failed_links": [[6, "sw"]]}}, record_series=False)
    assert str(e.value) == (
        "whatif.failed_links: without 6 <-> 'sw' the network splits: endpoint(s) [6] and the "
        "other 7 endpoints with ranks have no route between them; fail fewer links"
    )
    # Placed ranks: the check follows the placement.
    placed = {**cfg, "topology": {"type": "switch", "placement": [8, 9, 10, 11, 12, 13, 14, 15]}}
    res = simnet.simulate({**placed, "whatif": {"failed_links": [[0, "sw"]]}}, record_series=False)
    assert "endpoint(s) [0] cut off by the failures (no rank there)" in res.scenario


def test_a_split_names_every_endpoint_outside_the_largest_part():
    # Endpoints 0 and 6 each cut off alone: the first is no root to count the rest from.
    cfg = {
        "distributed": {"num_nodes": 8},
        "topology": {"type": "switch"},
        "workload": {"name": "dlrm", "world_size": 8, "scale": 0.01},
        "whatif": {"failed_links": [[0, "sw"], [6, "sw"]]},
    }
    with pytest.raises(ConfigError) as e:
        simnet.simulate(cfg, record_series=False)
    assert str(e.value) == (
        "whatif.failed_links: without 0 <-> 'sw', 6 <-> 'sw' the network splits: endpoint(s) "
        "[0, 6] (in 2 parts) and the other 6 endpoints with ranks have no route between "
        "them; fail fewer links"
    )


def test_with_hosts_a_failure_cutting_off_a_host_without_ranks_is_noted_not_refused():
    # 4 hosts of 2 ranks, 4 ranks: hosts 0 and 1 hold them, host 3 is empty.
    cfg = {
        "distributed": {"num_nodes": 4, "bandwidth_limit_gb_per_s": 10},
        "topology": {"type": "switch", "link_latency_us": 1},
        "hosts": {"ranks_per_host": 2, "copy_bandwidth_gb_per_s": 20},
        "workload": {"name": "dlrm", "world_size": 4, "scale": 0.01},
    }
    plain = simnet.simulate(cfg, record_series=False)
    res = simnet.simulate({**cfg, "whatif": {"failed_links": [[3, "sw"]]}}, record_series=False)
    assert res.iteration_time_s == plain.iteration_time_s
    assert "host(s) [3] cut off by the failures (no rank there)" in res.scenario
    # Host 3's rank endpoints (6 and 7) have no routes; the others keep theirs.
    bw = res.bandwidth_bytes_per_s
    assert (bw[6:, :6] == 0).all() and (bw[:6, 6:] == 0).all()
    assert np.array_equal(bw[:6, :6], plain.bandwidth_bytes_per_s[:6, :6])
    # The host of ranks 2 and 3 cut off is refused, as a host.
    with pytest.raises(ConfigError) as e:
        simnet.simulate({**cfg, "whatif": {"failed_links": [[1, "sw"]]}}, record_series=False)
    assert str(e.value) == (
        "whatif.failed_links: without 'host1' <-> 'sw' the network splits: host(s) [1] and "
        "the other 1 host with ranks have no route between them; fail fewer links"
    )
    # Placed ranks: the hosts of the placement (rank endpoints 6 and 7: host 3).
    placed = {**cfg, "topology": {"type": "switch", "placement": [0, 1, 6, 7]}}
    res = simnet.simulate({**placed, "whatif": {"failed_links": [[1, "sw"]]}}, record_series=False)
    assert "host(s) [1] cut off by the failures (no rank there)" in res.scenario
    # A placement off the rank endpoints is named first, as without hosts (not the split
    # that taking every host as used would make of the failure).
    wrong = {**cfg, "topology": {"type": "switch", "placement": [0, 1, 2, 99]}}
    with pytest.raises(ConfigError) as e:
        simnet.simulate({**wrong, "whatif": {"failed_links": [[3, "sw"]]}}, record_series=False)
    assert str(e.value) == (
        "topology.placement: rank 3 is placed on 99, not an endpoint of the switch topology; "
        "endpoints are 0..7"
    )


def test_a_split_fat_tree_names_the_endpoints_cut_off():
    cfg = {
        "topology": {"type": "fat_tree", "k": 4},
        "workload": {"name": "dlrm", "world_size": 16, "scale": 0.01},
        "whatif": {"failed_links": [["edge0.0", "agg0.0"], ["edge0.0", "agg0.1"]]},
    }
    with pytest.raises(
        ConfigError,
        match=r"endpoint\(s\) \[0, 1\] and the other 14 endpoints with ranks have no "
        "route between them",
    ):
        simnet.simulate(cfg, record_series=False)


def test_an_empty_jobs_list_says_the_default_workload_runs():
    res = simnet.simulate(
        {"distributed": {"num_nodes": 4}, "topology": {"type": "switch"}, "jobs": []},
        record_series=False,
    )
    assert (
        "jobs: [] lists no jobs: the workload section's default runs (alexnet_ring on 4 ranks)"
        in res.assumed
    )
    # A configuration dumped from a run (its workload and an empty jobs list) says nothing.
    again = simnet.simulate(res.config.model_dump(), record_series=False)
    assert not [a for a in again.assumed if a.startswith("jobs:")]


def _two_jobs(a: str, b: str, nodes: int, **what_if: object) -> dict:
    """Jobs a and b of 4 ranks (models ``a`` and ``b``) on a switch of ``nodes``."""
    return {
        "distributed": {"num_nodes": nodes},
        "topology": {"type": "switch"},
        "jobs": [
            {"name": "a", "workload": {"name": a, "world_size": 4, "scale": 0.01}},
            {"name": "b", "workload": {"name": b, "world_size": 4, "scale": 0.01}},
        ],
        "whatif": what_if,
    }


def test_a_job_that_computes_nothing_is_said_to_ignore_its_stragglers():
    cfg = _two_jobs("resnet50", "resnet152", 8, stragglers={"1": 3})
    res = simnet.simulate(cfg, record_series=False)
    assert f"job a: {whatif.NO_COMPUTE}" in res.scenario
    assert not [a for a in res.scenario if a.startswith("job b:")]
    # Neither job computing, the combined workload's own line would say it again.
    res = simnet.simulate(_two_jobs("resnet50", "gpt2", 8, stragglers={"1": 3}))
    assert [a for a in res.scenario if "computes nothing" in a] == [f"job a: {whatif.NO_COMPUTE}"]


def test_a_failure_is_checked_against_every_jobs_endpoints_before_any_runs():
    cfg = _two_jobs("dlrm", "dlrm", 16, failed_links=[[6, "sw"]])  # job b's third rank
    with pytest.raises(ConfigError) as e:
        simnet.simulate(cfg, record_series=False)
    assert "splits job b: endpoint(s) [6] and the other 3 endpoints with ranks" in str(e.value)
    cfg["whatif"]["failed_links"] = [[15, "sw"]]
    res = simnet.simulate(cfg, record_series=False)
    assert "endpoint(s) [15] cut off by the failures (no rank there)" in res.scenario


def test_outputs_of_a_run_with_an_endpoint_cut_off_are_written_sparse_and_dense(tmp_path):
    # The sparse outputs sample routes from endpoint 0 to every block (here every
    # endpoint): the one cut off has none (it raised, after the simulation).
    import json

    from simnet import cli

    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({
        "distributed": {"num_nodes": 16}, "topology": {"type": "switch"},
        "workload": {"name": "dlrm", "world_size": 8, "scale": 0.01},
        "whatif": {"failed_links": [[15, "sw"]]},
    }))  # fmt: skip
    for matrices in ("sparse", "dense"):
        out = tmp_path / matrices
        args = ["--config", str(cfg), "--out", str(out), "--quiet", "--matrices", matrices]
        assert cli.main(args) == 0
        assert (out / "sim_summary.txt").is_file()
    rows = [r.split(",") for r in (tmp_path / "dense" / "sim_bandwidth_bytes_per_s.csv")
            .read_text().splitlines()]  # fmt: skip
    # No route to or from the endpoint cut off: empty cells (as an endpoint to itself),
    # null in the JSON, not a bandwidth of 0.
    assert rows[1][16] == "" and rows[16][1:] == [""] * 16
    assert float(rows[1][2]) == 10e9  # (the others' routes as before)
    bw = json.loads((tmp_path / "dense" / "sim_results.json").read_text())["bandwidth_bytes_per_s"]
    assert bw[0][15] is None and bw[15] == [None] * 16 and bw[0][1] == 10e9


def test_a_seed_without_noise_and_ecmp_on_a_torus_are_said():
    # Both were taken without a word: a seed that seeds nothing, and ECMP replacing the
    # torus's dimension-order routes (a 4x4 torus ResNet-50: 3.746 -> 4.757 ms).
    base = {
        "distributed": {"num_nodes": 16},
        "topology": {"type": "torus", "dims": [4, 4]},
        "workload": {"name": "resnet50", "scale": 0.01},
    }
    plain = simnet.simulate(base, record_series=False)
    res = simnet.simulate(
        {**base, "topology": {**base["topology"], "ecmp": True}, "whatif": {"seed": 42}},
        record_series=False,
    )
    assert "whatif.seed: not used, it seeds whatif.compute_noise, which is 0" in res.assumed
    assert (
        "topology.ecmp: flows spread over all shortest routes, hashed per pair, instead of the "
        "torus's dimension-order routes (its default)"
    ) in res.assumed
    assert not any(a.startswith(("whatif.seed", "topology.ecmp")) for a in plain.assumed)
    noisy = simnet.simulate({**base, "whatif": {"seed": 42, "compute_noise": 0.1}},
                            record_series=False)  # fmt: skip
    assert not any(a.startswith("whatif.seed") for a in noisy.assumed)


def _jobs_on_a_ring(failed: list, **extra) -> dict:
    # A bidirectional ring of 8: job a on endpoints 0..3, job b on 4..7.
    job = {"name": "resnet50", "world_size": 4, "scale": 0.01}
    return {
        "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 10},
        "topology": {"type": "ring", "link_latency_us": 1},
        "jobs": [{"name": "a", "workload": job}, {"name": "b", "workload": job}],
        "whatif": {"failed_links": failed},
        **extra,
    }


def test_failures_may_separate_jobs_that_each_stay_connected():
    # Links 3 <-> 4 and 7 <-> 0 down: each job keeps a line of its own (0-1-2-3, 4-5-6-7).
    res = simnet.simulate(_jobs_on_a_ring([[3, 4], [7, 0]]), record_series=False)
    assert res.scenario == [
        "failed: 3 <-> 4, 7 <-> 0; 0 of 24 endpoint pairs rerouted (0 on longer routes)",
        "the failures split the network into 2 parts, endpoints 0..3, endpoints 4..7: the "
        "jobs in each still reach one another, and no route joins two parts",
    ]
    a, b = res.jobs.jobs
    assert a.shared_s == a.alone_s and b.shared_s == b.alone_s  # no link between them
    assert res.jobs.contended == [] and res.jobs.shared_apart == []
    # No route between the parts; inside each, the line's own.
    bw, lat = res.bandwidth_bytes_per_s, res.latency_s
    assert (bw[:4, 4:] == 0).all() and (bw[4:, :4] == 0).all() and np.isinf(lat[:4, 4:]).all()
    assert bw[0, 3] == 10e9 and lat[0, 3] == pytest.approx(3e-6)  # 0 -> 1 -> 2 -> 3
    # Alone, job a ran on that line too: the same time as a job of its own on it.
    line = simnet.simulate(
        {
            "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 10},
            "topology": {"type": "ring", "link_latency_us": 1},
            "workload": {"name": "resnet50", "world_size": 4, "scale": 0.01},
            "whatif": {"failed_links": [[3, 4], [7, 0]]},
        },
        record_series=False,
    )
    assert a.alone_s == pytest.approx(line.iteration_time_s, rel=1e-12)


def test_a_failure_that_splits_one_job_is_refused_naming_the_job():
    with pytest.raises(ConfigError) as e:
        simnet.simulate(_jobs_on_a_ring([[4, 5], [7, 0]]), record_series=False)
    assert str(e.value) == (
        "whatif.failed_links: without 4 <-> 5, 7 <-> 0 the network splits job b: endpoint(s) "
        "[4] and the other 3 endpoints with ranks have no route between them; fail fewer links"
    )


def test_with_hosts_failures_may_separate_jobs_on_their_hosts():
    # Two groups of 4 hosts of 2 ranks; group 1's hosts lose their links to the top
    # switch: job a (hosts 0..3, rank endpoints 0..7) and job b (hosts 4..7, 8..15) apart.
    job = {"name": "resnet50", "world_size": 8, "scale": 0.01}
    res = simnet.simulate(
        {
            "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 10},
            "topology": {"type": "hierarchical", "num_nodes": 8, "group_size": 4,
                         "intra_bandwidth_gb_per_s": 50, "inter_bandwidth_gb_per_s": 10},
            "hosts": {"ranks_per_host": 2, "copy_bandwidth_gb_per_s": 20},
            "jobs": [{"name": "a", "workload": job}, {"name": "b", "workload": job}],
            "whatif": {"failed_links": [[h, "top"] for h in range(4, 8)]},
        },
        record_series=False,
    )  # fmt: skip
    assert res.scenario[1] == (
        "the failures split the network into 2 parts, hosts 0..3, hosts 4..7: the jobs in "
        "each still reach one another, and no route joins two parts"
    )
    bw = res.bandwidth_bytes_per_s
    assert (bw[:8, 8:] == 0).all() and (bw[8:, :8] == 0).all()
    assert (bw[8:, 8:][~np.eye(8, dtype=bool)] > 0).all()


def test_jobs_run_as_one_workload_given_are_not_apart():
    # A jobs configuration run with a workload of its own (the API's ``workload``): its
    # ranks all talk, so the failure that separates the jobs is refused, as a split.
    from simnet.simulate import build_workload

    one = build_workload(load_config({
        "distributed": {"num_nodes": 8}, "topology": {"type": "ring"},
        "workload": {"name": "resnet50", "world_size": 8, "scale": 0.01},
    }))  # fmt: skip
    with pytest.raises(ConfigError) as e:
        simnet.simulate(_jobs_on_a_ring([[3, 4], [7, 0]]), workload=one, record_series=False)
    assert str(e.value) == (
        "whatif.failed_links: without 3 <-> 4, 7 <-> 0 the network splits: endpoint(s) "
        "[4, 5, 6, 7] and the other 4 endpoints with ranks have no route between them; fail "
        "fewer links"
    )
