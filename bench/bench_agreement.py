"""Measured against predicted, on this machine: the figures of the README.

    python bench/bench_agreement.py [--out DIR] [--skip-main] [--skip-suite] [--recalibrate]

1. the main job on the seed configuration (``config.json``: the ring trainer, 10
   ranks), with this host's calibration: the measured step time against the
   prediction on the configured network and on this machine;
2. the validation suite (``python -m simnet validate --suite``): every proxy here
   against the prediction on this machine.

Prints one table of (case, measured, predicted, error %) and the suite's geometric
mean and worst |error|; the runs' own files stay in ``--out``. Takes about 2.5
minutes on the 2-core machine (4 with a new host calibration). Timings vary from run
to run with the machine's load (the seed step time by 10-15% between runs here), so
read the errors with that spread in mind.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(cmd: list[str], timeout_s: float) -> None:
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=timeout_s, stdin=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/bench_agreement")
    ap.add_argument("--skip-main", action="store_true", help="reuse OUT/main")
    ap.add_argument("--skip-suite", action="store_true", help="reuse OUT/suite")
    ap.add_argument("--recalibrate", action="store_true", help="measure the host again first")
    ns = ap.parse_args()
    out = (ROOT / ns.out).resolve()
    py = sys.executable
    if ns.recalibrate:
        run([py, "-m", "simnet", "calibrate-host", "--ranks", "2,4,8,10", "--force"], 600)
    if not ns.skip_main:
        run([py, "-m", "workflows.endtoend", "--config", "config.json", "--out",
             str(out / "main")], 1800)  # fmt: skip
    if not ns.skip_suite:
        run([py, "-m", "simnet", "validate", "--suite", "--out", str(out / "suite")], 3600)
    rows = []
    comp = json.loads((out / "main" / "comparison.json").read_text())
    measured = comp["time"]["measured_step_s"]
    for name, e in comp["predictions"].items():
        rows.append((f"seed main job, {name}", measured, e["step_time_s"], e["error_pct"]))
    suite = json.loads((out / "suite" / "validation_suite.json").read_text())
    for c in suite["cases"]:
        rows.append((c["case"], c["measured_s"], c["predicted_s"], c["error_pct"]))
    print(f"\n{'case':<40} {'measured (ms)':>14} {'predicted (ms)':>15} {'error':>8}")
    for name, m, p, e in rows:
        print(f"{name:<40} {1e3 * m:>14.3f} {1e3 * p:>15.3f} {e:>+7.1f}%")
    if suite["cases"]:
        print(
            f"suite: geometric mean |error| {suite['geomean_abs_error_pct']:.1f}%, worst "
            f"{suite['worst_abs_error_pct']:.1f}% ({suite['worst']['case']})"
        )
    for f in suite["failed"]:
        print(f"suite: {f['case']} failed: {f['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
