"""``python -m simnet validate --suite``: every proxy here against the prediction on this machine.

Each case runs one proxy for real at a small message scale on 2-8 ranks of
this host (``validate``'s real run: its own process group, a time limit) and
predicts the same rank programs with every rank on this host, as its
calibration describes it (``endtoend.machine_result``). Per case: the measured
time per iteration (slowest rank, summed over phases), the predicted one and
the error; over the suite: the geometric mean of |error| and the worst case,
with that case's op-by-op breakdown (the largest excesses by label).

Outputs in ``--out``: ``validation_suite.json`` (``cases``: model, world_size,
measured_s, predicted_s, error_pct, ...; ``geomean_abs_error_pct``,
``worst_abs_error_pct``, ``worst``), ``validation_suite.csv``,
``validation_suite.txt`` (also printed), ``validation_suite.png``, and one
folder per case with ``validate``'s files.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simnet.config import load_config
from simnet.hostparams import HostCalibrationError
from workflows.launcher import interrupt_cause, stops_on_signals
from workload.results import (
    UNFINISHED_MARKER,
    lock_output_dir,
    mark_finished,
    mark_unfinished,
    output_dir_problem,
    versions,
    write_csv,
    write_json,
    write_text,
)

EXIT_USAGE = 2


@dataclass(frozen=True)
class Case:
    """One proxy run of the suite (sizes kept small: the machine has 2 cores)."""

    model: str
    world_size: int
    args: tuple[int, ...] = ()
    scale: float = 0.05
    flags: dict[str, int] = field(default_factory=dict)
    # Iteration times of an oversubscribed host vary 10-50% run to run; 20 iterations of
    # the small cases cost under 10 s and steady their mean.
    iters: int = 20
    warmup: int = 2

    @property
    def name(self) -> str:
        a = "_".join(map(str, self.args))
        return f"{self.model}{'_' + a if a else ''}_np{self.world_size}"


# Every proxy whose layout fits 2-8 ranks (gpt3_moe needs 16 ranks per pipeline stage).
CASES = (
    Case("gpt2", 4, (8, 2)),
    Case("bert", 4, (8, 2)),
    Case("resnet50", 4),
    Case("resnet152", 4, iters=5),
    Case("resnet152_scal", 4, flags={"scaling_size": 256}, iters=5),
    Case("cosmoflow", 4),
    Case("dlrm", 4),
    Case("gpt3", 8, (2, 2), scale=0.01, iters=3),
    Case("gpt3_one_pipe_step", 8, (2, 2), scale=0.01, iters=3),
)
NOT_IN_SUITE = {
    "gpt3_moe": "needs 16 ranks per pipeline stage (P % 16 stages == 0)",
    "gpt3_moe_one_pipe_step": "needs 16 ranks per pipeline stage",
    "alexnet_ring": "validated by the main job (./run_training.sh)",
    "llm": "a description of its own (shapes and layout flags), not a reference proxy's",
    "chakra": "replays a given execution trace (no trace is part of the suite)",
}


def case_config(case: Case) -> dict[str, Any]:
    return {
        "distributed": {"num_nodes": case.world_size},
        "topology": {"type": "switch", "num_nodes": case.world_size},
        "workload": {
            "name": case.model,
            "args": list(case.args),
            "scale": case.scale,
            "flags": dict(case.flags),
        },
    }


def geomean(values: list[float], floor: float = 0.01) -> float:
    """Geometric mean of positive values (each at least ``floor``, so an exact 0 counts)."""
    return math.exp(sum(math.log(max(v, floor)) for v in values) / len(values))


def run_case(
    case: Case, out: Path, machine_for: Any, timeout_s: float, quiet: bool
) -> dict[str, Any]:
    """Run and predict one case; its validation files go to ``out``."""
    from workflows import validate
    from workflows.machine import machine_result

    cfg = load_config(case_config(case))
    out.mkdir(parents=True, exist_ok=True)
    machine = machine_for(case.world_size)
    cmd, notes, measured, trace = validate.real_run(
        cfg, out, case.iters, case.warmup, timeout_s, quiet=True
    )
    doc, _ = validate.analyse(
        cfg,
        measured,
        trace,
        out,
        command=cmd,
        notes=[*notes, machine.why(beside_configured=False)],
        predict=lambda c: machine_result(c, machine),
        on_this_machine=True,
    )
    m = sum(p["measured_s"] for p in doc["phases"])
    p = sum(p["predicted_s"] for p in doc["phases"])
    return {
        "case": case.name,
        "model": case.model,
        "world_size": case.world_size,
        "args": list(case.args),
        "scale": case.scale,
        "measured_s": m,
        "predicted_s": p,
        "error_pct": (p - m) / m * 100,
        "phases": doc["phases"],
        "labels": doc.get("labels", []),
        "dir": str(out),
    }


def worst_phase_error_pct(row: dict[str, Any]) -> float:
    """The error (%, signed) of a case's phase farthest from its measurement."""
    return max((ph["error_pct"] for ph in row["phases"]), key=abs)


