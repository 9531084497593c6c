"""The end-to-end job behind ``./run_training.sh [config.json [OPTIONS]]``.

1. runs the workload for real: ``num_nodes`` MPI processes of the ring
   trainer (or of any proxy named in ``workload``), which measure the
   bandwidth matrix, train, and count the bytes every pair exchanges;
2. predicts the same workload with simnet twice: on the configured topology, and
   on this machine (its calibrated host model; not with ``--no-host-model``);
3. writes both and their comparison into ``logging.log_dir``.

Ctrl-C stops every process; results are written atomically, so an interrupted
run leaves no half-written file.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simnet.config import Config, ConfigError, load_config
from simnet.hostparams import HostCalibrationError
from workload.brief_argparse import BriefParser
from workload.models import MODELS
from workload.results import (
    UNFINISHED_MARKER,
    ResultsWriteError,
    lock_output_dir,
    mark_finished,
    mark_unfinished,
    output_dir_problem,
    release_output_dir,
    remove_others,
    versions,
    write_csv,
    write_json,
    write_text,
)
from workload.run_result import ProxyRun, TrainerRun, TrainerSettings
from workload.units import MB, MS_PER_S, bytes_per_s_to_gb_per_s

from .launcher import (
    as_mpi_run,
    ignored_settings,
    interrupt_cause,
    mpiexec,
    proxy_command,
    run_proxy,
    stops_on_signals,
)
from .machine import ThisMachine, machine_result

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
PHASE_PARTS = {"reduce_scatter": "reduce", "allgather": "copy"}  # measured -> simulated
PHASE_NAMES = {"reduce_scatter": "reduce-scatter", "allgather": "all-gather"}


def trainer_settings(cfg: Config, out_dir: Path) -> TrainerSettings:
    """The ring trainer's settings for this configuration: the rank program of its
    run specification (as simnet predicts it), trained as ``training`` says."""
    from simnet.simulate import run_spec

    tr, d = cfg.training, cfg.distributed
    return TrainerSettings.for_run(
        run_spec(cfg),
        epochs=tr.num_epochs,
        steps=tr.steps_per_epoch,
        batch_size=tr.batch_size,
        bandwidth_limit=d.bandwidth_limit_gb_per_s,
        buffer_bytes=d.buffer_size_bytes or 0,
        out=str(out_dir),
    )


def trainer_command(cfg: Config, out_dir: Path) -> list[str]:
    """The mpiexec command line of the ring trainer for this configuration."""
    module = MODELS[cfg.workload.name].trainer_module or "proxies.ring_trainer"
    return [
        mpiexec(),
        "-n",
        str(cfg.world_size),
        sys.executable,
        "-m",
        module,
        *trainer_settings(cfg, out_dir).options(),
    ]


# -- metrics ----------------------------------------------------------------------------
def traffic_comparison(
    measured: TrainerRun,
    predicted_parts: dict[str, np.ndarray],
    steps: int,
    placement: list[int] | None = None,
) -> dict[str, Any]:
    """Measured per-epoch pair bytes against simnet's (one step x steps), per phase;
    ``placement``: each rank's endpoint in the predicted matrices (default: rank r on
    endpoint r), so that a world smaller than the topology compares its ranks' pairs."""
    out: dict[str, Any] = {"epochs": [], "equal": True}
    for e in measured.epochs:
        row = {"epoch": e["epoch"]}
        for phase, part in PHASE_PARTS.items():
            meas = np.array(e["traffic_bytes"][phase], dtype=np.int64)
            n = len(meas)
            at = np.asarray(placement if placement is not None else range(n))[:n]
            full = predicted_parts.get(part)
            pred = np.zeros_like(meas) if full is None else full[np.ix_(at, at)] * steps
            diff = int(np.abs(meas - pred).max()) if meas.size else 0
            row[phase] = {
                "measured_bytes": int(meas.sum()),
                "predicted_bytes": int(pred.sum()),
                "max_pair_difference_bytes": diff,
                "equal": diff == 0,
            }
            out["equal"] &= diff == 0
        out["epochs"].append(row)
    return out


