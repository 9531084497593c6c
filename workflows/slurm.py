"""``python -m simnet slurm``: Slurm batch scripts for studies of the proxies.

    python -m simnet slurm scaling --model resnet152 --np 4,8,16,32 --tasks-per-node 4 \\
        --time 00:30:00 --setup 'source ~/venv/bin/activate' --out slurm/resnet152
    python -m simnet slurm sweep --model gpt2 --ntasks 8 \\
        --grid '{"scale": [0.1, 1], "args": [[48, 4], [48, 8]]}' --out slurm/gpt2

``scaling``: one script per process count (``#SBATCH`` nodes = ceil(P /
tasks-per-node), --ntasks P) running ``srun python -m proxies.<model> ... --json
results/<job>_<P>.json``, and ``submit_all.sh``. ``sweep``: one job-array
script (``#SBATCH --array=0-(N-1)``) whose task i runs the argument
combination of row i of the generated ``<job>_grid.tsv`` (also as JSON).
The scripts run in DIR, by its absolute path (``#SBATCH --chdir``, a ``cd``, the
log pattern, file options of the model such as a trace folder), so they can be
submitted from anywhere (``sbatch DIR/x.sbatch``, or ``bash DIR/submit_all.sh``
for all): generate them where the cluster's nodes see that path. Collect the
results with ``python -m simnet scaling ... --from DIR/results`` (a scaling study's table:
speedup and efficiency) or ``python -m simnet aggregate DIR/results``.

Every file is written atomically; scripts are made executable. Nothing here
talks to Slurm.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from workload.brief_argparse import BriefParser
from workload.models import MODELS
from workload.results import output_dir_problem, write_json, write_text

from .study import models as sm
from .study.util import (
    EXIT_USAGE,
    StudyError,
    add_model_options,
    expand_grid,
    parse_counts,
    parse_flags,
    parse_grid,
    refuse_twins,
)

TIME_RE = re.compile(r"^\d+(-\d+)?(:\d+){0,2}$")
NAME_RE = re.compile(r"[^A-Za-z0-9_.-]+")
SWEEP_KEYS = ("args", "scale", "compute", "iters", "warmup", "per_tensor", "fix_quirks")
BOOLEAN_KEYS = ("per_tensor", "fix_quirks")


# -- script text --------------------------------------------------------------------------
def _check_value(what: str, value: str) -> str:
    if not value or any(c.isspace() for c in value) or "#" in value:
        raise StudyError(f"{what}: {value!r} must be one word without spaces or '#'")
    return value


def sbatch_header(
    *,
    job_name: str,
    ntasks: int,
    tasks_per_node: int,
    time: str,
    output: str,
    partition: str | None = None,
    account: str | None = None,
    array: str | None = None,
    extra: Sequence[str] = (),
    chdir: str | None = None,
) -> list[str]:
    """The ``#SBATCH`` lines of a job of ``ntasks`` MPI ranks (``chdir``: the folder it
    runs in)."""
    if ntasks < 1 or tasks_per_node < 1:
        raise StudyError("--ntasks and --tasks-per-node must be >= 1")
    if not TIME_RE.match(time):
        raise StudyError(
            f"--time {time!r}: use a Slurm time limit such as 30, 00:30:00 or 1-00:00:00"
        )
    per_node = min(tasks_per_node, ntasks)
    lines = [
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --nodes={-(-ntasks // per_node)}",
        f"#SBATCH --ntasks={ntasks}",
        f"#SBATCH --ntasks-per-node={per_node}",
        f"#SBATCH --time={time}",
    ]
    if array is not None:
        lines.append(f"#SBATCH --array={array}")
    if partition:
        lines.append(f"#SBATCH --partition={_check_value('--partition', partition)}")
    if account:
        lines.append(f"#SBATCH --account={_check_value('--account', account)}")
    if chdir is not None:
        lines.append(f"#SBATCH --chdir={chdir}")
    lines.append(f"#SBATCH --output={output}")
    for opt in extra:
        if "\n" in opt or not opt.startswith("--"):
            raise StudyError(f"--sbatch {opt!r}: give one option such as --gres=gpu:4")
        name = opt.split("=", 1)[0].split()[0]
        if any(line.split("=", 1)[0] == f"#SBATCH {name}" for line in lines):
            raise StudyError(
                f"--sbatch {opt!r}: the script sets {name} itself"
                + (f" (use {GENERATED_FROM[name]})" if name in GENERATED_FROM else "")
                + "; a second one would contradict it"
            )
        lines.append(f"#SBATCH {opt}")
    return lines


GENERATED_FROM = {
    "--job-name": "--job-name",
    "--nodes": "--np / --ntasks and --tasks-per-node",
    "--ntasks": "--np / --ntasks",
    "--ntasks-per-node": "--tasks-per-node",
    "--time": "--time",
    "--array": "the grid: one task per row",
    "--partition": "--partition",
    "--account": "--account",
    "--chdir": "--out",
    "--output": "--logs-dir",
}
"""Where the #SBATCH options a script writes come from."""


