"""``python -m simnet scaling``: the arithmetic, the batch definitions, the refusals,
and one small real study (dlrm at 1 and 2 ranks) extended by simnet predictions."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest

from workflows import aggregate, scaling
from workflows.launcher import run_command
from workflows.study import models as sm
from workflows.study.util import StudyError, parse_counts, text_table

ROOT = Path(__file__).resolve().parent.parent

# -- the arithmetic -----------------------------------------------------------------------


def test_throughput_and_efficiency_formulas():
    assert scaling.throughput(128, 0.5) == 256.0
    assert scaling.weak_efficiency(2.0, 4.0) == 0.5
    assert scaling.strong_efficiency(3.0, 8, 2) == 0.75


def test_weak_scaling_metrics_exact():
    # Fixed batch per process (128): P = 1, 2, 4 at 2.0, 2.5, 4.0 s per iteration.
    got = scaling.scaling_metrics([(4, 4.0, 512), (1, 2.0, 128), (2, 2.5, 256)], "weak")
    assert [m["np"] for m in got] == [1, 2, 4]
    assert [m["throughput_samples_per_s"] for m in got] == pytest.approx(
        [64.0, 102.4, 128.0], rel=1e-15
    )
    assert [m["speedup"] for m in got] == pytest.approx([1.0, 1.6, 2.0], rel=1e-15)
    assert [m["ideal_speedup"] for m in got] == [1.0, 2.0, 4.0]
    assert [m["efficiency"] for m in got] == [1.0, 0.8, 0.5]  # t1 / tP, exact
    for m in got:
        assert m["efficiency"] == pytest.approx(m["speedup"] / m["ideal_speedup"], rel=1e-15)


def test_strong_scaling_metrics_exact():
    # Fixed global batch (128): P = 2, 4, 8 at 4.0, 2.5, 1.6 s.
    got = scaling.scaling_metrics([(2, 4.0, 128), (4, 2.5, 128), (8, 1.6, 128)], "strong")
    assert [m["throughput_samples_per_s"] for m in got] == pytest.approx(
        [32.0, 51.2, 80.0], rel=1e-15
    )
    assert [m["speedup"] for m in got] == pytest.approx([1.0, 1.6, 2.5], rel=1e-15)
    assert [m["ideal_speedup"] for m in got] == [1.0, 2.0, 4.0]
    assert [m["efficiency"] for m in got] == pytest.approx([1.0, 0.8, 0.625], rel=1e-15)


def test_weak_scaling_with_a_fixed_global_batch_has_ideal_one():
    # dlrm: the reference fixes the global batch, so perfect weak scaling keeps the
    # throughput: ideal speedup 1, efficiency t1 / tP = speedup.
    got = scaling.scaling_metrics([(1, 0.5, 2048), (2, 0.625, 2048)], "weak")
    assert got[1]["ideal_speedup"] == 1.0
    assert got[1]["efficiency"] == 0.8
    assert got[1]["speedup"] == pytest.approx(0.8, rel=1e-15)


def test_parse_counts():
    assert parse_counts("4,1,2,2") == [1, 2, 4]
    assert parse_counts("8..64") == [8, 16, 32, 64]
    assert parse_counts("1,8..32") == [1, 8, 16, 32]
    assert parse_counts("") == []
    for bad in ("0", "a", "4..2", "-1"):
        with pytest.raises(StudyError, match="--np"):
            parse_counts(bad)


# -- batch definitions and the workload at each count ------------------------------------


def _samples(model: str, p: int, args=(), flags=None, mode="weak") -> float | None:
    study = sm.Study(model=model, args=tuple(args), flags=flags or {}, mode=mode)
    w = sm.build(study, p, flags or {})
    return sm.samples_per_iteration(model, p, w.params, w.info)


def test_samples_per_iteration_by_model():
    assert _samples("resnet152", 4) == 512  # 128 per process
    assert _samples("cosmoflow", 8) == 16  # 8 per data shard, 2 shards
    assert _samples("dlrm", 1) == _samples("dlrm", 64) == 2048  # the reference's fixed batch
    assert _samples("gpt2", 8, (48, 4, 8)) == 8 * 1 * 2  # micro-batches x 1 x data shards
    assert _samples("bert", 8, (24, 4, 8)) == 8 * 8 * 2  # micro-batches x 8 x data shards
    assert _samples("gpt3", 16, (2, 2)) == 16 * 2 // 4
    assert _samples("alexnet_ring", 4) == 4 * 32
    assert _samples("alexnet_ring", 4, flags={"compute_us": 2500}) == 4 * 16
    assert sm.samples_per_iteration("resnet50", 4, {}, {}) is None


@pytest.mark.parametrize(
    ("model", "mode", "match"),
    [
        ("resnet50", "weak", "no batch size"),
        ("gpt3_one_pipe_step", "weak", "one steady-state pipeline step"),
        ("dlrm", "strong", "strong scaling .* is not meaningful"),
        ("resnet152", "strong", "use resnet152_scal"),
        ("nosuchmodel", "weak", "unknown model"),
    ],
)
def test_refused_studies(model, mode, match):
    with pytest.raises(StudyError, match=match):
        sm.check_study(sm.Study(model=model, mode=mode))


def test_refusal_from_the_command_line(capsys):
    assert scaling.main(["--model", "dlrm", "--mode", "strong", "--np", "1,2"]) == 2
    assert "Use --mode weak" in capsys.readouterr().err
    assert scaling.main(["--model", "dlrm", "--flag", "nope=3"]) == 2
    assert "has no such option" in capsys.readouterr().err


def test_strong_scaling_resnet152_scal_keeps_the_global_batch():
    study = sm.Study(model="resnet152_scal", mode="strong")
    rows = [sm.point_flags(study, p, 2)["scaling_size"] for p in (2, 4, 8, 16)]
    assert rows == [256, 512, 1024, 2048]
    batches = {
        _samples("resnet152_scal", p, flags={"scaling_size": s})
        for p, s in zip((2, 4, 8, 16), rows, strict=True)
    }
    assert batches == {256.0}  # 128 x P1, at every count
    with pytest.raises(StudyError, match="rows for 2, 4, 8, 16 processes only"):
        sm.point_flags(study, 32, 2)
    with pytest.raises(StudyError, match="drop --flag scaling_size"):
        sm.check_study(sm.Study(model="resnet152_scal", mode="strong", flags={"scaling_size": 256}))


def test_strong_scaling_alexnet_divides_compute():
    study = sm.Study(model="alexnet_ring", mode="strong", flags={"compute_us": 4000})
    assert sm.base_count(study, [1, 2, 4, 8]) == 2  # a ring needs 2 ranks
    assert [sm.point_flags(study, p, 2)["compute_us"] for p in (2, 4, 8)] == [4000, 2000, 1000]
    assert {_samples("alexnet_ring", p, flags=sm.point_flags(study, p, 2)) for p in (2, 4, 8)} == {
        2 * 32 * 4000 / 5000
    }


def test_proxy_command_and_workload_section_describe_the_same_program():
    study = sm.Study(model="gpt2", args=(8, 2), scale=0.01, compute="none")
    cmd = sm.proxy_command(study, 4, {}, "out.json", mpiexec="mpiexec", iters=3, warmup=1)
    assert cmd[:3] == ["mpiexec", "-n", "4"]
    assert cmd[4:] == [
        "-m", "proxies.gpt2", "8", "2", "--scale", "0.01", "--compute", "none",
        "--iters", "3", "--warmup", "1", "--json", "out.json", "--quiet",
    ]  # fmt: skip
    wl = sm.workload_section(study, 4, {})
    assert wl["args"] == [8, 2] and wl["scale"] == 0.01 and wl["world_size"] == 4
    assert wl["compute_scale"] == 0.0  # --compute none
    assert sm.proxy_module_argv("alexnet_ring") == ["-m", "proxies.alexnet_ring"]
    ring = sm.workload_section(sm.Study(model="alexnet_ring"), 4, {})
    assert ring["flags"] == {"hierarchical": 0, "compute_us": 5000}  # the proxy's ring


def test_predicted_config_resizes_the_topology():
    study = sm.Study(model="dlrm")
    base = {"topology": {"type": "hierarchical", "group_size": 4}}
    cfg, _ = scaling.predicted_config(base, study, 6, {})
    assert cfg["topology"]["num_nodes"] == 8 and cfg["distributed"]["num_nodes"] == 6
    assert cfg["workload"]["world_size"] == 6
    cfg, notes = scaling.predicted_config(
        {"topology": {"type": "ring", "permutations": [0, 5]}}, study, 4, {}
    )
    assert cfg["topology"] == {"type": "ring", "num_nodes": 4, "permutations": [0]}
    assert notes and "one ring" in notes[0]
    with pytest.raises(StudyError, match="16 endpoints, fewer than 32"):
        scaling.predicted_config({"topology": {"type": "fat_tree", "k": 4}}, study, 32, {})
    # The size probe of a fat-tree is not refused for a straggler beyond its one rank.
    slow = {"topology": {"type": "fat_tree", "k": 4}, "whatif": {"stragglers": {"3": 2.0}}}
    cfg, _ = scaling.predicted_config(slow, study, 8, {})
    assert cfg["whatif"]["stragglers"] == {"3": 2.0} and cfg["workload"]["world_size"] == 8


def test_prediction_only_skips_rejected_counts(tmp_path):
    out = tmp_path / "pred"
    rc = scaling.main(
        ["--model", "gpt2", "--args", "8", "2", "--scale", "0.001", "--np", "none",
         "--predict-np", "1,2,4", "--workers", "1", "--out", str(out), "--quiet"]
    )  # fmt: skip
    assert rc == 0
    doc = json.loads((out / "scaling.json").read_text())
    assert doc["measured"] == []
    status = {r["np"]: r["status"] for r in doc["predicted"]}
    assert status == {1: "skipped", 2: "ok", 4: "ok"}
    assert "multiple of stages=2" in doc["predicted"][0]["note"]
    p2 = doc["predicted"][1]
    assert p2["speedup"] == 1.0 and p2["efficiency"] == 1.0 and p2["samples_per_iteration"] == 8


def test_config_what_ifs_and_jobs_are_said_and_counts_they_do_not_fit_skipped(tmp_path):
    # A straggler at rank 3 fits 4 and 8 ranks, not 2: that count is skipped with the
    # reason (as a count the layout rejects), the others run and the what-if is said; a
    # compute_scale of the file is said too, and jobs of the file are not run.
    cfg = tmp_path / "c.json"
    cfg.write_text(
        json.dumps(
            {
                "topology": {"type": "switch"},
                "workload": {"compute_scale": 3.0},
                "whatif": {"stragglers": {"3": 2.0}},
                "jobs": [{"name": "other", "workload": {"name": "dlrm", "world_size": 2}}],
            }
        )
    )
    out = tmp_path / "pred"
    rc = scaling.main(
        ["--model", "dlrm", "--scale", "0.001", "--np", "none", "--predict-np", "2,4,8",
         "--config", str(cfg), "--workers", "1", "--out", str(out), "--quiet"]
    )  # fmt: skip
    assert rc == 0
    doc = json.loads((out / "scaling.json").read_text())
    status = {r["np"]: r["status"] for r in doc["predicted"]}
    assert status == {2: "skipped", 4: "ok", 8: "ok"}
    assert "rank 3 does not exist" in doc["predicted"][0]["note"]
    notes = "\n".join(doc["notes"])
    assert "what-if: rank 3 computes 2x as long" in notes
    assert "workload.compute_scale = 3.0 applies to every predicted count" in notes
    assert "its jobs are not used" in notes
    assert all(r["topology"]["name"].startswith("switch") for r in doc["predicted"][1:])


def test_a_config_that_fits_no_count_is_an_error(tmp_path, capsys):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"whatif": {"stragglers": {"30": 2.0}}}))
    rc = scaling.main(
        ["--model", "dlrm", "--np", "none", "--predict-np", "2,4", "--config", str(cfg),
         "--out", str(tmp_path / "o")]
    )  # fmt: skip
    assert rc == 2
    assert "rank 30 does not exist" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_study_leaves_no_earlier_studys_file_it_did_not_write(tmp_path, capsys):
    # Measured only: an earlier study's prediction settings and runs must not stay beside
    # it (aggregate would list them as this study's); the runs removed are named.
    out = tmp_path / "study"
    (out / "runs").mkdir(parents=True)
    (out / "predict_config.json").write_text("{}")
    (out / "runs" / "dlrm_np4.json").write_text("{}")
    rc = scaling.main(
        ["--model", "dlrm", "--np", "1", "--scale", "0.01", "--iters", "2", "--warmup", "0",
         "--timeout", "120", "--out", str(out)]
    )  # fmt: skip
    assert rc == 0
    assert not (out / "predict_config.json").exists()
    assert sorted(f.name for f in (out / "runs").iterdir()) == ["dlrm_np1.json", "dlrm_np1.log"]
    assert (
        f"note: removed 1 run file(s) of an earlier study from {out / 'runs'} (dlrm_np4.json)"
        in capsys.readouterr().err
    )
    assert not (out / "RUN_INCOMPLETE.txt").exists()  # a finished study takes its mark away
    assert json.loads((out / "scaling.json").read_text())["predicted"] == []


def test_run_command_times_out_and_stops_the_group(tmp_path):
    t0 = time.perf_counter()
    res = run_command(["bash", "-c", "sleep 30 & sleep 30"], 0.5, tmp_path / "log.txt")
    assert res.timed_out and time.perf_counter() - t0 < 10
    assert (tmp_path / "log.txt").read_text().startswith("$ bash -c")


def test_ctrl_c_dropped_while_forking_still_stops_the_run(monkeypatch):
    # A SIGINT that lands in Popen's at-fork handlers is printed and dropped by Python:
    # the launcher must still stop the new group and raise the interruption.
    import contextlib
    import signal
    import subprocess

    real, started = subprocess.Popen, []

    def forking(*args, **kwargs):
        started.append(real(*args, **kwargs))
        # What an at-fork handler does with an exception: print it and go on.
        with contextlib.suppress(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", forking)
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        run_command(["sleep", "30"], 20)
    assert time.perf_counter() - t0 < 10
    assert started[0].poll() is not None  # the child was stopped


def test_text_table_aligns_numbers_right():
    text = text_table(["a", "value (s)"], [["x", 1.5], ["long", None]])
    lines = text.splitlines()
    assert lines[0] == "a     value (s)"
    assert lines[2] == "x           1.5"
    assert lines[3] == "long          -"


# -- a small real study --------------------------------------------------------------------

CLUSTER = {
    "topology": {
        "type": "hierarchical",
        "group_size": 4,
        "intra_bandwidth_gb_per_s": 25.0,
        "inter_bandwidth_gb_per_s": 12.5,
        "inter_latency_us": 5.0,
    },
    "distributed": {"bandwidth_limit_gb_per_s": 25.0},
}


@pytest.fixture(scope="module")
def dlrm_study(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("scaling")
    cfg = tmp / "cluster.json"
    cfg.write_text(json.dumps(CLUSTER))
    out = tmp / "study"
    out.mkdir()
    (out / "earlier_study.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # not this study's
    rc = scaling.main(
        ["--model", "dlrm", "--np", "1,2", "--scale", "0.01", "--iters", "3", "--warmup", "1",
         "--predict-np", "8", "--config", str(cfg), "--timeout", "120", "--workers", "2",
         "--out", str(out), "--quiet"]
    )  # fmt: skip
    assert rc == 0
    return out


def test_real_study_writes_every_output(dlrm_study):
    out = dlrm_study
    for name in ("scaling.json", "scaling.csv", "scaling.txt", "predict_config.json",
                 "scaling_speedup.png", "scaling_efficiency.png", "scaling_breakdown.png",
                 "runs/dlrm_np1.json", "runs/dlrm_np2.json"):  # fmt: skip
        assert (out / name).stat().st_size > 0, name
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.rglob("*.tmp"))
    page = (out / "report.html").read_text()
    assert '<h2 id="comparison">' in page and "dlrm, P = 2, per iteration" in page
    # Its three plots, not the picture an earlier study left in the folder.
    assert page.count("data:image/png;base64,") == 3 and "earlier_study" not in page


def test_real_study_measured_points(dlrm_study):
    doc = json.loads((dlrm_study / "scaling.json").read_text())
    assert doc["kind"] == "scaling-study" and doc["mode"] == "weak"
    m = {r["np"]: r for r in doc["measured"]}
    assert set(m) == {1, 2} and all(r["status"] == "ok" for r in m.values())
    for r in m.values():
        assert r["iteration_time_s"] > 0 and r["compute_s"] > 0
        assert r["samples_per_iteration"] == 2048
        assert r["throughput_samples_per_s"] == pytest.approx(2048 / r["iteration_time_s"])
        run = json.loads(Path(r["file"]).read_text())
        assert run["world_size"] == r["np"] and run["options"]["scale"] == 0.01
    assert m[1]["speedup"] == 1.0 and m[1]["efficiency"] == 1.0
    assert m[2]["efficiency"] == m[1]["iteration_time_s"] / m[2]["iteration_time_s"]


def test_real_study_predicted_points_and_errors(dlrm_study):
    doc = json.loads((dlrm_study / "scaling.json").read_text())
    p = {r["np"]: r for r in doc["predicted"]}
    assert set(p) == {1, 2, 8}  # the measured counts and the predicted one
    assert all(r["status"] == "ok" for r in p.values())
    assert p[8]["topology"]["num_endpoints"] == 8
    assert p[8]["wire_bytes_by_group"]["world"] > 0
    # dlrm's emulated compute is 3091 us per iteration, exactly, in the prediction.
    assert p[8]["compute_s"] == pytest.approx(3091e-6, rel=1e-9)
    m = {r["np"]: r for r in doc["measured"]}
    for n in (1, 2):
        want = (
            100 * (p[n]["iteration_time_s"] - m[n]["iteration_time_s"]) / m[n]["iteration_time_s"]
        )
        assert p[n]["error_pct"] == pytest.approx(want)
    assert "error_pct" not in p[8]
    rows = list(csv.DictReader((dlrm_study / "scaling.csv").open()))
    assert [(r["source"], r["np"]) for r in rows] == [
        ("measured", "1"), ("measured", "2"),
        ("predicted", "1"), ("predicted", "2"), ("predicted", "8"),
    ]  # fmt: skip
    text = (dlrm_study / "scaling.txt").read_text()
    assert "throughput (samples/s)" in text and "pred. error (%)" in text


def test_aggregate_collects_the_study_runs(dlrm_study, tmp_path, capsys):
    (dlrm_study / "broken.json").write_text("{not json")
    prefix = tmp_path / "agg" / "table"
    assert aggregate.main([str(dlrm_study), "-o", str(prefix)]) == 0
    captured = capsys.readouterr()
    assert "broken.json: unreadable" in captured.err
    assert "scaling.json: not a run result" in captured.err
    doc = json.loads((tmp_path / "agg" / "table.json").read_text())
    rows = doc["rows"]
    assert [(r["kind"], r["model"], r["world_size"]) for r in rows] == [
        ("measured", "dlrm", 1),
        ("measured", "dlrm", 2),
    ]
    study = json.loads((dlrm_study / "scaling.json").read_text())
    for r, m in zip(rows, study["measured"], strict=True):
        assert r["iteration_time_s"] == m["iteration_time_s"]
        assert r["throughput_samples_per_s"] == pytest.approx(m["throughput_samples_per_s"])
        assert r["scale"] == 0.01
    assert len((tmp_path / "agg" / "table.csv").read_text().splitlines()) == 3
    assert "dlrm" in (tmp_path / "agg" / "table.txt").read_text()


def test_breakdown_axis_says_which_bars_are_drawn(tmp_path, monkeypatch):
    labels: list[str] = []
    real = scaling._save

    def spy(fig, path):
        labels.append(fig.axes[0].get_xlabel())
        return real(fig, path)

    monkeypatch.setattr(scaling, "_save", spy)

    def rec(source: str, np_: int) -> dict:
        return {"status": "ok", "np": np_, "source": source, "compute_s": 0.1,
                "exposed_comm_s": 0.05, "iteration_time_s": 0.15}  # fmt: skip

    doc = {"model": "dlrm", "mode": "weak", "measured": [], "predicted": [rec("predicted", 2)]}
    scaling.plot_breakdown(doc, tmp_path)
    doc["measured"] = [rec("measured", 2)]
    scaling.plot_breakdown(doc, tmp_path)
    assert labels == [
        "processes P (hatched bars: predicted)",
        "processes P (left bar: measured, right hatched bar: predicted)",
    ]


def test_speedup_on_a_log_p_axis_is_log_too_and_efficiency_has_room_above_100(
    tmp_path, monkeypatch
):
    # On log P a linear speedup axis bent the ideal line; a superlinear point above 100%
    # efficiency must stay in the plot.
    axes: dict[str, tuple] = {}
    real = scaling._save

    def spy(fig, path):
        ax = fig.axes[0]  # (read before saving, which clears the figure)
        axes[path.name] = (ax.get_xscale(), ax.get_yscale(), ax.get_ylim())
        return real(fig, path)

    monkeypatch.setattr(scaling, "_save", spy)
    pred = [{"np": p, "speedup": p / 2, "ideal_speedup": p / 2, "efficiency": e}
            for p, e in ((2, 1.0), (8, 1.3), (32, 0.9))]  # fmt: skip
    doc = {"model": "dlrm", "mode": "weak", "measured": [], "predicted": pred,
           "predicted_topology": "switch"}  # fmt: skip
    scaling.plot_curves(doc, tmp_path)
    assert axes["scaling_speedup.png"][:2] == ("log", "log")
    assert axes["scaling_efficiency.png"][2][1] >= 130 * 1.05 - 1e-9


def test_a_configs_workload_is_said_replaced_and_notes_of_some_counts_name_them(tmp_path):
    # The dragonfly what-if file's workload (scale 0.1) is the study's (scale 1) in every
    # prediction: said, and predict_config.json holds only what the predictions used; a
    # failed link reroutes another number of pairs at each count: each note names its.
    out = tmp_path / "p"
    rc = scaling.main(
        ["--model", "dlrm", "--np", "none", "--predict-np", "4..64", "--config",
         str(ROOT / "examples" / "dragonfly_whatif.json"), "--workers", "1", "--out",
         str(out), "--quiet"]
    )  # fmt: skip
    assert rc == 0
    doc = json.loads((out / "scaling.json").read_text())
    notes = doc["notes"]
    assert any(
        n.endswith("its workload's scale 0.1 replaced by the study's (scale 1.0; --model, "
                   "--args, --scale and --flag set them)")
        for n in notes
    )  # fmt: skip
    assert json.loads((out / "predict_config.json").read_text())["workload"] == {}
    rerouted = [n for n in notes if "pairs rerouted" in n]
    assert [n.rsplit("(at P = ", 1)[1] for n in rerouted] == ["32)", "64)"]
    assert "what-if: rank 5 computes 1.3x as long" in notes  # (at every count)
    # P1 of the speedups is the smallest count that ran, not the layout's (4, skipped).
    assert doc["base_np"] == 4 and doc["speedup_base_np"] == {"measured": None, "predicted": 32}
    assert "P1 = 32 (predicted)" in (out / "scaling.txt").read_text()
    skipped = {r["np"]: r["note"] for r in doc["predicted"] if r["status"] == "skipped"}
    assert skipped[4].startswith("distributed.num_nodes=4 must be a multiple of")


def test_a_study_from_results_made_elsewhere_gives_the_same_table(dlrm_study, tmp_path, capsys):
    # The runs a Slurm study's jobs would write (here: the local study's), read instead
    # of run: the same measured points and speedups; a result of another scale and an
    # unreadable file are left out, said.
    results = tmp_path / "results"
    results.mkdir()
    for f in (dlrm_study / "runs").glob("*.json"):
        (results / f.name).write_text(f.read_text())
    other = json.loads((results / "dlrm_np1.json").read_text())
    other["options"]["scale"] = 0.5
    (results / "sub").mkdir()
    (results / "sub" / "dlrm_other.json").write_text(json.dumps(other))
    tensor = json.loads((results / "dlrm_np1.json").read_text())
    tensor["options"]["per_tensor"] = True
    (results / "sub" / "dlrm_tensor.json").write_text(json.dumps(tensor))
    (results / "broken.json").write_text("{")
    (results / "a_list.json").write_text("[1, 2]")
    out = tmp_path / "from"
    rc = scaling.main(
        ["--model", "dlrm", "--scale", "0.01", "--from", str(results), "--out", str(out),
         "--quiet"]
    )  # fmt: skip
    assert rc == 0
    err = capsys.readouterr().err
    sub = results / "sub"
    assert f"note: {sub / 'dlrm_other.json'}: left out (scale 0.5 (the study's 0.01))" in err
    tensor_note = "left out (per_tensor True (the study's False))"
    assert f"note: {sub / 'dlrm_tensor.json'}: {tensor_note}" in err
    assert f"note: {results / 'broken.json'}: left out (not a proxy result" in err
    assert f"note: {results / 'a_list.json'}: left out (not a proxy result" in err
    here = json.loads((dlrm_study / "scaling.json").read_text())["measured"]
    there = json.loads((out / "scaling.json").read_text())["measured"]
    keys = ("np", "status", "iteration_time_s", "speedup", "efficiency", "samples_per_iteration")
    assert [{k: r[k] for k in keys} for r in there] == [{k: r[k] for k in keys} for r in here]
    assert all(Path(r["file"]).parent == results for r in there)
    assert (results / "dlrm_np1.json").exists()  # (read, never removed)
    # Counts come from the results: --np with --from is refused.
    rc = scaling.main(["--model", "dlrm", "--np", "1", "--from", str(results), "--out",
                       str(tmp_path / "x")])  # fmt: skip
    assert rc == 2
    assert "--np and --from" in capsys.readouterr().err
    rc = scaling.main(["--model", "gpt2", "--from", str(results), "--out", str(tmp_path / "y")])
    assert rc == 2
    assert "no gpt2 result at scale 1" in capsys.readouterr().err


def _run_doc(dlrm_study: Path, model: str, p: int, params: dict, info: dict) -> dict:
    """A proxy result of ``model`` at ``p`` processes (the dlrm run's figures)."""
    doc = json.loads((dlrm_study / "runs" / "dlrm_np1.json").read_text())
    return {**doc, "model": model, "world_size": p, "params": params, "info": info}


def test_from_leaves_out_runs_of_other_arguments_or_options(dlrm_study, tmp_path, capsys):
    # Two studies' runs in one results/: the P = 4 run of other positional arguments was
    # taken as a point (a wrong speedup); a weak run was taken by a strong study.
    mix = tmp_path / "mix"
    mix.mkdir()
    for name, p, mb in (("a", 2, 2), ("b", 4, 8)):
        doc = _run_doc(dlrm_study, "gpt2", p, {"layers": 4, "stages": 2, "microbatches": mb},
                       {"micro_batches": mb, "data_shards": p // 2})  # fmt: skip
        (mix / f"{name}.json").write_text(json.dumps(doc))
    rc = scaling.main(["--model", "gpt2", "--args", "4", "2", "2", "--scale", "0.01",
                       "--from", str(mix), "--out", str(tmp_path / "s"), "--quiet"])  # fmt: skip
    assert rc == 0
    err = capsys.readouterr().err
    assert (
        f"note: {mix / 'b.json'}: left out (microbatches 8 (the study's 2 at 4 processes))" in err
    )
    doc = json.loads((tmp_path / "s" / "scaling.json").read_text())
    assert [r["np"] for r in doc["measured"]] == [2]
    weak = tmp_path / "weak"
    weak.mkdir()
    for p in (2, 4):
        params = {"input_channels": 3, "num_classes": 10, "compute_us": 5000, "hierarchical": 0}
        (weak / f"alexnet_np{p}.json").write_text(
            json.dumps(_run_doc(dlrm_study, "alexnet_ring", p, params, {}))
        )
    rc = scaling.main(["--model", "alexnet_ring", "--mode", "strong", "--scale", "0.01",
                       "--from", str(weak), "--out", str(tmp_path / "st"), "--quiet"])  # fmt: skip
    assert rc == 0
    err = capsys.readouterr().err
    assert (
        f"note: {weak / 'alexnet_np4.json'}: left out (compute_us 5000 (the study's 2500 at 4 "
        "processes))" in err
    )
    doc = json.loads((tmp_path / "st" / "scaling.json").read_text())
    assert [r["np"] for r in doc["measured"]] == [2]


def test_from_says_in_words_why_a_file_is_no_proxy_result(dlrm_study, tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    (results / "dlrm_np1.json").write_text((dlrm_study / "runs" / "dlrm_np1.json").read_text())
    (results / "half.json").write_text(json.dumps({"model": "dlrm"}))
    (results / "scaling.json").write_text((dlrm_study / "scaling.json").read_text())
    rc = scaling.main(["--model", "dlrm", "--scale", "0.01", "--from", str(results), "--out",
                       str(tmp_path / "o"), "--quiet"])  # fmt: skip
    assert rc == 0
    err = capsys.readouterr().err
    assert (
        f"note: {results / 'half.json'}: left out (not a proxy result: no world_size, phases)\n"
        in err
    )
    assert (
        f"note: {results / 'scaling.json'}: left out (not a proxy result: a scaling-study "
        "document)\n" in err
    )
    assert "Error(" not in err


def test_a_study_from_its_own_folder_keeps_the_logs_of_the_runs_it_reads(
    dlrm_study, tmp_path, capsys, monkeypatch
):
    import shutil

    legends: list[list[str]] = []
    real = scaling._save

    def spy(fig, path):
        legend = fig.axes[0].get_legend()
        legends.append([t.get_text() for t in legend.get_texts()] if legend else [])
        return real(fig, path)

    monkeypatch.setattr(scaling, "_save", spy)
    copy = tmp_path / "copy"
    shutil.copytree(dlrm_study, copy)
    rc = scaling.main(["--model", "dlrm", "--scale", "0.01", "--from", str(copy), "--out",
                       str(copy), "--quiet"])  # fmt: skip
    assert rc == 0
    assert "removed" not in capsys.readouterr().err
    assert sorted(f.name for f in (copy / "runs").iterdir()) == [
        "dlrm_np1.json", "dlrm_np1.log", "dlrm_np2.json", "dlrm_np2.log"
    ]  # fmt: skip
    # Measured elsewhere (a cluster's results), not on this machine: the plots say so.
    assert legends[0][0] == f"measured (results in {copy})"


def _dies_at_16(config: dict, *args):
    """simulate_point, but the worker simulating 16 ranks is killed (as by the OOM
    killer)."""
    import os
    import signal

    from workflows.study.sim import simulate_point

    if config["distributed"]["num_nodes"] == 16:
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    return simulate_point(config, *args)


def test_a_dead_simulation_worker_loses_its_counts_not_the_table(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(scaling, "simulate_point", _dies_at_16)
    out = tmp_path / "s"
    rc = scaling.main(["--model", "dlrm", "--np", "none", "--predict-np", "8,16",
                       "--workers", "2", "--out", str(out), "--quiet"])  # fmt: skip
    assert rc == 1
    out_err = capsys.readouterr()
    assert "Traceback" not in out_err.err
    doc = json.loads((out / "scaling.json").read_text())
    lost = {r["np"]: r for r in doc["predicted"]}[16]
    assert lost["status"] == "failed"
    assert lost["note"] == (
        "prediction lost: its simulation worker died (killed, e.g. by the out-of-memory "
        "killer), which stops the pool's other simulations too"
    )
    assert f"  predicted np 16: {lost['note']}" in (out / "scaling.txt").read_text()


def test_predict_config_leaves_out_what_the_predictions_did_not_use(tmp_path, capsys):
    out = tmp_path / "s"
    rc = scaling.main(["--model", "alexnet_ring", "--np", "none", "--predict-np", "8,16",
                       "--config", str(ROOT / "examples" / "gpu_cluster.json"), "--workers",
                       "1", "--out", str(out), "--quiet"])  # fmt: skip
    assert rc == 0
    notes = json.loads((out / "scaling.json").read_text())["notes"]
    assert "topology.placement dropped (it is sized for another world)" in notes
    assert any(n.startswith("collectives.algorithm: not used") for n in notes)
    cfg = json.loads((out / "predict_config.json").read_text())
    assert "placement" not in cfg["topology"] and "collectives" not in cfg
    assert cfg["topology"]["type"] == "rail_optimised" and cfg["network"] == {"alpha_us": 2}


def test_without_unused_keeps_keys_some_counts_used():
    cfg = {"collectives": {"algorithm": "ring", "channels": 2}, "topology": {"group_size": 4}}
    notes = [
        "collectives.algorithm: not used, the workload's collectives name their own ...",
        "topology.group_size: not used, a ring topology has no groups ... (at P = 8, 16)",
    ]
    assert scaling.without_unused(cfg, notes) == {
        "collectives": {"channels": 2}, "topology": {"group_size": 4}
    }  # fmt: skip


def test_predictions_after_a_ctrl_c_are_not_started_and_say_so():
    from workflows.study.pool import Interrupts

    stop = Interrupts()
    stop.count = 1  # (a Ctrl-C came before any count was handed out)
    said: list[str] = []
    study = sm.Study(model="dlrm", scale=0.01)
    recs, _notes, how = scaling.predict(
        study, [8, 16], 8, scaling.DEFAULT_PREDICT_CONFIG, workers=2, say=said.append, stop=stop
    )
    assert how == "ctrl-c"
    assert [(r["np"], r["status"], r["note"]) for r in recs] == [
        (8, "interrupted", "not simulated: interrupted before"),
        (16, "interrupted", "not simulated: interrupted before"),
    ]
    assert said[-1] == "\ninterrupted: no other count starts"
