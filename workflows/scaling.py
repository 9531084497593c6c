"""``python -m simnet scaling``: a weak or strong scaling study of one proxy.

    python -m simnet scaling --model dlrm --np 1,2,4 --scale 0.1 \\
        --predict-np 8..1024 --config cluster.json --out results/scaling_dlrm

1. Runs the proxy for real at each ``--np`` count (``mpiexec`` in a subprocess,
   with a timeout, ``--json``); counts the model's layout rejects are skipped
   with a note.
2. With ``--predict-np`` (or ``--config``), simulates the same workload with
   simnet at the measured and the predicted counts on the topology of
   ``--config`` (default: an assumed cluster, see DEFAULT_PREDICT_CONFIG), so
   the curve continues past this machine and the prediction error shows where
   both exist.
3. Reports per point: the iteration time, the samples it processes (the
   global batch, see ``workflows.study.models``), throughput in samples/s,
   speedup (throughput over the smallest count's), efficiency (weak:
   t(P1) / t(P); strong: speedup / (P / P1)) and the compute / exposed
   communication split; writes ``scaling.json``, ``scaling.csv``,
   ``scaling.txt`` and three plots.

Weak scaling keeps the work per process (same arguments at every count);
strong scaling keeps the global batch, which only resnet152_scal (the
reference's table) and alexnet_ring (compute per step divided by P) can do.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from simnet.config import ConfigError, absolute_input_paths, load_config
from topologies import DEFAULT_GROUP_SIZE
from workload.brief_argparse import BriefParser
from workload.layout import LayoutError
from workload.results import (
    UNFINISHED_MARKER,
    atomic_write,
    lock_output_dir,
    mark_finished,
    mark_unfinished,
    output_dir_problem,
    remove_others,
    versions,
    write_csv,
    write_json,
    write_text,
)
from workload.run_result import ProxyRun
from workload.units import MS_PER_S

from .launcher import mpiexec, run_command
from .study import models as sm
from .study.pool import Interrupts, TaskRun, open_pool, run_tasks
from .study.sim import PointOutcome, read_base_config, simulate_point
from .study.util import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    StudyError,
    add_model_options,
    csv_cell,
    last_error_line,
    parse_counts,
    text_table,
)

DEFAULT_TIMEOUT_S = 600.0

# The predicted topology when --config is not given: a cluster of 4 GPUs per node,
# nodes on a 100 Gb/s (12.5 GB/s), 5 us network (RoCEv2-like, workflows.md s.2).
# Intra-node links (no NVLink: PCIe-class, 25 GB/s, 0.5 us) are an assumption.
DEFAULT_PREDICT_CONFIG: dict[str, Any] = {
    "distributed": {"bandwidth_limit_gb_per_s": 25.0},
    "topology": {
        "type": "hierarchical",
        "group_size": DEFAULT_GROUP_SIZE,
        "intra_bandwidth_gb_per_s": 25.0,
        # Latencies are per hop and a route crosses two: 0.25 + 0.25 inside a
        # node, 2.5 + 2.5 between nodes give the end-to-end 0.5 us and 5 us.
        "intra_latency_us": 0.25,
        "inter_bandwidth_gb_per_s": 12.5,
        "inter_latency_us": 2.5,
    },
}
DEFAULT_PREDICT_NOTE = (
    "predicted topology assumed (no --config): hierarchical, 4 endpoints per node, "
    "12.5 GB/s (100 Gb/s) and 5 us between nodes, 25 GB/s and 0.5 us inside a node"
)


# -- the arithmetic ---------------------------------------------------------------------
def throughput(samples_per_iteration: float, iteration_time_s: float) -> float:
    """Samples per second."""
    return samples_per_iteration / iteration_time_s


def weak_efficiency(t_base_s: float, t_s: float) -> float:
    """Weak scaling: the time of the smallest count over this count's (ideal 1)."""
    return t_base_s / t_s


def strong_efficiency(speedup: float, p: int, p_base: int) -> float:
    """Strong scaling: speedup over the ideal speedup P / P1 (ideal 1)."""
    return speedup / (p / p_base)


def scaling_metrics(
    points: Sequence[tuple[int, float, float]], mode: str
) -> list[dict[str, float | int]]:
    """``points``: (P, iteration time s, samples per iteration), any order.

    Returns, sorted by P and relative to the smallest P (P1):
    * throughput = samples / time (samples/s);
    * speedup = throughput(P) / throughput(P1);
    * ideal speedup: what the speedup would be with perfect scaling: strong,
      P / P1 (the same samples in 1 / (P / P1) of the time); weak, the growth of
      the samples per iteration at a constant time, samples(P) / samples(P1),
      which is P / P1 when the batch per process is fixed;
    * efficiency: weak, t(P1) / t(P); strong, speedup / (P / P1); both equal
      speedup / ideal speedup.
    """
    if mode not in ("weak", "strong"):
        raise ValueError(f"mode must be weak or strong (got {mode!r})")
    pts = sorted(points)
    if not pts:
        return []
    p1, t1, s1 = pts[0]
    thr1 = throughput(s1, t1)
    out = []
    for p, t, s in pts:
        thr = throughput(s, t)
        speedup = thr / thr1
        out.append(
            {
                "np": p,
                "throughput_samples_per_s": thr,
                "speedup": speedup,
                "ideal_speedup": s / s1 if mode == "weak" else p / p1,
                "efficiency": weak_efficiency(t1, t)
                if mode == "weak"
                else strong_efficiency(speedup, p, p1),
            }
        )
    return out