def setup_lines(setup: Sequence[str]) -> list[str]:
    for s in setup:
        if "\n" in s:
            raise StudyError("--setup: one line per --setup option")
    if not setup:
        return [
            "# environment: none requested (--setup 'module load ...' or "
            "--setup 'source venv/bin/activate')"
        ]
    # Activation scripts and module files may read unset variables (conda's do):
    # not under set -u.
    return ["set +u", *setup, "set -u"]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_file(path: Path, text: str, executable: bool = False) -> Path:
    """Write atomically, then give the usual permissions (the temp file's are 0600):
    0666 or, for scripts, 0777, less the umask."""
    write_text(path, text)
    path.chmod((0o777 if executable else 0o666) & ~_umask())
    return path


def _job_name(text: str, given: bool = True) -> str:
    """A job name: ``text`` when it is one (letters, digits, '_', '.', '-'); a given one
    that is not is refused, a default made one."""
    name = NAME_RE.sub("_", text).strip("_")
    if not name or (given and name != text):
        hint = f" (e.g. {name})" if name else ""
        raise StudyError(f"--job-name {text!r}: give letters, digits, '_', '.' or '-'{hint}")
    return name


def _script_dir(ns: argparse.Namespace) -> str:
    """``--out`` made absolute: the scripts run there (``#SBATCH --chdir`` and a ``cd``),
    wherever they are submitted from. Slurm's ``#SBATCH`` lines hold no quoting, so the
    path must be one word."""
    where = os.path.abspath(os.path.expanduser(ns.out))
    for opt, path in (
        ("--out", where),
        ("--logs-dir", ns.logs_dir),
        ("--results-dir", ns.results_dir),
    ):
        # (Slurm expands % in its file names; the results folder goes into a shell line)
        if not path or any(c.isspace() or c in "#%$`\"'\\" for c in path):
            raise StudyError(
                f"{opt} {path!r}: #SBATCH lines and the job's file names cannot hold "
                "spaces, quotes or any of # % $ `; choose another folder"
            )
    return where


def _output(ns: argparse.Namespace, where: str, pattern: str) -> str:
    """Slurm's log file pattern, absolute (Slurm opens it before the job runs)."""
    return os.path.join(where, ns.logs_dir, pattern)


def _absolute_path_flags(model: str, flags: dict[str, Any]) -> dict[str, Any]:
    """The model's file and folder options made absolute: the jobs run in the scripts'
    folder, not where these were generated."""
    spec = MODELS.get(model)
    paths = {a.name for a in spec.flags if a.path} if spec is not None else set()
    return {
        k: os.path.abspath(os.path.expanduser(v)) if k in paths and isinstance(v, str) else v
        for k, v in flags.items()
    }


# -- scaling --------------------------------------------------------------------------------
def scaling_scripts(ns: argparse.Namespace) -> tuple[dict[str, str], list[str], dict[str, Any]]:
    """{file name: text}, notes, plan; raises StudyError."""
    study = sm.Study.from_options(ns)
    study = replace(study, flags=_absolute_path_flags(study.model, study.flags))
    sm.check_study(study)
    where = _script_dir(ns)
    counts = parse_counts(ns.np, "--np")
    if not counts:
        raise StudyError("--np: give the process counts, e.g. 4,8,16 or 4..256")
    base = sm.base_count(study, counts)
    if base is None:
        raise StudyError(f"{study.model} accepts none of the process counts {ns.np}")
    job = _job_name(ns.job_name or f"{study.model}_{study.mode}", ns.job_name is not None)
    files: dict[str, str] = {}
    notes: list[str] = []
    plan: dict[str, Any] = {
        "kind": "slurm-scaling",
        "model": study.model,
        "mode": study.mode,
        "base_np": base,
        "jobs": [],
        "skipped": [],
    }
    for p in counts:
        try:
            flags = sm.point_flags(study, p, base)
            problem = sm.layout_problem(study, p, flags)
            if problem:
                raise StudyError(problem)
        except StudyError as e:
            notes.append(f"np {p}: skipped: {e}")
            plan["skipped"].append({"np": p, "reason": str(e)})
            continue
        name = f"{job}_np{p}.sbatch"
        result = f"{ns.results_dir}/{job}_{p}.json"
        argv = [
            ns.python,
            *sm.proxy_module_argv(study.model),
            *sm.proxy_options(study, flags, ns.iters, ns.warmup),
            "--json",
            result,
        ]
        header = sbatch_header(
            job_name=f"{job}_np{p}",
            ntasks=p,
            tasks_per_node=ns.tasks_per_node,
            time=ns.time,
            output=_output(ns, where, "%x_%j.out"),
            partition=ns.partition,
            account=ns.account,
            extra=ns.sbatch,
            chdir=where,
        )
        srun = " ".join([ns.launcher, *map(shlex.quote, argv)])
        files[name] = "\n".join(
            [
                "#!/bin/bash",
                *header,
                f"# {study.mode} scaling of {study.model}: {p} processes "
                f"(generated by python -m simnet slurm scaling)",
                "set -euo pipefail",
                f"cd {shlex.quote(where)}  # (also when run without sbatch)",
                *setup_lines(ns.setup),
                f"mkdir -p {shlex.quote(ns.results_dir)}",
                srun,
                "",
            ]
        )
        plan["jobs"].append(
            {"np": p, "script": name, "result": result, "flags": flags, "command": srun}
        )
    if not plan["jobs"]:
        raise StudyError("no process count left: " + "; ".join(notes))
    files["submit_all.sh"] = submit_all([j["script"] for j in plan["jobs"]], ns)
    return files, notes, plan


