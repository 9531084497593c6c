"""Streamed NCCL rings: each run of a ring's steps as one message per hop."""

from __future__ import annotations

import itertools
import sys

import networkx as nx
import pytest

import simnet
import topologies
from simnet.simulate import STREAM_HINT_MESSAGES
from workload.collectives import ELEM_BYTES, build_schedule, stream_steps
from workload.ops import Collective


@pytest.mark.parametrize("op", ["allreduce", "allgather", "reduce_scatter"])
@pytest.mark.parametrize(("p", "count", "local"), [(16, 1000, 4), (12, 12_345, 4), (8, 3, None)])
def test_a_streamed_ring_moves_the_same_bytes_in_one_step_per_run(op, p, count, local):
    steps = build_schedule(op, "nccl_ring", p, count, local_size=local)
    streamed = build_schedule(op, "nccl_ring", p, count, local_size=local, streamed=True)
    assert streamed.pair_bytes() == steps.pair_bytes()
    runs = 2 if op == "allreduce" else 1
    assert stream_steps(streamed) == (p - 1,) * runs and stream_steps(steps) is None
    assert streamed.num_steps == runs and steps.num_steps == runs * (p - 1)
    channels = 1 if local is None else local
    for r in range(p):
        plan = streamed.rank_plan(r)
        assert [len(sends) for _, sends in plan] == [channels] * runs
        assert sum(b for _, sends in plan for _, b, _ in sends) == steps.bytes_sent(r)


def test_a_streamed_reduce_scatter_run_sends_every_block_but_the_ranks_own():
    # One ring 0..p-1: in its reduce-scatter run rank q sends blocks q - 1, q - 2, ...,
    # q + 1, one a step, and ends holding block q reduced; its stream carries them all.
    p, count = 5, 5 * 7 + 3  # blocks of 8, 8, 8, 7, 7 elements
    sizes = [8, 8, 8, 7, 7]
    sched = build_schedule("allreduce", "nccl_ring", p, count, streamed=True)
    for q in range(p):
        reduce_scatter, allgather = sched.rank_plan(q)
        to = (q + 1) % p
        own = ELEM_BYTES * (sum(sizes) - sizes[q])
        assert reduce_scatter == (((q - 1) % p,), ((to, own, True),))
        # then it passes on every block but the one it is sent last (block q + 1's owner's)
        assert allgather[1] == ((to, ELEM_BYTES * (sum(sizes) - sizes[to]), False),)


def test_only_the_nccl_algorithms_stream():
    with pytest.raises(ValueError, match="streamed is only used by algorithm"):
        build_schedule("allreduce", "ring", 4, 100, streamed=True)
    g = topologies.switch(4, 10e9, 1e-6)
    with pytest.raises(ValueError, match="streamed is read by nccl_ring, nccl_tree only"):
        simnet.collective_time(g, "allreduce", "ring", 4096, streamed=True)
    with pytest.raises(ValueError, match="leave out send_overhead_s, rendezvous_handshake"):
        simnet.collective_time(
            g,
            "allreduce",
            "nccl_ring",
            4096,
            streamed=True,
            send_overhead_s=1e-6,
            rendezvous_handshake=True,
        )


@pytest.mark.parametrize("channels", [None, 2])
def test_a_streamed_ring_on_like_uncontended_hops_takes_the_step_by_step_time(channels):
    # 8 endpoints on a switch: every hop two links of 1 us, 10 GB/s, nothing shared.
    p, bw, link_s, alpha = 8, 10e9, 1e-6, 3e-6
    g = topologies.switch(p, bw, link_s)
    size = p * ELEM_BYTES * 8000
    closed = 2 * (p - 1) * (alpha + 2 * link_s + size / p / bw)
    kw = {"channels": channels, "alpha_s": alpha}
    steps = simnet.collective_time(g, "allreduce", "nccl_ring", size, **kw)
    streamed = simnet.collective_time(g, "allreduce", "nccl_ring", size, streamed=True, **kw)
    assert steps == pytest.approx(closed, rel=1e-12)
    assert streamed == pytest.approx(closed, rel=1e-12)


