"""The testbed's calibration, byte accounting and model (no namespaces needed):
synthetic micro-benchmark documents of known costs give those costs back."""

from __future__ import annotations

import numpy as np
import pytest

import topologies
from tests.mpirun import run_without_cache
from workflows.netns import Cluster
from workflows.testbed import (
    calibrate_links,
    calibration_peers,
    fit_alpha,
    frame_time_s,
    host_pair_bytes,
    traffic_document,
)

SIZES = [8 * 4**i for i in range(10)]  # 8 B .. 2 MiB, as the testbed measures


def _doc(alpha_s: float, hop_s: float, hops: int, one_way: float, exchange: float) -> dict:
    """Pingpong and exchange rows of a path: small messages cost alpha plus the hops,
    large ones also their bytes at the rate (bytes/s)."""
    rows = []
    for op, rate in (("pingpong", one_way), ("exchange", exchange)):
        for s in SIZES:
            t = alpha_s + hops * hop_s + (s / rate if s > 512 else 0.0)
            rows.append({"op": op, "size_bytes": s, "time_s": {"min": t, "avg": t}})
    return {"results": rows}


def test_hierarchical_calibration_measures_each_link_rate():
    # 2 groups of 2: host 1 shares host 0's group switch (400 Mbit/s), host 2 is reached
    # through the top switch (100 Mbit/s links).
    g = topologies.hierarchical(2, 2, 400e6 / 8, 100e6 / 8, 0.0, 0.0)
    c = Cluster(g)
    assert calibration_peers(c) == [1, 2]
    eff = {400e6 / 8: 0.88, 100e6 / 8: 0.93}

    def run(peer: int) -> dict:
        rate = 400e6 / 8 if peer == 1 else 100e6 / 8
        return _doc(20e-6, 0.0, 2, rate * 0.95, rate * eff[rate])

    cal = calibrate_links(run, c)
    assert cal.alpha_s == pytest.approx(20e-6)
    assert cal.efficiency_by_rate == pytest.approx(eff)
    assert cal.hop_scale == 0.0  # one hop count per rate: hops stay in alpha
    model = cal.model_graph(g)
    assert model.edges[0, "g0"]["bandwidth"] == pytest.approx(400e6 / 8 * 0.88)
    assert model.edges[0, "top"]["bandwidth"] == pytest.approx(100e6 / 8 * 0.93)
    # a rate not measured takes the nearest measured one
    assert cal.efficiency(150e6 / 8) == pytest.approx(0.93)
    assert cal.efficiency(300e6 / 8) == pytest.approx(0.88)


def test_ring_calibration_separates_the_cost_of_a_hop():
    g = topologies.ring(6, 50e6 / 8)
    c = Cluster(g)
    assert calibration_peers(c) == [1, 3]  # the nearest and the farthest (3 hops)
    frame = frame_time_s(50e6 / 8)
    hop = 0.5 * frame
    cal = calibrate_links(lambda peer: _doc(10e-6, hop, c.hops(0, peer), 6e6, 5.8e6), c)
    assert cal.hop_scale == pytest.approx(0.5)
    assert cal.alpha_s == pytest.approx(10e-6)
    assert cal.efficiency_by_rate == pytest.approx({50e6 / 8: 5.8e6 / (50e6 / 8)})
    assert cal.model_graph(g).edges[0, 1]["latency"] == pytest.approx(hop)


def test_host_pairs_sum_their_ranks_and_drop_what_stays_inside_a_host():
    m = np.arange(16).reshape(4, 4)  # 2 hosts x 2 ranks
    out = host_pair_bytes(m, 2)
    assert out.tolist() == [[0, 2 + 3 + 6 + 7], [8 + 9 + 12 + 13, 0]]


