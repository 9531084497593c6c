"""The optimised simulator against independent references.

simnet's executor runs ranks as callback-driven state machines, matches
collective messages on integer channel keys, walks compact per-rank plans
(generated per rank for the lazy ring and all-to-all schedules) and gets
deliveries by callback from the network. None of that may change a result.
The expected values here come from elsewhere, never from simnet's output:

- closed forms, for collectives on uncontended topologies;
- traffic matrices summed directly from the schedules' built ``steps`` (bytes
  are exact integers);
- a brute-force reference executor written below: one simpy process per rank,
  one simpy event per message (``FlowNetwork.transfer``), collectives walked
  step by step over ``Schedule.steps``;
- ``topologies.Router.path`` for every pair, for ``route_matrices``.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter, defaultdict, deque
from pathlib import Path

import numpy as np
import pytest
import simpy

import simnet
import topologies
from simnet.executor import SimExecutor
from simnet.network import FlowNetwork
from simnet.simulate import route_matrices
from workload.collectives import ALGORITHMS, Schedule, build_schedule, schedule_for
from workload.ops import Collective, Compute, Recv, Send, Testany, Wait
from workload.program import BuildOptions, Phase, ProgramBuilder, Workload

ROOT = Path(__file__).resolve().parent.parent
BW = 10e9  # bytes/s
LAT = 2e-6  # s per hop
ALPHA = 1e-6  # s per message
REL = 1e-12  # the reference executor runs the same arithmetic: equal up to rounding


# ---------------------------------------------------------------- closed forms


@pytest.mark.parametrize("p", [2, 3, 5, 8, 16, 64])
@pytest.mark.parametrize("alpha_s", [0.0, ALPHA])
def test_ring_allreduce_on_a_ring_is_the_closed_form(p, alpha_s):
    # n divisible by 4 p: equal chunks, so every step takes the same time.
    n = 4 * p * 3 * 2**14
    g = topologies.ring(p, bandwidth_bytes_per_s=BW, latency_s=LAT)
    want = 2 * (p - 1) * (alpha_s + LAT) + 2 * (p - 1) / p * n / BW
    got = simnet.collective_time(g, "allreduce", "ring", n, alpha_s=alpha_s)
    assert got == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("p", [2, 4, 7, 32])
def test_ring_allreduce_on_a_switch_is_the_closed_form(p):
    # Two hops per message; each endpoint's up and down links carry one flow a step.
    n = 4 * p * 2**15
    g = topologies.switch(p, bandwidth_bytes_per_s=BW, latency_s=LAT)
    want = 2 * (p - 1) * (ALPHA + 2 * LAT) + 2 * (p - 1) / p * n / BW
    got = simnet.collective_time(g, "allreduce", "ring", n, alpha_s=ALPHA)
    assert got == pytest.approx(want, rel=1e-9)


def test_large_ring_allreduce_is_the_closed_form():
    p, n = 128, 2**30
    g = topologies.ring(p, bandwidth_bytes_per_s=BW, latency_s=5e-6)
    want = 2 * (p - 1) * 5e-6 + 2 * (p - 1) / p * n / BW
    assert simnet.collective_time(g, "allreduce", "ring", n) == pytest.approx(want, rel=1e-9)


def test_eager_ring_allreduce_is_the_closed_form():
    # 1 KiB chunks: eager sends complete at once, the receives still chain the steps.
    p = 8
    n = 1024 * p
    g = topologies.ring(p, bandwidth_bytes_per_s=BW, latency_s=LAT)
    ex = SimExecutor(
        _one_collective_workload(p, "allreduce", n // 4, "ring"),
        lambda env: FlowNetwork(env, g, topologies.Router(g).path, alpha_s=ALPHA),
        list(range(p)),
    )
    want = 2 * (p - 1) * (ALPHA + LAT + n / p / BW)
    assert ex.run_phase().makespan_s == pytest.approx(want, rel=1e-9)


def _one_collective_workload(p: int, op: str, count: int, algorithm: str) -> Workload:
    def program(rank: int) -> list:
        b = ProgramBuilder(BuildOptions(algorithm=algorithm))
        b.collective(op, "world", count)
        return b.ops

    return Workload("one", p, {}, {"world": [tuple(range(p))]}, [Phase("one", program)])


# ---------------------------------------------------------------- a brute-force reference


class Reference:
    """The executor's model, written the plain way: event per message.

    Same protocol as simnet.executor (one FIFO per channel; eager sends
    complete at once, rendezvous ones when delivered; a collective step posts
    its receives, then its sends, then waits for all of them), same network.
    """

    def __init__(self, ex: SimExecutor) -> None:
        self.ex = ex
        self.workload = ex.workload
        self.params = {"rings": ex.policy.rings, "local_size": ex.policy.local_size}

    def run(self, phase_index: int = 0, iterations: int = 1) -> dict:
        env = self.env = simpy.Environment()
        self.net = self.ex.make_network(env)
        self.channels: dict = defaultdict(lambda: (deque(), deque()))
        self.seq: Counter = Counter()
        self.ends: dict[int, list[float]] = {}
        self.spans: dict[int, list[tuple[list[float], list[float]]]] = {}
        phase = self.workload.phases[phase_index]
        programs = [phase.program(r) for r in range(self.workload.world_size)]
        for rank, ops in enumerate(programs):
            env.process(self.rank(rank, ops, iterations))
        env.run()
        assert len(self.ends) == len(programs), "reference deadlocked"
        assert all(not s and not r for s, r in self.channels.values())
        return {
            "makespan_s": max(e[-1] for e in self.ends.values() if e),
            "spans": self.spans,
        }

    def transfer(self, src: int, dst: int, size: int) -> simpy.Event:
        pl = self.ex.placement
        return self.net.transfer(pl[src], pl[dst], size)

    def rendezvous(self, src: int, dst: int, size: int, posted_s: float) -> simpy.Event:
        """A rendezvous message's data, leaving once its request-to-send (a zero-byte
        message: alpha plus the route's latency, sent when the send was posted) is in."""
        net, pl = self.net, self.ex.placement
        a, b = pl[src], pl[dst]
        if not net.rendezvous_handshake or a == b:
            return self.transfer(src, dst, size)
        route_latency = sum(net.graph.edges[e]["latency"] for e in net.route(a, b))
        wait = posted_s + net.alpha_s + route_latency - self.env.now
        if wait <= 0:
            return self.transfer(src, dst, size)
        data = self.env.event()

        def later():
            yield self.env.timeout(wait)
            record = yield self.transfer(src, dst, size)
            data.succeed(record)

        self.env.process(later())
        return data

    def chain(self, source: simpy.Event, target: simpy.Event) -> None:
        if source.callbacks is None:
            target.succeed()
        else:
            source.callbacks.append(lambda _ev: target.succeed())

    def send(self, key: tuple, src: int, dst: int, size: int) -> simpy.Event | None:
        sends, recvs = self.channels[key]
        eager = size <= self.ex.eager
        if recvs:
            if eager:
                self.chain(self.transfer(src, dst, size), recvs.popleft())
                return None
            data = self.rendezvous(src, dst, size, self.env.now)
            self.chain(data, recvs.popleft())
            return data
        if eager:
            sends.append(self.transfer(src, dst, size))
            return None
        ready = self.env.event()
        sends.append((src, dst, size, ready, self.env.now))
        return ready

    def recv(self, key: tuple) -> simpy.Event:
        sends, recvs = self.channels[key]
        if sends:
            item = sends.popleft()
            if isinstance(item, simpy.Event):
                return item
            src, dst, size, ready, posted_s = item
            data = self.rendezvous(src, dst, size, posted_s)
            self.chain(data, ready)
            return data
        done = self.env.event()
        recvs.append(done)
        return done

    def collective(self, rank: int, op: Collective):
        members = self.workload.group_of(op.group, rank)
        me, p = members.index(rank), len(members)
        k = self.seq[(op.group, rank)]
        self.seq[(op.group, rank)] += 1
        if p == 1:
            return
        alg = self.ex.policy.choose(op, p)
        sched = schedule_for(op.op, alg, p, op.count_elems, root=op.root, params=self.params)
        base = ("c", op.group, members[0], k)
        for step in sched.steps:  # every step, built; skip those without this rank
            recvs = [t for t in step if t.dst == me]
            sends = [t for t in step if t.src == me]
            events = [self.recv((*base, members[t.src], rank)) for t in recvs]
            for t in sends:
                dst = members[t.dst]
                events.append(self.send((*base, rank, dst), rank, dst, t.size_bytes))
            for ev in events:
                if ev is not None:
                    yield ev

    def rank(self, rank: int, ops: list, iterations: int):
        env = self.env
        spans = self.spans[rank] = []
        for _ in range(iterations):
            reqs: dict = {}
            starts, ends = [], []
            for op in ops:
                starts.append(env.now)
                if isinstance(op, Compute):
                    if op.duration_us > 0:
                        yield env.timeout(op.duration_us * 1e-6 * self.ex.compute_scale)
                elif isinstance(op, Send):
                    ev = self.send(("p", op.group, rank, op.peer, op.tag), rank, op.peer,
                                   op.size_bytes)  # fmt: skip
                    if op.req is not None:
                        reqs[op.req] = ev
                    elif ev is not None:
                        yield ev
                elif isinstance(op, Recv):
                    ev = self.recv(("p", op.group, op.peer, rank, op.tag))
                    if op.req is not None:
                        reqs[op.req] = ev
                    else:
                        yield ev
                elif isinstance(op, Collective):
                    if op.req is None:
                        yield from self.collective(rank, op)
                    else:
                        reqs[op.req] = env.process(self.collective(rank, op))
                elif isinstance(op, Wait):
                    for r in op.reqs:
                        ev = reqs.pop(r)
                        if ev is not None:
                            yield ev
                else:
                    assert isinstance(op, Testany)
                ends.append(env.now)
            spans.append((starts, ends))
        self.ends[rank] = [e[-1] if e else 0.0 for _, e in spans]


