"""The emulated network testbed: workloads on namespace hosts, measured against predicted.

    python bench/bench_testbed.py [--out DIR] [--iters 5] [--only NAME,...]

Runs ``python -m simnet testbed`` (root and iproute2 needed) for network-bound setups
(links of 50-400 Mbit/s, 2-8 hosts, 1-2 ranks per host; switch, ring, torus and
hierarchical topologies; ring and Rabenseifner allreduce, alltoall, a pipeline-parallel proxy and
DLRM) and prints, per case, the measured and predicted time per iteration and the error,
per setup the worst host pair's byte error (TCP payload counted on the links against the
predicted traffic), then the geometric mean and the worst |error| over all cases. Writes
``summary.json`` in DIR. About 8 minutes here. The processor effects of this machine come
from its host calibration (``python -m simnet calibrate-host``, measured if missing).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _net(topology: dict[str, Any], hosts: int, mbit: float, ranks_per_host: int = 1) -> dict:
    cfg: dict[str, Any] = {
        "distributed": {
            "num_nodes": hosts * ranks_per_host,
            "bandwidth_limit_gb_per_s": mbit / 8000,
        },
        "topology": {"num_nodes": hosts, **topology},
    }
    if ranks_per_host > 1:
        cfg["hosts"] = {"ranks_per_host": ranks_per_host}
    return cfg


# (name, configuration, extra arguments of the testbed)
SETUPS: tuple[tuple[str, dict[str, Any], list[str]], ...] = (
    (
        "ring_allreduce_switch_4h_100M",
        _net({"type": "switch"}, 4, 100),
        ["--microbench", "allreduce", "--algorithm", "ring", "--sizes", "1M,4M,4"],
    ),
    (
        "rabenseifner_ring_4h_200M",
        _net({"type": "ring"}, 4, 200),
        ["--microbench", "allreduce", "--algorithm", "rabenseifner", "--sizes", "1M,4M,4"],
    ),
    (
        "alltoall_switch_2x2_200M",
        _net({"type": "switch"}, 2, 200, ranks_per_host=2),
        ["--microbench", "alltoall", "--sizes", "1M,4M,4"],
    ),
    (
        "allreduce_mpi_ring_8h_50M",
        _net({"type": "ring"}, 8, 50),
        ["--microbench", "allreduce", "--sizes", "1M,1M,2"],
    ),
    (
        "allreduce_alltoall_torus_2x3_100M",
        {
            "distributed": {"num_nodes": 6, "bandwidth_limit_gb_per_s": 0.0125},
            "topology": {"type": "torus", "dims": [2, 3]},
        },
        ["--microbench", "allreduce,alltoall", "--sizes", "1M,1M,2"],
    ),
    (
        "gpt2_pipeline_hier_4h",
        _net({"type": "hierarchical", "group_size": 2, "inter_bandwidth_gb_per_s": 0.0125}, 4, 400)
        | {"workload": {"name": "gpt2", "args": [8, 4], "scale": 0.05}},
        [],
    ),
    (
        "dlrm_switch_4h_100M",
        _net({"type": "switch"}, 4, 100) | {"workload": {"name": "dlrm", "scale": 0.05}},
        [],
    ),
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/bench_testbed")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--only", default=None, help="comma-separated setup names")
    ns = ap.parse_args()
    out = (ROOT / ns.out).resolve()
    chosen = [s for s in SETUPS if ns.only is None or s[0] in ns.only.split(",")]
    cases, setups = [], []
    for name, cfg, extra in chosen:
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg, indent=1))
        cmd = [sys.executable, "-m", "simnet", "testbed", "--config", str(d / "config.json"),
               "--out", str(d), "--iters", str(ns.iters), *extra]  # fmt: skip
        print("$", " ".join(cmd), flush=True)
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, timeout=1800, stdin=subprocess.DEVNULL)
        doc = json.loads((d / "testbed.json").read_text())
        c = doc["cluster"]
        for x in doc["cases"]:
            cases.append({"setup": name, **x})
        setups.append(
            {
                "setup": name,
                "topology": c["topology"],
                "hosts": c["hosts"],
                "ranks_per_host": c["ranks_per_host"],
                "max_pair_error_pct": doc["traffic"]["max_pair_error_pct"],
                "efficiency": doc["calibration"]["efficiency_text"],
                "alpha_us": doc["calibration"]["alpha_us"],
                "wall_s": time.perf_counter() - t0,
            }
        )
    print(f"\n{'setup':<30} {'case':<28} {'measured ms':>12} {'predicted ms':>13} {'error':>8}")
    for x in cases:
        print(f"{x['setup']:<30} {x['name']:<28} {1e3 * x['measured_s']:>12.2f} "
              f"{1e3 * x['predicted_s']:>13.2f} {x['error_pct']:>+7.1f}%")  # fmt: skip
    print(f"\n{'setup':<30} {'topology':<13} {'hosts x ranks':>13} {'alpha us':>9} "
          f"{'worst pair bytes':>17}  payload share of the link rate")  # fmt: skip
    for s in setups:
        size = f"{s['hosts']:>6} x {s['ranks_per_host']:<4}"
        print(f"{s['setup']:<30} {s['topology']:<13} {size} {s['alpha_us']:>9.1f} "
              f"{s['max_pair_error_pct']:>16.2f}%  {s['efficiency']}")  # fmt: skip
    errs = [abs(x["error_pct"]) for x in cases]
    gm = math.exp(sum(math.log(max(e, 0.01)) for e in errs) / len(errs))
    worst_pair = max(s["max_pair_error_pct"] for s in setups)
    print(f"\ngeometric mean |error| {gm:.1f}% over {len(cases)} cases, worst {max(errs):.1f}%; "
          f"worst pair byte error {worst_pair:.2f}%")  # fmt: skip
    summary = {"cases": cases, "setups": setups, "geomean_abs_error_pct": gm,
               "max_abs_error_pct": max(errs), "max_pair_error_pct": worst_pair}  # fmt: skip
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
