"""simnet validate: a real proxy run (mpiexec in a subprocess) against its prediction."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

import simnet
from simnet.simulate import build_workload
from workflows import validate as val
from workload.ops import describe

TIMEOUT_S = 120


def config(tmp_path: Path, name: str, args: list[int], **extra) -> Path:
    data = {
        "distributed": {"num_nodes": 2, "bandwidth_limit_gb_per_s": 10.0},
        "topology": {"type": "switch", "num_nodes": 2},
        "workload": {"name": name, "args": args, "scale": 0.01},
        "logging": {"log_dir": str(tmp_path / "results")},
    }
    for section, fields in extra.items():
        data.setdefault(section, {}).update(fields)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def validate(*args: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simnet", "validate", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def labels_of(cfg_path: Path) -> tuple[set[str], int]:
    """The proxy's op labels and its operations per iteration (all ranks)."""
    cfg = simnet.load_config(cfg_path)
    wl = build_workload(cfg)
    programs = [ph.program(r) for ph in wl.phases for r in range(wl.world_size)]
    return {op.label for ops in programs for op in ops}, sum(len(ops) for ops in programs)


@pytest.fixture(scope="module")
def dlrm_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dlrm")
    cfg = config(tmp, "dlrm", [])
    out = tmp / "out"
    out.mkdir()
    (out / "earlier_run.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # not this run's
    r = validate(
        "--config", str(cfg), "--np", "2", "--iters", "2", "--warmup", "1", "--out", str(out)
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return cfg, out, r


def test_dlrm_files_and_phase_figures(dlrm_run):
    _, out, r = dlrm_run
    for name in (
        "validation.json",
        "validation_ops.csv",
        "validation_labels.csv",
        "validation.txt",
        "validation_ops.png",
        "report.html",
        "measured.json",
        "measured_trace.json",
        "proxy_output.txt",
    ):
        assert (out / name).stat().st_size > 0, name
    assert not list(out.glob(".*.tmp"))
    assert not (out / "RUN_INCOMPLETE.txt").exists()  # a finished run takes its mark away
    doc = json.loads((out / "validation.json").read_text())
    assert doc["kind"] == "validation" and doc["model"] == "dlrm" and doc["world_size"] == 2
    page = (out / "report.html").read_text()
    assert '<h2 id="comparison">' in page
    assert page.count("data:image/png;base64,") == 1 and "earlier_run" not in page
    assert doc["measured"]["iterations"] == {"warmup": 1, "timed": 2}
    assert doc["prediction"]["iterations"] == 2
    [ph] = doc["phases"]
    assert ph["phase"] == "iteration"
    assert ph["measured_s"] > 0 and ph["predicted_s"] > 0
    want = 100 * (ph["predicted_s"] - ph["measured_s"]) / ph["measured_s"]
    assert ph["error_pct"] == pytest.approx(want)
    # Each label's error in its CSV, as in the JSON.
    import csv

    with open(out / "validation_labels.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for row, d in zip(rows, doc["labels"], strict=True):
        if d["error_pct"] is None:
            assert row["error_pct"] == ""
        else:
            assert float(row["error_pct"]) == pytest.approx(d["error_pct"])
    # The summary is printed and saved.
    text = (out / "validation.txt").read_text()
    assert text in r.stdout
    assert "iteration: measured" in text and "took longer than predicted" in text


def test_dlrm_op_by_op_table_matches_the_proxy(dlrm_run):
    cfg, out, _ = dlrm_run
    labels, n_ops = labels_of(cfg)
    assert "embedding_alltoall_fwd" in labels and "top_mlp_allreduce" in labels
    with (out / "validation_ops.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == n_ops
    assert {r["label"] for r in rows} == labels
    assert {(int(r["rank"]), int(r["index"])) for r in rows} == {
        (r, i) for r in range(2) for i in range(n_ops // 2)
    }
    for r in rows:
        assert float(r["measured_s"]) >= 0 and float(r["predicted_s"]) >= 0
        assert float(r["difference_s"]) == pytest.approx(
            float(r["measured_s"]) - float(r["predicted_s"])
        )
    doc = json.loads((out / "validation.json").read_text())
    by_label = {d["label"]: d for d in doc["labels"]}
    assert set(by_label) == labels
    for label, d in by_label.items():
        mine = [r for r in rows if r["label"] == label]
        assert d["ops"] == len(mine)
        assert d["measured_s"] == pytest.approx(sum(float(r["measured_s"]) for r in mine))
        assert d["predicted_s"] == pytest.approx(sum(float(r["predicted_s"]) for r in mine))
    excess = [d["difference_s"] for d in doc["longer_than_predicted"]]
    assert excess == sorted(excess, reverse=True) and all(x > 0 for x in excess)
    assert {d["label"] for d in doc["longer_than_predicted"]} == {
        d["label"] for d in doc["labels"] if d["difference_s"] > 0
    }


def test_reuse_refuses_a_trace_of_another_workload(dlrm_run, tmp_path):
    _, out, _ = dlrm_run
    other = config(tmp_path, "dlrm", [], workload={"scale": 0.02})
    r = validate("--config", str(other), "--np", "2", "--out", str(out), "--reuse")
    assert r.returncode == 2
    assert "error:" in r.stderr and "differ" in r.stderr
    assert not (out / "RUN_INCOMPLETE.txt").exists()  # the earlier results stand as they were


def test_reuse_refuses_another_rank_count_and_iterations_leaving_the_folder_as_it_was(
    dlrm_run, tmp_path
):
    cfg, out, _ = dlrm_run
    before = sorted(p.name for p in out.iterdir())
    wider = config(tmp_path, "dlrm", [], topology={"num_nodes": 4})
    r = validate("--config", str(wider), "--np", "4", "--out", str(out), "--reuse")
    assert r.returncode == 2
    assert "the run has 2 ranks, the configuration 4 (--np 2 matches the run)" in r.stderr
    r = validate("--config", str(cfg), "--np", "2", "--out", str(out), "--reuse", "--iters", "5")
    assert r.returncode == 2
    assert "--reuse compares the run already in --out, with its own" in r.stderr
    assert sorted(p.name for p in out.iterdir()) == before  # no RUN_INCOMPLETE.txt either


def test_gpt2_with_calibrated_link_params(tmp_path):
    lp = tmp_path / "link_params.json"
    lp.write_text(json.dumps({"alpha_us": 4.0, "bandwidth_gb_per_s": 5.0, "link_latency_us": 0}))
    cfg = config(tmp_path, "gpt2", [8, 2, 2], network={"link_params_file": "link_params.json"})
    out = tmp_path / "out"
    r = validate("--config", str(cfg), "--iters", "1", "--out", str(out), "--quiet")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "validation.json").read_text())
    assert doc["prediction"]["on"] == "configured"
    assert doc["prediction"]["network"]["alpha_us"] == 4.0
    assert any("calibrated: network.alpha_us" in a for a in doc["prediction"]["assumed"])
    labels, n_ops = labels_of(cfg)
    assert labels == {"fwd_send", "fwd_recv", "bwd_send", "bwd_recv"}
    assert {d["label"] for d in doc["labels"]} == labels
    assert sum(d["ops"] for d in doc["labels"]) == n_ops
    # Stage 0 sends both micro-batches eagerly (below 64 KB) at once: they share the link,
    # so stage 1's first forward receive ends after alpha + 2 x size / bandwidth.
    msg = round(808960 * 0.01) * 4
    with (out / "validation_ops.csv").open() as f:
        first_recv = next(r for r in csv.DictReader(f) if r["label"] == "fwd_recv")
    assert float(first_recv["predicted_s"]) == pytest.approx(4e-6 + 2 * msg / 5e9, rel=1e-6)


def test_refuses_the_ring_trainer(tmp_path):
    cfg = tmp_path / "ring.json"
    cfg.write_text(json.dumps({"distributed": {"num_nodes": 2}, "topology": {"num_nodes": 2}}))
    r = validate("--config", str(cfg), timeout=60)
    assert r.returncode == 2
    assert "alexnet_ring" in r.stderr and "run_training.sh" in r.stderr


def test_bad_config_and_layout_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"workload": {"name": "gpt2", "bogus": 1}}))
    assert val.main(["--config", str(bad)]) == 2
    # GPT-2 with 4 stages cannot run on 2 ranks: refused before MPI starts.
    cfg = config(tmp_path, "gpt2", [8, 4, 2])
    r = validate("--config", str(cfg), "--out", str(tmp_path / "o"), timeout=60)
    assert r.returncode == 2 and "error:" in r.stderr
    assert not (tmp_path / "o" / "measured.json").exists()