# -- measured points --------------------------------------------------------------------
def read_proxy_json(path: Path) -> dict[str, Any]:
    """Per-iteration figures of a proxy ``--json`` document (summed over its phases)."""
    run = ProxyRun.load(path)
    out: dict[str, Any] = {
        "iteration_time_s": run.iteration_time_s,
        "phases": run.phase_names,
        "timed_iterations": run.timed_iterations,
    }
    for key in ("compute_s", "comm_s", "exposed_comm_s"):
        out[key] = run.mean_s(key)
    out["samples_per_iteration"] = sm.samples_per_iteration(
        run.model, run.world_size, run.params, run.info
    )
    out["mpi"] = run.mpi
    return out


def measure(
    study: sm.Study,
    counts: Sequence[int],
    base: int,
    out: Path,
    *,
    mpiexec: str,
    iters: int | None,
    warmup: int | None,
    timeout_s: float,
    say: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Run the proxy at every count; one record per count (ok, skipped or failed)."""
    cores = os.cpu_count() or 1
    records = []
    for p in counts:
        rec: dict[str, Any] = {"source": "measured", "np": p}
        records.append(rec)
        try:
            flags = sm.point_flags(study, p, base)
        except StudyError as e:
            rec.update(status="skipped", note=str(e))
            say(f"  np {p}: skipped: {e}")
            continue
        problem = sm.layout_problem(study, p, flags)
        if problem:
            rec.update(status="skipped", note=problem)
            say(f"  np {p}: skipped: {problem}")
            continue
        json_path = out / "runs" / f"{study.model}_np{p}.json"
        json_path.unlink(missing_ok=True)
        cmd = sm.proxy_command(
            study, p, flags, str(json_path), mpiexec=mpiexec, iters=iters, warmup=warmup
        )
        rec["command"] = shlex.join(cmd)
        rec["flags"] = flags
        notes = []
        if p > cores:
            notes.append(f"oversubscribed: {p} ranks on {cores} cores")
        # The whole command, launcher too: copied, it runs the same P ranks.
        say(f"  np {p}: running {rec['command']}" + (f" ({notes[0]})" if notes else ""))
        res = run_command(cmd, timeout_s, out / "runs" / f"{study.model}_np{p}.log")
        rec["wall_s"] = res.wall_s
        if res.timed_out:
            rec.update(status="failed", note=f"timed out after {timeout_s:g} s (--timeout)")
        elif res.returncode != 0:
            status = "skipped" if res.returncode == EXIT_USAGE else "failed"
            rec.update(
                status=status,
                note=f"exit code {res.returncode}: {last_error_line(res.output)}",
            )
        elif not json_path.exists():
            rec.update(status="failed", note="the run wrote no JSON")
        else:
            try:
                rec.update(read_proxy_json(json_path), status="ok", file=str(json_path))
            except (OSError, KeyError, ValueError, TypeError) as e:
                rec.update(status="failed", note=f"unreadable result {json_path}: {e}")
        if rec["status"] != "ok":
            say(f"  np {p}: {rec['status']}: {rec['note']}")
        else:
            say(f"  np {p}: {rec['iteration_time_s']:.6f} s per iteration")
        if notes:
            rec["note"] = "; ".join([*notes, *([rec["note"]] if rec.get("note") else [])])
    return records


def _proxy_run(path: Path) -> tuple[ProxyRun | None, str]:
    """The proxy result in ``path``, or None and why it is not one (in words)."""
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        return None, f"unreadable: {e.strerror or e}"
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None, "not valid JSON"
    if not isinstance(doc, dict):
        return None, "not a JSON object"
    if doc.get("kind", "proxy-run") != "proxy-run":
        return None, f"a {doc['kind']} document"
    missing = [k for k in ("model", "world_size", "phases") if k not in doc]
    if missing:
        return None, f"no {', '.join(missing)}"
    try:
        run = ProxyRun.from_json(doc)
        run.iteration_time_s  # noqa: B018 (its phases' figures, read as the table will)
        run.timed_iterations  # noqa: B018
    except (KeyError, ValueError, TypeError, AttributeError, IndexError) as e:
        what = f"no {e.args[0]}" if isinstance(e, KeyError) else "malformed"
        return None, f"its phases are incomplete ({what})"
    return run, ""


def read_measured(
    study: sm.Study, folder: Path, predicted: Sequence[int] = ()
) -> tuple[list[dict[str, Any]], list[str]]:
    """The measured points of ``folder``: every proxy ``--json`` result in it (searched
    recursively; a Slurm scaling study's ``results/``), one record per process count;
    and notes on the files left out: unreadable; another model, scale, compute,
    --per-tensor, --fix-quirks or a named algorithm; positional arguments or model
    options other than the study runs at that count (weak: the same at every count;
    strong: as it divides the work from its P1, the smallest count of the results and
    ``predicted``); a count given twice (the newest kept)."""
    notes: list[str] = []
    # What the study runs, as a proxy records it (a run with other options is not one
    # of its points).
    wanted = {
        "model": study.model,
        "scale": study.scale,
        "compute": study.compute,
        "per_tensor": study.per_tensor,
        "fix_quirks": study.fix_quirks,
        "algorithm": None,
    }
    files = sorted(
        (f for f in folder.rglob("*.json") if f.is_file() and not f.name.endswith(".trace.json")),
        key=lambda f: f.stat().st_mtime,
    )
    runs: list[tuple[Path, ProxyRun]] = []
    for f in files:
        run, why = _proxy_run(f)
        if run is None:
            notes.append(f"{f}: left out (not a proxy result: {why})")
            continue
        got = {
            "model": run.model,
            **{k: run.options.get(k, wanted[k]) for k in wanted if k != "model"},
        }
        differ = [
            f"{k} {got[k]!r} (the study's {wanted[k]!r})" for k in wanted if got[k] != wanted[k]
        ]
        if differ:
            notes.append(f"{f}: left out ({', '.join(differ)})")
            continue
        runs.append((f, run))
    # Strong scaling's options at P depend on its P1, which depends on the counts kept:
    # until they agree (a count left out can move P1 up, and what it keeps with it).
    counts = {r.world_size for _f, r in runs}
    for _ in range(len(runs) + 1):
        base = sm.base_count(study, sorted(counts | set(predicted)))
        kept, left = _same_program(study, runs, base)
        counts = {r.world_size for _f, r in kept}
        if not counts or sm.base_count(study, sorted(counts | set(predicted))) == base:
            break
    notes += left
    records: dict[int, dict[str, Any]] = {}
    for f, run in kept:
        if run.world_size in records:
            notes.append(
                f"{records[run.world_size]['file']}: left out (a newer result of "
                f"{run.world_size} processes: {f})"
            )
        rec: dict[str, Any] = {"source": "measured", "np": run.world_size, "file": str(f)}
        try:
            rec.update(read_proxy_json(f), status="ok")
        except (OSError, KeyError, ValueError, TypeError, AttributeError, IndexError) as e:
            rec.update(status="failed", note=f"unreadable result {f}: {e}")
        records[run.world_size] = rec
    return [records[p] for p in sorted(records)], notes


def _same_program(
    study: sm.Study, runs: list[tuple[Path, ProxyRun]], base: int | None
) -> tuple[list[tuple[Path, ProxyRun]], list[str]]:
    """The runs whose positional arguments and model options (their ``params``) are those
    the study runs at their count, anchored at ``base``; and notes on the others."""
    kept, notes = [], []
    for f, run in runs:
        p = run.world_size
        try:
            if base is None:
                raise StudyError(f"{study.model} accepts none of the counts")
            flags = sm.point_flags(study, p, base)
            ours = sm.build(study, p, flags).params
        except (StudyError, LayoutError, ValueError) as e:
            notes.append(f"{f}: left out (the study cannot run {p} processes: {e})")
            continue
        differ = []
        for k in {**ours, **run.params}:
            if k not in run.params:
                differ.append(f"no {k} (the study's {ours[k]!r} at {p} processes)")
            elif k not in ours:
                differ.append(f"{k} {run.params[k]!r} (the study has no {k})")
            elif run.params[k] != ours[k]:
                differ.append(f"{k} {run.params[k]!r} (the study's {ours[k]!r} at {p} processes)")
        if differ:
            notes.append(f"{f}: left out ({', '.join(differ)})")
        else:
            kept.append((f, run))
    return kept, notes


# -- predicted points -------------------------------------------------------------------
def predicted_config(
    base: dict[str, Any], study: sm.Study, p: int, flags: dict[str, int]
) -> tuple[dict[str, Any], list[str]]:
    """The base configuration resized for ``p`` ranks running the study's workload.

    Hierarchical: endpoints rounded up to whole groups (ranks fill the first
    ones); ring and switch: ``p`` endpoints (ring: one ring in rank order, as
    the proxy's default); fat-tree and torus keep their size and need ``p`` <=
    endpoints. Raises StudyError when the topology cannot hold ``p`` ranks.
    """
    d = copy.deepcopy(base)
    notes = []
    for sec in ("distributed", "topology", "workload"):
        d.setdefault(sec, {})
    d["distributed"]["num_nodes"] = p
    topo = d["topology"]
    kind = topo.get("type", "ring")
    if kind == "hierarchical":
        g = topo.get("group_size") or DEFAULT_GROUP_SIZE
        topo["num_nodes"] = -(-p // g) * g
    elif kind in ("ring", "switch"):
        topo["num_nodes"] = p
        if kind == "ring" and topo.get("permutations", [0]) != [0]:
            notes.append("ring permutations replaced by one ring in rank order (as the proxy)")
        if kind == "ring":
            topo["permutations"] = [0]
    if topo.pop("placement", None) is not None:
        notes.append("topology.placement dropped (it is sized for another world)")
    d["workload"] = sm.workload_section(study, p, flags, base.get("workload"))
    if kind in ("fat_tree", "torus"):
        # Its size, checked here for a study's words (the configuration would refuse
        # more ranks than endpoints naming the world size).
        probe = {**d, "workload": {**d["workload"], "world_size": 1}, "whatif": {}}
        try:
            n = load_config(probe).num_endpoints
        except ConfigError as e:
            raise StudyError(str(e)) from None
        if p > n:
            raise StudyError(f"the {kind} of --config has {n} endpoints, fewer than {p} ranks")
    return d, notes


def predict(
    study: sm.Study,
    counts: Sequence[int],
    base_count: int,
    base_cfg: dict[str, Any],
    *,
    workers: int,
    say: Callable[[str], None],
    stop: Interrupts,
) -> tuple[list[dict[str, Any]], list[str], str | None]:
    """Simulate every count (in a local process pool when workers > 1); also how the
    simulations were interrupted (see :class:`TaskRun`), if they were."""
    records: dict[int, dict[str, Any]] = {}
    notes: dict[str, set[int]] = {}  # note -> the counts it holds at
    jobs: dict[int, dict[str, Any]] = {}
    for p in counts:
        rec: dict[str, Any] = {"source": "predicted", "np": p}
        records[p] = rec
        try:
            flags = sm.point_flags(study, p, base_count)
            problem = sm.layout_problem(study, p, flags)
            if problem:
                raise StudyError(problem)
            cfg, n = predicted_config(base_cfg, study, p, flags)
        except StudyError as e:
            rec.update(status="skipped", note=str(e))
            continue
        for note in n:
            notes.setdefault(note, set()).add(p)
        rec["flags"] = flags
        jobs[p] = cfg
    run = TaskRun()
    if jobs:
        kind = "serial" if workers <= 1 or len(jobs) == 1 else "local"
        say(f"  simulating {len(jobs)} counts ({kind}): {', '.join(map(str, jobs))}")

        def on_result(p: int, res: PointOutcome) -> None:
            rec = records[p]
            r = res.result
            if r is not None:
                rec.update(
                    status="ok",
                    iteration_time_s=r.iteration_time_s,
                    compute_s=r.compute_s,
                    comm_s=r.comm_s,
                    exposed_comm_s=r.exposed_comm_s,
                    samples_per_iteration=sm.samples_per_iteration(
                        r.model, r.world_size, r.params, r.info
                    ),
                    wire_bytes_by_group=r.wire_bytes_by_group,
                    topology=r.topology,
                    sim_wall_s=r.sim_wall_s,
                )
                for note in [*r.assumed, *(f"what-if: {w}" for w in r.scenario)]:
                    notes.setdefault(note, set()).add(p)
                say(f"  np {p}: predicted {r.iteration_time_s:.6f} s per iteration")
            elif res.kind == "pool":
                rec.update(status="failed", note=f"prediction lost: {res.error}")
                say(f"  np {p}: prediction lost: {res.error}")
            else:
                status = "skipped" if res.kind == "config" else "failed"
                # (a configuration's error in one line, without its header)
                why = "; ".join(
                    ln.strip()
                    for ln in (res.error or "unknown error").splitlines()
                    if not ln.rstrip().endswith("invalid configuration")
                )
                rec.update(status=status, note=why)
                say(f"  np {p}: prediction {status}: {why}")

        with open_pool(kind, min(workers, len(jobs))) as (pool, _desc):
            assert pool is not None
            run = run_tasks(
                pool,
                [(p, simulate_point, (cfg,)) for p, cfg in jobs.items()],
                on_result,
                stop=stop,
                say=say,
                progress=say,
                describe=lambda p: f"np {p}",
                what="counts",
            )
        for p in run.not_started:
            records[p].update(status="interrupted", note="not simulated: interrupted before")
        for p in run.lost:
            records[p].update(status="interrupted", note="its simulation was stopped")
    # A note of every simulated count as it is; one of some counts names them (a
    # what-if's rerouted pairs differ with the network's size), in order of count.
    every = {p for p, r in records.items() if r.get("status") == "ok"} or set(jobs)
    lines = [
        (min(at), n if at >= every else f"{n} (at P = {', '.join(map(str, sorted(at)))})")
        for n, at in notes.items()
    ]
    return [records[p] for p in sorted(records)], [n for _, n in sorted(lines)], run.interrupted


# -- putting it together ----------------------------------------------------------------
def add_metrics(records: list[dict[str, Any]], mode: str) -> None:
    """Fill throughput, speedup, ideal speedup and efficiency of the ok records."""
    ok = [
        r
        for r in records
        if r.get("status") == "ok" and r.get("samples_per_iteration") and r["iteration_time_s"] > 0
    ]
    by_p = {r["np"]: r for r in ok}
    for m in scaling_metrics(
        [(r["np"], r["iteration_time_s"], r["samples_per_iteration"]) for r in ok], mode
    ):
        by_p[m["np"]].update(m)


def add_errors(measured: list[dict[str, Any]], predicted: list[dict[str, Any]]) -> None:
    """Prediction error of the iteration time where both exist, in percent."""
    meas = {r["np"]: r for r in measured if r.get("status") == "ok"}
    for r in predicted:
        m = meas.get(r["np"])
        if r.get("status") == "ok" and m is not None:
            r["error_pct"] = (
                100.0 * (r["iteration_time_s"] - m["iteration_time_s"]) / (m["iteration_time_s"])
            )


COLUMNS = (
    ("source", "source"),
    ("np", "P"),
    ("status", "status"),
    ("iteration_time_s", "iteration (s)"),
    ("samples_per_iteration", "samples/iter"),
    ("throughput_samples_per_s", "throughput (samples/s)"),
    ("speedup", "speedup"),
    ("ideal_speedup", "ideal"),
    ("efficiency", "efficiency"),
    ("compute_s", "compute (s)"),
    ("exposed_comm_s", "exposed comm (s)"),
    ("comm_s", "comm in flight (s)"),
    ("error_pct", "pred. error (%)"),
)


def report_text(doc: dict[str, Any]) -> str:
    rows = [[r.get(k) for k, _ in COLUMNS] for r in doc["measured"] + doc["predicted"]]
    args = " ".join(map(str, doc["args"])) or "defaults"
    flags = " ".join(f"{k}={v}" for k, v in doc["flags"].items())
    if flags:
        args += f", options {flags}"
    head = [
        f"{doc['model']} {doc['mode']} scaling study (arguments: {args}, "
        f"scale {doc['scale']:g}, compute {doc['compute']})",
        f"samples: {doc['batch_definition']}",
        "speedup = throughput(P) / throughput(P1)"
        + "".join(
            f", P1 = {p1} ({name})"
            for name, p1 in doc.get("speedup_base_np", {}).items()
            if p1 is not None
        )
        + "; ideal = "
        + ("samples(P) / samples(P1)" if doc["mode"] == "weak" else "P / P1")
        + "; efficiency = "
        + ("t(P1) / t(P)" if doc["mode"] == "weak" else "speedup / (P / P1)")
        + "; times per iteration (slowest rank), compute and communication mean over ranks",
        "",
    ]
    lines = [*head, text_table([h for _, h in COLUMNS], rows).rstrip()]
    skipped = [r for r in doc["measured"] + doc["predicted"] if r.get("note")]
    if skipped:
        lines.append("")
        lines.append("notes:")
        lines += [f"  {r['source']} np {r['np']}: {r['note']}" for r in skipped]
    if doc["notes"]:
        lines.append("")
        lines += [f"note: {n}" for n in doc["notes"]]
    return "\n".join(lines) + "\n"


def write_csv_table(path: Path, doc: dict[str, Any]) -> Path:
    keys = [k for k, _ in COLUMNS] + ["note", "file"]
    rows = [[csv_cell(r.get(k)) for k in keys] for r in doc["measured"] + doc["predicted"]]
    return write_csv(path, keys, rows)


# -- plots ------------------------------------------------------------------------------
def _figure(width_in: float, height_in: float) -> Any:
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> Path:
    try:
        return atomic_write(
            path, lambda f: fig.savefig(f, format="png", dpi=100, facecolor="white"), binary=True
        )
    finally:
        fig.clear()


def _plain_ticks() -> Any:
    """Tick labels as plain numbers (1, 2, 4, 0.5), not powers of the log axis's base."""
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: f"{v:g}")


def _xaxis(ax: Any, counts: Sequence[int]) -> None:
    if counts and max(counts) / min(counts) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(list(counts), [str(c) for c in counts])
    ax.set_xlabel("processes P")
    ax.grid(alpha=0.3, which="both")


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    pts = [(r["np"], r[key]) for r in records if r.get(key) is not None]
    return [p for p, _ in pts], [v for _, v in pts]


def plot_curves(doc: dict[str, Any], out: Path) -> list[Path]:
    meas, pred = doc["measured"], doc["predicted"]
    counts = sorted({r["np"] for r in meas + pred if r.get("speedup") is not None})
    if not counts:
        return []
    topo = doc.get("predicted_topology") or "simnet"
    where = (
        f"results in {doc['measured_from']}"
        if doc.get("measured_from")
        else f"this machine, {os.cpu_count()} cores"
    )
    labels = (f"measured ({where})", f"predicted (simnet, {topo})")
    files = []
    for key, name, ylabel in (
        ("speedup", "scaling_speedup.png", "speedup (throughput / throughput at P1)"),
        ("efficiency", "scaling_efficiency.png", "efficiency (%)"),
    ):
        fig = _figure(7.5, 5.0)
        ax = fig.add_subplot()
        scale = 100.0 if key == "efficiency" else 1.0
        for recs, style, colour, label in (
            (meas, "o-", "tab:blue", labels[0]),
            (pred, "s--", "tab:orange", labels[1]),
        ):
            xs, ys = _series(recs, key)
            if xs:
                ax.plot(xs, [y * scale for y in ys], style, color=colour, label=label, ms=6)
        if key == "speedup":
            ideal = {r["np"]: r["ideal_speedup"] for r in meas if "ideal_speedup" in r}
            ideal.update({r["np"]: r["ideal_speedup"] for r in pred if "ideal_speedup" in r})
            xs = sorted(ideal)
            ax.plot(xs, [ideal[x] for x in xs], "k:", label="ideal")
        else:
            ax.axhline(100.0, color="black", linestyle=":", label="ideal (100%)")
            # Room above 100% for the points there (a superlinear point).
            shown = [y * scale for r in (meas, pred) for y in _series(r, key)[1]]
            top = max([110.0, *(1.05 * y for y in shown)])
            ax.set_ylim(0, top)
        _xaxis(ax, counts)
        if key == "speedup" and ax.get_xscale() == "log":
            # On log P, a linear speedup axis bends the ideal line: log both (it is straight).
            ax.set_yscale("log", base=2)
            ax.yaxis.set_major_formatter(_plain_ticks())
        ax.set_ylabel(ylabel)
        ax.set_title(f"{doc['model']}: {doc['mode']} scaling, {key}")
        # Efficiency falls from 100% with P: its legend goes below, off the curves' start.
        ax.legend(fontsize=8, loc="lower left" if key == "efficiency" else "upper left")
        files.append(_save(fig, out / name))
    return files


def plot_breakdown(doc: dict[str, Any], out: Path) -> Path | None:
    """Stacked compute + exposed communication per count, measured and predicted side by side."""
    recs = [r for r in doc["measured"] + doc["predicted"] if r.get("status") == "ok"]
    if not recs:
        return None
    counts = sorted({r["np"] for r in recs})
    top = max(r["compute_s"] + r["exposed_comm_s"] for r in recs)
    top = max(top, max(r["iteration_time_s"] for r in recs))
    unit, per_s = ("ms", MS_PER_S) if top < 1.0 else ("s", 1.0)
    fig = _figure(max(6.0, 0.9 * len(counts) + 3.0), 5.0)
    ax = fig.add_subplot()
    width = 0.38
    for offset, source, hatch in ((-0.2, "measured", None), (0.2, "predicted", "//")):
        xs, comp, expo, it = [], [], [], []
        for i, c in enumerate(counts):
            r = next((r for r in recs if r["np"] == c and r["source"] == source), None)
            if r is not None:
                xs.append(i + offset)
                comp.append(r["compute_s"] * per_s)
                expo.append(r["exposed_comm_s"] * per_s)
                it.append(r["iteration_time_s"] * per_s)
        if not xs:
            continue
        ax.bar(
            xs,
            comp,
            width,
            color="tab:green",
            hatch=hatch,
            edgecolor="white",
            label=f"compute ({source})",
        )
        ax.bar(
            xs,
            expo,
            width,
            bottom=comp,
            color="tab:red",
            hatch=hatch,
            edgecolor="white",
            label=f"exposed communication ({source})",
        )
        ax.plot(
            xs,
            it,
            "k_",
            ms=14,
            mew=2,
            label="iteration time (slowest rank)" if source == "measured" else None,
        )
    ax.set_xticks(range(len(counts)), [str(c) for c in counts])
    drawn = {r["source"] for r in recs}
    ax.set_xlabel(
        "processes P (left bar: measured, right hatched bar: predicted)"
        if drawn == {"measured", "predicted"}
        else f"processes P ({'hatched bars: ' if drawn == {'predicted'} else 'bars: '}"
        f"{'/'.join(sorted(drawn))})"
    )
    ax.set_ylabel(f"time per iteration ({unit}), mean over ranks")
    ax.set_title(f"{doc['model']}: compute vs exposed communication ({doc['mode']} scaling)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, out / "scaling_breakdown.png")


# -- command line -----------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = BriefParser(
        prog="python -m simnet scaling",
        description="Weak or strong scaling study of a proxy: real runs at a few process "
        "counts, optionally extended by simnet predictions on a modelled cluster.",
    )
    add_model_options(p)
    p.add_argument(
        "--np",
        default=None,
        help="process counts to run here, e.g. 1,2,4 or 1..8 (doubling); "
        "'none': prediction only (default 1,2,4)",
    )
    p.add_argument(
        "--from",
        dest="from_dir",
        default=None,
        metavar="DIR",
        help="take the measured points from the proxy --json results in DIR (e.g. the "
        "results/ of a `slurm scaling` study run on a cluster) instead of running them",
    )
    p.add_argument(
        "--mode",
        choices=("weak", "strong"),
        default="weak",
        help="weak: fixed batch per process; strong: fixed global batch",
    )
    p.add_argument(
        "--predict-np", default="", help="counts to predict with simnet, e.g. 8,16,32 or 8..1024"
    )
    p.add_argument(
        "--config",
        default=None,
        help="configuration (JSON) whose topology/network the prediction uses "
        "(default: an assumed 4-GPU-per-node cluster)",
    )
    p.add_argument("--scale", type=float, default=1.0, help="message size multiplier")
    p.add_argument(
        "--compute",
        choices=("sleep", "spin", "none"),
        default="sleep",
        help="the proxies' emulated compute (none: also none in the prediction)",
    )
    p.add_argument("--per-tensor", action="store_true")
    p.add_argument("--fix-quirks", action="store_true")
    p.add_argument("--iters", type=int, default=None, help="timed iterations per run")
    p.add_argument("--warmup", type=int, default=None, help="warm-up iterations per run")
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"stop a run after S seconds (default {DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument("--out", default=None, help="default: results/scaling_<model>_<mode>")
    p.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="parallel simulations of the prediction (default: the cores here)",
    )
    p.add_argument("--mpiexec", default=mpiexec(), help="the MPI launcher")
    p.add_argument("--quiet", action="store_true", help="only the final table")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    say: Callable[[str], None] = (
        (lambda m: None) if ns.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    )
    try:
        study = sm.Study.from_options(ns)
        sm.check_study(study)
        found: list[dict[str, Any]] = []
        if ns.from_dir is not None:
            if ns.np is not None:
                raise StudyError("--np and --from: the counts are those of the results in --from")
            folder = Path(ns.from_dir)
            if not folder.is_dir():
                raise StudyError(f"--from {ns.from_dir}: no such folder")
            found, from_notes = read_measured(
                study, folder, parse_counts(ns.predict_np, "--predict-np")
            )
            for n in from_notes:
                print(f"note: {n}", file=sys.stderr)
            if not found:
                raise StudyError(
                    f"--from {ns.from_dir}: no {study.model} result at scale {study.scale:g} "
                    "(proxy --json documents)"
                )
            counts = [r["np"] for r in found]
        else:
            np_text = ns.np if ns.np is not None else "1,2,4"
            counts = [] if np_text.strip().lower() == "none" else parse_counts(np_text, "--np")
        to_predict = parse_counts(ns.predict_np, "--predict-np")
        for name in ("iters", "warmup"):
            v = getattr(ns, name)
            if v is not None and v < (1 if name == "iters" else 0):
                raise StudyError(f"--{name} must be >= {1 if name == 'iters' else 0} (got {v})")
        if not counts and not to_predict:
            raise StudyError("nothing to do: give --np and/or --predict-np")
        predicting = bool(to_predict) or ns.config is not None
        base_cfg, notes = _predict_base(ns.config, study) if predicting else ({}, [])
        all_counts = sorted(set(counts) | set(to_predict))
        base = sm.base_count(study, all_counts)
        if base is None:
            reasons = {p: sm.layout_problem(study, p, sm.weak_flags(study)) for p in all_counts}
            raise StudyError(
                f"{study.model} accepts none of the process counts: "
                + "; ".join(f"{p}: {r}" for p, r in reasons.items())
            )
        if predicting:
            # The file is resized for every count: a count it cannot take (a straggler's
            # rank beyond it, a failed link's node not in it) is skipped with its reason,
            # as a count the layout rejects; one that fits none is an error.
            _check_base(base_cfg, study, all_counts if to_predict else counts, base, ns.config)
    except StudyError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(ns.out or f"results/scaling_{study.model}_{study.mode}")
    problem = output_dir_problem(out) or lock_output_dir(out)  # (released when finished)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    out.mkdir(parents=True, exist_ok=True)
    mark_unfinished(out, "python -m simnet scaling")
    if study.mode == "strong":
        notes.append(f"strong scaling anchored at P1 = {base}: " + sm.strong_note(study, base))
    try:
        measured: list[dict[str, Any]] = found
        if counts and not found:
            say(f"scaling: {study.model}, {study.mode}, measuring at {ns.np or '1,2,4'}")
            measured = measure(
                study,
                counts,
                base,
                out,
                mpiexec=ns.mpiexec,
                iters=ns.iters,
                warmup=ns.warmup,
                timeout_s=ns.timeout,
                say=say,
            )
    except KeyboardInterrupt:
        # (run_command ends a run's whole process group)
        print(
            f"\ninterrupted: every run stopped; {UNFINISHED_MARKER} marks the folder as "
            "an unfinished run's",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    # Ctrl-C from here: the simulations running finish, no other starts, and the table of
    # what is done is written (see run_tasks).
    stop = Interrupts()
    with stop.installed():
        predicted: list[dict[str, Any]] = []
        interrupted = None
        if predicting:
            say("scaling: predicting with simnet")
            try:
                predicted, sim_notes, interrupted = predict(
                    study,
                    all_counts if to_predict else counts,
                    base,
                    base_cfg,
                    workers=max(1, ns.workers),
                    say=say,
                    stop=stop,
                )
            except KeyboardInterrupt:  # (a second Ctrl-C before any simulation ran)
                print(
                    f"\ninterrupted again before the simulations started: nothing written; "
                    f"{UNFINISHED_MARKER} marks the folder as an unfinished run's",
                    file=sys.stderr,
                )
                return EXIT_INTERRUPTED
            notes += sim_notes
            base_cfg = without_unused(base_cfg, sim_notes)
        stop.finishing = True
        add_metrics(measured, study.mode)
        add_metrics(predicted, study.mode)
        add_errors(measured, predicted)
        if any(r.get("note", "").startswith("oversubscribed") for r in measured):
            notes.append(
                f"measured points above {os.cpu_count()} processes oversubscribe this machine's "
                "cores (the proxies then poll); their times include the time-sharing"
            )
        if measured and predicted:
            where = (
                f"the results in {ns.from_dir}"
                if ns.from_dir is not None
                else "this machine (shared-memory MPI)"
            )
            notes.append(
                f"measured times come from {where}; predicted ones from the modelled topology: "
                "the prediction error compares the two systems unless --config models the one "
                "measured"
            )
        topo = next((r["topology"]["name"] for r in predicted if r.get("topology")), None)
        doc = {
            "kind": "scaling-study",
            "model": study.model,
            "mode": study.mode,
            "args": list(study.args),
            "flags": study.flags,
            "scale": study.scale,
            "compute": study.compute,
            "per_tensor": study.per_tensor,
            "fix_quirks": study.fix_quirks,
            # The count the study's per-count options are derived from (the smallest the
            # layout takes); the speedups' P1 is each series' smallest count that ran.
            "base_np": base,
            "speedup_base_np": {
                name: min((r["np"] for r in recs if "speedup" in r), default=None)
                for name, recs in (("measured", measured), ("predicted", predicted))
            },
            "batch_definition": sm.batch_definition(study.model),
            "definitions": {
                "throughput_samples_per_s": "samples per iteration / iteration time",
                "speedup": "throughput(P) / throughput(P1), P1 the smallest count of the series "
                "that ran (speedup_base_np)",
                "ideal_speedup": "samples(P) / samples(P1) (weak) or P / P1 (strong)",
                "efficiency": "t(P1) / t(P)" if study.mode == "weak" else "speedup / (P / P1)",
                "iteration_time_s": "measured: runtime per iteration of the slowest rank, summed "
                "over phases; predicted: simulated makespan per iteration",
                "compute_s, comm_s, exposed_comm_s": "per iteration, mean over ranks",
                "error_pct": "100 (predicted - measured) / measured iteration time",
            },
            "predicted_topology": topo,
            "predict_config": base_cfg if predicting else None,
            # (where the measured points come from: None, run here; else the --from folder)
            "measured_from": ns.from_dir,
            "measured": measured,
            "predicted": predicted,
            "notes": notes,
            "versions": versions(),
            "units": {"time": "seconds", "throughput": "samples/s", "bytes": "bytes"},
        }
        text = report_text(doc)
        files = [
            write_json(out / "scaling.json", doc),
            write_csv_table(out / "scaling.csv", doc),
            write_text(out / "scaling.txt", text),
        ]
        if predicting:
            files.append(write_json(out / "predict_config.json", base_cfg))
        files += plot_curves(doc, out)
        bars = plot_breakdown(doc, out)
        if bars:
            files.append(bars)
        files.append(_report(out, study, text, measured, predicted, files))
        # What an earlier study wrote here and this one did not (a plot it could not draw,
        # a prediction it did not make, a count it did not run) would read as this study's.
        runs = [
            out / "runs" / f"{study.model}_np{r['np']}.{ext}"
            for r in measured
            if "command" in r
            for ext in ("json", "log")
        ]
        if ns.from_dir is not None:  # (never the results read, nor their logs, wherever)
            runs += [
                Path(r["file"]).with_suffix(ext)
                for r in measured
                if r.get("file")
                for ext in (".json", ".log")
            ]
        keep = {Path(f).resolve() for f in [*files, *runs]}
        earlier = sorted(f.name for f in (out / "runs").glob("*") if f.resolve() not in keep)
        if earlier:
            say(
                f"note: removed {len(earlier)} run file(s) of an earlier study from {out / 'runs'} "
                f"({', '.join(earlier[:6])}{', ...' if len(earlier) > 6 else ''}): they are not "
                "this study's; give another --out to keep a study"
            )
        for pattern in ("scaling_*.png", "predict_config.json", "runs/*"):
            remove_others(out, pattern, [*files, *runs])
        stopped = [r["np"] for r in predicted if r.get("status") == "interrupted"]
        if interrupted and stopped:
            # The study did not make every point: its mark stays (a rerun makes them).
            print(text, end="")
            say(
                f"interrupted: wrote {len(files)} files to {out}/ without the predictions "
                f"at P = {', '.join(map(str, stopped))}; {UNFINISHED_MARKER} marks the folder "
                "as an unfinished run's; run the same command again for the whole study"
            )
            return EXIT_INTERRUPTED
        mark_finished(out)
        print(text, end="")
        say(f"wrote {len(files)} files to {out}/")
        failed = [r for r in measured + predicted if r.get("status") == "failed"]
        return 1 if failed else 0


def _report(
    out: Path,
    study: Any,
    text: str,
    measured: list[dict[str, Any]],
    predicted: list[dict[str, Any]],
    files: list[Path],
) -> Path:
    """The study's ``report.html``: the summary, measured against predicted iteration
    time at every count both have, and the plots among ``files`` (this study's)."""
    from simnet.report import write_run_report

    meas = {r["np"]: r for r in measured if r.get("status") == "ok"}
    cases = [
        {
            "name": f"{study.model}, P = {r['np']}, per iteration",
            "measured_s": meas[r["np"]]["iteration_time_s"],
            "predicted_s": r["iteration_time_s"],
            "error_pct": r["error_pct"],
        }
        for r in predicted
        if "error_pct" in r and r["np"] in meas
    ]
    title = f"{study.mode} scaling study: {study.model}"
    return write_run_report(out, title, text, cases, files=files)


_UNUSED_NOTE = re.compile(
    r"^(?:(?P<keys>[\w.]+(?:, [\w.]+)*): not used\b"
    r"|not used by a \w+ topology: (?P<topo>[\w.]+(?:, [\w.]+)*) \()"
)
"""The notes of a simulation naming configuration keys it did not use (see
``simnet.simulate``): "collectives.algorithm: not used, ..." and "not used by a ring
topology: topology.group_size (...)"."""


def without_unused(cfg: dict[str, Any], notes: Sequence[str]) -> dict[str, Any]:
    """``cfg`` without the keys the predictions' ``notes`` say no count used (a note of
    some counts only, "(at P = ...)", leaves its keys: other counts used them), so that
    ``predict_config.json`` holds what the predictions used."""
    out = copy.deepcopy(cfg)
    for note in notes:
        m = _UNUSED_NOTE.match(note)
        if m is None or re.search(r" \(at P = [\d, ]+\)$", note):
            continue
        for key in (m.group("keys") or m.group("topo")).split(", "):
            *sections, name = key.split(".")
            node: Any = out
            for sec in sections:
                node = node.get(sec) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(name, None)
                if not node and sections:  # (an emptied section goes too)
                    parent = out
                    for sec in sections[:-1]:
                        parent = parent[sec]
                    parent.pop(sections[-1], None)
    return out


KEPT_WORKLOAD_KEYS = ("compute_scale", "iterations")
"""What predictions take from a --config file's workload section: the rest is the
study's (:func:`workflows.study.models.workload_section`)."""


def _predict_base(path: str | None, study: sm.Study) -> tuple[dict[str, Any], list[str]]:
    """The configuration predictions start from (its workload section cut to what they
    use, so that ``predict_config.json`` holds what was simulated), and notes on what of
    it is not used or changes the workload."""
    if path is None:
        return copy.deepcopy(DEFAULT_PREDICT_CONFIG), [DEFAULT_PREDICT_NOTE]
    data = read_base_config(path)
    absolute_input_paths(data, Path(path).parent)
    notes = []
    topo = data.get("topology")
    if isinstance(topo, dict) and topo.pop("placement", None) is not None:
        notes.append("topology.placement dropped (it is sized for another world)")
    if data.pop("jobs", None):
        notes.append(
            f"--config {path}: its jobs are not used (a scaling study predicts its own "
            "model alone, on the configuration's network)"
        )
    wl = data.get("workload")
    if isinstance(wl, dict):
        ours = sm.workload_section(study, 1, {}, wl)
        replaced = {
            k: v
            for k, v in wl.items()
            if k not in KEPT_WORKLOAD_KEYS and k != "world_size" and ours.get(k, v) != v
        }
        if replaced:
            theirs = ", ".join(f"{k} {json.dumps(v)}" for k, v in replaced.items())
            study_has = ", ".join(f"{k} {json.dumps(ours.get(k))}" for k in replaced)
            notes.append(
                f"--config {path}: its workload's {theirs} replaced by the study's "
                f"({study_has}; --model, --args, --scale and --flag set them)"
            )
        data["workload"] = {k: wl[k] for k in KEPT_WORKLOAD_KEYS if k in wl}
        scale = wl.get("compute_scale", 1.0)
        if scale != 1.0:
            notes.append(
                f"--config {path}: workload.compute_scale = {scale} applies to every "
                "predicted count (the rest of its workload section is the study's)"
            )
    return data, notes


def _check_base(
    base_cfg: dict[str, Any], study: sm.Study, counts: Sequence[int], base: int, path: str | None
) -> None:
    """Raise StudyError if the configuration, resized, is valid for none of ``counts``."""
    first = None
    for p in counts:
        flags = sm.point_flags(study, p, base)
        if sm.layout_problem(study, p, flags):
            continue
        try:
            load_config(predicted_config(base_cfg, study, p, flags)[0])
            return
        except (ConfigError, StudyError) as e:
            first = first or f"{e} (at {p} ranks)"
    if first is not None:
        raise StudyError(f"--config {path or '(default)'}: {first}")


if __name__ == "__main__":
    sys.exit(main())
