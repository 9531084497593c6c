"""Tests of simnet.network: exact hand-computed times of the flow-level model.

Every expected time below is derived by hand in the comment next to it
(sizes in bytes, bandwidths in bytes/s, times in s).
"""

from __future__ import annotations

import itertools
import random
import types
from collections.abc import Callable

import networkx as nx
import pytest
import simpy

from simnet import network
from simnet.network import EGRESS, INGRESS, FlowNetwork, TransferRecord

from .test_compiled_core import CONFIG as CONTENDED

REL = 1e-12


def approx(x: float) -> object:
    return pytest.approx(x, rel=REL, abs=1e-15)


def shortest_path_route(g: nx.DiGraph):
    """Hop-count shortest path, as a tuple of directed edges, memoised."""
    cache: dict[tuple[int, int], tuple] = {}

    def route(src: int, dst: int) -> tuple:
        if src == dst:
            return ()
        edges = cache.get((src, dst))
        if edges is None:
            path = nx.shortest_path(g, src, dst)
            edges = cache[(src, dst)] = tuple(itertools.pairwise(path))
        return edges

    return route


def line(*links: tuple[float, float]) -> nx.DiGraph:
    """Directed line 0 -> 1 -> ... with (bandwidth_bytes_per_s, latency_s) per hop."""
    g = nx.DiGraph()
    for i, (bw, lat) in enumerate(links):
        g.add_edge(i, i + 1, bandwidth=bw, latency=lat)
    return g


def make(g: nx.DiGraph, **kw) -> tuple[simpy.Environment, FlowNetwork]:
    env = simpy.Environment()
    return env, FlowNetwork(env, g, shortest_path_route(g), **kw)


def send_at(env, net, t_s, src, dst, size, out, tag=None):
    """Process: wait until t_s, transfer, append the record to out."""

    def proc():
        if t_s:
            yield env.timeout(t_s)
        rec = yield net.transfer(src, dst, size, tag)
        out.append(rec)

    return env.process(proc())


def test_one_flow_two_node_line():
    env, net = make(line((1e9, 1e-6)))
    ev = net.transfer(0, 1, 1_000_000, tag="x")
    env.run()
    # 1e6 B / 1e9 B/s = 1e-3 s, plus 1e-6 s latency.
    assert ev.value == TransferRecord(0, 1, 1_000_000, 0.0, approx(1e-3 + 1e-6), "x")
    assert env.now == approx(1e-3 + 1e-6)
    assert net.link_bytes() == {(0, 1): 1_000_000}
    assert net.link_busy_s()[(0, 1)] == approx(1e-3)
    assert net.utilisation((0, 1), 1e-3) == approx(1.0)
    assert net.busy_fraction((0, 1), 2e-3) == approx(0.5)
    assert net.link_peak_load_bytes_per_s() == {(0, 1): 1e9}
    assert net.pair_bytes == {(0, 1): 1_000_000}
    assert net.pair_messages == {(0, 1): 1}
    assert net.pair_duration_s[(0, 1)] == approx(1e-3 + 1e-6)
    assert net.pair_rate_bytes_per_s(0, 1) == approx(1e6 / (1e-3 + 1e-6))
    assert net.transfers_completed == 1
    assert net.active_flow_count == 0


def test_pair_rate_counts_concurrent_messages_and_skips_idle_gaps():
    # Two 100 B messages 0 -> 1 together on a 100 B/s link share it (50 B/s each) and
    # both arrive at t = 2 s; a third leaves at t = 5 s and arrives at t = 6 s. The pair
    # was busy 2 + 1 = 3 s for 300 B: 100 B/s, the link's capacity. (Summed message
    # durations, 2 + 2 + 1 = 5 s, would say 60 B/s.)
    env, net = make(line((100.0, 0.0)))
    out: list = []
    send_at(env, net, 0.0, 0, 1, 100, out)
    send_at(env, net, 0.0, 0, 1, 100, out)
    send_at(env, net, 5.0, 0, 1, 100, out)
    env.run()
    assert sorted(r.end_s for r in out) == [approx(2.0), approx(2.0), approx(6.0)]
    assert net.pair_duration_s[(0, 1)] == approx(5.0)
    assert net.pair_busy_s == {(0, 1): approx(3.0)}
    assert net.pair_rate_bytes_per_s(0, 1) == approx(100.0)
    assert net.pair_rate_bytes_per_s(1, 0) == 0.0


def test_three_hop_path_bottleneck_and_summed_latency():
    env, net = make(line((100.0, 0.1), (50.0, 0.2), (200.0, 0.3)))
    ev = net.transfer(0, 3, 100)
    env.run()
    # Bottleneck 50 B/s: 100 / 50 = 2 s; latency 0.1 + 0.2 + 0.3 = 0.6 s.
    assert ev.value.end_s == approx(2.6)
    assert net.link_bytes() == {(0, 1): 100, (1, 2): 100, (2, 3): 100}
    assert net.link_peak_load_bytes_per_s() == {(0, 1): 50.0, (1, 2): 50.0, (2, 3): 50.0}


def test_long_routes_and_many_flows_per_link():
    # A route of nine links (compiled, more than a flow keeps inside itself) and five
    # flows on link (4, 5) (more than a link keeps inside itself). Flow 0 -> 9 and four
    # flows 4 -> 5 of 100 B share (4, 5) at 500 B/s: 100 B/s each, so all drain in 1 s;
    # the other links are fast (1000 B/s). Latency 0.01 s per hop: 0.09 s for 0 -> 9.
    env, net = make(line(*[(1000.0, 0.01) if i != 4 else (500.0, 0.01) for i in range(9)]))
    long = net.transfer(0, 9, 100)
    short = [net.transfer(4, 5, 100) for _ in range(4)]
    env.run(until=0.5)
    active = net.active_flows()
    assert [(a.src, a.dst, a.rate_bytes_per_s) for a in active] == [(0, 9, 100.0)] + [
        (4, 5, 100.0)
    ] * 4
    assert active[0].links == tuple((i, i + 1) for i in range(9))
    assert [len(net._links[(i, i + 1)].flows) for i in range(9)] == [1, 1, 1, 1, 5, 1, 1, 1, 1]
    env.run()
    assert long.value.end_s == approx(1.0 + 0.09)
    assert [s.value.end_s for s in short] == [approx(1.0 + 0.01)] * 4
    assert all(link.n_flows == 0 and not link.flows for link in net._links.values())
    assert net.link_bytes()[(4, 5)] == 500


@pytest.mark.parametrize("handshake", [False, True])
def test_delivery_hands_over_one_tag_or_two(handshake):
    # on_delivery(tag) by default; on_delivery(tag, tag2) when tag2 is given (None too),
    # for plain and rendezvous messages. Four messages of 100 B on one 100 B/s link with
    # 0.5 s of latency. Without the handshake all four share it from 0 (25 B/s each):
    # delivered at 4 + 0.5 s. With it the two rendezvous ones start at 0.5 s (their
    # request's latency): the plain two drain 25 B each by then (50 B/s), then all four
    # share, so the plain ones drain their 75 B by 3.5 s (delivered at 4.0 s), the others
    # have 25 B left, at 50 B/s gone by 4.0 s (delivered at 4.5 s).
    env, net = make(line((100.0, 0.5)), rendezvous_handshake=handshake)
    got: list = []

    def record(*tags: object) -> None:
        got.append((tags, env.now))

    net.start_transfer(0, 1, 100, record, "one")
    net.start_transfer(0, 1, 100, record, "a", None)
    net.start_rendezvous(0, 1, 100, record, "r", 0.0)
    net.start_rendezvous(0, 1, 100, record, "s", 0.0, "w")
    env.run()
    plain_s = 4.0 if handshake else 4.5
    assert sorted(got) == [
        (("a", None), approx(plain_s)),
        (("one",), approx(plain_s)),
        (("r",), approx(4.5)),
        (("s", "w"), approx(4.5)),
    ]


def test_two_flows_share_a_link_equally():
    # Flows 0->2 and 0->1 share (0, 1) at 100 B/s; (1, 2) is fast.
    env, net = make(line((100.0, 0.5), (1000.0, 0.25)))
    a = net.transfer(0, 2, 100)
    b = net.transfer(0, 1, 100)
    env.run(until=1.0)
    assert [f.rate_bytes_per_s for f in net.active_flows()] == [50.0, 50.0]
    env.run()
    # Each gets 50 B/s: 100 / 50 = 2 s of draining.
    assert a.value.end_s == approx(2.0 + 0.5 + 0.25)
    assert b.value.end_s == approx(2.0 + 0.5)
    assert net.link_peak_load_bytes_per_s()[(0, 1)] == 100.0
    assert net.link_bytes() == {(0, 1): 200, (1, 2): 100}


def test_flow_ending_early_lets_the_other_speed_up():
    env, net = make(line((100.0, 0.5)), record_link_series=True)
    out: list[TransferRecord] = []
    send_at(env, net, 0.0, 0, 1, 300, out, "A")
    send_at(env, net, 1.0, 0, 1, 100, out, "B")
    env.run()
    # A alone for 1 s at 100 B/s: 200 B left. Then 50 B/s each: B's 100 B
    # take 2 s (drained at t=3); A has 100 B left, alone at 100 B/s: t=4.
    ends = {r.tag: r.end_s for r in out}
    assert ends["B"] == approx(3.0 + 0.5)
    assert ends["A"] == approx(4.0 + 0.5)
    assert [r.tag for r in out] == ["B", "A"]
    series = net.link_series()[(0, 1)]
    # The link stays fully loaded (100 B/s) from 0 to 4 s, then idles.
    assert series == [(0.0, 100.0), (approx(4.0), 0.0)]
    assert net.link_busy_s()[(0, 1)] == approx(4.0)
    assert net.utilisation((0, 1), 4.0) == approx(1.0)


