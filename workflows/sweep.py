"""``python -m simnet sweep``: simulate every point of a grid of configurations.

    python -m simnet sweep --config BASE.json \\
        --grid '{"workload.scale": [0.1, 1.0], "topology.num_nodes": [8, 16]}' --out DIR

The grid maps dotted configuration keys to lists of values; the sweep is their
cartesian product (the last key varies fastest), each point the base
configuration with those values set. Every point is simulated by a worker of
a pool and its result written atomically to ``DIR/points/point-<hash>.json``
(iteration time, compute/communication, wire bytes per group kind per
iteration, the point and its full configuration). ``<hash>`` digests the
point's complete configuration, so a rerun skips every point whose file is
complete and recomputes only the others (an interrupted or extended sweep
resumes). ``DIR/manifest.json`` lists every point with its status and, per
run, which points were computed and which skipped. At the end:
``DIR/sweep.csv`` and ``DIR/sweep.txt``, one row per point.

The pool (see ``workflows.study.pool``): a local process pool, or, launched
under MPI, mpi4py.futures workers:

    mpiexec -n 65 python -m mpi4py.futures -m simnet sweep --config ... --out DIR

(rank 0 runs the sweep; the other 64 ranks simulate). DIR must then be on a
file system every rank can write.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from simnet.config import (
    INPUT_FILES,
    Config,
    ConfigError,
    absolute_input_paths,
    current_key,
    current_names,
    load_config,
    workload_input_files,
)
from simnet.simulate import build_workload
from workload.brief_argparse import BriefParser
from workload.results import (
    lock_output_dir,
    output_dir_problem,
    release_output_dir,
    versions,
    write_csv,
    write_json,
    write_text,
)

from .study.pool import (
    POOL_KINDS,
    Interrupts,
    launch_rank,
    open_pool,
    run_tasks,
    sigterm_interrupts,
)
from .study.sim import (
    RESULT_VERSION,
    PointOutcome,
    PointResult,
    read_base_config,
    simulate_point,
)
from .study.util import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    StudyError,
    Throttle,
    check_dotted_key,
    csv_cell,
    expand_grid,
    parse_grid,
    refuse_twins,
    set_dotted,
    stable_hash,
    text_table,
)

MANIFEST = "manifest.json"
POINTS_DIR = "points"


def build_parser() -> argparse.ArgumentParser:
    p = BriefParser(
        prog="python -m simnet sweep",
        description="Simulate the cartesian product of a grid of configuration values, "
        "in parallel (local processes, or MPI workers under `mpiexec ... python -m "
        "mpi4py.futures -m simnet sweep`), resuming where a previous run stopped.",
    )
    p.add_argument("--config", required=True, help="base configuration (JSON)")
    p.add_argument(
        "--grid",
        required=True,
        help='JSON object of dotted keys -> lists, e.g. \'{"workload.scale": [0.1, 1], '
        '"topology.num_nodes": [8, 16]}\', or @FILE',
    )
    p.add_argument("--out", required=True, help="results directory")
    p.add_argument(
        "--workers", type=int, default=None, help="local pool size (default: the cores here)"
    )
    p.add_argument(
        "--executor",
        choices=POOL_KINDS,
        default="auto",
        help="auto: MPI workers when launched under MPI, else a local process pool; "
        "serial: in this process",
    )
    p.add_argument(
        "--skip-invalid",
        action="store_true",
        help="run the valid points when some are invalid (default: refuse the sweep)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress output")
    return p


@dataclass
class Point:
    index: int
    assign: dict[str, Any]
    config: dict[str, Any]  # the complete, validated configuration
    config_hash: str
    file: str  # relative to the output directory
    error: str | None = None  # invalid configuration
    status: str = "pending"
    result: PointResult | None = None
    computed_in_run: int | None = None


@dataclass
class Plan:
    base_path: Path
    grid: dict[str, list[Any]]
    points: list[Point]
    out: Path
    invalid: list[Point] = field(default_factory=list)


def plan_sweep(config_path: str | Path, grid_text: str, out: str | Path) -> Plan:
    """Validate the base file and the grid and expand the points (no simulation).

    Raises StudyError / ConfigError naming the problem.
    """
    base_path = Path(config_path)
    base = read_base_config(base_path)
    # The base alone need not be valid (the grid may complete it): every point is checked.
    base = current_names(base)  # one name per field, whichever the grid uses
    given = parse_grid(grid_text)
    grid: dict[str, list[Any]] = {}
    named: dict[str, str] = {}
    for key, values in given.items():
        now = current_key(key)
        if now in grid:
            raise StudyError(
                f"--grid names {now!r} twice ({named[now]!r} and {key!r}, one field's old "
                "and current names): give it once"
            )
        grid[now], named[now] = values, key
    for key in grid:
        check_dotted_key(Config, key)
    plan = Plan(base_path, grid, [], Path(out))
    for i, assign in enumerate(expand_grid(grid)):
        data = copy.deepcopy(base)
        for key, value in assign.items():
            set_dotted(data, key, value)
        absolute_input_paths(data, base_path.parent)
        error = None
        try:
            cfg = load_config(data)
            build_workload(cfg)  # cheap: catches layouts the world size cannot take
            full = cfg.model_dump(mode="json")
        except ConfigError as e:
            error = _short(str(e))
            full = data
        h = stable_hash(_with_inputs(full))
        pt = Point(i, assign, full, h, f"{POINTS_DIR}/point-{h}.json", error)
        plan.points.append(pt)
        if error:
            pt.status = "invalid"
            plan.invalid.append(pt)
    # (two workers would write one file at once, and the table list it twice)
    refuse_twins((p.index, p.assign, p.config_hash) for p in plan.points)
    return plan


def _with_inputs(full: dict[str, Any]) -> dict[str, Any]:
    """What a point's result depends on: its configuration and, where it names input
    files (a link or host calibration: their contents; a Chakra trace set: its files'
    names, sizes and modification times), those, so that a point is computed again when
    what it reads changes (a point reading none keeps its old hash)."""
    files: dict[str, Any] = {}
    for section, name in INPUT_FILES:
        path = (full.get(section) or {}).get(name)
        if path:
            try:
                files[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            except OSError as e:
                files[path] = f"unreadable: {e.strerror}"
    for name in workload_input_files(full):
        folder = Path(name).expanduser()
        try:
            if folder.is_file():
                files[name] = hashlib.sha256(folder.read_bytes()).hexdigest()
            else:
                files[name] = sorted(
                    (f.name, st.st_size, st.st_mtime_ns)
                    for f in (folder.iterdir() if folder.is_dir() else ())
                    if f.is_file() and (st := f.stat())
                )
        except OSError as e:
            files[name] = f"unreadable: {e.strerror}"
    return {"config": full, "input_files": files} if files else full


def _short(message: str) -> str:
    """A validation message without its header and without echoing the whole input."""
    lines = [ln.strip() for ln in message.splitlines() if not ln.endswith("invalid configuration")]
    return "; ".join(re.sub(r" \(got \{.*\}\)$", "", ln) for ln in lines)


def read_complete(path: Path, config_hash: str) -> PointResult | None:
    """The result stored in a point file, if the file is complete, for this config and
    of this simulator's :data:`RESULT_VERSION`."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if (
        isinstance(doc, dict)
        and doc.get("complete") is True
        and doc.get("config_hash") == config_hash
        and doc.get("result_version") == RESULT_VERSION  # (an older simulator's: again)
    ):
        return PointResult.from_json(doc.get("result"))
    return None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Manifest:
    """``manifest.json``: every point's status, and the history of runs."""

    def __init__(self, plan: Plan, executor: str) -> None:
        self.plan = plan
        self.path = plan.out / MANIFEST
        self.runs: list[dict[str, Any]] = []
        # config hash -> the run that computed it, as the earlier manifest says
        self.computed_by: dict[str, int] = {}
        try:
            old = json.loads(self.path.read_text())
            if isinstance(old, dict) and isinstance(old.get("runs"), list):
                self.runs = old["runs"]
            for p in old.get("points", []) if isinstance(old, dict) else []:
                if isinstance(p, dict) and isinstance(p.get("computed_in_run"), int):
                    self.computed_by[str(p.get("config_hash"))] = p["computed_in_run"]
        except (OSError, json.JSONDecodeError):
            pass
        try:
            base_hash: str | None = stable_hash(read_base_config(plan.base_path))
        except (StudyError, ConfigError, OSError):
            base_hash = None
        self.run: dict[str, Any] = {
            "run": len(self.runs) + 1,
            "base_config": str(plan.base_path),
            "base_config_hash": base_hash,  # which base (and grid) made the run's points
            "grid": plan.grid,  # its point indices are this grid's
            "started": _now(),
            "finished": None,
            "executor": executor,
            "computed": [],
            "skipped": [],
            "failed": [],
            "interrupted": False,
        }
        self.runs.append(self.run)

    def write(self) -> None:
        pts = self.plan.points
        doc = {
            "kind": "simnet-sweep-manifest",
            "base_config": str(self.plan.base_path),
            "grid": self.plan.grid,
            "total": len(pts),
            "complete": sum(p.status == "complete" for p in pts),
            "failed": sum(p.status == "failed" for p in pts),
            "invalid": sum(p.status == "invalid" for p in pts),
            "pending": sum(p.status == "pending" for p in pts),
            "points": [
                {
                    "index": p.index,
                    "point": p.assign,
                    "config_hash": p.config_hash,
                    "file": p.file,
                    "status": p.status,
                    "computed_in_run": p.computed_in_run,
                    **({"error": p.error} if p.error else {}),
                }
                for p in pts
            ],
            "runs": self.runs,
            "versions": versions(),
        }
        write_json(self.path, doc)


