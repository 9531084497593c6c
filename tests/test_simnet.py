"""simnet: closed-form collective costs, invariants, the API and configuration errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest

import simnet
import topologies
from simnet.config import ConfigError, load_config

BW = 10e9  # bytes/s
LAT = 2e-6  # s per hop
ALPHA = 1e-6  # s per message


def lg(p: int) -> int:
    return int(math.log2(p))


def close(sim: float, closed: float) -> None:
    assert abs(sim - closed) <= 0.01 * closed, (sim, closed)


# Hockney parameters of an uncontended route: a = alpha + hops x latency, b = 1 / bandwidth.
@pytest.mark.parametrize("p", [2, 4, 5, 8, 16])
@pytest.mark.parametrize("n", [4 * 2**10 * 240, 4 * 2**18 * 240])
def test_ring_allreduce_on_ring(p, n):
    g = topologies.ring(p, bandwidth_bytes_per_s=BW, latency_s=LAT)
    a, b = ALPHA + LAT, 1 / BW
    close(
        simnet.collective_time(g, "allreduce", "ring", n, alpha_s=ALPHA),
        2 * (p - 1) * a + 2 * (p - 1) / p * n * b,
    )


@pytest.mark.parametrize("p", [4, 8, 16])
@pytest.mark.parametrize("n", [4 * 4096, 4 * 2**20])
def test_switch_collectives_match_thakur_rabenseifner_gropp(p, n):
    g = topologies.switch(p, bandwidth_bytes_per_s=BW, latency_s=LAT)
    a, b = ALPHA + 2 * LAT, 1 / BW

    def t(op, alg, size):
        return simnet.collective_time(g, op, alg, size, alpha_s=ALPHA)

    close(t("allreduce", "recursive_doubling", n), lg(p) * (a + n * b))
    close(t("allreduce", "rabenseifner", n), 2 * lg(p) * a + 2 * (p - 1) / p * n * b)
    # allgather / reduce_scatter: n = the whole gathered (reduced) vector.
    close(t("allgather", "recursive_doubling", n // p), lg(p) * a + (p - 1) / p * n * b)
    close(t("allgather", "bruck", n // p), math.ceil(math.log2(p)) * a + (p - 1) / p * n * b)
    close(t("allgather", "ring", n // p), (p - 1) * a + (p - 1) / p * n * b)
    close(t("reduce_scatter", "recursive_halving", n // p), lg(p) * a + (p - 1) / p * n * b)
    close(t("reduce_scatter", "ring", n // p), (p - 1) * a + (p - 1) / p * n * b)
    # alltoall: n = the total a process sends.
    per_peer = n // p
    close(t("alltoall", "pairwise", per_peer), (p - 1) * a + (p - 1) * per_peer * b)
    close(t("bcast", "binomial", n), math.ceil(math.log2(p)) * (a + n * b))
    # MPICH's long-vector bcasts and reduce: scatter + allgather, reduce-scatter + gather.
    scatter_gather = 2 * lg(p) * a + 2 * (p - 1) / p * n * b
    close(t("bcast", "scatter_recursive_doubling_allgather", n), scatter_gather)
    close(t("bcast", "scatter_ring_allgather", n), (lg(p) + p - 1) * a + 2 * (p - 1) / p * n * b)
    close(t("reduce", "rabenseifner", n), scatter_gather)


def test_mpichs_choice_runs_and_a_stand_in_is_said():
    # DLRM's 132 B per peer on 8 ranks: MPICH runs Bruck's alltoall, and so does the
    # simulation (3 messages a rank of 4 blocks each, not 7 of one), with nothing to say.
    from simnet.executor import AlgorithmPolicy
    from workload.ops import Collective

    cfg = {
        "distributed": {"num_nodes": 8},
        "topology": {"type": "switch"},
        "workload": {"name": "dlrm", "scale": 0.001},
    }
    res = simnet.simulate(cfg)
    assert not [a for a in res.assumed if "stands in" in a]
    assert res.phases[0].algorithms["alltoall"] == ["bruck"]
    # The scatter + ring allgather bcast over more than 1,024 ranks: binomial, said.
    policy = AlgorithmPolicy()
    assert policy.choose(Collective("bcast", "world", 1 << 20, None, None, 0, "b"), 2048) == (
        "binomial"
    )
    assert list(policy.stand_ins) == [
        "bcast: MPICH's default here is 'scatter_ring_allgather'; 'binomial' stands in "
        "(above 1,024 ranks: the whole vector down a binomial tree, "
        "ceil(lg p) times on the root's path, where the scatter and ring allgather move "
        "2 (p - 1) / p of it between ring neighbours)"
    ]


@pytest.mark.parametrize(("groups", "size"), [(2, 4), (4, 4), (3, 2)])
def test_hierarchical_allreduce_two_level_cost(groups, size):
    intra_bw, inter_bw, l_in, l_out = 100e9, 12.5e9, 0.5e-6, 2.5e-6
    g = topologies.hierarchical(
        groups,
        size,
        intra_bandwidth_bytes_per_s=intra_bw,
        inter_bandwidth_bytes_per_s=inter_bw,
        intra_latency_s=l_in,
        inter_latency_s=l_out,
    )
    n = 4 * 2**16 * size * groups
    a_l, a_g = 2 * l_in, 2 * l_out
    closed = (
        2 * (size - 1) * a_l
        + 2 * (size - 1) / size * n / intra_bw
        + 2 * (groups - 1) * a_g
        + 2 * (groups - 1) / groups * (n / size) / inter_bw
    )
    close(simnet.collective_time(g, "allreduce", "hierarchical", n, local_size=size), closed)


def test_contention_halves_the_rate():
    # Two rings' worth of traffic on a unidirectional ring vs a bidirectional one:
    # a multiring of two identical orders shares every link, so it takes as long as one ring.
    g = topologies.ring(4, bandwidth_bytes_per_s=BW, latency_s=0.0)
    one = simnet.collective_time(g, "allreduce", "ring", 4 * 2**20)
    two = simnet.collective_time(
        g, "allreduce", "multiring", 4 * 2**20, rings=[[0, 1, 2, 3], [0, 1, 2, 3]]
    )
    close(two, one)
    both_ways = simnet.collective_time(
        g, "allreduce", "multiring", 4 * 2**20, rings=[[0, 1, 2, 3], [0, 3, 2, 1]]
    )
    close(both_ways, one / 2)


def pipeline_config(**workload):
    return {
        "distributed": {"num_nodes": 4, "bandwidth_limit_gb_per_s": 10.0},
        "topology": {"type": "ring", "num_nodes": 4, "link_latency_us": 1.0},
        "workload": {"name": "gpt2", "args": [8, 4, 2], **workload},
        "logging": {"log_dir": "unused"},
    }


def test_pipeline_traffic_is_exact_and_time_closed_form():
    res = simnet.simulate(pipeline_config())
    t = res.traffic_bytes
    msg = 808960 * 4
    # 2 micro-batches forward s -> s+1 and backward s+1 -> s; one data shard: no allreduce.
    expected = np.zeros((4, 4), dtype=np.int64)
    for s in range(3):
        expected[s, s + 1] = expected[s + 1, s] = 2 * msg
    assert (t == expected).all()
    assert res.phases[0].wire_bytes_by_group == {"pp": 12 * msg}
    # Uncontended pipeline: each hop costs latency + msg / bw; rendezvous sends chain.
    hop = 1e-6 + msg / 10e9
    assert res.iteration_time_s > 0
    assert res.iteration_time_s <= 2 * (2 + 2) * hop * 1.01
    assert res.bandwidth_bytes_per_s[0, 1] == 10e9
    assert np.isinf(res.bandwidth_bytes_per_s[0, 0])


def test_bytes_conserved_and_capacity_respected():
    cfg = {
        "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 10.0},
        "topology": {"type": "hierarchical", "num_nodes": 8, "group_size": 4},
        "workload": {"name": "cosmoflow", "scale": 0.01},
    }
    res = simnet.simulate(cfg)
    p = res.phases[0]
    assert int(p.traffic_bytes.sum()) == sum(p.wire_bytes_by_group.values())
    assert p.max_link_overload <= 1 + 1e-9
    # Every link carries at most what crosses it: the sum of bytes on the links
    # out of endpoints equals the bytes those endpoints sent.
    sent = p.traffic_bytes.sum(axis=1)
    for r in range(8):
        out = sum(b for (u, _v), b in p.link_bytes.items() if u == r)
        assert out == sent[r]


def test_identical_input_identical_output(tmp_path):
    cfg = pipeline_config()
    a, b = tmp_path / "a", tmp_path / "b"
    from simnet.output import write_all

    write_all(simnet.simulate(cfg), a)
    write_all(simnet.simulate(cfg), b)
    for f in sorted(a.iterdir()):
        if f.suffix in (".csv",) or f.name.endswith(".trace.json"):
            assert f.read_bytes() == (b / f.name).read_bytes(), f.name
    da = json.loads((a / "sim_results.json").read_text())
    db = json.loads((b / "sim_results.json").read_text())
    for d in (da, db):
        for ph in d["phases"]:
            ph.pop("sim_wall_s")
            ph.pop("messages_per_wall_s")
    assert da == db


def test_api_accepts_path_dict_and_model(tmp_path):
    cfg = pipeline_config()
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    times = {simnet.simulate(x).iteration_time_s for x in (cfg, str(path), load_config(cfg))}
    assert len(times) == 1


def test_results_files_written(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "simnet",
            "--config",
            str(_write(tmp_path, pipeline_config())),
            "--out",
            str(tmp_path / "out"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    names = {f.name for f in (tmp_path / "out").iterdir()}
    for n in (
        "sim_traffic_bytes.csv",
        "sim_bandwidth_bytes_per_s.csv",
        "sim_links.csv",
        "sim_traffic_heatmap.png",
        "sim_bandwidth_heatmap.png",
        "sim_link_utilisation.png",
        "sim_timeline.trace.json",
        "sim_results.json",
        "sim_summary.txt",
    ):
        assert n in names
    assert not [n for n in names if n.endswith(".tmp")]
    assert "predicted iteration time" in r.stdout
    rows = (tmp_path / "out" / "sim_traffic_bytes.csv").read_text().splitlines()
    assert rows[0] == "src\\dst,0,1,2,3"
    assert rows[1] == f"0,0,{2 * 808960 * 4},0,0"
    # No route from an endpoint to itself: an empty cell (a missing value), not "None".
    rows = (tmp_path / "out" / "sim_bandwidth_bytes_per_s.csv").read_text().splitlines()
    assert [r.split(",")[1 + i] for i, r in enumerate(rows[1:])] == ["", "", "", ""]
    assert "None" not in "".join(rows)
    # A pair that sent nothing has no achieved rate either: empty, the sender's a number.
    rows = (tmp_path / "out" / "sim_achieved_bytes_per_s.csv").read_text().splitlines()
    first = rows[1].split(",")
    assert first[1] == first[3] == first[4] == "" and float(first[2]) > 0


def _write(tmp_path, cfg):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"topology": {"type": "mesh"}}, "topology.type: Input should be"),
        ({"topology": {"typo": 1}}, "topology.typo: unknown key"),
        ({"distributed": {"bandwidth_limit_gb_per_s": -1}}, "distributed.bandwidth_limit_gb_per_s"),
        (
            {"topology": {"permutations": [0, 10]}},
            "permutations[1] = 10: a rotation must be in 0..9",
        ),
        (
            {"topology": {"permutations": [[0, 1, 1, 2, 3, 4, 5, 6, 7, 8]]}},
            "must list every rank 0..9 exactly once",
        ),
        (
            {"topology": {"type": "hierarchical", "num_nodes": 10, "group_size": 4}},
            "topology.group_size=4 must divide topology.num_nodes=10",
        ),
        (
            {
                "workload": {"name": "gpt2"},
                "distributed": {"num_nodes": 6},
                "topology": {"num_nodes": 6},
            },
            "multiple of stages=4",
        ),
        ({"workload": {"name": "nope"}}, "workload.name: unknown model 'nope'"),
        (
            {"workload": {"name": "dlrm", "world_size": 16}},
            "workload.world_size: 16 ranks but the ring topology has only 10 endpoints",
        ),
        ({"collectives": {"algorithm": "rign"}}, "unknown algorithm 'rign'"),
        ({"collectives": {"by_op": {"allreduc": "ring"}}}, "unknown collective 'allreduc'"),
        (
            {"collectives": {"by_op": {"alltoall": "ring"}}},
            "'ring' is not an algorithm of alltoall",
        ),
        ({"workload": {"name": "resnet152", "per_tensor": True}}, "workload.per_tensor"),
        (
            {"workload": {"name": "dlrm", "world_size": 8}, "topology": {"permutations": [0, 5]}},
            "world size (8) must equal topology.num_nodes (10)",
        ),
    ],
)
def test_config_errors(cfg, message):
    with pytest.raises(ConfigError) as e:
        simnet.simulate(cfg)
    assert message in str(e.value)


def test_cli_bad_config_exit_2(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "simnet",
            "--config",
            str(_write(tmp_path, {"topology": {"tpye": "ring"}})),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert "topology.tpye: unknown key" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_reader_that_leaves_early_gets_no_traceback():
    # `python -m simnet --schema | head`: the pipe closes before the schema is written.
    proc = subprocess.Popen(
        [sys.executable, "-m", "simnet", "--schema"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    proc.stdout.close()
    try:
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 141
    finally:
        proc.kill()
    assert err == ""


def test_schema_export():
    r = subprocess.run(
        [sys.executable, "-m", "simnet", "--schema"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0
    s = json.loads(r.stdout)
    assert {"model", "training", "distributed", "topology", "logging"} <= set(s["properties"])


def test_gpt3_larger_than_any_machine():
    # 8 stages x 4 tensor shards x 2 replicas: 64 ranks, full message sizes
    # (a rank of the real run would hold gigabytes), no buffers allocated here.
    cfg = {
        "distributed": {"num_nodes": 64, "bandwidth_limit_gb_per_s": 25.0},
        "topology": {
            "type": "hierarchical",
            "num_nodes": 64,
            "group_size": 4,
            "inter_bandwidth_gb_per_s": 12.5,
        },
        "workload": {"name": "gpt3", "args": [8, 1]},
    }
    res = simnet.simulate(cfg)
    p = res.phases[0]
    pipelines, hops, directions, microbatches = 2 * 4, 7, 2, 8
    assert p.wire_bytes_by_group["pp"] == pipelines * hops * directions * microbatches * (
        25165824 * 4
    )
    assert res.iteration_time_s > 8 * (15915 + 31830) * 1e-6


def test_progress_reporting_does_not_change_the_prediction():
    cfg = pipeline_config()
    seen = []
    with_progress = simnet.simulate(cfg, progress=seen.append)
    assert with_progress.iteration_time_s == simnet.simulate(cfg).iteration_time_s
    assert seen and "messages" in seen[-1]


def test_link_params_file_is_relative_to_the_config_file(tmp_path, monkeypatch):
    cfg = pipeline_config()
    cfg["network"] = {"link_params_file": "lp.json"}
    (tmp_path / "lp.json").write_text(json.dumps({"alpha_us": 7.0}))
    path = _write(tmp_path, cfg)
    monkeypatch.chdir("/")
    res = simnet.simulate(str(path))
    assert any("alpha_us = 7.0" in a for a in res.assumed)


def test_bandwidth_matrix_is_capped_by_injection_bandwidth():
    cfg = pipeline_config()
    cfg["network"] = {"injection_bandwidth_gb_per_s": 4.0}  # GB/s, below the 10 GB/s links
    res = simnet.simulate(cfg)
    off = ~np.eye(4, dtype=bool)
    assert (res.bandwidth_bytes_per_s[off] == 4e9).all()
    assert (np.diag(res.bandwidth_bytes_per_s) == math.inf).all()
    assert simnet.simulate(pipeline_config()).bandwidth_bytes_per_s[0, 1] == 10e9


def test_collective_time_refuses_an_algorithm_it_cannot_run():
    g = topologies.ring(6, bandwidth_bytes_per_s=1e9, latency_s=1e-6)
    with pytest.raises(
        ValueError,
        match=r"^collective_time: allreduce cannot run 'hierarchical': no group size is set "
        r"\(pass local_size=, the group size\)$",
    ):
        simnet.collective_time(g, "allreduce", "hierarchical", 4096)
    with pytest.raises(ValueError, match="group size 4 does not divide 6 ranks"):
        simnet.collective_time(g, "allreduce", "hierarchical", 4096, local_size=4)
    with pytest.raises(ValueError, match=r"alltoall has no 'ring' schedule \(it has bruck, "):
        simnet.collective_time(g, "alltoall", "ring", 4096)
    assert simnet.collective_time(g, "allreduce", "hierarchical", 4096, local_size=3) > 0
    with pytest.raises(ValueError, match=r"^collective_time: allreduce cannot run 'ringg': "):
        simnet.collective_time(g, "allreduce", "ringg", 4096)


def test_the_time_functions_refuse_what_they_cannot_send():
    g = topologies.switch(4, 1e10, 1e-6)
    with pytest.raises(TypeError, match="no keyword 'pipline_chunks'; the schedule's are "):
        simnet.collective_time(g, "allreduce", "ring", 4096, pipline_chunks=8)
    for bad in (-8, 4.0, True):
        with pytest.raises(ValueError, match=r"whole number of bytes >= 0 \(got "):
            simnet.collective_time(g, "allreduce", "ring", bad)
        with pytest.raises(ValueError, match="whole number of bytes"):
            simnet.message_time(g, 0, 1, bad)
        with pytest.raises(ValueError, match="whole number of bytes"):
            simnet.exchange_time(g, bad)
    with pytest.raises(ValueError, match=r"multiple of 4 \(float32 elements; got 5\)"):
        simnet.message_time(g, 0, 1, 5)
    with pytest.raises(ValueError, match=r"^dst=4 is no endpoint of the topology \(0..3\)$"):
        simnet.message_time(g, 0, 4, 8)
    with pytest.raises(ValueError, match=r"^src=-1 is no endpoint"):
        simnet.message_time(g, -1, 0, 8)
    with pytest.raises(ValueError, match="src and dst are both endpoint 2"):
        simnet.message_time(g, 2, 2, 8)
    with pytest.raises(ValueError, match="window must be a whole number of messages >= 1"):
        simnet.exchange_time(g, 8, window=0)


def test_a_hand_made_graph_is_refused_naming_what_it_lacks():
    g = nx.DiGraph()
    g.add_edge(0, 1, bandwidth=1e9, latency=0.0)
    g.add_edge(1, 0, bandwidth=1e9, latency=0.0)
    for call in (
        lambda: simnet.collective_time(g, "allreduce", "ring", 1 << 20),
        lambda: simnet.message_time(g, 0, 1, 1 << 20),
        lambda: simnet.exchange_time(g, 1 << 20),
    ):
        with pytest.raises(topologies.TopologyError, match="node 0 has kind=None"):
            call()
    nx.set_node_attributes(g, "endpoint", "kind")
    with pytest.raises(topologies.TopologyError, match=r"set graph.graph\['num_endpoints'\]"):
        simnet.collective_time(g, "allreduce", "ring", 1 << 20)
    g.graph["num_endpoints"] = 2
    # Ring allreduce on 2 ranks: 2 (p - 1) / p x 1 MiB at 1 GB/s, no latency.
    assert simnet.collective_time(g, "allreduce", "ring", 1 << 20) == pytest.approx(
        (1 << 20) / 1e9, rel=1e-12
    )


def test_collective_time_takes_the_node_size_the_topology_records():
    # 2 nodes of 8 GPUs: without local_size, the NCCL algorithms see the nodes the
    # builder made (local_size=8), as a hierarchical allreduce sees the groups.
    rail = topologies.rail_optimised(2, 8, 300e9, 25e9, 0.5e-6, 1e-6)
    for alg in ("nccl_ring", "nccl_tree"):
        t = simnet.collective_time(rail, "allreduce", alg, 1 << 24)
        assert t == simnet.collective_time(rail, "allreduce", alg, 1 << 24, local_size=8)
        assert t < simnet.collective_time(rail, "allreduce", alg, 1 << 24, local_size=16) / 2
    h = topologies.hierarchical(2, 4, 10e9, 5e9, 1e-6, 1e-6)
    assert simnet.collective_time(h, "allreduce", "hierarchical", 4096) == (
        simnet.collective_time(h, "allreduce", "hierarchical", 4096, local_size=4)
    )


def test_fallback_from_a_configured_algorithm_is_reported_as_assumed():
    cfg = {
        "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 10.0},
        "topology": {"type": "switch", "num_nodes": 8},
        "collectives": {"algorithm": "ring"},
        "workload": {"name": "dlrm", "args": [], "scale": 0.001},
    }
    res = simnet.simulate(cfg)
    notes = [a for a in res.assumed if "asked for" in a]
    # (MPICH's default for 33 elements a peer on 8 ranks: Bruck's)
    assert notes == [
        "alltoall: 'ring' asked for, 'bruck' used: alltoall has no 'ring' schedule "
        "(it has bruck, direct, pairwise, scattered)"
    ]
    assert res.phases[0].algorithms == {"allreduce": ["ring"], "alltoall": ["bruck"]}


def test_settings_the_run_cannot_use_are_said_and_change_nothing():
    # The ring trainer's collectives name their algorithm (its rings) and move data as
    # its proxy does, without the library's reduction: an algorithm, host costs and NCCL
    # channels configured for it are said to be unused, and the time is the same.
    base = {"distributed": {"num_nodes": 4}, "training": {"steps_per_epoch": 1}}
    plain = simnet.simulate(base)
    cfg = {
        **base,
        "topology": {"type": "switch", "ecmp": True},
        "collectives": {"algorithm": "recursive_doubling", "gamma_s_per_byte": 1e-9,
                        "channels": 4},
        "distributed": {"num_nodes": 4, "buffer_size_bytes": 1000},
    }  # fmt: skip
    res = simnet.simulate(cfg)
    said = [a for a in res.assumed if a.split(":")[0].startswith(("collectives.", "topology.",
                                                                  "distributed."))]  # fmt: skip
    assert said == [
        "distributed.buffer_size_bytes: not modelled, messages go whole (the main job's ring "
        "trainer reports transfers above it as overruns)",
        "topology.ecmp: a switch topology has one shortest route per pair, so ecmp changes nothing",
        "collectives.gamma_s_per_byte: not paid, the workload's collectives run their own "
        "schedules (as its proxy does), which move data without the library's reduction "
        "and progress",
        "collectives.algorithm: not used, the workload's collectives name their own "
        "algorithms (see algorithms:)",
        "collectives.channels: not used, only nccl_ring and nccl_tree read them and neither ran",
    ]
    switch = simnet.simulate({**base, "topology": {"type": "switch"}})
    assert res.iteration_time_s == switch.iteration_time_s != plain.iteration_time_s
    # A workload whose collectives the library runs pays gamma, and hears nothing of it.
    dlrm = {
        "distributed": {"num_nodes": 4},
        "workload": {"name": "dlrm", "scale": 0.01, "compute_scale": 0.0},
    }
    paid = simnet.simulate({**dlrm, "collectives": {"gamma_s_per_byte": 1e-9}})
    assert not any("gamma" in a for a in paid.assumed)
    assert paid.iteration_time_s > simnet.simulate(dlrm).iteration_time_s
    # A group size where the topology has no groups is read by no algorithm that ran.
    df = {"type": "dragonfly", "routers_per_group": 2, "endpoints_per_router": 2}
    grouped = simnet.simulate({**dlrm, "distributed": {"num_nodes": 16},
                               "topology": {**df, "group_size": 3}})  # fmt: skip
    assert (
        "topology.group_size: not used, a dragonfly topology has no groups and only the "
        "hierarchical, nccl_ring, nccl_tree algorithms read it (as their node size), none "
        "of which ran"
    ) in grouped.assumed


def test_host_fields_without_hosts_and_a_rank_above_its_host_are_said():
    alone = simnet.simulate(
        {
            "distributed": {"num_nodes": 4},
            "hosts": {"copy_bandwidth_gb_per_s": 10, "nic_latency_us": 1},
        }
    )
    assert [a for a in alone.assumed if a.startswith("hosts.")] == [
        "hosts.copy_bandwidth_gb_per_s, hosts.nic_latency_us: not used without "
        "hosts.ranks_per_host (every rank then has an endpoint of its own)"
    ]
    hosts = {"ranks_per_host": 2, "copy_bandwidth_gb_per_s": 10}
    cfg = {"distributed": {"num_nodes": 4}, "topology": {"type": "switch", "num_nodes": 2}}
    fast = simnet.simulate({**cfg, "hosts": {**hosts, "rank_copy_bandwidth_gb_per_s": 50}})
    assert (
        "hosts.rank_copy_bandwidth_gb_per_s (50) is above the host's "
        "hosts.copy_bandwidth_gb_per_s (10): one rank copies at most at its host's rate"
    ) in fast.assumed
    # The host caps it: as fast as a rank at the host's own rate.
    capped = simnet.simulate({**cfg, "hosts": {**hosts, "rank_copy_bandwidth_gb_per_s": 10}})
    assert fast.iteration_time_s == capped.iteration_time_s


def test_fewer_ranks_than_hosts_hold_are_said_to_fill_the_first_hosts():
    hosts = {"ranks_per_host": 4, "copy_bandwidth_gb_per_s": 10}
    res = simnet.simulate({"distributed": {"num_nodes": 2}, "hosts": hosts})
    assert (
        "hosts: 2 ranks on 2 hosts of 4 fill the first 1 host(s) (host-major); "
        "workload.world_size = 8 fills them all"
    ) in res.assumed


def test_stragglers_on_a_workload_without_compute_are_said_to_change_nothing():
    cfg = {"distributed": {"num_nodes": 4}, "whatif": {"stragglers": {"3": 1.5}}}
    gpt2 = {**cfg, "workload": {"name": "gpt2", "args": [8, 2, 1], "scale": 0.01}}
    res = simnet.simulate(gpt2)
    assert res.scenario[-1] == (
        "the workload computes nothing: stragglers and noise change nothing"
    )
    assert res.iteration_time_s == simnet.simulate({**gpt2, "whatif": {}}).iteration_time_s
    dlrm = simnet.simulate({**cfg, "workload": {"name": "dlrm", "scale": 0.01}})
    assert dlrm.scenario == ["rank 3 computes 1.5x as long"]


def test_multi_phase_workload_gets_plots_per_phase(tmp_path):
    cfg = {
        "distributed": {"num_nodes": 4, "bandwidth_limit_gb_per_s": 10.0},
        "topology": {"type": "ring", "num_nodes": 4},
        "workload": {"name": "resnet50", "args": [], "scale": 0.001},
    }
    out = tmp_path / "out"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "simnet",
            "--config",
            str(_write(tmp_path, cfg)),
            "--out",
            str(out),
            "--quiet",
            "--no-series",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    names = [p["phase"] for p in json.loads((out / "sim_results.json").read_text())["phases"]]
    assert names == ["allreduce", "ring"]
    for name in names:
        for kind in ("link_utilisation", "rank_breakdown"):
            assert (out / f"sim_{kind}_{name}.png").stat().st_size > 1000
        assert (out / f"sim_traffic_bytes_{name}.csv").is_file()
    assert not (out / "sim_link_utilisation.png").exists()


def test_progress_reports_a_bar_that_reaches_the_exact_message_count():
    lines: list[str] = []
    cfg = {
        "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 10.0},
        "topology": {"type": "switch", "num_nodes": 8},
        "workload": {"name": "dlrm", "args": [], "scale": 0.001, "iterations": 2},
    }
    res = simnet.simulate(cfg, progress=lines.append)
    total = res.phases[0].messages
    assert total > 100
    assert lines[-1].startswith("iteration: [########################] 100.0% ")
    assert f" {total:,}/{total:,} messages, simulated " in lines[-1]
    assert all(f"/{total:,} messages" in line for line in lines)


def test_writing_a_runs_files_is_reported_as_it_goes(tmp_path, capsys, monkeypatch):
    import itertools

    import simnet.cli
    import simnet.progress

    # A clock that moves 2 s per reading: every progress line is shown (on a terminal).
    ticks = itertools.count()
    monkeypatch.setattr(simnet.progress.time, "perf_counter", lambda: 2.0 * next(ticks))
    monkeypatch.setattr(simnet.cli, "live_progress", lambda: True)
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"distributed": {"num_nodes": 4},
                               "workload": {"name": "dlrm", "scale": 0.001}}))  # fmt: skip
    assert simnet.cli.main(["--config", str(cfg), "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    writing = [s.split("] ", 1)[1].strip() for s in captured.err.split("\r") if "writing: " in s]
    # Files that may take long are announced first (DLRM's 4 ranks send to every other:
    # 12 pairs).
    assert writing[:2] == [
        "writing: 0 files, now sim_pairs.csv (12 rows) ...",
        "writing: 1 files, the last sim_pairs.csv",
    ]
    assert "writing: 11 files, now sim_timeline.trace.json ..." in writing
    written = len(list((tmp_path / "out").iterdir()))
    assert writing[-1] == f"writing: {written} files, the last report.html"
    assert captured.err.endswith("\n")  # the line was ended before the summary
    assert captured.out.startswith("simnet: dlrm on 4 ranks")


def test_a_long_step_of_the_writing_is_announced_at_once(tmp_path, capsys, monkeypatch):
    import simnet.cli
    import simnet.progress

    # A clock that stands still: lines are at most one a second, but not an announcement.
    monkeypatch.setattr(simnet.progress.time, "perf_counter", lambda: 5.0)
    monkeypatch.setattr(simnet.cli, "live_progress", lambda: True)
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"distributed": {"num_nodes": 4},
                               "workload": {"name": "dlrm", "scale": 0.001}}))  # fmt: skip
    assert simnet.cli.main(["--config", str(cfg), "--out", str(tmp_path / "out")]) == 0
    shown = [s.split("] ", 1)[1].strip() for s in capsys.readouterr().err.split("\r") if "] " in s]
    assert "writing: 0 files, now sim_pairs.csv (12 rows) ..." in shown
    assert not [s for s in shown if s.startswith("writing: ") and "the last" in s][:-1]


def test_the_command_ends_its_progress_line_on_the_final_state(tmp_path, capsys, monkeypatch):
    import itertools

    import simnet.cli
    import simnet.progress

    # A clock that moves 0.4 s per reading: some lines are shown, later ones are not.
    ticks = itertools.count()
    monkeypatch.setattr(simnet.progress.time, "perf_counter", lambda: 0.4 * next(ticks))
    monkeypatch.setattr(simnet.cli, "live_progress", lambda: True)
    cfg = tmp_path / "c.json"
    cfg.write_text(
        json.dumps(
            {
                "distributed": {"num_nodes": 8},
                "topology": {"type": "switch", "num_nodes": 8},
                "workload": {"name": "dlrm", "scale": 0.001, "iterations": 2},
            }
        )
    )
    assert simnet.cli.main(["--config", str(cfg), "--out", str(tmp_path / "out")]) == 0
    shown = capsys.readouterr().err.split("\r")
    final = [s for s in shown if "messages" in s][-1].splitlines()[0]
    # Every message of the two iterations (MPICH's Bruck alltoall at 33 elements a peer).
    want = sum(p.messages for p in simnet.simulate(str(cfg)).phases)
    assert f"100.0% {want}/{want} messages" in final and final.rstrip().endswith(" ms")


def test_progress_into_a_log_is_whole_lines_every_ten_seconds(tmp_path, capsys, monkeypatch):
    import itertools

    import simnet.cli
    import simnet.progress

    # stderr no terminal (capsys, as a Slurm log): whole lines, none drawn over with a
    # carriage return, at most one per 10 s of the clock (here 3 s per reading) but for
    # announcements of long steps, and the final state once, as the last line.
    ticks = itertools.count()
    monkeypatch.setattr(simnet.progress.time, "perf_counter", lambda: 3.0 * next(ticks))
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"distributed": {"num_nodes": 4},
                               "workload": {"name": "dlrm", "scale": 0.001}}))  # fmt: skip
    assert simnet.cli.main(["--config", str(cfg), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and err.endswith("\n")
    lines = [line for line in err.splitlines() if line.startswith("[")]
    times = [float(line[1:].split(" s]")[0]) for line in lines]
    assert times == sorted(times) and len(lines) >= 3
    for (t0, _), (t1, line) in itertools.pairwise(zip(times, lines, strict=True)):
        assert t1 - t0 >= 9.0 or line.endswith(" ..."), (t0, t1, line)
    written = len(list((tmp_path / "out").iterdir()))
    assert lines[-1].endswith(f"writing: {written} files, the last report.html")
    assert len(set(lines)) == len(lines)  # (the final state not written twice)


@pytest.mark.parametrize(
    ("doc", "hint"),
    [
        ({"distributed": {"num_nodes": 100_000}}, "endpoints fit (distributed.num_nodes)"),
        (
            {"topology": {"type": "fat_tree", "k": 200}, "distributed": {"num_nodes": 16}},
            "topology.k = ",
        ),
    ],
)  # fmt: skip
def test_a_case_too_big_for_the_memory_is_refused_before_it_is_built(doc, hint):
    from simnet.config import ConfigError

    with pytest.raises(ConfigError) as e:
        simnet.simulate(doc, available_bytes=16 * 2**30)
    msg = str(e.value)
    assert msg.startswith("this case would need about ") and hint in msg
    assert "16.0 GiB is available" in msg and "--force" in msg


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {"distributed": {"num_nodes": 1024}, "topology": {"type": "fat_tree", "k": 8},
             "workload": {"name": "resnet152"}, "collectives": {"algorithm": "ring"}},
            "distributed.num_nodes (the world size when workload.world_size is not given): "
            "1,024 ranks but the fat_tree topology has only 128 "
            "endpoints; use a larger topology (topology.k) or fewer ranks",
        ),
        (
            {"distributed": {"num_nodes": 16}, "topology": {"type": "torus", "dims": [4, 4]},
             "workload": {"name": "dlrm", "world_size": 64}},
            "workload.world_size: 64 ranks but the torus topology has only 16 endpoints; use "
            "a larger topology (topology.dims) or fewer ranks",
        ),
        (
            {"distributed": {"num_nodes": 4}, "hosts": {"ranks_per_host": 2},
             "workload": {"name": "dlrm", "world_size": 16}},
            "workload.world_size: 16 ranks but the ring topology has only 8 endpoints (4 x 2 "
            "ranks per host); use a larger topology (distributed.num_nodes) or fewer ranks",
        ),
        (  # a dimension of 0 is named, not counted as a torus of no endpoints
            {"distributed": {"num_nodes": 8}, "topology": {"type": "torus", "dims": [2, 0, 4]}},
            "topology.dims[1] must be >= 2 (got 0)",
        ),
    ],
)  # fmt: skip
def test_more_ranks_than_endpoints_is_refused_before_the_size_check(doc, message):
    # Named by the field that set the ranks, before a memory estimate of ranks that
    # cannot be placed (which refused the first case naming a k too small for them).
    with pytest.raises(simnet.ConfigError) as e:
        simnet.simulate(doc, available_bytes=2**30)
    assert str(e.value).splitlines()[-1].strip() == message


def test_without_dense_matrices_a_case_is_checked_for_what_it_holds():
    # Memory between what the simulation holds and that plus the dense pair matrices
    # (8 B x 11 x 512^2 = 22 MiB): refused by default, run without the matrices, whose
    # entries are then the sparse pairs'.
    from simnet import sizecheck
    from simnet.simulate import _rank0_counts, build_workload

    doc = {
        "distributed": {"num_nodes": 512},
        "topology": {"type": "ring"},
        "workload": {"name": "resnet50", "scale": 1e-4},
    }
    cfg = simnet.load_config(doc)
    ops, msgs, ring, rep = _rank0_counts(cfg, build_workload(cfg))
    alone = sizecheck.estimate(
        cfg, ops, 2, msgs, matrices=False, ring_run_messages=ring, repeated_messages=rep
    )
    alone = alone.total_bytes
    dense = sizecheck.estimate(
        cfg, ops, 2, msgs, ring_run_messages=ring, repeated_messages=rep
    ).total_bytes
    assert dense - alone == (8 * (6 + 5 * 2) + 64) * 512**2
    avail = int((alone + dense) / 2 / sizecheck.HEADROOM)
    with pytest.raises(simnet.ConfigError, match="this case would need"):
        simnet.simulate(doc, available_bytes=avail)
    res = simnet.simulate(doc, available_bytes=avail, dense_matrices=False)
    ph = res.phases[0]
    assert "traffic_bytes" not in ph.__dict__  # nothing dense built until asked for
    assert len(ph.pair_bytes) == 512 * 9  # Rabenseifner: partners at distances 1, 2, .., 256
    assert ph.traffic_bytes.shape == (512, 512)
    assert ph.traffic_bytes.sum() == sum(ph.pair_bytes.values())
    for (s, d), b in ph.pair_bytes.items():
        assert ph.traffic_bytes[s, d] == b and ph.pair_busy_s[s, d] == ph.pair_busy[(s, d)]
    assert sum(m.sum() for m in ph.part_traffic_bytes.values()) == ph.traffic_bytes.sum()


def test_the_size_that_fits_is_named_and_does_fit():
    from simnet import sizecheck
    from simnet.config import load_config

    avail = 16 * 2**30
    cfg = load_config({"distributed": {"num_nodes": 100_000}})
    est = sizecheck.estimate(cfg, ops_per_rank=10, phases=1)
    msg = sizecheck.refusal(cfg, est, 1, avail)
    n = int(msg.split("at most about ")[1].split(" endpoints")[0].replace(",", ""))
    fit = sizecheck.estimate(load_config({"distributed": {"num_nodes": n}}), 10, 1)
    over = sizecheck.estimate(load_config({"distributed": {"num_nodes": n + 50}}), 10, 1)
    assert sizecheck.refusal(load_config({"distributed": {"num_nodes": n}}), fit, 1, avail) is None
    assert over.total_bytes > sizecheck.HEADROOM * avail


def test_the_message_estimate_counts_what_the_simulation_sends():
    from simnet.config import load_config
    from simnet.simulate import _rank0_counts, build_workload

    doc = {
        "distributed": {"num_nodes": 64},
        "topology": {"type": "switch"},
        "workload": {"name": "dlrm", "scale": 0.001},
    }
    cfg = load_config(doc)
    _, per_rank, ring, _ = _rank0_counts(cfg, build_workload(cfg))
    res = simnet.simulate(doc, record_series=False)
    assert per_rank * 64 == sum(p.messages for p in res.phases)
    assert ring == 0  # recursive allreduces and direct alltoalls: plans kept per message


def test_messages_of_ring_runs_are_counted_apart_and_cost_little():
    # ResNet-152 with ring allreduces on 1,024 ranks of a k = 16 fat-tree: 21 million
    # messages, a 0.37 GB peak here; charged 900 B each it was refused below 17.6 GiB.
    from simnet import sizecheck
    from simnet.config import load_config
    from simnet.simulate import _rank0_counts, build_workload

    doc = {
        "distributed": {"num_nodes": 1024},
        "topology": {"type": "fat_tree", "k": 16},
        "workload": {"name": "resnet152", "scale": 0.1},
        "collectives": {"algorithm": "ring"},
    }
    cfg = load_config(doc)
    ops, msgs, ring, rep = _rank0_counts(cfg, build_workload(cfg))
    assert msgs == ring == 20_951_040 // 1024  # every message in ring runs
    est = sizecheck.estimate(
        cfg, ops, 1, msgs, matrices=False, ring_run_messages=ring, repeated_messages=rep
    )
    assert est.message_bytes == sizecheck.RING_RUN_MESSAGE_BYTES * 20_951_040
    assert sizecheck.refusal(cfg, est, 1, 2 * 2**30) is None  # 2 GiB is plenty
    doc["collectives"]["algorithm"] = "rabenseifner"
    cfg = load_config(doc)
    assert _rank0_counts(cfg, build_workload(cfg)).ring_run_messages == 0


@pytest.mark.parametrize(
    "topology",
    [
        {"type": "ring", "num_nodes": 12},
        {"type": "switch", "num_nodes": 12},
        {"type": "torus", "dims": [4, 4, 4]},
        {"type": "torus", "dims": [2, 4, 8]},
        {"type": "fat_tree", "k": 6},
        {"type": "hierarchical", "num_nodes": 64, "group_size": 8},
        {"type": "rail_optimised", "num_nodes": 64, "group_size": 8},
        {"type": "dragonfly", "num_nodes": 64, "routers_per_group": 4, "endpoints_per_router": 2},
        {"type": "dragonfly", "num_nodes": 64, "routers_per_group": 2, "endpoints_per_router": 2},
    ],
)
def test_the_size_check_counts_each_networks_nodes_and_edges(topology):
    from simnet import sizecheck
    from simnet.config import load_config
    from simnet.simulate import build_topology

    cfg = load_config({"distributed": {"num_nodes": 8}, "topology": topology})
    g, _ = build_topology(cfg)
    assert sizecheck.graph_elements(cfg) == g.number_of_nodes() + g.number_of_edges()
    for rph in (2, 8):  # and with hosts of several ranks
        hosts = {"ranks_per_host": rph, "copy_bandwidth_gb_per_s": 10,
                 "rank_copy_bandwidth_gb_per_s": 5}  # fmt: skip
        doc = {"distributed": {"num_nodes": 8}, "topology": topology, "hosts": hosts}
        cfg = load_config({**doc, "workload": {"name": "dlrm", "world_size": 8}})
        g, _ = build_topology(cfg)
        assert sizecheck.graph_elements(cfg) == g.number_of_nodes() + g.number_of_edges()


def test_the_hints_with_hosts_name_hosts_and_a_fat_tree_that_fits():
    from simnet import sizecheck
    from simnet.config import load_config
    from simnet.simulate import _rank0_counts, build_workload

    hosts = {"ranks_per_host": 8, "copy_bandwidth_gb_per_s": 10, "rank_copy_bandwidth_gb_per_s": 5}

    def refusal(doc: dict, avail: int) -> str | None:
        cfg = load_config(doc)
        ops, msgs, ring, rep = _rank0_counts(cfg, build_workload(cfg))
        est = sizecheck.estimate(cfg, ops, 1, msgs, ring_run_messages=ring, repeated_messages=rep)
        return sizecheck.refusal(cfg, est, 1, avail)

    fat = {"distributed": {"num_nodes": 8}, "topology": {"type": "fat_tree", "k": 32},
           "hosts": hosts}  # fmt: skip
    fat["workload"] = {"name": "dlrm", "world_size": 256, "scale": 0.01}
    msg = refusal(fat, 2**30 // 5)
    k = int(msg.split("topology.k = ")[1].split(" fits")[0])
    fat["topology"]["k"] = k
    assert refusal(fat, 2**30 // 5) is None  # the named k does fit
    switch = {"distributed": {"num_nodes": 512}, "topology": {"type": "switch"},
              "hosts": hosts, "workload": {"name": "dlrm", "scale": 0.01}}  # fmt: skip
    msg = refusal(switch, 2**30)
    n = int(
        msg.split("at most about ")[1].split(" hosts of 8 ranks fit (distributed.num_nodes)")[0]
    )
    assert n < 512


@pytest.mark.parametrize(
    ("doc", "hint"),
    [
        # DLRM's alltoalls on 4,096 ranks: its messages, not the fat-tree, are too big
        # (the hint named ever smaller k, none of which holds 4,096 ranks). At scale 2,
        # 512 B a peer: every block its own message (at 256 B, Bruck's 12 a rank fit).
        (
            {"distributed": {"num_nodes": 4096}, "topology": {"type": "fat_tree", "k": 26},
             "workload": {"name": "dlrm", "scale": 2.0}},
            "ranks fit (distributed.num_nodes)",
        ),
        # A torus whose ranks' messages are too big: not "999,999 endpoints fit".
        (
            {"distributed": {"num_nodes": 4096}, "topology": {"type": "torus", "dims": [64, 64]},
             "workload": {"name": "dlrm", "world_size": 4096, "scale": 2.0}},
            "ranks fit (workload.world_size)",
        ),
    ],
)  # fmt: skip
def test_the_hint_names_the_ranks_when_they_are_what_does_not_fit(doc, hint):
    from simnet import sizecheck
    from simnet.config import load_config
    from simnet.simulate import _rank0_counts, build_workload

    with pytest.raises(simnet.ConfigError) as e:
        simnet.simulate(doc, available_bytes=8 * 2**30)
    msg = str(e.value)
    assert hint in msg, msg
    # The named number of ranks fits.
    r = int(msg.split("at most about ")[1].split(" ranks")[0].replace(",", ""))
    assert 1024 <= r < 4096
    # DLRM's world size divides 2^18: the largest such one under the hint, which the
    # hint names when it names none itself, fits.
    two = 1 << (r.bit_length() - 1)
    assert r == two or f"the largest power of two below is {two:,}" in msg
    doc["workload"]["world_size"] = two
    cfg = load_config(doc)
    ops, msgs, ring, rep = _rank0_counts(cfg, build_workload(cfg))
    est = sizecheck.estimate(cfg, ops, 1, msgs, ring_run_messages=ring, repeated_messages=rep)
    assert sizecheck.refusal(cfg, est, 1, 8 * 2**30) is None


def test_the_size_check_of_a_very_large_group_is_quick_and_refuses():
    # Counting every rank's schedule at 32,768 ranks took over 60 s and 16.8 GB; the
    # counts of groups this large are extrapolated from 2,048 and 4,096 ranks.
    from simnet.config import ConfigError

    doc = {"distributed": {"num_nodes": 32768}, "topology": {"type": "switch"},
           "workload": {"name": "dlrm"}}  # fmt: skip
    with pytest.raises(ConfigError, match="endpoints fit"):
        simnet.simulate(doc, available_bytes=16 * 2**30)


# ---------------------------------------------------------------- protocol costs


def _p2p_time(count: int, *, handshake: bool, recv_after_us: float = 0.0) -> float:
    """One message of ``count`` elements from endpoint 0 to 1 on a two-endpoint switch
    (two hops of LAT), the receive posted after ``recv_after_us`` of compute (s)."""
    from simnet.simulate import program_time
    from workload.program import ProgramBuilder

    def program(rank: int) -> list:
        b = ProgramBuilder()
        if rank == 0:
            b.send(1, count, tag=1, group="world")
        else:
            if recv_after_us:
                b.compute(recv_after_us)
            b.recv(0, count, tag=1, group="world")
        return b.ops

    g = topologies.switch(2, bandwidth_bytes_per_s=BW, latency_s=LAT)
    return program_time(
        g,
        program,
        alpha_s=ALPHA,
        eager_threshold_bytes=65536,
        rendezvous_handshake=handshake,
    )


def test_rendezvous_handshake_costs_one_zero_byte_message():
    n = 4 * 2**20  # bytes, above the 64 KiB eager threshold
    plain = ALPHA + 2 * LAT + n / BW
    assert _p2p_time(n // 4, handshake=False) == pytest.approx(plain, rel=1e-12)
    assert _p2p_time(n // 4, handshake=True) == pytest.approx(ALPHA + 2 * LAT + plain, rel=1e-12)
    # An eager message sends no request first.
    small = 4096
    assert _p2p_time(small // 4, handshake=True) == pytest.approx(
        ALPHA + 2 * LAT + small / BW, rel=1e-12
    )


def test_rendezvous_request_waits_at_a_late_receiver():
    # The request is in long before the receive is posted (at 100 us): the data leaves
    # then, at no extra cost.
    n = 4 * 2**20
    got = _p2p_time(n // 4, handshake=True, recv_after_us=100.0)
    assert got == pytest.approx(100e-6 + ALPHA + 2 * LAT + n / BW, rel=1e-12)


def test_config_turns_the_handshake_on_by_default():
    import simpy

    from simnet.simulate import network_factory

    def handshake(network: dict) -> bool:
        cfg = load_config({"distributed": {"num_nodes": 2}, "network": network})
        assert cfg.network.rendezvous_handshake is network.get("rendezvous_handshake", True)
        net = network_factory(cfg, topologies.ring(2, BW))(simpy.Environment())
        return net.rendezvous_handshake

    assert handshake({}) is True
    assert handshake({"rendezvous_handshake": False}) is False


def test_small_ring_allreduce_sends_every_step_on_hierarchical():
    # 2 elements over 16 ranks: 14 of 16 blocks are empty. Every rank still sends a
    # (zero-byte) message in each of the 30 steps, as MPICH's ring does, and with eager
    # messages 8 bytes cost what 64 bytes (one element per block) cost.
    from simnet.executor import SimExecutor
    from simnet.network import FlowNetwork
    from workload.program import BuildOptions, Phase, ProgramBuilder, Workload

    g = topologies.hierarchical(2, 8, 100e9, 10e9, 1e-6, 10e-6)
    router = topologies.Router(g)

    def run(count: int) -> tuple[float, int]:
        def program(rank: int) -> list:
            b = ProgramBuilder(BuildOptions(algorithm="ring"))
            b.collective("allreduce", "world", count)
            return b.ops

        wl = Workload("t", 16, {}, {"world": [tuple(range(16))]}, [Phase("x", program)])
        ex = SimExecutor(
            wl,
            lambda env: FlowNetwork(env, g, router.path),
            list(range(16)),
            eager_threshold_bytes=1 << 20,
        )
        sim = ex.run_phase()
        return sim.makespan_s, sim.net.transfers_started

    t2, m2 = run(2)
    t16, m16 = run(16)
    assert m2 == m16 == 16 * 30
    assert t2 == pytest.approx(t16, rel=1e-3)


def test_a_finished_simulation_leaves_no_cyclic_garbage_growing_with_its_ranks():
    """The run's state is freed by reference counting when simulate returns (the ranks'
    cycles are broken), not left for the cyclic collector to trace: what a collection
    then finds is the network graph's own, the same at 16 and at 64 ranks."""
    import gc

    def garbage_after(ranks: int) -> int:
        cfg = {
            "distributed": {"num_nodes": ranks, "bandwidth_limit_gb_per_s": 25.0},
            "topology": {"type": "fat_tree", "k": 8},
            "workload": {"name": "resnet50", "world_size": ranks, "scale": 0.01},
        }
        gc.collect()
        simnet.simulate(cfg, record_series=False)
        return gc.collect()

    small, large = garbage_after(16), garbage_after(64)
    assert abs(large - small) < 50, (small, large)


