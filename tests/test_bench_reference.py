"""bench/bench_reference.py's pieces that need no reference checkout: the iteration
counts set in a copy of a source, the figures read from a printout, the per-rank
memory read around an MPI job."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.bench_executor import MPIEXEC, RunError
from bench.bench_reference import (
    CASES,
    TIME,
    patched_source,
    read_rss,
    reference_figures,
    with_memory,
)

SOURCE = """#include <mpi.h>
#define RUNS 512
#define WARM_UP 10
#define RUNSX 3
int main() { return RUNS + WARM_UP; }
"""


def test_the_iteration_counts_are_set_in_the_copy():
    out = patched_source(SOURCE, 7, 1)
    assert "#define RUNS 7\n" in out and "#define WARM_UP 1\n" in out
    assert "#define RUNSX 3" in out and "512" not in out
    with pytest.raises(ValueError, match="WARM_UP"):
        patched_source(SOURCE.replace("#define WARM_UP 10\n", ""), 7, 1)


def test_rank_zeros_figure_of_each_phase_is_read():
    out = "\n".join(
        [
            "Rank = 1, world_size = 2, total_params = 25559081, ResNet-50 data parallelism "
            "(allreduce) runtime for each iteration = 0.200000 s",
            "Rank = 0, world_size = 2, total_params = 25559081, ResNet-50 data parallelism "
            "(allreduce) runtime for each iteration = 0.115813 s",
            "Rank = 0, world_size = 2, total_params = 25559081, ResNet-50 data parallelism "
            "(neighbors in ring) runtime for each iteration = 0.022745 s",
        ]
    )
    assert reference_figures(CASES["resnet50"], out) == {"allreduce": 0.115813, "ring": 0.022745}
    # ResNet-152's rank 0 prints its figure on a line of its own, without a rank.
    line = "ResNet-152 with pure data parallelism runtime for each iteration = 1.5e-01 s. "
    assert reference_figures(CASES["resnet152"], line) == {"iteration": 0.15}
    with pytest.raises(RunError, match="DLRM"):
        reference_figures(CASES["dlrm"], out)


@pytest.mark.skipif(
    not (Path(TIME).is_file() and shutil.which(MPIEXEC)), reason="needs /usr/bin/time, mpiexec"
)
def test_every_ranks_peak_memory_is_read(tmp_path):
    # Rank 1 holds 64 MiB more than rank 0.
    prog = (
        "import os; e = os.environ; "
        "b = bytearray((64 << 20) * int(e.get('PMI_RANK') or e['OMPI_COMM_WORLD_RANK']))"
    )
    cmd = with_memory([MPIEXEC, "-n", "2", sys.executable, "-c", prog], tmp_path)
    subprocess.run(cmd, check=True, timeout=60, capture_output=True)
    rss = read_rss(tmp_path, 2)
    assert 60 << 20 < rss[1] - rss[0] < 68 << 20
