"""The testbed's calibration, byte accounting and model (no namespaces needed):
synthetic micro-benchmark documents of known costs give those costs back."""

from __future__ import annotations

import numpy as np
import pytest

import topologies
from workflows.netns import Cluster
from workflows.testbed import (
    calibrate_links,
    calibration_peers,
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