def metrics_text(
    cfg: Config,
    measured: TrainerRun,
    comparison: dict[str, Any],
    assumed: list[str],
) -> str:
    s = measured.settings
    n = s.world_size or 0
    info = measured.workload["info"]
    lines = [
        "== settings ==",
        f"processes: {n} (progress {s.progress}, MPICH throttle {s.throttle})",
        f"model: AlexNet, {info['parameters']} parameters; "
        f"{info['gradient_elems']} gradient elements per step "
        f"(scale {s.scale:g})",
        f"algorithm: {info['algorithm']}, rings: {measured.workload['rings']}",
        f"training: {s.epochs} epochs x {s.steps} steps, batch {s.batch_size}, "
        f"compute {s.compute_us:g} us per step",
        f"bandwidth limit: {s.bandwidth_limit:g} GB/s per pair (GB = 1e9 B)",
        f"topology (prediction): {cfg.topology.type}",
        "",
        "== bandwidth matrix (GB/s, measured, sender row -> receiver column) ==",
    ]
    bw = bytes_per_s_to_gb_per_s(np.array(measured.bandwidth_bytes_per_s))
    lines.append("      " + "".join(f"{j:>7d}" for j in range(n)))
    for i in range(n):
        lines.append(
            f"{i:>5d} " + "".join(f"{'-':>7s}" if i == j else f"{bw[i, j]:7.2f}" for j in range(n))
        )
    lines += ["", "== traffic per epoch (MB = 1e6 B, all pairs) =="]
    for e, c in zip(measured.epochs, comparison["epochs"], strict=True):
        lines.append(
            f"epoch {e['epoch']}: "
            + ", ".join(
                f"{PHASE_NAMES[ph]} {e['traffic_mb'][ph]:.3f} MB measured / "
                f"{c[ph]['predicted_bytes'] / MB:.3f} MB predicted"
                f"{'' if c[ph]['equal'] else ' (DIFFERENT)'}"
                for ph in PHASE_PARTS
            )
        )
    lines += ["", "== time =="]
    for e in measured.epochs:
        st = e["step_s"]
        lines.append(
            f"epoch {e['epoch']}: {e['time_s']:.3f} s ({MS_PER_S * e['time_s'] / s.steps:.2f} "
            f"ms per step: epoch time / steps); the slowest rank of each step: mean "
            f"{MS_PER_S * st['mean']:.2f} ms, min {MS_PER_S * st['min']:.2f} ms, max "
            f"{MS_PER_S * st['max']:.2f} ms (slowest ranks differ from step to step, so "
            "their mean exceeds epoch time / steps)"
        )
    total = measured.total_time_s
    steps = s.epochs * s.steps
    lines.append(f"total training time: {total:.3f} s ({steps} steps)")
    lines.append(
        f"measured per step: {MS_PER_S * total / steps:.2f} ms (total training time / steps)"
    )
    lines += prediction_lines(comparison, "per step")
    lines += ["", "== warnings =="]
    warnings = [
        # (count: every transfer of this rank to that one over the op, not one step's)
        f"buffer overrun: {o['op']} rank {o['src']} -> rank {o['dst']}: "
        f"{o['size_bytes']} B > buffer {o['buffer_bytes']} B, first in training step "
        f"{o['first_step']}; {o['count']} such transfers in all (every ring step of every "
        "ring and training step, the warm-up step's included)"
        for o in measured.buffer_overruns
    ]
    warnings += [f"assumed in the prediction: {a}" for a in assumed]
    # (the host model's own: the calibration it came from, an interpolated rank count, a
    # file from elsewhere, the trainer's pacing)
    warnings += [
        f"assumed on this machine: {a}" for a in comparison.get("this_machine_assumed", [])
    ]
    if not comparison["equal"]:
        warnings.append("measured and predicted traffic differ (see comparison.json)")
    lines += warnings or ["none"]
    return "\n".join(lines) + "\n"


