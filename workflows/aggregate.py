"""``python -m simnet aggregate DIR_OR_GLOB... [-o PREFIX]``: one table of many runs.

Collects the JSON results of real runs (``python -m proxies.<model> --json``,
kind ``proxy-run``; the ring trainer's ``measured.json`` of the main job, kind
``ring-trainer-measurement``, a step its iteration) and of predictions (simnet's
``sim_results.json``, kind ``simnet-prediction``; sweep points, kind
``simnet-sweep-point``) into one table: model, world size, arguments, scale, network
(a prediction's topology; "measured" for a real run), per-iteration time, compute
and communication, throughput where the model defines a batch, source file.
Writes ``PREFIX.csv``, ``PREFIX.txt`` (aligned) and ``PREFIX.json``, prints
the text table, and reports files it could not read or that are not run
results (they are left out). A directory is searched recursively for
``*.json``; a pattern is expanded as a glob (``**`` allowed).
"""

from __future__ import annotations

import glob
import json
import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from workload.brief_argparse import BriefParser
from workload.results import (
    UNFINISHED_MARKER,
    output_file_problem,
    versions,
    write_csv,
    write_json,
    write_text,
)
from workload.run_result import ProxyRun, TrainerRun

from .study.models import samples_per_iteration
from .study.util import EXIT_USAGE, csv_cell, text_table

COLUMNS = (
    ("kind", "kind"),
    ("model", "model"),
    ("world_size", "P"),
    ("args", "args"),
    ("scale", "scale"),
    ("network", "network"),
    ("iteration_time_s", "iteration (s)"),
    ("compute_s", "compute (s)"),
    ("comm_s", "comm in flight (s)"),
    ("exposed_comm_s", "exposed comm (s)"),
    ("samples_per_iteration", "samples/iter"),
    ("throughput_samples_per_s", "throughput (samples/s)"),
    ("phases", "phases"),
    ("point", "sweep point"),
    ("source", "source"),
)
SKIP_SUFFIXES = (".trace.json",)  # Chrome/Perfetto traces: large, never results


def find_files(inputs: Sequence[str]) -> tuple[list[Path], list[str], list[str]]:
    """JSON files named by directories, files or glob patterns (a pattern's other files,
    a sweep's ``sweep.csv``, are passed over, said); and, for the inputs that gave
    none, why (no such path, or a folder without JSON files); and what was passed over."""
    found: list[Path] = []
    empty: list[str] = []
    passed: list[str] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            matches = sorted(q for q in p.rglob("*.json") if q.is_file())
            if not matches:
                empty.append(f"{item}: a folder without JSON files")
                continue
        elif p.is_file():
            matches = [p]
        else:
            hits = [Path(m) for m in glob.glob(item, recursive=True)]
            files = [m for m in hits if m.is_file()]
            matches = sorted(m for m in files if m.suffix == ".json")
            others = len(files) - len(matches)
            for d in (m for m in hits if m.is_dir()):
                matches += sorted(q for q in d.rglob("*.json") if q.is_file())
            if others:
                passed.append(f"{item}: passed over {others} matching file(s) not *.json")
        if not matches:
            empty.append(f"{item}: no such file, directory or match")
        found += matches
    seen: set[Path] = set()
    unique = []
    for f in found:
        key = f.resolve()
        if key not in seen and not f.name.endswith(SKIP_SUFFIXES):
            seen.add(key)
            unique.append(f)
    return unique, empty, passed


def network_text(config: dict[str, Any]) -> str:
    """A prediction's network in a few words: ``fat_tree k=16``, ``torus 4x4``,
    ``dragonfly 64``, ``ring 8``."""
    t = config.get("topology") or {}
    kind = t.get("type", "ring")
    if kind == "fat_tree":
        return f"fat_tree k={t.get('k')}" + (
            f" over {t['oversubscription']:g}" if t.get("oversubscription", 1) != 1 else ""
        )
    if kind == "torus":
        return "torus " + "x".join(str(d) for d in t.get("dims") or ())
    nodes = t.get("num_nodes") or (config.get("distributed") or {}).get("num_nodes")
    return f"{kind} {nodes}" if nodes else kind