def test_repeated_rate_changes_keep_exact_progress():
    env, net = make(line((100.0, 0.0)))
    out: list[TransferRecord] = []
    send_at(env, net, 0.0, 0, 1, 1000, out, "L")
    for k, t in enumerate((1.0, 3.0, 5.0, 7.0)):
        send_at(env, net, t, 0, 1, 50, out, k)
    env.run()
    # Each short flow shares the link 50/50 for 1 s (50 B at 50 B/s), so L
    # drains 100 B alone then 50 B shared in every 2 s period: 600 B by t=8,
    # then 400 B alone at 100 B/s: t = 12.
    ends = {r.tag: r.end_s for r in out}
    assert ends == {
        0: approx(2.0),
        1: approx(4.0),
        2: approx(6.0),
        3: approx(8.0),
        "L": approx(12.0),
    }
    assert net.link_busy_s()[(0, 1)] == approx(12.0)
    assert net.link_bytes() == {(0, 1): 1200}


def test_classic_max_min_example():
    # l1 = (0,1) 10 B/s, l2 = (1,2) 4 B/s, l3 = (2,3) 6 B/s.
    # A: l1+l2+l3, B: l1, C: l2, D: l3.
    # Fair shares: l1 10/2 = 5, l2 4/2 = 2, l3 6/2 = 3 -> l2 first: A = C = 2.
    # Then l1: B = 10 - 2 = 8; l3: D = 6 - 2 = 4.
    env, net = make(line((10.0, 0.0), (4.0, 0.0), (6.0, 0.0)))
    a = net.transfer(0, 3, 20, "A")
    b = net.transfer(0, 1, 80, "B")
    c = net.transfer(1, 2, 40, "C")
    d = net.transfer(2, 3, 40, "D")
    env.run(until=1.0)
    rates = {f.tag: f.rate_bytes_per_s for f in net.active_flows()}
    assert rates == {"A": 2.0, "B": 8.0, "C": 2.0, "D": 4.0}
    env.run()
    # A: 20/2 = 10; B: 80/8 = 10; D: 40/4 = 10. C: 20 B left at t=10,
    # then alone on l2 at 4 B/s: 10 + 20/4 = 15.
    assert a.value.end_s == approx(10.0)
    assert b.value.end_s == approx(10.0)
    assert d.value.end_s == approx(10.0)
    assert c.value.end_s == approx(15.0)
    peaks = net.link_peak_load_bytes_per_s()
    assert peaks == {(0, 1): 10.0, (1, 2): 4.0, (2, 3): 6.0}


def test_alpha_overhead():
    env, net = make(line((100.0, 0.5)), alpha_s=0.25)
    ev = net.transfer(0, 1, 100)
    env.run()
    # 0.25 alpha + 100 / 100 + 0.5 latency.
    assert ev.value.end_s == approx(1.75)
    assert net.link_busy_s()[(0, 1)] == approx(1.0)


def test_send_overhead_is_paid_one_message_after_another_per_sender():
    # A star: 0 sends to 1, 2 and 3 over links of its own; 1 sends to 2 at once.
    g = nx.DiGraph()
    for v in (1, 2, 3):
        g.add_edge(0, v, bandwidth=100.0, latency=0.5)
    g.add_edge(1, 2, bandwidth=100.0, latency=0.5)
    env, net = make(g, alpha_s=0.25, send_overhead_s=1.0)
    evs = [net.transfer(0, v, 100) for v in (1, 2, 3)]
    other = net.transfer(1, 2, 100)
    env.run()
    # Sender 0: o, 2o, 3o, each then alpha + 100/100 + latency.
    assert [e.value.end_s for e in evs] == [approx(k * 1.0 + 1.75) for k in (1, 2, 3)]
    # Another sender's message is not held up by sender 0's.
    assert other.value.end_s == approx(1.0 + 1.75)
    # A later message waits only for what is left of its sender's queue.
    env2, net2 = make(line((100.0, 0.5)), send_overhead_s=1.0)
    first = net2.transfer(0, 1, 0)
    env2.run(until=0.5)
    second = net2.transfer(0, 1, 0)
    env2.run()
    assert (first.value.end_s, second.value.end_s) == (approx(1.5), approx(2.5))
    # A message to itself pays alpha only, and holds up none of the sender's others.
    env3, net3 = make(line((100.0, 0.5)), alpha_s=0.25, send_overhead_s=1.0)
    own = net3.transfer(0, 0, 8)
    out = net3.transfer(0, 1, 0)
    env3.run()
    assert (own.value.end_s, out.value.end_s) == (approx(0.25), approx(1.75))


def _at_delivery(env: simpy.Environment, out: dict) -> Callable[[object], None]:
    """A delivery callback recording ``out[tag] = now``."""
    return lambda tag: out.setdefault(tag, env.now)


def test_a_rendezvous_send_pays_its_overhead_when_posted_not_when_matched():
    # Star as above. Sender 0 posts three rendezvous sends at 0 (o each, one after
    # another: 1, 2, 3) and one eager message after them (4); the receives come at 5,
    # matched in reverse order: the data leaves at once, without paying o again.
    g = nx.DiGraph()
    for v in (1, 2, 3):
        g.add_edge(0, v, bandwidth=100.0, latency=0.5)
    for handshake in (False, True):
        env, net = make(g, alpha_s=0.25, send_overhead_s=1.0, rendezvous_handshake=handshake)
        posted = [net.send_overhead_end(0, v, 0.0) for v in (1, 2, 3)]
        assert posted == [1.0, 2.0, 3.0]
        eager = net.transfer(0, 1, 0)
        ends: dict[int, float] = {}
        env.run(until=5.0)
        for v, t in reversed(list(zip((1, 2, 3), posted, strict=True))):
            net.rendezvous_on_path(net.path_between(0, v), 100, _at_delivery(env, ends), v, t)
        env.run()
        assert eager.value.end_s == approx(4.0 + 0.25 + 0.5)
        # Each: alpha + 100/100 + latency from 5 (the request-to-send, alpha + latency
        # after its posting, arrived long before).
        assert ends == {v: approx(5.0 + 1.75) for v in (1, 2, 3)}
    # A receive that comes before the send's overhead is paid waits for it: the data
    # leaves at 1 without a handshake, at 1 + alpha + latency with one.
    for handshake, start in ((False, 1.0), (True, 1.75)):
        env, net = make(line((100.0, 0.5)), alpha_s=0.25, send_overhead_s=1.0,
                        rendezvous_handshake=handshake)  # fmt: skip
        done: dict[int, float] = {}
        net.rendezvous_on_path(
            net.path_between(0, 1), 100, _at_delivery(env, done), 1,
            net.send_overhead_end(0, 1, 0.0),
        )  # fmt: skip
        env.run()
        assert done == {1: approx(start + 1.75)}
    # To itself, a send pays no overhead.
    env, net = make(line((100.0, 0.5)), send_overhead_s=1.0)
    assert net.send_overhead_end(0, 0, 2.0) == 2.0


def test_injection_bandwidth_limits_a_single_flow():
    env, net = make(line((100.0, 0.5)), alpha_s=0.25, injection_bandwidth_bytes_per_s=50.0)
    ev = net.transfer(0, 1, 100)
    env.run()
    # Bottleneck is the 50 B/s egress port: 0.25 + 100/50 + 0.5.
    assert ev.value.end_s == approx(2.75)
    assert net.link_bytes() == {(EGRESS, 0): 100, (0, 1): 100, (INGRESS, 1): 100}
    assert net.link_capacity_bytes_per_s((EGRESS, 0)) == 50.0


def test_injection_bandwidth_shared_by_flows_of_one_source_and_one_destination():
    g = nx.DiGraph()
    for u, v in [(0, 1), (0, 2), (1, 3), (2, 3)]:
        g.add_edge(u, v, bandwidth=100.0, latency=0.125)
    env, net = make(g, injection_bandwidth_bytes_per_s=100.0)
    # Egress of 0 shared by 0->1 and 0->2: 50 B/s each, 100 B -> 2 s.
    x = net.transfer(0, 1, 100)
    y = net.transfer(0, 2, 100)
    env.run()
    assert x.value.end_s == approx(2.125)
    assert y.value.end_s == approx(2.125)
    assert net.link_peak_load_bytes_per_s()[(EGRESS, 0)] == 100.0
    # Ingress of 3 shared by 1->3 and 2->3, starting at t0 = 2.125.
    p = net.transfer(1, 3, 100)
    q = net.transfer(2, 3, 100)
    env.run()
    assert p.value.end_s == approx(2.125 + 2.0 + 0.125)
    assert q.value.end_s == approx(2.125 + 2.0 + 0.125)
    assert net.link_bytes()[(INGRESS, 3)] == 200