def test_a_finished_simulation_keeps_no_collective_plans():
    """Every rank's plan of every collective is the bulk of a big run's memory (a million
    small tuples per thousand ranks of a data-parallel step): once the last phase has
    run, the result keeps none of them, so they are freed at once, not traced by the
    cyclic collector's first pass after the run."""
    cfg = {
        "distributed": {"num_nodes": 16, "bandwidth_limit_gb_per_s": 25.0},
        "topology": {"type": "fat_tree", "k": 4},
        "workload": {"name": "resnet50", "world_size": 16, "scale": 0.01},
    }
    res = simnet.simulate(cfg, record_series=False)
    sim = res.phases[0].timeline
    assert sim.messages_done > 0
    assert sim.ex._plans == {}
    assert sim._coll_cache == {} and sim._calls_by_op == {} and sim._shared_calls == {}


@pytest.mark.parametrize("p", [2, 3, 8])
def test_a_binomial_reduce_charges_every_receiver_the_reduction_the_root_too(p):
    # ceil(lg p) (a + n b + n g) (Thakur, Rabenseifner & Gropp): the root receives the
    # last step's data and reduces it, though it sends nothing.
    bw, lat, alpha, gamma, n = 10e9, 1e-6, 3e-6, 1e-9, 4 * 24 * 4096  # p divides its elements
    g = topologies.switch(p, bandwidth_bytes_per_s=bw, latency_s=lat)
    t = simnet.collective_time(g, "reduce", "binomial", n, alpha_s=alpha, gamma_s_per_byte=gamma)
    steps = math.ceil(math.log2(p))
    assert t == pytest.approx(steps * (alpha + 2 * lat + n / bw + n * gamma), rel=1e-9)
    # Ring and recursive allreduces' members both send and receive what they reduce: as
    # before, one gamma per reduced byte.
    ring = simnet.collective_time(g, "allreduce", "ring", n, gamma_s_per_byte=gamma)
    block = n / p
    assert ring == pytest.approx(
        2 * (p - 1) * (2 * lat + block / bw) + (p - 1) * block * gamma, rel=1e-9
    )