def summary_text(doc: dict[str, Any]) -> str:
    lines = [
        "validation suite: every proxy here against the prediction on this machine",
        f"{'case':<32} {'ranks':>5} {'measured (ms)':>14} {'predicted (ms)':>15} {'error':>8}",
    ]
    several = False
    for c in doc["cases"]:
        lines.append(
            f"{c['case']:<32} {c['world_size']:>5} {1e3 * c['measured_s']:>14.3f} "
            f"{1e3 * c['predicted_s']:>15.3f} {c['error_pct']:>+7.1f}%"
        )
        if len(c["phases"]) > 1:
            # A case's row sums its phases, whose errors may cancel (ResNet-50's two
            # phases +51% and -51% made a +21% row): each phase on its own line.
            several = True
            for ph in c["phases"]:
                lines.append(
                    f"{'  phase ' + str(ph['phase']):<32} {'':>5} {1e3 * ph['measured_s']:>14.3f} "
                    f"{1e3 * ph['predicted_s']:>15.3f} {ph['error_pct']:>+7.1f}%"
                )
    if several:
        lines.append(
            "(a case of several phases: its row sums their times per iteration, the error and "
            "the summary below are of that sum; worst phase error in validation_suite.csv)"
        )
    for c in doc["failed"]:
        lines.append(f"{c['case']:<32} failed: {c['error']}")
    for model, why in doc["not_in_suite"].items():
        lines.append(f"{model:<32} not in the suite: {why}")
    if doc["cases"]:
        lines.append(
            f"geometric mean |error| {doc['geomean_abs_error_pct']:.1f}%, worst "
            f"{doc['worst_abs_error_pct']:.1f}% ({doc['worst']['case']})"
        )
        w = doc["worst"]
        top = sorted(w["labels"], key=lambda d: -abs(d["difference_s"]))[:6]
        if top:
            lines.append(f"worst case, largest differences by operation label ({w['dir']}):")
            for d in top:
                lines.append(
                    f"  {d['phase']}/{d['label']}: measured {1e3 * d['measured_s']:.3f} ms, "
                    f"predicted {1e3 * d['predicted_s']:.3f} ms"
                )
    return "\n".join(lines) + "\n"


def error_plot(doc: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from workload.results import atomic_write

    cases = doc["cases"]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(cases) + 1.5))
    names = [c["case"] for c in cases]
    errs = [c["error_pct"] for c in cases]
    ax.barh(names, errs, color=["tab:red" if abs(e) > 25 else "tab:blue" for e in errs])
    ax.axvline(0, color="black", lw=0.8)
    for x in (-10, 10):
        ax.axvline(x, color="grey", ls=":", lw=0.8)
    ax.set_xlabel("predicted vs measured time per iteration (%)")
    ax.set_title(f"validation suite: geometric mean |error| {doc['geomean_abs_error_pct']:.1f}%")
    ax.invert_yaxis()
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=110), binary=True)
    plt.close(fig)
    return path


