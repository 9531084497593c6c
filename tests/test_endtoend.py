"""The config-driven end-to-end job: ring trainer over MPI, prediction, comparison."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from simnet.config import Config, ConfigError, current_key, load_config, ring_orders
from workload.collectives import build_schedule
from workload.models.alexnet import alexnet_params

from .mpirun import run_without_cache

ROOT = Path(__file__).resolve().parents[1]


def test_seed_config_loads_unchanged():
    raw = json.loads((ROOT / "config.json").read_text())
    assert set(raw) == {"model", "training", "distributed", "topology", "logging"}
    cfg = load_config(ROOT / "config.json")
    assert cfg.distributed.num_nodes == 10
    assert cfg.distributed.bandwidth_limit_gb_per_s == 10.0
    assert cfg.topology.permutations == [0, 5]
    assert cfg.world_size == 10
    assert cfg.workload.name == "alexnet_ring"
    # Round trip: what the file says is what the model holds.
    dumped = cfg.model_dump()
    for section, values in raw.items():
        for key, value in values.items():
            # renamed fields (their unit added) hold the old names' values
            field = current_key(f"{section}.{key}").split(".", 1)[1]
            assert dumped[section][field] == value


def test_extensions_have_defaults_and_units():
    cfg = Config()
    assert cfg.topology.link_latency_us == 5.0
    assert cfg.network.eager_threshold_bytes == 65536
    cfg = load_config(
        {
            "topology": {
                "type": "hierarchical",
                "num_nodes": 8,
                "group_size": 4,
                "intra_bandwidth_gb_per_s": 100,
                "inter_bandwidth_gb_per_s": 12.5,
            },
            "collectives": {"algorithm": "hierarchical"},
            "distributed": {"num_nodes": 8, "buffer_size_bytes": 1 << 20},
        }
    )
    assert cfg.topology.group_size == 4


def test_unknown_keys_rejected_by_name():
    with pytest.raises(ConfigError, match=r"training\.epochs: unknown key"):
        load_config({"training": {"epochs": 3}})


def test_alexnet_parameter_count():
    # torchvision's AlexNet has 61,100,840 parameters with 1000 classes.
    assert alexnet_params(3, 1000) == 61_100_840
    assert alexnet_params(3, 10) == 61_100_840 - 4096 * 990 - 990
    assert alexnet_params(1, 10) == alexnet_params(3, 10) - 2 * 64 * 11 * 11


def test_ring_permutation_meaning():
    assert ring_orders([0, 2], 4) == [[0, 1, 2, 3], [2, 3, 0, 1]]
    assert ring_orders([[0, 3, 2, 1]], 4) == [[0, 3, 2, 1]]
    for bad, msg in (
        ([4], "a rotation must be in 0..3"),
        ([0, 0], "repeats ring 0"),
        ([[0, 1, 1, 2]], "exactly once"),
        ([], "at least one ring"),
    ):
        with pytest.raises(ValueError, match=msg):
            ring_orders(bad, 4)


def test_multiring_splits_data_evenly_over_the_rings():
    rings = ring_orders([0, [0, 3, 2, 1]], 4)
    s = build_schedule("reduce_scatter", "multiring", 4, 1000, rings=rings)
    pairs = s.pair_bytes()
    # Ring 0 sends i -> i+1, ring 1 sends i -> i-1: each carries half of the data.
    forward = sum(b for (a, c), b in pairs.items() if c == (a + 1) % 4)
    backward = sum(b for (a, c), b in pairs.items() if c == (a - 1) % 4)
    assert forward == backward == 3 * 4 * 1000 * 4 // 2  # (p-1) blocks per rank, 4 ranks


def quick_config(tmp_path: Path, **over) -> Path:
    cfg = {
        "model": {"input_channels": 3, "num_classes": 10},
        "training": {
            "batch_size": 32,
            "num_epochs": 2,
            "steps_per_epoch": 3,
            "learning_rate": 0.001,
            "compute_us_per_step": 1000,
        },
        "distributed": {"num_nodes": 4, "bandwidth_limit_gb_per_s": 10.0},
        "topology": {"type": "ring", "num_nodes": 4, "permutations": [0, [0, 3, 2, 1]]},
        "logging": {"log_dir": str(tmp_path / "out")},
        "workload": {"scale": 0.01},
    }
    for key, value in over.items():
        cfg[key].update(value)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def run_job(config: Path, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    # Without a host model unless asked: calibrating this host takes about 30 s.
    extra = extra or ("--no-host-model",)
    return subprocess.run(
        [sys.executable, "-m", "workflows.endtoend", "--config", str(config), *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_real_run_matches_prediction_to_the_byte(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    # An earlier run of three epochs left its third epoch's files: this run writes two.
    (out / "traffic_epoch_3.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (out / "traffic_epoch_3_allgather_bytes.csv").write_text("src\\dst,0\n0,0\n")
    r = run_job(quick_config(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert not list(out.glob("traffic_epoch_3*"))
    assert not (out / "RUN_INCOMPLETE.txt").exists()  # a finished run takes it away
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["equal"] is True
    measured = json.loads((out / "measured.json").read_text())
    block = -(-round(57_044_810 * 0.01) // 4)
    for e in measured["epochs"]:
        for phase in ("reduce_scatter", "allgather"):
            m = np.array(e["traffic_bytes"][phase])
            # Each rank sends (p-1) blocks per step, split over two rings
            # going opposite ways, to its two neighbours only.
            assert m.sum() == 3 * 4 * 3 * block * 4
            assert m[0, 2] == 0 and m[0, 1] > 0 and m[0, 3] > 0
    for name in (
        "training_metrics.txt",
        "training_metrics.json",
        "bandwidth_heatmap.png",
        "traffic_epoch_1.png",
        "traffic_epoch_2.png",
        "predicted_traffic_heatmap.png",
        "predicted_bandwidth_heatmap.png",
        "comparison_traffic.csv",
        "bandwidth_matrix_bytes_per_s.csv",
    ):
        assert (out / name).exists(), name
    rows = (out / "traffic_epoch_1_reduce_scatter_bytes.csv").read_text().splitlines()
    assert len(rows) == 5 and all(len(r.split(",")) == 5 for r in rows)
    # Measured bandwidth: none from a rank to itself (an empty cell), the others positive.
    rows = (out / "bandwidth_matrix_bytes_per_s.csv").read_text().splitlines()[1:]
    cells = [r.split(",")[1:] for r in rows]
    assert [cells[i][i] for i in range(4)] == [""] * 4
    assert all(float(c) > 0 for i, row in enumerate(cells) for j, c in enumerate(row) if i != j)
    text = (out / "training_metrics.txt").read_text()
    assert "== bandwidth matrix (GB/s" in text and "total training time" in text
    assert "reduce-scatter" in text and "all-gather" in text
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*.tmp"))
    # aggregate puts the measured steps beside the prediction of the same run.
    from workflows import aggregate

    rows, _ = aggregate.collect(sorted(out.glob("*.json")))
    by_kind = {r["kind"]: r for r in rows}
    assert set(by_kind) == {"measured", "predicted"}
    m, p = by_kind["measured"], by_kind["predicted"]
    assert [m[k] for k in ("model", "world_size", "args", "scale", "phases")] == [
        p[k] for k in ("model", "world_size", "args", "scale", "phases")
    ]
    # The step as the job's "measured per step": the training's total over its steps.
    comparison = json.loads((out / "comparison.json").read_text())
    assert m["iteration_time_s"] == pytest.approx(comparison["time"]["measured_step_s"], rel=1e-12)
    # Without a host model the time block holds the configured network's, and says so.
    time, configured = comparison["time"], comparison["predictions"]["configured"]
    assert time["prediction"] == "configured" and "this_machine" not in comparison["predictions"]
    assert time["predicted_step_s"] == configured["step_time_s"]
    assert [set(e) for e in time["per_epoch"]] == [
        {"epoch", "measured_s", "predicted_s", "configured_s"}
    ] * 2
    assert m["source"].endswith("measured.json")
    assert m["network"] == "measured" and p["network"] == "ring 4"  # the configured one


def test_bandwidth_limit_holds(tmp_path):
    limit_gbps = 0.05  # 50 MB/s: far below what the machine can do
    r = run_job(
        quick_config(
            tmp_path,
            distributed={"bandwidth_limit_gb_per_s": limit_gbps},
            training={"num_epochs": 1, "steps_per_epoch": 2},
        )
    )
    assert r.returncode == 0, r.stdout + r.stderr
    measured = json.loads((tmp_path / "out" / "measured.json").read_text())
    bw = np.array(measured["bandwidth_bytes_per_s"])
    off = bw[~np.eye(4, dtype=bool)]
    assert (off <= limit_gbps * 1e9 * 1.001).all(), off
    assert (off >= limit_gbps * 1e9 * 0.5).all(), off  # the limit, not the machine, binds
    # A step moves (p-1) blocks per rank, half to each neighbour, at 50 MB/s per pair.
    block = -(-round(57_044_810 * 0.01) // 4)
    per_pair_bytes = 2 * 3 * block * 4 / 2
    assert measured["epochs"][0]["step_s"]["min"] >= per_pair_bytes / (limit_gbps * 1e9) * 0.95


def test_buffer_overrun_reported_with_step_and_pair(tmp_path):
    r = run_job(
        quick_config(
            tmp_path,
            distributed={"buffer_size_bytes": 1000},
            training={"num_epochs": 1, "steps_per_epoch": 1},
        )
    )
    assert r.returncode == 0, r.stdout + r.stderr
    text = (tmp_path / "out" / "training_metrics.txt").read_text()
    assert "buffer overrun: reduce_scatter rank 0 -> rank 1:" in text
    # A ring's reduce-scatter sends p - 1 = 3 blocks to the next rank per step: over the
    # timed step and the warm-up's, 6 times, and said to count all of them.
    assert "> buffer 1000 B, first in training step 0; 6 such transfers in all (every " in text
    assert "ring step of every ring and training step, the warm-up step's included)" in text


def _left_running(tmp_path: Path, within_s: float = 20.0) -> str:
    """The trainer processes of this test still running after up to ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        left = subprocess.run(
            ["pgrep", "-f", f"ring_trainer.*{tmp_path}"], capture_output=True, text=True
        ).stdout.strip()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def start_long_job(tmp_path: Path) -> subprocess.Popen[str]:
    """The main job on a config that trains for minutes, in its own session; returns
    once its MPI processes have had time to start."""
    cfg = quick_config(tmp_path, training={"num_epochs": 50, "steps_per_epoch": 50})
    proc = subprocess.Popen(
        [sys.executable, "-m", "workflows.endtoend", "--config", str(cfg), "--no-host-model"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    time.sleep(6)
    return proc


def test_ctrl_c_stops_everything_and_leaves_no_partial_file(tmp_path):
    proc = start_long_job(tmp_path)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "interrupted (Ctrl-C): every process stopped" in err
    assert _left_running(tmp_path, within_s=0) == ""
    outdir = tmp_path / "out"
    assert "RUN_INCOMPLETE.txt marks the folder" in err
    assert "has not finished" in (outdir / "RUN_INCOMPLETE.txt").read_text()
    assert not [p for p in outdir.iterdir() if p.name.endswith(".tmp")]
    assert not (outdir / "training_metrics.json").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_kill_or_hangup_stops_everything(tmp_path, sig):
    """``kill PID`` or a closed terminal: the job stops its MPI processes too."""
    proc = start_long_job(tmp_path)
    proc.send_signal(sig)  # the job's own process only, as `kill PID` does
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert f"interrupted ({sig.name}): every process stopped" in err  # named, not Ctrl-C
    assert _left_running(tmp_path) == ""


def test_a_killed_job_takes_its_mpi_processes_with_it(tmp_path):
    """SIGKILL cannot be handled: mpiexec gets SIGTERM when its parent dies."""
    proc = start_long_job(tmp_path)
    proc.kill()
    proc.communicate(timeout=10)
    assert _left_running(tmp_path) == ""


def host_params_file(tmp_path: Path, ranks: int, copy_gb_per_s: float) -> Path:
    """A host calibration of known parameters (no measurement)."""
    from simnet.hostparams import HostCalibration, HostParams
    from workflows.hostcal import host_key

    cal = HostCalibration(
        host_key(),  # (made here: one made elsewhere is said to be)
        "2026-01-01T00:00:00+00:00",
        [HostParams(ranks, copy_gb_per_s, 10.0, copy_gb_per_s, 0.0)],
    )
    path = tmp_path / "host.json"
    path.write_text(json.dumps(cal.to_json()))
    return path


def test_both_predictions_side_by_side(tmp_path):
    """The configured network and this machine (a given host model), each with its
    error against the measurement, and the line saying which one is meant to match."""
    cfg = quick_config(tmp_path, training={"num_epochs": 1, "steps_per_epoch": 2})
    r = run_job(cfg, "--host-params", str(host_params_file(tmp_path, 4, 2.0)))
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "out"
    comparison = json.loads((out / "comparison.json").read_text())
    preds = comparison["predictions"]
    measured = comparison["time"]["measured_step_s"]
    for name in ("configured", "this_machine"):
        e = preds[name]
        assert e["error_pct"] == pytest.approx(
            (e["step_time_s"] - measured) / measured * 100, rel=1e-9
        )
    # The time block is the prediction meant to match the run, named: it held the
    # configured network's while the job's text said this machine's was meant.
    time = comparison["time"]
    assert time["prediction"] == "this_machine"
    assert time["predicted_step_s"] == preds["this_machine"]["step_time_s"]
    assert time["error_pct"] == preds["this_machine"]["error_pct"]
    # On one host of 2 GB/s, a ring step moves 4 ranks x (2 rings x a half block) through
    # the host's memory: (p - 1) = 3 such steps per phase, two phases, then 1 ms compute.
    # A step pays the host's 10 us per message once: its messages wait for their
    # receivers with no request-to-send first, the protocol the host's costs are fitted
    # with (a handshake, the configured network's default, paid it twice).
    block = -(-round(57_044_810 * 0.01) // 4) * 4  # bytes
    expect = 2 * 3 * (4 * block / 2e9 + 10e-6) + 1e-3
    assert preds["this_machine"]["step_time_s"] == pytest.approx(expect, rel=1e-6)
    assert comparison["this_machine"]["copy_bandwidth_gb_per_s"] == 2.0
    # Per epoch, both predictions (the plot draws both against the measurement).
    (epoch,) = comparison["time"]["per_epoch"]
    assert epoch["this_machine_s"] == pytest.approx(2 * preds["this_machine"]["step_time_s"])
    assert epoch["configured_s"] == pytest.approx(2 * preds["configured"]["step_time_s"])
    assert epoch["predicted_s"] == epoch["this_machine_s"]
    text = (out / "training_metrics.txt").read_text()
    assert "on the configured network" in text and "on this machine" in text
    assert "this_machine is meant to match the run" in text
    # Operation by operation: the compute, then the reduce-scatter and the all-gather,
    # each ring collective predicted as (p - 1) steps on the host.
    ops = {r["op"]: r for r in comparison["this_machine_ops"]}
    assert ops["forward_backward"]["predicted_s"] == pytest.approx(1e-3)
    for name in ("reduce_scatter", "allgather"):
        assert ops[name]["predicted_s"] == pytest.approx(3 * (4 * block / 2e9 + 10e-6), rel=1e-6)
        assert ops[name]["measured_s"] > 0
    assert "operation by operation" in text
    listed = (out / "main_job_files.txt").read_text().splitlines()
    assert sorted(listed) == sorted(p.name for p in out.iterdir() if p.is_file())
    assert "measured.json" in listed and f"wrote {len(listed)} files to {out}/" in r.stdout


def test_mpiexec_is_taken_beside_the_python_that_runs(tmp_path, monkeypatch):
    from workflows import launcher

    env_bin = tmp_path / "venv" / "bin"
    env_bin.mkdir(parents=True)
    (env_bin / "python3").write_text("")
    monkeypatch.setattr(sys, "executable", str(env_bin / "python3"))
    monkeypatch.setattr(launcher.shutil, "which", lambda name: f"/on/path/{name}")
    assert launcher.mpiexec() == "/on/path/mpiexec"  # none beside it: PATH's
    beside = env_bin / "mpiexec"
    beside.write_text("#!/bin/sh\n")
    beside.chmod(0o755)
    assert launcher.mpiexec() == str(beside)  # an environment that is not activated


def test_the_job_runs_a_proxy_workload_with_both_predictions(tmp_path):
    # `workload.name` a proxy: its real run, both predictions per iteration, the op-by-op
    # comparison on this machine in this_machine/, and one page with the run's pictures.
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "distributed": {"num_nodes": 4, "bandwidth_limit_gb_per_s": 10.0},
                "topology": {"type": "switch", "num_nodes": 4},
                "logging": {"log_dir": str(tmp_path / "out")},
                "workload": {"name": "dlrm", "scale": 0.01, "iterations": 2},
                "training": {"steps_per_epoch": 3},  # the trainer's: said to be unused
            }
        )
    )
    out = tmp_path / "out"
    out.mkdir()
    (out / "earlier_run.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    r = run_job(cfg, "--host-params", str(host_params_file(tmp_path, 4, 2.0)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "note: training.steps_per_epoch: the ring trainer's; the proxy runs its own" in (
        r.stdout + r.stderr
    )
    # The op-by-op comparison on this machine is printed under its heading, as written.
    printed = r.stdout.split("== prediction on this machine (calibrated host), op by op ==")[1]
    assert (out / "this_machine" / "validation.txt").read_text().strip() in printed
    assert not (out / "RUN_INCOMPLETE.txt").exists()
    comparison = json.loads((out / "comparison.json").read_text())
    (phase,) = comparison["phases"]
    assert phase["measured_s"] > 0 and phase["predicted_s"] > 0
    preds = comparison["predictions"]
    assert set(preds) == {"configured", "this_machine"}
    assert preds["configured"]["step_time_s"] == phase["predicted_s"]
    this = json.loads((out / "this_machine" / "validation.json").read_text())
    assert this["prediction"]["on"] == "this_machine"
    page = (out / "report.html").read_text()
    assert '<h2 id="comparison">' in page and "earlier_run" not in page
    assert "predicted_traffic_heatmap.png" in page and "validation_ops.png" in page
    # Every file the run wrote is listed (this_machine/'s and the measurements too), and
    # counted so; the next run into the folder removes them first, nothing else.
    listed = (out / "main_job_files.txt").read_text().splitlines()
    everything = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert sorted(listed) == [n for n in everything if n != "earlier_run.png"]
    assert {"measured_proxy.json", "this_machine/validation.json"} <= set(listed)
    assert f"wrote {len(listed)} files to {out}/" in r.stdout
    from workflows.endtoend import clear_earlier_run

    assert clear_earlier_run(out) and not clear_earlier_run(out)
    assert [p.name for p in out.iterdir()] == ["earlier_run.png"]