def test_a_rings_members_settle_into_the_pace_of_its_slowest_hop_each_from_where_it_is(
    monkeypatch,
):
    # A ring 0 -> 1 -> 2 -> 3 -> 0, each hop its own link, no latency: 1 MB a step, hop
    # 0 -> 1 at 0.1 GB/s (10 ms a step), the others at 1 GB/s (1 ms). Step 1 ends at 10
    # ms for 0 and 1, 1 ms for 2 and 3; step 2 at 20, 20, 11, 11 (2 waits for 1, 3 for
    # 0); from then on 10 ms a step for all: after n steps 10 n, 10 n, 10 n - 9, 10 n - 9.
    import simpy

    from simnet import ring_stream
    from simnet.network import FlowNetwork
    from simnet.ring_stream import RingRun

    g = nx.DiGraph()
    for m in range(4):
        g.add_edge(m, (m + 1) % 4, bandwidth=0.1e9 if m == 0 else 1e9, latency=0.0)
    route = lambda src, dst: ((src, dst),)  # noqa: E731 (every hop its own link)
    net = FlowNetwork(simpy.Environment(), g, route)
    n = 7
    run = RingRun([(m, (m + 1) % 4, n * 1_000_000) for m in range(4)], n, range(4), net)
    ms = [10 * n, 10 * n, 10 * n - 9, 10 * n - 9]
    assert run.ends_s([0.0] * 4).tolist() == [pytest.approx(t * 1e-3, rel=1e-12) for t in ms]
    # Its stream: 10 n ms for 0 and 1 (the slow hop's), n ms for 2 and 3.
    assert run.delays_s().tolist() == [
        pytest.approx(d * 1e-3, rel=1e-12) for d in (0, 0, 9 * n - 9, 9 * n - 9)
    ]
    # Member 2 late: its step 1 and 3's wait for it, 1's step 1 waits for its 0 -> 1
    # hop (10 ms) anyway. 5 ms late, 2 and 3 end step 1 at 6 ms and step 2 at 11 as
    # before: hidden. 15 ms late, steps 1 and 2 end at 10, 16, 16, 16 and 26, 26, 17, 17:
    # all 6 ms later than from a common start.
    for late_ms, extra_ms in ((5, 0), (15, 6)):
        later = run.ends_s([0.0, 0.0, late_ms * 1e-3, 0.0]).tolist()
        ms = [10 * n + extra_ms] * 2 + [10 * n - 9 + extra_ms] * 2
        assert later == [pytest.approx(t * 1e-3, rel=1e-12) for t in ms], late_ms
    # Stopped after 1 step (10, 16, 16, 16 ms), every member gets the latest's time plus
    # the rest at the pace: 10 n + 6 ms, the exact ends' upper bound.
    monkeypatch.setattr(ring_stream, "SETTLE_STEPS", 1)
    monkeypatch.setattr(ring_stream, "SETTLE_HOP_STEPS", 0)
    capped = run.ends_s([0.0, 0.0, 15e-3, 0.0]).tolist()
    assert capped == [pytest.approx((10 * n + 6) * 1e-3, rel=1e-12)] * 4


def test_on_a_gpu_cluster_the_stream_waits_for_the_rings_slowest_hop():
    # NVLink hops of 1 us and NIC hops of 5 us: lockstep steps go at the NIC hops' pace.
    g = topologies.rail_optimised(4, 4, 300e9, 25e9, 1e-6, 5e-6)
    for size in (16 * ELEM_BYTES * 1000, 16 * ELEM_BYTES * 1001 + ELEM_BYTES * 7):
        kw = {"local_size": 4, "alpha_s": 2e-6}
        steps = simnet.collective_time(g, "allreduce", "nccl_ring", size, **kw)
        streamed = simnet.collective_time(g, "allreduce", "nccl_ring", size, streamed=True, **kw)
        # (blocks of unequal sizes: a step waits for its largest, the stream for the sum)
        assert streamed == pytest.approx(steps, rel=1e-4)