def write_measured(out: Path, measured: TrainerRun) -> list[Path]:
    from simnet import plots
    from simnet.output import write_matrix_csv

    files = []
    # Nothing is measured from a rank to itself: not a zero, an empty cell (as simnet's).
    shown = np.array(measured.bandwidth_bytes_per_s, dtype=float)
    np.fill_diagonal(shown, np.nan)
    files.append(write_matrix_csv(out / "bandwidth_matrix_bytes_per_s.csv", shown, "src\\dst"))
    files.append(
        plots.bandwidth_heatmap(
            shown,
            out / "bandwidth_heatmap.png",
            title="measured point-to-point bandwidth "
            f"(limit {measured.settings.bandwidth_limit:g}"
            " GB/s)",
        )
    )
    for e in measured.epochs:
        total = sum(np.array(e["traffic_bytes"][ph], dtype=np.int64) for ph in PHASE_PARTS)
        for ph in PHASE_PARTS:
            files.append(
                write_matrix_csv(
                    out / f"traffic_epoch_{e['epoch']}_{ph}_bytes.csv",
                    np.array(e["traffic_bytes"][ph], dtype=np.int64),
                    "src\\dst",
                )
            )
        files.append(
            plots.traffic_heatmap(
                total,
                out / f"traffic_epoch_{e['epoch']}.png",
                title=f"measured traffic, epoch {e['epoch']}: all {measured.settings.steps} steps "
                "(reduce-scatter + all-gather)",
            )
        )
    # The files named by epoch: an earlier run with more epochs left some this one did
    # not write again.
    remove_others(out, "traffic_epoch_*", files)
    return files


# -- the two predictions ----------------------------------------------------------------
def op_comparison(measured: TrainerRun, res: Any) -> list[dict[str, Any]]:
    """Operation by operation of a step: the measured mean duration (over steps, then
    ranks) against the simulated one, in seconds, with the error in %."""
    sim = res.phases[0].timeline
    labels = measured.ops["labels"]
    meas = np.array(measured.ops["mean_s_by_rank"], dtype=float)  # [rank][op]
    pred = np.array(
        [
            np.mean(np.array(sim.timelines[r].ends) - np.array(sim.timelines[r].starts), axis=0)
            for r in range(len(meas))
        ]
    )
    if pred.shape != meas.shape or [op.label for op in sim.programs[0]] != labels:
        return []  # another program than the one measured: nothing to compare
    rows = []
    for i, label in enumerate(labels):
        m, p = float(meas[:, i].mean()), float(pred[:, i].mean())
        rows.append(
            {
                "op": label,
                "measured_s": m,
                "predicted_s": p,
                "error_pct": 100 * (p - m) / m if m > 0 else None,
            }
        )
    return rows


def prediction_entry(predicted_s: float, measured_s: float) -> dict[str, float]:
    """One prediction against the measurement; error = (predicted - measured) / measured x 100."""
    return {
        "step_time_s": predicted_s,
        "error_pct": 100 * (predicted_s - measured_s) / measured_s,
    }


def prediction_lines(comparison: dict[str, Any], per: str) -> list[str]:
    preds = comparison["predictions"]
    lines = []
    for name, what in (
        ("configured", "on the configured network"),
        ("this_machine", "on this machine (calibrated host model)"),
    ):
        if name in preds:
            e = preds[name]
            lines.append(
                f"predicted {per} {what}: {MS_PER_S * e['step_time_s']:.2f} ms; error "
                f"{e['error_pct']:+.1f}%"
            )
    if "this_machine" in comparison:
        lines.append(comparison["this_machine_why"])
    ops = comparison.get("this_machine_ops") or []
    if ops:
        lines.append("on this machine, operation by operation (mean over ranks):")
        for r in ops:
            err = "-" if r["error_pct"] is None else f"{r['error_pct']:+.1f}%"
            lines.append(
                f"  {r['op']:<24} measured {MS_PER_S * r['measured_s']:9.3f} ms, predicted "
                f"{MS_PER_S * r['predicted_s']:9.3f} ms, error {err}"
            )
    return lines