def test_this_machine_ignores_the_configured_networks_link_calibration(tmp_path):
    # A link calibration (alpha, bandwidth, latency of the configured links) says nothing
    # of this host: the host model alone makes the prediction on this machine.
    import simnet
    from workflows.machine import ThisMachine, machine_result

    machine = ThisMachine.calibrate(4, print, params_file=str(host_params_file(tmp_path, 4, 2.0)))
    (tmp_path / "lp.json").write_text(json.dumps({"alpha_us": 100}))
    base = {
        "distributed": {"num_nodes": 4, "bandwidth_limit_gb_per_s": 10.0},
        "topology": {"type": "switch", "num_nodes": 4},
        "workload": {"name": "dlrm", "scale": 0.01},
    }
    with_lp = {**base, "network": {"link_params_file": str(tmp_path / "lp.json")}}
    plain = machine_result(load_config(base), machine)
    calibrated = machine_result(load_config(with_lp), machine)
    assert calibrated.iteration_time_s == plain.iteration_time_s
    assert not any("alpha_us = 100" in a for a in calibrated.assumed)
    # The configured network's prediction does use it.
    assert simnet.simulate(with_lp).iteration_time_s > simnet.simulate(base).iteration_time_s


def test_this_machine_ignores_the_configured_hosts_and_uses_the_fitted_protocol(tmp_path):
    # The configuration's hosts (a cluster's ranks per host and its host calibration)
    # are not this host: the prediction neither uses nor cites them.
    import simnet
    from simnet.hostparams import HostCalibration, HostParams
    from workflows.machine import ThisMachine, machine_result

    machine = ThisMachine.calibrate(4, print, params_file=str(host_params_file(tmp_path, 4, 2.0)))
    cluster = tmp_path / "cluster.json"
    cal = HostCalibration({"hostname": "x"}, "2026-01-01T00:00:00+00:00",
                          [HostParams(2, 50.0, 1.0, 50.0, 0.0)])  # fmt: skip
    cluster.write_text(json.dumps(cal.to_json()))
    base = {
        "distributed": {"num_nodes": 2, "bandwidth_limit_gb_per_s": 10.0},
        "topology": {"type": "switch", "num_nodes": 2},
        "workload": {"name": "dlrm", "scale": 0.01},
    }
    with_hosts = {**base, "hosts": {"ranks_per_host": 2, "params_file": str(cluster)}}
    plain = machine_result(load_config(base), machine)
    hosted = machine_result(load_config(with_hosts), machine)
    assert hosted.iteration_time_s == plain.iteration_time_s
    assert not [a for a in hosted.assumed if "cluster.json" in a]  # (it said 50 GB/s)
    # The host's costs were fitted with every message waiting for its receiver and no
    # request-to-send (hostcal.simulate_row, as simnet.collective_time sends them): the
    # prediction sends them so, whatever the configured network's protocol.
    proto = {"eager_threshold_bytes": 0, "rendezvous_handshake": True}
    other = machine_result(load_config({**base, "network": proto}), machine)
    assert other.iteration_time_s == plain.iteration_time_s
    host = machine.params
    from workflows import hostcal

    size = 4 << 20
    fitted = simnet.collective_time(hostcal.host_graph(host), "allreduce", "ring", size)
    shaken = simnet.collective_time(
        hostcal.host_graph(host), "allreduce", "ring", size, eager_threshold_bytes=0,
        rendezvous_handshake=False,
    )  # fmt: skip
    assert shaken == fitted  # threshold 0 (the configuration's least) sends as -1 does