def schedule_traffic(ex: SimExecutor, phase_index: int, iterations: int, n_end: int) -> dict:
    """Bytes per (src, dst) endpoint by part, summed from the programs and the built steps."""
    wl, pl = ex.workload, ex.placement
    params = {"rings": ex.policy.rings, "local_size": ex.policy.local_size}
    parts = {k: np.zeros((n_end, n_end), dtype=np.int64) for k in ("reduce", "copy", "p2p")}
    wire: Counter = Counter()
    messages = 0
    for rank in range(wl.world_size):
        for op in wl.phases[phase_index].program(rank):
            if isinstance(op, Send):
                parts["p2p"][pl[rank], pl[op.peer]] += iterations * op.size_bytes
                wire[op.group] += iterations * op.size_bytes
                messages += iterations
            elif isinstance(op, Collective):
                members = wl.group_of(op.group, rank)
                p = len(members)
                if p == 1:
                    continue
                me = members.index(rank)
                alg = ex.policy.choose(op, p)
                s = schedule_for(op.op, alg, p, op.count_elems, root=op.root, params=params)
                for step in s.steps:
                    for t in step:
                        if t.src == me:
                            part = "reduce" if t.reduce else "copy"
                            parts[part][pl[rank], pl[members[t.dst]]] += iterations * t.size_bytes
                            wire[op.group] += iterations * t.size_bytes
                            messages += iterations
    return {"parts": parts, "wire": wire, "messages": messages}


def _hier(n: int, **kw: object) -> dict:
    return {"type": "hierarchical", "num_nodes": n, "group_size": 4, **kw}


CONFIGS = {
    "gpt2_pipeline": {
        "distributed": {"num_nodes": 4, "bandwidth_limit_gb_per_s": 10.0},
        "topology": {"type": "ring", "num_nodes": 4, "link_latency_us": 1.0},
        "workload": {"name": "gpt2", "args": [8, 4, 2]},
    },
    "gpt2_pipeline_alpha_two_iterations": {
        "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 10.0},
        "topology": {"type": "ring", "num_nodes": 8, "link_latency_us": 1.0},
        "network": {"alpha_us": 2.0},
        "workload": {"name": "gpt2", "args": [8, 4, 2], "iterations": 2},
    },
    "cosmoflow_8_hierarchical": {
        "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 10.0},
        "topology": _hier(8),
        "workload": {"name": "cosmoflow", "scale": 0.01},
    },
    "cosmoflow_8_injection": {
        "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 10.0},
        "topology": _hier(8),
        "network": {"injection_bandwidth_gb_per_s": 5.0, "alpha_us": 1.0},
        "workload": {"name": "cosmoflow", "scale": 0.01},
    },
    "dlrm_8": {
        "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 10.0},
        "topology": {"type": "switch", "num_nodes": 8},
        "workload": {"name": "dlrm", "scale": 0.01},
    },
    "ring_trainer_seed": json.loads((ROOT / "config.json").read_text()),
    "gpt3_64_hierarchical": {
        "distributed": {"num_nodes": 64, "bandwidth_limit_gb_per_s": 25.0},
        "topology": _hier(64, inter_bandwidth_gb_per_s=12.5),
        "workload": {"name": "gpt3", "args": [8, 1], "scale": 0.01},
    },
}


def test_the_seed_config_is_the_ring_trainer_on_two_rings():
    cfg = CONFIGS["ring_trainer_seed"]
    assert cfg["topology"]["permutations"] == [0, 5]
    assert cfg["distributed"]["num_nodes"] == 10
    res = simnet.simulate(cfg)
    assert res.workload.model == "alexnet_ring"
    assert set(res.phases[0].algorithms) == {"reduce_scatter", "allgather"}
    assert all(v == ["multiring"] for v in res.phases[0].algorithms.values())


@pytest.mark.parametrize("name", list(CONFIGS))
def test_simulation_matches_the_reference_and_the_schedules(name):
    res = simnet.simulate(CONFIGS[name])
    n_end = res.graph.graph["num_endpoints"]
    for i, ph in enumerate(res.phases):
        sim = ph.timeline
        ex = sim.ex
        # Traffic: exact bytes from the schedules' steps and the point-to-point sends.
        want = schedule_traffic(ex, i, ph.iterations, n_end)
        for part in ("reduce", "copy", "p2p"):
            got = ph.part_traffic_bytes.get(part, np.zeros((n_end, n_end), dtype=np.int64))
            assert np.array_equal(got, want["parts"][part]), part
        total = sum(want["parts"].values())
        assert np.array_equal(ph.traffic_bytes, total)
        assert ph.wire_bytes_by_group == dict(want["wire"])
        assert ph.messages == want["messages"]
        # Times: the reference executor on a fresh network.
        ref = Reference(ex).run(i, ph.iterations)
        assert ph.makespan_s == pytest.approx(ref["makespan_s"], rel=REL)
        for rank, spans in ref["spans"].items():
            tl = sim.timelines[rank]
            for it, (starts, ends) in enumerate(spans):
                assert tl.starts[it] == pytest.approx(starts, rel=REL, abs=1e-15), (rank, it)
                assert tl.ends[it] == pytest.approx(ends, rel=REL, abs=1e-15), (rank, it)


