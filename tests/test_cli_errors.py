"""Usage errors of every command: two lines (the error, then where help is), exit 2."""

from __future__ import annotations

import json
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
        ["simnet", "sweep", "--config", "{cfg}", "--grid", '{"workload.scale": [0.01]}'],
        ["simnet", "slurm", "scaling", "--model", "dlrm", "--np", "2"],
    ],
    ids=lambda a: " ".join(a[:3]),
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


def _run(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["proxies.gpt2", "8", "2", "--json", "{dir}"],
            "gpt2: --json {dir}: a folder; name a file",
        ),
        (
            ["proxies.dlrm", "--json", "{file}/x.json"],
            "dlrm: --json {file}/x.json: {file} is a file, not a folder",
        ),
        (
            ["proxies.gpt2", "8", "2", "--trace", "{file}/t.{rank}.json"],
            "gpt2: --trace (rank 0's file) {file}/t.0.json: {file} is a file, not a folder",
        ),
        (
            ["proxies.resnet50", "--json", "{dir}/r.json", "--trace", "{dir}/r.json"],
            "resnet50: --trace {dir}/r.json is the --json file too: the trace would replace "
            "the results; name two files",
        ),
        (
            ["proxies.dlrm", "--json", "{dir}/newdir/"],
            "dlrm: --json {dir}/newdir/: names a folder (it ends with '/'); name a file",
        ),
        (
            ["proxies.dlrm", "--json", "{file}/"],
            "dlrm: --json {file}/: names a folder (it ends with '/'); name a file",
        ),
        (
            ["proxies.dlrm", "--json", "{dir}/r.{rank}.json"],
            "dlrm: --json {dir}/r.{rank}.json: the results are one file, written by rank 0; "
            "{rank} is for --trace",
        ),
        (
            ["proxies.dlrm", "--json", "/proc/nope.json"],
            "dlrm: --json /proc/nope.json: cannot create a file in /proc (No such file or "
            "directory)",
        ),
        (["proxies.microbench", "--json", "{dir}"], "microbench: --json {dir}: a folder"),
        (["simnet", "calibrate", "{file}", "-o", "{dir}"], "-o/--output {dir}: a folder"),
        (
            ["simnet", "calibrate", "{file}", "--report", "{file}"],
            "--report: {file} is a file, not a folder: choose another --report",
        ),
        (["simnet", "calibrate-host", "--ranks", "2", "-o", "{dir}"], "-o/--out {dir}: a folder"),
        (["simnet", "calibrate-host", "--max-age-days", "-1"], "--max-age-days must be >= 0"),
        (["proxies.dlrm", "--timeout", "nan"], "dlrm: --timeout must be >= 0 seconds (got nan)"),
        (["proxies.dlrm", "--json", ""], "dlrm: --json and --trace need a file name"),
        (
            ["proxies.dlrm", "--algorithm", "multiring"],
            "dlrm: --algorithm multiring needs ring orders, which dlrm's command line cannot "
            "give (alexnet_ring's can); choose one of binomial, bruck, direct,",
        ),
        (
            ["proxies.gpt2", "--algorithm", "hierarchical"],
            "gpt2: --algorithm hierarchical needs a group size, which gpt2's command line",
        ),
    ],
    ids=lambda a: " ".join(a[:2]) if isinstance(a, list) else "",
)
def test_a_result_file_that_cannot_be_written_is_refused_before_any_work(tmp_path, args, message):
    # One line, exit 2, before MPI starts (a proxy's run would otherwise be lost at its end).
    taken = tmp_path / "taken"
    taken.write_text("keep me")
    fill = {"{dir}": str(tmp_path), "{file}": str(taken)}

    def filled(text: str) -> str:
        for k, v in fill.items():
            text = text.replace(k, v)
        return text

    r = _run(*map(filled, args))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith(f"error: {filled(message)}"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert taken.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # nothing written


def test_a_study_config_that_cannot_be_read_is_one_line(tmp_path):
    latin = tmp_path / "latin.json"
    latin.write_bytes(b"\xff{}")
    grid = ["--grid", '{"workload.scale": [1]}', "--out", str(tmp_path / "o")]
    predict = ["--model", "dlrm", "--np", "none", "--predict-np", "8"]
    for config, message in (
        (latin, f"--config: {latin}: not UTF-8 text (byte 0 is 0xff); save it as UTF-8"),
        (tmp_path, f"--config: {tmp_path}: a folder; name the configuration file"),
    ):
        for cmd in (
            ["sweep", *grid],
            ["scaling", *predict],
        ):
            r = _run("simnet", *cmd, "--config", str(config))
            assert r.returncode == 2, r.stderr
            assert r.stderr.strip() == f"error: {message}", r.stderr


def test_the_proxies_offer_hierarchical_and_multiring_only_where_they_can_run():
    from proxies.cli import build_parser
    from workload.models import get_model

    dlrm = " ".join(build_parser(get_model("dlrm")).format_help().split())
    assert "own (binomial, bruck," in dlrm
    assert "hierarchical" not in dlrm and "multiring" not in dlrm
    ring = " ".join(build_parser(get_model("alexnet_ring")).format_help().split())
    assert "hierarchical, multiring," in ring


def test_every_model_has_its_module_and_an_unknown_one_is_named():
    import importlib.util

    from workload.models import MODELS

    # `mpirun -n P python -m proxies.<model>`, as the usage line of every model says.
    assert [m for m in MODELS if importlib.util.find_spec(f"proxies.{m}") is None] == []
    r = _run("proxies", "foo")
    assert r.returncode == 2
    assert r.stderr.strip() == "error: unknown model 'foo'"
    assert "alexnet_ring" in r.stdout


def test_srun_without_the_mpis_process_manager_is_refused(tmp_path):
    # What each of srun's 4 tasks sees when srun does not give MPICH its PMI (no --mpi):
    # Slurm's step variables and a world of one.
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "SLURM"))}
    env.update(SLURM_NTASKS="4", SLURM_STEP_NUM_TASKS="4", SLURM_PROCID="2")
    # srun's task is a child of slurmstepd: a stand-in of that name runs it.
    stepd = tmp_path / "slurmstepd"
    stepd.write_text('#!/bin/bash\n"$@"\n')
    stepd.chmod(0o755)
    argv = [sys.executable, "-m", "proxies.dlrm", "--iters", "1", "--warmup", "0",
            "--json", str(tmp_path / "x.json")]  # fmt: skip
    r = subprocess.run([str(stepd), *argv], capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL, env=env)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: dlrm: srun started 4 tasks but MPI started this process alone")
    assert "srun's --mpi option" in last
    assert not (tmp_path / "x.json").exists()
    # Run from a shell inside the step (srun -n 4 --pty bash), the step's variables are
    # inherited: a one-rank run of one's own is not refused.
    shell = tmp_path / "bash_in_step"
    shell.write_text('#!/bin/bash\n"$@"\n')
    shell.chmod(0o755)
    r = subprocess.run([str(shell), *argv], capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL, env=env)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "x.json").exists()