def run_plan(
    plan: Plan,
    pool: Executor,
    executor: str,
    say: Callable[[str], None],
    quiet: bool = False,
    stop: Interrupts | None = None,
) -> int:
    """Skip complete points, simulate the others on ``pool``, write the table (also when
    interrupted: Ctrl-C, counted by ``stop``, or SIGTERM)."""
    stop = stop or Interrupts()
    with stop.installed():
        return _run_plan(plan, pool, executor, say, quiet, stop)


def _run_plan(
    plan: Plan,
    pool: Executor,
    executor: str,
    say: Callable[[str], None],
    quiet: bool,
    stop: Interrupts,
) -> int:
    out = plan.out
    (out / POINTS_DIR).mkdir(parents=True, exist_ok=True)
    todo: list[Point] = []
    for pt in plan.points:
        if pt.status == "invalid":
            continue
        res = read_complete(out / pt.file, pt.config_hash)
        if res is not None:
            pt.status, pt.result = "complete", res
        else:
            todo.append(pt)
    manifest = Manifest(plan, executor)
    manifest.run["skipped"] = [p.index for p in plan.points if p.status == "complete"]
    for p in plan.points:
        if p.status == "complete":  # computed by an earlier run, which one if it is known
            p.computed_in_run = manifest.computed_by.get(p.config_hash)
    manifest.write()
    runnable = len(plan.points) - len(plan.invalid)
    skipped = runnable - len(todo)
    say(
        f"sweep: {len(plan.points)} points ({len(plan.invalid)} invalid), {skipped} already "
        f"complete, {len(todo)} to simulate on {executor}"
    )
    ours = {pt.file.rsplit("/", 1)[-1] for pt in plan.points}
    others = sorted(f.name for f in (out / POINTS_DIR).glob("point-*.json") if f.name not in ours)
    if others:
        say(
            f"note: {out / POINTS_DIR} also holds {len(others)} point file(s) of earlier "
            "sweeps with another grid or base configuration: they are not in this sweep's "
            "table, and aggregate leaves them out (its manifest.json lists this sweep's); "
            "a fresh --out keeps sweeps apart"
        )
    started = time.perf_counter()
    progress = Throttle(lambda m: say(m), 1.0)
    counts = {"done": skipped, "failed": 0}
    write_later = Throttle(lambda _m: manifest.write(), 5.0)

    def on_result(pt: Point, res: PointOutcome) -> None:
        if res.result is not None:
            pt.status, pt.result = "complete", res.result
            pt.computed_in_run = manifest.run["run"]
            manifest.run["computed"].append(pt.index)
            counts["done"] += 1
        else:
            pt.status, pt.error = "failed", res.error or "unknown error"
            manifest.run["failed"].append(pt.index)
            counts["failed"] += 1
            say(f"point {pt.index} {json.dumps(pt.assign)} failed: {pt.error}")
        finished = counts["done"] + counts["failed"]
        if not quiet:
            progress(
                f"[{time.perf_counter() - started:7.1f} s] {finished}/{runnable} points "
                f"done ({skipped} skipped as complete, {counts['failed']} failed)",
                force=finished == runnable,
            )
        write_later("")

    tasks = [
        (
            pt,
            simulate_point,
            (
                pt.config,
                str(out / pt.file),
                {
                    "index": pt.index,
                    "point": pt.assign,
                    "config_hash": pt.config_hash,
                    "grid_keys": list(plan.grid),
                },
            ),
        )
        for pt in todo
    ]
    run = run_tasks(
        pool,
        tasks,
        on_result,
        stop=stop,
        say=say,
        progress=None if quiet else say,
        describe=lambda pt: f"point {pt.index}",
    )
    failed = counts["failed"]
    if run.interrupted:
        # A point whose worker wrote its file as the interrupt came is complete, and one
        # the interrupt caught between its status and its count: count them.
        counted = set(manifest.run["computed"])
        for pt in todo:
            if pt.status == "pending":
                res = read_complete(out / pt.file, pt.config_hash)
                if res is not None:
                    pt.status, pt.result = "complete", res
            if pt.status == "complete" and pt.index not in counted:
                pt.computed_in_run = manifest.run["run"]
                manifest.run["computed"].append(pt.index)
    manifest.run["computed"].sort()
    manifest.run["interrupted"] = run.interrupted is not None
    manifest.run["finished"] = _now()
    manifest.write()
    # (interrupted: the table of what is complete so far, the others pending, so that
    # an interrupted sweep can be read before it is finished)
    files = write_table(plan)
    if run.interrupted:
        done = sum(p.status == "complete" for p in plan.points)
        failed_now = f", {failed} failed" if failed else ""
        stopped = sum(pt.status != "complete" for pt in run.lost)
        lost = f"; {stopped} stopped while being simulated" if stopped else ""
        say(
            f"interrupted: {done} of {runnable} points complete (in sweep.csv{failed_now}; "
            f"the others pending{lost}); run the same command again to finish the others"
        )
        return EXIT_INTERRUPTED
    computed = len(manifest.run["computed"])
    say(
        f"wrote {', '.join(f.name for f in files)} to {out}/: {runnable - failed} point "
        f"results ({computed} simulated now, {skipped} from earlier runs"
        + (f", {failed} failed" if failed else "")
        + ")"
    )
    return 1 if failed else 0


