"""``python -m simnet sweep``: grids of dotted keys, a local pool, resuming, MPI
workers (mpi4py.futures), and ``aggregate`` over the point files."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import subprocess
import sys
from concurrent.futures import Executor
from dataclasses import replace
from pathlib import Path

import pytest

import simnet
from simnet.config import Config
from tests.mpirun import MPIEXEC
from workflows import aggregate, sweep
from workflows.study.pool import InlineExecutor, resolve_kind
from workflows.study.sim import PointOutcome, PointResult, simulate_point
from workflows.study.util import (
    StudyError,
    check_dotted_key,
    expand_grid,
    parse_grid,
    set_dotted,
)
from workload.results import write_json

BASE = {
    "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 10.0},
    "topology": {"type": "hierarchical", "num_nodes": 8, "group_size": 4},
    "workload": {"name": "dlrm", "scale": 0.01},
}
GRID = {"workload.scale": [0.01, 0.02], "topology.inter_bandwidth_gb_per_s": [12.5, 25.0]}


@pytest.fixture
def base_file(tmp_path: Path) -> Path:
    path = tmp_path / "base.json"
    path.write_text(json.dumps(BASE))
    return path


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


# -- grids ---------------------------------------------------------------------------------


def test_grid_is_a_cartesian_product_last_key_fastest():
    pts = expand_grid({"a.x": [1, 2], "b.y": ["p", "q", "r"]})
    assert len(pts) == 6
    assert pts[:2] == [{"a.x": 1, "b.y": "p"}, {"a.x": 1, "b.y": "q"}]
    assert pts[-1] == {"a.x": 2, "b.y": "r"}


def test_grid_parsing_and_errors(tmp_path):
    assert parse_grid('{"workload.args": [[48, 4], [48, 8]]}') == {
        "workload.args": [[48, 4], [48, 8]]
    }
    f = tmp_path / "g.json"
    f.write_text('{"workload.scale": [1]}')
    assert parse_grid(f"@{f}") == parse_grid(str(f)) == {"workload.scale": [1]}
    for bad, msg in (
        ("{", "not valid JSON"),
        ("[1]", "non-empty JSON object"),
        ('{"workload.scale": 1}', "non-empty list"),
        ('{"workload.scale": []}', "non-empty list"),
    ):
        with pytest.raises(StudyError, match=msg):
            parse_grid(bad)


def test_dotted_keys_are_checked_against_the_schema():
    check_dotted_key(Config, "topology.num_nodes")
    check_dotted_key(Config, "workload.flags.scaling_size")  # below a dict: free names
    with pytest.raises(StudyError, match=r"did you mean 'topology\.num_nodes'"):
        check_dotted_key(Config, "topology.num_node")
    with pytest.raises(StudyError, match="no field 'topo'"):
        check_dotted_key(Config, "topo.num_nodes")
    with pytest.raises(StudyError, match="is a value, not a section"):
        check_dotted_key(Config, "workload.scale.x")
    d = {"topology": {"type": "ring"}}
    set_dotted(d, "topology.num_nodes", 8)
    set_dotted(d, "network.alpha_us", 1.0)
    assert d == {"topology": {"type": "ring", "num_nodes": 8}, "network": {"alpha_us": 1.0}}


def test_plan_validates_points_and_hashes_configs(base_file, tmp_path):
    plan = sweep.plan_sweep(base_file, json.dumps(GRID), tmp_path / "out")
    assert len(plan.points) == 4 and not plan.invalid
    assert len({p.config_hash for p in plan.points}) == 4
    assert plan.points[3].config["topology"]["inter_bandwidth_gb_per_s"] == 25.0
    assert plan.points[3].config["workload"]["scale"] == 0.02
    again = sweep.plan_sweep(base_file, json.dumps(GRID), tmp_path / "out")
    assert [p.file for p in again.points] == [p.file for p in plan.points]
    bad = sweep.plan_sweep(base_file, '{"workload.world_size": [3, 4]}', tmp_path / "o")
    assert [p.index for p in bad.invalid] == [0]
    assert "must divide 262144" in bad.invalid[0].error


def test_a_point_reading_a_calibration_file_changes_hash_with_its_contents(tmp_path):
    # The same configuration naming a link calibration whose contents changed is another
    # point: its earlier result must not be reused.
    lp = tmp_path / "lp.json"
    lp.write_text(json.dumps({"alpha_us": 1.0}))
    base = tmp_path / "base.json"
    base.write_text(json.dumps({**BASE, "network": {"link_params_file": "lp.json"}}))
    first = sweep.plan_sweep(base, '{"workload.scale": [0.01]}', tmp_path / "out")
    same = sweep.plan_sweep(base, '{"workload.scale": [0.01]}', tmp_path / "out")
    assert same.points[0].file == first.points[0].file
    lp.write_text(json.dumps({"alpha_us": 500.0}))
    changed = sweep.plan_sweep(base, '{"workload.scale": [0.01]}', tmp_path / "out")
    assert changed.points[0].file != first.points[0].file
    # Without input files a point's hash is its configuration's, as it always was.
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(BASE))
    (pt,) = sweep.plan_sweep(plain, '{"workload.scale": [0.01]}', tmp_path / "o").points
    assert pt.config_hash == sweep.stable_hash(pt.config)


def test_a_host_calibration_is_found_beside_the_base_wherever_the_sweep_runs(tmp_path, monkeypatch):
    from simnet.hostparams import HostCalibration, HostParams

    cal = HostCalibration(
        {"hostname": "t"}, "2026-01-01T00:00:00+00:00", [HostParams(2, 5.0, 1.0, 5.0, 0.0)]
    )
    where = tmp_path / "cfgdir"
    where.mkdir()
    (where / "host.json").write_text(json.dumps(cal.to_json()))
    base = where / "base.json"
    hosts = {"params_file": "host.json", "ranks_per_host": 2}
    base.write_text(json.dumps({**BASE, "hosts": hosts}))
    monkeypatch.chdir(tmp_path)  # not the base's folder
    (pt,) = sweep.plan_sweep(base, '{"workload.scale": [0.01]}', tmp_path / "out").points
    assert pt.error is None
    assert pt.config["hosts"]["params_file"] == str(where / "host.json")


def test_a_trace_sets_files_are_part_of_a_points_hash(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "trace.0.et").write_bytes(b"one")
    point = {"workload": {"name": "chakra", "flags": {"trace_dir": str(traces)}}}
    before = sweep.stable_hash(sweep._with_inputs(point))
    assert sweep.stable_hash(sweep._with_inputs(point)) == before
    (traces / "trace.0.et").write_bytes(b"a longer trace")
    assert sweep.stable_hash(sweep._with_inputs(point)) != before
    # A job's trace set too.
    jobs = {"jobs": [{"name": "a", "workload": point["workload"]}]}
    before = sweep.stable_hash(sweep._with_inputs(jobs))
    (traces / "trace.1.et").write_bytes(b"another rank")
    assert sweep.stable_hash(sweep._with_inputs(jobs)) != before


def test_a_trace_set_under_home_is_hashed_and_broken_points_are_invalid(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "trace.0.et").write_bytes(b"one")
    point = {"workload": {"name": "chakra", "flags": {"trace_dir": "~/traces"}}}
    assert sweep._with_inputs(point)["input_files"]["~/traces"] == [
        ("trace.0.et", 3, (tmp_path / "traces" / "trace.0.et").stat().st_mtime_ns)
    ]
    # Points that fail validation are planned as invalid, not a traceback.
    for base in (
        {"workload": {"name": "chakra", "flags": {}}},
        {"workload": {"name": "chakra", "flags": {"trace_dir": 5}}},
        {"workload": {"name": ["chakra"]}},
        {"jobs": ["oops"]},
    ):
        path = tmp_path / "base.json"
        path.write_text(json.dumps({**BASE, **base}))
        plan = sweep.plan_sweep(path, '{"workload.scale": [0.01]}', tmp_path / "out")
        assert [p.status for p in plan.points] == ["invalid"], base


def test_a_grid_naming_a_field_by_both_names_is_refused(base_file, tmp_path):
    grid = '{"distributed.bandwidth_limit": [10], "distributed.bandwidth_limit_gb_per_s": [20]}'
    twice = re.escape("--grid names 'distributed.bandwidth_limit_gb_per_s' twice")
    with pytest.raises(StudyError, match=twice):
        sweep.plan_sweep(base_file, grid, tmp_path / "out")


def test_sweep_refuses_bad_input(base_file, tmp_path, capsys):
    out = str(tmp_path / "o")
    assert sweep.main(["--config", str(base_file), "--grid", '{"topology.nodes": [8]}',
                       "--out", out]) == 2  # fmt: skip
    assert "did you mean 'topology.num_nodes'" in capsys.readouterr().err
    grid = '{"topology.group_size": [3, 4]}'
    assert sweep.main(["--config", str(base_file), "--grid", grid, "--out", out]) == 2
    err = capsys.readouterr().err
    assert "1 of 2 points are invalid" in err and "group_size=3 must divide" in err
    assert sweep.main(["--config", str(base_file), "--grid", grid, "--out", out,
                       "--skip-invalid", "--executor", "serial"]) == 0  # fmt: skip
    m = _manifest(Path(out))
    assert [p["status"] for p in m["points"]] == ["invalid", "complete"]


# -- running and resuming ------------------------------------------------------------------


def test_sweep_2x2_local_pool_then_resume_recomputes_only_the_missing_point(
    base_file, tmp_path, capsys
):
    out = tmp_path / "out"
    args = ["--config", str(base_file), "--grid", json.dumps(GRID), "--out", str(out),
            "--executor", "local", "--workers", "2"]  # fmt: skip
    assert sweep.main(args) == 0
    err = capsys.readouterr().err
    assert "4/4 points done" in err and "local process pool (2 workers)" in err
    files = sorted((out / "points").glob("point-*.json"))
    assert len(files) == 4
    m = _manifest(out)
    assert m["total"] == m["complete"] == 4
    assert m["runs"][0]["computed"] == [0, 1, 2, 3] and m["runs"][0]["skipped"] == []
    docs = [json.loads(f.read_text()) for f in files]
    assert all(d["complete"] is True for d in docs)
    assert {d["worker_pid"] for d in docs} - {os.getpid()}  # simulated in the pool
    mtimes = {f.name: f.stat().st_mtime_ns for f in files}

    # Every point's result equals the API's prediction of the same configuration.
    plan = sweep.plan_sweep(base_file, json.dumps(GRID), out)
    for pt in plan.points:
        doc = json.loads((out / pt.file).read_text())
        assert doc["point"] == pt.assign and doc["index"] == pt.index
        res = simnet.simulate(pt.config)
        assert doc["result"]["iteration_time_s"] == res.iteration_time_s
        wire = res.phases[0].wire_bytes_by_group["world"]
        assert doc["result"]["wire_bytes_by_group"] == {"world": wire}

    # Lose one result and corrupt another (a half-written file from elsewhere).
    lost, corrupt = plan.points[2], plan.points[1]
    (out / lost.file).unlink()
    (out / corrupt.file).write_text('{"complete": tr')
    assert sweep.main(args) == 0
    err = capsys.readouterr().err
    assert "2 already complete, 2 to simulate" in err
    m = _manifest(out)
    assert len(m["runs"]) == 2
    assert m["runs"][1]["computed"] == [1, 2]
    assert m["runs"][1]["skipped"] == [0, 3]
    # Points 0 and 3 were computed by the first run, and are still said to be.
    assert [p["computed_in_run"] for p in m["points"]] == [1, 2, 2, 1]
    assert m["runs"][0]["grid"] == m["runs"][1]["grid"] == GRID
    for f in (out / "points").glob("point-*.json"):
        if f.name not in (Path(lost.file).name, Path(corrupt.file).name):
            assert f.stat().st_mtime_ns == mtimes[f.name]  # untouched

    # Nothing left: a third run simulates nothing.
    assert sweep.main(args) == 0
    assert _manifest(out)["runs"][2]["computed"] == []
    assert [p["computed_in_run"] for p in _manifest(out)["points"]] == [1, 2, 2, 1]

    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert [r["index"] for r in rows] == ["0", "1", "2", "3"]
    assert [r["workload.scale"] for r in rows] == ["0.01", "0.01", "0.02", "0.02"]
    assert all(r["status"] == "complete" and float(r["iteration_time_s"]) > 0 for r in rows)
    assert int(rows[2]["wire_bytes_world"]) > int(rows[0]["wire_bytes_world"])
    assert "iteration_time_s" in (out / "sweep.txt").read_text()


def test_a_point_result_is_typed_and_its_file_format_is_kept(tmp_path):
    out = tmp_path / "point.json"
    outcome = simulate_point(BASE, str(out), {"index": 7})
    assert isinstance(outcome, PointOutcome) and outcome.error is None
    r = outcome.result
    assert isinstance(r, PointResult)
    res = simnet.simulate(BASE)
    assert r.iteration_time_s == res.iteration_time_s and r.world_size == 8
    doc = json.loads(out.read_text())
    assert doc["index"] == 7 and doc["complete"] is True
    assert list(doc["result"]) == [
        "model", "world_size", "params", "info", "iteration_time_s", "compute_s", "comm_s",
        "exposed_comm_s", "wire_bytes_by_group", "traffic_bytes_total", "phases", "topology",
        "assumed", "sim_wall_s", "scenario",
    ]  # fmt: skip
    # A point written before "scenario" was kept still reads (it has none).
    old = {k: v for k, v in doc["result"].items() if k != "scenario"}
    assert PointResult.from_json(old) == replace(r, scenario=[])
    assert PointResult.from_json(doc["result"]) == r
    assert PointResult.from_json({"model": "dlrm"}) is None
    failed = simulate_point(dict(BASE, topology={"type": "fat_tree", "k": 2}))
    assert failed.result is None and failed.kind in ("config", "exception") and failed.error


def test_a_point_of_another_configuration_is_not_reused(base_file, tmp_path):
    out = tmp_path / "out"
    plan = sweep.plan_sweep(base_file, '{"workload.scale": [0.01]}', out)
    pt = plan.points[0]
    write_json(out / pt.file, {"complete": True, "config_hash": "0" * 16, "result": {}})
    assert sweep.read_complete(out / pt.file, pt.config_hash) is None
    assert sweep.run_plan(plan, InlineExecutor(), "serial", lambda m: None) == 0
    assert sweep.read_complete(out / pt.file, pt.config_hash) is not None


def test_failed_points_are_reported_and_retried(base_file, tmp_path, capsys):
    # A failed link that splits the network fails when the topology is built.
    base = dict(BASE, topology={"type": "switch"}, whatif={"failed_links": [[1, "sw"]]})
    base_file.write_text(json.dumps(base))
    out = tmp_path / "out"
    args = ["--config", str(base_file), "--grid", '{"workload.scale": [0.01]}',
            "--out", str(out), "--executor", "serial"]  # fmt: skip
    assert sweep.main(args) == 1
    assert "point 0" in capsys.readouterr().err
    m = _manifest(out)
    assert m["points"][0]["status"] == "failed" and m["runs"][0]["failed"] == [0]
    assert sweep.main(args) == 1  # retried, not skipped
    assert _manifest(out)["runs"][1]["failed"] == [0]
    # The table: the error whole in its own column, no file for it.
    with open(out / "sweep.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["status"] == "failed" and row["file"] == ""
    assert row["error"] == m["points"][0]["error"].replace("\n", "; ")
    assert "the network splits" in row["error"]


def test_auto_executor_is_local_without_a_launcher(monkeypatch):
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "SLURM_NTASKS",
                "MPI_LOCALNRANKS"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    assert resolve_kind("auto") == "local"
    monkeypatch.setenv("PMI_SIZE", "4")
    assert resolve_kind("auto") == "mpi"
    with pytest.raises(ValueError, match="--executor"):
        resolve_kind("threads")


def test_sweep_on_mpi4py_futures_workers(base_file, tmp_path):
    out = tmp_path / "mpi"
    grid = '{"workload.scale": [0.01, 0.02]}'
    cmd = [MPIEXEC, "-n", "3", sys.executable, "-m", "mpi4py.futures", "-m", "simnet",
           "sweep", "--config", str(base_file), "--grid", grid, "--out", str(out)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    m = _manifest(out)
    assert m["complete"] == 2
    assert "mpi4py.futures shared pool, 2 workers" in m["runs"][0]["executor"]
    assert len(list((out / "points").glob("point-*.json"))) == 2


# -- aggregate over what the sweep and simnet wrote ------------------------------------------


def test_aggregate_sweep_points_and_sim_results(base_file, tmp_path, capsys):
    out = tmp_path / "out"
    assert sweep.main(["--config", str(base_file), "--grid", '{"workload.scale": [0.01, 0.02]}',
                       "--out", str(out), "--executor", "serial", "--quiet"]) == 0  # fmt: skip
    from simnet.output import document

    res = simnet.simulate(dict(BASE, workload={"name": "resnet152", "scale": 0.01}))
    write_json(tmp_path / "sim" / "sim_results.json", document(res))
    (tmp_path / "sim" / "notes.json").write_text("[1, 2")  # unreadable
    prefix = tmp_path / "table"
    rc = aggregate.main([str(out / "points"), str(tmp_path / "sim" / "*.json"), "-o",
                         str(prefix), "--quiet"])  # fmt: skip
    assert rc == 0
    err = capsys.readouterr().err
    assert "notes.json: unreadable: not valid JSON" in err
    doc = json.loads((tmp_path / "table.json").read_text())
    rows = doc["rows"]
    assert [(r["model"], r["world_size"], r["scale"]) for r in rows] == [
        ("dlrm", 8, 0.01),
        ("dlrm", 8, 0.02),
        ("resnet152", 8, 0.01),
    ]
    assert all(r["kind"] == "predicted" for r in rows)
    assert rows[2]["iteration_time_s"] == res.iteration_time_s
    assert rows[2]["samples_per_iteration"] == 128 * 8
    assert rows[2]["throughput_samples_per_s"] == 128 * 8 / res.iteration_time_s
    assert rows[0]["throughput_samples_per_s"] == 2048 / rows[0]["iteration_time_s"]
    assert doc["ignored"] == [
        {"file": str(tmp_path / "sim" / "notes.json"),
         "reason": "unreadable: not valid JSON (Expecting ',' delimiter, line 1)"}
    ]  # fmt: skip
    lines = (tmp_path / "table.csv").read_text().splitlines()
    assert lines[0].startswith("kind,model,world_size,args,scale,network,iteration_time_s")
    assert [r["network"] for r in rows] == ["hierarchical 8"] * 3
    assert len(lines) == 4
    assert aggregate.main([str(tmp_path / "nothing-here"), "-o", str(prefix)]) == 2


class _InterruptedPool(Executor):
    """A process pool: Ctrl-C while the second point is being submitted (not started);
    the first point's worker was writing its file then and finishes it during the
    shutdown."""

    _max_workers = 4  # (as a ProcessPoolExecutor says its size)

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def submit(self, fn, /, *args, **kwargs):
        self.calls.append(args)
        if len(self.calls) == 2:
            raise KeyboardInterrupt
        from concurrent.futures import Future

        return Future()  # running

    def shutdown(self, wait=True, *, cancel_futures=False):
        simulate_point(*self.calls[0])


def test_a_point_finished_during_an_interrupt_is_counted_complete(base_file, tmp_path, capsys):
    out = tmp_path / "out"
    plan = sweep.plan_sweep(base_file, json.dumps(GRID), out)
    said: list[str] = []
    assert sweep.run_plan(plan, _InterruptedPool(), "test", said.append) == 130
    assert said[-1] == (
        "interrupted: 1 of 4 points complete (in sweep.csv; the others pending); run the "
        "same command again to finish the others"
    )
    m = _manifest(out)
    assert m["complete"] == 1 and m["pending"] == 3
    assert m["runs"][0]["interrupted"] is True and m["runs"][0]["computed"] == [0]
    assert [p["status"] for p in m["points"]] == ["complete", "pending", "pending", "pending"]
    # The table so far: the complete point's figures, the others pending and empty.
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert [r["status"] for r in rows] == ["complete", "pending", "pending", "pending"]
    point = json.loads((out / m["points"][0]["file"]).read_text())
    assert float(rows[0]["iteration_time_s"]) == point["result"]["iteration_time_s"]
    assert rows[1]["iteration_time_s"] == "" and rows[1]["file"] == ""
    assert "pending" in (out / "sweep.txt").read_text()


def test_sigterm_records_the_sweep_and_leaves_no_worker(tmp_path):
    # kill, timeout and a Slurm time limit send SIGTERM to the driver alone: it records
    # what finished, as on Ctrl-C, and its pool's workers end with it (they were left
    # waiting forever on their queue).
    import signal
    import time

    import psutil

    base = tmp_path / "base.json"
    base.write_text(json.dumps({
        "topology": {"type": "fat_tree", "k": 16},
        "workload": {"name": "resnet152", "world_size": 1024, "iterations": 20},
    }))  # fmt: skip
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "simnet", "sweep", "--config", str(base), "--grid",
         '{"workload.scale": [0.5, 0.6, 0.7, 0.8]}', "--out", str(out), "--workers", "2"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        driver = psutil.Process(proc.pid)
        while len(driver.children()) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        workers = driver.children()
        assert len(workers) == 2
        time.sleep(1.0)  # (into the points)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "terminated: stopping the points being simulated" in err
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive
    run = _manifest(out)["runs"][0]
    assert run["interrupted"] is True and run["finished"] is not None
    # SIGKILL leaves the driver no say: its workers still end (they ask the kernel for a
    # signal when their parent dies).
    proc = subprocess.Popen(
        [sys.executable, "-m", "simnet", "sweep", "--config", str(base), "--grid",
         '{"workload.scale": [0.9, 1.0]}', "--out", str(out), "--workers", "2"],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        driver = psutil.Process(proc.pid)
        deadline = time.monotonic() + 60
        while len(driver.children()) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        workers = driver.children()
        assert len(workers) == 2
        proc.kill()
        proc.wait(timeout=30)
    finally:
        proc.kill()
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive


def test_aggregate_names_a_points_grid_keys_and_the_jobs_scales(base_file, tmp_path, capsys):
    out = tmp_path / "out"
    grid = '{"topology.num_nodes": [8, 16]}'  # not a column of the table
    assert sweep.main(["--config", str(base_file), "--grid", grid, "--out", str(out),
                       "--executor", "serial", "--quiet"]) == 0  # fmt: skip
    from simnet.output import document

    two = {
        "distributed": {"num_nodes": 4},
        "topology": {"type": "switch", "num_nodes": 4},
        "jobs": [
            {"name": "a", "workload": {"name": "dlrm", "world_size": 2, "scale": 0.05}},
            {"name": "b", "workload": {"name": "dlrm", "world_size": 2, "scale": 0.02}},
        ],
    }
    write_json(tmp_path / "sim" / "sim_results.json", document(simnet.simulate(two)))
    prefix = tmp_path / "table"
    args = [str(out / "points"), str(tmp_path / "sim"), str(tmp_path / "nothing.json")]
    assert aggregate.main([*args, "-o", str(prefix), "--quiet"]) == 0
    rows = json.loads((tmp_path / "table.json").read_text())["rows"]
    assert [(r["scale"], r.get("point")) for r in rows] == [
        (0.01, "topology.num_nodes=16"),  # (by the point's text)
        (0.01, "topology.num_nodes=8"),
        ("0.02/0.05", None),
    ]
    assert "(3 rows, 0 files left out; 1 inputs matched no file)" in capsys.readouterr().err


def test_a_sweep_into_a_folder_of_another_sweep_says_so_and_aggregate_keeps_them_apart(
    base_file, tmp_path, capsys
):
    # The same folder, a changed base: the first sweep's point stays on disk, is said,
    # and aggregate reads the last sweep's point only (it listed both, with no word).
    out = tmp_path / "w"
    grid = json.dumps({"workload.scale": [0.01]})
    args = ["--config", str(base_file), "--grid", grid, "--out", str(out),
            "--executor", "serial"]  # fmt: skip
    assert sweep.main(args) == 0
    changed = tmp_path / "base_c.json"
    slow = {"num_nodes": 8, "bandwidth_limit_gb_per_s": 0.5}
    changed.write_text(json.dumps({**BASE, "distributed": slow}))
    capsys.readouterr()
    assert sweep.main(["--config", str(changed), *args[2:]]) == 0
    err = capsys.readouterr().err
    assert f"note: {out / 'points'} also holds 1 point file(s) of earlier sweeps" in err
    assert "wrote sweep.csv, sweep.txt to" in err and "(1 simulated now, 0 from earlier" in err
    runs = _manifest(out)["runs"]
    assert [r["base_config"] for r in runs] == [str(base_file), str(changed)]
    assert runs[0]["base_config_hash"] != runs[1]["base_config_hash"] is not None
    rc = aggregate.main([str(out), "-o", str(tmp_path / "agg"), "--quiet"])
    assert rc == 0
    rows = json.loads((tmp_path / "agg.json").read_text())["rows"]
    assert len(rows) == 1
    assert rows[0]["iteration_time_s"] == simnet.simulate(changed).iteration_time_s
    assert "a point of an earlier sweep into this folder" in capsys.readouterr().err


def test_a_grid_giving_one_configuration_twice_is_refused(base_file, tmp_path, capsys):
    grid = json.dumps({"workload.scale": [0.1, 0.1]})
    rc = sweep.main(["--config", str(base_file), "--grid", grid, "--out", str(tmp_path / "d")])
    assert rc == 2
    assert (
        'error: --grid: points 0 {"workload.scale": 0.1} and 1 {"workload.scale": 0.1} are '
        "the same configuration: give each value once"
    ) in capsys.readouterr().err


def test_aggregate_refuses_an_output_it_cannot_write_and_says_what_it_found(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    assert aggregate.main([str(tmp_path), "-o", str(tmp_path / "afile" / "x")]) == 2
    assert "afile is a file, not a folder" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "RUN_INCOMPLETE.txt").write_text("")
    assert aggregate.main([str(empty), "-o", str(tmp_path / "agg")]) == 2
    err = capsys.readouterr().err
    assert f"warning: {empty}: a folder without JSON files" in err
    assert f"warning: {empty} holds RUN_INCOMPLETE.txt: the run that wrote it did not finish" in err
    assert aggregate.main([str(tmp_path / "nothing_here"), "-o", str(tmp_path / "agg")]) == 2
    assert "nothing_here: no such file, directory or match" in capsys.readouterr().err


def test_a_point_of_an_older_simulator_is_simulated_again(base_file, tmp_path, capsys):
    out = tmp_path / "v"
    args = ["--config", str(base_file), "--grid", json.dumps({"workload.scale": [0.01]}),
            "--out", str(out), "--executor", "serial"]  # fmt: skip
    assert sweep.main(args) == 0
    point = next((out / "points").glob("point-*.json"))
    doc = json.loads(point.read_text())
    assert doc["result_version"] == sweep.RESULT_VERSION
    doc["result_version"] = sweep.RESULT_VERSION - 1
    point.write_text(json.dumps(doc))
    capsys.readouterr()
    assert sweep.main(args) == 0
    assert "0 already complete, 1 to simulate" in capsys.readouterr().err
    assert json.loads(point.read_text())["result_version"] == sweep.RESULT_VERSION


def test_aggregate_finds_an_unfinished_runs_mark_above_its_files(tmp_path, capsys):
    # A study's marker sits in its folder, its results in runs/ below.
    study = tmp_path / "results" / "study"
    (study / "runs").mkdir(parents=True)
    (study / "RUN_INCOMPLETE.txt").write_text("")
    run = {"kind": "simnet-sweep-point", "result": {}}
    (study / "runs" / "x.json").write_text(json.dumps(run))
    aggregate.main([str(tmp_path / "results"), "-o", str(tmp_path / "agg")])
    assert f"warning: {study.resolve()} holds RUN_INCOMPLETE.txt" in capsys.readouterr().err


BIG = {  # a point takes seconds: time to interrupt it
    "topology": {"type": "fat_tree", "k": 16},
    "workload": {"name": "resnet152", "world_size": 1024, "iterations": 20},
}


def _sweep_in_a_group(tmp_path: Path, out: Path, scales: list[float]) -> subprocess.Popen:
    """A sweep of 2 workers in a process group of its own (as a terminal's job, which
    Ctrl-C signals whole), once its workers run."""
    import time

    import psutil

    base = tmp_path / "big.json"
    base.write_text(json.dumps(BIG))
    proc = subprocess.Popen(
        [sys.executable, "-m", "simnet", "sweep", "--config", str(base), "--grid",
         json.dumps({"workload.scale": scales}), "--out", str(out), "--workers", "2"],
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while len(psutil.Process(proc.pid).children()) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # (into the points)
    return proc


def test_ctrl_c_lets_the_running_points_finish_and_starts_no_other(tmp_path):
    # Workers died of the Ctrl-C and then took the queued points: the points running were
    # lost and the ones started after it completed.
    import signal

    out = tmp_path / "out"
    proc = _sweep_in_a_group(tmp_path, out, [0.5, 0.6, 0.7, 0.8])
    try:
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert (
        "interrupted: no other point starts; waiting for the 2 being simulated (point 0, "
        "point 1; Ctrl-C again: stop them at once)" in err
    )
    assert err.rstrip().endswith(
        "interrupted: 2 of 4 points complete (in sweep.csv; the others pending); run the "
        "same command again to finish the others"
    )
    assert "Traceback" not in err
    m = _manifest(out)
    assert m["runs"][0]["computed"] == [0, 1] and m["runs"][0]["interrupted"] is True
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert [r["status"] for r in rows] == ["complete", "complete", "pending", "pending"]


def test_a_second_ctrl_c_stops_at_once_and_still_writes_the_table(tmp_path):
    import signal
    import time

    import psutil

    out = tmp_path / "out"
    proc = _sweep_in_a_group(tmp_path, out, [0.5, 0.6, 0.7])
    workers = psutil.Process(proc.pid).children()
    try:
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted again: stopping the points being simulated" in err
    assert err.rstrip().endswith(
        "interrupted: 0 of 3 points complete (in sweep.csv; the others pending; 2 stopped "
        "while being simulated); run the same command again to finish the others"
    )
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive
    run = _manifest(out)["runs"][0]
    assert run["interrupted"] is True and run["finished"] is not None
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert [r["status"] for r in rows] == ["pending"] * 3


def test_sigterm_under_mpi_workers_writes_the_table_and_marks_the_manifest(tmp_path):
    # A Slurm time limit or scancel signals every task: the root (rank 0) records what
    # is complete, as a local pool's driver does.
    import signal
    import time

    import psutil

    base = tmp_path / "big.json"
    base.write_text(json.dumps(BIG))
    out = tmp_path / "mpi"
    proc = subprocess.Popen(
        [MPIEXEC, "-n", "3", sys.executable, "-m", "mpi4py.futures", "-m", "simnet",
         "sweep", "--config", str(base), "--grid", '{"workload.scale": [0.5, 0.6, 0.7]}',
         "--out", str(out)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (out / "manifest.json").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2.0)  # (into the points)
        ranks = [c for c in psutil.Process(proc.pid).children(recursive=True)
                 if "python" in c.name()]  # fmt: skip
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert "terminated: stopping the points being simulated" in err, err
    assert "interrupted: 0 of 3 points complete (in sweep.csv" in err
    run = _manifest(out)["runs"][0]
    assert run["interrupted"] is True and run["finished"] is not None
    assert [r["status"] for r in csv.DictReader((out / "sweep.csv").open())] == ["pending"] * 3
    _, alive = psutil.wait_procs(ranks, timeout=10)
    assert not alive


def test_a_sweep_into_a_folder_another_run_writes_is_refused(base_file, tmp_path):
    from workload.results import lock_output_dir, release_output_dir

    out = tmp_path / "out"
    assert lock_output_dir(out) is None  # (this process: the other run)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "simnet", "sweep", "--config", str(base_file), "--grid",
             '{"workload.scale": [0.01]}', "--out", str(out), "--executor", "serial"],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        release_output_dir(out)
    assert r.returncode == 2
    assert r.stderr == (
        f"error: {out} is in use: another run is writing its results there; wait for it "
        "to finish or choose another --out\n"
    )
    assert not (out / "manifest.json").exists()


def _slow_point(seconds: float) -> PointOutcome:
    import time

    time.sleep(seconds)
    return PointOutcome(error="slept", kind="exception")


def test_running_tasks_are_said_while_they_run(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from workflows.study import pool as study_pool

    monkeypatch.setattr(study_pool, "PROGRESS_EVERY_S", 0.4)
    lines: list[str] = []
    got: list[str] = []
    with ThreadPoolExecutor(max_workers=2) as ex:
        run = study_pool.run_tasks(
            ex,
            [("a", _slow_point, (1.5,)), ("b", _slow_point, (1.5,)), ("c", _slow_point, (0,))],
            lambda key, _res: got.append(key),
            stop=study_pool.Interrupts(),
            say=lines.append,
            progress=lines.append,
            describe=lambda k: f"point {k}",
        )
    assert run.interrupted is None and sorted(got) == ["a", "b", "c"]
    assert any(re.fullmatch(r"\[ +\d+\.\d s\] simulating point a \(\d+ s\), point b \(\d+ s\)",
                            ln) for ln in lines), lines  # fmt: skip


def test_aggregate_of_a_glob_reads_only_json_files(base_file, tmp_path, capsys):
    out = tmp_path / "sw"
    assert sweep.main(["--config", str(base_file), "--grid", '{"workload.scale": [0.01]}',
                       "--out", str(out), "--executor", "serial"]) == 0  # fmt: skip
    capsys.readouterr()
    pattern = f"{out}/**"
    assert aggregate.main([pattern, "-o", str(tmp_path / "agg"), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"note: {pattern}: passed over 2 matching file(s) not *.json" in err
    assert "sweep.csv" not in err and "not valid JSON" not in err


def _interrupted_point() -> PointOutcome:
    raise KeyboardInterrupt  # (as a Ctrl-C that reached the worker running it)


def _point_ok() -> PointOutcome:
    return PointOutcome()


def test_a_ctrl_c_that_reaches_a_worker_loses_its_point_and_is_no_second_ctrl_c():
    # Under MPI every rank gets Ctrl-C: a worker's task ends in KeyboardInterrupt, whose
    # result re-raised it in the driver, taken there for a second Ctrl-C (stop all at
    # once), with the task counted nowhere.
    from concurrent.futures import ThreadPoolExecutor

    from workflows.study import pool as study_pool

    got: list[str] = []
    with ThreadPoolExecutor(max_workers=2) as ex:
        run = study_pool.run_tasks(
            ex,
            [("a", _interrupted_point, ()), ("b", _slow_point, (0.3,))],
            lambda key, _res: got.append(key),
            stop=study_pool.Interrupts(),
            say=lambda _line: None,
        )
    assert run.interrupted == "ctrl-c" and run.lost == ["a"] and got == ["b"]


def test_a_second_ctrl_c_inside_a_serial_task_loses_that_task_said():
    # A serial executor runs the task inside submit: a second Ctrl-C there came before the
    # task was counted running, and the task was in neither `lost` nor `not_started`
    # (scaling then marked the study finished, exit 0, a count never predicted).
    from workflows.study import pool as study_pool

    stop = study_pool.Interrupts()
    got: list[str] = []
    run = study_pool.run_tasks(
        InlineExecutor(),
        [("a", _point_ok, ()), ("b", _interrupted_point, ()), ("c", _point_ok, ())],
        lambda key, _res: got.append(key),
        stop=stop,
        say=lambda _line: None,
    )
    assert got == ["a"]
    assert run.interrupted == "at once" and run.lost == ["b"] and run.not_started == ["c"]


def test_a_ctrl_c_with_nothing_left_to_start_leaves_the_run_complete():
    # The first Ctrl-C while the last tasks run: they finish, and the run is complete
    # (it said interrupted, exit 130, "run again to finish the others", none left).
    from concurrent.futures import ThreadPoolExecutor

    from workflows.study import pool as study_pool

    stop = study_pool.Interrupts()
    got: list[str] = []

    def on_result(key: str, _res: PointOutcome) -> None:
        got.append(key)

    lines: list[str] = []
    with ThreadPoolExecutor(max_workers=2) as ex:
        # Both handed out at once; the Ctrl-C is counted while they run.
        import threading

        threading.Timer(0.2, lambda: setattr(stop, "count", 1)).start()
        run = study_pool.run_tasks(
            ex,
            [("a", _slow_point, (0.5,)), ("b", _slow_point, (1.5,))],
            on_result,
            stop=stop,
            say=lines.append,
        )
    assert sorted(got) == ["a", "b"]
    assert any("interrupted: no other point starts; waiting for the 1" in ln for ln in lines)
    assert run.interrupted is None and not run.lost and not run.not_started
