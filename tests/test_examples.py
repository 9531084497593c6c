"""The example configurations in examples/ load and simulate as the README says."""

from __future__ import annotations

import csv
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
        # 4 groups: 6 global links, gw0.1 <-> gw1.0 failed, so 5 carry DLRM's alltoall,
        # each one row a direction, named by its port-to-port edge (its three edges were
        # three rows). Every other link is one edge: of the 148 edges (2 x 32 endpoint,
        # 4 x 4 x 3 local, 3 x 4 x 3 global), 122 rows: less the failed link's 2 edges, its
        # 4 idle router-to-port edges and the other global links' 20.
        with open(tmp_path / "sim_links.csv") as f:
            names = [row["link"] for row in csv.DictReader(f)]
        assert len(names) == len(set(names)) == 122
        assert sorted(n for n in names if "gw" in n) == sorted(
            f"gw{i}.{j}->gw{j}.{i}"
            for i in range(4)
            for j in range(4)
            if i != j and {i, j} != {0, 1}
        )
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
