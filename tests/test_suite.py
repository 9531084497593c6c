"""The validation suite (workflows.suite) on one tiny case, with a given host model:
it runs the proxy for real, predicts it on this machine and writes its files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from simnet.hostparams import HostCalibration, HostParams
from workflows import suite


def test_geomean_of_errors():
    assert suite.geomean([10.0, 40.0]) == pytest.approx(20.0)
    assert suite.geomean([0.0, 100.0]) == pytest.approx(1.0)  # 0 counts as 0.01


def test_unknown_cases_are_refused_naming_the_suite():
    with pytest.raises(ValueError, match="nope not in the suite; its cases: gpt2"):
        suite.select("dlrm,nope")


def test_tiny_suite_case_runs_and_writes_its_files(tmp_path):
    cal = HostCalibration(
        {"hostname": "test", "cores": 2},
        "2026-01-01T00:00:00+00:00",
        [HostParams(4, 10.0, 100.0, 5.0, 1e-10, 200.0)],
    )
    params = tmp_path / "host.json"
    params.write_text(json.dumps(cal.to_json()))
    out = tmp_path / "suite"
    r = subprocess.run(
        [sys.executable, "-m", "simnet", "validate", "--suite", "--cases", "dlrm",
         "--iters", "2", "--warmup", "0", "--host-params", str(params), "--out", str(out)],
        capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "validation_suite.json").read_text())
    (case,) = doc["cases"]
    assert case["model"] == "dlrm" and case["world_size"] == 4
    m, p = case["measured_s"], case["predicted_s"]
    assert m > 0 and p > 0
    assert case["error_pct"] == pytest.approx((p - m) / m * 100)
    # One case: its |error|, floored at 0.01% as every error in the geometric mean (a
    # prediction can match a measurement closer than that: 0.0016% was seen).
    assert doc["geomean_abs_error_pct"] == pytest.approx(max(abs(case["error_pct"]), 0.01))
    assert doc["worst"]["case"] == case["case"]
    assert doc["machine"]["4"]["copy_bandwidth_gb_per_s"] == 10.0
    for name in ("validation_suite.csv", "validation_suite.txt", "validation_suite.png"):
        assert (out / name).stat().st_size > 0, name
    # The case's own documents describe the host model it was predicted on, not the
    # configured network.
    one = json.loads((out / case["case"] / "validation.json").read_text())
    assert one["prediction"]["on"] == "this_machine" and one["prediction"]["network"] is None
    assert any(a.startswith("this machine: 4 ranks on one host, copy capacity 10 GB/s")
               for a in one["prediction"]["assumed"])  # fmt: skip
    text = (out / case["case"] / "validation.txt").read_text()
    assert "prediction: this machine's host model (every rank on one host, below)" in text
    assert "geometric mean |error|" in (out / "validation_suite.txt").read_text()


def test_validate_options_the_suite_does_not_use_are_refused(tmp_path):
    # As --cases without --suite is: one line, exit 2, nothing run.
    r = subprocess.run(
        [sys.executable, "-m", "simnet", "validate", "--suite", "--cases", "dlrm", "--np", "2",
         "--iters", "3", "--reuse", "--out", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == (
        "error: --np and --reuse: not for --suite (each case has its own configuration and "
        "ranks, and runs)"
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--iters", "0"], "--iters must be >= 1 (got 0)"),  # (ran each case's own 20)
        (["--iters", "-2"], "--iters must be >= 1 (got -2)"),  # (a SpecError traceback)
        (["--warmup", "-1"], "--warmup must be >= 0 (got -1)"),
        (["--timeout", "nan"], "--timeout must be seconds >= 0 (got nan)"),
        (["--cases", ","], "--cases ',' names no case; its cases: "),  # (ran none, exit 0)
    ],
)
def test_the_suites_counts_and_cases_are_checked_before_any_case(tmp_path, args, message):
    r = subprocess.run(
        [sys.executable, "-m", "simnet", "validate", "--suite", *args, "--out",
         str(tmp_path / "o")],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith(f"error: {message}") and len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_a_case_of_several_phases_shows_each_phase_error():
    # ResNet-50's two phases at +50% and -50% summed to a row of +20% (measured 3.0 and
    # 2.0 ms): the phases are listed under it, and the row is said to be their sum.
    phases = [
        {"phase": "allreduce", "measured_s": 3e-3, "predicted_s": 4.5e-3, "error_pct": 50.0},
        {"phase": "ring", "measured_s": 2e-3, "predicted_s": 1e-3, "error_pct": -50.0},
    ]
    row = {"case": "resnet50 (4 ranks)", "world_size": 4, "measured_s": 5e-3, "predicted_s": 6e-3,
           "error_pct": 20.0, "phases": phases, "labels": [], "dir": "d"}  # fmt: skip
    doc = {"cases": [row], "failed": [], "not_in_suite": {}, "geomean_abs_error_pct": 20.0,
           "worst_abs_error_pct": 20.0, "worst": row}  # fmt: skip
    lines = suite.summary_text(doc).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("resnet50 (4 ranks)"))
    assert lines[at].split()[-3:] == ["5.000", "6.000", "+20.0%"]
    assert lines[at + 1].split() == ["phase", "allreduce", "3.000", "4.500", "+50.0%"]
    assert lines[at + 2].split() == ["phase", "ring", "2.000", "1.000", "-50.0%"]
    assert lines[at + 3].startswith("(a case of several phases: its row sums their times")
    assert suite.worst_phase_error_pct(row) == 50.0
