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
