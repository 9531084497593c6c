"""The example configurations in examples/ load and simulate as the README says."""

from __future__ import annotations

from pathlib import Path

import pytest

from simnet.output import write_all
from simnet.simulate import simulate

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.json"))


def test_there_are_examples():
    assert {p.name for p in EXAMPLES} >= {
        "gpu_cluster.json",
        "two_jobs.json",
        "dragonfly_whatif.json",
        "llama2_70b.json",
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_simulates_and_reports(path, tmp_path):
    res = simulate(str(path))
    assert res.iteration_time_s > 0
    files = write_all(res, tmp_path)
    assert tmp_path / "report.html" in files
    if path.stem == "two_jobs":
        assert [j.name for j in res.jobs.jobs] == ["train", "tune"]
    if path.stem == "dragonfly_whatif":
        assert any("rerouted" in s for s in res.scenario)
    if path.stem == "gpu_cluster":
        assert res.phases[0].algorithms == {"allreduce": ["nccl_ring"]}
        assert not [a for a in res.assumed if "laid out as one node" in a]
        # Every tensor-parallel group on one node's NVLink: no tp byte on a NIC.
        node = {r: ep // 8 for r, ep in enumerate(res.config.topology.placement)}
        for members in res.workload.groups["tp"]:
            assert len({node[r] for r in members}) == 1
    if path.stem == "llama2_70b":
        # tp 8 inside each node of 8: every tensor-parallel byte stays in its group.
        assert res.workload.groups["tp"][1] == tuple(range(8, 16))
        assert res.workload.info["global_batch"] == 32
        assert res.phases[0].wire_bytes_by_group["tp"] > 0