def _args_text(params: dict[str, Any], info: dict[str, Any] | None = None) -> str | None:
    """``layers=48 stages=4`` (the model's arguments and options); None when it has none.
    With ``info`` (an LLM's: its ``shape``, ``dp``, ``micro_batches``), a 0 that meant "the
    preset's" or "derived" is the value that ran (``hidden=4096``, not ``hidden=0``)."""
    info = info or {}
    ran = {**{k: v for k, v in info.items() if isinstance(v, int)}, **(info.get("shape") or {})}
    shown = {k: ran.get(k, v) if v == 0 else v for k, v in params.items()}
    return " ".join(f"{k}={v}" for k, v in shown.items()) or None


def row_from_proxy(doc: dict[str, Any]) -> dict[str, Any]:
    run = ProxyRun.from_json(doc)
    row: dict[str, Any] = {
        "kind": "measured",
        "model": run.model,
        "world_size": run.world_size,
        "args": _args_text(run.params, run.info),
        "scale": run.options.get("scale", 1.0),
        "network": "measured",  # whatever MPI ran on
        "iteration_time_s": run.iteration_time_s,
        "phases": "+".join(run.phase_names),
    }
    for key in ("compute_s", "comm_s", "exposed_comm_s"):
        row[key] = run.mean_s(key)
    row["samples_per_iteration"] = samples_per_iteration(
        run.model, run.world_size, run.params, run.info
    )
    return row


def row_from_trainer(doc: dict[str, Any]) -> dict[str, Any]:
    """The ring trainer's ``measured.json`` (the main job's measurement): an iteration is
    a training step, its time the training's total over its steps, as the main job's
    "measured per step" (the mean of per-step slowest ranks differed from it by 1%)."""
    run = TrainerRun.from_json(doc)
    st = run.settings
    compute_us = int(st.compute_us) if float(st.compute_us).is_integer() else st.compute_us
    params = {  # as a prediction of the same run names them
        "input_channels": st.input_channels,
        "num_classes": st.num_classes,
        "compute_us": compute_us,
        "hierarchical": st.hierarchical,
    }
    if st.world_size is None or not run.epochs:
        raise ValueError("no world size or no epoch measured")
    info = run.workload.get("info", {})
    return {
        "kind": "measured",
        "model": "alexnet_ring",
        "world_size": st.world_size,
        "args": _args_text(params),
        "scale": st.scale,
        "network": "measured",
        "iteration_time_s": run.total_time_s / (st.epochs * st.steps),
        "phases": "step",  # the model's one phase (the trainer's traffic is by collective)
        "compute_s": None,  # the trainer times whole steps, not their parts
        "comm_s": None,
        "exposed_comm_s": None,
        "samples_per_iteration": samples_per_iteration("alexnet_ring", st.world_size, params, info),
    }


def row_from_prediction(doc: dict[str, Any]) -> dict[str, Any]:
    wl = doc["workload"]
    phases = doc["phases"]
    row: dict[str, Any] = {
        "kind": "predicted",
        "model": wl["model"],
        "world_size": wl["world_size"],
        "args": _args_text(wl.get("params", {}), wl.get("info")),
        "scale": _scale_of_prediction(doc),
        "network": network_text(doc.get("config", {})),
        "iteration_time_s": doc["iteration_time_s"],
        "phases": "+".join(ph["phase"] for ph in phases),
    }
    for key in ("compute_s", "comm_s", "exposed_comm_s"):
        row[key] = sum(ph[key]["mean"] for ph in phases)
    row["samples_per_iteration"] = samples_per_iteration(
        wl["model"], wl["world_size"], wl.get("params", {}), wl.get("info", {})
    )
    return row


def _scale_of_prediction(doc: dict[str, Any]) -> float | str:
    """The workload's message scale; with several jobs, theirs (one, or each: "a/b")."""
    jobs = (doc.get("jobs") or {}).get("jobs")
    if jobs:
        scales = sorted({float(j.get("scale", 1.0)) for j in jobs})
        return scales[0] if len(scales) == 1 else "/".join(f"{s:g}" for s in scales)
    return doc.get("config", {}).get("workload", {}).get("scale", 1.0)


