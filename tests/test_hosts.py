"""Hosts on a topology (topologies.hosts): ranks of one host share its memory-copy
capacity, inter-host traffic leaves through the host's NIC; times checked against
closed forms derived by hand."""

from __future__ import annotations

import pytest
import simpy

import simnet
import topologies
from simnet.network import FlowNetwork
from topologies.hosts import host_of, with_hosts

GB = 1e9


def test_ranks_are_numbered_host_major_and_routes_take_memory_or_nic():
    g = with_hosts(topologies.switch(3, 10 * GB, 1e-6), 4, 20 * GB)
    topologies.validate(g)
    assert topologies.endpoints(g) == list(range(12))
    assert [host_of(g, r) for r in range(12)] == [0] * 4 + [1] * 4 + [2] * 4
    router = topologies.Router(g)
    assert router.path(1, 2) == ((1, "h0.mem"), ("h0.mem", "h0.mem_out"), ("h0.mem_out", 2))
    assert router.path(1, 5) == (
        (1, "h0.tx"),
        ("h0.tx", "host0"),
        ("host0", "sw"),
        ("sw", "host1"),
        ("host1", "h1.rx"),
        ("h1.rx", 5),
    )
    assert g.graph["hosts"]["num_hosts"] == 3
    assert g.graph["num_endpoints"] == 12


def test_two_intra_host_flows_share_the_host_capacity_exactly():
    # Ranks 0 -> 1 and 2 -> 3 at once, on one host of 4 GB/s: 2 GB/s each.
    g = with_hosts(topologies.switch(1, 10 * GB), 4, 4 * GB)
    size = 10**9
    t = simnet.collective_time(g, "allreduce", "ring", size)  # sanity: runs
    assert t > 0

    env = simpy.Environment()
    router = topologies.Router(g)
    net = FlowNetwork(env, g, router.path)
    done: dict[str, float] = {}
    net.start_transfer(0, 1, size, lambda tag: done.__setitem__(tag, env.now), "a")
    net.start_transfer(2, 3, size, lambda tag: done.__setitem__(tag, env.now), "b")
    env.run()
    assert done == {"a": pytest.approx(size / (2 * GB)), "b": pytest.approx(size / (2 * GB))}


@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_intra_host_ring_allreduce_matches_its_closed_form(p):
    # 2(p-1) steps; in each, all p ranks send S/p at once through the host's memory:
    # each flow gets min(rank rate, C / p); plus the per-message latency per step.
    cap, rank_bw, lat = 12 * GB, 5 * GB, 3e-6
    g = with_hosts(
        topologies.switch(1, 10 * GB),
        p,
        cap,
        rank_copy_bandwidth_bytes_per_s=rank_bw,
        copy_latency_s=lat,
    )
    size = 4 * 2**20 * p
    per_flow = min(rank_bw, cap / p)
    expect = 2 * (p - 1) * ((size / p) / per_flow + lat)
    assert simnet.collective_time(g, "allreduce", "ring", size) == pytest.approx(expect, rel=1e-9)


def test_nic_is_shared_by_the_ranks_of_a_host():
    # Two ranks of host 0 send to two ranks of host 1 at once through a 1 GB/s NIC,
    # on 10 GB/s links: the NIC is the bottleneck, 0.5 GB/s each.
    g = with_hosts(topologies.switch(2, 10 * GB), 2, 50 * GB, nic_bandwidth_bytes_per_s=1 * GB)

    env = simpy.Environment()
    net = FlowNetwork(env, g, topologies.Router(g).path)
    done: list[float] = []
    for s, d in ((0, 2), (1, 3)):
        net.start_transfer(s, d, 10**8, lambda _tag: done.append(env.now), None)
    env.run()
    assert done == [pytest.approx(0.2), pytest.approx(0.2)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ranks_per_host": 0}, "ranks_per_host must be an integer >= 1"),
        ({"ranks_per_host": True}, "ranks_per_host must be an integer >= 1"),
        ({"copy_bandwidth_bytes_per_s": 0}, "copy_bandwidth_bytes_per_s must be a finite"),
        ({"copy_latency_s": -1.0}, "copy_latency_s must be a finite number >= 0"),
        ({"nic_bandwidth_bytes_per_s": float("inf")}, "nic_bandwidth_bytes_per_s must be"),
    ],
)
def test_bad_host_parameters_are_refused_naming_them(kwargs, message):
    args = {"ranks_per_host": 2, "copy_bandwidth_bytes_per_s": GB, **kwargs}
    with pytest.raises(topologies.TopologyError, match=message):
        with_hosts(topologies.switch(2, GB), **args)