def submit_all(scripts: Sequence[str], ns: argparse.Namespace) -> str:
    return "\n".join(
        [
            "#!/bin/bash",
            "# Submit every job of the study: bash submit_all.sh (from any directory).",
            "set -euo pipefail",
            'cd "$(dirname "$0")"',
            f"mkdir -p {shlex.quote(ns.logs_dir)} {shlex.quote(ns.results_dir)}",
            *(f"sbatch {shlex.quote(s)}" for s in scripts),
            "",
        ]
    )


# -- sweep ----------------------------------------------------------------------------------
def sweep_points(
    ns: argparse.Namespace, grid: dict[str, list[Any]]
) -> list[tuple[dict[str, Any], list[str], str | None]]:
    """Each grid point with its proxy arguments and why the layout rejects it (or None)."""
    if ns.model not in MODELS:
        sm.Study(model=ns.model).run_spec()  # raises: the unknown model, with the known ones
    model = MODELS[ns.model]
    flag_names = [a.name for a in model.flags]
    allowed = (*SWEEP_KEYS, *flag_names)
    for key in grid:
        if key not in allowed:
            raise StudyError(
                f"--grid key {key!r}: not an option of the {ns.model} proxy; "
                f"use {', '.join(allowed)}"
            )
    for key in BOOLEAN_KEYS:
        for v in grid.get(key, ()):
            if not isinstance(v, bool):  # (bool("false") is True)
                raise StudyError(
                    f"--grid {key}: {json.dumps(v)} is not a boolean; give JSON true or false "
                    f'(unquoted), e.g. {{"{key}": [false, true]}}'
                )
    base_flags = parse_flags(ns.flag)
    out = []
    for point in expand_grid(grid):
        try:
            args = point.get("args", ns.args)
            if isinstance(args, int):
                args = [args]
            if not isinstance(args, list) or not all(isinstance(a, int) for a in args):
                raise StudyError(f"args must be a list of integers (got {json.dumps(args)})")
            flags = dict(base_flags)
            for name in flag_names:
                if name in point:
                    v = point[name]
                    flags[name] = v if isinstance(v, str) else int(v)
            flags = _absolute_path_flags(ns.model, flags)
            study = sm.Study(
                model=ns.model,
                args=tuple(args),
                flags=flags,
                scale=float(point.get("scale", ns.scale)),
                compute=str(point.get("compute", ns.compute)),
                per_tensor=point.get("per_tensor", ns.per_tensor),
                fix_quirks=point.get("fix_quirks", ns.fix_quirks),
            )
            study.run_spec()  # raises StudyError: what the proxy would refuse
            problem = sm.layout_problem(study, ns.ntasks, flags)
            argv = sm.proxy_options(
                study, flags, point.get("iters", ns.iters), point.get("warmup", ns.warmup)
            )
        except (StudyError, TypeError, ValueError) as e:
            argv, problem = [], str(e)
        out.append((point, argv, problem))
    return out