# -- the job ---------------------------------------------------------------------------
def run(cfg: Config, out: Path, say: Any = print, machine: ThisMachine | None = None) -> int:
    """The main job; ``machine``: the calibrated host to predict on as well (None: only
    the configured network). While it runs, ``out/RUN_INCOMPLETE.txt`` says that the
    folder may mix this run's files with an earlier run's; it goes when the run succeeds
    (an interrupted or failed run leaves it)."""
    out.mkdir(parents=True, exist_ok=True)
    unfinished = (out / UNFINISHED_MARKER).exists()
    mark_unfinished(out, "the main job")
    cleared = clear_earlier_run(out)
    if unfinished and not cleared:
        say(
            f"note: an earlier run into {out}/ did not finish and listed no files: what it "
            "wrote may remain beside this run's files (a new --out keeps them apart)"
        )
    rc = _run(cfg, out, say, machine)
    if rc == 0:
        mark_finished(out)
    return rc


RUN_FILES = "main_job_files.txt"
"""The list of the files a main job wrote into its folder (names relative to it), the
list's own name last: the next run into the folder removes them first."""


def clear_earlier_run(out: Path) -> bool:
    """Remove the files an earlier main job listed in ``out/main_job_files.txt`` (and its
    ``this_machine/`` folder if that leaves it empty): a run of another workload
    would otherwise leave its measurements and pictures beside this one's, read as this
    run's (``simnet aggregate`` listed both). True if there was a list."""
    listing = out / RUN_FILES
    try:
        names = listing.read_text().splitlines()
    except (OSError, ValueError):
        return False
    for name in names:
        rel = Path(name)
        if not name or rel.is_absolute() or ".." in rel.parts:
            continue  # (not a list this module wrote)
        (out / rel).unlink(missing_ok=True)
        if len(rel.parts) > 1:
            with contextlib.suppress(OSError):  # (not empty: another file is there)
                (out / rel.parent).rmdir()
    listing.unlink(missing_ok=True)
    return True


def list_run_files(out: Path, files: Sequence[Path], also: Sequence[Path]) -> list[Path]:
    """Every file this run wrote (``files``, the run's own measurements ``also`` and the
    ``this_machine/`` folder's files), listed in ``out/main_job_files.txt`` (which is
    among them, last)."""
    seen: dict[Path, None] = {}
    machine = out / "this_machine"
    more = sorted(p for p in machine.iterdir() if p.is_file()) if machine.is_dir() else []
    for p in [*also, *files, *more]:
        if Path(p).is_file() and Path(p).is_relative_to(out):
            seen[Path(p)] = None
    written = [*seen, out / RUN_FILES]
    names = [str(Path(p).relative_to(out)) for p in written]
    write_text(out / RUN_FILES, "\n".join(names) + "\n")
    return written