def row_from_sweep_point(doc: dict[str, Any]) -> dict[str, Any]:
    r = doc["result"]
    row = {
        "kind": "predicted",
        "model": r["model"],
        "world_size": r["world_size"],
        "args": _args_text(r.get("params", {}), r.get("info")),
        "scale": doc.get("config", {}).get("workload", {}).get("scale", 1.0),
        "network": network_text(doc.get("config", {})),
        "iteration_time_s": r["iteration_time_s"],
        "compute_s": r["compute_s"],
        "comm_s": r["comm_s"],
        "exposed_comm_s": r["exposed_comm_s"],
        "phases": "+".join(ph["phase"] for ph in r.get("phases", [])),
        # What this point of the grid sets: points differing in other keys than the
        # table's columns (a topology's size) are told apart.
        "point": " ".join(f"{k}={json.dumps(v)}" for k, v in doc.get("point", {}).items()),
    }
    row["samples_per_iteration"] = samples_per_iteration(
        r["model"], r["world_size"], r.get("params", {}), r.get("info", {})
    )
    return row


READERS = {
    "proxy-run": row_from_proxy,
    "ring-trainer-measurement": row_from_trainer,
    "simnet-prediction": row_from_prediction,
    "simnet-sweep-point": row_from_sweep_point,
}


def _sweep_hashes(point_file: Path, cache: dict[Path, set[str] | None]) -> set[str] | None:
    """The config hashes of the points the manifest of a sweep point's folder lists
    (``DIR/manifest.json`` for ``DIR/points/point-*.json``); None without a manifest."""
    manifest = point_file.parent.parent / "manifest.json"
    if manifest not in cache:
        try:
            doc = json.loads(manifest.read_text())
            cache[manifest] = {str(p.get("config_hash")) for p in doc.get("points", [])}
        except (OSError, ValueError, AttributeError, TypeError):
            cache[manifest] = None
    return cache[manifest]


def collect(files: Iterable[Path]) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """Rows of the run results among ``files``; and (file, reason) of the others. A
    sweep point its folder's manifest does not list (a point of an earlier sweep into
    the same folder, with another grid or base configuration) is left out, said."""
    rows, ignored = [], []
    manifests: dict[Path, set[str] | None] = {}
    for f in files:
        try:
            doc = json.loads(f.read_text())
        except (OSError, UnicodeDecodeError) as e:
            ignored.append((str(f), f"unreadable: {e}"))
            continue
        except json.JSONDecodeError as e:
            ignored.append((str(f), f"unreadable: not valid JSON ({e.msg}, line {e.lineno})"))
            continue
        kind = doc.get("kind") if isinstance(doc, dict) else None
        reader = READERS.get(kind)
        if reader is None:
            what = f"kind {kind!r}" if kind else "no 'kind' field"
            ignored.append((str(f), f"not a run result ({what})"))
            continue
        if kind == "simnet-sweep-point":
            listed = _sweep_hashes(f, manifests)
            if listed is not None and str(doc.get("config_hash")) not in listed:
                ignored.append(
                    (
                        str(f),
                        "a point of an earlier sweep into this folder: its manifest.json "
                        "(the last sweep's grid and base configuration) does not list it",
                    )
                )
                continue
        try:
            row = reader(doc)
        except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError) as e:
            ignored.append((str(f), f"unreadable: incomplete {kind} document ({e!r})"))
            continue
        t = row["iteration_time_s"]
        s = row.get("samples_per_iteration")
        ok = isinstance(t, (int, float)) and math.isfinite(t) and t > 0
        row["throughput_samples_per_s"] = s / t if s and ok else None
        row["source"] = str(f)
        rows.append(row)
    rows.sort(
        key=lambda r: (
            r["model"],
            r["args"] or "",
            (0, r["scale"]) if isinstance(r["scale"], (int, float)) else (1, str(r["scale"])),
            r["world_size"],
            r["kind"],
            r.get("point") or "",
            r["source"],
        )
    )
    return rows, ignored