@pytest.mark.parametrize(
    ("intra_latency_s", "inter_share", "pace_s"),
    [
        (10e-6, 4, 42e-6),  # slowest: a hop between groups, 2 + 40 us
        (30e-6, 2, 40e-6),  # slowest: a hop inside a group, 30 + 10 us (not the longest
        # transfer, 2 + 20 us between groups)
    ],
)
def test_the_stream_takes_the_pace_of_the_rings_slowest_hop(intra_latency_s, inter_share, pace_s):
    # Two groups of 4, their GPUs joined directly by links of 10 GB/s, each with an uplink
    # of 1 us to the top switch. A step moves 100 KB a hop; in lockstep every step takes
    # the slowest hop's time, and the stream adds what the 7 steps of a run take beyond it.
    b = 10e9
    g = topologies.hierarchical(2, 4, b, b / inter_share, intra_latency_s, 1e-6, intra="direct")
    size = 8 * 100_000
    steps = simnet.collective_time(g, "allreduce", "nccl_ring", size, local_size=4, channels=1)
    kw = {"local_size": 4, "channels": 1, "streamed": True}
    streamed = simnet.collective_time(g, "allreduce", "nccl_ring", size, **kw)
    assert steps == pytest.approx(14 * pace_s, rel=1e-3)
    assert streamed == pytest.approx(steps, rel=1e-9)


def _mesh(p: int, slow: set[tuple[int, int]]) -> nx.DiGraph:
    """A full mesh of ``p`` endpoints, one 10 GB/s, 1 us link each way a pair, those of the
    pairs in ``slow`` at a quarter of that."""
    g = nx.DiGraph()
    for i in range(p):
        g.add_node(i, kind="endpoint")
    for a, b in itertools.permutations(range(p), 2):
        fast = (a, b) not in slow and (b, a) not in slow
        g.add_edge(a, b, bandwidth=10e9 if fast else 2.5e9, latency=1e-6)
    g.graph["num_endpoints"] = p
    return g