def _mixed_program(p: int):
    """Concurrent non-blocking collectives and point-to-point, eager and rendezvous."""

    def program(rank: int) -> list:
        b = ProgramBuilder()
        right, left = (rank + 1) % p, (rank - 1) % p
        big = b.collective("allreduce", "world", 300_000, blocking=False)
        small = b.collective("allgather", "world", 64, blocking=False)
        s = b.send(right, 50_000, tag=1, group="world", blocking=False)
        r = b.recv(left, 50_000, tag=1, group="world", blocking=False)
        b.compute(3.0 + rank)
        b.testany([big, small])
        b.wait(r, small)
        b.collective("alltoall", "world", 20_000)
        b.collective("barrier", "world")
        b.collective("bcast", "world", 10_000, root=p - 1)
        b.wait(s, big)
        b.collective("reduce_scatter", "world", 9_999)
        b.send(left, 7, tag=2, group="world")
        b.recv(right, 7, tag=2, group="world")
        return b.ops

    return program


@pytest.mark.parametrize("topology", ["switch", "hierarchical", "ring"])
def test_mixed_nonblocking_workload_matches_the_reference(topology):
    p = 8
    if topology == "switch":
        g = topologies.switch(p, bandwidth_bytes_per_s=BW, latency_s=LAT)
    elif topology == "ring":
        g = topologies.ring(p, bandwidth_bytes_per_s=BW, latency_s=LAT)
    else:
        g = topologies.hierarchical(
            2,
            4,
            intra_bandwidth_bytes_per_s=4 * BW,
            inter_bandwidth_bytes_per_s=BW,
            intra_latency_s=LAT / 4,
            inter_latency_s=LAT,
        )
    router = topologies.Router(g)
    wl = Workload("mixed", p, {}, {"world": [tuple(range(p))]}, [Phase("mixed", _mixed_program(p))])
    placement = list(range(p))
    ex = SimExecutor(
        wl,
        lambda env: FlowNetwork(env, g, router.path, alpha_s=ALPHA, record_link_series=True),
        placement,
        eager_threshold_bytes=8192,
    )
    sim = ex.run_phase(0, iterations=2)
    ref = Reference(ex).run(0, 2)
    assert sim.makespan_s == pytest.approx(ref["makespan_s"], rel=REL)
    for rank, spans in ref["spans"].items():
        for it, (starts, ends) in enumerate(spans):
            assert sim.timelines[rank].starts[it] == pytest.approx(starts, rel=REL, abs=1e-15)
            assert sim.timelines[rank].ends[it] == pytest.approx(ends, rel=REL, abs=1e-15)
    want = schedule_traffic(ex, 0, 2, p)
    assert sim.messages_done == want["messages"]
    pairs = {part: dict(v) for part, v in sim.part_bytes.items()}
    for part, m in want["parts"].items():
        expect = {(s, d): int(m[s, d]) for s, d in zip(*np.nonzero(m), strict=True)}
        assert pairs.get(part, {}) == expect, part
    # Every byte and message crossed the network: the network's own pair counters
    # agree, pair by pair, and in number.
    total = sum(want["parts"].values())
    expect = {(s, d): int(total[s, d]) for s, d in zip(*np.nonzero(total), strict=True)}
    assert sim.net.pair_bytes == expect
    assert sum(sim.net.pair_messages.values()) == want["messages"]
    assert sim.net.pair_messages.keys() == sim.net.pair_bytes.keys()


def test_collective_bytes_read_again_are_not_counted_twice():
    # A collective call's bytes are tallied and added to the pair totals when read:
    # read at a progress report and again (twice) at the end, they are the totals
    # counted from the schedules, every time.
    p = 8
    g = topologies.switch(p, bandwidth_bytes_per_s=BW, latency_s=LAT)
    router = topologies.Router(g)
    wl = Workload("mixed", p, {}, {"world": [tuple(range(p))]}, [Phase("mixed", _mixed_program(p))])
    ex = SimExecutor(
        wl, lambda env: FlowNetwork(env, g, router.path, alpha_s=ALPHA), list(range(p))
    )
    seen: list[int] = []

    def report(sim) -> None:
        seen.append(sum(sum(v.values()) for v in sim.part_bytes.values()))
        assert sum(sim.wire_bytes_by_group.values()) == seen[-1]

    sim = ex.run_phase(0, iterations=3, progress=report)
    want = schedule_traffic(ex, 0, 3, p)
    total = sum(int(m.sum()) for m in want["parts"].values())
    assert seen and seen[-1] == total
    for _ in range(2):
        pairs = {part: dict(v) for part, v in sim.part_bytes.items()}
        for part, m in want["parts"].items():
            expect = {(s, d): int(m[s, d]) for s, d in zip(*np.nonzero(m), strict=True)}
            assert pairs.get(part, {}) == expect, part
        assert sum(sim.wire_bytes_by_group.values()) == total


def test_a_ranks_sums_reach_the_totals_as_updates_one_at_a_time():
    # Settling sums a rank's pair bytes in small dicts first (_RowSums): the totals and
    # the order of their pairs (which reaches the outputs' order) must be those of the
    # same updates made one at a time, with pairs already there and new ones.
    from simnet.executor import _RowSums

    rng = random.Random(7)
    start = {5: 1, 17: 2}
    direct = [dict(start), {}]
    summed = [dict(start), {}]
    for row in range(0, 400, 100):  # four ranks, their updates one after another
        into = _RowSums()
        for _ in range(60):
            which = rng.randrange(2)
            key = row + rng.choice([5, 17, 3, 40, 41, 99])
            nbytes = rng.randrange(1, 10**12)
            direct[which][key] = direct[which].get(key, 0) + nbytes
            small = into.of(summed[which])
            small[key] = small.get(key, 0) + nbytes
        assert into.of(summed[0]) is into.of(summed[0])  # one small dict a total
        into.add_up()
    assert [list(d.items()) for d in summed] == [list(d.items()) for d in direct]
    assert sum(direct[1].values()) > 0 and len(direct[0]) > len(start)


def test_an_unmatched_send_is_reported():
    def program(rank: int) -> list:
        b = ProgramBuilder()
        if rank == 0:
            b.send(1, 10, tag=5, group="world", blocking=False)
        return b.ops

    g = topologies.switch(2, bandwidth_bytes_per_s=BW, latency_s=LAT)
    wl = Workload("bad", 2, {}, {"world": [(0, 1)]}, [Phase("bad", program)])
    ex = SimExecutor(wl, lambda env: FlowNetwork(env, g, topologies.Router(g).path), [0, 1])
    with pytest.raises(RuntimeError, match="unmatched message channel"):
        ex.run_phase()


def test_a_deadlock_is_reported():
    def program(rank: int) -> list:
        b = ProgramBuilder()
        b.recv(1 - rank, 10**6, tag=0, group="world")
        b.send(1 - rank, 10**6, tag=0, group="world")
        return b.ops

    g = topologies.switch(2, bandwidth_bytes_per_s=BW, latency_s=LAT)
    wl = Workload("dead", 2, {}, {"world": [(0, 1)]}, [Phase("dead", program)])
    ex = SimExecutor(wl, lambda env: FlowNetwork(env, g, topologies.Router(g).path), [0, 1])
    with pytest.raises(RuntimeError, match="never finished"):
        ex.run_phase()