def output_prefix(name: str) -> Path:
    p = Path(name)
    return p.with_suffix("") if p.suffix in (".csv", ".txt", ".json") else p


def _with(prefix: Path, suffix: str) -> Path:
    return prefix.parent / (prefix.name + suffix)


def main(argv: Sequence[str] | None = None) -> int:
    ap = BriefParser(
        prog="python -m simnet aggregate",
        description="Collect proxy --json results and simnet results into one table "
        "(CSV, aligned text, JSON).",
    )
    ap.add_argument(
        "inputs",
        nargs="+",
        metavar="DIR_OR_GLOB",
        help="directories (searched recursively), files or glob patterns",
    )
    ap.add_argument(
        "-o",
        "--output",
        default="results/aggregate",
        help="output prefix: writes PREFIX.csv, PREFIX.txt, PREFIX.json "
        "(default results/aggregate)",
    )
    ap.add_argument("--quiet", action="store_true", help="do not print the table")
    ns = ap.parse_args(argv)
    prefix = output_prefix(ns.output)
    problem = output_file_problem(_with(prefix, ".csv"), "-o/--output")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    files, empty, passed = find_files(ns.inputs)
    for item in passed:
        print(f"note: {item}", file=sys.stderr)
    own = {_with(prefix, ".json").resolve()}
    files = [f for f in files if f.resolve() not in own]
    rows, ignored = collect(files)
    for item in empty:
        print(f"warning: {item}", file=sys.stderr)
    # A run's marker sits in its own folder, above its files (a study's runs/ too):
    # looked for from each file up to the input that named it.
    roots = [Path(i).resolve() for i in ns.inputs]
    marked: set[str] = {i for i in ns.inputs if (Path(i) / UNFINISHED_MARKER).is_file()}
    for f in files:
        for folder in f.resolve().parents:
            if (folder / UNFINISHED_MARKER).is_file():
                marked.add(str(folder))
            if folder in roots or not any(r in folder.parents for r in roots):
                break
    unfinished = sorted(marked)
    for folder in unfinished:
        print(
            f"warning: {folder} holds {UNFINISHED_MARKER}: the run that wrote it did not "
            "finish, and its files may mix with an earlier run's",
            file=sys.stderr,
        )
    for name, reason in ignored:
        print(f"ignored {name}: {reason}", file=sys.stderr)
    if not rows:
        print(f"error: no run results among {len(files)} JSON files", file=sys.stderr)
        return EXIT_USAGE if not files else 1
    keys = [k for k, _ in COLUMNS]
    headers = [h for _, h in COLUMNS]
    table = [[r.get(k) for k in keys] for r in rows]
    text = (
        f"{len(rows)} results ({sum(r['kind'] == 'measured' for r in rows)} measured, "
        f"{sum(r['kind'] == 'predicted' for r in rows)} predicted); times per iteration in "
        "seconds (measured: slowest rank, summed over phases), compute and communication "
        "mean over ranks; samples per iteration as defined by workflows.study.models\n\n"
        + text_table(headers, table)
    )
    if ignored:
        text += f"\n{len(ignored)} files left out:\n" + "".join(
            f"  {n}: {why}\n" for n, why in ignored
        )
    written = [
        write_csv(_with(prefix, ".csv"), keys, ([csv_cell(v) for v in r] for r in table)),
        write_text(_with(prefix, ".txt"), text),
        write_json(
            _with(prefix, ".json"),
            {
                "kind": "aggregate-table",
                "inputs": list(ns.inputs),
                "rows": rows,
                "ignored": [{"file": n, "reason": why} for n, why in ignored],
                "units": {"time": "seconds", "throughput": "samples/s"},
                "versions": versions(),
            },
        ),
    ]
    if not ns.quiet:
        print(text, end="")
    print(
        f"wrote {', '.join(str(p) for p in written)} ({len(rows)} rows, "
        f"{len(ignored)} files left out"
        + (f"; {len(empty)} inputs matched no file" if empty else "")
        + ")",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