def test_zero_byte_and_self_messages():
    env, net = make(line((100.0, 0.1), (100.0, 0.2)), alpha_s=0.5)
    big = net.transfer(0, 2, 1000)
    zero = net.transfer(0, 2, 0)
    self_msg = net.transfer(1, 1, 10_000)
    env.run()
    # Zero bytes: alpha + latency = 0.5 + 0.3. Self: alpha only.
    assert zero.value.end_s == approx(0.8)
    assert self_msg.value.end_s == approx(0.5)
    # The big flow is not slowed by either: 0.5 + 1000/100 + 0.3.
    assert big.value.end_s == approx(10.8)
    assert net.link_bytes() == {(0, 1): 1000, (1, 2): 1000}
    assert net.pair_bytes == {(0, 2): 1000, (1, 1): 10_000}
    assert net.pair_messages == {(0, 2): 2, (1, 1): 1}
    assert net.flows_rerated == 1


def test_self_message_without_alpha_is_immediate():
    env, net = make(line((100.0, 0.1)))
    ev = net.transfer(0, 0, 5)
    env.run(until=1e-300)  # delivered at time 0, before anything later
    assert ev.processed
    assert ev.value == TransferRecord(0, 0, 5, 0.0, 0.0, None)


def test_a_message_to_itself_must_be_from_a_node_of_the_graph():
    # No route is asked for a message to itself, so the network checks the node itself
    # (both cores: the compiled one once refused a non-int node by type alone).
    env, net = make(line((100.0, 0.1)))
    with pytest.raises(ValueError, match="'a' to itself: 'a' is not a node of the graph"):
        net.transfer("a", "a", 5)
    with pytest.raises(ValueError, match="from 7 to itself: 7 is not a node"):
        net.start_transfer(7, 7, 5, lambda tag: None)
    assert net.pair_bytes == {} and net.transfers_started == 0
    net.start_transfer(1, 1, 5, lambda tag: None)
    env.run()
    assert net.pair_bytes == {(1, 1): 5}


def counts_at(env: simpy.Environment, net: FlowNetwork, t: float) -> tuple[int, int]:
    """Run to time t (s); the network's recomputations and flow rates computed so far."""
    env.run(until=t)
    return net.recomputations, net.flows_rerated


def test_disjoint_components_do_not_recompute_each_other():
    g = line((100.0, 0.0))
    g.add_edge(2, 3, bandwidth=100.0, latency=0.0)
    env, net = make(g)
    out: list[TransferRecord] = []
    send_at(env, net, 0.0, 0, 1, 1000, out, "X")
    send_at(env, net, 1.0, 2, 3, 100, out, "Y")
    assert counts_at(env, net, 0.5) == (1, 1)
    # Y started: only Y's component (Y alone) was recomputed.
    assert counts_at(env, net, 1.5) == (2, 2)
    # Y ended at t=2: its component is empty, X untouched.
    assert counts_at(env, net, 2.5) == (2, 2)
    env.run()
    assert {r.tag: r.end_s for r in out} == {"X": approx(10.0), "Y": approx(2.0)}
    # Contrast: a flow joining X's link re-rates both.
    env2, net2 = make(line((100.0, 0.0)))
    send_at(env2, net2, 0.0, 0, 1, 1000, [])
    send_at(env2, net2, 1.0, 0, 1, 100, [])
    assert counts_at(env2, net2, 1.5) == (2, 3)


def two_into_one(bw_01: float, bw_12: float, bw_31: float) -> nx.DiGraph:
    """0 -> 1 -> 2 and 3 -> 1, bandwidths in B/s, no latency."""
    g = nx.DiGraph()
    for u, v, bw in ((0, 1, bw_01), (1, 2, bw_12), (3, 1, bw_31)):
        g.add_edge(u, v, bandwidth=bw, latency=0.0)
    return g


def test_flows_slower_than_a_change_keep_their_rates_without_being_rerated():
    # 3 -> 1 (2 B/s) caps s; 0 -> 1 and 1 -> 2 (10 B/s) are shared with the others.
    env, net = make(two_into_one(10.0, 10.0, 2.0))
    out: list[TransferRecord] = []
    send_at(env, net, 0.0, 3, 2, 40, out, "s")  # 2 B/s throughout: ends at 40 / 2 = 20
    send_at(env, net, 0.0, 0, 2, 16, out, "f")  # the 8 B/s s leaves on 1 -> 2: ends at 2
    send_at(env, net, 4.0, 0, 2, 12, out, "h")  # 1 -> 2 shared 3 ways: at least 10 / 3 B/s
    assert counts_at(env, net, 1.0) == (1, 2)
    # f (8 B/s) ended: s, slower, keeps its 2 B/s and is not rated again.
    assert counts_at(env, net, 3.0) == (1, 2)
    # h began, with at least min(10 / 1, 10 / 2) = 5 B/s: s (2 B/s) keeps its rate, h
    # alone is rated: 10 - 2 = 8 B/s on 1 -> 2, 12 B in 1.5 s.
    assert counts_at(env, net, 4.5) == (2, 3)
    assert {f.tag: f.rate_bytes_per_s for f in net.active_flows()} == {
        "s": approx(2.0),
        "h": approx(8.0),
    }
    env.run()
    assert (net.recomputations, net.flows_rerated) == (2, 3)
    assert {r.tag: r.end_s for r in out} == {"f": approx(2.0), "h": approx(5.5), "s": approx(20.0)}


def _three_shared_links(lx: float, s: float, ly: float) -> tuple[nx.DiGraph, dict]:
    """Flows X (0 -> 1) over Lx then S, Y (2 -> 3) over S then Ly, Z (4 -> 5) over Ly,
    W (6 -> 7) over Lx; each also crosses links of its own at 1000 B/s. Bandwidths of
    Lx, S and Ly in B/s, no latency."""
    g = nx.DiGraph()
    shared = {"Lx": ("lx", "lx'"), "S": ("s", "s'"), "Ly": ("ly", "ly'")}
    for name, bw in (("Lx", lx), ("S", s), ("Ly", ly)):
        g.add_edge(*shared[name], bandwidth=bw, latency=0.0)
    routes = {}
    for src, dst, via in (
        (0, 1, ("Lx", "S")),
        (2, 3, ("S", "Ly")),
        (4, 5, ("Ly",)),
        (6, 7, ("Lx",)),
    ):
        hops = [(src, shared[via[0]][0])]
        for a, b in itertools.pairwise(via):
            hops += [shared[a], (shared[a][1], shared[b][0])]
        hops += [shared[via[-1]], (shared[via[-1]][1], dst)]
        for u, v in hops:
            if not g.has_edge(u, v):
                g.add_edge(u, v, bandwidth=1000.0, latency=0.0)
        routes[(src, dst)] = tuple(hops)
    return g, routes


def _x_y_z_sending(lx: float, s: float, ly: float) -> tuple[simpy.Environment, FlowNetwork]:
    """The network of :func:`_three_shared_links`, X, Y and Z sending 10,000 B from 0."""
    g, routes = _three_shared_links(lx, s, ly)
    env = simpy.Environment()
    net = FlowNetwork(env, g, lambda s, d: routes[(s, d)])
    for src in (0, 2, 4):
        send_at(env, net, 0.0, src, src + 1, 10_000, [])
    return env, net


def test_flows_whose_bottleneck_a_change_leaves_alone_are_not_rated_again():
    # Lx 4 B/s, S 30 B/s, Ly 20 B/s. Y and Z share Ly: 10 B/s each. X alone on Lx: 4 B/s.
    # S carries 4 + 10 = 14 of 30 B/s: nobody's bottleneck.
    env, net = _x_y_z_sending(4.0, 30.0, 20.0)
    send_at(env, net, 1.0, 6, 7, 10_000, [])  # W joins X on Lx at t = 1
    rated = counts_at(env, net, 0.5)[1]
    rates = sorted((a.src, a.rate_bytes_per_s) for a in net.active_flows())
    assert rates == [(0, approx(4.0)), (2, approx(10.0)), (4, approx(10.0))]
    # W joins X's bottleneck Lx: X and W are filled, 2 B/s each. Y and Z, whose bottleneck
    # Ly the change leaves alone, keep their rates unrated (S, which X shares with Y,
    # keeps capacity to spare: 2 + 10 of 30, so Y passes the test there).
    assert counts_at(env, net, 1.5)[1] - rated == 2
    rates = sorted((a.src, a.rate_bytes_per_s) for a in net.active_flows())
    assert rates == [(0, approx(2.0)), (2, approx(10.0)), (4, approx(10.0)), (6, approx(2.0))]