def _run(cfg: Config, out: Path, say: Any, machine: ThisMachine | None) -> int:
    from simnet.output import write_all
    from simnet.simulate import simulate

    started = time.perf_counter()
    if MODELS[cfg.workload.name].trainer_module is None:
        return run_proxy_workload(cfg, out, say, machine)
    say(f"== real run: {cfg.world_size} processes of the ring trainer ==")
    rc, _ = run_proxy(trainer_command(cfg, out), timeout_s=0)
    if rc != 0:
        say(f"error: the real run failed (exit code {rc})")
        return rc
    measured = TrainerRun.load(out / "measured.json")
    say("== prediction: simnet on the configured topology ==")
    res = simulate(
        cfg.model_copy(update={"workload": cfg.workload.model_copy(update={"iterations": 1})})
    )
    files = write_all(res, out, prefix="predicted_")
    files += write_measured(out, measured)
    steps = cfg.training.steps_per_epoch
    parts = res.phases[0].part_traffic_bytes
    comparison = traffic_comparison(measured, parts, steps, res.placement)
    step_pred = res.iteration_time_s
    total = measured.total_time_s
    n_steps = cfg.training.num_epochs * steps
    measured_step = total / n_steps
    per_step = {"configured": step_pred}
    comparison["predictions"] = {"configured": prediction_entry(step_pred, measured_step)}
    res_m = None
    if machine is not None:
        one = cfg.model_copy(update={"workload": cfg.workload.model_copy(update={"iterations": 1})})
        res_m = machine_result(one, machine)
        per_step["this_machine"] = res_m.iteration_time_s
        comparison["predictions"]["this_machine"] = prediction_entry(
            per_step["this_machine"], measured_step
        )
    # The time block holds the prediction meant to match the run (this machine's, when
    # made: the run's ranks shared this host, not the configured network), and names it.
    meant = "this_machine" if "this_machine" in per_step else "configured"
    comparison["time"] = {
        "measured_step_s": measured_step,
        "prediction": meant,
        "predicted_step_s": per_step[meant],
        "error_pct": comparison["predictions"][meant]["error_pct"],
        "per_epoch": [
            {
                "epoch": e["epoch"],
                "measured_s": e["time_s"],
                "predicted_s": per_step[meant] * steps,
                **{f"{name}_s": step * steps for name, step in per_step.items()},
            }
            for e in measured.epochs
        ],
    }
    if res_m is not None:  # (made exactly when there is a host model)
        comparison["this_machine"] = machine.describe()
        comparison["this_machine_why"] = machine.why()
        comparison["this_machine_assumed"] = res_m.assumed
        if measured.ops:
            comparison["this_machine_ops"] = op_comparison(measured, res_m)
    comparison["assumed"] = res.assumed
    text = metrics_text(cfg, measured, comparison, res.assumed)
    doc = {
        "kind": "training-metrics",
        "config": cfg.model_dump(),
        "config_notes": cfg.deprecation_notes,
        "versions": versions(),
        "measured": measured.to_json(),
        "comparison": comparison,
        "predicted": {"step_s": step_pred, "files_prefix": "predicted_"},
        "wall_s": time.perf_counter() - started,
    }
    from simnet import plots

    ep = comparison["time"]["per_epoch"]
    predicted = {"predicted (configured network)": [e["configured_s"] for e in ep]}
    if machine is not None:
        predicted["predicted (this machine)"] = [e["this_machine_s"] for e in ep]
    files.append(
        plots.measured_vs_predicted(
            [e["epoch"] for e in ep],
            [e["measured_s"] for e in ep],
            predicted,
            out / "comparison_epoch_time.png",
            title="time per epoch: measured vs predicted",
            xlabel="epoch",
            ylabel="time (s)",
            integer_x=True,
        )
    )
    files.append(write_json(out / "comparison.json", comparison))
    files.append(
        write_csv(
            out / "comparison_traffic.csv",
            ["epoch", "phase", "measured_bytes", "predicted_bytes", "max_pair_difference_bytes"],
            [
                [
                    r["epoch"],
                    ph,
                    r[ph]["measured_bytes"],
                    r[ph]["predicted_bytes"],
                    r[ph]["max_pair_difference_bytes"],
                ]
                for r in comparison["epochs"]
                for ph in PHASE_PARTS
            ],
        )
    )
    files.append(write_json(out / "training_metrics.json", doc))
    files.append(write_text(out / "training_metrics.txt", text))
    files.append(_report(out, cfg, text, comparison, comparison["time"]["measured_step_s"], files))
    say(text)
    say(
        f"traffic measured == predicted, to the byte: {comparison['equal']}; "
        + ", ".join(
            f"step time error {name} {e['error_pct']:+.1f}%"
            for name, e in comparison["predictions"].items()
        )
    )
    written = list_run_files(out, files, [out / "measured.json"])
    say(f"wrote {len(written)} files to {out}/")
    return 0