# ---------------------------------------------------------------- lazy schedules


def _built(s: Schedule) -> Schedule:
    """The same schedule with its steps built (so its per-rank queries read them)."""
    return Schedule(s.op, s.algorithm, s.group_size, s.steps, s.count_elems, s.root, s.chunk_elems)


def _lazy_cases() -> list[tuple[str, str, int, int, dict]]:
    rng = random.Random(7)
    out = []
    for p in (2, 3, 4, 6, 8, 12):
        for count in (0, 1, 5, 1001):
            out += [
                ("allreduce", "ring", p, count, {}),
                ("allgather", "ring", p, count, {}),
                ("reduce_scatter", "ring", p, count, {}),
                ("alltoall", "pairwise", p, count, {}),
                ("alltoall", "direct", p, count, {}),
            ]
            out += [
                ("allreduce", "hierarchical", p, count, {"local_size": g})
                for g in range(1, p + 1)
                if p % g == 0
            ]
            rings = [list(range(p)), list(reversed(range(p)))]
            perm = list(range(p))
            rng.shuffle(perm)
            rings.append(perm)
            for nr in (1, 2, 3):
                out += [
                    (op, "multiring", p, count, {"rings": rings[:nr]})
                    for op in ("allreduce", "allgather", "reduce_scatter")
                ]
    return out


@pytest.mark.parametrize(("op", "alg", "p", "count", "kw"), _lazy_cases())
def test_per_rank_generation_matches_the_built_steps(op, alg, p, count, kw):
    lazy = build_schedule(op, alg, p, count, **kw)
    built = _built(build_schedule(op, alg, p, count, **kw))
    for r in range(p):
        assert lazy.rank_steps(r) == built.rank_steps(r)
        assert lazy.rank_step_indices(r) == built.rank_step_indices(r)
        assert lazy.rank_plan(r) == built.rank_plan(r)
        assert lazy.bytes_sent(r) == built.bytes_sent(r)
        assert lazy.bytes_received(r) == built.bytes_received(r)
    assert lazy == built  # builds the lazy one's steps, then compares every field


def _flat_reference(s: Schedule, r: int) -> tuple:
    """Rank r's FlatPlan made from its transfers (``rank_steps``), by hand."""
    steps, totals, messages = [], ({}, {}), 0
    for sends, recvs in s.rank_steps(r):
        flat = [len(recvs), *(t.src for t in recvs)]
        for t in sends:
            flat += (t.dst, t.size_bytes)
            tot = totals[t.reduce]
            tot[t.dst] = tot.get(t.dst, 0) + t.size_bytes
            messages += 1
        steps.append(tuple(flat))
    reduce, copy = (tuple(x for kv in totals[k].items() for x in kv) for k in (True, False))
    return tuple(steps), reduce, copy, messages


@pytest.mark.parametrize("alg", ["recursive_doubling", "rabenseifner"])
def test_flat_plans_are_the_transfers_flattened(alg):
    # The recursive allreduces make each rank's flat plan directly; the executor
    # flattens every other schedule's rank_plan. Both must be the rank's transfers.
    from simnet.executor import _flatten

    for p in [*range(1, 34), 64, 96, 127, 129]:
        for count in (0, 1, 3, p + 1, 1001):
            lazy = build_schedule("allreduce", alg, p, count)
            eager = Schedule("allreduce", alg, p, lazy.steps, count, 0, lazy.chunk_elems)
            for r in range(p):
                want = _flat_reference(eager, r)
                got = lazy.rank_flat(r)
                if got is None:  # a group of one, or nothing to send: built eagerly
                    assert p == 1 or count == 0
                else:
                    assert got == want, (p, count, r)
                assert _flatten(eager.rank_plan(r)) == want, (p, count, r)
    assert build_schedule("allreduce", "ring", 4, 8).rank_flat(0) is None  # flattened later


@pytest.mark.parametrize("alg", ["recursive_doubling", "rabenseifner"])
def test_step_tables_hold_every_ranks_flat_plan(alg):
    # The recursive allreduces also give all ranks' plans at once, as arrays (the
    # simulator's form): column r must be rank r's transfers, folded ranks included.
    for p in [*range(2, 34), 64, 96, 127, 129]:
        for count in (1, 3, p + 1, 1001):
            lazy = build_schedule("allreduce", alg, p, count)
            eager = Schedule("allreduce", alg, p, lazy.steps, count, 0, lazy.chunk_elems)
            table = lazy.rank_table()
            assert table.src.shape == table.dst.shape == table.nbytes.shape
            assert table.group_size == p
            for r in range(p):
                assert table.rank_flat(r) == _flat_reference(eager, r), (p, count, r)
                n = int(table.nsteps[r])  # past its steps a column is empty
                assert (table.src[n:, r] == -1).all() and (table.dst[n:, r] == -1).all()
                assert (table.nbytes[n:, r] == 0).all() and not table.reduce[n:, r].any()
    for alg, op in (("pairwise", "alltoall"), ("bruck", "allgather")):
        assert build_schedule(op, alg, 8, 64).rank_table() is None  # several per step


@pytest.mark.parametrize("op", ["allreduce", "allgather", "reduce_scatter"])
def test_ring_step_tables_hold_every_ranks_flat_plan(op, monkeypatch):
    # One ring per run: every step receives from the previous rank and sends to the next.
    from simnet.executor import _flatten
    from workload import collectives

    for p in [2, 3, 4, 5, 7, 8, 16, 33]:
        for count in (1, p - 1, p, 3 * p + 1, 1001):
            s = build_schedule(op, "ring", p, count)
            table = s.rank_table()
            for r in range(p):
                assert table.rank_flat(r) == _flatten(s.rank_plan(r)), (p, count, r)
    # Several rings a step, or more entries than the limit: no table.
    assert (
        build_schedule(op, "multiring", 4, 64, rings=[[0, 1, 2, 3], [3, 1, 0, 2]]).rank_table()
        is None
    )
    assert build_schedule(op, "ring", 64, 1 << 20).rank_table() is not None
    # One entry fewer than an allreduce's 126 steps x 64 ranks (the others take 63 steps).
    monkeypatch.setattr(collectives, "STEP_TABLE_MAX_ENTRIES", 126 * 64 - 1)
    table = build_schedule(op, "ring", 64, 1 << 20).rank_table()
    assert (table is None) == (op == "allreduce")


@pytest.mark.parametrize(
    ("op", "alg"),
    [
        ("allreduce", "recursive_doubling"),
        ("allreduce", "rabenseifner"),
        ("allreduce", "ring"),
        ("allgather", "ring"),
        ("reduce_scatter", "ring"),
        ("allreduce", "nccl_ring"),
    ],
)
def test_delays_from_a_step_table_are_each_members_own(op, alg):
    # Every member's delays after its steps (cost per step + gamma x the bytes it
    # reduces in the step) are worked out from the step table for all members at
    # once: they must be the floats of the member's own steps, folded ranks included.
    from simnet.executor import SimExecutor, _delay_lists, _StepTable

    tables = 0
    for p in [*range(2, 18), 24, 33, 64, 96]:
        for count in (1, 3, p + 1, 1001):
            sched = build_schedule(op, alg, p, count)
            made = sched.rank_table()
            if made is None:  # (NCCL's rings of several channels)
                continue
            tables += 1
            table = _StepTable(made, {})
            for costs in ((1e-10, 0.0), (3.3e-10, 1.7e-6), (0.0, 2e-6)):
                lists = _delay_lists(table, costs)
                for m in range(p):
                    want = SimExecutor._delays(sched, m, costs)
                    assert lists[m] == want, (p, count, m, costs)
                    assert all(type(x) is float for x in lists[m])
    assert tables >= 30
    # Members with equal delays share one list (equal chunks: 1,024 elements on 64).
    made = build_schedule(op, alg, 64, 1024).rank_table()
    lists = _delay_lists(_StepTable(made, {}), (1e-10, 0))
    assert len({id(x) for x in lists}) == len({tuple(x) for x in lists}) < 64