def test_a_link_filled_up_by_a_change_is_shared_with_the_flows_kept_there():
    # Lx 4 B/s shared by X and W (2 B/s each); Y and Z share Ly (20 B/s): 10 each. S (13
    # B/s) carries 2 + 10 = 12: capacity to spare. W ends at t = 1 (2 B of 2 B/s): X
    # alone on Lx could take 4, but S would then carry 14 > 13, and Y (10 B/s) is faster
    # than X's 3 there: S must be shared. Max-min (by hand): X frozen first at Lx's 4,
    # then S leaves 13 - 4 = 9 for Y (below Ly's 10), and Z takes 20 - 9 = 11.
    env, net = _x_y_z_sending(4.0, 13.0, 20.0)
    send_at(env, net, 0.0, 6, 7, 2, [])
    env.run(until=0.5)
    rates = sorted((a.src, a.rate_bytes_per_s) for a in net.active_flows())
    assert rates == [(0, approx(2.0)), (2, approx(10.0)), (4, approx(10.0)), (6, approx(2.0))]
    assert (net.recomputations, net.flows_rerated) == (1, 4)
    env.run(until=1.5)
    rates = sorted((a.src, a.rate_bytes_per_s) for a in net.active_flows())
    assert rates == [(0, approx(4.0)), (2, approx(9.0)), (4, approx(11.0))]
    assert net.link_peak_load_bytes_per_s()[("s", "s'")] == approx(13.0)
    # One recomputation, the change spreading as it fills: X (its bottleneck Lx lost W)
    # is filled; S, about to freeze it at 13 - 10 = 3, finds Y faster, who joins; once Y
    # froze at 9, Z's bottleneck Ly has 1 B/s left when the level reaches Z's 10: Z joins.
    assert (net.recomputations, net.flows_rerated) == (2, 7)


@pytest.mark.parametrize("w_first", [True, False])
def test_components_of_one_instant_that_meet_through_a_filled_link(w_first):
    # Lx 4 B/s shared by X and W (2 B/s each); Ly 2 B/s shared by Y and Z (1 B/s each);
    # S (5 B/s) carries X's 2 and Y's 1: capacity to spare. W (2 B) and Z (1 B) end at
    # t = 1 together, and the recomputation starts from both ends' links, one after the
    # other. From Lx's, X may take Lx's 4 (S then carries 4 + 1 = 5: full, X the faster);
    # from Ly's, S is full and its flows meet: the two are filled together. Max-min (by
    # hand): Ly's 2 / 1 is the lowest share: Y at 2, then S leaves 5 - 2 = 3 for X (below
    # Lx's 4). Whichever end comes first, the rates are those.
    g, routes = _three_shared_links(4.0, 5.0, 2.0)
    env = simpy.Environment()
    net = FlowNetwork(env, g, lambda s, d: routes[(s, d)])
    ends = [(6, 2), (4, 1)] if w_first else [(4, 1), (6, 2)]
    for src, size in ends:
        send_at(env, net, 0.0, src, src + 1, size, [])
    for src in (0, 2):
        send_at(env, net, 0.0, src, src + 1, 10_000, [])
    env.run(until=0.5)
    rates = sorted((a.src, a.rate_bytes_per_s) for a in net.active_flows())
    assert rates == [(0, approx(2.0)), (2, approx(1.0)), (4, approx(1.0)), (6, approx(2.0))]
    env.run(until=1.5)
    rates = sorted((a.src, a.rate_bytes_per_s) for a in net.active_flows())
    assert rates == [(0, approx(3.0)), (2, approx(2.0))]


def test_rates_computed_but_found_unchanged_are_counted_apart():
    # X: 0 -> 10 -> 11 -> 12 -> 1 over L (10 -> 11, 10 B/s) and M (11 -> 12, 11 B/s); W:
    # 2 -> 10 (2 B/s) -> 11 -> 3 over L; V: 4 -> 11 (3 B/s) -> 12 -> 5 over M; the other
    # links 1000 B/s. W and V get their own links' 2 and 3 B/s; X gets 10 - 2 = 8 on L and
    # 11 - 3 = 8 on M, L filled first (its share, 5, is below M's 5.5): L is X's bottleneck.
    g = nx.DiGraph()
    for u, v, bw in (
        (0, 10, 1000.0), (10, 11, 10.0), (11, 12, 11.0), (12, 1, 1000.0),
        (2, 10, 2.0), (11, 3, 1000.0), (4, 11, 3.0), (12, 5, 1000.0),
    ):  # fmt: skip
        g.add_edge(u, v, bandwidth=bw, latency=0.0)
    env, net = make(g)
    out: list[TransferRecord] = []
    send_at(env, net, 0.0, 0, 1, 100, out, "X")
    send_at(env, net, 0.0, 2, 3, 2, out, "W")  # ends at 2 / 2 = 1
    send_at(env, net, 0.0, 4, 5, 30, out, "V")
    env.run(until=0.5)
    assert (net.flows_rerated, net.rates_changed) == (3, 3)
    # W ended on X's bottleneck: X is rated again, and keeps 8 B/s (M is full at it too);
    # V, whose bottleneck is its own link, is not.
    env.run(until=1.5)
    assert (net.flows_rerated, net.rates_changed) == (4, 3)
    assert {f.tag: f.rate_bytes_per_s for f in net.active_flows()} == {"X": 8.0, "V": 3.0}
    env.run()
    # V ends at 30 / 3 = 10; X has 100 - 10 * 8 = 20 B left, alone at L's 10 B/s: 2 s.
    assert {r.tag: r.end_s for r in out} == {
        "W": approx(1.0),
        "V": approx(10.0),
        "X": approx(12.0),
    }


def test_simultaneous_starts_are_batched_into_one_recomputation():
    g = nx.DiGraph()
    for i in range(1, 9):
        g.add_edge(0, i, bandwidth=800.0, latency=0.0)
        g.add_edge(i, 0, bandwidth=800.0, latency=0.0)
    env, net = make(g, injection_bandwidth_bytes_per_s=400.0)
    evs = [net.transfer(i, j, 100) for i in range(1, 9) for j in range(1, 9) if i != j]
    env.run()
    # 7 flows share each 400 B/s injection port: 400 / 7 B/s each, 100 B -> 7/4 s.
    assert all(ev.value.end_s == approx(1.75) for ev in evs)
    assert net.recomputations == 1
    assert net.flows_rerated == 56


def random_graph(seed: int) -> nx.DiGraph:
    rng = random.Random(seed)
    n = 10
    g = nx.DiGraph()
    edges = {(i, (i + 1) % n) for i in range(n)} | {((i + 1) % n, i) for i in range(n)}
    while len(edges) < 36:
        u, v = rng.randrange(n), rng.randrange(n)
        if u != v:
            edges.add((u, v))
    for u, v in sorted(edges):
        g.add_edge(u, v, bandwidth=rng.choice([1e3, 2e3, 5e3, 1e4]), latency=rng.uniform(0, 1e-3))
    return g


def run_stress(seed: int, injection: float | None = None):
    g = random_graph(seed)
    route = shortest_path_route(g)
    env = simpy.Environment()
    net = FlowNetwork(
        env,
        g,
        route,
        alpha_s=1e-4,
        injection_bandwidth_bytes_per_s=injection,
        record_link_series=True,
    )
    rng = random.Random(seed + 1)
    out: list[TransferRecord] = []
    specs = []
    for k in range(200):
        t = rng.choice([0.0, 0.5, round(rng.uniform(0, 1), 3)])
        src, dst = rng.randrange(10), rng.randrange(10)
        size = rng.choice([0, rng.randrange(1, 5000)])
        specs.append((t, src, dst, size, k))
        send_at(env, net, t, src, dst, size, out, k)
    env.run()
    return g, route, net, specs, out


@pytest.mark.parametrize("injection", [None, 3e3])
def test_random_stress_never_exceeds_capacity(injection):
    g, route, net, specs, out = run_stress(7, injection)
    assert len(out) == 200 and net.transfers_completed == 200 and net.active_flow_count == 0
    assert net.max_overload_ratio() <= 1.0 + 1e-9
    series = net.link_series()
    expected_bytes: dict = {}
    for t, src, dst, size, k in specs:
        rec = next(r for r in out if r.tag == k)
        assert (rec.src, rec.dst, rec.size_bytes, rec.start_s) == (src, dst, size, t)
        edges = route(src, dst)
        lat = sum(g.edges[e]["latency"] for e in edges)
        bws = [g.edges[e]["bandwidth"] for e in edges]
        if injection and edges:
            bws.append(injection)
            expected_bytes[(EGRESS, src)] = expected_bytes.get((EGRESS, src), 0) + size
            expected_bytes[(INGRESS, dst)] = expected_bytes.get((INGRESS, dst), 0) + size
        drain = size / min(bws) if size and edges else 0.0
        # Never faster than the uncontended time.
        assert rec.end_s - rec.start_s >= (1e-4 + drain + lat) * (1 - 1e-12)
        for e in edges:
            expected_bytes[e] = expected_bytes.get(e, 0) + size
    got = {k: v for k, v in net.link_bytes().items() if v}
    assert got == {k: v for k, v in expected_bytes.items() if v}
    # The load series integrates to the bytes carried and never exceeds capacity.
    for key, pts in series.items():
        cap = net.link_capacity_bytes_per_s(key)
        assert all(rate <= cap * (1 + 1e-9) for _, rate in pts)
        assert pts == [] or pts[-1][1] == 0.0
        carried = sum(r0 * (t1 - t0) for (t0, r0), (t1, _) in itertools.pairwise(pts))
        assert carried == pytest.approx(net.link_bytes()[key], rel=1e-9, abs=1e-6)
    assert sum(net.pair_bytes.values()) == sum(s[3] for s in specs)


def test_identical_input_gives_identical_output():
    *_, net1, _, out1 = run_stress(11, 3e3)
    *_, net2, _, out2 = run_stress(11, 3e3)
    assert out1 == out2
    assert list(map(repr, out1)) == list(map(repr, out2))
    assert net1.link_series() == net2.link_series()
    assert net1.link_bytes() == net2.link_bytes()
    assert net1.pair_duration_s == net2.pair_duration_s
    assert (net1.recomputations, net1.flows_rerated) == (net2.recomputations, net2.flows_rerated)


