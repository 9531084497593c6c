"""bench/fingerprint.py: digests that move with every output, and the comparison."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

import simnet
from bench import fingerprint

ROOT = Path(__file__).resolve().parent.parent

TINY = {
    "distributed": {"num_nodes": 4, "bandwidth_limit_gb_per_s": 1.0},
    "topology": {"type": "switch", "num_nodes": 4},
    "workload": {"name": "dlrm", "scale": 0.02},
}


@pytest.fixture(scope="module")
def phase():
    return simnet.simulate(TINY, record_series=True).phases[0]


def _one_more(d: dict, bump):
    """``d`` with its first value changed by ``bump``."""
    k = next(iter(d))
    return {**d, k: bump(d[k])}


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("iteration_time_s", lambda v: v * (1 + 1e-15)),
        ("per_rank", lambda v: [{**v[0], "comm_s": v[0]["comm_s"] + 1e-18}, *v[1:]]),
        ("pair_bytes", lambda v: _one_more(v, lambda b: b + 1)),
        ("pair_busy", lambda v: _one_more(v, lambda s: s + 1e-18)),
        ("link_bytes", lambda v: _one_more(v, lambda b: b + 1)),
        ("link_busy_s", lambda v: _one_more(v, lambda s: s + 1e-18)),
        ("link_series", lambda v: _one_more(v, lambda s: [*s, (1.0, 0.0)])),
        ("messages", lambda v: v + 1),
    ],
)
def test_each_output_moves_its_own_digest_only(phase, field, change):
    """A change to one output, down to the last bit of one float, changes that output's
    digest and no other."""
    before = fingerprint._phase_digests(phase)
    assert getattr(phase, field)  # the tiny case has something in every output
    after = fingerprint._phase_digests(
        dataclasses.replace(phase, **{field: change(getattr(phase, field))})
    )
    assert {k for k in before if before[k] != after[k]} == {field}


def test_the_same_tree_compares_equal():
    """--against a checkout with the same code: every digest equal, exit 0."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fingerprint.py"), "--cases", "ring64",
         "--against", str(ROOT)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"all 1 digests equal to {ROOT}'s" in r.stdout


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("fat12", "the fat-tree cases are fat1024, fat4096, fat16384"),
        ("fly100", "the dragonfly cases are fly1024, fly4096, fly16384"),
        ("fatsync64", "the calibrated fat-tree cases are fatsync256, fatsync1024"),
        ("fathost2", "the host-cost fat-tree cases are fathost1024, fathost4096"),
        ("ringx", "fatN, fathostN, fatsyncN, railN, flyN, ringN, gpt3_384 or examples"),
        ("ring1", "fatN, fathostN, fatsyncN, railN, flyN, ringN, gpt3_384 or examples"),
    ],
)
def test_an_unknown_case_is_refused(name, says):
    with pytest.raises(SystemExit, match=f"unknown case '{name}': {says}"):
        fingerprint._config_cases(name)