def test_a_step_table_whose_transfers_do_not_pair_gives_no_delays():
    # A receive that no send matches: no delays from the table (the executor then
    # walks the member's steps as before).
    from simnet.executor import _delay_lists, _StepTable
    from workload.step_table import StepTable

    src = np.array([[1, -1]], dtype=np.int32)  # member 0 receives from 1 ...
    dst = np.array([[-1, -1]], dtype=np.int32)  # ... which sends nothing
    made = StepTable(
        src,
        dst,
        np.zeros((1, 2), dtype=np.int64),
        np.zeros((1, 2), dtype=bool),
        np.array([1, 0], dtype=np.int64),
        np.zeros(2, dtype=np.int64),
    )
    assert _delay_lists(_StepTable(made, {}), (1e-10, 1e-6)) is None
    dst[0, 1] = 0  # now member 1 sends to 0 in its first step
    made.nsteps[1] = 1
    made.nbytes[0, 1] = 40
    made.reduce[0, 1] = True
    assert _delay_lists(_StepTable(made, {}), (1e-10, 1e-6)) == [[1e-6 + 1e-10 * 40], [1e-6]]


def _resnet_on_six(**collectives) -> dict:
    # Six ranks: Rabenseifner folds two of them (the even ones sit out the levels).
    return {
        "distributed": {"num_nodes": 6, "bandwidth_limit_gb_per_s": 25.0},
        "topology": {"type": "fat_tree", "k": 4, "link_latency_us": 1.0},
        "workload": {"name": "resnet152", "world_size": 6, "scale": 0.01},
        "collectives": collectives,
    }


@pytest.mark.parametrize(
    "collectives",
    [
        {},
        {"algorithm": "recursive_doubling"},
        {"algorithm": "ring"},
        {"gamma_s_per_byte": 2e-10, "step_latency_us": 3.0},  # a delay after each step
        {"gamma_s_per_byte": 2e-10, "async_progress": False},
    ],
)
def test_step_tables_simulate_as_the_plans_they_hold(monkeypatch, collectives):
    # The executor runs a schedule with a step table from the table (no plan per rank):
    # every time, byte count and pair must be those of the same run from the tuples.
    from simnet.executor import PhaseSim, _StepTable

    kinds: list[type] = []
    real_prepare = PhaseSim._prepare

    def prepare(self, *args, **kw):
        made = real_prepare(self, *args, **kw)
        kinds.append(type(made.steps))  # the rank's steps
        return made

    monkeypatch.setattr(PhaseSim, "_prepare", prepare)
    cfg = _resnet_on_six(**collectives)
    a = simnet.simulate(cfg, record_series=False)
    assert kinds and set(kinds) == {_StepTable}
    kinds.clear()
    monkeypatch.setattr(Schedule, "rank_table", lambda self: None)
    b = simnet.simulate(cfg, record_series=False)
    assert kinds and set(kinds) == {tuple}
    assert a.iteration_time_s == b.iteration_time_s
    for pa, pb in zip(a.phases, b.phases, strict=True):
        assert pa.messages == pb.messages and pa.messages > 0
        assert pa.makespan_s == pb.makespan_s
        assert pa.per_rank == pb.per_rank
        assert pa.pair_bytes == pb.pair_bytes and pa.pair_busy == pb.pair_busy
        assert pa.wire_bytes_by_group == pb.wire_bytes_by_group
        # The same parts and pairs, added in the same order.
        for part in ("reduce", "copy"):
            assert list(pa.part_pair_bytes[part].items()) == list(pb.part_pair_bytes[part].items())
        assert pa.link_bytes == pb.link_bytes and pa.link_busy_s == pb.link_busy_s


class _Forgetful(dict):
    """A cache that keeps nothing."""

    def __setitem__(self, key, value):
        pass


@pytest.mark.parametrize(
    "cfg",
    [
        CONFIGS["gpt3_64_hierarchical"],
        {**_resnet_on_six(gamma_s_per_byte=2e-10), "network": {"send_overhead_us": 0.5}},
        {
            "distributed": {"num_nodes": 16, "bandwidth_limit_gb_per_s": 25.0},
            "topology": {"type": "rail_optimised", "group_size": 4},
            "workload": {"name": "gpt3", "args": [4, 1], "scale": 0.01},
            "collectives": {"algorithm": "nccl_tree", "streamed_trees": True},
        },
    ],
    ids=["gpt3_hierarchical", "resnet_gamma", "gpt3_nccl_streamed"],
)
def test_what_a_groups_calls_share_is_found_once_and_changes_nothing(monkeypatch, cfg):
    # The schedule, costs, group id, step table, kept paths and stream pipelines of a
    # collective are found once per group (PhaseSim._shared_call), by its first member;
    # found again by every member (the cache forgetting them), the run is the same.
    from simnet.executor import PhaseSim

    asked: list[tuple] = []
    real = PhaseSim._shared_call

    def shared_call(self, op, members, gkey):
        asked.append((op.op, op.count_elems, op.algorithm, op.root, gkey))
        return real(self, op, members, gkey)

    monkeypatch.setattr(PhaseSim, "_shared_call", shared_call)
    a = simnet.simulate(cfg, record_series=False)
    assert asked and len(asked) == len(set(asked))  # once per collective and group
    once = len(asked)
    asked.clear()

    def every_time(self, op, members, gkey):
        self._shared_calls = _Forgetful()
        return shared_call(self, op, members, gkey)

    monkeypatch.setattr(PhaseSim, "_shared_call", every_time)
    b = simnet.simulate(cfg, record_series=False)
    assert len(asked) > once  # every member found them again
    assert a.iteration_time_s == b.iteration_time_s
    for pa, pb in zip(a.phases, b.phases, strict=True):
        assert pa.messages == pb.messages and pa.messages > 0
        assert pa.makespan_s == pb.makespan_s and pa.per_rank == pb.per_rank
        assert pa.algorithms == pb.algorithms and pa.library == pb.library
        assert pa.nccl_algorithms == pb.nccl_algorithms
        assert list(pa.pair_bytes.items()) == list(pb.pair_bytes.items())
        assert list(pa.pair_busy.items()) == list(pb.pair_busy.items())
        for part in ("reduce", "copy"):
            assert list(pa.part_pair_bytes[part].items()) == list(pb.part_pair_bytes[part].items())
        assert list(pa.link_bytes.items()) == list(pb.link_bytes.items())
        assert pa.wire_bytes_by_group == pb.wire_bytes_by_group