def test_bad_input_fails_loudly():
    g = line((100.0, 0.1))
    env, net = make(g)
    with pytest.raises(ValueError, match="size_bytes"):
        net.transfer(0, 1, -1)
    with pytest.raises(TypeError):
        net.transfer(0, 1, 1.5)
    bad = nx.DiGraph()
    bad.add_edge(0, 1, bandwidth=100.0)
    with pytest.raises(KeyError, match="latency"):
        FlowNetwork(env, bad, shortest_path_route(bad)).transfer(0, 1, 1)
    with pytest.raises(ValueError, match="not a path"):
        FlowNetwork(env, g, lambda s, d: [(1, 0)]).transfer(0, 1, 1)
    with pytest.raises(ValueError, match="alpha_s"):
        FlowNetwork(env, g, shortest_path_route(g), alpha_s=-1.0)
    with pytest.raises(ValueError, match="injection"):
        FlowNetwork(env, g, shortest_path_route(g), injection_bandwidth_bytes_per_s=0.0)
    with pytest.raises(TypeError, match="DiGraph"):
        FlowNetwork(env, nx.Graph(g), shortest_path_route(g))


def test_call_later_runs_timers_in_time_then_setting_order():
    env, net = make(line((100.0, 0.0)))
    seen: list = []
    net.call_later(2.0, lambda a: seen.append((env.now, a)), "b")
    net.call_later(1.0, lambda a: seen.append((env.now, a)), "a")
    net.call_later(2.0, lambda a: seen.append((env.now, a)), "c")
    # A timer set by a timer, due at once: runs at the same instant, after the others.
    net.call_later(1.0, lambda a: net.call_later(0.0, lambda b: seen.append((env.now, b)), "d"))
    env.run()
    assert seen == [(1.0, "a"), (1.0, "d"), (2.0, "b"), (2.0, "c")]
    assert net.transfers_started == 0
    with pytest.raises(ValueError, match=r"delay_s must be >= 0 seconds, got -1\.0"):
        net.call_later(-1.0, print)


def test_network_timers_never_run_past_simpy_events_or_run_until():
    # The network moves the clock itself between its own timers only while simpy has
    # nothing due earlier: a process's timeouts and run(until=...) must still cut in.
    env, net = make(line((100.0, 0.0)))
    seen: list = []
    for t in (1.0, 2.0, 3.0, 4.0):
        net.call_later(t, lambda a: seen.append(("net", env.now)))

    def proc():
        yield env.timeout(1.5)
        seen.append(("proc", env.now))
        yield env.timeout(0.5)
        seen.append(("proc", env.now))

    env.process(proc())
    env.run(until=3.5)
    assert env.now == 3.5
    assert seen == [("net", 1.0), ("proc", 1.5), ("net", 2.0), ("proc", 2.0), ("net", 3.0)]
    env.run()
    assert seen[-1] == ("net", 4.0) and env.now == 4.0


def test_a_long_chain_of_network_timers_alone_lands_on_exact_times():
    env, net = make(line((100.0, 0.0)))
    seen: list = []

    def tick(k: object) -> None:
        seen.append(env.now)
        if len(seen) < 10_000:
            net.call_later(0.25, tick)

    net.call_later(0.25, tick)
    env.run()
    assert len(seen) == 10_000
    assert seen[:3] == [0.25, 0.5, 0.75] and env.now == seen[-1] == 2500.0


def _max_min_by_hand(paths: dict, cap: dict) -> dict:
    """Max-min fair rates by the textbook definition, in exact fractions: raise every
    unfrozen flow's rate together; when a link fills, freeze the flows crossing it."""
    from fractions import Fraction

    rate = {f: Fraction(0) for f in paths}
    left = {e: Fraction(c) for e, c in cap.items()}
    frozen: set = set()
    while len(frozen) < len(paths):
        # The smallest raise that fills some link: its capacity left over its unfrozen flows.
        step = min(
            left[e] / n
            for e in cap
            if (n := sum(1 for f, p in paths.items() if e in p and f not in frozen))
        )
        for f in paths:
            if f not in frozen:
                rate[f] += step
        for e in cap:
            users = [f for f, p in paths.items() if e in p and f not in frozen]
            left[e] -= step * len(users)
        full = {e for e in cap if left[e] == 0}
        frozen |= {f for f, p in paths.items() if full & set(p)}
    return rate


def _random_routes(
    rng: random.Random, n_flows: int, n_shared: int, shared_caps: list, own_caps: list
) -> tuple[nx.DiGraph, dict[tuple[int, int], tuple]]:
    """Flow f from 2 f to 2 f + 1 over one to three of ``n_shared`` shared links
    (capacities in B/s drawn from ``shared_caps``), joined by links of its own (from
    ``own_caps``): most links carry one flow (a cap on it), a few are shared, with
    repeated capacities (ties), as collectives on a fat-tree give."""
    g = nx.DiGraph()
    shared = [(f"s{i}", f"s{i}x") for i in range(n_shared)]
    for u, v in shared:
        g.add_edge(u, v, bandwidth=rng.choice(shared_caps), latency=0.0)
    routes = {}
    for f in range(n_flows):
        src, dst = 2 * f, 2 * f + 1
        hops = [(src, f"p{f}a")]
        for u, v in rng.sample(shared, rng.randint(1, 3)):
            hops += [(hops[-1][1], u), (u, v)]
        hops += [(hops[-1][1], dst)]
        for u, v in hops:
            if not g.has_edge(u, v):
                g.add_edge(u, v, bandwidth=rng.choice(own_caps), latency=0.0)
        routes[(src, dst)] = tuple(hops)
    return g, routes


def _check_max_min_at_every_instant(env: simpy.Environment, net: FlowNetwork) -> int:
    """Run to the end; after every instant, the rates must be those of filling everything
    again by hand. Returns how many instants were checked."""
    checked = 0
    while env.peek() < float("inf"):
        env.step()
        active = net.active_flows()
        if not active or env.peek() == env.now:
            continue  # mid-instant: the recomputation runs once the instant's events are in
        paths = {(a.src, a.dst): a.links for a in active}
        cap = {e: net.link_capacity_bytes_per_s(e) for a in active for e in a.links}
        want = _max_min_by_hand(paths, cap)
        for a in active:
            assert a.rate_bytes_per_s == pytest.approx(float(want[(a.src, a.dst)]), rel=1e-9)
        checked += 1
    return checked


@pytest.mark.parametrize("seed", range(12))
def test_rates_are_the_max_min_fair_rates(seed):
    # Every start and every end recomputes, and each time the rates must be max-min fair.
    rng = random.Random(seed)
    g, routes = _random_routes(rng, 10, 4, [4e3, 6e3, 8e3], [3e3, 5e3, 8e3, 1e4])
    env = simpy.Environment()
    net = FlowNetwork(env, g, lambda s, d: routes[(s, d)])
    sizes = {f: rng.randint(1, 40) * 1000 for f in range(10)}
    for f in range(10):
        send_at(env, net, rng.choice([0.0, 0.5, 1.0]), 2 * f, 2 * f + 1, sizes[f], [])
    assert _check_max_min_at_every_instant(env, net) >= 5
    assert net.transfers_completed == 10


@pytest.mark.parametrize("seed", range(8))
def test_rates_stay_max_min_fair_as_flows_come_and_go_at_many_times(seed):
    # Kept rates (flows slower than what changed are not filled again) under churn: 40
    # flows of many rates over 6 shared links start at 20 different times.
    rng = random.Random(seed)
    g, routes = _random_routes(rng, 40, 6, [2e3, 4e3, 6e3, 9e3], [5e2, 1e3, 3e3, 8e3])
    env = simpy.Environment()
    net = FlowNetwork(env, g, lambda s, d: routes[(s, d)])
    for f in range(40):
        start = rng.randrange(20) * 0.25
        send_at(env, net, start, 2 * f, 2 * f + 1, rng.randint(1, 20) * 500, [])
    assert _check_max_min_at_every_instant(env, net) >= 20
    assert net.transfers_completed == 40


@pytest.mark.parametrize("seed", range(4))
def test_a_link_lists_exactly_its_draining_flows_in_start_order(seed):
    # A flow leaves its links' lists the moment its last byte leaves (nothing ended is
    # stepped over by the max-min search): at every step, each link lists n_flows flows,
    # every one still draining, in the order they began.
    rng = random.Random(seed)
    g, routes = _random_routes(rng, 30, 5, [2e3, 4e3, 6e3], [5e2, 1e3, 3e3])
    env = simpy.Environment()
    net = FlowNetwork(env, g, lambda s, d: routes[(s, d)], alpha_s=0.01)
    for f in range(30):
        send_at(env, net, rng.randrange(10) * 0.25, 2 * f, 2 * f + 1, rng.randint(1, 9) * 500, [])
    listed_at_most = 0
    while env.peek() < float("inf"):
        env.step()
        draining = {(a.src, a.dst) for a in net.active_flows()}
        for key, link in net._links.items():
            flows = list(link.flows)
            assert len(flows) == link.n_flows, key
            assert [f.seq for f in flows] == sorted(f.seq for f in flows), key
            assert {(f.path.src, f.path.dst) for f in flows} <= draining, key
            listed_at_most = max(listed_at_most, len(flows))
    assert net.transfers_completed == 30
    assert listed_at_most >= 3  # links were shared
    assert all(not link.flows for link in net._links.values())