def test_run_training_passes_the_options_after_the_configuration(tmp_path):
    # The script as the README gives it, with its install step stubbed out.
    script = tmp_path / "run_training.sh"
    script.write_text((ROOT / "run_training.sh").read_text())
    (tmp_path / "install.sh").write_text("#!/usr/bin/env bash\nexit 0\n")
    (tmp_path / "install.sh").chmod(0o755)
    r = subprocess.run(
        ["bash", str(script), str(ROOT / "config.json"), "--no-host-model", "--bogus"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    # The job got both options: it refuses the unknown one by name, after parsing the other.
    assert r.returncode == 2, r.stdout + r.stderr
    assert "unrecognized arguments: --bogus" in r.stderr
    assert "--no-host-model" not in r.stderr.split("unrecognized arguments:")[1]


def test_a_host_calibration_made_elsewhere_is_said_to_be(tmp_path):
    # A file from another machine describes that machine: the notes name what differs,
    # and the line saying which prediction is meant to match says whose host it is.
    from simnet.hostparams import HostCalibration, HostParams
    from workflows.hostcal import host_key
    from workflows.machine import ThisMachine

    key = host_key() | {"hostname": "othernode", "cores": 64}
    path = tmp_path / "other.json"
    cal = HostCalibration(key, "2026-01-01T00:00:00+00:00", [HostParams(4, 2.0, 10.0, 2.0, 0.0)])
    path.write_text(json.dumps(cal.to_json()))
    machine = ThisMachine.calibrate(4, print, params_file=str(path))
    here = host_key()
    assert machine.notes == [
        f"the host calibration {path} was not made on this machine: hostname othernode "
        f"(here {here['hostname']}), cores 64 (here {here['cores']})"
    ]
    assert machine.why().startswith(
        "this_machine is meant to match the run, but is predicted on the host its calibration "
        "describes (othernode, 64 cores; not this machine)"
    )
    assert "calibrated here" not in machine.why(beside_configured=False)


def test_a_host_calibration_made_here_with_other_mpi_software_says_only_that(tmp_path):
    from simnet.hostparams import HostCalibration, HostParams
    from workflows.hostcal import host_key
    from workflows.machine import ThisMachine

    key = host_key() | {"mpich": "0.0-old"}
    path = tmp_path / "old.json"
    cal = HostCalibration(key, "2026-01-01T00:00:00+00:00", [HostParams(4, 2.0, 10.0, 2.0, 0.0)])
    path.write_text(json.dumps(cal.to_json()))
    machine = ThisMachine.calibrate(4, print, params_file=str(path))
    assert machine.notes == [
        f"the host calibration {path} was made here with other MPI software: mpich 0.0-old "
        f"(here {host_key()['mpich']})"
    ]
    assert machine.elsewhere is None and "calibrated here" in machine.why()


def test_this_machine_caps_the_ring_trainers_pairs_at_its_pacing(tmp_path):
    # The trainer paces every pair to the limit: below the host's copy rate, the host
    # model's ranks copy no faster (its prediction was 7.5 ms against 56 ms measured at
    # 0.5 GB/s); above it, the limit changes nothing.
    from workflows.machine import ThisMachine, machine_result

    machine = ThisMachine.calibrate(2, print, params_file=str(host_params_file(tmp_path, 2, 20.0)))
    base = {"distributed": {"num_nodes": 2}, "topology": {"type": "ring", "num_nodes": 2},
            "training": {"steps_per_epoch": 1}, "workload": {"scale": 0.1}}  # fmt: skip

    def run(limit: float):
        cfg = {**base, "distributed": {"num_nodes": 2, "bandwidth_limit_gb_per_s": limit}}
        return machine_result(load_config(cfg), machine)

    slow, fast, faster = run(0.5), run(15.0), run(100.0)
    assert (
        "the ring trainer paces every pair to 0.5 GB/s: a rank's copies capped there (the "
        "host copies 20 GB/s for one rank)"
    ) in slow.assumed
    assert not any("paces" in a for a in faster.assumed)
    # Its 1 MiB chunks are said, whatever the limit.
    chunks = (
        "the ring trainer sends every transfer in paced chunks of 1 MiB, the prediction "
        "whole: what the chunks cost beyond their per-message costs is not modelled"
    )
    assert chunks in slow.assumed and chunks in faster.assumed
    assert slow.iteration_time_s > 5 * faster.iteration_time_s
    assert fast.iteration_time_s >= faster.iteration_time_s


def test_a_trainer_world_smaller_than_the_topology_compares_its_ranks_pairs(tmp_path):
    # 2 ranks on the first 2 of 4 ring endpoints: the measured 2 x 2 matrices against the
    # predicted pairs of those endpoints (it was a shapes (2,2) (4,4) traceback).
    cfg = quick_config(
        tmp_path,
        training={"num_epochs": 1, "steps_per_epoch": 2},
        topology={"permutations": [0]},
        workload={"world_size": 2},
    )
    r = run_job(cfg)
    assert r.returncode == 0, r.stdout + r.stderr
    comparison = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert comparison["equal"] is True
    (epoch,) = comparison["epochs"]
    assert epoch["reduce_scatter"]["measured_bytes"] == epoch["reduce_scatter"]["predicted_bytes"]
    assert epoch["reduce_scatter"]["measured_bytes"] > 0


def test_recalibrating_without_a_host_model_is_refused(tmp_path):
    r = run_job(quick_config(tmp_path), "--no-host-model", "--recalibrate")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "error: --recalibrate measures this host for its prediction; --no-host-model makes none"
    )


def test_a_second_job_into_a_running_jobs_folder_is_refused(tmp_path):
    # Two jobs on one log_dir: the second would mix its files with the first's, and the
    # first to finish would remove the marker the other still needs.
    proc = start_long_job(tmp_path)
    try:
        r = run_job(tmp_path / "config.json", timeout=60)
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.strip() == (
            f"error: {tmp_path / 'out'} is in use: another run is writing its results "
            "there; wait for it to finish or choose another --out"
        )
        assert proc.poll() is None  # the first runs on, its marker in place
        assert (tmp_path / "out" / "RUN_INCOMPLETE.txt").exists()
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=60)
    assert _left_running(tmp_path) == ""