def test_the_payload_is_the_frames_less_their_headers():
    counted = {(0, 1): (1514 * 100 + 66 * 50, 150), (1, 0): (66 * 50 + 200, 51)}
    pred = np.array([[0, 144800], [0, 0]])
    doc = traffic_document(counted, pred, 1234)
    a, b = doc["pairs"]
    assert a["payload_bytes"] == 1448 * 100 and a["error_pct"] == pytest.approx(0.0)
    # the acknowledgements' pair carries no payload worth counting: not in the worst
    assert b["payload_bytes"] == 200 - 66 and doc["max_pair_error_pct"] == pytest.approx(0.0)
    assert b["error_pct"] is None  # nothing predicted there: no error, not -100%
    assert doc["control_network_bytes"] == 1234
    assert doc["total_payload_bytes"] == 144800 + 134


def test_a_fitted_payload_share_above_a_full_frame_is_noise_and_capped():
    g = topologies.switch(2, 100e6 / 8)
    c = Cluster(g)
    cal = calibrate_links(lambda peer: _doc(10e-6, 0.0, 2, 12.5e6, 12.6e6), c)
    assert cal.efficiency_by_rate == pytest.approx({100e6 / 8: 1448 / 1514})


def test_the_ring_trainer_on_the_testbed_runs_iters_steps_and_records_them():
    from simnet.config import ConfigError, load_config
    from workflows.testbed import trainer_config

    cfg = load_config({"distributed": {"num_nodes": 2}})  # the ring trainer, 5 x 100 steps
    ran = trainer_config(cfg, 3, None)
    assert (ran.training.num_epochs, ran.training.steps_per_epoch) == (1, 3)
    with pytest.raises(ConfigError, match="--warmup: the ring trainer runs its own warm-up"):
        trainer_config(cfg, 3, 1)
    proxy = load_config({"distributed": {"num_nodes": 2}, "workload": {"name": "dlrm"}})
    assert trainer_config(proxy, 3, 1) is proxy


def test_a_one_way_ring_is_refused_before_the_host_calibration(tmp_path):
    # What the cluster would refuse is refused before the calibration (a minute, and it
    # rewrites the shared cache: HOME points elsewhere here, so nothing is touched).
    import json

    cfg = tmp_path / "c.json"
    cfg.write_text(
        json.dumps(
            {
                "distributed": {"num_nodes": 3, "bandwidth_limit_gb_per_s": 0.0125},
                "topology": {"type": "ring", "num_nodes": 3, "bidirectional": False},
                "workload": {"name": "dlrm", "scale": 0.01},
                "logging": {"log_dir": str(tmp_path / "out")},
            }
        )
    )
    r = run_without_cache(tmp_path, "simnet", "testbed", "--config", str(cfg))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == (
        "error: testbed: the link 0 -> 1 has no way back; a veth link carries both "
        "directions (topology.bidirectional = true)"
    )
    assert r.stdout == ""
    assert not (tmp_path / "home").exists()
    assert not (tmp_path / "out").exists()


def _with_small_points(doc: dict, times_s: dict[int, float]) -> dict:
    """``doc`` with the pingpong's times at the given sizes replaced."""
    for r in doc["results"]:
        if r["op"] == "pingpong" and r["size_bytes"] in times_s:
            t = times_s[r["size_bytes"]]
            r["time_s"] = {"min": t, "avg": t}
    return doc


def test_one_slow_small_pingpong_does_not_make_the_per_message_cost():
    # As a testbed measured it: 8 B took 757 us (a first message's set-up), the other
    # small sizes 10-22 us; their mean made 202 us per message, and only the first
    # pair's counted though the second gave 15 us.
    g = topologies.hierarchical(2, 2, 400e6 / 8, 100e6 / 8, 0.0, 0.0)
    c = Cluster(g)
    assert calibration_peers(c) == [1, 2]
    slow = {8: 756.9e-6, 32: 10.4e-6, 128: 18.5e-6, 512: 21.6e-6}
    steady = dict.fromkeys(slow, 15.0e-6)
    assert set(slow) <= set(SIZES)

    def run(peer: int, first: dict = slow) -> dict:
        rate = 400e6 / 8 if peer == 1 else 100e6 / 8
        doc = _doc(15e-6, 0.0, 2, rate * 0.95, rate * 0.9)
        return _with_small_points(doc, first if peer == 1 else steady)

    alone = fit_alpha(run(1))
    assert 10.4e-6 < alone < 21.6e-6  # among the steady points, not pulled up by the slow one
    cal = calibrate_links(run, c)
    assert cal.alpha_s == pytest.approx(np.median([alone, 15.0e-6]))  # both pairs count
    assert len(cal.warnings) == 1
    assert "host 0 <-> host 1" in cal.warnings[0] and "8 B 756.9 us" in cal.warnings[0]
    # Points that agree: no warning.
    assert calibrate_links(lambda p: run(p, steady), c).warnings == []