def test_a_launcher_of_another_mpi_is_refused(tmp_path):
    # Open MPI's mpirun sets these; with mpi4py on MPICH each process is a world of one,
    # and every one would run the whole job alone and write the same --json.
    import os

    env = {**os.environ, "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "0"}
    r = subprocess.run(
        [sys.executable, "-m", "proxies.dlrm", "--iters", "1", "--json", str(tmp_path / "x.json")],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert (
        r.stderr.strip()
        .splitlines()[-1]
        .startswith("error: dlrm: the launcher says 4 ranks but MPI started this process alone")
    )
    assert not (tmp_path / "x.json").exists()
    # A process run by hand in a Slurm allocation (SLURM_NTASKS=4, no MPI launcher) is a
    # world of one, as MPI says.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "SLURM"))}
    r = subprocess.run(
        [sys.executable, "-m", "proxies.dlrm", "--iters", "1", "--warmup", "0", "--quiet"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={**env, "SLURM_NTASKS": "4"},
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_mistyped_subcommand_is_named_with_the_nearest():
    r = _run("simnet", "swep")
    assert r.returncode == 2
    assert r.stderr.strip().startswith(
        "python -m simnet: error: unknown subcommand 'swep'; did you mean 'sweep'? "
        "(subcommands: calibrate, "
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prefix", "a/b_"], "error: --prefix 'a/b_': name the files with a plain word"),
        (["--prefix", "../x_"], "error: --prefix '../x_': name the files with a plain word"),
        (["--prefix", ".x"], "error: --prefix '.x': name the files with a plain word"),
        (["--out="], "error: --out: empty; name a folder"),
    ],
)
def test_a_prefix_or_out_that_would_write_elsewhere_is_refused(tmp_path, args, message):
    cfg = tmp_path / "c.json"
    cfg.write_text(
        '{"distributed": {"num_nodes": 2}, "topology": {"type": "switch"}, '
        '"workload": {"name": "dlrm", "scale": 0.01}, "logging": {"log_dir": "res"}}'
    )
    r = subprocess.run(
        [sys.executable, "-m", "simnet", "--config", str(cfg), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(message), r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]  # nothing written


def test_whole_number_options_take_4_0_as_4_as_the_configuration_does(capsys):
    # docs/llm.md: "4.0 is taken as 4, 4.5 refused"; a configuration's 2.0 is taken too.
    from proxies.cli import build_parser
    from workload.models import get_model

    ns = build_parser(get_model("llm")).parse_args(["--tp", "2.0", "--pp", "1"])
    assert ns.tp == 2 and type(ns.tp) is int and ns.pp == 1
    ns = build_parser(get_model("gpt2")).parse_args(["8.0", "2"])
    assert (ns.layers, ns.stages) == (8, 2) and type(ns.layers) is int
    with pytest.raises(SystemExit):
        build_parser(get_model("llm")).parse_args(["--tp", "2.5"])
    assert "argument --tp: must be a whole number (got 2.5)" in capsys.readouterr().err


BUSY_COMMANDS = [
    ["simnet", "validate", "--config", "{cfg}"],
    ["simnet", "validate", "--suite", "--cases", "dlrm"],
    ["simnet", "scaling", "--model", "dlrm", "--np", "2"],
    ["simnet", "testbed", "--config", "{cfg}"],
    ["workflows.endtoend", "--config", "{cfg}", "--no-host-model"],
    ["simnet", "chakra", "export", "--config", "{cfg}"],
]


def _small_config(tmp_path) -> str:
    cfg = tmp_path / "c.json"
    cfg.write_text(
        '{"distributed": {"num_nodes": 2, "bandwidth_limit_gb_per_s": 0.0125}, '
        '"topology": {"type": "switch"}, "workload": {"name": "dlrm", "scale": 0.01}}'
    )
    return str(cfg)


@pytest.mark.parametrize("args", BUSY_COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_a_folder_another_run_writes_into_is_refused_before_any_work(tmp_path, args):
    # Another process holds the folder (as a run of any of these commands does while it
    # runs): this one is refused in one line naming it, and writes nothing there.
    busy = tmp_path / "busy"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from workload.results import lock_output_dir; "
            f"assert lock_output_dir({str(busy)!r}) is None; print('held', flush=True); "
            "time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        argv = [a.replace("{cfg}", _small_config(tmp_path)) for a in args]
        r = _run(*argv, "--out", str(busy))
    finally:
        holder.kill()
        holder.wait()
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == (
        f"error: {busy} is in use: another run is writing its results there; wait for it "
        "to finish or choose another --out"
    )
    assert list(busy.iterdir()) == []
    # Once the holder is gone (however it ended) the folder is free again.
    from workload.results import lock_output_dir, release_output_dir

    assert lock_output_dir(busy) is None
    release_output_dir(busy)


@pytest.mark.parametrize("args", BUSY_COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_an_out_that_cannot_be_made_is_refused_before_any_work(tmp_path, args):
    # /proc takes no new folder, even from root (whom every permission check passes).
    argv = [a.replace("{cfg}", _small_config(tmp_path)) for a in args]
    r = _run(*argv, "--out", "/proc/commsim-no-such-folder")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith(
        "error: cannot make the folder /proc/commsim-no-such-folder (No such file or "
        "directory): choose another --out"
    ), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args",
    [
        ["simnet", "validate", "--config", "{cfg}"],
        ["simnet", "testbed", "--config", "{cfg}"],
        ["workflows.endtoend", "--config", "{cfg}", "--no-host-model"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_enable_metrics_false_is_said_to_be_unused(tmp_path, args):
    # It is the seed's field and loads; the commands write every file, and say so. (The
    # run itself is stopped at once by a folder that is a file.)
    cfg = tmp_path / "c.json"
    cfg.write_text(
        '{"distributed": {"num_nodes": 2, "bandwidth_limit_gb_per_s": 0.0125}, '
        '"topology": {"type": "switch"}, "workload": {"name": "dlrm", "scale": 0.01}, '
        '"logging": {"enable_metrics": false}}'
    )
    (tmp_path / "taken").write_text("a file")
    r = _run(*[a.replace("{cfg}", str(cfg)) for a in args], "--out", str(tmp_path / "taken"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "note: logging.enable_metrics = false is not used" in r.stderr


def test_each_rank_checks_its_own_trace_file_not_every_ranks(tmp_path, monkeypatch):
    # Each rank checking every rank's file made P^2 file-system checks (16,384 ranks:
    # 268M paths): before MPI starts rank 0's file is checked, after, each rank's own.
    import argparse

    import proxies.outputs as outputs

    (tmp_path / "t.2.json").mkdir()
    ns = argparse.Namespace(json=None, trace=f"{tmp_path}/t.{{rank}}.json")
    checked = []
    real = outputs.output_file_problem
    monkeypatch.setattr(
        outputs, "output_file_problem", lambda p, *a: checked.append(p) or real(p, *a)
    )
    assert outputs.output_files_problem(ns) is None
    assert checked == [f"{tmp_path}/t.0.json"]
    assert outputs.output_files_problem(ns, (2,)) == (
        f"--trace (rank 2's file) {tmp_path}/t.2.json: a folder; name a file "
        f"(e.g. {tmp_path}/t.2.json/results.json)"
    )
    assert checked[1:] == [f"{tmp_path}/t.2.json"]


def test_the_main_jobs_configuration_errors_are_one_line(tmp_path):
    # A missing file, broken JSON, an unknown key: one line and exit 2, as `simnet
    # --config` says them (it was an UnboundLocalError traceback, exit 1).
    broken = tmp_path / "broken.json"
    broken.write_text('{"distributed": ')
    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"bogus": 1}')
    for config, first in (
        (tmp_path / "missing.json", f"error: {tmp_path / 'missing.json'}: no such file"),
        (broken, f"error: {broken}: not valid JSON"),
        (unknown, f"error: {unknown}: invalid configuration"),
    ):
        r = _run("workflows.endtoend", "--config", str(config), "--no-host-model")
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith(first) and "Traceback" not in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.json", "unknown.json"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # A traceback on every rank (ValueError: local_size must be ...), exit 1.
        (["--hierarchical", "-1"], "--hierarchical: must be >= 0 (got -1)"),
        # Accepted, and recorded as compute_us -5 in the JSON.
        (["--compute-us", "-5"], "--compute-us: must be >= 0 (got -5)"),
        # --hierarchical was ignored: the ring's reduce-scatter and allgather ran.
        (
            ["--algorithm", "ring", "--hierarchical", "2"],
            "--algorithm ring and --hierarchical 2 do not go together: --hierarchical runs "
            "the two-level algorithm, which --algorithm ring would replace; leave out one of "
            "them",
        ),
        # "local_size must be an integer >= 1 ... (got None)", naming no option.
        (
            ["--algorithm", "hierarchical"],
            "--algorithm hierarchical needs the group size: add --hierarchical N (groups of N "
            "ranks, N dividing the world size)",
        ),
    ],
    ids=lambda a: " ".join(a) if isinstance(a, list) else "",
)
def test_alexnet_rings_own_options_are_checked_in_one_line(args, message):
    r = _run("proxies.alexnet_ring", *args, "--iters", "1", "--warmup", "0")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr == f"error: alexnet_ring: {message}\n"
    assert r.stdout == ""


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"hierarchical": -2}, "workload.flags.hierarchical: must be >= 0 (got -2)"),
        # As training.compute_us_per_step: -5000 is refused.
        ({"compute_us": -5000}, "workload.flags.compute_us: must be >= 0 (got -5000)"),
        # The group size refused by the build named no option.
        (
            {"hierarchical": 3},
            "workload.flags.hierarchical 3 must divide the world size 4 (groups of 3 ranks "
            "for the two-level algorithm); sizes that do: 1, 2, 4",
        ),
    ],
)
def test_alexnet_rings_options_in_a_configuration_are_checked_in_one_line(tmp_path, flags, message):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({
        "topology": {"type": "switch"},
        "workload": {"name": "alexnet_ring", "world_size": 4, "scale": 0.001, "flags": flags},
    }))  # fmt: skip
    r = _run("simnet", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr == f"error: {message}\n"
    assert not (tmp_path / "out").exists()


def test_json_and_trace_may_both_go_to_a_device_or_fifo_not_to_one_file(tmp_path):
    # Both to /dev/null was refused as "the trace would replace the results": a device
    # is written into, so neither replaces the other. One regular file still is refused.
    import argparse
    import os

    from proxies.outputs import output_files_problem

    def problem(json_path: str, trace: str) -> str | None:
        return output_files_problem(argparse.Namespace(json=json_path, trace=trace))

    assert problem("/dev/null", "/dev/null") is None
    (tmp_path / "null").symlink_to("/dev/null")
    assert problem(str(tmp_path / "null"), "/dev/null") is None
    os.mkfifo(tmp_path / "fifo")
    assert problem(str(tmp_path / "fifo"), str(tmp_path / "fifo")) is None
    same = str(tmp_path / "r.json")
    assert problem(same, same) == (
        f"--trace {same} is the --json file too: the trace would replace the results; "
        "name two files"
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--iters", "3", "--warmup", "2"], "--iters and --warmup"),
        (["--warmup", "0"], "--warmup"),
    ],
)
def test_reference_counts_do_not_go_with_explicit_counts(args, named):
    # The explicit counts silently won: 2 + 3 iterations ran under --reference-counts.
    r = _run("proxies.gpt2", "8", "2", "--reference-counts", *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr == (
        "error: gpt2: --reference-counts runs the reference's counts (10 warm-up + 256 "
        f"timed), so {named} cannot go with it: leave out one or the other\n"
    )