def run_proxy_workload(cfg: Config, out: Path, say: Any, machine: ThisMachine | None = None) -> int:
    """A proxy workload: real run, predictions, and their per-iteration times; with
    ``machine``, the op-by-op comparison against the calibrated host in
    ``out/this_machine/`` (the files of ``python -m simnet validate``)."""
    from simnet.output import write_all
    from simnet.simulate import simulate

    meas_path = out / "measured_proxy.json"
    say(f"== real run: {cfg.world_size} processes of proxies.{cfg.workload.name} ==")
    cmd, notes = proxy_command(cfg, meas_path, out / "measured_proxy.trace.json", None, None)
    unused = sorted({"num_epochs", "steps_per_epoch"} & cfg.training.model_fields_set)
    if unused:
        notes.append(
            f"{', '.join(f'training.{f}' for f in unused)}: the ring trainer's; the proxy "
            "runs its own iterations (python -m simnet validate --iters N chooses them)"
        )
    for n in notes:
        say(f"note: {n}")
    rc, _ = run_proxy(cmd, timeout_s=0)
    if rc != 0:
        say(f"error: the real run failed (exit code {rc})")
        return rc
    measured = ProxyRun.load(meas_path)
    say("== prediction ==")
    mpi_cfg, mpi_notes = as_mpi_run(cfg)
    res = simulate(mpi_cfg)
    files = write_all(res, out, prefix="predicted_", say=say)
    rows = []
    for ph_m, ph_p in zip(measured.phases, res.phases, strict=True):
        m = ProxyRun.slowest_s(ph_m)
        rows.append(
            {
                "phase": ph_p.name,
                "measured_s": m,
                "predicted_s": ph_p.iteration_time_s,
                "error_pct": 100 * (ph_p.iteration_time_s - m) / m,
            }
        )
    measured_s = sum(r["measured_s"] for r in rows)
    comparison: dict[str, Any] = {
        "phases": rows,
        "assumed": [*mpi_notes, *res.assumed],
        "predictions": {"configured": prediction_entry(res.iteration_time_s, measured_s)},
    }
    for r in rows:
        say(
            f"{r['phase']}: measured {r['measured_s']:.6f} s, predicted "
            f"{r['predicted_s']:.6f} s, error {r['error_pct']:+.1f}%"
        )
    if machine is not None:
        from workflows import validate

        say("== prediction on this machine (calibrated host), op by op ==")
        doc, op_text = validate.analyse(
            cfg,
            measured,
            json.loads((out / "measured_proxy.trace.json").read_text()),
            out / "this_machine",
            command=cmd,
            notes=notes,
            predict=lambda c: machine_result(c, machine),
            on_this_machine=True,
        )
        say(op_text.rstrip())  # (also this_machine/validation.txt)
        predicted = sum(p["predicted_s"] for p in doc["phases"])
        comparison["predictions"]["this_machine"] = prediction_entry(predicted, measured_s)
        comparison["this_machine"] = machine.describe()
        comparison["this_machine_why"] = machine.why()
        files.append(out / "this_machine" / "validation_ops.png")
    files.append(write_json(out / "comparison.json", comparison))
    lines = [*prediction_lines(comparison, "per iteration"), *(f"note: {n}" for n in mpi_notes)]
    for line in lines:
        say(line)
    files.append(_report(out, cfg, "\n".join(lines), comparison, measured_s, files))
    written = list_run_files(out, files, [meas_path, out / "measured_proxy.trace.json"])
    say(f"wrote {len(written)} files to {out}/")
    return 0


