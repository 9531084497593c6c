"""Several jobs on one network: alone and shared times, contended links, bytes per job."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from simnet.config import ConfigError, load_config
from simnet.jobs import combine
from simnet.output import write_all
from simnet.simulate import build_workload, simulate

BW_GB = 10.0


def _two_jobs(start_b_us: float = 0.0, **extra) -> dict:
    # A one-way ring of 4 endpoints; job a on endpoints 0 and 2, job b on 1 and 3.
    # a's messages 0 -> 2 (through 1) and 2 -> 0 (through 3), b's 1 -> 3 and 3 -> 1:
    # every link carries one flow of each job, and nothing else.
    job = {"name": "resnet50", "world_size": 2, "scale": 0.01, "compute_scale": 0}
    return {
        "distributed": {"num_nodes": 4, "bandwidth_limit_gb_per_s": BW_GB},
        "topology": {"type": "ring", "bidirectional": False, "link_latency_us": 0},
        "jobs": [
            {"name": "a", "workload": job, "placement": [0, 2]},
            {"name": "b", "workload": job, "placement": [1, 3], "start_us": start_b_us},
        ],
        **extra,
    }


def test_jobs_sharing_every_link_take_twice_as_long():
    res = simulate(_two_jobs())
    a, b = res.jobs.jobs
    # Alone, a job's bytes cross each link at the full rate; together, max-min fair
    # sharing gives each flow half of every link it crosses, all the time.
    per_link = 2_044_728  # bytes each job sends over each of the 4 links
    assert per_link / (BW_GB * 1e9) <= a.alone_s <= per_link / (BW_GB * 1e9) * (1 + 1e-5)
    assert a.shared_s == pytest.approx(2 * a.alone_s, rel=1e-9)
    assert b.shared_s == pytest.approx(2 * b.alone_s, rel=1e-9)
    assert a.slowdown == pytest.approx(2.0) and b.slowdown == pytest.approx(2.0)
    assert sorted(c.link for c in res.jobs.contended) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    for c in res.jobs.contended:
        assert c.bytes_by_job == {"a": per_link, "b": per_link}
        assert c.busy_s == pytest.approx(a.shared_s, rel=1e-4)  # busy all along
        assert c.together_s == pytest.approx(c.busy_s, rel=1e-4)  # and both jobs all along


def test_a_job_that_starts_after_the_other_ends_is_not_slowed():
    alone = simulate(_two_jobs()).jobs.jobs[0].alone_s
    res = simulate(_two_jobs(start_b_us=alone * 1e6 + 1))
    a, b = res.jobs.jobs
    assert a.slowdown == pytest.approx(1.0) and b.slowdown == pytest.approx(1.0)
    assert b.start_s == pytest.approx(alone + 1e-6)
    assert res.iteration_time_s == pytest.approx(b.start_s + b.alone_s)


def test_bytes_are_conserved_per_job():
    cfg = {
        "distributed": {"num_nodes": 16, "bandwidth_limit_gb_per_s": 25},
        "topology": {"type": "fat_tree", "k": 4, "oversubscription": 4},
        "jobs": [
            {
                "name": "train",
                "workload": {"name": "resnet50", "world_size": 8, "scale": 0.02},
                "placement": [0, 2, 4, 6, 8, 10, 12, 14],
            },
            {
                "name": "tune",
                "workload": {"name": "dlrm", "world_size": 8, "scale": 0.02},
                "start_us": 50,
            },
        ],
    }
    res = simulate(cfg)
    train, tune = res.jobs.jobs
    assert tune.endpoints == [1, 3, 5, 7, 9, 11, 13, 15]  # the endpoints train left
    for job in (train, tune):
        sub = load_config(cfg).model_dump()
        sub["workload"] = next(j for j in cfg["jobs"] if j["name"] == job.name)["workload"]
        sub["topology"]["placement"] = job.endpoints
        sub["jobs"] = []
        alone = simulate(sub)
        np.testing.assert_array_equal(job.traffic_bytes, alone.traffic_bytes)
    # Nothing flows between the jobs' endpoints, and the jobs' bytes are all there is.
    np.testing.assert_array_equal(train.traffic_bytes + tune.traffic_bytes, res.traffic_bytes)
    assert train.slowdown >= 1 - 1e-9 and tune.slowdown >= 1 - 1e-9


def test_each_job_keeps_its_compute_scale():
    cfg = _two_jobs()
    for j, scale in zip(cfg["jobs"], (0.0, 1.0), strict=True):
        j["workload"] = {"name": "dlrm", "world_size": 2, "scale": 0.01, "compute_scale": scale}
    cfg["jobs"][1]["start_us"] = 1e6  # far apart: each runs as if alone
    a, b = simulate(cfg).jobs.jobs
    assert a.shared_s == pytest.approx(a.alone_s, rel=1e-9)
    assert b.shared_s == pytest.approx(b.alone_s, rel=1e-9)
    assert b.alone_s > 2 * a.alone_s  # b computes, a does not


def test_combined_programs_move_peers_and_requests():
    cfg = load_config({"distributed": {"num_nodes": 4}, "workload": {"name": "dlrm"}})
    w = build_workload(cfg)
    both = combine([w, w], [2, 1], [0.0, 1e-3])
    assert both.world_size == 8
    assert both.rank_start_s == [0.0] * 4 + [1e-3] * 4
    assert all(sorted(r for g in gs for r in g) == list(range(8)) for gs in both.groups.values())
    first = w.phases[0].program(1)
    ops = both.phases[0].program(5)  # rank 1 of the second job, one iteration
    assert len(ops) == len(first)
    assert len(both.phases[0].program(1)) == 2 * len(first)  # two iterations
    peers = [op.peer for op in ops if hasattr(op, "peer")]
    assert peers == [op.peer + 4 for op in first if hasattr(op, "peer")]


@pytest.mark.parametrize(
    ("jobs", "topology", "message"),
    [
        (
            [{"name": "a", "placement": [0, 1]}, {"name": "a", "placement": [2, 3]}],
            {},
            "names must be unique",
        ),
        (
            [{"name": "a", "placement": [0, 1]}, {"name": "b", "placement": [1, 2]}],
            {},
            "endpoint 1 is also used by job 'a'",
        ),
        (
            [{"name": "a", "placement": [2, 2]}],
            {},
            "jobs\\[0\\].placement: endpoint 2 is given more",
        ),
        ([{"name": "a", "placement": [0, 9]}], {}, "endpoint 9 does not exist"),
        ([{"name": "a"}], {"type": "ring", "permutations": [0, 1]}, "with jobs, rings of one"),
        ([{"name": "a", "placement": [0]}], {}, "1 endpoints for 2 ranks"),
        ([{"name": "a"}], {"placement": [0, 1]}, "each job places its ranks"),
        ([{"name": "a b"}], {}, "jobs.0.name"),
    ],
)
def test_job_configuration_errors(jobs, topology, message):
    for j in jobs:
        j.setdefault("workload", {"name": "dlrm", "world_size": 2})
    with pytest.raises(ConfigError, match=message):
        load_config(
            {
                "distributed": {"num_nodes": 4},
                "topology": {"type": "switch", "num_nodes": 4, **topology},
                "jobs": jobs,
            }
        )


def test_jobs_outputs(tmp_path):
    res = simulate(_two_jobs())
    files = write_all(res, tmp_path)
    names = {f.name for f in files}
    assert {"sim_jobs.csv", "sim_contended_links.csv"} <= names
    assert {"sim_traffic_heatmap_a.png", "sim_traffic_heatmap_b.png"} <= names
    with open(tmp_path / "sim_jobs.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["job"] for r in rows] == ["a", "b"]
    assert float(rows[0]["slowdown"]) == pytest.approx(2.0)
    doc = json.loads((tmp_path / "sim_results.json").read_text())
    assert [j["name"] for j in doc["jobs"]["jobs"]] == ["a", "b"]
    assert [(j["first_rank"], j["num_ranks"]) for j in doc["jobs"]["jobs"]] == [(0, 2), (2, 2)]
    # Each pair of the pairs file names its job; their bytes are the job's.
    with open(tmp_path / "sim_pairs.csv") as f:
        pairs = list(csv.DictReader(f))
    assert list(pairs[0])[-1] == "job" and doc["matrices"]["columns"][-1] == "job"
    a, b = res.jobs.jobs
    for j in (a, b):
        mine = {
            (int(r["src"]), int(r["dst"])): int(r["bytes"]) for r in pairs if r["job"] == j.name
        }
        assert mine == j.pair_bytes
    assert len(doc["jobs"]["contended_links"]) == 4
    summary = (tmp_path / "sim_summary.txt").read_text()
    assert "a (resnet50, 2 ranks, start 0.000 ms)" in summary
    assert "slowdown x2.000" in summary
    from workload.units import format_bytes

    for j in (a, b):  # each job's bytes in its line; the group kinds' are all jobs'
        assert f"{format_bytes(sum(j.pair_bytes.values()))} sent between its ranks" in summary
    assert "wire bytes by group kind, all jobs together" in summary
    # The phase's time is the run of all the jobs, not an iteration of one.
    assert f"phase jobs: {res.iteration_time_s:.6f} s from 0 to the last job's end," in summary
    assert "per iteration" not in summary.split("phase jobs:")[1].splitlines()[0]


def test_job_pictures_show_the_jobs_own_ranks_from_their_start(tmp_path, monkeypatch):
    """Each job's heatmap is its own ranks x ranks (not the whole network's endpoints);
    the per-rank chart draws a later job's bars from its start, labelled with its job."""
    from simnet import plots

    heatmaps: dict[str, np.ndarray] = {}
    real_heatmap = plots.traffic_heatmap

    def heatmap(matrix, path, **kw):
        heatmaps[str(path)] = np.asarray(matrix)
        return real_heatmap(matrix, path, **kw)

    bars: list[dict] = []
    real_bars = plots.timeline_bars

    def timeline(labels, compute, exposed, overlapped, path, **kw):
        bars.append({"labels": list(labels), "start": kw.get("start_s"), "path": str(path)})
        return real_bars(labels, compute, exposed, overlapped, path, **kw)

    monkeypatch.setattr(plots, "traffic_heatmap", heatmap)
    monkeypatch.setattr(plots, "timeline_bars", timeline)
    res = simulate(_two_jobs(start_b_us=1000.0))
    write_all(res, tmp_path)
    a, b = res.jobs.jobs
    for j in (a, b):
        m = heatmaps[str(tmp_path / f"sim_traffic_heatmap_{j.name}.png")]
        assert m.shape == (2, 2)  # 2 ranks, on 4 endpoints
        e0, e1 = j.endpoints
        assert m[0, 1] == j.pair_bytes[(e0, e1)] and m[1, 0] == j.pair_bytes[(e1, e0)]
    (chart,) = [c for c in bars if c["path"].endswith("sim_rank_breakdown.png")]
    assert chart["labels"] == ["0 a:0", "1 a:1", "2 b:0", "3 b:1"]
    assert list(chart["start"]) == [0.0, 0.0, 1e-3, 1e-3]
    # The timeline trace names each rank's process as the chart labels it.
    trace = json.loads((tmp_path / "sim_timeline.trace.json").read_text())
    names = {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    assert list(names.values()) == ["rank 0 (a:0)", "rank 1 (a:1)", "rank 2 (b:0)", "rank 3 (b:1)"]


def test_jobs_without_dense_matrices_build_no_n_by_n_matrix(tmp_path):
    res = simulate(_two_jobs(), dense_matrices=False)
    files = write_all(res, tmp_path, matrices="sparse")
    assert {"sim_traffic_heatmap_a.png", "sim_traffic_heatmap_b.png"} <= {f.name for f in files}
    a, b = res.jobs.jobs
    # Neither the run's nor a job's endpoint-pair matrix was made (cached on first use).
    assert "traffic_bytes" not in vars(res.phases[0])
    assert "traffic_bytes" not in vars(a) and "traffic_bytes" not in vars(b)
    assert set(a.pair_bytes) == {(0, 2), (2, 0)} and set(b.pair_bytes) == {(1, 3), (3, 1)}
    doc = json.loads((tmp_path / "sim_results.json").read_text())
    assert [j["traffic_bytes"] for j in doc["jobs"]["jobs"]] == [a.total_bytes, b.total_bytes]
    assert a.total_bytes + b.total_bytes == sum(res.phases[0].pair_bytes.values())
    # Built on demand, a job's matrix holds its pairs and zeros elsewhere.
    m = a.traffic_bytes
    assert m.shape == (4, 4) and m.sum() == a.total_bytes and m[0, 2] == a.pair_bytes[(0, 2)]


def test_jobs_with_noise_are_deterministic_per_seed():
    whatif = {"whatif": {"compute_noise": 0.2, "seed": 7}}
    cfg = _two_jobs(**whatif)
    for j in cfg["jobs"]:
        j["workload"] = {"name": "dlrm", "world_size": 2, "scale": 0.01}
    one, two = simulate(cfg), simulate(cfg)
    assert [j.shared_s for j in one.jobs.jobs] == [j.shared_s for j in two.jobs.jobs]
    cfg["whatif"]["seed"] = 8
    other = simulate(cfg)
    assert [j.shared_s for j in other.jobs.jobs] != [j.shared_s for j in one.jobs.jobs]


def _disjoint(workload: dict, **extra) -> dict:
    # A switch: jobs on distinct endpoints share no link (each endpoint has its own).
    return {
        "distributed": {"num_nodes": 4, "bandwidth_limit_gb_per_s": BW_GB},
        "topology": {"type": "switch", "num_nodes": 4, "link_latency_us": 1},
        "jobs": [
            {"name": "a", "workload": workload, "placement": [0, 1]},
            {"name": "b", "workload": workload, "placement": [2, 3]},
        ],
        **extra,
    }


def test_noise_is_the_same_alone_and_shared_so_disjoint_jobs_are_not_slowed():
    res = simulate(
        _disjoint(
            {"name": "dlrm", "world_size": 2, "scale": 0.01},
            whatif={"compute_noise": 0.5, "seed": 3},
        )
    )
    a, b = res.jobs.jobs
    assert res.jobs.contended == [] and res.jobs.shared_apart == []
    # Alone, each job draws its ranks' streams of the shared run (b: ranks 2 and 3).
    assert a.alone_s != b.alone_s
    assert a.shared_s == pytest.approx(a.alone_s, rel=1e-12)
    assert b.shared_s == pytest.approx(b.alone_s, rel=1e-12)


def test_a_job_of_several_phases_alone_on_the_network_is_not_slowed():
    # ResNet-50 runs two phases (the allreduces, then the ring): alone and shared both run
    # them back to back.
    cfg = _disjoint({"name": "resnet50", "world_size": 2, "scale": 0.01})
    cfg["jobs"] = cfg["jobs"][:1]
    (a,) = simulate(cfg).jobs.jobs
    assert len(build_workload(load_config({"workload": cfg["jobs"][0]["workload"]})).phases) == 2
    assert a.shared_s == pytest.approx(a.alone_s, rel=1e-12)


def test_a_job_configuration_error_names_the_job_before_anything_runs():
    cfg = _disjoint({"name": "dlrm", "world_size": 2, "scale": 0.01})
    cfg["jobs"][1]["workload"] = {"name": "gpt2", "world_size": 2, "flags": {"nosuch": 1}}
    said: list[str] = []
    with pytest.raises(ConfigError, match=r"^jobs\[1\]\.workload\.flags nosuch: gpt2 has no"):
        simulate(cfg, progress=said.append)
    assert said == []


def test_jobs_that_share_links_at_other_times_do_not_contend(tmp_path):
    alone = simulate(_two_jobs()).jobs.jobs[0].alone_s
    res = simulate(_two_jobs(start_b_us=alone * 1e6 + 1))
    assert res.jobs.contended == []
    assert sorted(res.jobs.shared_apart) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    write_all(res, tmp_path)
    summary = (tmp_path / "sim_summary.txt").read_text()
    assert (
        "contended links: none (the jobs that share links send over them at other times)" in summary
    )
    assert "links shared at other times (no contention): 4" in summary
    assert "predicted time of all jobs together (from 0 to the last job's end): " in summary
    doc = json.loads((tmp_path / "sim_results.json").read_text())
    assert doc["jobs"]["links_shared_at_other_times"] == ["0->1", "1->2", "2->3", "3->0"]


def test_a_contended_links_bytes_are_every_jobs_there_those_at_another_time_said(tmp_path):
    # A one-way ring of 12: jobs a and b together, c after them; all three cross every link.
    job = {"name": "alexnet_ring", "world_size": 4, "scale": 0.01, "flags": {"compute_us": 0}}
    res = simulate({
        "distributed": {"num_nodes": 12, "bandwidth_limit_gb_per_s": BW_GB},
        "topology": {"type": "ring", "bidirectional": False, "link_latency_us": 0},
        "jobs": [
            {"name": "a", "workload": job, "placement": [0, 3, 6, 9]},
            {"name": "b", "workload": job, "placement": [1, 4, 7, 10]},
            {"name": "c", "workload": job, "placement": [2, 5, 8, 11], "start_us": 2000},
        ],
    })  # fmt: skip
    a, b, c = res.jobs.jobs
    assert c.start_s > a.start_s + a.shared_s  # c runs alone, later
    assert len(res.jobs.contended) == 12 and res.jobs.shared_apart == []
    carried = res.phases[0].link_bytes
    for link in res.jobs.contended:
        assert link.meeting == ["a", "b"] and link.apart() == ["c"]
        assert link.bytes_by_job == {j.name: j.link_bytes[link.link] for j in (a, b, c)}
        # The bytes add up to what the link carried (and was busy with) in the shared run.
        assert sum(link.bytes_by_job.values()) == carried[link.link]
        assert link.busy_s == pytest.approx(carried[link.link] / (BW_GB * 1e9), rel=1e-9)
        # a's and b's bytes drain together (2 of the 3 jobs' equal bytes), c's alone;
        # a and b fill the link together (two flows at half its rate each).
        assert link.together_s == pytest.approx(link.busy_s * 2 / 3, rel=1e-9)
        assert link.full_s == link.together_s
    write_all(res, tmp_path)
    with open(tmp_path / "sim_contended_links.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["jobs_at_another_time"] for r in rows} == {"c"}
    assert all(int(r["bytes_c"]) == int(r["bytes_a"]) > 0 for r in rows)
    summary = (tmp_path / "sim_summary.txt").read_text()
    from workload.units import format_bytes

    one = a.link_bytes[res.jobs.contended[0].link]  # each job's bytes on a link
    each = format_bytes(one)
    together = f"{2 * one / (BW_GB * 1e9) * 1e3:.4g} ms"
    busy = f"{3 * one / (BW_GB * 1e9) * 1e3:.4g} ms busy"
    assert (
        f"(full together {together}, together {together} of {busy}; a {each}, b {each}, "
        f"c {each} at another time)" in summary
    )
    doc = json.loads((tmp_path / "sim_results.json").read_text())
    assert doc["jobs"]["contended_links"][0]["jobs_meeting"] == ["a", "b"]


def test_a_top_level_workload_beside_jobs_is_said_not_to_run():
    cfg = _disjoint({"name": "dlrm", "world_size": 2, "scale": 0.01})
    assert not any("top-level" in a for a in simulate(cfg).assumed)
    cfg["workload"] = {"name": "dlrm", "world_size": 4}
    assert (
        "workload: the top-level section is not run; with jobs, each job runs its own "
        "(jobs[i].workload)"
    ) in simulate(cfg).assumed


def test_the_recorded_configuration_of_jobs_runs_them_again(tmp_path):
    # sim_results.json (and report.html) recorded the one combined workload the shared
    # run was made of, with no jobs: loaded again it ran another model on all the ranks.
    res = simulate(_two_jobs(start_b_us=5.0))
    write_all(res, tmp_path)
    recorded = json.loads((tmp_path / "sim_results.json").read_text())["config"]
    assert [j["name"] for j in recorded["jobs"]] == ["a", "b"]
    assert recorded["jobs"][1]["start_us"] == 5.0
    assert "workload" not in recorded  # the top-level one is not run (not given here)
    again = simulate(load_config(recorded))
    assert again.iteration_time_s == res.iteration_time_s
    assert [j.pair_bytes for j in again.jobs.jobs] == [j.pair_bytes for j in res.jobs.jobs]
    assert again.assumed == res.assumed  # (no note of an unrun top-level workload)


def test_each_jobs_iterations_are_said_where_figures_sum_them(tmp_path):
    # A job's iterations run inside the one shared run: the traffic heatmap's title and
    # the report's per-rank heading said "1 simulated iteration" / "per iteration".
    cfg = _two_jobs()
    cfg["jobs"][0]["workload"] = {**cfg["jobs"][0]["workload"], "iterations": 2}
    cfg["jobs"][1]["workload"] = {**cfg["jobs"][1]["workload"], "iterations": 3}
    res = simulate(cfg)
    from simnet.output import _iterations_text

    assert _iterations_text(res) == "over the whole run (iterations: a 2, b 3)"
    write_all(res, tmp_path)
    html = (tmp_path / "report.html").read_text()
    assert "Per-rank breakdown (whole run: each job&#x27;s iterations)" in html
    assert "Per-rank breakdown (per iteration)" not in html


def test_a_jobs_copies_to_itself_are_no_traffic_between_its_ranks(tmp_path):
    # A 1-rank job's allreduce is a copy of the rank to itself: no wire, no rate. Its
    # line said "5.11 MB sent between its ranks" and the rate files 0.0 for it.
    cfg = {
        "distributed": {"num_nodes": 3, "bandwidth_limit_gb_per_s": BW_GB},
        "topology": {"type": "switch", "link_latency_us": 0},
        "jobs": [
            {"name": "two", "workload": {"name": "resnet50", "world_size": 2, "scale": 0.01}},
            {"name": "solo", "workload": {"name": "resnet50", "world_size": 1, "scale": 0.01}},
        ],
    }
    res = simulate(cfg)
    solo = res.jobs.jobs[1]
    own = solo.pair_bytes[(2, 2)]
    assert own > 0 and set(solo.pair_bytes) == {(2, 2)}
    write_all(res, tmp_path)
    from workload.units import format_bytes

    summary = (tmp_path / "sim_summary.txt").read_text()
    assert (
        f"0 B sent between its ranks (and {format_bytes(own)} from a rank to itself: copies, "
        "no wire)" in summary
    )
    with open(tmp_path / "sim_pairs.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["src"] == r["dst"] == "2")
    assert int(row["bytes"]) == own and row["achieved_bytes_per_s"] == ""
    with open(tmp_path / "sim_achieved_bytes_per_s.csv") as f:
        cells = list(csv.reader(f))
    assert cells[3][3] == ""  # row of endpoint 2 (after the header), its own column
    assert float(cells[1][2]) > 0  # a pair of the two-rank job has its rate


def _two_ring_trainers(group_a: int, extra_a: dict | None = None) -> dict:
    # Two groups of 4 endpoints, each endpoint's own link to its group switch: job a in
    # group 0, job b in group 1. A group's traffic never leaves it, so no link is
    # shared. The ring trainer's "hierarchical" flag is its two-level allreduce's group
    # size: a gives its own, b takes the topology's (4).
    flags = {"compute_us": 0, "hierarchical": group_a, **(extra_a or {})}
    trainer = {"name": "alexnet_ring", "world_size": 4, "scale": 0.01}
    return {
        "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": BW_GB},
        "topology": {"type": "hierarchical", "group_size": 4},
        "jobs": [
            {"name": "a", "workload": {**trainer, "flags": flags}, "placement": [0, 1, 2, 3]},
            {
                "name": "b",
                "workload": {**trainer, "flags": {"compute_us": 0}},
                "placement": [4, 5, 6, 7],
            },
        ],
    }


def test_jobs_on_links_of_their_own_keep_their_collective_parameters_shared():
    # The shared run laid job a's allreduce out with the network's group size (4), not
    # its own (2): 0.354 ms against 0.350 alone, reported as a slowdown of x1.011 beside
    # "the jobs share no link".
    res = simulate(_two_ring_trainers(2))
    a, b = res.jobs.jobs
    # AlexNet's 57,044,810 parameters x 0.01 = 570,448 elements, 4 blocks of 142,612.
    # Two-level allreduce over groups of g (k = 4 / g of them): g - 1 steps of n / g
    # elements in the group, k - 1 of n / 4 across, as many back: 1.5 n elements a
    # rank either way (a: 2 + 1 + 1 + 2 quarters; b: 6 quarters). Every rank sends on
    # its own uplink and receives on its own downlink (10 GB/s) at once; each step, a
    # rendezvous, adds its request-to-send's latency and its own (2 hops of 0.5 us).
    n = 570_448
    wire = 1.5 * n * 4 / (BW_GB * 1e9)
    assert a.alone_s == pytest.approx(wire + 4 * 2e-6, rel=1e-12)
    assert b.alone_s == pytest.approx(wire + 6 * 2e-6, rel=1e-12)
    assert res.jobs.contended == [] and res.jobs.shared_apart == []
    assert a.shared_s == a.alone_s and b.shared_s == b.alone_s
    assert a.slowdown == 1.0 and b.slowdown == 1.0
    assert not any("collective parameters" in line for line in res.assumed)


def test_job_layout_and_straggler_lines_name_their_job():
    # Three data-parallel jobs on a rail-optimised cluster of 4 nodes of 4 GPUs, NCCL
    # rings: a on nodes 0 and 1, b on node 2, c on node 3. Combined rank 5 is a's rank 5,
    # rank 9 is b's rank 1.
    job = {"name": "resnet50", "scale": 0.01}
    cfg = {
        "distributed": {"num_nodes": 16, "bandwidth_limit_gb_per_s": BW_GB},
        "topology": {"type": "rail_optimised", "group_size": 4},
        "collectives": {"algorithm": "nccl_ring"},
        "whatif": {"stragglers": {"5": 2, "9": 1.5}},
        "jobs": [
            {"name": "a", "workload": {**job, "world_size": 8}},
            {"name": "b", "workload": {**job, "world_size": 4}},
            {"name": "c", "workload": {**job, "world_size": 4}},
        ],
    }
    res = simulate(cfg)
    assert [line for line in res.assumed if "nccl_ring over" in line] == [
        "job a: allreduce nccl_ring over 8 ranks: 2 nodes of 4, 4 channels (the default), "
        "a ring per channel",
        "jobs b, c: allreduce nccl_ring over 4 ranks: one node of 4, 4 channels (the "
        "default), a ring per channel",
    ]
    assert res.scenario[:2] == [
        "a:5 (rank 5) computes 2x as long",
        "b:1 (rank 9) computes 1.5x as long",
    ]
    # Without jobs, as before.
    one = simulate({**{k: v for k, v in cfg.items() if k != "jobs"}, "workload": job})
    assert (
        "allreduce nccl_ring over 16 ranks: 4 nodes of 4, 4 channels (the default), a ring "
        "per channel" in one.assumed
    )
    assert one.scenario[:2] == ["rank 5 computes 2x as long", "rank 9 computes 1.5x as long"]


# The example dragonfly (examples/dragonfly_whatif.json): 4 groups of 4 routers of 2
# endpoints, 25 GB/s endpoint and local links, one 12.5 GB/s global link between every
# two groups, drawn as three edges (router -> port -> port -> router).
_DRAGONFLY = {
    "distributed": {"num_nodes": 32, "bandwidth_limit_gb_per_s": 25},
    "topology": {
        "type": "dragonfly",
        "routers_per_group": 4,
        "endpoints_per_router": 2,
        "global_bandwidth_gb_per_s": 12.5,
        "global_latency_us": 2,
        "link_latency_us": 0.5,
    },
}
# 8-rank ring trainer, one rank-order ring: AlexNet x 0.01 = 570,448 elements, a block
# of 71,306 (285,224 B) per rank. Reduce-scatter and all-gather: 7 + 7 steps, each rank
# sending its successor a block per step.
_RING8 = {"name": "alexnet_ring", "world_size": 8, "scale": 0.01, "flags": {"compute_us": 0}}
_GLOBAL_BYTES = 14 * 285_224  # 3,993,136: a job's ring over a global link, each way


def test_a_dragonfly_global_link_counts_once_in_the_link_outputs(tmp_path):
    # Job a on endpoints 0-3 (group 0) and 8-11 (group 1), job b on 4-7 and 12-15: each
    # ring crosses from group 0 to group 1 once (rank 3 -> 4) and back once (7 -> 0),
    # both over the one global link gw0.1 <-> gw1.0 (group 0's port on router r0.0,
    # group 1's on r1.2); everything else each job has to itself. The link was counted
    # three times per direction: 'contended links: 6', its three edges in every file.
    cfg = {
        **_DRAGONFLY,
        "jobs": [
            {"name": "a", "workload": _RING8, "placement": [0, 1, 2, 3, 8, 9, 10, 11]},
            {"name": "b", "workload": _RING8, "placement": [4, 5, 6, 7, 12, 13, 14, 15]},
        ],
    }
    res = simulate(cfg)
    glob = 12.5e9
    up, down = ("gw0.1", "gw1.0"), ("gw1.0", "gw0.1")
    assert [c.link for c in res.jobs.contended] == [up, down]
    for c in res.jobs.contended:
        assert c.bytes_by_job == {"a": _GLOBAL_BYTES, "b": _GLOBAL_BYTES}
        assert c.capacity_bytes_per_s == glob
        # Both jobs' flows on it at once, each step: busy exactly while it moves their
        # bytes at its full rate.
        assert c.busy_s == pytest.approx(2 * _GLOBAL_BYTES / glob, rel=1e-12)
    # The three edges of a direction carried the same bytes, busy time and load series
    # (what counting the link once by its port-to-port edge rests on).
    net = res.phases[0].timeline.net
    chain = [("r0.0", "gw0.1"), up, ("gw1.0", "r1.2")]
    edge_bytes, edge_busy = net.link_bytes(), net.link_busy_s()
    series = net.link_series_arrays()
    assert {edge_bytes[e] for e in chain} == {2 * _GLOBAL_BYTES}
    assert len({edge_busy[e] for e in chain}) == 1
    assert all(np.array_equal(series[e], series[up]) for e in chain)
    p = res.phases[0]
    stubs = {chain[0], chain[2], (chain[0][1], chain[0][0]), (chain[2][1], chain[2][0])}
    assert set(p.link_bytes) == set(edge_bytes) - stubs
    assert p.link_bytes[up] == p.link_bytes[down] == 2 * _GLOBAL_BYTES
    write_all(res, tmp_path)
    with open(tmp_path / "sim_contended_links.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["link"], int(r["bytes_a"]), int(r["bytes_b"])) for r in rows] == [
        ("gw0.1->gw1.0", _GLOBAL_BYTES, _GLOBAL_BYTES),
        ("gw1.0->gw0.1", _GLOBAL_BYTES, _GLOBAL_BYTES),
    ]
    with open(tmp_path / "sim_links.csv") as f:
        links = [r for r in csv.DictReader(f) if "gw" in r["link"]]
    assert [(r["link"], int(r["bytes"])) for r in links] == [
        ("gw0.1->gw1.0", 2 * _GLOBAL_BYTES),
        ("gw1.0->gw0.1", 2 * _GLOBAL_BYTES),
    ]
    summary = (tmp_path / "sim_summary.txt").read_text()
    # Busy by the closed form; together, part of it (the two rings' steps are not in
    # lockstep on the link).
    busy = f"{2 * _GLOBAL_BYTES / glob * 1e3:.4g} ms busy"
    assert (
        "contended links (two or more jobs' bytes on them at once while full): 2; the longest "
        "full first: gw0.1->gw1.0 (full together " in summary
    )
    tail = f" ms of {busy}; a 3.99 MB, b 3.99 MB)"
    assert summary.count(tail) == 2 and "gw1.0->gw0.1 (full together " in summary
    assert all(0 < c.together_s < c.busy_s for c in res.jobs.contended)
    # Each job's flow alone there runs at the link's rate, so it is full whenever busy.
    assert all(c.full_s == c.together_s for c in res.jobs.contended)
    doc = json.loads((tmp_path / "sim_results.json").read_text())
    assert [c["link"] for c in doc["jobs"]["contended_links"]] == ["gw0.1->gw1.0", "gw1.0->gw0.1"]
    named = [link["link"] for link in doc["phases"][0]["links"]]
    assert len(named) == len(set(named)) == len(p.link_bytes)
    assert [n for n in named if "gw" in n] == ["gw0.1->gw1.0", "gw1.0->gw0.1"]
    with open(tmp_path / "sim_link_series.csv") as f:
        in_series = {r["link"] for r in csv.DictReader(f)}
    assert {n for n in in_series if "gw" in n} == {"gw0.1->gw1.0", "gw1.0->gw0.1"}


def test_a_job_says_nothing_of_settings_the_configuration_does_not_give():
    # Each job's own run was made from the whole configuration dumped with every field,
    # so every job said "whatif.seed: not used" of a seed nobody gave.
    res = simulate(_two_jobs())
    assert not [a for a in res.assumed if "whatif.seed" in a]
    seeded = _two_jobs()
    seeded["whatif"] = {"seed": 5}
    said = [a for a in simulate(seeded).assumed if "whatif.seed" in a]
    assert said == ["whatif.seed: not used, it seeds whatif.compute_noise, which is 0"]
    example = Path(__file__).resolve().parent.parent / "examples" / "two_jobs.json"
    res = simulate(load_config(json.loads(example.read_text())), record_series=False)
    assert not [a for a in res.assumed if "whatif.seed" in a]


def _ring_trainers(start_b_us: float, iterations_a: int = 1) -> dict:
    # The one-way ring of _two_jobs with two 2-rank ring trainers computing 10 ms a step.
    job = {"name": "alexnet_ring", "world_size": 2, "scale": 0.01, "flags": {"compute_us": 1e4}}
    return {
        "distributed": {"num_nodes": 4, "bandwidth_limit_gb_per_s": BW_GB},
        "topology": {"type": "ring", "bidirectional": False, "link_latency_us": 0},
        "jobs": [
            {"name": "a", "workload": {**job, "iterations": iterations_a}, "placement": [0, 2]},
            {"name": "b", "workload": job, "placement": [1, 3], "start_us": start_b_us},
        ],
    }


def test_jobs_running_together_whose_bytes_cross_links_at_other_times_do_not_contend():
    # a computes 10 ms, sends (about 0.2 ms), computes 10 ms, sends; b starts at 5 ms and
    # sends at 15 ms, while a computes: both run all along, but never send together.
    res = simulate(_ring_trainers(5e3, iterations_a=2))
    a, b = res.jobs.jobs
    assert b.start_s < a.start_s + a.shared_s and a.start_s < b.start_s + b.shared_s
    assert a.slowdown == pytest.approx(1.0) and b.slowdown == pytest.approx(1.0)
    assert res.jobs.contended == []
    assert sorted(res.jobs.shared_apart) == [(0, 1), (1, 2), (2, 3), (3, 0)]


def test_the_time_two_jobs_bytes_drain_together_is_counted_per_link(tmp_path):
    # Both start at 0: their first steps' bytes share every link (each at half the rate:
    # 2 B / BW together); then a's second step's B alone (B / BW).
    res = simulate(_ring_trainers(0.0, iterations_a=2))
    b = res.jobs.jobs[1]
    assert len(res.jobs.contended) == 4
    for c in res.jobs.contended:
        one = b.link_bytes[c.link]  # a job's bytes over the link in one step
        assert c.bytes_by_job == {"a": 2 * one, "b": one}
        assert c.meeting == ["a", "b"]
        assert c.together_s == pytest.approx(2 * one / (BW_GB * 1e9), rel=1e-9)
        assert c.busy_s == pytest.approx(3 * one / (BW_GB * 1e9), rel=1e-9)
        assert c.peak_load_bytes_per_s == pytest.approx(BW_GB * 1e9, rel=1e-9)  # full
        assert c.full_s == c.together_s  # (at half the rate each, together)
    write_all(res, tmp_path)
    with open(tmp_path / "sim_contended_links.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["together_s"]) for r in rows] == [c.together_s for c in res.jobs.contended]
    doc = json.loads((tmp_path / "sim_results.json").read_text())
    assert [c["together_s"] for c in doc["jobs"]["contended_links"]] == [
        c.together_s for c in res.jobs.contended
    ]
    assert [float(r["full_together_s"]) for r in rows] == [c.full_s for c in res.jobs.contended]
    assert [float(r["peak_load_bytes_per_s"]) for r in rows] == pytest.approx([BW_GB * 1e9] * 4)
    first = res.jobs.contended[0]
    one_ms = b.link_bytes[first.link] / (BW_GB * 1e9) * 1e3  # a step's bytes alone on it
    summary = (tmp_path / "sim_summary.txt").read_text()
    assert (
        f"{first.link[0]}->{first.link[1]} (full together {2 * one_ms:.4g} ms, together "
        f"{2 * one_ms:.4g} ms of {3 * one_ms:.4g} ms busy; a " in summary
    )


def test_links_two_jobs_share_at_once_without_filling_them_are_not_contended(tmp_path):
    # k=4 fat-tree, one route a pair: jobs a (0 <-> 4) and b (1 <-> 5) cross the same
    # uplinks and core, but their hosts' links run at a tenth (1 GB/s): each flow is held
    # there, so the shared links carry 2 of their 10 GB/s. Together all along, never full,
    # and neither job slowed.
    job = {"name": "resnet50", "world_size": 2, "scale": 0.01, "compute_scale": 0}
    res = simulate({
        "distributed": {"num_nodes": 16, "bandwidth_limit_gb_per_s": BW_GB},
        "topology": {"type": "fat_tree", "k": 4, "link_latency_us": 0, "ecmp": False},
        "jobs": [{"name": "a", "workload": job, "placement": [0, 4]},
                 {"name": "b", "workload": job, "placement": [1, 5]}],
        "whatif": {"degraded_links": [{"link": [h, "edge0.0"], "bandwidth_factor": 0.1}
                                      for h in (0, 1)]},
    }, record_series=False)  # fmt: skip
    assert [j.slowdown for j in res.jobs.jobs] == [1.0, 1.0]
    assert res.jobs.contended == []
    met = res.jobs.met_not_full
    assert len(met) == 8  # up and down: edge-agg, agg-core on both sides
    for c in met:
        assert c.peak_load_bytes_per_s == pytest.approx(0.2 * c.capacity_bytes_per_s, rel=1e-9)
        assert c.peak_together_bytes_per_s == c.peak_load_bytes_per_s  # together all along
        assert c.together_s == pytest.approx(c.busy_s, rel=1e-9)
        assert c.full_s == 0.0
    write_all(res, tmp_path)
    summary = (tmp_path / "sim_summary.txt").read_text()
    assert "contended links: none (the jobs' bytes meet only on links they do not fill)" in summary
    first = met[0]
    assert (
        "links the jobs' bytes are on at once without filling them (no contention): 8; the "
        f"fullest: {first.link[0]}->{first.link[1]} (at most 20% full while they were, together "
        f"{first.together_s * 1e3:.4g} ms of {first.busy_s * 1e3:.4g} ms busy)" in summary
    )
    doc = json.loads((tmp_path / "sim_results.json").read_text())
    assert doc["jobs"]["contended_links"] == []
    assert [c["full_together_s"] for c in doc["jobs"]["links_met_not_full"]] == [0.0] * 8
    with open(tmp_path / "sim_contended_links.csv") as f:
        assert list(csv.DictReader(f)) == []
    assert "Links shared at once without filling them" in (tmp_path / "report.html").read_text()