@pytest.mark.skipif(
    not isinstance(FlowNetwork.__dict__["_flush"], types.FunctionType),
    reason="compiled core: its recomputation is not patchable (run_tests.sh reruns this "
    "file on the Python core)",
)
@pytest.mark.parametrize("case", ["fat_tree", "hierarchical"])
def test_kept_rates_give_the_times_of_filling_everything_again(monkeypatch, case):
    # The same simulation with every recomputation refilling whole components (no rate
    # kept): every time and byte is the same, the link load series equal to the last digit.
    import simnet

    cfg = {
        "fat_tree": {
            "distributed": {"num_nodes": 64, "bandwidth_limit_gb_per_s": 25.0},
            "topology": {"type": "fat_tree", "k": 8, "link_latency_us": 1.0},
            "workload": {"name": "resnet152", "world_size": 64},
        },
        # Contended on purpose: alltoall and allreduce through shared uplinks.
        "hierarchical": CONTENDED,
    }[case]

    def run() -> tuple:
        res = simnet.simulate(cfg)
        p = res.phases[0]
        return p, net_counts[-1]

    net_counts: list[int] = []
    flush = FlowNetwork._flush

    def counted(self, now):
        flush(self, now)
        net_counts.append(self.flows_rerated)

    monkeypatch.setattr(FlowNetwork, "_flush", counted)
    kept, kept_rated = run()

    fill = network._fill_joining

    def fill_whole(links, stamp, queue, checks, flows):
        # Every flow on a link filled over is filled again: whole components, from scratch.
        i = 0
        while i < links.n:
            for f in links.items[i].flows:
                if f.mark != stamp:
                    network._gather(f, stamp, links, flows)
            i += 1
        while checks.n:
            checks.pop()
        network._ready(links, stamp, checks)
        fill(links, stamp, queue, checks, flows)

    monkeypatch.setattr(network, "_fill_joining", fill_whole)
    full, full_rated = run()
    assert kept_rated < full_rated  # the case keeps rates
    assert kept.iteration_time_s == full.iteration_time_s
    assert kept.per_rank == full.per_rank
    assert kept.pair_bytes == full.pair_bytes and kept.pair_busy == full.pair_busy
    assert kept.link_bytes == full.link_bytes and kept.link_busy_s == full.link_busy_s
    assert kept.link_series.keys() == full.link_series.keys()
    for link, series in kept.link_series.items():
        other = dict(full.link_series[link].tolist())
        for t, load in series.tolist():
            if t in other:  # a change point of rounding size may be in one only
                assert load == pytest.approx(other[t], rel=1e-13, abs=1e-3)


class _Item:
    """A queued object whose release can be observed."""

    def __init__(self, name: object) -> None:
        self.name = name


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_timers_come_out_by_time_then_in_the_order_they_were_set(seed: int):
    """The queues' order (of timers and of the water-filling's links) is what makes
    runs deterministic: by key, ties in the order pushed, each numbered 1, 2, ...
    Pushes and pops interleave as in a simulation: runs of equal keys, a run of a key
    that is already queued, single items; over 2,000 items, so the compiled arrays
    grow past their first entries. Seven keys, more than the run queue's open runs, so
    a key comes back after its run was forgotten while an older run of it is still
    queued, and -0.0 is 0.0 as in a heap's comparisons. Checked against a plain heap of
    (key, number) pairs. A tenth of the items are killed (superseded timers) while
    queued, some twice, some after they came out: compiled, such an item comes out in
    its place as None; in Python as itself (callers tell it by its number)."""
    import heapq

    import simnet.network as network
    from simnet import _compiled

    compiled = _compiled.status()["network"] == "compiled"
    rng = random.Random(seed)
    keys = [0.0, -0.0, 1e-6, 2.5e-6, 3e-6, 0.125, 1.0, 7.0]
    q = network._KeyQueue()
    model: list[tuple[float, int, _Item]] = []
    nodes: dict[int, int] = {}  # number -> node (last_node after its push)
    killed: set[int] = set()
    seq = 0
    key = keys[0]

    def pop_and_check() -> None:
        first = (q.first_key(), q.first_seq(), q.first_item())
        item = q.pop()
        key, number, it = heapq.heappop(model)
        expected = None if compiled and number in killed else it
        assert first == (key, number, expected) and item is expected
        assert q.popped_seq == number

    for _round in range(40):
        for _ in range(rng.randrange(0, 120)):
            if rng.random() < 0.3:  # else the key just pushed, again: a run
                key = rng.choice(keys)
            seq += 1
            item = _Item(seq)
            assert q.push(key, item) == seq
            nodes[seq] = q.last_node
            heapq.heappush(model, (key, seq, item))
            if rng.random() < 0.1:
                # Mostly a queued item; else any (out already: no-op).
                pick_queued = rng.random() < 0.8
                victim = rng.choice(model)[1] if pick_queued else rng.randrange(1, seq + 1)
                if any(n == victim for _, n, _ in model):
                    killed.add(victim)
                for _ in range(rng.choice((1, 2))):
                    q.kill(nodes[victim], victim)
        assert q.n == len(model)
        for _ in range(rng.randrange(0, len(model) + 1)):
            pop_and_check()
    while q.n:
        pop_and_check()
    assert seq > 2000 and not model and len(killed) > 100


