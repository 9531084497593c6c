"""Outputs of large runs: the pairs that communicated, routed one by one, and heatmaps in
blocks, against the dense n x n matrices they stand for."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

import simnet
import topologies
from simnet import cli, output, sizecheck
from simnet.simulate import pair_route_metrics, route_matrices

ROOT = Path(__file__).resolve().parent.parent


def fat_tree_config(ranks: int = 16, **network):
    return {
        "distributed": {"num_nodes": ranks, "bandwidth_limit_gb_per_s": 25.0},
        "topology": {"type": "fat_tree", "k": 4, "link_latency_us": 1.0},
        "workload": {"name": "resnet50", "world_size": ranks, "scale": 0.01},
        "network": network,
        "logging": {"log_dir": "unused"},
    }


@pytest.mark.parametrize("ecmp", [False, True])
@pytest.mark.parametrize("kind", ["fat_tree", "torus", "dragonfly"])
def test_pair_routes_equal_the_route_matrices_bit_for_bit(kind, ecmp):
    graph = {
        # Equal-cost routes that differ in bandwidth and latency, so that a wrong route
        # index shows.
        "fat_tree": lambda: topologies.fat_tree(4, 10e9, 1e-6),
        "torus": lambda: topologies.torus((3, 4), 10e9, 1e-6),
        "dragonfly": lambda: topologies.dragonfly(3, 2, 2, 10e9, 8e9, 5e9, 1e-6, 2e-6, 3e-6),
    }[kind]()
    for i, (u, v) in enumerate(sorted(graph.edges, key=str)):
        graph.edges[u, v]["bandwidth"] *= 1 + (i % 5) / 7
        graph.edges[u, v]["latency"] *= 1 + (i % 3) / 11
    n = graph.graph["num_endpoints"]
    router = topologies.Router(graph, ecmp=ecmp)
    bw, lat = route_matrices(graph, ecmp, router)
    pairs = [(s, d) for s in range(n) for d in range(n)]
    pbw, plat = pair_route_metrics(topologies.Router(graph, ecmp=ecmp), pairs)
    assert pbw.tolist() == bw.ravel().tolist()
    assert plat.tolist() == lat.ravel().tolist()
    capped, _ = pair_route_metrics(router, pairs, injection_bytes_per_s=9e9)
    assert capped.tolist() == [
        b if s == d else min(b, 9e9) for (s, d), b in zip(pairs, pbw, strict=True)
    ]


def test_pair_routes_of_sources_sharing_a_search_are_taken_together(monkeypatch):
    # The pairs no simulation routed go to Router.route_metrics_pairs at once, which
    # takes the sources of one search together over arrays: the same figures as each
    # pair's own route, the injection cap on all but a source to itself.
    graph = topologies.fat_tree(8, 10e9, 1e-6)
    for i, (u, v) in enumerate(sorted(graph.edges, key=str)):
        graph.edges[u, v]["bandwidth"] *= 1 + (i % 5) / 7
        if type(u) is not int:  # (equal up-link latencies: one search per edge switch)
            graph.edges[u, v]["latency"] *= 1 + (i % 3) / 11
    n = graph.graph["num_endpoints"]
    router = topologies.Router(graph, ecmp=True)
    router._wide = True  # every search over arrays, as a big fabric's
    # Sources 0-3 hang on one edge switch (one search), 5 on another.
    pairs = [(s, d) for s in (3, 0, 5, 1) for d in range(0, n, 3)] + [(3, 3), (3, 70)]
    asked: list[int] = []
    blocks: list[int] = []
    real_pairs = topologies.Router.route_metrics_pairs
    real_arrays = topologies.Router._metrics_over_arrays
    monkeypatch.setattr(
        topologies.Router,
        "route_metrics_pairs",
        lambda r, p: asked.append(len(p)) or real_pairs(r, p),
    )
    monkeypatch.setattr(
        topologies.Router,
        "_metrics_over_arrays",
        lambda r, search, s, d: blocks.append(len(set(s.tolist()))) or real_arrays(r, search, s, d),
    )
    bw, lat = pair_route_metrics(router, pairs, injection_bytes_per_s=11e9)
    assert asked == [len(pairs)]
    assert sorted(blocks) == [1, 3]
    check = topologies.Router(graph, ecmp=True)
    for (s, d), b, x in zip(pairs, bw.tolist(), lat.tolist(), strict=True):
        if s == d:
            assert (b, x) == (math.inf, 0.0)
            continue
        path = check.path(s, d)
        assert b == min(topologies.path_bandwidth_bytes_per_s(graph, path), 11e9), (s, d)
        assert x == topologies.path_latency_s(graph, path), (s, d)


@pytest.mark.parametrize(
    ("topo", "build"),
    [
        ({"type": "fat_tree", "k": 4}, lambda: topologies.fat_tree(4, 10e9, 1e-6)),
        ({"type": "torus", "dims": [4, 4]}, lambda: topologies.torus((4, 4), 10e9, 1e-6)),
    ],
)
@pytest.mark.parametrize("injection", [None, 9.0])
def test_a_runs_pair_routes_are_the_routes_it_took_not_routed_again(
    monkeypatch, topo, build, injection
):
    # Bandwidths and latencies differ between equal-cost routes, so a route other than
    # the one the run took would show; the run's pairs are read off its network.
    graph = build()
    for i, (u, v) in enumerate(sorted(graph.edges, key=str)):
        graph.edges[u, v]["bandwidth"] *= 1 + (i % 5) / 7
        graph.edges[u, v]["latency"] *= 1 + (i % 3) / 11
    cfg = fat_tree_config(injection_bandwidth_gb_per_s=injection)
    cfg["topology"] = topo
    res = simnet.simulate(cfg, topology=graph, dense_matrices=False)
    pairs = sorted({k for p in res.phases for k in p.pair_bytes})
    assert len(pairs) > 16
    asked: list = []
    real = topologies.Router.route_metrics
    monkeypatch.setattr(
        topologies.Router, "route_metrics", lambda r, s, d: asked.extend(d) or real(r, s, d)
    )
    bw, lat = res.pair_routes([*pairs, (0, 0), (3, 15)])
    assert asked == [0] + ([] if (3, 15) in pairs else [15])  # only pairs the run did not use
    router = topologies.Router(graph, ecmp=topo["type"] == "fat_tree")
    cap = None if injection is None else injection * 1e9
    want_bw, want_lat = pair_route_metrics(router, [*pairs, (0, 0), (3, 15)], cap)
    assert bw.tolist() == want_bw.tolist() and lat.tolist() == want_lat.tolist()


def test_the_trace_holds_every_ranks_operations_in_microseconds():
    from workload.ops import describe
    from workload.timeline import op_events

    res = simnet.simulate(fat_tree_config(), dense_matrices=False)
    doc = output.trace(res)
    events = doc["traceEvents"]
    names = [e for e in events if e["ph"] == "M"]
    assert [(e["pid"], e["args"]["name"]) for e in names] == [(r, f"rank {r}") for r in range(16)]
    ops = [e for e in events if e["ph"] == "X"]
    want = []
    offset = 0.0
    for p in res.phases:
        sim = p.timeline
        for rank, program in enumerate(sim.programs):
            for it, (starts, ends) in enumerate(
                zip(sim.timelines[rank].starts, sim.timelines[rank].ends, strict=True)
            ):
                for op, t0, t1 in zip(program, starts, ends, strict=True):
                    want.append(
                        {
                            "name": op.label,
                            "cat": type(op).__name__.lower(),
                            "ph": "X",
                            "pid": rank,
                            "tid": 0,
                            "ts": (offset + t0) * 1e6,
                            "dur": (t1 - t0) * 1e6,
                            "args": {"phase": p.name, "iteration": it, "op": describe(op)},
                        }
                    )
        offset += p.makespan_s
    assert ops == want and len(ops) > 16
    # Ranks share operation objects: each is described once for all of them.
    sim = res.phases[0].timeline
    described: dict = {}
    for rank in (0, 1):
        tl = sim.timelines[rank]
        op_events(rank, "x", sim.programs[rank], tl.starts, tl.ends, 0.0, described)
    shared = {id(op) for op in sim.programs[0]} | {id(op) for op in sim.programs[1]}
    assert set(described) == shared


def test_pair_rows_hold_every_pair_as_the_dense_matrices_do():
    res = simnet.simulate(fat_tree_config(injection_bandwidth_gb_per_s=20.0))
    rows = output.pair_rows(res)
    assert len(res.phases) == 2  # ResNet-50: its allreduce phase, then its ring phase
    for p in res.phases:
        t, busy, ach = p.traffic_bytes, p.pair_busy_s, p.achieved_bytes_per_s
        mine = [r for r in rows if r[0] == p.name]
        assert len(mine) == np.count_nonzero(t) > 0
        for _, s, d, b, busy_s, rate, route_bw, route_lat in mine:
            assert b == t[s, d] and busy_s == busy[s, d] and rate == ach[s, d]
            assert route_bw == res.bandwidth_bytes_per_s[s, d] <= 20e9
            assert route_lat == res.latency_s[s, d]
        assert [(r[1], r[2]) for r in mine] == sorted((r[1], r[2]) for r in mine)
    assert [r[0] for r in rows] == sorted(
        (r[0] for r in rows), key=[p.name for p in res.phases].index
    )


def test_block_matrices_sum_the_dense_ones():
    res = simnet.simulate(fat_tree_config())
    n = res.graph.graph["num_endpoints"]
    b = 4
    m = n // b
    blocks = output.block_matrices(res, b)
    t = res.traffic_bytes
    tb = t.reshape(m, b, m, b).sum(axis=(1, 3))
    assert blocks["traffic_bytes"].tolist() == tb.astype(float).tolist()
    busy = sum(p.pair_busy_s for p in res.phases).reshape(m, b, m, b).sum(axis=(1, 3))
    expected = np.divide(tb, busy, out=np.zeros((m, m)), where=busy > 0)
    assert np.allclose(blocks["achieved_bytes_per_s"], expected, rtol=1e-12)
    # The route bandwidth: each block's smallest (the fat-tree's closed form), the
    # diagonal's pairs of an endpoint to itself left out.
    dense = res.bandwidth_bytes_per_s
    exact, is_exact = output.block_bandwidth(res, b)
    assert is_exact
    assert exact.tolist() == dense.reshape(m, b, m, b).min(axis=(1, 3)).tolist()
    assert output.block_size(16384) == 32 and output.block_size(512) == 1
    assert output.block_size(513) == 2


def _rail_config(whatif: dict | None = None, ecmp: bool | None = None) -> dict:
    """4 nodes of 8 GPUs on a rail-optimised cluster, a ring allreduce over them."""
    return {
        "distributed": {"num_nodes": 32, "bandwidth_limit_gb_per_s": 300},
        "topology": {
            "type": "rail_optimised",
            "group_size": 8,
            "inter_bandwidth_gb_per_s": 25,
            **({} if ecmp is None else {"ecmp": ecmp}),
        },
        "workload": {"name": "resnet50", "world_size": 32, "scale": 0.001},
        "whatif": whatif or {},
        "logging": {"log_dir": "unused"},
    }


def _slow_nvlink(factor: float) -> dict:
    """:func:`_rail_config` without ECMP, GPU 3 of node 1 (endpoint 11) with its NVLink
    into the NVSwitch at ``factor`` of its bandwidth."""
    slow = {"degraded_links": [{"link": [11, "nvl1"], "bandwidth_factor": factor}]}
    return _rail_config(slow, ecmp=False)


@pytest.mark.parametrize("b", [3, 8, 32])
def test_block_bandwidth_is_each_blocks_smallest_route(b):
    # GPU 3 of node 1 (endpoint 11) has its NVLink into the NVSwitch at 5%: the
    # blocks holding it show it (the first endpoint of each block of 8 never would),
    # short last blocks included (b = 3), capped at the injection rate where set.
    cfg = _slow_nvlink(0.05)
    res = simnet.simulate(cfg)
    dense = res.bandwidth_bytes_per_s
    m = -(-32 // b)
    want = np.full((m, m), np.inf)
    for i in range(m):
        for j in range(m):
            block = dense[i * b : (i + 1) * b, j * b : (j + 1) * b]
            want[i, j] = block.min()
    got, exact = output.block_bandwidth(res, b)
    assert exact and got.tolist() == want.tolist()
    assert got[11 // b].min() == got.min() == 15e9  # 300 GB/s x 0.05, from endpoint 11
    cfg["network"] = {"injection_bandwidth_gb_per_s": 20}
    capped, _ = output.block_bandwidth(simnet.simulate(cfg), b)
    assert capped.tolist() == np.where(np.isfinite(want), np.minimum(want, 20e9), want).tolist()


def test_bandwidth_without_a_closed_form_samples_a_pair_a_block_over_the_gpus():
    # With ECMP a degraded NVLink leaves the pairs' hashed routes to decide: no closed
    # form, one pair sampled per block, not always a block's first endpoint.
    slow = {"degraded_links": [{"link": [11, "nvl1"], "bandwidth_factor": 0.1}]}
    res = simnet.simulate(_rail_config(slow, ecmp=True))
    assert res.bandwidth_blocks(8) is None
    got, exact = output.block_bandwidth(res, 8)
    pairs = output.sampled_pairs(32, 8)
    assert not exact
    assert got.ravel().tolist() == [res.bandwidth_bytes_per_s[s, d] for s, d in pairs]
    assert pairs[:5] == [(0, 1), (1, 8), (2, 16), (3, 24), (8, 1)]
    assert {s % 8 for s, _ in pairs} == {0, 1, 2, 3}  # more than GPU 0 of each node
    # A block to itself: a pair inside it (here a node), not an endpoint to itself.
    assert [pairs[5 * i] for i in range(4)] == [(0, 1), (9, 10), (18, 19), (27, 28)]
    assert got[2, 2] == 300e9  # node 2's NVLink pair
    assert output.sampled_pairs(5, 3) == [(0, 1), (1, 3), (3, 1), (4, 3)]
    assert output.sampled_pairs(1, 3) == [(0, 0)]  # (a block of one: itself)


def test_the_large_runs_bandwidth_heatmap_says_what_its_cells_are(tmp_path, monkeypatch):
    monkeypatch.setattr(output, "BANDWIDTH_SAMPLE_SIDE", 4)  # 32 endpoints: blocks of 8
    slow = {"degraded_links": [{"link": [11, "nvl1"], "bandwidth_factor": 0.05}]}
    said = {}
    for ecmp in (False, True):
        cfg = tmp_path / f"{ecmp}.json"
        cfg.write_text(json.dumps(_rail_config(slow, ecmp=ecmp)))
        out = tmp_path / f"out{ecmp}"
        argv = ["--config", str(cfg), "--out", str(out), "--matrices", "sparse"]
        assert cli.main(argv) == 0
        said[ecmp] = (out / "sim_summary.txt").read_text()
        assert (out / "sim_bandwidth_heatmap.png").stat().st_size > 0
    assert "route bandwidth drawn as the smallest of each block of 8" in said[False]
    assert (
        "route bandwidth drawn from one pair of each block of 8 (this network's routes have "
        "no closed form: a route per cell)"
    ) in said[True]


def _node_minima(dense: np.ndarray, size: int) -> list[float]:
    """The smallest route between two endpoints of each node of ``size``, by hand."""
    n = len(dense)
    out = []
    for first in range(0, n, size):
        last = min(n, first + size)
        pairs = [dense[a, b] for a in range(first, last) for b in range(first, last) if a != b]
        out.append(min(pairs) if pairs else math.inf)
    return out


@pytest.mark.parametrize("size", [3, 8, 32])
def test_node_bandwidth_is_each_nodes_smallest_route_inside_it(size):
    # GPU 3 of node 1 (endpoint 11) has its NVLink into the NVSwitch at 20% (60 GB/s,
    # above the 25 GB/s NICs): every block holding node 1 and another node shows 25 GB/s
    # at most; the routes inside node 1 show the 60.
    cfg = _slow_nvlink(0.2)
    res = simnet.simulate(cfg)
    dense = res.bandwidth_bytes_per_s
    got = res.node_bandwidth(size)
    assert got.tolist() == _node_minima(dense, size)  # short last nodes too (size 3)
    if size == 8:
        assert got.tolist() == [300e9, 60e9, 300e9, 300e9]
        assert output.block_bandwidth(res, 16)[0].tolist() == [[25e9, 25e9], [25e9, 25e9]]
    cfg["network"] = {"injection_bandwidth_gb_per_s": 100}
    capped = simnet.simulate(cfg).node_bandwidth(size)
    assert capped.tolist() == np.minimum(_node_minima(dense, size), 100e9).tolist()


def test_node_bandwidth_of_hierarchical_and_hosts_networks():
    graph = topologies.hierarchical(3, 4, 100e9, 10e9, 1e-6, 2e-6)
    cfg = fat_tree_config(12)
    res = simnet.simulate(cfg, topology=graph)
    assert topologies.endpoints_per_node(graph) == 4
    assert res.node_bandwidth(4).tolist() == _node_minima(res.bandwidth_bytes_per_s, 4)
    assert res.node_bandwidth(4).tolist() == [100e9] * 3
    hosts = topologies.hosts.with_hosts(topologies.ring(4, 10e9, 1e-6), 2, 8e9)
    assert topologies.endpoints_per_node(hosts) == 2
    # Ranks on hosts: a host's ranks are a node (its routes sampled round the host).
    cfg = fat_tree_config(32)
    cfg["hosts"] = {"ranks_per_host": 2, "copy_bandwidth_gb_per_s": 8.0}
    res = simnet.simulate(cfg)
    got, _ = output.node_bandwidth(res, topologies.endpoints_per_node(res.graph))
    assert got.tolist() == _node_minima(res.bandwidth_bytes_per_s, 2) == [8e9] * 16
    assert topologies.endpoints_per_node(topologies.fat_tree(4, 10e9, 1e-6)) is None


def test_node_bandwidth_without_a_closed_form_takes_each_endpoint_to_the_next():
    # With ECMP a degraded NVLink leaves no closed form: each GPU's route to the next GPU
    # of its node is taken (round the node), which passes every GPU's NVLink both ways.
    for link in ([11, "nvl1"], ["nvl1", 11]):
        slow = {"degraded_links": [{"link": link, "bandwidth_factor": 0.2}]}
        res = simnet.simulate(_rail_config(slow, ecmp=True))
        assert res.node_bandwidth(8) is None
        got, exact = output.node_bandwidth(res, 8)
        assert not exact
        assert got.tolist() == _node_minima(res.bandwidth_bytes_per_s, 8)
        assert got.tolist() == [300e9, 60e9, 300e9, 300e9]


def test_the_large_runs_summary_names_the_nodes_with_slower_routes_inside(tmp_path, monkeypatch):
    monkeypatch.setattr(output, "BANDWIDTH_SAMPLE_SIDE", 2)  # 32 endpoints: blocks of 16
    slow = {"degraded_links": [{"link": [11, "nvl1"], "bandwidth_factor": 0.2}]}
    cfg = tmp_path / "rail.json"
    cfg.write_text(json.dumps(_rail_config(slow, ecmp=False)))
    out = tmp_path / "out"
    assert cli.main(["--config", str(cfg), "--out", str(out), "--matrices", "sparse"]) == 0
    said = (out / "sim_summary.txt").read_text()
    assert (
        "routes inside nodes (8 endpoints each; sim_node_bandwidth.csv): the slowest 300 GB/s "
        "in 3 of its 4 nodes; slower: node 1 (endpoints 8-15) 60 GB/s"
    ) in said
    with open(out / "sim_node_bandwidth.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["node", "first_endpoint", "endpoints", "slowest_route_bytes_per_s"]
    assert [[float(x) for x in r] for r in rows[1:]] == [
        [k, 8 * k, 8, 60e9 if k == 1 else 300e9] for k in range(4)
    ]
    doc = json.loads((out / "sim_results.json").read_text())
    assert doc["node_bandwidth"] == {
        "file": "sim_node_bandwidth.csv",
        "endpoints_per_node": 8,
        "exact": True,
        "typical_bytes_per_s": 300e9,
        "slower_nodes": [{"node": 1, "bytes_per_s": 60e9}],
    }
    # Without a slower node, one line says so; a dense run writes no such file.
    cfg.write_text(json.dumps(_rail_config()))
    assert cli.main(["--config", str(cfg), "--out", str(out), "--matrices", "sparse"]) == 0
    assert (
        "the slowest 300 GB/s in every one of its 4 nodes" in (out / "sim_summary.txt").read_text()
    )
    assert cli.main(["--config", str(cfg), "--out", str(out), "--matrices", "dense"]) == 0
    assert not (out / "sim_node_bandwidth.csv").exists()


def test_dense_outputs_choice(monkeypatch):
    res = simnet.simulate(fat_tree_config())
    assert output.dense_outputs(res) and output.dense_outputs(res, "dense")
    assert not output.dense_outputs(res, "sparse")
    monkeypatch.setattr(sizecheck, "DENSE_MAX_ENDPOINTS", 15)
    assert not output.dense_outputs(res) and output.dense_outputs(res, "dense")
    with pytest.raises(ValueError, match="matrices must be one of auto, dense, sparse"):
        output.dense_outputs(res, "full")


def test_sparse_command_line_writes_pairs_and_no_matrix(tmp_path, capsys):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(fat_tree_config()))
    out = tmp_path / "out"
    assert cli.main(["--config", str(cfg), "--out", str(out), "--matrices", "sparse"]) == 0
    said = capsys.readouterr().out
    names = {f.name for f in out.iterdir()}
    assert "sim_pairs.csv" in names and "sim_traffic_heatmap.png" in names
    assert not {"sim_traffic_bytes.csv", "sim_bandwidth_bytes_per_s.csv"} & names
    assert not [x for x in names if x.endswith(".tmp")]
    doc = json.loads((out / "sim_results.json").read_text())
    assert "traffic_bytes" not in doc and "bandwidth_bytes_per_s" not in doc
    assert "traffic_bytes" not in doc["phases"][0]
    assert doc["matrices"]["written"] == "sparse"
    assert doc["matrices"]["pairs_csv"] == "sim_pairs.csv"
    with (out / "sim_pairs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == output.PAIR_HEADER == doc["matrices"]["columns"]
    dense = simnet.simulate(fat_tree_config())
    assert sum(int(r["bytes"]) for r in rows) == int(dense.traffic_bytes.sum())
    pairs = len({(r["src"], r["dst"]) for r in rows})
    assert f"sim_pairs.csv holds the {pairs} endpoint pairs that communicated" in said
    assert "n x n matrices not written (16 endpoints; --matrices dense writes them)" in said


def test_the_dense_document_names_the_files_of_its_other_matrices(tmp_path):
    """The dense results JSON holds traffic and route bandwidth (n x n) and names the
    files of the achieved rates and route latencies; a run of one phase does not write
    its traffic matrix twice (run and phase), one of several phases writes each."""
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({**fat_tree_config(), "workload": {"name": "dlrm", "scale": 0.01}}))
    out = tmp_path / "out"
    assert cli.main(["--config", str(cfg), "--out", str(out), "--matrices", "dense"]) == 0
    doc = json.loads((out / "sim_results.json").read_text())
    assert len(doc["phases"]) == 1 and "traffic_bytes" not in doc["phases"][0]
    assert len(doc["traffic_bytes"]) == len(doc["bandwidth_bytes_per_s"]) == 16
    named = doc["matrices"]
    assert named["written"] == "dense"
    assert (out / named["achieved_bytes_per_s_csv"]).exists()
    with (out / named["pairs_csv"]).open() as f:
        assert list(csv.DictReader(f).fieldnames) == named["columns"]
    assert "route_latency_s" in named["columns"]
    several = tmp_path / "several"
    cfg.write_text(json.dumps(fat_tree_config()))  # ResNet-50: two phases
    assert cli.main(["--config", str(cfg), "--out", str(several), "--matrices", "dense"]) == 0
    doc = json.loads((several / "sim_results.json").read_text())
    total = np.array(doc["traffic_bytes"])
    assert (sum(np.array(p["traffic_bytes"]) for p in doc["phases"]) == total).all()


def test_dense_matrices_asked_for_above_the_limit_are_named_not_held_in_the_json(
    tmp_path, monkeypatch
):
    # Above the dense limit (--matrices dense asked for), sim_results.json names the
    # n x n CSVs instead of repeating them as nested lists (350 MB at 4,394 endpoints).
    monkeypatch.setattr(output, "DENSE_MAX_ENDPOINTS", 8)  # the run's 16 are above it
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(fat_tree_config()))  # ResNet-50: two phases
    out = tmp_path / "out"
    assert cli.main(["--config", str(cfg), "--out", str(out), "--matrices", "dense"]) == 0
    doc = json.loads((out / "sim_results.json").read_text())
    assert "traffic_bytes" not in doc and "bandwidth_bytes_per_s" not in doc
    assert not [p for p in doc["phases"] if "traffic_bytes" in p]
    named = doc["matrices"]
    assert named["written"] == "dense"
    with (out / named["traffic_bytes_csv"]).open() as f:
        rows = list(csv.reader(f))
    assert len(rows) == 17 and rows[0][0] == "src\\dst"
    for key in ("bandwidth_bytes_per_s_csv", "achieved_bytes_per_s_csv", "pairs_csv"):
        assert (out / named[key]).is_file()
    phases = named["phase_traffic_bytes_csv"]  # ResNet-50's two phases, each its own
    assert list(phases) == [p["phase"] for p in doc["phases"]] and len(phases) == 2
    assert all((out / f).is_file() for f in phases.values())


def test_large_runs_record_no_series_unless_asked(tmp_path, capsys, monkeypatch):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(fat_tree_config()))
    monkeypatch.setattr(cli, "DENSE_MAX_ENDPOINTS", 15)
    monkeypatch.setattr(sizecheck, "DENSE_MAX_ENDPOINTS", 15)
    assert cli.main(["--config", str(cfg), "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert "note: 16 endpoints: link rate series not recorded (--series records them" in err
    names = {f.name for f in (tmp_path / "a").iterdir()}
    assert "sim_link_series.csv" not in names and "sim_pairs.csv" in names
    assert "sim_traffic_bytes.csv" not in names
    assert cli.main(["--config", str(cfg), "--out", str(tmp_path / "b"), "--series"]) == 0
    names = {f.name for f in (tmp_path / "b").iterdir()}
    assert "sim_link_series.csv" in names
    with pytest.raises(SystemExit):
        cli.main(["--config", str(cfg), "--series", "--no-series"])


def test_dense_matrices_that_cannot_fit_are_refused_with_the_way_out(tmp_path, capsys, monkeypatch):
    import types

    import psutil

    # As on a machine with 16 GiB free, whatever this one has.
    free = types.SimpleNamespace(available=16 << 30)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: free)
    cfg = tmp_path / "c.json"
    big = {
        "distributed": {"num_nodes": 16384},
        "topology": {"type": "fat_tree", "k": 42},
        "workload": {"name": "resnet152", "world_size": 16384},
    }
    cfg.write_text(json.dumps(big))
    out = tmp_path / "out"
    assert cli.main(["--config", str(cfg), "--out", str(out), "--matrices", "dense"]) == 2
    err = capsys.readouterr().err
    assert "18,522 x 18,522 endpoint-pair matrices" in err
    assert err.rstrip().endswith("; --matrices sparse leaves the n x n matrices out")
    assert not out.exists()


def test_the_link_series_csv_holds_every_change_point_as_csv_writes_them(tmp_path):
    import csv as csv_module

    res = simnet.simulate(fat_tree_config(), record_series=True)
    path = output.write_series_csv(tmp_path / "series.csv", res)
    rows = list(csv_module.reader(path.open()))
    assert rows[0] == output.SERIES_HEADER
    want = [
        [p.name, output.link_name(k), str(t), str(r), str(r / p.link_capacity_bytes_per_s[k])]
        for p in res.phases
        for k in sorted(p.link_series, key=output.link_name)
        for t, r in p.link_series[k].tolist()
    ]
    assert len(want) > 100 and rows[1:] == want
    # A value's text is made once, but 0.0 and -0.0 (equal keys) each keep their own.
    text = output._FloatText()
    assert [text[x] for x in (0.0, -0.0, 2.5e9, 2.5e9, -0.0, 0.0)] == [
        "0.0",
        "-0.0",
        "2500000000.0",
        "2500000000.0",
        "-0.0",
        "0.0",
    ]
    assert dict(text) == {2.5e9: "2500000000.0"}


def test_matrix_rows_as_the_csv_gives_them():
    floats = np.array([[np.inf, 1.5, 2.0], [0.25, np.nan, -np.inf], [1e-300, 3.0, 4.0]])
    assert output.matrix_rows(floats) == [
        [0, None, 1.5, 2.0],
        [1, 0.25, None, None],
        [2, 1e-300, 3.0, 4.0],
    ]
    ints = np.array([[0, 2**62], [7, 1]], dtype=np.int64)
    assert output.matrix_rows(ints) == [[0, 0, 2**62], [1, 7, 1]]
    assert all(type(v) is int for row in output.matrix_rows(ints) for v in row)
    flags = np.array([[True, False]])
    assert output.matrix_rows(flags) == [[0, 1, 0]]
    assert [str(v) for v in output.matrix_rows(flags)[0]] == ["0", "1", "0"]


@pytest.mark.parametrize("negative_zero", [False, True])
def test_matrix_csv_is_what_write_csv_writes_of_its_rows(tmp_path, negative_zero):
    from workload.results import write_csv

    m = np.array([[np.inf, 0.0, 2.5e9], [0.0, np.nan, 1 / 3], [2.5e9, 7.0, np.inf]])
    if negative_zero:
        m[2, 1] = -0.0
    got = output.write_matrix_csv(tmp_path / "m.csv", m, "src\\dst").read_text()
    header = ["src\\dst", "0", "1", "2"]
    # What write_csv writes of its rows, a missing value (None: not finite) as an empty cell.
    rows = [["" if v is None else v for v in row] for row in output.matrix_rows(m)]
    want = write_csv(tmp_path / "w.csv", header, rows).read_text()
    assert got == want
    assert got.splitlines()[1] == "0,,0.0,2500000000.0"
    assert ("-0.0" in got) == negative_zero
    ints = np.array([[0, 5], [3, 0]])
    got = output.write_matrix_csv(tmp_path / "i.csv", ints, "c").read_text()
    assert got == "c,0,1\n0,0,5\n1,3,0\n"


def test_the_command_runs_without_the_cyclic_collector_and_restores_it(tmp_path, monkeypatch):
    import gc
    import importlib

    simulate_module = importlib.import_module("simnet.simulate")
    seen: list[bool] = []
    real = simulate_module.simulate

    def simulate(*args, **kw):
        seen.append(gc.isenabled())
        return real(*args, **kw)

    monkeypatch.setattr(simulate_module, "simulate", simulate)
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(fat_tree_config()))
    assert gc.isenabled()
    assert cli.main(["--config", str(cfg), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:  # (python -m simnet turns it off for the process: it stays off)
        assert cli.main(["--config", str(cfg), "--out", str(tmp_path / "p"), "--quiet"]) == 0
        assert not gc.isenabled()
    finally:
        gc.enable()


def _run_cli(tmp_path, name: str, config: dict, *extra: str) -> int:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return cli.main(["--config", str(path), "--quiet", *extra])


def test_a_run_into_a_used_folder_leaves_none_of_the_earlier_runs_files(tmp_path):
    out = tmp_path / "out"
    # Two phases (ResNet-50): per-phase files; then one phase, sparse: none of them.
    assert _run_cli(tmp_path, "a", fat_tree_config(), "--out", str(out)) == 0
    first = {p.name for p in out.iterdir()}
    assert {"sim_traffic_bytes_allreduce.csv", "sim_rank_breakdown_ring.png"} <= first
    doc = json.loads((out / "sim_results.json").read_text())
    assert sorted(doc["files"]) == sorted(first)
    keep = out / "notes.txt"
    keep.write_text("mine")
    one_phase = dict(fat_tree_config(), workload={"name": "dlrm", "world_size": 16, "scale": 0.01})
    assert _run_cli(tmp_path, "b", one_phase, "--out", str(out), "--matrices", "sparse") == 0
    second = {p.name for p in out.iterdir()}
    doc = json.loads((out / "sim_results.json").read_text())
    assert second == {*doc["files"], "notes.txt"} and keep.read_text() == "mine"
    assert "sim_traffic_bytes.csv" not in second and "sim_rank_breakdown_ring.png" not in second
    # Another prefix is another run: both stay, each with its own report.
    assert _run_cli(tmp_path, "c", one_phase, "--out", str(out), "--prefix", "c_") == 0
    assert {"report.html", "c_report.html", "sim_summary.txt", "c_summary.txt"} <= {
        p.name for p in out.iterdir()
    }
    assert "c_report.html" in (out / "c_summary.txt").read_text()


def test_ctrl_c_while_writing_leaves_no_summary_of_any_run(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    assert _run_cli(tmp_path, "a", fat_tree_config(), "--out", str(out)) == 0
    from simnet import plots

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(plots, "timeline_bars", interrupted)
    assert _run_cli(tmp_path, "a", fat_tree_config(), "--out", str(out)) == 130
    err = capsys.readouterr().err
    assert f"interrupted while writing: {out} holds this run's files written so far" in err
    assert "Traceback" not in err
    left = {p.name for p in out.iterdir()}
    assert "sim_summary.txt" not in left and "sim_results.json" not in left
    assert "report.html" not in left and "sim_pairs.csv" in left


def test_ctrl_c_lost_inside_a_callback_still_interrupts_the_writing(tmp_path, monkeypatch, capsys):
    # Python ignores exceptions raised inside some callbacks (a weakref's, as matplotlib
    # uses): a Ctrl-C that lands there was lost, and the run ended with exit 0.
    import contextlib
    import signal

    from simnet import plots

    out = tmp_path / "out"
    original = plots.timeline_bars

    def losing_an_interrupt(fn):
        def call(*a, **k):
            # (lost, as Python loses a weakref callback's exception)
            with contextlib.suppress(KeyboardInterrupt):
                signal.raise_signal(signal.SIGINT)
            return fn(*a, **k)

        return call

    monkeypatch.setattr(plots, "timeline_bars", losing_an_interrupt(original))
    assert _run_cli(tmp_path, "a", fat_tree_config(), "--out", str(out)) == 130
    err = capsys.readouterr().err
    assert f"interrupted while writing: {out} holds this run's files written so far" in err
    assert not (out / "sim_summary.txt").exists()
    # Outside the command, Ctrl-C is Python's own again.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    # Lost while the last file (the page) was written: the summary is there, and said.
    from simnet import report

    monkeypatch.setattr(plots, "timeline_bars", original)
    monkeypatch.setattr(report, "write_report", losing_an_interrupt(report.write_report))
    assert _run_cli(tmp_path, "a", fat_tree_config(), "--out", str(out)) == 130
    err = capsys.readouterr().err
    assert f"interrupted as the last files were written: {out} holds this run's" in err
    assert (out / "sim_summary.txt").is_file() and (out / "report.html").is_file()


@pytest.mark.parametrize(
    "cfg",
    [
        fat_tree_config(),
        {  # three iterations; its programs wait on requests, as GPT-3's do
            "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 10.0},
            "topology": {"type": "switch", "num_nodes": 8},
            "workload": {"name": "dlrm", "scale": 0.01, "iterations": 3},
        },
        {
            "distributed": {"num_nodes": 16, "bandwidth_limit_gb_per_s": 25.0},
            "topology": {"type": "switch", "num_nodes": 16},
            "workload": {"name": "gpt3", "args": [4, 1], "scale": 0.01},
        },
    ],
    ids=["resnet_fat_tree", "dlrm_3_iterations", "gpt3"],
)
def test_the_trace_written_a_rank_at_a_time_is_the_whole_document_byte_for_byte(tmp_path, cfg):
    # (written from a text per operation, not by json.dumps of each rank's events)
    from workload.results import write_json

    res = simnet.simulate(cfg, dense_matrices=False)
    whole = write_json(tmp_path / "whole.json", output.trace(res), indent=None)
    streamed = output.write_trace(tmp_path / "streamed.json", res)
    assert streamed.read_bytes() == whole.read_bytes()
    # Some ranks: their names and events only, in the same order.
    doc = json.loads(output.write_trace(tmp_path / "some.json", res, [5, 2, 5]).read_text())
    full = output.trace(res)["traceEvents"]
    assert doc["traceEvents"] == [e for e in full if e["pid"] in (2, 5)]
    assert json.loads(output.write_trace(tmp_path / "none.json", res, []).read_text()) == {
        "traceEvents": [],
        "displayTimeUnit": "ms",
    }


def test_a_trace_over_its_budget_holds_the_first_ranks_that_fit_and_the_last_to_finish():
    res = simnet.simulate(fat_tree_config(), dense_matrices=False)
    counts = output.trace_events_per_rank(res)
    # resnet50: two phases of one collective each per rank, over the phase's iterations.
    want = [
        sum(len(p.timeline.programs[r]) * len(p.timeline.timelines[r].starts) for p in res.phases)
        for r in range(16)
    ]
    assert counts == want and sum(counts) == len(
        [e for e in output.trace(res)["traceEvents"] if e["ph"] == "X"]
    )
    assert output.choose_trace_ranks(res) == (list(range(16)), None)
    last = output.last_rank_to_finish(res)
    sim = res.phases[-1].timeline
    ends = [sim.timelines[r].ends[-1][-1] for r in range(16)]
    assert ends[last] == max(ends) and last == ends.index(max(ends))
    budget = counts[last] + sum(counts[:3]) + counts[3] // 2  # room for 3 more ranks
    ranks, note = output.choose_trace_ranks(res, max_events=budget)
    assert ranks == sorted({0, 1, 2, last} if last > 2 else {0, 1, 2, 3})
    held = sum(counts[r] for r in ranks)
    assert note.startswith(f"  timeline trace: ranks {output.spans(ranks)} of 16 ({held:,} of ")
    assert f"rank {last} finishes last; at most {budget:,} by default" in note
    # Asked for: exactly those, said; all of them, nothing to say.
    assert output.choose_trace_ranks(res, "3-5,9")[0] == [3, 4, 5, 9]
    assert output.choose_trace_ranks(res, "all") == (list(range(16)), None)
    assert output.choose_trace_ranks(res, "none") == (
        [],
        "  timeline trace not written (asked for no rank)",
    )


def test_rank_lists_are_parsed_and_refused_by_what_is_wrong():
    assert output.parse_ranks("0-3, 9,2", 16) == [0, 1, 2, 3, 9]
    assert output.spans([0, 1, 2, 3, 9, 11, 12]) == "0-3, 9, 11-12"
    for text, said in (
        ("x", "'x' is not a rank or a range of ranks (e.g. 0-63,517, all, none)"),
        ("5-2", "'5-2': the range runs backwards"),
        ("0-16", "'0-16': ranks are 0 to 15 (16 ranks)"),
        ("-1", "'-1' is not a rank"),
    ):
        with pytest.raises(ValueError) as e:
            output.parse_ranks(text, 16)
        assert str(e.value).startswith(said)


def test_trace_ranks_and_a_series_over_its_budget_from_the_command_line(
    tmp_path, capsys, monkeypatch
):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(fat_tree_config()))
    # A bad list is refused before anything is simulated.
    assert (
        cli.main(["--config", str(cfg), "--out", str(tmp_path / "x"), "--trace-ranks", "3-99"]) == 2
    )
    err = capsys.readouterr().err
    assert "error: --trace-ranks: '3-99': ranks are 0 to 15 (16 ranks)" in err
    assert not (tmp_path / "x").exists()
    monkeypatch.setattr(output, "SERIES_CSV_MAX_POINTS", 10)
    out = tmp_path / "a"
    assert cli.main(["--config", str(cfg), "--out", str(out), "--trace-ranks", "0,15"]) == 0
    text = capsys.readouterr().out
    doc = json.loads((out / "sim_results.json").read_text())
    points = sum(
        len(v) for p in simnet.simulate(fat_tree_config()).phases for v in p.link_series.values()
    )
    assert points > 10
    note = (
        f"link series CSV not written ({points:,} change points, about "
        f"{points * 50 / 1e6:,.0f} MB; at most 10 by default, --series writes them): the "
        "utilisation plot draws the busiest links' series"
    )
    assert note in text and note in doc["output_notes"]
    assert not (out / "sim_link_series.csv").exists()
    events = json.loads((out / "sim_timeline.trace.json").read_text())["traceEvents"]
    assert {e["pid"] for e in events} == {0, 15}
    assert "timeline trace: ranks 0, 15 of 16 (" in text
    assert cli.main(["--config", str(cfg), "--out", str(out), "--series", "--quiet"]) == 0
    assert len((out / "sim_link_series.csv").read_text().splitlines()) == points + 1
    assert (
        "sim_timeline.trace.json"
        in json.loads((out / "sim_results.json").read_text())[output.RUN_FILES_KEY]
    )


def test_trace_ranks_with_jobs_are_checked_for_form_first_and_for_range_after(tmp_path, capsys):
    # With jobs the ranks are known after the simulation: "all" (any case) must not be
    # expanded against a bound before it (it ran out of memory), a malformed list is
    # refused at once, a rank beyond the jobs' after, with nothing written.
    cfg = str(ROOT / "examples" / "two_jobs.json")
    assert cli.main(["--config", cfg, "--out", str(tmp_path / "a"), "--trace-ranks", "ALL",
                     "--quiet"]) == 0  # fmt: skip
    events = json.loads((tmp_path / "a" / "sim_timeline.trace.json").read_text())["traceEvents"]
    assert {e["pid"] for e in events} == set(range(16))
    assert cli.main(["--config", cfg, "--out", str(tmp_path / "b"), "--trace-ranks", "3-1"]) == 2
    assert "error: --trace-ranks: '3-1': the range runs backwards" in capsys.readouterr().err
    assert cli.main(["--config", cfg, "--out", str(tmp_path / "c"), "--trace-ranks", "0-99"]) == 2
    assert "'0-99': ranks are 0 to 15 (16 ranks); nothing was written" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
    res = simnet.simulate(fat_tree_config(), dense_matrices=False)
    with pytest.raises(ValueError, match="rank 16 is none of the 16 ranks"):
        output.choose_trace_ranks(res, [0, 16])


def test_a_node_with_no_route_inside_is_said_to_have_none():
    # Failed links may cut an endpoint of a node off, or split the network through it:
    # its slowest route inside is no route, not "0 GB/s".
    slowest = np.array([10e9, 0.0, 10e9, 2e9])
    (line,), entry = output.node_bandwidth_lines(slowest, 4, 16, True, "sim_node_bandwidth.csv")
    assert line == (
        "  routes inside nodes (4 endpoints each; sim_node_bandwidth.csv): the slowest 10 GB/s "
        "in 2 of its 4 nodes; slower: node 1 (endpoints 4-7) no route between some of them, "
        "node 3 (endpoints 12-15) 2 GB/s"
    )
    assert entry["slower_nodes"] == [
        {"node": 1, "bytes_per_s": 0.0},
        {"node": 3, "bytes_per_s": 2e9},
    ]


@pytest.mark.parametrize(
    "x", [0.1, 1e-7, 123456789.0, -0.0, 5, 0, float("nan"), float("inf"), True, None]
)
def test_a_trace_number_is_written_as_json_writes_it(x):
    import numpy as np

    from workload.timeline import _json_number

    assert _json_number(x) == json.dumps(x)
    if isinstance(x, float):
        assert _json_number(np.float64(x)) == json.dumps(x)
    if type(x) is int:
        assert _json_number(np.int64(x)) == json.dumps(x)