def sweep_scripts(ns: argparse.Namespace) -> tuple[dict[str, str], list[str], dict[str, Any]]:
    grid = parse_grid(ns.grid)
    points = sweep_points(ns, grid)
    bad = [(i, pt, problem) for i, (pt, _a, problem) in enumerate(points) if problem]
    notes = [f"point {i} {json.dumps(pt)}: {problem}" for i, pt, problem in bad]
    if bad and not ns.skip_invalid:
        raise StudyError(
            f"{len(bad)} of {len(points)} grid points cannot run on {ns.ntasks} processes:\n  "
            + "\n  ".join(notes)
            + "\nfix the grid or --ntasks, or pass --skip-invalid"
        )
    rows = [(pt, argv) for pt, argv, problem in points if not problem]
    if not rows:
        raise StudyError("no grid point left to run")
    # (two array tasks would run one job and write two results of it; points numbered
    # as the grid and the notes above number them)
    refuse_twins(
        [(i, pt, shlex.join(argv)) for i, (pt, argv, problem) in enumerate(points) if not problem]
    )
    where = _script_dir(ns)
    job = _job_name(ns.job_name or f"{ns.model}_sweep", ns.job_name is not None)
    keys = list(grid)
    table = f"{job}_grid.tsv"
    tsv = ["#index\tproxy_args\t" + "\t".join(keys)]
    for i, (pt, argv) in enumerate(rows):
        bad_arg = next((a for a in argv if "\t" in a or "\n" in a), None)
        if bad_arg is not None:
            raise StudyError(f"grid point {json.dumps(pt)}: {bad_arg!r} holds a tab or newline")
        # The arguments shell-quoted (a path with spaces stays one argument); the script
        # reads them back with the shell's own parsing.
        tsv.append(f"{i}\t{shlex.join(argv)}\t" + "\t".join(json.dumps(pt[k]) for k in keys))
    n = len(rows)
    array = f"0-{n - 1}" + (f"%{ns.max_parallel}" if ns.max_parallel else "")
    header = sbatch_header(
        job_name=job,
        ntasks=ns.ntasks,
        tasks_per_node=ns.tasks_per_node,
        time=ns.time,
        output=_output(ns, where, "%x_%A_%a.out"),
        partition=ns.partition,
        account=ns.account,
        array=array,
        extra=ns.sbatch,
        chdir=where,
    )
    module = " ".join(shlex.quote(a) for a in sm.proxy_module_argv(ns.model))
    result = f"{ns.results_dir}/{job}_${{SLURM_ARRAY_TASK_ID}}.json"
    srun = (
        f'{ns.launcher} {shlex.quote(ns.python)} {module} ${{ARGV[@]+"${{ARGV[@]}}"}} '
        f'--json "{result}"'
    )
    script = "\n".join(
        [
            "#!/bin/bash",
            *header,
            f"# parameter sweep of {ns.model} on {ns.ntasks} processes: array task i runs "
            f"row i of {table} (generated by python -m simnet slurm sweep)",
            "set -euo pipefail",
            f"cd {shlex.quote(where)}  # (also when run without sbatch)",
            *setup_lines(ns.setup),
            f"TABLE={shlex.quote(table)}",
            'ID="${SLURM_ARRAY_TASK_ID:?run this script as a job array: sbatch it}"',
            "ROW=$(awk -F '\\t' -v id=\"$ID\" "
            "'$1 == id { print $2; found = 1 } END { exit !found }' \"$TABLE\") || "
            '{ echo "no row $ID in $TABLE" >&2; exit 2; }',
            'eval "ARGV=($ROW)"  # (the table holds the arguments shell-quoted)',
            f"mkdir -p {shlex.quote(ns.results_dir)}",
            srun,
            "",
        ]
    )
    plan = {
        "kind": "slurm-sweep",
        "model": ns.model,
        "ntasks": ns.ntasks,
        "grid": grid,
        "array": array,
        "tasks": [
            {
                "index": i,
                "point": pt,
                "proxy_args": argv,
                "result": result.replace("${SLURM_ARRAY_TASK_ID}", str(i)),
            }
            for i, (pt, argv) in enumerate(rows)
        ],
        "skipped": [{"point": pt, "reason": problem} for _i, pt, problem in bad],
    }
    files = {
        f"{job}.sbatch": script,
        table: "\n".join(tsv) + "\n",
        f"{job}_grid.json": json.dumps(plan["tasks"], indent=1) + "\n",
        "submit_all.sh": submit_all([f"{job}.sbatch"], ns),
    }
    return files, notes, plan


