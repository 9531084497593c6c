"""Where the main job's prediction on this machine falls short, stage by stage.

    python bench/bench_trainer_gap.py [--config config.json] [--repeats 2] [--steps 10]

The main job (``./run_training.sh``: the ring trainer on the seed configuration) is
predicted on this machine's calibrated host model. This splits the gap between its
measured and predicted reduce-scatter into stages, each measured and predicted side by
side, the stages alternating within each repeat (this shared machine's speed moves
10-30% from one minute to the next):

1. ``ring (microbench)``: the project's ring reduce-scatter of the trainer's gradient,
   run by ``proxies.microbench`` (no trainer, no pacing) against the host model's
   ``simnet.collective_time`` of it: how well the host model predicts a bare ring;
2. ``trainer, 1 ring, unpaced``: the trainer on one ring with no bandwidth limit;
3. ``trainer, rings, unpaced``: the configuration's rings, no bandwidth limit;
4. ``trainer as configured``: the main job itself (its rings, its pacing).

Stages 2-4 are predicted as the main job predicts itself (``workflows.machine``), their
reduce-scatter read from the trainer's op timings (mean over ranks of each rank's mean
over steps); stage 1's measured time is the micro-benchmark's (the slowest rank of each
iteration, averaged). Prints a table of measured and predicted milliseconds and errors
and writes ``results/bench_trainer_gap.json``. About 2 minutes a repeat here.

``--against DIR`` runs every trainer stage on another checkout's trainer too (its
proxies, on ``PYTHONPATH``), just before this tree's, and the table gains DIR's measured
times and this tree's over DIR's: how a change to the trainer moves the gap.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ELEM_BYTES = 4
MS = 1e3


def trainer_stage(
    cfg, machine, steps: int, tmp: Path, timeout_s: float, code: Path | None = None
) -> tuple[float, float]:
    """(measured, predicted) seconds of the trainer's reduce-scatter on ``cfg``; the
    trainer of the checkout ``code`` (this tree's if None)."""
    import os

    from workflows.endtoend import op_comparison, trainer_command
    from workflows.launcher import run_command
    from workflows.machine import machine_result
    from workload.run_result import TrainerRun

    cfg = cfg.model_copy(
        update={
            "training": cfg.training.model_copy(update={"num_epochs": 1, "steps_per_epoch": steps})
        }
    )
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(code or ROOT) + (os.pathsep + saved if saved else "")
    try:
        res = run_command(trainer_command(cfg, tmp), timeout_s)
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
    if res.timed_out or res.returncode != 0:
        raise SystemExit(f"the trainer failed ({res.returncode}):\n{res.output[-2000:]}")
    measured = TrainerRun.load(tmp / "measured.json")
    one = cfg.model_copy(update={"workload": cfg.workload.model_copy(update={"iterations": 1})})
    rows = {r["op"]: r for r in op_comparison(measured, machine_result(one, machine))}
    row = rows["reduce_scatter"]
    return row["measured_s"], row["predicted_s"]


def ring_stage(machine, size_bytes: int, tmp: Path, timeout_s: float) -> tuple[float, float]:
    """(measured, predicted) seconds of the project's ring reduce-scatter of
    ``size_bytes`` (the whole vector) over the host's ranks."""
    import simnet
    from workflows import hostcal
    from workflows.launcher import run_command

    p = machine.params
    n = p.ranks_per_host
    path = tmp / "ring.json"
    cmd = hostcal.microbench_command(n, ["reduce_scatter"], (size_bytes, size_bytes, 2), 5, path)
    cmd[cmd.index("--ops") : cmd.index("--ops")] = ["--algorithm", "ring"]
    res = run_command(cmd, timeout_s)
    if res.timed_out or res.returncode != 0 or not path.is_file():
        raise SystemExit(f"the micro-benchmark failed:\n{res.output[-2000:]}")
    (row,) = json.loads(path.read_text())["results"]
    predicted = simnet.collective_time(
        hostcal.host_graph(p),
        "reduce_scatter",
        "ring",
        size_bytes // n,  # (each rank's block, as collective_time counts it)
        send_overhead_s=p.send_overhead_us / 1e6,
    )
    return row["time_s"]["avg"], predicted


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "config.json"))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10, help="trainer steps a stage")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a run")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench_trainer_gap.json"))
    ap.add_argument("--against", type=Path, help="another checkout, its trainer side by side")
    ns = ap.parse_args()
    if ns.against is not None and not (ns.against / "proxies" / "ring_trainer.py").is_file():
        raise SystemExit(f"--against {ns.against}: no proxies/ring_trainer.py there")

    from simnet.config import load_config
    from workflows.machine import ThisMachine
    from workload.models import MODELS
    from workload.results import versions, write_json
    from workload.run_result import TrainerRun

    cfg = load_config(ns.config)
    if MODELS[cfg.workload.name].trainer_module is None:
        raise SystemExit(f"{ns.config}: not a ring-trainer workload")
    machine = ThisMachine.calibrate(cfg.world_size, print)
    n = cfg.world_size
    elems = 0  # the trainer's gradient elements, as its first run reports them
    rings = cfg.topology.permutations
    variants = {
        "trainer, 1 ring, unpaced": {"permutations": [0], "limit": 0.0},
        "trainer, rings, unpaced": {"permutations": rings, "limit": 0.0},
        "trainer as configured": {"permutations": rings, "limit": None},
    }
    samples: dict[str, list[tuple[float, float]]] = {}
    theirs: dict[str, list[float]] = {}  # --against: DIR's measured seconds
    with tempfile.TemporaryDirectory(prefix="bench-trainer-gap-") as tmp_s:
        tmp = Path(tmp_s)
        for rep in range(ns.repeats):
            for name, v in variants.items():
                update = {
                    "topology": cfg.topology.model_copy(update={"permutations": v["permutations"]})
                }
                if v["limit"] is not None:
                    update["distributed"] = cfg.distributed.model_copy(
                        update={"bandwidth_limit_gb_per_s": v["limit"]}
                    )
                staged = cfg.model_copy(update=update)
                if ns.against is not None:
                    other = trainer_stage(staged, machine, ns.steps, tmp, ns.timeout, ns.against)
                    theirs.setdefault(name, []).append(other[0])
                    print(
                        f"[{rep + 1}/{ns.repeats}] {name}: {ns.against}'s trainer measured "
                        f"{MS * other[0]:.1f} ms",
                        flush=True,
                    )
                t = time.perf_counter()
                got = trainer_stage(staged, machine, ns.steps, tmp, ns.timeout)
                samples.setdefault(name, []).append(got)
                print(
                    f"[{rep + 1}/{ns.repeats}] {name}: measured {MS * got[0]:.1f} ms, "
                    f"predicted {MS * got[1]:.1f} ms ({time.perf_counter() - t:.0f} s)",
                    flush=True,
                )
                if not elems:
                    elems = TrainerRun.load(tmp / "measured.json").workload["info"][
                        "gradient_elems"
                    ]
            # (cut to a multiple of n elements, as the micro-benchmark's reduce-scatter needs)
            size = elems // n * n * ELEM_BYTES
            got = ring_stage(machine, size, tmp, ns.timeout)
            samples.setdefault("ring (microbench)", []).append(got)
            print(
                f"[{rep + 1}/{ns.repeats}] ring (microbench), {size} B: measured "
                f"{MS * got[0]:.1f} ms, predicted {MS * got[1]:.1f} ms",
                flush=True,
            )
    order = ["ring (microbench)", *variants]
    rows = []
    print(
        f"\n{'stage':<28} {'measured (ms)':>14} {'predicted (ms)':>15} {'error':>8}"
        + (f" {'DIR (ms)':>9} {'this / DIR':>10}" if theirs else "")
        + f"  (median of {ns.repeats})"
    )
    for name in order:
        meas = statistics.median_high(m for m, _ in samples[name])
        pred = samples[name][0][1]
        err = 100 * (pred - meas) / meas
        row = {
            "stage": name,
            "measured_s": meas,
            "predicted_s": pred,
            "error_pct": err,
            "measured_runs_s": [m for m, _ in samples[name]],
        }
        line = f"{name:<28} {MS * meas:>14.1f} {MS * pred:>15.1f} {err:>+7.1f}%"
        if name in theirs:
            other = statistics.median_high(theirs[name])
            row |= {"against_measured_s": other, "against_measured_runs_s": theirs[name]}
            line += f" {MS * other:>9.1f} {meas / other:>9.3f}x"
        rows.append(row)
        print(line)
    write_json(
        ns.out,
        {
            "kind": "bench-trainer-gap",
            "versions": versions(),
            "config": ns.config,
            "host_params": machine.source,
            "steps": ns.steps,
            "against": str(ns.against) if ns.against else None,
            "rows": rows,
        },
    )
    print(f"wrote {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