def test_an_invalid_workload_is_refused_before_the_host_calibration(tmp_path):
    # gpt2 with 4 stages on 6 ranks: refused at once, not after a minute of calibration
    # that also rewrites the shared cache (HOME points elsewhere: no cache is touched).
    cfg = quick_config(
        tmp_path,
        distributed={"num_nodes": 6},
        topology={"type": "switch", "num_nodes": 6, "permutations": [0]},
        workload={"name": "gpt2", "args": [8, 4], "scale": 0.01},
    )
    r = run_without_cache(tmp_path, "workflows.endtoend", "--config", str(cfg))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "the world size must be a multiple of stages=4" in r.stderr
    assert "host model" not in r.stdout  # no calibration started
    assert not (tmp_path / "home").exists()


def test_recalibrating_with_a_given_host_model_is_refused(tmp_path):
    r = run_job(quick_config(tmp_path), "--host-params", "x.json", "--recalibrate")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "error: --recalibrate measures this host for its prediction; --host-params takes "
        "the host model from that file instead"
    )


def _script_copy(tmp_path: Path) -> tuple[Path, Path]:
    """run_training.sh in a folder of its own, its install step a stub that leaves a
    mark; returns the script and the mark."""
    home = tmp_path / "checkout"
    home.mkdir()
    script = home / "run_training.sh"
    script.write_text((ROOT / "run_training.sh").read_text())
    (home / "config.json").write_text((ROOT / "config.json").read_text())
    mark = tmp_path / "installed"
    (home / "install.sh").write_text(f"#!/usr/bin/env bash\ntouch {mark}\n")
    (home / "install.sh").chmod(0o755)
    return script, mark