def _rank_ends(
    graph: nx.DiGraph,
    algorithm: str,
    streamed: bool,
    late: int,
    late_us: float,
    calls: int,
    size: int,
    placement: list[int] | None = None,
    alpha_s: float = 0.0,
    **policy,
) -> list[float]:
    """Each rank's end (s) of a program where rank ``late`` first computes ``late_us``
    and then every rank calls ``calls`` library allreduces of ``size`` bytes, run with
    ``algorithm``; asserts every streamed step's record of starts is gone at the end."""
    from simnet.executor import AlgorithmPolicy, SimExecutor
    from simnet.network import FlowNetwork
    from workload.ops import Compute
    from workload.program import Phase, Workload

    def program(r: int) -> list:
        ops = [Compute(late_us if r == late else 0.0)]
        return ops + [Collective("allreduce", "world", size // ELEM_BYTES)] * calls

    p = len(placement) if placement else graph.graph["num_endpoints"]
    wl = Workload("late", p, {}, {"world": [tuple(range(p))]}, [Phase("x", program)])
    router = topologies.Router(graph)
    kind = {f"streamed_{KINDS[algorithm]}": streamed}
    policy = AlgorithmPolicy(fixed=algorithm, **kind, **policy)
    ex = SimExecutor(
        wl,
        lambda env: FlowNetwork(env, graph, router.path, alpha_s=alpha_s),
        placement or list(range(p)),
        policy=policy,
    )
    sim = ex.run_phase()
    assert sim._stream_starts == {}
    return [sim.timelines[r].ends[-1][-1] for r in range(p)]


@pytest.mark.parametrize("algorithm", ["nccl_ring", "nccl_tree"])
@pytest.mark.parametrize(
    ("late", "late_us", "calls"), [(3, 2000, 1), (3, 2000, 2), (6, 500, 3), (0, 0, 2)]
)
def test_every_gpu_ends_its_streams_as_step_by_step_whenever_each_starts(
    algorithm, late, late_us, calls
):
    # A full mesh with two slow pairs, where no two hops share a link: every GPU's end
    # is the step-by-step one, whichever GPU starts late. While each stream's delay
    # followed from a common start, GPUs away from the late one or from the ring's
    # slowest hop ended early (x0.26 for one here with rings, x0.76 with trees), and
    # so did the second allreduce, each GPU starting it when its first ended.
    g = _mesh(8, {(0, 1), (5, 3)})
    kw = {"local_size": 1, "channels": 1, "pipeline_chunks": 4}
    steps = _rank_ends(g, algorithm, False, late, late_us, calls, 16 << 20, **kw)
    streamed = _rank_ends(g, algorithm, True, late, late_us, calls, 16 << 20, **kw)
    assert streamed == [pytest.approx(t, rel=1e-9) for t in steps]
    if late_us:
        assert min(steps) > late_us * 1e-6  # (every GPU waits for the late one)
    assert len(set(steps)) > 1  # (and they end at different times)


@pytest.mark.parametrize("algorithm", ["nccl_ring", "nccl_tree"])
@pytest.mark.parametrize("late_us", [0, 300])
def test_gpus_sharing_an_endpoint_pass_on_a_late_start(algorithm, late_us):
    # 4 ranks, two on each of two endpoints of a mesh, alpha 5 us: a message between the
    # two on one endpoint takes alpha. Trees once left those hops out: the others ended
    # before the late rank began (449 us for two, 305 and 300 for the late pair, against
    # 759 us step by step for all).
    kw = {"local_size": 1, "channels": 1, "pipeline_chunks": 4, "placement": [0, 0, 1, 1]}
    g = _mesh(4, {(0, 1)})
    args = (1, late_us, 1, 1 << 20)
    steps = _rank_ends(g, algorithm, False, *args, alpha_s=5e-6, **kw)
    streamed = _rank_ends(g, algorithm, True, *args, alpha_s=5e-6, **kw)
    assert streamed == [pytest.approx(t, rel=1e-9) for t in steps]
    assert min(steps) > late_us * 1e-6 + 5e-6


@pytest.mark.parametrize(("algorithm", "rel"), [("nccl_ring", 0.002), ("nccl_tree", 0.01)])
@pytest.mark.parametrize(("late", "late_us"), [(3, 2000), (0, 0)])
def test_gpus_of_a_gpu_cluster_end_their_streams_near_step_by_step(algorithm, rel, late, late_us):
    # 4 nodes of 8 GPUs in 2 channels, two allreduces of 256 MiB, GPU 3 2 ms late or
    # none. The GPUs between two NIC hops of a ring end up to 4% before those next to
    # one (x0.35 for some with a common start's delays). Where a GPU starts late, the
    # hops busy in one step share links for the whole step in the delays, where step by
    # step the late GPU's hops run when the others' have ended (x1.0008 for rings,
    # x1.0035 for trees when this was written).
    g = topologies.rail_optimised(4, 8, 450e9, 25e9, 0.5e-6, 1e-6)
    kw = {"local_size": 8, "channels": 2}
    steps = _rank_ends(g, algorithm, False, late, late_us, 2, 256 << 20, **kw)
    streamed = _rank_ends(g, algorithm, True, late, late_us, 2, 256 << 20, **kw)
    assert streamed == [pytest.approx(t, rel=rel if late_us else 1e-9) for t in steps]
    assert min(steps) > late_us * 1e-6


def test_not_streaming_is_no_setting_to_refuse():
    g = topologies.switch(4, 10e9, 1e-6)
    asked = simnet.collective_time(g, "allreduce", "ring", 4096, streamed=False)
    assert asked == simnet.collective_time(g, "allreduce", "ring", 4096)


KINDS = {"nccl_ring": "rings", "nccl_tree": "trees"}  # what each algorithm streams


def _cluster(streamed: bool, algorithm: str = "nccl_ring", **collectives) -> dict:
    """ResNet-152 over 16 GPUs of 4-GPU rail-optimised nodes with ``algorithm``, its
    streams on or off (full-size trees: 21-26 MB buckets are 5-7 chunks a tree; rings
    at 2%, as many steps whatever the size)."""
    scale = {"scale": 0.02} if algorithm == "nccl_ring" else {}
    return {
        "distributed": {"num_nodes": 16, "bandwidth_limit_gb_per_s": 25},
        "topology": {
            "type": "rail_optimised",
            "group_size": 4,
            "link_latency_us": 1,
            "inter_latency_us": 5,
            "intra_bandwidth_gb_per_s": 300,
        },
        "workload": {"name": "resnet152", "world_size": 16, "compute_scale": 0, **scale},
        "collectives": {
            "algorithm": algorithm,
            f"streamed_{KINDS[algorithm]}": streamed,
            **collectives,
        },
    }


def _allreduces(res) -> int:
    program = res.workload.phases[0].program(0)
    return len([op for op in program if type(op) is Collective and op.op == "allreduce"])


@pytest.mark.parametrize(
    ("algorithm", "layout", "per_call", "fewer", "rel"),
    [
        # every collective an allreduce over 16 ranks: 4 rings of 16 hops, 2 runs, each
        # standing for 15 steps
        ("nccl_ring", "each run of its steps streamed (one message per hop, then what its "
         "steps take beyond it)", 4 * 16 * 2, 15, 1e-4),
        # 4 channels of 2 trees, every edge (15 a tree) once each way; 5-7 chunks a tree
        ("nccl_tree", "its pipeline streamed (one message per edge and way, then what its "
         "steps take beyond it)", 4 * 2 * 15 * 2, None, 1e-6),
    ],
)  # fmt: skip
def test_a_simulation_with_streams_moves_the_same_bytes_in_fewer_messages(
    algorithm, layout, per_call, fewer, rel
):
    steps = simnet.simulate(_cluster(False, algorithm), record_series=False)
    streamed = simnet.simulate(_cluster(True, algorithm), record_series=False)
    a, b = steps.phases[0], streamed.phases[0]
    assert a.pair_bytes == b.pair_bytes and a.link_bytes == b.link_bytes
    assert a.part_pair_bytes == b.part_pair_bytes  # reduced and copied alike
    assert b.messages == _allreduces(streamed) * per_call
    if fewer is not None:
        assert a.messages == fewer * b.messages
    assert a.messages > 5 * b.messages
    assert streamed.iteration_time_s == pytest.approx(steps.iteration_time_s, rel=rel)
    said = [x for x in streamed.assumed if x.startswith(f"allreduce {algorithm} over 16 ranks")]
    assert said and said[0].endswith(layout)
    assert (
        f"streamed {KINDS[algorithm]}: a pair's busy time and achieved bandwidth "
        "(sim_pairs.csv, the achieved-bandwidth map) count a stream's transfer, not the "
        "latency of the steps it stands for (added after it): higher rates than step by step"
    ) in streamed.assumed
    assert not any("streamed" in x for x in steps.assumed)


@pytest.mark.parametrize(
    ("algorithm", "other"), [("nccl_ring", "nccl_tree"), ("nccl_tree", "nccl_ring")]
)
def test_streams_are_said_where_they_cannot_apply(algorithm, other):
    kind = KINDS[algorithm]
    mpi = simnet.simulate(_cluster(True, algorithm, library="mpi"), record_series=False)
    assert (
        f"allreduce {algorithm}: not streamed (collectives.streamed_{kind}), it runs with "
        "MPI's protocol (collectives.library or the program's own schedule)" in mpi.assumed
    )
    assert not [x for x in mpi.assumed if x.startswith("streamed ")]  # none streamed
    steps = simnet.simulate(_cluster(False, algorithm, library="mpi"), record_series=False)
    assert mpi.phases[0].messages == steps.phases[0].messages
    # Each setting streams its own algorithm only, and is said unused with the other.
    cfg = _cluster(False, other)
    cfg["collectives"][f"streamed_{kind}"] = True
    wrong = simnet.simulate(cfg, record_series=False)
    assert (
        f"collectives.streamed_{kind}: not used, only {algorithm} streams its {kind} and it "
        "did not run" in wrong.assumed
    )
    assert wrong.phases[0].messages == simnet.simulate(_cluster(False, other)).phases[0].messages


def test_a_large_step_by_step_nccl_ring_run_says_streamed_rings_exist(monkeypatch):
    monkeypatch.setattr(sys.modules["simnet.simulate"], "STREAM_HINT_MESSAGES", 1000)
    res = simnet.simulate(_cluster(False), record_series=False)
    hint = [a for a in res.assumed if "collectives.streamed_rings = true" in a]
    assert hint == [
        f"nccl_ring's rings ran step by step ({res.phases[0].messages:,} messages in the run): "
        "collectives.streamed_rings = true sends each run of a ring's steps as one message "
        "per hop (p - 1 times fewer), the same time where its hops are uncontended"
    ]
    assert STREAM_HINT_MESSAGES == 1_000_000