def test_timeout_stops_the_run(tmp_path):
    cfg = config(tmp_path, "dlrm", [])
    r = validate(
        "--config", str(cfg), "--np", "2", "--out", str(tmp_path / "o"), "--timeout", "0.2"
    )
    assert r.returncode == val.EXIT_TIMEOUT
    assert "--timeout" in r.stderr


def test_a_timeout_ends_with_its_reason_not_the_stops_noise(tmp_path):
    # The stop's own lines (mpiexec's "Press Ctrl-C again", rank 0's "interrupted
    # (SIGINT: Ctrl-C ...)") were echoed just before the reason, as if Ctrl-C had stopped
    # the run. (8 s: the ranks have started and print their line when stopped.)
    cfg = config(tmp_path, "dlrm", [])
    out = tmp_path / "o"
    r = validate(
        "--config", str(cfg), "--np", "2", "--out", str(out), "--iters", "1000000",
        "--timeout", "8",
    )  # fmt: skip
    assert r.returncode == val.EXIT_TIMEOUT, r.stdout + r.stderr
    assert r.stderr == (
        "error: the real run did not finish within --timeout 8 s; every process was "
        f"stopped (its output, the stop's too: {out / 'proxy_output.txt'})\n"
    )
    assert "[mpiexec@" not in r.stdout and "interrupted" not in r.stdout, r.stdout
    assert r.stdout.splitlines()[1].startswith("[    0.0 s] dlrm: 2 ranks, ")
    # The stop's lines are kept in the file: mpiexec's always; rank 0's "interrupted
    # (SIGINT" when it printed it before the ranks were stopped (one run in four here
    # was stopped first: it is not asserted).
    kept = (out / "proxy_output.txt").read_text()
    assert "[mpiexec@" in kept and "Ctrl-C" in kept