def test_the_key_queue_releases_what_it_holds():
    """Items leave the queue's hands when popped (also from among equal keys) and when
    the queue goes: the compiled queue counts its references itself."""
    import gc
    import weakref

    import simnet.network as network

    q = network._KeyQueue()
    items = [_Item(i) for i in range(300)]
    refs = [weakref.ref(x) for x in items]
    seqs = [q.push(float(i // 40), x) for i, x in enumerate(items)]  # runs of 40
    assert seqs == list(range(1, 301))
    popped = [q.pop() for _ in range(100)]  # two runs and half of the third
    assert [x.name for x in popped] == list(range(100))
    del items
    gc.collect()
    assert sum(r() is not None for r in refs) == 300  # 200 queued, 100 held here
    del popped
    gc.collect()
    assert sum(r() is not None for r in refs) == 200
    del q
    gc.collect()
    assert all(r() is None for r in refs)


@pytest.mark.parametrize("seed", [3, 4])
def test_the_key_queue_compacts_its_killed_items_and_keeps_its_order(seed):
    """When killed items are most of the queue (a calibrated run's superseded timers),
    the compiled queue takes them out at once: its count drops, they never come out,
    and the live items keep their nodes (kill still finds them) and their order, also
    against items pushed afterwards under the keys of runs that were open. In Python,
    kill drops nothing (callers tell superseded items by their numbers)."""
    import heapq

    import simnet.network as network
    from simnet import _compiled

    compiled = _compiled.status()["network"] == "compiled"
    rng = random.Random(seed)
    keys = [1e-6, 2e-6, 3e-6, 5e-6, 8e-6]
    q = network._KeyQueue()
    model: list[tuple[float, int, _Item]] = []
    nodes: dict[int, int] = {}
    for seq in range(1, 1201):
        key = keys[seq % 5] if rng.random() < 0.5 else rng.choice(keys) + seq * 1e-9
        item = _Item(seq)
        assert q.push(key, item) == seq
        nodes[seq] = q.last_node
        heapq.heappush(model, (key, seq, item))
    victims = rng.sample(range(1, 1201), 800)
    for v in victims:
        q.kill(nodes[v], v)
    dead = set(victims)
    # Compacted at the 601st kill (over half of 1,200 items): 599 left, the 199 killed
    # after it among them (under half).
    assert q.n == (1200 - 601 if compiled else 1200)
    # The live items' nodes are still theirs; items pushed now under the old keys come
    # after every item of those keys pushed before.
    for v in rng.sample(sorted(set(range(1, 1201)) - dead), 20):
        q.kill(nodes[v], v)
        dead.add(v)
    for seq in range(1201, 1301):
        item = _Item(seq)
        assert q.push(keys[seq % 5], item) == seq
        heapq.heappush(model, (keys[seq % 5], seq, item))
    out = []
    while q.n:
        first = (q.first_key(), q.first_seq())
        item = q.pop()
        assert first[1] == q.popped_seq
        if item is not None and item.name not in dead:
            out.append((first[0], q.popped_seq, item))
    live = [x for x in sorted(model) if x[1] not in dead]
    assert out == live


def test_a_killed_item_is_released_at_once_where_compiled():
    """A superseded timer's flow must not be held by the queue until its time comes
    (compiled: kill drops the reference; the Python heap keeps it until popped)."""
    import gc
    import weakref

    import simnet.network as network
    from simnet import _compiled

    q = network._KeyQueue()
    items = [_Item(i) for i in range(3)]
    refs = [weakref.ref(x) for x in items]
    nodes = []
    for i, x in enumerate(items):
        q.push(1.0 + i, x)
        nodes.append(q.last_node)
    q.kill(nodes[1], 2)
    q.kill(nodes[1], 2)  # again: nothing more
    q.kill(nodes[0], 7)  # not that node's item: nothing
    del items
    gc.collect()
    compiled = _compiled.status()["network"] == "compiled"
    assert [r() is not None for r in refs] == [True, not compiled, True]
    out = [q.pop() for _ in range(3)]
    assert [x if x is None else x.name for x in out] == [0, None if compiled else 1, 2]
    assert q.n == 0


@pytest.mark.parametrize("seed", [3, 4])
def test_the_fillings_check_heap_pops_by_key_then_push_order(seed: int):
    """The water-filling's queue of kept flows (_Heap) comes out by key, ties in push
    order, as a heap of (key, number) pairs does: 3,000 items over interleaved pushes
    and pops (past the compiled array's first 64 entries), keys from a few values so
    that most tie, -0.0 among them (equal to 0.0 in every comparison)."""
    import heapq

    import simnet.network as network

    rng = random.Random(seed)
    keys = [-0.0, 0.0, 0.5, 1.0, 2.5, 1e9]
    q = network._Heap()
    model: list[tuple[float, int]] = []
    items = [_Item(i) for i in range(3000)]  # kept alive here: the heap borrows them
    out = []
    for i, x in enumerate(items):
        key = rng.choice(keys) if rng.random() < 0.8 else rng.uniform(0.0, 3.0)
        q.push(key, x)
        heapq.heappush(model, (key, i))
        assert q.n == len(model)
        while model and rng.random() < 0.45:
            assert q.first_key() == model[0][0]
            out.append((q.pop().name, heapq.heappop(model)[1]))
    while model:
        out.append((q.pop().name, heapq.heappop(model)[1]))
    assert all(a == b for a, b in out) and len(out) == 3000
    assert q.n == 0 and q.last_seq == 3000


@pytest.mark.parametrize("seed", [8, 9])
def test_the_fillings_link_heap_holds_each_link_once(seed: int):
    """The water-filling's links (_LinkHeap) by share, each at most once: filed again
    under less, a queued link moves there and after the links filed before it; under
    as much or more, it keeps its place; dropped, it is gone. Checked against a model
    that keeps each queued link's (share, filing number) and pops the least, over
    4,000 random filings, drops and pops of 300 links (shares from a few values, so
    most tie)."""
    import simnet.network as network

    rng = random.Random(seed)
    links = [network._Link(("l", i), 1.0, 0.0) for i in range(300)]
    q = network._LinkHeap()
    live: dict[int, tuple[float, int]] = {}
    seq = 0
    popped = 0
    for _ in range(4000):
        r = rng.random()
        i = rng.randrange(len(links))
        if r < 0.55:
            share = rng.choice([0.5, 1.0, 1.5, 2.0, 4.0]) if rng.random() < 0.7 else rng.random()
            q.file(links[i], share)
            if i not in live or share < live[i][0]:
                seq += 1
                live[i] = (share, seq)
        elif r < 0.75:
            q.drop(links[i])
            live.pop(i, None)
        elif live:
            want = min(live, key=lambda k: live[k])
            assert q.first_key() == live[want][0]
            assert q.pop() is links[want]
            del live[want]
            popped += 1
        assert q.n == len(live)
    while live:
        want = min(live, key=lambda k: live[k])
        assert q.pop() is links[want]
        del live[want]
    assert q.n == 0 and q.last_seq == seq and popped > 500
    if _compiled_network():
        assert all(link.qpos == -1 for link in links)


def _compiled_network() -> bool:
    from simnet import _compiled

    return _compiled.status()["network"] == "compiled"


def test_router_routes_are_kept_once_with_the_same_statistics():
    # Router.path is a pure function of the pair: the network keeps each pair's path in
    # its own table, asks the Router without its cache, and reports what it reports
    # for the same routes given as any other function (pairs in first-use order).
    import topologies

    g = topologies.fat_tree(4, 1e9, 1e-6)
    pairs = [(0, 15), (3, 9), (15, 0), (0, 15), (5, 5), (3, 9), (8, 2)]
    results = []
    for static in (True, False):
        router = topologies.Router(g, ecmp=True)
        route = router.path if static else (lambda s, d, r=router: r.path(s, d))
        env = simpy.Environment()
        net = FlowNetwork(env, g, route, injection_bandwidth_bytes_per_s=2e9)
        for s, d in pairs:
            net.transfer(s, d, 1000 + s)
        env.run()
        if static:
            assert not net._paths and not router._cache and not router._ecmp_paths
            assert [(p.src, p.dst) for p in net._static_list] == [(0, 15), (3, 9), (15, 0), (8, 2)]
        else:
            assert not net._static_list and len(net._paths) == 4
        # (pair_busy_s: a static path keeps its pair's counters, the others share a _Pair)
        results.append(
            (
                list(net.pair_bytes.items()),
                net.pair_messages,
                net.link_bytes(),
                env.now,
                net.pair_busy_s,
                net.pair_rate_bytes_per_s(0, 15),
            )
        )
    assert results[0] == results[1]
    assert results[0][4][(0, 15)] > 0.0 and results[0][5] > 0.0
    assert results[0][0] == [
        ((5, 5), 1005),
        ((0, 15), 2000),
        ((3, 9), 2006),
        ((15, 0), 1015),
        ((8, 2), 1008),
    ]


def test_static_table_keys_pairs_by_number_and_refuses_what_is_not_one():
    # Endpoints 0..n-1: the path of src -> dst under src * n + dst. A source or
    # destination outside them (negative, n, a bool) goes to the Router, which names it.
    import topologies
    from topologies import TopologyError

    g = topologies.fat_tree(4, 1e9, 1e-6)
    router = topologies.Router(g, ecmp=True)
    env = simpy.Environment()
    net = FlowNetwork(env, g, router.path)
    assert net._n_ends == 16 and len(net._static) == 0
    net.transfer(15, 3, 100)
    env.run()
    assert len(net._static) == 1 and net._static.get(15 * 16 + 3) is net._static_list[0]
    assert net._static.get(3 * 16 + 15) is None
    for src in (-1, 16, True, 2**63, -(2**70)):  # (also ints too large for C)
        with pytest.raises(TopologyError, match="src="):
            net.start_transfer(src, 3, 100, lambda _t: None)
    for dst in (-1, 16, True, 2**70):
        with pytest.raises(TopologyError, match="dst="):
            net.start_transfer(3, dst, 100, lambda _t: None)
    assert net.pair_bytes == {(15, 3): 100}


def test_int_table_finds_what_was_put_through_collisions_and_growth():
    # Keys of a 16,384-endpoint network's pairs, spaced so that many share low bits,
    # put in a shuffled order: every one found (its own object), others absent, a key
    # put again replaced, the count of keys kept.
    from simnet.network import _IntTable

    rng = random.Random(7)
    keys = [s * 16384 + d for s in range(0, 16384, 97) for d in (1, 2, 4096, 8192, 16383)]
    rng.shuffle(keys)
    table = _IntTable()
    assert len(table) == 0 and table.get(5) is None
    items = {k: [k] for k in keys}
    for k in keys:
        table.put(k, items[k])
    assert len(table) == len(set(keys)) == 845
    assert all(table.get(k) is items[k] for k in keys)
    assert all(table.get(k + 3) is None for k in keys[:100])
    assert table.get(-1) is None and table.get(2**62) is None
    table.put(keys[0], "again")
    assert table.get(keys[0]) == "again" and len(table) == 845
    with pytest.raises(ValueError, match="keys must be >= 0"):
        table.put(-3, "x")
    with pytest.raises(ValueError, match="keys must be >= 0"):
        table.add(-3, "x")


@pytest.mark.parametrize("seed", range(3))
def test_int_table_takes_keys_out_as_a_dict_would(seed):
    # Puts, adds and takes interleaved at random over few keys (long probe runs that wrap
    # around the table's end, keys taken from their middle): after every operation the
    # table holds what a dict holds, and every key is found or not as in the dict.
    from simnet.network import _IntTable

    rng = random.Random(seed)
    universe = [rng.randrange(1 << 40) for _ in range(60)] + list(range(40))
    table, model = _IntTable(), {}
    for step in range(6000):
        k = rng.choice(universe)
        roll = rng.random()
        if roll < 0.35:
            table.put(k, (k, step))
            model[k] = (k, step)
        elif roll < 0.55:  # add: set only if absent, else the object it has
            assert table.add(k, (k, step)) == model.get(k)
            model.setdefault(k, (k, step))
        else:
            assert table.take(k) == model.pop(k, None)
        assert len(table) == len(model)
        if step % 50 == 0:
            assert all(table.get(u) == model.get(u) for u in universe)
            assert sorted(table.items()) == sorted(model.items())
    for k in list(model):
        assert table.take(k) == model.pop(k)
    assert len(table) == 0 and table.items() == [] and table.take(universe[0]) is None


def test_endpoints_numbered_otherwise_take_the_general_way():
    # Endpoints 5 and 7 (not 0..n-1): no static table; routes and bytes as ever.
    import topologies

    g = nx.DiGraph()
    g.add_nodes_from([5, 7], kind="endpoint")
    g.add_node("sw", kind="switch")
    for e in (5, 7):
        g.add_edge(e, "sw", bandwidth=1e9, latency=1e-6)
        g.add_edge("sw", e, bandwidth=1e9, latency=1e-6)
    router = topologies.Router(g)
    assert router.endpoint_ints == {5, 7}
    env = simpy.Environment()
    net = FlowNetwork(env, g, router.path)
    assert net._static is None
    net.transfer(5, 7, 1000)
    net.transfer(7, 5, 500)
    env.run()
    assert net.pair_bytes == {(5, 7): 1000, (7, 5): 500}
    assert env.now == pytest.approx(2e-6 + 1000 / 1e9)


def test_a_links_series_keeps_change_points_as_a_list_of_points_would():
    # The series as a list of (time, load) tuples, as links kept it before it took two
    # arrays: a load at the same time replaces the last point (which then goes if the
    # point before holds that load), and no series starts at 0.
    import random

    from simnet.network import _Series

    def reference(events):
        series = []
        for now, load in events:
            if series and series[-1][0] == now:
                series.pop()
                if series and series[-1][1] == load:
                    continue
            if series or load != 0.0:
                series.append((now, load))
        return series

    rng = random.Random(3)
    for _ in range(200):
        events, t = [], 0.0
        for _ in range(rng.randint(0, 40)):
            t += rng.choice([0.0, 0.0, 0.5, 1e-9])
            events.append((t, rng.choice([0.0, 1.0, 2.0, 2.0, 3.5e9])))
        s = _Series()
        for now, load in events:
            s.record(now, load)
        assert s.points() == reference(events)
        assert s.n == len(s.points())
        # The array form holds the same points, bit for bit, in (time_s, rate) rows.
        a = s.array()
        assert a.shape == (s.n, 2) and a.dtype == float
        assert [tuple(row) for row in a.tolist()] == s.points()


def test_a_watched_link_records_when_two_jobs_bytes_drain_over_it_together():
    # 0 -> 1 -> 2, 10 GB/s a hop. Job 0 sends 10 MB 0 -> 2 at t = 0; job 1 sends 2 MB
    # 1 -> 2 at 0.5 ms. On 1 -> 2 they share from 0.5 ms: 5 GB/s each, so job 1's bytes
    # drain in 0.4 ms: together from 0.5 to 0.9 ms; job 0 ends alone at 1.2 ms.
    env, net = make(line((10e9, 0.0), (10e9, 0.0)))
    net.watch_links([(1, 2)], job_of=[0, 1, -1], n_jobs=2)
    out: list = []
    send_at(env, net, 0.0, 0, 2, 10_000_000, out)
    send_at(env, net, 0.5e-3, 1, 2, 2_000_000, out)
    env.run()
    assert sorted(r.end_s for r in out) == [approx(0.9e-3), approx(1.2e-3)]
    meetings = net.meetings()
    assert list(meetings) == [(1, 2)]  # (0, 1) carried bytes but was not watched
    together_s, full_s, job_s, peak = meetings[(1, 2)]
    assert together_s == approx(0.4e-3)
    assert full_s == approx(0.4e-3)  # 5 + 5 GB/s: full all along
    assert job_s == [approx(0.4e-3), approx(0.4e-3)]
    assert peak == approx(10e9)


def test_a_watched_link_records_how_long_the_jobs_filled_it_together():
    # Into endpoint 2 over the 10 GB/s link 1 -> 2, each source's own link at 4 GB/s.
    # Job 0 sends 4 MB from 0, job 1 4 MB from 3, both at t = 0: 8 of 10 GB/s, not full.
    # At 0.5 ms job 0 sends 1 MB from 4 too: 12 GB/s asked, so the link is full, 10/3
    # GB/s each, until that message ends at 0.8 ms; the first two have 1 MB left then,
    # at 4 GB/s each: 0.25 ms more. Together 1.05 ms, of which full 0.3 ms.
    g = nx.DiGraph()
    for src in (0, 3, 4):
        g.add_edge(src, 1, bandwidth=4e9, latency=0.0)
    g.add_edge(1, 2, bandwidth=10e9, latency=0.0)
    env, net = make(g)
    net.watch_links([(1, 2)], job_of=[0, -1, -1, 1, 0], n_jobs=2)
    out: list = []
    send_at(env, net, 0.0, 0, 2, 4_000_000, out)
    send_at(env, net, 0.0, 3, 2, 4_000_000, out)
    send_at(env, net, 0.5e-3, 4, 2, 1_000_000, out)
    env.run()
    assert sorted(r.end_s for r in out) == [approx(0.8e-3), approx(1.05e-3), approx(1.05e-3)]
    together_s, full_s, job_s, peak = net.meetings()[(1, 2)]
    assert together_s == approx(1.05e-3)
    assert full_s == approx(0.3e-3)
    assert job_s == [approx(1.05e-3), approx(1.05e-3)]
    assert peak == approx(10e9)


def test_a_watched_link_keeps_its_peak_while_jobs_meet_apart_from_its_peak_alone():
    # Into endpoint 2 over the 10 GB/s link 1 -> 2. Job 0 sends 1 MB from 0 (its own link
    # 10 GB/s) at t = 0, alone: 10 GB/s, full, for 0.1 ms. At 0.5 ms job 0 sends 1 MB from
    # 4 and job 1 1 MB from 3, each over its own 4 GB/s link: together 8 of 10 GB/s for
    # 0.25 ms, never full together.
    g = nx.DiGraph()
    g.add_edge(0, 1, bandwidth=10e9, latency=0.0)
    for src in (3, 4):
        g.add_edge(src, 1, bandwidth=4e9, latency=0.0)
    g.add_edge(1, 2, bandwidth=10e9, latency=0.0)
    env, net = make(g)
    net.watch_links([(1, 2)], job_of=[0, -1, -1, 1, 0], n_jobs=2)
    send_at(env, net, 0.0, 0, 2, 1_000_000, [])
    send_at(env, net, 0.5e-3, 4, 2, 1_000_000, [])
    send_at(env, net, 0.5e-3, 3, 2, 1_000_000, [])
    env.run()
    assert net.link_peak_load_bytes_per_s()[(1, 2)] == approx(10e9)
    assert net.meetings()[(1, 2)] == (approx(0.25e-3), 0.0, [approx(0.25e-3)] * 2, approx(8e9))


def test_a_watched_injection_port_is_full_at_its_own_rate():
    # Endpoints 0 (job 0) and 1 (job 1) each send 1 MB to endpoint 2 over their own 10
    # GB/s links; 2's ingress port takes 5 GB/s: both flows share it, full, 2.5 GB/s each.
    g = nx.DiGraph()
    g.add_edge(0, 2, bandwidth=10e9, latency=0.0)
    g.add_edge(1, 2, bandwidth=10e9, latency=0.0)
    env, net = make(g, injection_bandwidth_bytes_per_s=5e9)
    port = (INGRESS, 2)
    net.watch_links([port], job_of=[0, 1, -1], n_jobs=2)
    out: list = []
    send_at(env, net, 0.0, 0, 2, 1_000_000, out)
    send_at(env, net, 0.0, 1, 2, 1_000_000, out)
    env.run()
    assert [r.end_s for r in out] == [approx(0.4e-3)] * 2
    assert net.meetings()[port] == (
        approx(0.4e-3),
        approx(0.4e-3),
        [approx(0.4e-3)] * 2,
        approx(5e9),
    )


def test_a_watched_link_used_by_one_job_at_a_time_records_no_meeting():
    # Job 1's message starts as job 0's last byte leaves (at 1 ms): one after the other.
    env, net = make(line((10e9, 0.0), (10e9, 0.0)))
    net.watch_links([(1, 2), (0, 1)], job_of=[0, 1, -1], n_jobs=2)
    send_at(env, net, 0.0, 0, 2, 10_000_000, [])
    send_at(env, net, 1e-3, 1, 2, 2_000_000, [])
    env.run()
    assert net.meetings() == {
        (0, 1): (0.0, 0.0, [0.0, 0.0], 0.0),
        (1, 2): (0.0, 0.0, [0.0, 0.0], 0.0),
    }


def test_links_are_watched_before_any_transfer():
    env, net = make(line((10e9, 0.0)))
    send_at(env, net, 0.0, 0, 1, 1_000, [])
    env.run()
    with pytest.raises(RuntimeError, match="before the first transfer"):
        net.watch_links([(0, 1)], [0, 0], 1)


def test_a_job_starting_as_anothers_last_byte_leaves_is_not_together_with_it():
    # Job 0 sends three messages one after another; job 1 starts at their end, the time
    # taken through microseconds (as a job's start_us is): it comes out 1.1e-19 s before
    # the last byte leaves, rounding, which is no meeting.
    def run(start_b: float | None) -> tuple[float, dict]:
        env, net = make(line((10e9, 0.0), (10e9, 0.0)))
        net.watch_links([(1, 2)], [0, 1, -1], 2)
        ends: list[float] = []

        def job_a():
            for size in (184_808, 2_054_216, 1_058_124):
                ends.append((yield net.transfer(0, 2, size)).end_s)

        env.process(job_a())
        if start_b is not None:
            send_at(env, net, start_b, 1, 2, 4_000_000, [])
        env.run()
        return ends[-1], net.meetings()

    end, _ = run(None)
    start_b = end * 1e6 / 1e6
    assert start_b < end  # the rounding this is about
    assert run(start_b)[1] == {(1, 2): (0.0, 0.0, [0.0, 0.0], 0.0)}


def test_a_watched_links_flow_from_an_endpoint_without_a_job_is_refused():
    env, net = make(line((10e9, 0.0)))
    net.watch_links([(0, 1)], [-1, -1], 1)
    send_at(env, net, 0.0, 0, 1, 1_000, [])
    with pytest.raises(ValueError, match="endpoint 0 sends but has no job"):
        env.run()