# -- command line -------------------------------------------------------------------------
def _common(p: argparse.ArgumentParser) -> None:
    add_model_options(p)
    p.add_argument("--scale", type=float, default=1.0, help="message size multiplier")
    p.add_argument("--compute", choices=("sleep", "spin", "none"), default="sleep")
    p.add_argument("--per-tensor", action="store_true")
    p.add_argument("--fix-quirks", action="store_true")
    p.add_argument("--iters", type=int, default=None, help="timed iterations")
    p.add_argument("--warmup", type=int, default=None, help="warm-up iterations")
    g = p.add_argument_group("Slurm")
    g.add_argument("--tasks-per-node", type=int, default=4, help="MPI ranks per node (default 4)")
    g.add_argument("--time", default="01:00:00", help="time limit per job (default 01:00:00)")
    g.add_argument("--partition", default=None)
    g.add_argument("--account", default=None)
    g.add_argument("--job-name", default=None, help="default: <model>_<mode> / <model>_sweep")
    g.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="OPTION",
        help="an extra #SBATCH option, e.g. --sbatch=--gres=gpu:4 (repeatable)",
    )
    g.add_argument(
        "--setup",
        action="append",
        default=[],
        metavar="LINE",
        help="a shell line run before srun, e.g. 'module load python' or "
        "'source ~/venv/bin/activate' (repeatable)",
    )
    g.add_argument("--launcher", default="srun", help="the MPI launcher (default srun)")
    g.add_argument("--python", default="python", help="the Python on the nodes")
    g.add_argument("--results-dir", default="results", help="where the runs write JSON")
    g.add_argument("--logs-dir", default="logs", help="where Slurm writes job output")
    p.add_argument("--out", required=True, help="directory for the generated files")


def build_parser() -> argparse.ArgumentParser:
    p = BriefParser(
        prog="python -m simnet slurm",
        description="Generate Slurm batch scripts: one per process count of a scaling study, "
        "or one job array over a grid of proxy arguments.",
    )
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("scaling", help="one batch script per process count, and submit_all.sh")
    _common(s)
    s.add_argument("--np", required=True, help="process counts, e.g. 4,8,16 or 4..256")
    s.add_argument("--mode", choices=("weak", "strong"), default="weak")
    w = sub.add_parser("sweep", help="one job-array script over a grid of proxy arguments")
    _common(w)
    w.add_argument("--ntasks", type=int, required=True, help="MPI ranks of every array task")
    w.add_argument(
        "--grid",
        required=True,
        help='JSON object of lists, e.g. \'{"scale": [0.1, 1], "args": [[48, 4], '
        f"[48, 8]]}}' (keys: {', '.join(SWEEP_KEYS)} and the model's flags), or @FILE",
    )
    w.add_argument(
        "--max-parallel", type=int, default=None, help="at most this many array tasks at once (%%K)"
    )
    w.add_argument(
        "--skip-invalid",
        action="store_true",
        help="leave out grid points the layout rejects (default: refuse)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    problem = output_dir_problem(ns.out)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        for name in ("ntasks", "max_parallel"):
            v = getattr(ns, name, None)
            if v is not None and v < 1:
                raise StudyError(f"--{name.replace('_', '-')} must be >= 1 (got {v})")
        if ns.what == "scaling":
            files, notes, plan = scaling_scripts(ns)
        else:
            files, notes, plan = sweep_scripts(ns)
    except StudyError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(ns.out)
    for sub in (ns.logs_dir, ns.results_dir):
        (out / sub).mkdir(parents=True, exist_ok=True)  # (Slurm makes no log folder)
    written = []
    for name, text in files.items():
        path = out / name
        written.append(write_file(path, text, executable=name.endswith((".sh", ".sbatch"))))
    plan["notes"] = notes
    plan["files"] = list(files)
    written.append(write_json(out / "slurm_plan.json", plan))
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    print(f"wrote {len(written)} files to {out}/: {', '.join(sorted(p.name for p in written))}")
    results = shlex.quote(str(out / ns.results_dir))
    if ns.what == "scaling":
        # The study's own table (speedup, efficiency, against predictions if wanted) of
        # the results the jobs write.
        then = shlex.join(
            ["python", "-m", "simnet", "scaling", "--model", ns.model, "--mode", ns.mode]
            + (["--args", *map(str, ns.args)] if ns.args else [])
            + [f"--flag={f}" for f in ns.flag]
            + (["--scale", repr(ns.scale)] if ns.scale != 1.0 else [])
            + (["--compute", ns.compute] if ns.compute != "sleep" else [])
            + (["--per-tensor"] if ns.per_tensor else [])
            + (["--fix-quirks"] if ns.fix_quirks else [])
            + ["--from", str(out / ns.results_dir)]
        )
    else:
        then = f"python -m simnet aggregate {results}"
    print(f"submit: bash {shlex.quote(str(out / 'submit_all.sh'))}  (then: {then})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