@pytest.mark.parametrize(
    ("collectives", "network"),
    [
        ({}, {}),
        ({"algorithm": "recursive_doubling"}, {}),
        ({"algorithm": "ring"}, {"rendezvous_handshake": False}),
        ({}, {"eager_threshold_bytes": 1 << 30}),  # every message eager
        ({"gamma_s_per_byte": 2e-10, "async_progress": False}, {"send_overhead_us": 0.5}),
    ],
)
def test_kept_paths_simulate_as_paths_found_by_pair(monkeypatch, collectives, network):
    # Where the network routes every pair one way, a step table's sends find their paths
    # in the group's rows (PhaseSim._path_rows), not by pair: the network must make the
    # same paths and links in the same order, so every figure and its order is the same.
    from simnet.executor import PhaseSim

    kept: list = []
    real = PhaseSim._kept_paths

    def kept_paths(self, *args):
        rows = real(self, *args)
        kept.append(rows)
        return rows

    monkeypatch.setattr(PhaseSim, "_kept_paths", kept_paths)
    cfg = _resnet_on_six(**collectives)
    cfg["network"] = network
    a = simnet.simulate(cfg, record_series=True)
    # The rows hold paths now, each at its sender's member index (endpoint = rank here);
    # the members a fold leaves out of a row have none.
    paths = [(m, path) for rows in kept for r in rows if r for m, path in enumerate(r)]
    assert sum(path is not None for _, path in paths) >= 6
    assert all(path.src == m for m, path in paths if path is not None)
    monkeypatch.setattr(PhaseSim, "_kept_paths", lambda self, *args: None)
    b = simnet.simulate(cfg, record_series=True)
    assert a.iteration_time_s == b.iteration_time_s
    for pa, pb in zip(a.phases, b.phases, strict=True):
        assert pa.messages == pb.messages and pa.messages > 0
        assert pa.makespan_s == pb.makespan_s and pa.per_rank == pb.per_rank
        assert list(pa.pair_bytes.items()) == list(pb.pair_bytes.items())
        assert list(pa.pair_busy.items()) == list(pb.pair_busy.items())
        assert list(pa.link_bytes.items()) == list(pb.link_bytes.items())
        assert list(pa.link_busy_s.items()) == list(pb.link_busy_s.items())
        assert pa.link_series.keys() == pb.link_series.keys()
        for link, series in pa.link_series.items():
            assert series.tolist() == pb.link_series[link].tolist()


def test_rank_plan_is_rank_steps_in_compact_form():
    for op, algs in ALGORITHMS.items():
        for alg in algs:
            kw: dict = {}
            if alg == "hierarchical":
                kw = {"local_size": 2}
            elif alg == "multiring":
                kw = {"rings": [[0, 1, 2, 3], [3, 1, 0, 2]]}
            s = build_schedule(op, alg, 4, 37, **kw)
            for r in range(4):
                want = tuple(
                    (
                        tuple(t.src for t in recvs),
                        tuple((t.dst, t.size_bytes, t.reduce) for t in sends),
                    )
                    for sends, recvs in s.rank_steps(r)
                )
                assert s.rank_plan(r) == want, (op, alg, r)


def test_a_large_ring_schedule_is_not_built_until_asked():
    s = build_schedule("allreduce", "ring", 1024, 2**28)
    assert "steps" not in s.__dict__
    plan = s.rank_plan(5)
    assert len(plan) == 2 * 1023
    assert plan[0] == ((4,), ((6, 4 * 2**18, True),))
    assert s.bytes_sent(5) == 2 * 1023 * 4 * 2**18
    assert "steps" not in s.__dict__
    small = build_schedule("allreduce", "ring", 3, 6)
    assert small.num_steps == 4 and "steps" in small.__dict__


# ---------------------------------------------------------------- route matrices


def _route_matrices_pair_by_pair(g, ecmp: bool) -> tuple[np.ndarray, np.ndarray]:
    n = g.graph["num_endpoints"]
    router = topologies.Router(g, ecmp=ecmp)
    bw, lat = np.full((n, n), np.inf), np.zeros((n, n))
    for s in range(n):
        for d in range(n):
            if s != d:
                path = router.path(s, d)
                bw[s, d] = topologies.path_bandwidth_bytes_per_s(g, path)
                lat[s, d] = topologies.path_latency_s(g, path)
    return bw, lat


def _uneven_fat_tree():
    """A k=4 fat-tree whose equal-cost routes differ: two core links at half bandwidth,
    one with a latency a hair above the others (still a tie for routing, not for the sum)."""
    g = topologies.fat_tree(4, bandwidth_bytes_per_s=1e9, latency_s=1e-6)
    for u, v in (("agg0.0", "core0"), ("core3", "agg2.1")):
        g.edges[u, v]["bandwidth"] = g.edges[v, u]["bandwidth"] = 0.5e9
    g.edges["core1", "agg3.0"]["latency"] = 1e-6 * (1 + 1e-12)
    return g


def _degraded_rails():
    """4 nodes of 3 GPUs with a slow NVLink (GPU 1's, into its NVSwitch) and a slow NIC
    (rail 2's switch to GPU 5): bottlenecks of some routes, not of others."""
    g = topologies.rail_optimised(4, 3, 300e9, 25e9, 0.3e-6, 1.1e-6)
    g.edges[1, "nvl0"]["bandwidth"] = 10e9
    g.edges["leaf2", 5]["bandwidth"] = 5e9
    return g


TOPOLOGIES = {
    "ring": lambda: topologies.ring(9, bandwidth_bytes_per_s=1e9, latency_s=1.1e-6),
    "ring_one_way": lambda: topologies.ring(
        8, bandwidth_bytes_per_s=1e9, latency_s=0.3e-6, bidirectional=False
    ),
    "hierarchical": lambda: topologies.hierarchical(
        4,
        4,
        intra_bandwidth_bytes_per_s=150e9,
        inter_bandwidth_bytes_per_s=12.5e9,
        intra_latency_s=0.1e-6,
        inter_latency_s=0.7e-6,
    ),
    "switch": lambda: topologies.switch(9, bandwidth_bytes_per_s=3e9, latency_s=1e-7),
    "fat_tree": lambda: topologies.fat_tree(
        4, bandwidth_bytes_per_s=1e9, latency_s=1e-6, oversubscription=2.0
    ),
    "torus": lambda: topologies.torus((3, 4, 2), bandwidth_bytes_per_s=1e9, latency_s=0.1e-6),
    "fat_tree_uneven": lambda: _uneven_fat_tree(),
    "fat_tree_k6": lambda: topologies.fat_tree(6, bandwidth_bytes_per_s=1e9, latency_s=0.3e-6),
    "rail_optimised": lambda: topologies.rail_optimised(3, 4, 450e9, 50e9, 0.2e-6, 1.1e-6),
    # Its matrices by arithmetic (Router.rail_matrices): degraded links, one GPU a node,
    # one node, rails leaf10 and leaf11 sorting before leaf2, no latency.
    "rail_degraded": lambda: _degraded_rails(),
    "rail_one_gpu_a_node": lambda: topologies.rail_optimised(5, 1, 450e9, 50e9, 0.2e-6, 1.1e-6),
    "rail_one_node": lambda: topologies.rail_optimised(1, 6, 450e9, 50e9, 0.2e-6, 1.1e-6),
    "rail_twelve": lambda: topologies.rail_optimised(2, 12, 300e9, 25e9, 0.0, 0.0),
    "dragonfly": lambda: topologies.dragonfly(4, 3, 2, 25e9, 25e9, 12.5e9, 0.1e-6, 0.3e-6, 1e-6),
    # Matrices by arithmetic (Router.fat_tree_matrices, .dragonfly_matrices): degraded
    # links (by route 0 without ECMP; searched with it), cores core10.. sorting before
    # core2 (k = 8), the smallest fat-tree; dragonflies with degraded links, one group,
    # one router a group, more groups than routers, latencies of another kind each.
    "fat_tree_degraded": lambda: _degraded_fat_tree(),
    "fat_tree_k8": lambda: topologies.fat_tree(8, bandwidth_bytes_per_s=2e9, latency_s=0.7e-6),
    "fat_tree_k2": lambda: topologies.fat_tree(2, bandwidth_bytes_per_s=2e9, latency_s=0.7e-6),
    "dragonfly_degraded": lambda: _degraded_dragonfly(),
    "dragonfly_one_group": lambda: topologies.dragonfly(1, 4, 2, 25e9, 20e9, 10e9, 0.1e-6, 0.3e-6),
    "dragonfly_one_router": lambda: topologies.dragonfly(
        5, 1, 3, 25e9, 20e9, 10e9, 0.1e-6, 0, 1e-6
    ),
    "dragonfly_wide": lambda: topologies.dragonfly(
        7, 2, 1, 25e9, 20e9, 10e9, 0.3e-6, 0.1e-6, 0.7e-6
    ),
    "dragonfly_odd_latency": lambda: _odd_latency_dragonfly(),
}


