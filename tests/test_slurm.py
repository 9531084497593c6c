"""``python -m simnet slurm``: generated batch scripts, checked as text, with ``bash -n``,
and by running the job-array script with a stand-in ``srun`` (no cluster needed)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from workflows import slurm


def _sbatch_lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.startswith("#SBATCH")]


def _srun_lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.startswith("srun ")]


def _bash_syntax_ok(path: Path) -> None:
    r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def _executable(path: Path) -> bool:
    return bool(path.stat().st_mode & stat.S_IXUSR)


def test_scaling_scripts_one_per_count(tmp_path, capsys):
    out = tmp_path / "jobs"
    rc = slurm.main(
        ["scaling", "--model", "dlrm", "--np", "2,4,8,16", "--scale", "0.5", "--iters", "20",
         "--tasks-per-node", "4", "--time", "00:30:00", "--partition", "gpu",
         "--account", "proj42", "--setup", "module load python/3.11",
         "--setup", "source $HOME/venv/bin/activate", "--out", str(out)]
    )  # fmt: skip
    assert rc == 0
    assert "submit_all.sh" in capsys.readouterr().out
    scripts = sorted(out.glob("*.sbatch"))
    assert [s.name for s in scripts] == [
        "dlrm_weak_np16.sbatch", "dlrm_weak_np2.sbatch", "dlrm_weak_np4.sbatch",
        "dlrm_weak_np8.sbatch",
    ]  # fmt: skip
    s8 = out / "dlrm_weak_np8.sbatch"
    assert _sbatch_lines(s8) == [
        "#SBATCH --job-name=dlrm_weak_np8",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks=8",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --time=00:30:00",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=proj42",
        # Absolute: the job runs in the scripts' folder wherever it is submitted from.
        f"#SBATCH --chdir={out}",
        f"#SBATCH --output={out}/logs/%x_%j.out",
    ]
    assert _srun_lines(s8) == [
        "srun python -m proxies.dlrm --scale 0.5 --iters 20 --json results/dlrm_weak_8.json"
    ]
    text = s8.read_text()
    assert text.startswith("#!/bin/bash\n")
    assert "module load python/3.11\nsource $HOME/venv/bin/activate\n" in text
    # Fewer ranks than a node holds: one node, ntasks-per-node = P.
    assert _sbatch_lines(out / "dlrm_weak_np2.sbatch")[1:4] == [
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=2",
        "#SBATCH --ntasks-per-node=2",
    ]
    submit = out / "submit_all.sh"
    assert [ln for ln in submit.read_text().splitlines() if ln.startswith("sbatch")] == [
        f"sbatch dlrm_weak_np{p}.sbatch" for p in (2, 4, 8, 16)
    ]
    for path in [*scripts, submit]:
        _bash_syntax_ok(path)
        assert _executable(path)
    plan = json.loads((out / "slurm_plan.json").read_text())
    assert [j["np"] for j in plan["jobs"]] == [2, 4, 8, 16]
    assert not list(out.glob(".*.tmp"))


def test_nodes_round_up():
    lines = slurm.sbatch_header(job_name="j", ntasks=6, tasks_per_node=4, time="30", output="o")
    assert lines[1:4] == ["#SBATCH --nodes=2", "#SBATCH --ntasks=6", "#SBATCH --ntasks-per-node=4"]
    assert slurm.sbatch_header(job_name="j", ntasks=9, tasks_per_node=4, time="30",
                               output="o")[1] == "#SBATCH --nodes=3"  # fmt: skip


def test_scaling_skips_counts_the_layout_rejects(tmp_path, capsys):
    out = tmp_path / "jobs"
    rc = slurm.main(["scaling", "--model", "cosmoflow", "--np", "2,4,6,8", "--out", str(out)])
    assert rc == 0
    assert sorted(p.name for p in out.glob("*.sbatch")) == [
        "cosmoflow_weak_np4.sbatch",
        "cosmoflow_weak_np8.sbatch",
    ]
    err = capsys.readouterr().err
    assert "np 2: skipped" in err and "np 6: skipped" in err and "multiple of the 4" in err


def test_strong_scaling_scripts_emulate_the_table_rows(tmp_path):
    out = tmp_path / "jobs"
    rc = slurm.main(["scaling", "--model", "resnet152_scal", "--mode", "strong",
                     "--np", "256,512,1024,2048", "--tasks-per-node", "8",
                     "--job-name", "r152", "--out", str(out)])  # fmt: skip
    assert rc == 0
    for p in (256, 512, 1024, 2048):
        path = out / f"r152_np{p}.sbatch"
        assert _srun_lines(path) == [
            f"srun python -m proxies.resnet152_scal --scaling-size {p} --json results/r152_{p}.json"
        ]
        assert f"#SBATCH --nodes={p // 8}" in _sbatch_lines(path)
    ring = tmp_path / "ring"
    assert slurm.main(["scaling", "--model", "alexnet_ring", "--mode", "strong",
                       "--np", "2,4", "--out", str(ring)]) == 0  # fmt: skip
    assert _srun_lines(ring / "alexnet_ring_strong_np4.sbatch") == [
        "srun python -m proxies.alexnet_ring --compute-us 2500 "
        "--json results/alexnet_ring_strong_4.json"
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--time", "half an hour"], "Slurm time limit"),
        (["--partition", "a b"], "without spaces"),
        (["--mode", "strong"], "strong scaling"),
        (["--np", "0"], "--np"),
    ],
)
def test_scaling_refusals(tmp_path, capsys, extra, message):
    args = ["scaling", "--model", "dlrm", "--np", "2,4", "--out", str(tmp_path / "o"), *extra]
    assert slurm.main(args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


GRID = {"scale": [0.1, 1], "args": [[48, 4], [48, 8]]}


def test_sweep_job_array(tmp_path):
    out = tmp_path / "sweep"
    rc = slurm.main(
        ["sweep", "--model", "gpt2", "--ntasks", "8", "--tasks-per-node", "4", "--time", "20",
         "--grid", json.dumps(GRID), "--iters", "2", "--max-parallel", "2",
         "--setup", "source venv/bin/activate", "--out", str(out)]
    )  # fmt: skip
    assert rc == 0
    script = out / "gpt2_sweep.sbatch"
    assert _sbatch_lines(script) == [
        "#SBATCH --job-name=gpt2_sweep",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks=8",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --time=20",
        "#SBATCH --array=0-3%2",
        f"#SBATCH --chdir={out}",
        f"#SBATCH --output={out}/logs/%x_%A_%a.out",
    ]
    assert _srun_lines(script) == [
        'srun python -m proxies.gpt2 ${ARGV[@]+"${ARGV[@]}"} '
        '--json "results/gpt2_sweep_${SLURM_ARRAY_TASK_ID}.json"'
    ]
    _bash_syntax_ok(script)
    _bash_syntax_ok(out / "submit_all.sh")
    assert _executable(script)
    rows = [ln.split("\t") for ln in (out / "gpt2_sweep_grid.tsv").read_text().splitlines()]
    assert rows[0] == ["#index", "proxy_args", "scale", "args"]
    assert [r[0] for r in rows[1:]] == ["0", "1", "2", "3"]  # array indices 0..N-1
    assert [r[1] for r in rows[1:]] == [
        "48 4 --scale 0.1 --iters 2",
        "48 8 --scale 0.1 --iters 2",
        "48 4 --iters 2",
        "48 8 --iters 2",
    ]
    tasks = json.loads((out / "gpt2_sweep_grid.json").read_text())
    assert [t["point"] for t in tasks] == [
        {"scale": 0.1, "args": [48, 4]},
        {"scale": 0.1, "args": [48, 8]},
        {"scale": 1, "args": [48, 4]},
        {"scale": 1, "args": [48, 8]},
    ]


def test_sweep_array_tasks_run_their_row(tmp_path):
    """Run the array script with a stand-in srun that prints its arguments."""
    out = tmp_path / "sweep"
    assert slurm.main(["sweep", "--model", "gpt2", "--ntasks", "8", "--grid", json.dumps(GRID),
                       "--out", str(out)]) == 0  # fmt: skip
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/bash\nprintf "%s|" "$@"\n')
    (fake / "srun").chmod(0o755)
    tasks = json.loads((out / "gpt2_sweep_grid.json").read_text())
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    for task in tasks:
        r = subprocess.run(
            ["bash", "gpt2_sweep.sbatch"], cwd=out, capture_output=True, text=True, timeout=30,
            env={**env, "SLURM_ARRAY_TASK_ID": str(task["index"])},
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        argv = r.stdout.rstrip("|").split("|")
        assert argv == ["python", "-m", "proxies.gpt2", *task["proxy_args"], "--json",
                        f"results/gpt2_sweep_{task['index']}.json"]  # fmt: skip
    assert (out / "results").is_dir()
    r = subprocess.run(["bash", "gpt2_sweep.sbatch"], cwd=out, capture_output=True, text=True,
                       timeout=30, env={**env, "SLURM_ARRAY_TASK_ID": "4"})  # fmt: skip
    assert r.returncode == 2 and "no row 4" in r.stderr


def test_sweep_paths_with_spaces_and_relative_ones_reach_the_proxy_whole(tmp_path, monkeypatch):
    # A trace folder with a space stays one argument; a relative one is made absolute
    # (the job runs in the scripts' folder); the script runs from any folder, as sbatch
    # runs it, and Slurm's log folder exists before any job (Slurm makes none).
    from workload.chakra_et import export_trace_set
    from workload.spec import RunSpec

    for name in ("tr dir", "rel"):
        export_trace_set(RunSpec("dlrm", world_size=4, scale=0.001).workload(), tmp_path / name)
    monkeypatch.chdir(tmp_path)
    grid = json.dumps({"trace_dir": [str(tmp_path / "tr dir"), "rel"]})
    assert slurm.main(["sweep", "--model", "chakra", "--ntasks", "4", "--grid", grid,
                       "--out", "sw"]) == 0  # fmt: skip
    out = tmp_path / "sw"
    assert (out / "logs").is_dir() and (out / "results").is_dir()
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/bash\nprintf "%s|" "$@"\n')
    (fake / "srun").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    got = []
    for i in (0, 1):
        r = subprocess.run(
            ["bash", "sw/chakra_sweep.sbatch"], cwd=tmp_path, capture_output=True, text=True,
            timeout=30, env={**env, "SLURM_ARRAY_TASK_ID": str(i)},
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        argv = r.stdout.rstrip("|").split("|")
        got.append(argv[argv.index("--trace-dir") + 1])
    assert got == [str(tmp_path / "tr dir"), str(tmp_path / "rel")]


def test_an_out_folder_slurm_cannot_name_is_refused(tmp_path, capsys):
    out = tmp_path / "a b"
    assert slurm.main(["scaling", "--model", "dlrm", "--np", "2", "--out", str(out)]) == 2
    assert "#SBATCH lines and the job's file names cannot hold spaces" in capsys.readouterr().err
    assert not out.exists()
    # Nor a log or results folder Slurm or the shell would read otherwise.
    for opt, bad in (
        ("--logs-dir", "my logs"),
        ("--logs-dir", "l%j"),
        ("--results-dir", 'r$(id)"'),
    ):
        args = ["scaling", "--model", "dlrm", "--np", "2", "--out", str(tmp_path / "ok"), opt, bad]
        assert slurm.main(args) == 2
        assert f"{opt} {bad!r}: #SBATCH lines" in capsys.readouterr().err


def test_sweep_rejects_points_the_layout_cannot_run(tmp_path, capsys):
    grid = json.dumps({"args": [[48, 4], [48, 3]], "scale": [0.5]})
    out = tmp_path / "s"
    args = ["sweep", "--model", "gpt2", "--ntasks", "8", "--grid", grid, "--out", str(out)]
    assert slurm.main(args) == 2
    assert "1 of 2 grid points cannot run on 8 processes" in capsys.readouterr().err
    assert slurm.main([*args, "--skip-invalid"]) == 0
    assert "#SBATCH --array=0-0" in _sbatch_lines(out / "gpt2_sweep.sbatch")
    assert slurm.main(["sweep", "--model", "gpt2", "--ntasks", "8", "--grid",
                       '{"stages": [4]}', "--out", str(out)]) == 2  # fmt: skip
    assert "not an option of the gpt2 proxy" in capsys.readouterr().err


def test_sweep_model_flags_in_the_grid(tmp_path):
    out = tmp_path / "s"
    grid = json.dumps({"scaling_size": [256, 512]})
    assert slurm.main(["sweep", "--model", "resnet152_scal", "--ntasks", "4", "--grid", grid,
                       "--compute", "none", "--out", str(out)]) == 0  # fmt: skip
    rows = (out / "resnet152_scal_sweep_grid.tsv").read_text().splitlines()[1:]
    assert [r.split("\t")[1] for r in rows] == [
        "--compute none --scaling-size 256",
        "--compute none --scaling-size 512",
    ]


def test_setup_lines_run_without_nounset_and_generated_options_are_not_given_twice(
    tmp_path, capsys
):
    out = tmp_path / "s"
    rc = slurm.main(
        ["scaling", "--model", "dlrm", "--np", "4", "--tasks-per-node", "4", "--time",
         "00:10:00", "--setup", "conda activate x", "--out", str(out)]
    )  # fmt: skip
    assert rc == 0
    script = next(out.glob("*.sbatch")).read_text().splitlines()
    i = script.index("conda activate x")
    assert script[i - 1 : i + 2] == ["set +u", "conda activate x", "set -u"]
    assert script.index("set -euo pipefail") < i - 1
    for extra, name in (("--sbatch=--ntasks=8", "--ntasks"), ("--sbatch=--time=1:00", "--time")):
        rc = slurm.main(
            ["scaling", "--model", "dlrm", "--np", "4", "--tasks-per-node", "4", "--time",
             "00:10:00", extra, "--out", str(tmp_path / "t")]
        )  # fmt: skip
        assert rc == 2
        assert f"the script sets {name} itself (use " in capsys.readouterr().err
    # One the script does not set here is added as it is.
    header = slurm.sbatch_header(
        job_name="j", ntasks=4, tasks_per_node=4, time="10", output="o", extra=["--partition=gpu"]
    )
    assert header[-1] == "#SBATCH --partition=gpu"
    rc = slurm.main(
        ["scaling", "--model", "dlrm", "--np", "4", "--time", "00:10:00", "--job-name",
         "my job", "--out", str(tmp_path / "u")]
    )  # fmt: skip
    assert rc == 2
    assert "--job-name 'my job': give letters, digits, '_', '.' or '-' (e.g. my_job)" in (
        capsys.readouterr().err
    )


def test_the_printed_follow_up_runs_the_same_study_from_the_results(tmp_path, capsys):
    out = tmp_path / "s"
    rc = slurm.main(
        ["scaling", "--model", "gpt2", "--np", "2,4", "--scale", "0.00123456789",
         "--compute", "none", "--per-tensor", "--time", "10", "--out", str(out)]
    )  # fmt: skip
    assert rc == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    then = line.split("(then: ", 1)[1].rstrip(")")
    assert then == (
        "python -m simnet scaling --model gpt2 --mode weak --scale 0.00123456789 --compute "
        f"none --per-tensor --from {out / 'results'}"
    )


def test_sweep_booleans_are_json_booleans_and_a_point_given_twice_is_refused(tmp_path, capsys):
    # bool("false") is True: a quoted boolean wrote two --per-tensor jobs; 0.1 and 0.10
    # wrote two identical rows.
    base = ["sweep", "--model", "gpt2", "--args", "4", "2", "2", "--ntasks", "4"]
    rc = slurm.main([*base, "--grid", '{"per_tensor": ["false", "true"]}', "--out",
                     str(tmp_path / "a")])  # fmt: skip
    assert rc == 2
    assert capsys.readouterr().err == (
        'error: --grid per_tensor: "false" is not a boolean; give JSON true or false '
        '(unquoted), e.g. {"per_tensor": [false, true]}\n'
    )
    rc = slurm.main([*base, "--grid", '{"scale": [0.1, 0.10]}', "--out", str(tmp_path / "b")])
    assert rc == 2
    assert capsys.readouterr().err == (
        'error: --grid: points 0 {"scale": 0.1} and 1 {"scale": 0.1} are the same '
        "configuration: give each value once\n"
    )
    assert not (tmp_path / "b" / "gpt2_sweep.sbatch").exists()
    rc = slurm.main([*base, "--grid", '{"fix_quirks": [false, true]}', "--out",
                     str(tmp_path / "c")])  # fmt: skip
    assert rc == 0
    rows = (tmp_path / "c" / "gpt2_sweep_grid.tsv").read_text().splitlines()
    assert [r.split("\t")[1] for r in rows[1:]] == ["4 2 2", "4 2 2 --fix-quirks"]
