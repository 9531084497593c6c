"""Streamed NCCL rings: each run of a ring's steps as one message per hop."""

from __future__ import annotations

import sys

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