def _degraded_fat_tree():
    """A k=4 fat-tree with a slow edge uplink, aggregation-to-core link and host link."""
    g = topologies.fat_tree(4, bandwidth_bytes_per_s=1e9, latency_s=0.3e-6)
    g.edges["edge1.0", "agg1.0"]["bandwidth"] = 0.25e9
    g.edges["core0", "agg3.0"]["bandwidth"] = 0.5e9
    g.edges[5, "edge1.0"]["bandwidth"] = 0.75e9
    return g


def _degraded_dragonfly():
    """4 groups of 3 routers: a slow global link one way (its middle edge), a slow local
    link, a slow endpoint link."""
    g = topologies.dragonfly(4, 3, 2, 25e9, 25e9, 12.5e9, 0.1e-6, 0.3e-6, 1e-6)
    g.edges["gw0.2", "gw2.0"]["bandwidth"] = 3e9
    g.edges["r1.0", "r1.2"]["bandwidth"] = 4e9
    g.edges["r3.1", 21]["bandwidth"] = 5e9
    return g


def _odd_latency_dragonfly():
    """A dragonfly with one local link slower to cross than the others (routes by
    arithmetic, matrices by search)."""
    g = topologies.dragonfly(3, 3, 2, 25e9, 25e9, 12.5e9, 0.1e-6, 0.3e-6, 1e-6)
    g.edges["r0.0", "r0.1"]["latency"] = 0.5e-6
    return g


@pytest.mark.parametrize("ecmp", [False, True])
@pytest.mark.parametrize("name", list(TOPOLOGIES))
def test_route_matrices_equal_router_paths_pair_by_pair(name, ecmp):
    g = TOPOLOGIES[name]()
    bw, lat = route_matrices(g, ecmp)
    want_bw, want_lat = _route_matrices_pair_by_pair(g, ecmp)
    assert np.array_equal(bw, want_bw)
    assert np.array_equal(lat, want_lat)  # exact: both are correctly rounded sums


@pytest.mark.parametrize(
    ("name", "ecmp", "closed"),
    [
        ("fat_tree", False, "fat_tree_matrices"),
        ("fat_tree", True, "fat_tree_matrices"),
        ("fat_tree_k8", True, "fat_tree_matrices"),
        ("fat_tree_k2", True, "fat_tree_matrices"),
        ("fat_tree_degraded", False, "fat_tree_matrices"),
        ("fat_tree_degraded", True, None),  # hashed routes differ in their bottleneck
        ("fat_tree_uneven", False, None),  # a latency of its own: routes by search
        ("dragonfly", True, "dragonfly_matrices"),
        ("dragonfly_degraded", False, "dragonfly_matrices"),
        ("dragonfly_one_group", False, "dragonfly_matrices"),
        ("dragonfly_one_router", False, "dragonfly_matrices"),
        ("dragonfly_wide", True, "dragonfly_matrices"),
        ("dragonfly_odd_latency", False, None),
        ("rail_degraded", False, "rail_matrices"),
        ("rail_degraded", True, None),
        ("rail_optimised", True, "rail_matrices"),
        ("rail_twelve", True, "rail_matrices"),
    ],
)
def test_route_matrices_in_closed_form_where_the_routes_are_known(name, ecmp, closed):
    # Which graphs the equivalence above checks the closed forms on (None: searched).
    router = topologies.Router(TOPOLOGIES[name](), ecmp=ecmp)
    forms = ("hierarchical_matrices", "rail_matrices", "fat_tree_matrices", "dragonfly_matrices")
    made = [f for f in forms if getattr(router, f)() is not None]
    assert made == ([closed] if closed else [])


@pytest.mark.parametrize("ecmp", [False, True])
@pytest.mark.parametrize("name", list(TOPOLOGIES))
def test_bandwidth_rows_are_the_matrix_rows(name, ecmp):
    # Router.bandwidth_rows: the closed forms a block of rows at a time (blocks that
    # start and end inside a node, a switch's endpoints or a group), against each pair's
    # own route; present where a closed form is, and on a dragonfly of any latencies.
    g = TOPOLOGIES[name]()
    router = topologies.Router(g, ecmp=ecmp)
    rows = router.bandwidth_rows()
    forms = ("hierarchical_matrices", "rail_matrices", "fat_tree_matrices", "dragonfly_matrices")
    closed = any(getattr(router, f)() is not None for f in forms)
    assert (rows is not None) == (closed or name == "dragonfly_odd_latency")
    if rows is None:
        return
    want_bw, _ = _route_matrices_pair_by_pair(g, ecmp)
    n = g.graph["num_endpoints"]
    for step in (1, 3, 5, n):
        got = np.concatenate([rows(r0, min(n, r0 + step)) for r0 in range(0, n, step)])
        assert np.array_equal(got, want_bw), step


def _wide_router(name: str):
    """Topology ``name``'s endpoint count, an ECMP router whose every search runs over
    arrays from the start (as a big fabric's do), and each pair's own route metrics."""
    g = TOPOLOGIES[name]()
    want_bw, want_lat = _route_matrices_pair_by_pair(g, True)
    router = topologies.Router(g, ecmp=True)
    router._wide = True
    return g.graph["num_endpoints"], router, want_bw, want_lat


@pytest.mark.parametrize("name", list(TOPOLOGIES))
def test_route_metrics_over_arrays_equal_router_paths_pair_by_pair(monkeypatch, name):
    # Every search over arrays from the start, as a big fabric's are: the metrics of a
    # source's destinations at once (Router._metrics_over_arrays) against each pair's
    # own route.
    n, router, want_bw, want_lat = _wide_router(name)
    used = []
    real = topologies.Router._metrics_over_arrays
    monkeypatch.setattr(
        topologies.Router, "_metrics_over_arrays", lambda r, *a: used.append(1) or real(r, *a)
    )
    for s in range(n):
        got = router.route_metrics(s, [*range(n), n - 1 - s])  # a destination twice
        assert [b for b, _ in got] == [*want_bw[s].tolist(), want_bw[s, n - 1 - s]], s
        assert [x for _, x in got] == [*want_lat[s].tolist(), want_lat[s, n - 1 - s]], s
    # Hierarchical graphs route without ECMP.
    assert bool(used) == router.ecmp


