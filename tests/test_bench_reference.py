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


def _fake_reference(root: Path) -> Path:
    for case in CASES.values():
        (root / case.source).parent.mkdir(parents=True, exist_ok=True)
        (root / case.source).write_text(SOURCE)
    return root


def test_usage_errors_are_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    import bench.bench_reference as br

    monkeypatch.delenv("COMMSIM_REFERENCE_DIR", raising=False)
    monkeypatch.setattr(br, "TIME", sys.executable)  # (any file: only its presence counts)
    out = str(tmp_path / "out.json")

    def error(*args: str) -> str:
        assert br.main([*args, "--out", out]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("error: bench_reference: ")
        return err[0].removeprefix("error: bench_reference: ")

    assert error().startswith("name a checkout of the C++ reference proxies with --reference")
    assert error("--reference", str(tmp_path)) == f"{tmp_path} has no proxies/ folder (not " \
        "the reference?)"  # fmt: skip
    ref = _fake_reference(tmp_path / "ref")
    (ref / "proxies" / "dlrm.cpp").unlink()
    assert error("--reference", str(ref), "--cases", "resnet50,dlrm") == (
        f"{ref / 'proxies' / 'dlrm.cpp'} is missing from the reference checkout"
    )
    # GPT-2 and BERT run 4 stages: on 2 ranks both sides would fail.
    assert error("--reference", str(ref), "--ranks", "2", "--cases", "gpt2,bert") == (
        "no case runs on 2 ranks: gpt2: the world size must be a multiple of stages=4 (world "
        "size 2); nearest valid world sizes: 4; bert: the world size must be a multiple of "
        "stages=4 (world size 2); nearest valid world sizes: 4"
    )
    assert not Path(out).exists()


def test_a_case_that_cannot_run_on_the_ranks_is_skipped(tmp_path):
    from dataclasses import replace

    from bench.bench_reference import case_problem

    ref = _fake_reference(tmp_path)
    assert case_problem(ref, replace(CASES["resnet50"], ranks=2)) is None
    assert case_problem(ref, replace(CASES["gpt2"], ranks=2)).startswith(
        "gpt2: the world size must be a multiple of stages=4"
    )
    assert case_problem(ref, CASES["gpt3_one_pipe_step"]) is None  # its own 8 ranks
