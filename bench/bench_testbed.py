"""The emulated network testbed: proxies on namespace hosts, measured against predicted.

    python bench/bench_testbed.py [--out DIR] [--iters 3]

Runs ``python -m simnet testbed`` (root and iproute2 needed) on switch topologies of
shaped links (MPI over TCP, one rank per host) for a few network-bound cases and prints
(case, hosts, link Mbit/s, measured ms, predicted ms, error %, wire bytes over predicted
payload) and the geometric mean of |error|. About 2 minutes here. The processor
effects of this machine come from its cached host calibration
(``python -m simnet calibrate-host``), when there is one.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# (name, model, args, hosts, scale, link Mbit/s)
CASES = (
    ("dlrm_2h_100M", "dlrm", [], 2, 0.05, 100),
    ("dlrm_4h_200M", "dlrm", [], 4, 0.05, 200),
    ("gpt2_pipeline_4h_200M", "gpt2", [8, 4], 4, 0.05, 200),
    ("cosmoflow_4h_200M", "cosmoflow", [], 4, 0.05, 200),
    ("resnet152_4h_500M", "resnet152", [], 4, 0.01, 500),
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/bench_testbed")
    ap.add_argument("--iters", type=int, default=3)
    ns = ap.parse_args()
    out = (ROOT / ns.out).resolve()
    rows = []
    for name, model, args, hosts, scale, mbit in CASES:
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        cfg = {
            "distributed": {"num_nodes": hosts, "bandwidth_limit_gb_per_s": mbit / 8000},
            "topology": {"type": "switch", "num_nodes": hosts},
            "workload": {"name": model, "args": args, "scale": scale},
        }
        (d / "config.json").write_text(json.dumps(cfg))
        cmd = [sys.executable, "-m", "simnet", "testbed", "--config", str(d / "config.json"),
               "--out", str(d), "--iters", str(ns.iters)]  # fmt: skip
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True, timeout=900, stdin=subprocess.DEVNULL)
        doc = json.loads((d / "testbed.json").read_text())
        m = sum(p["measured_s"] for p in doc["phases"])
        p = sum(p["predicted_s"] for p in doc["phases"])
        wire = sum(h["wire_tx_bytes"] for h in doc["hosts"])
        payload = sum(h["predicted_payload_tx_bytes"] for h in doc["hosts"])
        rows.append((name, hosts, mbit, m, p, (p - m) / m * 100, wire / payload))
    print(f"\n{'case':<24} {'hosts':>5} {'Mbit/s':>7} {'measured ms':>12} {'predicted ms':>13} "
          f"{'error':>8} {'wire/payload':>13}")  # fmt: skip
    for name, hosts, mbit, m, p, e, ratio in rows:
        print(f"{name:<24} {hosts:>5} {mbit:>7} {1e3 * m:>12.2f} {1e3 * p:>13.2f} {e:>+7.1f}% "
              f"{ratio:>13.3f}")  # fmt: skip
    gm = math.exp(sum(math.log(max(abs(r[5]), 0.01)) for r in rows) / len(rows))
    print(f"geometric mean |error| {gm:.1f}%, worst {max(abs(r[5]) for r in rows):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
