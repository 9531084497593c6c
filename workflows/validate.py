"""``python -m simnet validate --config CONFIG.json``: a proxy run against its prediction.

1. runs the configured proxy for real: ``mpiexec -n P python -m proxies.<name> <args>
   --scale S --json measured.json --trace measured_trace.json`` (its own
   process group, a time limit, Ctrl-C stops every process);
2. simulates the same workload with ``simnet.simulate`` (honouring
   ``network.link_params_file``), for as many iterations as the run timed;
3. compares them: per phase, the measured time per iteration (slowest rank)
   against the predicted one; and op by op, for each rank and operation
   index, the measured mean duration over the timed iterations (from the
   trace) against the simulated one (from simnet's per-rank timelines),
   summed per operation label (e.g. ``grad_allreduce``, ``fwd_send``), with the
   operations that took longer than predicted, sorted by excess.

The ring trainer (``workload.name = alexnet_ring``) has its own end-to-end job
(``./run_training.sh``) and is refused here.

Outputs in ``--out``: ``validation.json``, ``validation_ops.csv`` (one row per
rank and operation), ``validation_labels.csv`` (per label),
``validation.txt`` (the summary, also printed), ``validation_ops.png`` (bars
of measured vs predicted per label), and the run's own ``measured.json``,
``measured_trace.json`` and ``proxy_output.txt``. Every file is written
atomically.

Durations of non-blocking operations are the time to post them, on both
sides; the waiting shows in the ``wait`` operations. Times are in seconds in
the files and milliseconds on the terminal.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simnet.config import Config, ConfigError, apply_link_params, load_config
from simnet.hostparams import HostCalibrationError
from workload.brief_argparse import BriefParser
from workload.results import (
    UNFINISHED_MARKER,
    ResultsWriteError,
    counted,
    lock_output_dir,
    mark_finished,
    mark_unfinished,
    output_dir_problem,
)
from workload.run_result import ProxyRun
from workload.units import MS_PER_S as MS  # milliseconds per second, for display
from workload.units import us_to_s

from .launcher import (
    EXIT_TIMEOUT,
    as_mpi_run,
    ignored_settings,
    interrupt_cause,
    proxy_command,
    run_proxy,
    stops_on_signals,
)

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
TOP_OPS = 10


class ValidationError(ValueError):
    """A problem worded for the user (exit code 2)."""


# -- configuration -------------------------------------------------------------------
def prepare_config(path: str | Path, np_ranks: int | None = None) -> tuple[Config, list[str]]:
    """The configuration to validate, with ``--np`` applied and the link-parameter
    file made absolute (it is relative to the configuration's directory)."""
    from workload.models import MODELS

    cfg = load_config(path)
    notes: list[str] = []
    name = cfg.workload.name
    proxies = ", ".join(n for n, m in MODELS.items() if m.trainer_module is None)
    if name in MODELS and MODELS[name].trainer_module is not None:
        raise ValidationError(
            f"{path}: workload.name is {name}; the ring trainer is validated by its "
            "own end-to-end job (./run_training.sh). Set workload.name to a proxy "
            f"({proxies})"
        )
    if name not in MODELS:
        raise ValidationError(f"{path}: workload.name {name!r} is not a proxy; known: {proxies}")
    data = cfg.model_dump()
    lp = cfg.network.link_params_file
    if lp and not Path(lp).is_absolute():
        data["network"]["link_params_file"] = str((Path(path).parent / lp).resolve())
    if np_ranks is not None:
        if np_ranks < 1:
            raise ValidationError(f"--np must be >= 1 (got {np_ranks})")
        data["workload"]["world_size"] = np_ranks
        if cfg.topology.num_nodes is None and cfg.num_endpoints < np_ranks:
            data["distributed"]["num_nodes"] = np_ranks
            notes.append(f"distributed.num_nodes set to {np_ranks} (--np)")
    try:
        cfg = load_config(data)
    except ConfigError as e:
        if np_ranks is None or "workload.world_size" not in str(e):
            raise
        # The world size is --np's here, not the file's: say so, not the field's name.
        why = str(e).split("workload.world_size: ", 1)[1].splitlines()[0]
        raise ValidationError(f"--np {np_ranks}: {why}") from None
    refuse_unrunnable(cfg)
    return cfg, notes


def refuse_unrunnable(cfg: Config) -> None:
    """Refuse (ConfigError, ValidationError) what the proxy or the prediction would
    refuse: the workload's layout on the world size, the topology, the placement. For a
    command to say so before its long work (a host calibration, MPI), not after it."""
    import topologies
    from simnet.simulate import build_topology, build_workload

    build_workload(cfg)
    graph, _ = build_topology(cfg)
    try:
        topologies.apply_placement(cfg.world_size, graph, cfg.topology.placement)
    except topologies.TopologyError as e:
        raise ValidationError(f"topology: {e}") from None


# -- comparison ----------------------------------------------------------------------
@dataclass
class OpRow:
    phase: str
    rank: int
    index: int
    label: str
    kind: str
    description: str
    measured_s: float
    predicted_s: float

    @property
    def difference_s(self) -> float:
        """Measured minus predicted: > 0 took longer than predicted."""
        return self.measured_s - self.predicted_s


def op_kind(op: Any) -> str:
    from workload.ops import Collective

    if isinstance(op, Collective):
        return op.op if op.req is None else "i" + op.op
    kind = type(op).__name__.lower()
    if getattr(op, "req", None) is not None:
        return "i" + kind
    return kind


def trace_durations(trace: dict[str, Any]) -> dict[tuple[str, int], dict[int, list[dict]]]:
    """Trace events by (phase, rank) and iteration, in file (= operation) order."""
    out: dict[tuple[str, int], dict[int, list[dict]]] = {}
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X":
            continue
        a = e.get("args") or {}
        key = (a.get("phase"), int(e["pid"]))
        out.setdefault(key, {}).setdefault(int(a.get("iteration", 0)), []).append(e)
    return out


def compare_ops(
    phase_name: str, sim: Any, events: dict[tuple[str, int], dict[int, list[dict]]]
) -> list[OpRow]:
    """Op-by-op rows of one phase: measured means from the trace, simulated means
    from the PhaseSim timelines. Raises ValidationError when the trace is not of
    this workload."""
    from workload.ops import describe

    rows = []
    for rank, ops in enumerate(sim.programs):
        its = events.get((phase_name, rank))
        if not its:
            raise ValidationError(
                f"the trace has no events of rank {rank} in phase {phase_name!r}: the run and "
                "the configuration differ (world size?)"
            )
        meas = np.zeros(len(ops))
        for it, evs in sorted(its.items()):
            if len(evs) != len(ops):
                raise ValidationError(
                    f"rank {rank}, phase {phase_name!r}, iteration {it}: the trace has "
                    f"{len(evs)} operations, the configured workload {len(ops)}: the run and "
                    "the configuration differ"
                )
            for i, (e, op) in enumerate(zip(evs, ops, strict=True)):
                want = describe(op)
                got = (e.get("args") or {}).get("op", e.get("name"))
                if e.get("name") != op.label or got != want:
                    raise ValidationError(
                        f"rank {rank}, phase {phase_name!r}, operation #{i}: the trace has "
                        f"{got!r}, the configured workload {want!r}: the run and the "
                        "configuration differ (arguments, --scale, world size?)"
                    )
                meas[i] += us_to_s(float(e["dur"]))  # the trace format's microseconds
        meas /= len(its)
        tl = sim.timelines[rank]
        pred = np.mean(np.array(tl.ends) - np.array(tl.starts), axis=0)
        for i, op in enumerate(ops):
            rows.append(
                OpRow(
                    phase_name,
                    rank,
                    i,
                    op.label,
                    op_kind(op),
                    describe(op),
                    float(meas[i]),
                    float(pred[i]),
                )
            )
    return rows


def by_label(rows: list[OpRow]) -> list[dict[str, Any]]:
    """Per (phase, label): operations per iteration (all ranks), total measured and
    predicted seconds per iteration, difference; in order of first appearance."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        d = out.setdefault(
            (r.phase, r.label),
            {
                "phase": r.phase,
                "label": r.label,
                "kinds": [],
                "ops": 0,
                "measured_s": 0.0,
                "predicted_s": 0.0,
            },
        )
        if r.kind not in d["kinds"]:
            d["kinds"].append(r.kind)
        d["ops"] += 1
        d["measured_s"] += r.measured_s
        d["predicted_s"] += r.predicted_s
    for d in out.values():
        d["difference_s"] = d["measured_s"] - d["predicted_s"]
        m = d["measured_s"]
        d["error_pct"] = 100.0 * (d["predicted_s"] - m) / m if m > 0 else None
    return list(out.values())


def compare_phases(measured: ProxyRun, res: Any) -> list[dict[str, Any]]:
    meas = {p["phase"]: p for p in measured.phases}
    sim = [p.name for p in res.phases]
    if sorted(meas) != sorted(sim):
        raise ValidationError(
            f"the run's phases {sorted(meas)} differ from the configured workload's {sim}"
        )
    out = []
    for ph in res.phases:
        m = meas[ph.name]
        slow = m["runtime_per_iteration_s"]
        measured_s = ProxyRun.slowest_s(m)
        pred_ranks = ph.per_rank
        row = {
            "phase": ph.name,
            "iterations": {"measured": m["iterations"], "simulated": ph.iterations},
            "measured_s": measured_s,
            "measured_slowest_rank": slow.get("slowest_rank"),
            "measured_iteration_s": m.get("iteration_s"),
            "predicted_s": ph.iteration_time_s,
            "error_pct": 100.0 * (ph.iteration_time_s - measured_s) / measured_s,
            "breakdown": {},
        }
        for key in ("compute_s", "comm_s", "exposed_comm_s"):
            vals = [r[key] for r in pred_ranks]
            row["breakdown"][key] = {
                "measured_mean": m[key]["mean"],
                "measured_max": m[key]["max"],
                "predicted_mean": statistics.fmean(vals),
                "predicted_max": max(vals),
            }
        out.append(row)
    return out


# -- outputs -------------------------------------------------------------------------
def summary_text(doc: dict[str, Any]) -> str:
    m = doc["measured"]
    pred = doc["prediction"]
    net = pred["network"]
    on = (
        "this machine's host model (every rank on one host, below), not the configured network"
        if net is None
        else f"{pred['topology']} topology, {net['bandwidth_gb_per_s']:.4g} GB/s links "
        f"(GB = 1e9 B), {net['link_latency_us']:.4g} us per link, alpha "
        f"{net['alpha_us']:.4g} us"
    )
    lines = [
        f"validation: proxies.{doc['model']} on {doc['world_size']} ranks (scale "
        f"{doc['scale']:g}; {m['iterations']['warmup']} warm-up + "
        f"{counted(m['iterations']['timed'], 'timed iteration')}; "
        f"{m['mpi'].get('library', '?')})",
        f"prediction: {on}; {counted(pred['iterations'], 'simulated iteration')}",
    ]
    lines += [f"  {a}" for a in doc["prediction"]["assumed"]]
    lines += [f"note: {n}" for n in doc["notes"]]
    lines.append("")
    lines.append("per phase, time per iteration (ms = 1e-3 s):")
    for p in doc["phases"]:
        it = p["measured_iteration_s"] or {}
        lines.append(
            f"  {p['phase']}: measured {p['measured_s'] * MS:.3f} ms (slowest rank "
            f"{p['measured_slowest_rank']}; slowest per iteration mean "
            f"{it.get('mean', float('nan')) * MS:.3f}, min {it.get('min', float('nan')) * MS:.3f}"
            f", max {it.get('max', float('nan')) * MS:.3f}), predicted "
            f"{p['predicted_s'] * MS:.3f} ms, error {p['error_pct']:+.1f}%"
        )
        for key, name in (
            ("compute_s", "compute"),
            ("comm_s", "communication in flight"),
            ("exposed_comm_s", "exposed communication"),
        ):
            b = p["breakdown"][key]
            lines.append(
                f"    {name:26s} mean over ranks: measured {b['measured_mean'] * MS:9.3f} ms, "
                f"predicted {b['predicted_mean'] * MS:9.3f} ms"
            )
    lines += [
        "",
        "per operation label: durations summed over ranks and operations, per iteration "
        "(measured: mean over the timed iterations); pred-meas and error = (predicted - "
        "measured) / measured: < 0 took longer than predicted",
        f"  {'phase':12s} {'label':28s} {'kind':16s} {'ops':>5s} {'measured (ms)':>14s} "
        f"{'predicted (ms)':>15s} {'pred-meas (ms)':>14s} {'error':>8s}",
    ]
    for d in doc["labels"]:
        err = "-" if d["error_pct"] is None else f"{d['error_pct']:+.1f}%"
        # Both columns predicted - measured (the error over the measurement), so that
        # their signs agree; the files' difference_s is measured - predicted, the excess
        # listed below.
        lines.append(
            f"  {d['phase']:12s} {d['label']:28s} {'/'.join(d['kinds']):16s} {d['ops']:5d} "
            f"{d['measured_s'] * MS:14.3f} {d['predicted_s'] * MS:15.3f} "
            f"{-d['difference_s'] * MS:+14.3f} {err:>8s}"
        )
    lines += ["", "took longer than predicted (measured - predicted, summed per label):"]
    longer = doc["longer_than_predicted"]
    for k, d in enumerate(longer, 1):
        lines.append(
            f"  {k:2d}. {d['phase']}/{d['label']}: +{d['difference_s'] * MS:.3f} ms "
            f"(measured {d['measured_s'] * MS:.3f}, predicted {d['predicted_s'] * MS:.3f})"
        )
    if not longer:
        lines.append("  none")
    if doc["top_ops"]:
        lines += ["", f"single operations with the largest excess (top {TOP_OPS}):"]
        for r in doc["top_ops"]:
            lines.append(
                f"  rank {r['rank']} #{r['index']} {r['phase']}: {r['description']}: "
                f"+{r['difference_s'] * MS:.3f} ms"
            )
    lines += ["", f"files in {doc['out']}/: " + ", ".join(doc["files"])]
    return "\n".join(lines) + "\n"


def bar_plot(labels: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Horizontal bars, measured vs predicted seconds per label (shown in ms)."""
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from workload.results import atomic_write

    phases = {d["phase"] for d in labels}
    names = [d["label"] if len(phases) == 1 else f"{d['phase']}/{d['label']}" for d in labels]
    meas = np.array([d["measured_s"] for d in labels]) * MS
    pred = np.array([d["predicted_s"] for d in labels]) * MS
    n = len(labels)
    fig = Figure(figsize=(9.0, min(max(2.5, 0.45 * n + 1.5), 20.0)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    y = np.arange(n)
    ax.barh(y - 0.2, meas, height=0.4, color="tab:blue", label="measured")
    ax.barh(y + 0.2, pred, height=0.4, color="tab:orange", label="predicted")
    ax.set_yticks(y, names, fontsize=8)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlabel("time per iteration, summed over ranks and operations (ms)")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    try:
        return atomic_write(
            path, lambda f: fig.savefig(f, format="png", dpi=100, facecolor="white"), binary=True
        )
    finally:
        fig.clear()


def check_run(cfg: Config, measured: dict[str, Any] | ProxyRun) -> ProxyRun:
    """The measured run (``measured.json``'s document or the run), refused with a
    ValidationError where it is not a run of the configured proxy on its ranks."""
    if isinstance(measured, dict):
        if measured.get("kind") != "proxy-run":
            raise ValidationError("measured.json is not a proxy run (kind != 'proxy-run')")
        measured = ProxyRun.from_json(measured)
    if measured.model != cfg.workload.name:
        raise ValidationError(
            f"the run is of {measured.model!r}, the configuration of {cfg.workload.name!r}"
        )
    if measured.world_size != cfg.world_size:
        raise ValidationError(
            f"the run has {measured.world_size} ranks, the configuration "
            f"{cfg.world_size} (--np {measured.world_size} matches the run)"
        )
    return measured


def analyse(
    cfg: Config,
    measured: dict[str, Any] | ProxyRun,
    trace: dict[str, Any],
    out: Path,
    *,
    command: list[str] | None,
    notes: list[str],
    predict: Callable[[Config], Any] | None = None,
    on_this_machine: bool = False,
    marking: str | None = None,
) -> tuple[dict[str, Any], str]:
    """Predict, compare, write every output; returns the document and the summary.

    ``predict(config) -> SimResult`` makes the prediction (default: simulate the
    configuration; e.g. the calibrated host instead, ``machine.machine_result``, with
    ``on_this_machine`` True: the documents then describe the host model, not the
    configured network). ``marking``: the run to name in ``RUN_INCOMPLETE.txt``, written
    once every check of the run against the configuration has passed, before the first
    file (``mark_unfinished``; the caller removes it).
    """
    from simnet.simulate import simulate
    from workload.results import versions, write_csv, write_json, write_text

    measured = check_run(cfg, measured)
    timed = int(measured.iterations["timed"])
    sim_cfg = cfg.model_copy(
        update={"workload": cfg.workload.model_copy(update={"iterations": timed})}
    )
    sim_cfg, mpi_notes = as_mpi_run(sim_cfg)
    notes = [*notes, *mpi_notes]
    res = (predict or simulate)(sim_cfg)
    phases = compare_phases(measured, res)
    events = trace_durations(trace)
    rows: list[OpRow] = []
    for ph in res.phases:
        rows += compare_ops(ph.name, ph.timeline, events)
    labels = by_label(rows)
    longer = sorted((d for d in labels if d["difference_s"] > 0), key=lambda d: -d["difference_s"])
    top = sorted((r for r in rows if r.difference_s > 0), key=lambda r: -r.difference_s)[:TOP_OPS]
    files = [
        "validation.json",
        "validation_ops.csv",
        "validation_labels.csv",
        "validation.txt",
        "validation_ops.png",
        "report.html",
    ]
    doc: dict[str, Any] = {
        "kind": "validation",
        "model": cfg.workload.name,
        "world_size": cfg.world_size,
        "scale": cfg.workload.scale,
        "command": command,
        "out": str(out),
        "files": files,
        "config": sim_cfg.model_dump(),
        "versions": versions(),
        "units": {
            "time": "seconds",
            "op durations": "mean over the timed (measured) or simulated iterations; "
            "non-blocking operations: the time to post them",
            "label totals": "summed over ranks and operations, per iteration",
            "difference_s": "measured - predicted (> 0: took longer than predicted)",
        },
        "measured": {
            "iterations": measured.iterations,
            "mpi": measured.mpi,
            "wall_s": measured.wall_s,
        },
        "prediction": {
            "iterations": timed,
            "on": "this_machine" if on_this_machine else "configured",
            # On this machine the ranks share one modelled host, described in `assumed`.
            "topology": "one host" if on_this_machine else sim_cfg.topology.type,
            "network": None
            if on_this_machine
            else {
                "bandwidth_gb_per_s": res.config.distributed.bandwidth_limit_gb_per_s,
                "link_latency_us": res.config.topology.link_latency_us,
                "alpha_us": res.config.network.alpha_us,
                "link_params_file": res.config.network.link_params_file,
            },
            "assumed": res.assumed,
        },
        "notes": notes,
        "phases": phases,
        "labels": labels,
        "longer_than_predicted": longer,
        "top_ops": [_row_dict(r) for r in top],
    }
    if marking is not None:
        mark_unfinished(out, marking)
    write_csv(
        out / "validation_ops.csv",
        [
            "phase",
            "rank",
            "index",
            "label",
            "kind",
            "measured_s",
            "predicted_s",
            "difference_s",
            "description",
        ],
        (
            [
                r.phase,
                r.rank,
                r.index,
                r.label,
                r.kind,
                repr(r.measured_s),
                repr(r.predicted_s),
                repr(r.difference_s),
                _csv_text(r.description),
            ]
            for r in rows
        ),
    )
    write_csv(
        out / "validation_labels.csv",
        [
            "phase",
            "label",
            "kinds",
            "ops",
            "measured_s",
            "predicted_s",
            "difference_s",
            "error_pct",
        ],
        (
            [
                d["phase"],
                d["label"],
                "/".join(d["kinds"]),
                d["ops"],
                repr(d["measured_s"]),
                repr(d["predicted_s"]),
                repr(d["difference_s"]),
                "" if d["error_pct"] is None else repr(d["error_pct"]),
            ]
            for d in labels
        ),
    )
    bar_plot(
        labels,
        out / "validation_ops.png",
        title=f"proxies.{cfg.workload.name}, {cfg.world_size} ranks: measured vs predicted "
        "per operation label",
    )
    text = summary_text(doc)
    write_json(out / "validation.json", doc)
    write_text(out / "validation.txt", text)
    from simnet.report import write_run_report

    write_run_report(
        out,
        f"validation: proxies.{doc['model']} on {doc['world_size']} ranks",
        text,
        [
            {
                "name": f"phase {p['phase']}, per iteration",
                "measured_s": p["measured_s"],
                "predicted_s": p["predicted_s"],
                "error_pct": p["error_pct"],
            }
            for p in doc["phases"]
        ],
        files=[out / "validation_ops.png"],
        config=cfg.model_dump(),
    )
    return doc, text


def _row_dict(r: OpRow) -> dict[str, Any]:
    return {
        "phase": r.phase,
        "rank": r.rank,
        "index": r.index,
        "label": r.label,
        "kind": r.kind,
        "description": r.description,
        "measured_s": r.measured_s,
        "predicted_s": r.predicted_s,
        "difference_s": r.difference_s,
    }


def _csv_text(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


# -- command line --------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = BriefParser(
        prog="python -m simnet validate",
        description="Run the configured proxy for real over MPI, predict it with simnet, "
        "and compare them per phase and operation by operation.",
    )
    p.add_argument(
        "--config",
        default="config.json",
        help="configuration file (JSON; default: config.json in this folder)",
    )
    p.add_argument(
        "--np", type=int, default=None, metavar="N", help="ranks (default: the config's)"
    )
    p.add_argument(
        "--iters",
        type=int,
        default=None,
        metavar="K",
        help="timed iterations of the real run (default: the proxy's); the prediction "
        "simulates as many",
    )
    p.add_argument(
        "--warmup", type=int, default=None, metavar="W", help="warm-up iterations of the real run"
    )
    p.add_argument(
        "--out", default=None, metavar="DIR", help="default: <logging.log_dir>/validation"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        metavar="S",
        help="stop the real run after S seconds (0: never; default 1800)",
    )
    p.add_argument(
        "--reuse",
        action="store_true",
        help="do not run: compare the measured.json and measured_trace.json already in --out",
    )
    p.add_argument("--quiet", action="store_true", help="do not echo the real run's output")
    g = p.add_argument_group("prediction on this machine (the calibrated host model)")
    g.add_argument(
        "--this-machine",
        action="store_true",
        help="predict with every rank on this host, as its calibration describes it "
        "(python -m simnet calibrate-host; measured first when missing or stale)",
    )
    g.add_argument(
        "--host-params", default=None, metavar="FILE", help="that calibration, from this file"
    )
    g = p.add_argument_group("the validation suite")
    g.add_argument(
        "--suite",
        action="store_true",
        help="run every proxy at a small scale on 2-8 ranks here against the prediction on "
        "this machine; writes validation_suite.json/.csv/.txt/.png to --out",
    )
    g.add_argument(
        "--cases",
        default=None,
        metavar="LIST",
        help="suite: only these cases (comma-separated models), e.g. dlrm,gpt2",
    )
    return p


class RunFailed(RuntimeError):
    """The real run did not finish; ``code`` is its exit code (124: timed out)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def real_run(
    cfg: Config,
    out: Path,
    iters: int | None,
    warmup: int | None,
    timeout_s: float,
    quiet: bool = False,
) -> tuple[list[str], list[str], dict[str, Any], dict[str, Any]]:
    """Run the configured proxy for real, writing its files to ``out``; returns its
    command, notes on it, and the measured and trace documents. Raises RunFailed."""
    from workload.results import write_text

    meas_path, trace_path = out / "measured.json", out / "measured_trace.json"
    cmd, notes = proxy_command(cfg, meas_path, trace_path, iters, warmup)
    for p in (meas_path, trace_path):
        p.unlink(missing_ok=True)  # never compare against a previous run
    if not quiet:
        print(f"== real run: {shlex.join(cmd)}", flush=True)
    started = time.perf_counter()
    rc, output = run_proxy(cmd, timeout_s, echo=not quiet)
    write_text(out / "proxy_output.txt", output)
    if rc == EXIT_TIMEOUT:
        raise RunFailed(
            f"the real run did not finish within --timeout {timeout_s:g} s; every process "
            f"was stopped (its output, the stop's too: {out / 'proxy_output.txt'})",
            rc,
        )
    if rc != 0:
        tail = "\n".join(output.splitlines()[-15:])
        raise RunFailed(f"the real run failed (exit code {rc}); its last lines:\n{tail}", rc)
    if not quiet:
        print(f"== real run done in {time.perf_counter() - started:.1f} s", flush=True)
    return cmd, notes, json.loads(meas_path.read_text()), json.loads(trace_path.read_text())


def count_options_problem(ns: argparse.Namespace) -> str | None:
    """What is wrong with ``--iters`` (>= 1), ``--warmup`` (>= 0) or ``--timeout``
    (seconds >= 0, 0: never), or None: checked by validate and its suite alike."""
    for name in ("iters", "warmup"):
        v = getattr(ns, name)
        if v is not None and v < (1 if name == "iters" else 0):
            return f"--{name} must be >= {1 if name == 'iters' else 0} (got {v})"
    if not ns.timeout >= 0:  # (NaN refused too)
        return f"--timeout must be seconds >= 0 (got {ns.timeout:g})"
    return None


@stops_on_signals
def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    problem = count_options_problem(ns)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if ns.reuse and (ns.iters is not None or ns.warmup is not None):
        print(
            "error: --iters and --warmup set the real run's iterations; --reuse compares the "
            "run already in --out, with its own",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if ns.suite:  # the suite builds on this module: `python -m simnet validate --suite`
        print("error: --suite is run by `python -m simnet validate --suite`", file=sys.stderr)
        return EXIT_USAGE
    if ns.cases is not None:
        print("error: --cases chooses cases of the suite: give --suite too", file=sys.stderr)
        return EXIT_USAGE
    try:
        cfg, notes = prepare_config(ns.config, ns.np)
        for note in ignored_settings(cfg):
            print(f"note: {note}", file=sys.stderr)
        out = Path(ns.out) if ns.out else Path(cfg.logging.log_dir) / "validation"
        problem = output_dir_problem(out)
        if problem:
            raise ConfigError(problem)
        # The prediction reads the calibration file (load_config made its path absolute):
        # a wrong one is refused before the run.
        apply_link_params(cfg)
        # Held until the results are marked finished (or the process ends): a second
        # run into the folder is refused, not mixed in.
        problem = lock_output_dir(out)
        if problem:
            raise ConfigError(problem)
        predict = None
        if ns.this_machine or ns.host_params:
            from workflows.machine import ThisMachine, machine_result

            machine = ThisMachine.calibrate(cfg.world_size, print, params_file=ns.host_params)
            notes.append(machine.why(beside_configured=False))

            def predict(c: Config) -> Any:
                return machine_result(c, machine)

        if ns.reuse:
            meas_path, trace_path = out / "measured.json", out / "measured_trace.json"
            missing = [str(p) for p in (meas_path, trace_path) if not p.exists()]
            if missing:
                raise ValidationError(f"--reuse: no {', '.join(missing)}; run without --reuse")
            _, cmd_notes = proxy_command(cfg, meas_path, trace_path, None, None)
            notes += cmd_notes
            cmd = None
            docs = []
            for path in (meas_path, trace_path):
                try:
                    docs.append(json.loads(path.read_text()))
                except (OSError, ValueError) as e:
                    raise ValidationError(
                        f"--reuse: {path} cannot be read ({e}); run without --reuse to "
                        "measure again"
                    ) from None
            measured = check_run(cfg, docs[0])
            trace = docs[1]
        else:
            mark_unfinished(out, "python -m simnet validate")
            cmd, cmd_notes, measured, trace = real_run(
                cfg, out, ns.iters, ns.warmup, ns.timeout, ns.quiet
            )
            notes += cmd_notes
        print("== prediction and comparison", flush=True)
        _, text = analyse(
            cfg,
            measured,
            trace,
            out,
            command=cmd,
            notes=notes,
            predict=predict,
            on_this_machine=predict is not None,
            marking="python -m simnet validate",
        )
        mark_finished(out)
    except RunFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    except (ConfigError, ValidationError, HostCalibrationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ResultsWriteError as e:  # a full disk: no partial file was left
        print(f"error: {e}; {UNFINISHED_MARKER} marks the folder as an unfinished run's",
              file=sys.stderr)  # fmt: skip
        return 1
    except KeyboardInterrupt as e:
        print(
            f"\ninterrupted ({interrupt_cause(e)}): every process stopped; "
            f"{UNFINISHED_MARKER} marks the folder as an unfinished run's",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    print(text, end="")
    return 0