def test_a_direct_alltoall_pays_the_send_overhead_in_posting_order_eager_or_rendezvous():
    # Every rank posts its receives, then its sends to r + 1, r + 2, ...: each sender pays
    # o per message as it posts them, so its last message leaves (p - 1) o after the
    # first, hidden behind the draining of the others; receives match in another order,
    # which must not serialise the overheads again (rendezvous paid them when matched).
    from workload.program import ProgramBuilder

    p, m, o = 8, 1 << 16, 1e-6
    g = topologies.switch(p, 10e9, 0.0)

    def prog(r: int) -> list:
        b = ProgramBuilder()
        q = [b.recv(i, m // 4, tag=1, group="world", blocking=False) for i in range(p) if i != r]
        q += [
            b.send((r + d) % p, m // 4, tag=1, group="world", blocking=False) for d in range(1, p)
        ]
        b.wait(*q)
        return b.ops

    for eager in (0, 1 << 30):
        extra = simnet.program_time(
            g, prog, send_overhead_s=o, eager_threshold_bytes=eager
        ) - simnet.program_time(g, prog, eager_threshold_bytes=eager)
        assert extra == pytest.approx(o, rel=1e-6), eager


def _two_rank_run(ops: list, stream_order: bool) -> tuple[float, list[float]]:
    """Makespan and rank 0's operation ends (s) of ``ops`` on both ranks of a 2-endpoint
    switch (10 GB/s, 1 us links), every message eager."""
    from simnet.executor import SimExecutor
    from simnet.network import FlowNetwork
    from workload.program import Phase, Workload

    g = topologies.switch(2, bandwidth_bytes_per_s=10e9, latency_s=1e-6)
    router = topologies.Router(g)
    wl = Workload("t", 2, {}, {"world": [(0, 1)]}, [Phase("x", lambda rank: list(ops))])
    ex = SimExecutor(
        wl,
        lambda env: FlowNetwork(env, g, router.path),
        [0, 1],
        eager_threshold_bytes=1 << 30,
        stream_order=stream_order,
    )
    sim = ex.run_phase()
    return sim.makespan_s, sim.timelines[0].ends[0]


def test_stream_order_runs_a_groups_collectives_one_at_a_time():
    from workload.ops import Collective, Compute, Wait

    n = 8 << 20  # bytes per allreduce; ring on 2 ranks: 2 steps of n / 2 over 2 hops

    def allreduce(req: int | None) -> Collective:
        return Collective("allreduce", "world", n // 4, req=req, algorithm="ring")

    alone = 2 * (2e-6 + n / 2 / 10e9)
    shared = 2 * (2e-6 + n / 10e9)  # both collectives' steps at half the rate each
    compute_s = 0.01
    ops = [allreduce(1), allreduce(2), Wait((1,)), Compute(compute_s * 1e6), Wait((2,))]
    # NCCL: the second starts when the first ends, so the first is done after `alone`
    # and the second (2 x alone) under the compute.
    t, ends = _two_rank_run(ops, stream_order=True)
    assert ends[2] == pytest.approx(alone, rel=1e-12)
    assert t == pytest.approx(alone + compute_s, rel=1e-12)
    # MPI: both progress together, sharing the links: the first ends after `shared`.
    t, ends = _two_rank_run(ops, stream_order=False)
    assert ends[2] == pytest.approx(shared, rel=1e-12)
    assert t == pytest.approx(shared + compute_s, rel=1e-12)
    # A blocking collective waits for the non-blocking one before it.
    t, ends = _two_rank_run([allreduce(1), allreduce(None), Wait((1,))], stream_order=True)
    assert ends[1] == pytest.approx(2 * alone, rel=1e-12)


def test_collectives_given_an_nccl_algorithm_run_as_nccl_and_the_summary_says_so():
    def run(collectives: dict) -> simnet.SimResult:
        cfg = {
            "topology": {"type": "switch", "num_nodes": 8},
            "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 25},
            "workload": {"name": "resnet50", "world_size": 8, "scale": 0.01},
            "collectives": collectives,
        }
        return simnet.simulate(cfg, record_series=False)

    note = "collectives given an NCCL algorithm run as NCCL runs them: "
    for collectives, order in [
        ({}, None),
        ({"stream_order": True}, None),  # no NCCL algorithm ran: nothing to say
        ({"by_op": {"allreduce": "nccl_ring"}}, "one at a time per group, in call order"),
        ({"algorithm": "nccl_tree", "stream_order": False}, "non-blocking ones on a group"),
        ({"algorithm": "nccl_ring", "library": "nccl"}, None),  # asked for: not assumed
        ({"algorithm": "nccl_ring", "library": "mpi"}, None),
    ]:
        said = [a for a in run(collectives).assumed if a.startswith(note)]
        if order is None:
            assert not said, collectives
        else:
            assert len(said) == 1 and said[0][len(note) :].startswith(order), said


def test_stream_order_serialises_a_pipelines_gradient_buckets():
    # A pipeline's gradient buckets (DDP with overlap, 25 MiB each) reduce one after
    # another: the stage-to-stage sends share their links with one of them, not with
    # every bucket in flight, and the iteration is shorter.
    llm = {
        "topology": {"type": "switch", "num_nodes": 8},
        "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 25},
        "workload": {
            "name": "llm",
            "world_size": 8,
            "flags": {"preset": "llama-3-8b", "pp": 4, "micro_batches": 8},
        },
    }
    serial = simnet.simulate({**llm, "collectives": {"stream_order": True}}, record_series=False)
    together = simnet.simulate(llm, record_series=False)
    assert serial.iteration_time_s < 0.99 * together.iteration_time_s


def _library_run(collectives: dict, library: str, ops=None, async_progress=True, **network):
    """Seconds of one 25 MiB allreduce the program leaves to its library (or of ``ops``),
    on 2 nodes x 8 GPUs (rail-optimised), the policy giving it ``collectives``
    (AlgorithmPolicy's fields), as ``library`` runs it; MPI's eager threshold (64 KiB)
    and handshake."""
    from simnet.executor import AlgorithmPolicy, SimExecutor
    from simnet.network import FlowNetwork
    from workload.ops import Collective
    from workload.program import Phase, Workload

    g = topologies.rail_optimised(2, 8, 300e9, 25e9, 0.5e-6, 1e-6)
    router = topologies.Router(g)
    wl = Workload(
        "t",
        16,
        {},
        {"world": [tuple(range(16))]},
        [Phase("x", lambda rank: ops or [Collective("allreduce", "world", (25 << 20) // 4)])],
    )
    ex = SimExecutor(
        wl,
        lambda env: FlowNetwork(env, g, router.path, rendezvous_handshake=True, **network),
        list(range(16)),
        policy=AlgorithmPolicy(local_size=8, **collectives),
        library=library,
        async_progress=async_progress,
        gamma_s_per_byte=1e-9,
        step_latency_s=20e-6,
    )
    sim = ex.run_phase()
    return sim.makespan_s


@pytest.mark.parametrize("algorithm", ["nccl_ring", "nccl_tree"])
def test_an_nccl_algorithm_runs_as_nccl_runs_it(algorithm):
    # NCCL's messages wait for a free buffer at their receiver, with no request-to-send,
    # and it reduces on the GPU: what collective_time gives (its messages all wait, no
    # handshake, no host costs), not MPI's protocol and host costs.
    g = topologies.rail_optimised(2, 8, 300e9, 25e9, 0.5e-6, 1e-6)
    alone = simnet.collective_time(g, "allreduce", algorithm, 25 << 20, local_size=8)
    for library in ("auto", "nccl"):
        assert _library_run({"fixed": algorithm}, library) == pytest.approx(alone, rel=1e-12)
    # As MPI messages: a handshake per rendezvous step, gamma and a step latency.
    assert _library_run({"fixed": algorithm}, "mpi") > 1.05 * alone
    # An MPI algorithm runs as MPI's either way, unless the library is NCCL's.
    assert _library_run({"fixed": "ring"}, "auto") == _library_run({"fixed": "ring"}, "mpi")
    assert _library_run({"fixed": "ring"}, "nccl") < _library_run({"fixed": "ring"}, "mpi")
    # No host work per message (LogGP's o), and the kernels progress on the GPU whatever
    # the host does: a non-blocking one runs under the compute without an MPI call.
    o = {"send_overhead_s": 50e-6}
    assert _library_run({"fixed": algorithm}, "auto", **o) == pytest.approx(alone, rel=1e-12)
    assert _library_run({"fixed": algorithm}, "mpi", **o) > _library_run(
        {"fixed": algorithm}, "mpi"
    )
    from workload.ops import Collective, Compute, Wait

    overlapped = [
        Collective("allreduce", "world", (25 << 20) // 4, req=1),
        Compute(0.1 * 1e6),  # 0.1 s, far longer than the allreduce
        Wait((1,)),
    ]
    for library in ("auto", "mpi"):
        t = _library_run({"fixed": algorithm}, library, overlapped, async_progress=False)
        if library == "auto":
            assert t == pytest.approx(0.1, rel=1e-12)
        else:  # MPI without a progress thread: it moves on only in the Wait
            assert t > 0.1 + 0.5 * alone


def test_nccl_tree_leaves_the_ops_without_a_tree_to_nccls_ring():
    from simnet.executor import AlgorithmPolicy
    from workload.ops import Collective

    policy = AlgorithmPolicy(fixed="nccl_tree", local_size=8)
    assert policy.choose(Collective("allreduce", "world", 1 << 20), 16) == "nccl_tree"
    for op in ("reduce_scatter", "allgather"):
        assert policy.choose(Collective(op, "world", 1 << 20), 16) == "nccl_ring"
    assert list(policy.fallbacks) == [
        "reduce_scatter: 'nccl_tree' asked for, 'nccl_ring' used: NCCL runs reduce_scatter "
        "with its ring, not a tree",
        "allgather: 'nccl_tree' asked for, 'nccl_ring' used: NCCL runs allgather with its "
        "ring, not a tree",
    ]


def test_a_call_with_nothing_to_send_returns_at_once_in_stream_order():
    from workload.ops import Collective, Wait

    big = Collective("allreduce", "world", (8 << 20) // 4, req=1, algorithm="ring")
    empty = Collective("allreduce", "world", 0, algorithm="ring")
    _, ends = _two_rank_run([big, empty, Wait((1,))], stream_order=True)
    assert ends[1] == 0.0 and ends[2] > 0


def test_stream_order_matches_every_members_calls_whatever_waits():
    # Rank 0 calls its second allreduce while its first still runs (it waits in the
    # stream), rank 1 after a long compute (it starts at once); a call with nothing to
    # send between them returns at once on both. Each member's k-th call is still the
    # same collective: the run ends, as it does without the empty call.
    from simnet.executor import SimExecutor
    from simnet.network import FlowNetwork
    from workload.ops import Collective, Compute, Wait
    from workload.program import Phase, Workload

    n = (8 << 20) // 4

    def program(with_empty: bool):
        def ops(rank: int) -> list:
            out = [Collective("allreduce", "world", n, req=1, algorithm="ring")]
            if rank == 1:
                out.append(Compute(10_000.0))
            out.append(Collective("allreduce", "world", n, req=2, algorithm="ring"))
            if with_empty:
                out.append(Collective("allreduce", "world", 0, algorithm="ring"))
            return [*out, Wait((1, 2))]

        return ops

    def run(with_empty: bool) -> float:
        g = topologies.switch(2, bandwidth_bytes_per_s=10e9, latency_s=1e-6)
        router = topologies.Router(g)
        wl = Workload("t", 2, {}, {"world": [(0, 1)]}, [Phase("x", program(with_empty))])
        ex = SimExecutor(
            wl, lambda env: FlowNetwork(env, g, router.path), [0, 1], stream_order=True
        )
        return ex.run_phase().makespan_s

    assert run(True) == run(False) > 0.01


def test_a_blocking_eager_send_takes_its_senders_overhead():
    # LogGP: the sender is busy for o per message; a blocking eager send returns when it
    # has paid it (before, it returned at once, and a calibrated o of 128 us showed as
    # sends predicted in 0 s against 3 ms measured).
    from simnet.executor import SimExecutor
    from simnet.network import FlowNetwork
    from workload.program import Phase, ProgramBuilder, Workload

    def ops(rank: int) -> list:
        b = ProgramBuilder()
        if rank == 0:
            b.send(1, 2, tag=1, group="world")  # 8 B, blocking
            b.send(1, 2, tag=2, group="world")
        else:
            b.recv(0, 2, tag=1, group="world")
            b.recv(0, 2, tag=2, group="world")
        return b.ops

    g = topologies.switch(2, bandwidth_bytes_per_s=10e9, latency_s=1e-6)
    router = topologies.Router(g)
    for o in (0.0, 100e-6):
        wl = Workload("t", 2, {}, {"world": [(0, 1)]}, [Phase("x", ops)])
        ex = SimExecutor(
            wl, lambda env, o=o: FlowNetwork(env, g, router.path, send_overhead_s=o), [0, 1]
        )
        ends = ex.run_phase().timelines[0].ends[0]
        # One after another: the second send pays its o after the first's.
        assert ends == pytest.approx([o, 2 * o], abs=1e-15), o


def test_a_rotated_ring_is_said_to_take_the_same_links():
    from simnet.config import same_links

    assert same_links([[0, 1, 2, 3], [2, 3, 0, 1], [0, 3, 2, 1]]) == [(0, 1)]
    res = simnet.simulate({"distributed": {"num_nodes": 4},
                           "topology": {"type": "ring", "permutations": [0, 2, [0, 3, 2, 1]]},
                           "training": {"steps_per_epoch": 1}})  # fmt: skip
    assert [a for a in res.assumed if a.startswith("topology.permutations")] == [
        "topology.permutations[1] is ring 0 rotated: the same links in the same direction, "
        "so the data split over them takes one ring's path (a reversed or reordered ring "
        "adds links)"
    ]


def test_the_progress_line_counts_messages_in_flight_and_drops_its_estimate_for_them():
    from types import SimpleNamespace

    from simnet.simulate import _progress_line

    def sim(done, total, completed):
        # (the messages done are the transfers started: those not completed are in flight)
        net = SimpleNamespace(transfers_started=done, transfers_completed=completed)
        return SimpleNamespace(
            messages_done=done, expected_messages=total, env=SimpleNamespace(now=0.003), net=net
        )

    # An alltoall draining: 65,252 in flight, 3,840 not started: the count stands still
    # while they drain, so it is said and the estimate (from the count) dropped.
    line = _progress_line("iteration", sim(134_912, 138_752, 69_660), 10.0)
    assert line.endswith("97.2% 134,912/138,752 messages (65,252 in flight), simulated 3.000 ms")
    # Few in flight: the estimate from the count, as before.
    line = _progress_line("iteration", sim(50, 100, 40), 10.0)
    assert line.endswith("50.0% 50/100 messages, simulated 3.000 ms, ~10 s left")
    # Under 5% of the messages, no estimate yet: the set-up would weigh on too few.
    line = _progress_line("iteration", sim(49, 1000, 40), 10.0)
    assert line.endswith("4.9% 49/1,000 messages, simulated 3.000 ms")
    line = _progress_line("iteration", sim(50, 1000, 40), 10.0)
    assert line.endswith("5.0% 50/1,000 messages, simulated 3.000 ms, ~190 s left")


def test_a_ranks_messages_to_itself_are_copies_not_wire_bytes(tmp_path):
    # One rank of ResNet-50: its ring phase sends 6 messages to itself (102,236,324 B),
    # which cross no wire; its allreduce phase sends none. Said so, and the pair CSV has
    # an empty cell for the route of an endpoint to itself (it said "None").
    cfg = {
        "distributed": {"num_nodes": 1},
        "topology": {"type": "switch", "num_nodes": 2},
        "workload": {"name": "resnet50"},
        "logging": {"log_dir": str(tmp_path)},
    }
    res = simnet.simulate(cfg)
    ring = next(p for p in res.phases if p.name == "ring")
    assert ring.self_bytes == 102_236_324 and ring.wire_bytes_by_group == {"world": 0}
    from simnet.output import write_all

    files = write_all(res, tmp_path)
    text = (tmp_path / "sim_summary.txt").read_text()
    assert "  wire bytes by group: none (no message)" in text
    assert "wire bytes by group: world 0 B; a rank to itself (a copy, no wire): 102 MB" in text
    rows = (tmp_path / "sim_pairs.csv").read_text().splitlines()
    # (no link, never busy: no achieved rate, an empty cell, as no route bandwidth)
    assert rows[1] == "ring,0,0,102236324,0.0,,,0.0"
    doc = json.loads((tmp_path / "sim_results.json").read_text())
    assert [p["self_bytes"] for p in doc["phases"]] == [0, 102_236_324]
    assert files


@pytest.mark.parametrize(
    ("algorithm", "kw", "message"),
    [
        ("nccl_ring", {"pipeline_chunks": 8},
         "pipeline_chunks is read by nccl_tree only, not by 'nccl_ring'; leave it out"),
        ("ring", {"channels": 8},
         "channels is read by nccl_ring, nccl_tree only, not by 'ring'; leave it out"),
        ("ring", {"local_size": 4}, "local_size is read by hierarchical, nccl_ring, nccl_tree "
         "only, not by 'ring'; leave it out"),
        ("ring", {"alpha_s": 5.0},
         "alpha_s is seconds, 0 to 1 as the configuration allows (got 5.0; 5 us is 5e-6)"),
        ("ring", {"send_overhead_s": -1e-6}, "send_overhead_s is seconds, 0 to 1"),
        ("ring", {"gamma_s_per_byte": float("nan")}, "gamma_s_per_byte must be >= 0 (got nan)"),
        ("nccl_ring", {"local_size": 0}, "local_size is the GPUs (ranks) of a node, an integer "
         ">= 1 (got 0; leave it out for the topology's own)"),
        ("nccl_ring", {"local_size": -2}, "local_size is the GPUs (ranks) of a node, an "
         "integer >= 1 (got -2;"),
        ("nccl_tree", {"local_size": 4.0}, "local_size is the GPUs (ranks) of a node, an "
         "integer >= 1 (got 4.0;"),
        ("nccl_ring", {"streamed": "no"}, "streamed is True or False (got 'no')"),
    ],
)  # fmt: skip
def test_collective_time_refuses_what_its_algorithm_would_not_read(algorithm, kw, message):
    # Each was dropped or taken as given: the time came back as if without it (channels=8
    # on a ring), or 150 s for alpha_s=5 meant as microseconds.
    g = topologies.rail_optimised(2, 4, 300e9, 25e9)
    with pytest.raises(ValueError) as e:
        simnet.collective_time(g, "allreduce", algorithm, 1 << 20, **kw)
    assert str(e.value).startswith(f"collective_time: {message}")


def test_collectives_a_rank_calls_again_are_charged_once():
    # 32 ranks of an LLM whose tensor-parallel allreduces (NCCL trees of 1,024 chunks)
    # repeat for every layer and micro-batch: 41 million messages that peaked at 0.5 GB,
    # refused as 34 GiB when every message was charged as a new one.
    from simnet import sizecheck
    from simnet.config import load_config
    from simnet.simulate import _rank0_counts, build_workload

    doc = {
        "topology": {"type": "rail_optimised", "num_nodes": 32, "group_size": 8},
        "workload": {"name": "llm", "world_size": 32,
                     "flags": {"preset": "llama-3-8b", "tp": 8, "pp": 1, "layers": 4,
                               "micro_batches": 2}},
        "collectives": {"algorithm": "nccl_tree", "pipeline_chunks": 1024},
    }  # fmt: skip
    cfg = load_config(doc)
    c = _rank0_counts(cfg, build_workload(cfg))
    # What a rank sends in the first call of each distinct allreduce is charged; every
    # later call of the same one repeats it.
    assert 0 < c.repeated_messages < c.messages and c.ring_run_messages == 0
    first = c.messages - c.repeated_messages
    assert c.repeated_messages > 10 * first
    est = sizecheck.estimate(
        cfg, c.ops, 1, c.messages, False, c.ring_run_messages, c.repeated_messages
    )
    assert est.message_bytes == sizecheck.MESSAGE_BYTES * first * 32
    assert sizecheck.refusal(cfg, est, 1, 22 * 2**30) is None
    every = sizecheck.estimate(cfg, c.ops, 1, c.messages, False, c.ring_run_messages)
    assert sizecheck.refusal(cfg, every, 1, 22 * 2**30) is not None  # as before


def test_the_hint_on_a_grouped_network_is_whole_groups_and_names_the_ranks_given():
    # 32 ranks on 32 GPUs of 8-GPU nodes refused with "at most about 22 endpoints fit
    # (topology.num_nodes)": 22 is no number of whole nodes, and 32 ranks (set by
    # workload.world_size) do not fit on 22 endpoints.
    from simnet import sizecheck
    from simnet.config import load_config
    from simnet.simulate import _rank0_counts, build_workload

    doc = {
        "topology": {"type": "rail_optimised", "num_nodes": 4096, "group_size": 8},
        "workload": {"name": "dlrm", "world_size": 4096, "scale": 2.0},
    }
    with pytest.raises(simnet.ConfigError) as e:
        simnet.simulate(doc, available_bytes=8 * 2**30)
    msg = str(e.value)
    assert "endpoints fit (topology.num_nodes and workload.world_size)" in msg, msg
    n = int(msg.split("at most about ")[1].split(" endpoints")[0].replace(",", ""))
    assert n % 8 == 0 and 1024 < n < 4096
    two = 1 << (n.bit_length() - 1)  # (DLRM's world size divides 2^18)
    doc["topology"]["num_nodes"] = doc["workload"]["world_size"] = two
    cfg = load_config(doc)
    c = _rank0_counts(cfg, build_workload(cfg))
    est = sizecheck.estimate(cfg, c.ops, 1, c.messages, True, c.ring_run_messages,
                             c.repeated_messages)  # fmt: skip
    assert sizecheck.refusal(cfg, est, 1, 8 * 2**30) is None  # fits below the named size


def test_a_busy_share_under_ten_percent_keeps_two_digits():
    from simnet.output import _percent

    # (a link busy 0.44% of a compute-bound iteration was shown as "0%")
    assert [_percent(x) for x in (0.0044, 0.05, 0.123, 0.0, 1.0)] == [
        "0.44%",
        "5%",
        "12%",
        "0%",
        "100%",
    ]