def test_compare_ops_against_the_simulation_itself():
    """A trace made from simnet's own timelines compares with zero difference."""
    cfg = {
        "distributed": {"num_nodes": 2},
        "topology": {"type": "switch", "num_nodes": 2},
        "workload": {"name": "gpt2", "args": [8, 2, 2], "scale": 0.01, "iterations": 2},
    }
    res = simnet.simulate(cfg)
    sim = res.phases[0].timeline
    events = []
    for rank, ops in enumerate(sim.programs):
        tl = sim.timelines[rank]
        for it in range(2):
            for op, s, e in zip(ops, tl.starts[it], tl.ends[it], strict=True):
                events.append(
                    {
                        "name": op.label,
                        "ph": "X",
                        "pid": rank,
                        "ts": s * 1e6,
                        "dur": (e - s) * 1e6,
                        "args": {"phase": sim.name, "iteration": it, "op": describe(op)},
                    }
                )
    rows = val.compare_ops(sim.name, sim, val.trace_durations({"traceEvents": events}))
    assert len(rows) == sum(len(p) for p in sim.programs)
    for r in rows:
        assert r.difference_s == pytest.approx(0.0, abs=1e-12)
    labels = val.by_label(rows)
    assert [d["label"] for d in labels] == ["fwd_send", "bwd_recv", "fwd_recv", "bwd_send"]
    # A trace of another program is refused, naming the operation.
    events[0]["args"]["op"] = "something else"
    with pytest.raises(val.ValidationError, match="operation #0"):
        val.compare_ops(sim.name, sim, val.trace_durations({"traceEvents": events}))