def table_rows(plan: Plan) -> tuple[list[str], list[list[Any]]]:
    keys = list(plan.grid)
    groups = sorted({g for p in plan.points if p.result for g in p.result.wire_bytes_by_group})
    headers = [
        "index",
        *keys,
        "status",
        "world_size",
        "iteration_time_s",
        "compute_s",
        "exposed_comm_s",
        *(f"wire_bytes_{g}" for g in groups),
        "file",
        "error",
    ]
    rows = []
    for p in plan.points:
        r = p.result
        figures = (
            [None] * (4 + len(groups))
            if r is None
            else [
                r.world_size,
                r.iteration_time_s,
                r.compute_s,
                r.exposed_comm_s,
                *(r.wire_bytes_by_group.get(g) for g in groups),
            ]
        )
        rows.append(
            [
                p.index,
                *(_cell(p.assign[k]) for k in keys),
                p.status,
                *figures,
                p.file if r else None,
                # (one line: a configuration error's lines joined)
                "; ".join(ln.strip() for ln in (p.error or "").splitlines() if ln.strip()) or None,
            ]
        )
    return headers, rows


def _cell(v: Any) -> Any:
    return v if isinstance(v, (int, float, str)) or v is None else json.dumps(v)


def write_table(plan: Plan) -> list[Path]:
    headers, rows = table_rows(plan)
    csv = write_csv(plan.out / "sweep.csv", headers, ([csv_cell(v) for v in r] for r in rows))
    # The text table keeps the start of an error (the whole is in sweep.csv).
    short = [[*r[:-1], r[-1] if r[-1] is None or len(r[-1]) <= 80 else r[-1][:77] + "..."]
             for r in rows]  # fmt: skip
    text = (
        f"simnet sweep of {plan.base_path} over {json.dumps(plan.grid)}\n"
        "times in seconds per iteration; wire bytes per iteration, all ranks\n\n"
        + text_table(headers, short)
    )
    txt = write_text(plan.out / "sweep.txt", text)
    return [csv, txt]


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    root = launch_rank() == 0

    def say(msg: str) -> None:
        if root:
            print(msg, file=sys.stderr, flush=True)

    problem = output_dir_problem(ns.out)
    if problem:
        say(f"error: {problem}")
        return EXIT_USAGE
    try:
        plan = plan_sweep(ns.config, ns.grid, ns.out)
    except (StudyError, ConfigError) as e:
        say(f"error: {e}")
        return EXIT_USAGE
    if plan.invalid and not ns.skip_invalid:
        say(f"error: {len(plan.invalid)} of {len(plan.points)} points are invalid:")
        for pt in plan.invalid[:20]:
            say(f"  point {pt.index} {json.dumps(pt.assign)}: {pt.error}")
        if len(plan.invalid) > 20:
            say(f"  ... and {len(plan.invalid) - 20} more")
        say("fix the grid, or pass --skip-invalid to run the valid points")
        return EXIT_USAGE
    if ns.workers is not None and ns.workers < 1:
        say(f"error: --workers must be >= 1 (got {ns.workers})")
        return EXIT_USAGE
    workers = ns.workers or min(os.cpu_count() or 1, max(1, len(plan.points)))
    # SIGTERM (kill, timeout, a Slurm time limit or scancel) is taken as an interrupt by
    # the process that writes the table, so that it records what is complete; an MPI
    # rank serving as a worker keeps the default (it just ends).
    on_term = sigterm_interrupts() if root else nullcontext()
    try:
        with on_term, open_pool(ns.executor, workers) as (pool, desc):
            if pool is None:  # an MPI rank that served as a worker
                return 0
            # (taken here, by the one process that writes: refused, it ends the MPI
            # workers as a finished sweep does)
            problem = lock_output_dir(plan.out)
            if problem:
                say(f"error: {problem}")
                return EXIT_USAGE
            try:
                return run_plan(plan, pool, desc, say, quiet=ns.quiet)
            finally:
                release_output_dir(plan.out)
    except KeyboardInterrupt:
        say(
            "\ninterrupted: every file already written is complete; run the same command "
            "again to resume"
        )
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