def _gpt2_result(send_overhead_us: float = 0.0):
    from simnet.config import load_config
    from simnet.simulate import simulate

    cfg = load_config(
        {
            "distributed": {"num_nodes": 2, "bandwidth_limit_gb_per_s": 0.0125},
            "topology": {"type": "switch", "num_nodes": 2},
            "network": {"alpha_us": 50.0, "send_overhead_us": send_overhead_us},
            "workload": {"name": "gpt2", "args": [8, 2], "scale": 0.01},
        }
    )
    return simulate(cfg)


def test_eager_blocking_sends_are_said_to_complete_at_once_not_given_minus_100_percent():
    from workflows.testbed import eager_sends, op_rows, predicted_ops
    from workload.ops import Send

    res = _gpt2_result()
    eager = eager_sends(res)
    assert eager  # the pipeline's activation and gradient sends
    threshold = res.config.network.eager_threshold_bytes
    for ph in res.phases:
        for ops in ph.timeline.programs:
            for op in ops:
                if (ph.name, op.label) in eager:
                    assert type(op) is Send and op.req is None
                    assert 4 * op.count_elems <= threshold
    pred = predicted_ops(res)
    assert all(pred[k] == 0.0 for k in eager)  # the model's protocol: done when posted
    measured = {k: 1e-3 for k in pred}
    rows = op_rows(measured, pred, eager)
    for r in rows:
        if (r["phase"], r["op"]) in eager:
            assert r["error_pct"] is None and "eager send" in r["note"]
        else:
            assert r["error_pct"] is not None
    # With a sender overhead the model charges them: errors as any operation's.
    assert eager_sends(_gpt2_result(send_overhead_us=5.0)) == set()


def test_a_rate_just_over_the_limit_is_printed_with_the_digits_that_show_it():
    from workflows.testbed import _mbit

    assert _mbit(1.00008e9, 1e9) == "1,000.1"
    assert _mbit(8e10, 1e9) == "80,000"


def test_the_summary_says_the_link_latency_is_not_emulated():
    # testbed.txt and the screen show summary_text: the note was in testbed.json only.
    from workflows.testbed import summary_text

    note = "links are shaped in rate only: the configuration's link latencies are not emulated"
    case = {"name": "c", "measured_s": 1e-3, "predicted_s": 1e-3, "error_pct": 0.0}
    doc = {
        "cluster": {"topology": "switch", "hosts": 2, "ranks_per_host": 1, "switches": 1,
                    "links": [{"rate_bit_per_s": 1e8}], "delays_emulated": False,
                    "delays_note": note},
        "calibration": {"alpha_us": 20.0, "efficiency_text": "90%", "hop_frame_times": 0.0},
        "traffic": {"total_payload_bytes": 1, "total_predicted_bytes": 1,
                    "max_pair_error_pct": 0.0, "header_overhead_pct": 1.0,
                    "control_network_bytes": 0, "retransmitted_segments": 0},
        "cases": [case], "ops": [], "geomean_abs_error_pct": 0.0, "max_abs_error_pct": 0.0,
        "parameters": {"processor and copies inside a host": {"value": {}}},
    }  # fmt: skip
    assert f"note: {note}" in summary_text(doc).splitlines()
    doc["cluster"]["delays_emulated"] = True
    assert note not in summary_text(doc)