def run_suite(
    out: Path,
    cases: list[Case],
    *,
    host_params: str | None = None,
    timeout_s: float = 600.0,
    say: Any = print,
) -> dict[str, Any]:
    """Run ``cases``, write the suite's files to ``out``; returns the document."""
    from workflows.machine import ThisMachine

    out.mkdir(parents=True, exist_ok=True)
    mark_unfinished(out, "python -m simnet validate --suite")
    started = time.perf_counter()
    counts = sorted({c.world_size for c in cases})
    machines: dict[int, ThisMachine] = {}

    def machine_for(n: int) -> ThisMachine:
        if n not in machines:
            machines[n] = ThisMachine.calibrate(n, say, params_file=host_params)
        return machines[n]

    if not host_params:  # one calibration for every count, measured at most once
        from workflows import hostcal

        hostcal.calibrate_host(sorted({*hostcal.DEFAULT_RANKS, *counts}), say=say)
    rows, failed = [], []
    for i, case in enumerate(cases, 1):
        say(f"[{i}/{len(cases)}] {case.name} ...")
        t0 = time.perf_counter()
        try:
            row = run_case(case, out / case.name, machine_for, timeout_s, quiet=True)
        except Exception as e:  # one broken case must not lose the others
            from workflows.validate import RunFailed, ValidationError

            if not isinstance(e, RunFailed | ValidationError | HostCalibrationError):
                raise
            failed.append({"case": case.name, "error": str(e).splitlines()[0]})
            say(f"    failed: {failed[-1]['error']}")
            continue
        rows.append(row)
        phases = ""
        if len(row["phases"]) > 1:
            phases = "; by phase " + ", ".join(
                f"{ph['phase']} {ph['error_pct']:+.1f}%" for ph in row["phases"]
            )
        say(
            f"    measured {1e3 * row['measured_s']:.3f} ms, predicted "
            f"{1e3 * row['predicted_s']:.3f} ms, error {row['error_pct']:+.1f}%{phases} "
            f"({time.perf_counter() - t0:.0f} s)"
        )
    doc: dict[str, Any] = {
        "kind": "validation-suite",
        "versions": versions(),
        "cases": rows,
        "failed": failed,
        "not_in_suite": NOT_IN_SUITE,
        "wall_s": None,
    }
    if rows:
        errs = [abs(r["error_pct"]) for r in rows]
        worst = max(rows, key=lambda r: abs(r["error_pct"]))
        doc["geomean_abs_error_pct"] = geomean(errs)
        doc["worst_abs_error_pct"] = max(errs)
        doc["worst"] = worst
        doc["machine"] = {str(n): m.describe() for n, m in machines.items()}
    doc["wall_s"] = time.perf_counter() - started
    write_json(out / "validation_suite.json", doc)
    write_csv(
        out / "validation_suite.csv",
        [
            "case",
            "model",
            "world_size",
            "scale",
            "measured_s",
            "predicted_s",
            "error_pct",
            "phases",
            "worst_phase_error_pct",
        ],
        [
            [
                r["case"],
                r["model"],
                r["world_size"],
                r["scale"],
                r["measured_s"],
                r["predicted_s"],
                r["error_pct"],
                len(r["phases"]),
                worst_phase_error_pct(r),
            ]
            for r in rows
        ],
    )
    text = summary_text(doc)
    write_text(out / "validation_suite.txt", text)
    if rows:
        error_plot(doc, out / "validation_suite.png")
    else:  # no case to draw: an earlier suite's picture must not stand for this one
        (out / "validation_suite.png").unlink(missing_ok=True)
    mark_finished(out)
    say(text)
    return doc


def select(names: str | None) -> list[Case]:
    """The suite's cases named in ``names`` (comma-separated models; None or "": all)."""
    if not names:
        return list(CASES)
    want = [n.strip() for n in names.split(",") if n.strip()]
    known = {c.model: c for c in CASES}
    if not want:
        raise ValueError(f"--cases {names!r} names no case; its cases: {', '.join(known)}")
    bad = [n for n in want if n not in known]
    if bad:
        raise ValueError(
            f"--cases: {', '.join(bad)} not in the suite; its cases: {', '.join(known)}"
        )
    return [known[n] for n in want]


@stops_on_signals
def main(argv: list[str] | None = None) -> int:
    """``python -m simnet validate --suite [--cases ...] [--out DIR] ...``."""
    from workflows.validate import build_parser, count_options_problem

    ns = build_parser().parse_args(argv)
    # Validate's options the suite has no use for are refused, as --cases is without
    # --suite: each case brings its own configuration and ranks, and runs. (--iters and
    # --warmup apply to every case; --this-machine and --quiet are what it does anyway.)
    unused = [
        opt
        for opt, given in (
            ("--config", ns.config != build_parser().get_default("config")),
            ("--np", ns.np is not None),
            ("--reuse", ns.reuse),
        )
        if given
    ]
    if unused:
        print(
            f"error: {' and '.join(unused)}: not for --suite (each case has its own "
            "configuration and ranks, and runs)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    problem = count_options_problem(ns)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        cases = select(ns.cases)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if ns.iters is not None or ns.warmup is not None:
        cases = [
            Case(
                c.model,
                c.world_size,
                c.args,
                c.scale,
                c.flags,
                c.iters if ns.iters is None else ns.iters,
                c.warmup if ns.warmup is None else ns.warmup,
            )
            for c in cases
        ]
    out = Path(ns.out or "results/validation_suite")
    problem = output_dir_problem(out) or lock_output_dir(out)  # (released when finished)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        run_suite(out, cases, host_params=ns.host_params, timeout_s=ns.timeout)  # (0: never)
    except HostCalibrationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        print(
            f"\ninterrupted ({interrupt_cause(e)}): every process stopped; {UNFINISHED_MARKER} "
            "marks the folder as an unfinished run's",
            file=sys.stderr,
        )
        return 130
    return 0