def test_an_interrupted_run_marks_its_folder_unfinished(tmp_path, monkeypatch, capsys):
    # An earlier run's validation.json stays in the folder: the mark says it may not be
    # this run's.
    cfg = config(tmp_path, "dlrm", [])
    out = tmp_path / "out"
    out.mkdir()
    (out / "validation.json").write_text("{}")

    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(val, "real_run", interrupted)
    assert val.main(["--config", str(cfg), "--np", "2", "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert "RUN_INCOMPLETE.txt marks the folder as an unfinished run's" in err
    text = (out / "RUN_INCOMPLETE.txt").read_text()
    assert text.startswith("A run of python -m simnet validate started here at ")
    assert "has not finished" in text


def test_a_missing_host_model_file_is_named_by_its_option(tmp_path):
    cfg = config(tmp_path, "dlrm", [])
    r = validate("--config", str(cfg), "--host-params", str(tmp_path / "nope.json"),
                 "--out", str(tmp_path / "out"))  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.strip() == f"error: --host-params: no such file '{tmp_path / 'nope.json'}'"


def test_a_real_runs_prediction_runs_nccl_algorithms_as_mpi_messages(tmp_path):
    # The proxies send an NCCL algorithm's schedule as MPI messages: predicting their
    # run, the collectives run as MPI runs them, and the notes say so.
    from workflows.launcher import as_mpi_run

    cfg = simnet.load_config(config(tmp_path, "dlrm", [], collectives={"algorithm": "nccl_ring"}))
    mpi, notes = as_mpi_run(cfg)
    assert mpi.collectives.library == "mpi" and cfg.collectives.library is None
    assert notes == [
        "prediction: collectives as MPI runs them (collectives.library = mpi), as the real "
        "run sends them, not as NCCL would"
    ]
    assert as_mpi_run(simnet.load_config(config(tmp_path, "dlrm", [])))[1] == []
    said = simnet.load_config(
        config(tmp_path, "dlrm", [], collectives={"algorithm": "nccl_ring", "library": "nccl"})
    )
    assert as_mpi_run(said) == (said, [])  # the configuration's word stands


def test_timeout_0_means_never(tmp_path):
    # As --help says: 0 is no time limit, not a refusal.
    cfg = config(tmp_path, "dlrm", [])
    r = validate("--config", str(cfg), "--np", "2", "--iters", "1", "--warmup", "0",
                 "--out", str(tmp_path / "o"), "--timeout", "0")  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "o" / "validation.json").exists()


def test_the_label_tables_difference_and_error_have_one_sign(dlrm_run):
    # Both predicted - measured: a label predicted short has both negative.
    _, out, _ = dlrm_run
    doc = json.loads((out / "validation.json").read_text())
    text = (out / "validation.txt").read_text()
    assert "pred-meas (ms)" in text and "error = (predicted - measured) / measured" in text
    checked = 0
    for d in doc["labels"]:
        if d["error_pct"] is None or abs(d["difference_s"]) < 1e-6:
            continue
        line = next(x for x in text.splitlines() if f" {d['label']} " in x and "%" in x)
        diff, err = line.split()[-2:]
        assert float(diff) == pytest.approx((d["predicted_s"] - d["measured_s"]) * 1e3, abs=2e-3)
        assert (float(diff) < 0) == err.startswith("-")
        checked += 1
    assert checked


def test_np_beyond_the_topology_is_said_of_np(tmp_path):
    # The world size is --np's: the error named workload.world_size, a field of no file.
    from workflows.validate import ValidationError, prepare_config

    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({
        "distributed": {"num_nodes": 4, "bandwidth_limit_gb_per_s": 10},
        "topology": {"type": "switch", "num_nodes": 4},
        "workload": {"name": "dlrm", "scale": 0.01},
    }))  # fmt: skip
    with pytest.raises(ValidationError) as e:
        prepare_config(str(cfg), 8)
    assert str(e.value) == (
        "--np 8: 8 ranks but the switch topology has only 4 endpoints; use a larger topology "
        "(topology.num_nodes) or fewer ranks"
    )