def _report(
    out: Path,
    cfg: Config,
    summary: str,
    comparison: dict[str, Any],
    measured_s: float,
    files: list[Path],
) -> Path:
    """The run's ``report.html``: each prediction of the step (or iteration) against the
    measurement, with every picture of the run (among ``files``: not an earlier run's
    left in the folder)."""
    from simnet.report import write_run_report

    cases = [
        {
            "name": f"{cfg.workload.name}, predicted {name.replace('_', ' ')}",
            "measured_s": measured_s,
            "predicted_s": e["step_time_s"],
            "error_pct": e["error_pct"],
        }
        for name, e in comparison["predictions"].items()
    ]
    title = f"main job: {cfg.workload.name} on {cfg.world_size} ranks, measured vs predicted"
    return write_run_report(out, title, summary, cases, config=cfg.model_dump(), files=files)


@stops_on_signals
def main(argv: Sequence[str] | None = None) -> int:
    # No abbreviations: run_training.sh makes the path options' values absolute by
    # their full names (--out, --host-params, --config), before it changes folder.
    p = BriefParser(prog="python -m workflows.endtoend", description=__doc__, allow_abbrev=False)
    p.add_argument("--config", default="config.json")
    p.add_argument("--out", default=None, help="default: logging.log_dir")
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--host-params",
        default=None,
        metavar="FILE",
        help="the host model to predict this machine with (default: this host's cached "
        "calibration, measured first when missing or stale: a minute or two on 2 cores, "
        "more for many ranks, its estimate printed as it starts)",
    )
    g.add_argument(
        "--no-host-model",
        action="store_true",
        help="predict on the configured network only (no calibration)",
    )
    p.add_argument("--recalibrate", action="store_true", help="measure this host again")
    ns = p.parse_args(argv)
    if ns.recalibrate and (ns.no_host_model or ns.host_params):
        print(
            "error: --recalibrate measures this host for its prediction; "
            + (
                "--no-host-model makes none"
                if ns.no_host_model
                else "--host-params takes the host model from that file instead"
            ),
            file=sys.stderr,
        )
        return EXIT_USAGE
    # (Imported before the try whose except names ValidationError: imported inside it,
    # a configuration error raised first left the name unbound, a traceback.)
    from workflows.validate import ValidationError, refuse_unrunnable

    try:
        cfg = load_config(ns.config)
        for note in [*cfg.deprecation_notes, *ignored_settings(cfg)]:
            print(f"note: {note}", file=sys.stderr)
        # What the real run or the prediction would refuse, refused before the host's
        # calibration (a minute or two, and it rewrites the shared cache).
        refuse_unrunnable(cfg)
        if ns.host_params:  # read now: a wrong file is refused before any work
            from simnet.hostparams import load_host_calibration

            load_host_calibration(ns.host_params, "--host-params")
    except (ConfigError, ValidationError, HostCalibrationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(ns.out or cfg.logging.log_dir)
    # Held until the results are marked finished (or the process ends): a second
    # run into the folder is refused, not mixed in.
    problem = output_dir_problem(out) or lock_output_dir(out)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        machine = None
        if not ns.no_host_model:
            try:
                print("== this machine: the host model ==", flush=True)
                machine = ThisMachine.calibrate(
                    cfg.world_size, print, params_file=ns.host_params, force=ns.recalibrate
                )
            except HostCalibrationError as e:
                if ns.host_params:
                    raise ConfigError(str(e)) from None
                print(f"warning: no prediction on this machine: {e}", file=sys.stderr)
        return run(cfg, out, machine=machine)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ResultsWriteError as e:  # a full disk: no partial file was left
        print(f"error: {e}; {UNFINISHED_MARKER} marks the folder as an unfinished run's",
              file=sys.stderr)  # fmt: skip
        return 1
    except KeyboardInterrupt as e:
        # Interrupted before the run started (in the host's calibration): no marker.
        marked = (out / UNFINISHED_MARKER).exists()
        print(
            f"\ninterrupted ({interrupt_cause(e)}): every process stopped"
            + (
                f"; files already written are complete, and {UNFINISHED_MARKER} marks the "
                "folder as an unfinished run's"
                if marked
                else "; nothing was written to the results folder"
            ),
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    finally:
        release_output_dir(out)


if __name__ == "__main__":
    sys.exit(main())