def _in(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", *argv], capture_output=True, text=True, timeout=60, cwd=cwd,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_run_training_takes_every_path_from_where_it_runs(tmp_path):
    script, _ = _script_copy(tmp_path)
    user = tmp_path / "user"
    user.mkdir()
    (user / "small.json").write_text((ROOT / "config.json").read_text())
    (user / "myout").write_text("a file: the job refuses it by its full name")
    r = _in(user, str(script), "small.json", "--no-host-model", "--out", "myout")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"error: {user / 'myout'} is a file, not a folder" in r.stderr
    (user / "hp.json").write_text("not a calibration")
    r = _in(user, str(script), "small.json", "--host-params", "hp.json", "--out", "o")
    assert r.returncode == 2, r.stdout + r.stderr
    assert str(user / "hp.json") in r.stderr and "no such file" not in r.stderr.lower()
    assert not (script.parent / "o").exists()
    assert not (user / "o").exists()  # the wrong file refused before any work


def test_run_training_options_without_a_configuration_use_the_default_one(tmp_path):
    script, mark = _script_copy(tmp_path)
    user = tmp_path / "user"
    user.mkdir()
    (user / "myout").write_text("a file")
    r = _in(user, str(script), "--no-host-model", "--out", "myout")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(f"error: {user / 'myout'} is a file")
    # --help: the job's help, without installing (this checkout's imports are there).
    mark.unlink()
    r = _in(user, str(script), "--help")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("usage: python -m workflows.endtoend")
    assert not mark.exists()


def test_no_per_message_overhead_is_said_only_when_there_is_none(tmp_path):
    # The host model's prediction charges a cost per message (the host's copy latency,
    # the sender's overhead): its assumptions must not also say there is none.
    from simnet.simulate import simulate
    from workflows.machine import ThisMachine, machine_result

    note = "no per-message overhead (network.alpha_us = 0)"
    cfg = load_config(quick_config(tmp_path, training={"num_epochs": 1, "steps_per_epoch": 1}))
    assert note in simulate(cfg).assumed  # the configured network: alpha 0, as said
    with_o = cfg.model_copy(
        update={"network": cfg.network.model_copy(update={"send_overhead_us": 5.0})}
    )
    assert note not in simulate(with_o).assumed
    machine = ThisMachine.calibrate(
        4, lambda _: None, params_file=str(host_params_file(tmp_path, 4, 5.0))
    )
    res = machine_result(cfg, machine)
    assert note not in res.assumed
    assert any("us per message" in a for a in res.assumed)  # the host's cost, said instead


def test_ctrl_c_in_the_host_calibration_claims_no_marker(tmp_path, monkeypatch, capsys):
    # Interrupted before the run started: no RUN_INCOMPLETE.txt exists, and none is named.
    from workflows import endtoend
    from workflows.machine import ThisMachine

    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(ThisMachine, "calibrate", interrupted)
    rc = endtoend.main(["--config", str(quick_config(tmp_path))])
    err = capsys.readouterr().err
    assert rc == 130
    assert not (tmp_path / "out" / "RUN_INCOMPLETE.txt").exists()
    assert "RUN_INCOMPLETE.txt" not in err
    assert "interrupted (Ctrl-C): every process stopped; nothing was written" in err


def test_sigterm_stops_the_commands_anywhere_in_their_run():
    # Killed while predicting or writing (no subprocess running), the main job exited 143
    # with no word: SIGTERM and SIGHUP are interrupts for the whole of each command's run.
    from workflows import endtoend, hostcal, suite, validate
    from workflows.launcher import interrupt_cause, stops_on_signals

    for main in (endtoend.main, validate.main, suite.main, hostcal.main):
        assert main.__wrapped__ is not None

    @stops_on_signals
    def predicting() -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # (the handler raises first)
        return 0

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt) as e:
        predicting()
    assert interrupt_cause(e.value) == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before
