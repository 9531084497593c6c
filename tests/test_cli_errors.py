"""Usage errors of every command: two lines (the error, then where help is), exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

COMMANDS = [
    ["simnet"],
    *[["simnet", sub] for sub in ("validate", "calibrate-host", "calibrate", "scaling")],
    *[["simnet", sub] for sub in ("sweep", "slurm", "aggregate", "testbed")],
    ["workflows.endtoend"],
    ["proxies.dlrm"],
    ["proxies.ring_trainer"],
]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c))
def test_an_unknown_option_is_two_lines_and_exit_2(cmd):
    r = subprocess.run(
        [sys.executable, "-m", *cmd, "--no-such-option"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2, r.stderr
    # The first problem argparse finds: the unknown option, or a required one missing.
    assert ": error: " in lines[0]
    assert "--no-such-option" in lines[0] or "arguments are required" in lines[0]
    assert lines[1].startswith("(see ") and lines[1].endswith(" --help)")


@pytest.mark.parametrize(
    "args",
    [
        ["simnet", "--config", "{cfg}"],
        ["simnet", "validate", "--config", "{cfg}"],
        ["simnet", "validate", "--suite", "--cases", "dlrm"],
        ["simnet", "scaling", "--model", "dlrm", "--np", "2"],
        ["simnet", "testbed", "--config", "{cfg}"],
        ["workflows.endtoend", "--config", "{cfg}", "--no-host-model"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_an_out_that_is_a_file_is_refused_before_any_work(tmp_path, args):
    cfg = tmp_path / "c.json"
    cfg.write_text(
        '{"distributed": {"num_nodes": 2}, "topology": {"type": "switch"}, '
        '"workload": {"name": "dlrm", "scale": 0.01}}'
    )
    taken = tmp_path / "taken"
    taken.write_text("keep me")
    argv = [a.replace("{cfg}", str(cfg)) for a in args]
    r = subprocess.run(
        [sys.executable, "-m", *argv, "--out", str(taken)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{taken} is a file, not a folder: choose another --out" in r.stderr
    assert taken.read_text() == "keep me"