@pytest.mark.parametrize("name", list(TOPOLOGIES))
def test_route_metrics_of_any_pairs_equal_router_paths_pair_by_pair(name):
    # Pairs in no order, sources mixed, a pair twice and a source to itself: each pair's
    # own route's figures, to the bit, whether the searches run over arrays or not.
    g = TOPOLOGIES[name]()
    n = g.graph["num_endpoints"]
    want_bw, want_lat = _route_matrices_pair_by_pair(g, True)
    rng = np.random.default_rng(7)
    pairs = [(int(s), int(d)) for s, d in rng.integers(0, n, size=(3 * n, 2))]
    pairs += [(1, 1), pairs[0], (n - 1, 0)]
    for wide in (False, True):
        router = topologies.Router(g, ecmp=True)
        router._wide = wide
        bw, lat = router.route_metrics_pairs(pairs)
        assert bw.tolist() == [want_bw[s, d] for s, d in pairs]
        assert lat.tolist() == [want_lat[s, d] for s, d in pairs]


@pytest.mark.parametrize("name", list(TOPOLOGIES))
def test_route_metrics_rows_over_arrays_equal_router_paths_pair_by_pair(monkeypatch, name):
    # Every search over arrays from the start, as a big fabric's are: the metrics of the
    # sources of one search, all destinations at once (Router._metrics_over_arrays),
    # against each pair's own route, to the bit.
    n, router, want_bw, want_lat = _wide_router(name)
    blocks: list[int] = []
    real = topologies.Router._metrics_over_arrays

    def counted(r, search, src_of, dst_of):
        got = real(r, search, src_of, dst_of)
        if got is not None:
            blocks.append(len(set(src_of.tolist())))
        return got

    monkeypatch.setattr(topologies.Router, "_metrics_over_arrays", counted)
    bw, lat = router.route_metrics_rows(range(n), n)
    assert np.array_equal(bw, want_bw) and np.array_equal(lat, want_lat)
    # One source, destinations in any order, twice, and itself.
    for s in (0, n // 2, n - 1):
        dsts = [n - 1 - s, s, *range(n), 0]
        b, x = router.route_metrics_pairs([(s, d) for d in dsts])
        assert b.tolist() == [want_bw[s, d] for d in dsts]
        assert x.tolist() == [want_lat[s, d] for d in dsts]
    # Hierarchical graphs route without ECMP. The fat-trees' sources share searches by
    # switch, blocks of them at once (k = 2: one endpoint a switch).
    assert bool(blocks) == router.ecmp, blocks
    if name.startswith("fat_tree") and name != "fat_tree_k2":
        assert max(blocks) > 1


def test_route_metrics_over_arrays_pick_among_uneven_predecessors():
    # Predecessors covering different numbers of routes are scanned in order (no
    # division): a k=4 fat-tree without the links between agg0.0 and core1, so that
    # pod 0's edge switches are reached from the other pods by 1 route through agg0.0
    # and 2 through agg0.1.
    g = topologies.fat_tree(4, bandwidth_bytes_per_s=1e9, latency_s=1e-6)
    n = g.graph["num_endpoints"]
    g.remove_edges_from([("agg0.0", "core1"), ("core1", "agg0.0")])
    # Every link at its own bandwidth (routing ignores it): each route has its own
    # bottleneck, so a route picked wrongly shows.
    for j, (u, v) in enumerate(sorted(g.edges, key=repr)):
        g.edges[u, v]["bandwidth"] = 1e9 * (1 + j / 97)
    router = topologies.Router(g, ecmp=True)
    router._wide = True
    counts_differ = False
    for s in range(n):
        search = router._searched(s, (s + n // 2) % n)
        assert type(search).__name__ == "_FullSearch"
        cu = search.core.u
        for i in range(len(search.dist)):
            st, ln = int(search.pred_start[i]), int(search.pred_len[i])
            c = {int(search.counts_a[cu[e]]) for e in search.pred_e[st : st + ln]}
            counts_differ |= len(c) > 1
    assert counts_differ
    want_bw, want_lat = _route_matrices_pair_by_pair(g, True)
    bw, lat = router.route_metrics_rows(range(n), n)
    assert np.array_equal(bw, want_bw) and np.array_equal(lat, want_lat)


def test_crc32_of_decimals_is_zlibs():
    import zlib

    from topologies.routing import _crc32_of_decimals

    rng = random.Random(5)
    values = [0, 1, 9, 10, 99, 100, 999, 1000, 10**9, 2**40 + 7, 10**17]
    values += [rng.randrange(10 ** rng.randint(1, 15)) for _ in range(3000)]
    heads = [rng.choice([b"", b"(17, ", b"(123456, "]) for _ in values]
    got = _crc32_of_decimals([zlib.crc32(h) for h in heads], np.array(values), b", 0)")
    assert got.tolist() == [
        zlib.crc32(h + b"%d, 0)" % v) for h, v in zip(heads, values, strict=True)
    ]


def test_route_metrics_over_arrays_refuse_what_route_metrics_refuses():
    g = topologies.fat_tree(4, bandwidth_bytes_per_s=1e9, latency_s=1e-6)
    (edge,) = g.successors(5)
    g.remove_edge(edge, 5)  # 5 sends but is not reached
    router = topologies.Router(g, ecmp=True)
    router._wide = True
    for ask in (
        router.route_metrics_pairs,
        lambda pairs: router.route_metrics(0, [d for _, d in pairs]),
    ):
        with pytest.raises(topologies.TopologyError, match="not a node of the graph"):
            ask([(0, 1), (0, 99)])
        with pytest.raises(topologies.TopologyError, match="is not an endpoint"):
            ask([(0, 1), (0, "core0")])
        with pytest.raises(
            topologies.TopologyError, match="no route from endpoint 0 to endpoint 5"
        ):
            ask([(0, 9), (0, 5)])


def test_route_matrices_latency_is_the_exact_sum():
    # Latencies whose naive left-to-right sum rounds differently from the exact one.
    g = topologies.ring(12, bandwidth_bytes_per_s=1e9, latency_s=0.1)
    for i, (u, v) in enumerate(sorted(g.edges)):
        g.edges[u, v]["latency"] = [0.1, 0.2, 0.3, 1e-17, 0.7][i % 5]
    _, lat = route_matrices(g)
    _, want = _route_matrices_pair_by_pair(g, False)
    assert np.array_equal(lat, want)
    assert math.isinf(route_matrices(g)[0][3, 3])


def test_a_run_from_step_tables_never_builds_a_schedules_transfer_list():
    # A big schedule's list of every transfer (Schedule.steps) is built lazily and never
    # needed when the executor reads its step table: building it for each rank's first
    # call made a 1,024-rank ring allreduce 5x slower.
    from simnet.executor import SimExecutor
    from simnet.network import FlowNetwork
    from workload.collectives import Schedule
    from workload.ops import Collective
    from workload.program import Phase, Workload

    built = []
    real = Schedule.__getattr__

    def getattr_(self, name):
        if name == "steps":
            built.append(self)
        return real(self, name)

    g = topologies.ring(16, bandwidth_bytes_per_s=10e9, latency_s=1e-6)
    router = topologies.Router(g)
    wl = Workload(
        "t",
        16,
        {},
        {"world": [tuple(range(16))]},
        [Phase("x", lambda rank: [Collective("allreduce", "world", 1 << 16, algorithm="ring")])],
    )
    for stream_order in (None, True):
        ex = SimExecutor(
            wl, lambda env: FlowNetwork(env, g, router.path), list(range(16)),
            stream_order=stream_order,
        )  # fmt: skip
        Schedule.__getattr__ = getattr_
        try:
            sim = ex.run_phase()
        finally:
            Schedule.__getattr__ = real
        assert sim.makespan_s > 0 and not built, stream_order
