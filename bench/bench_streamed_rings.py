"""Streamed NCCL rings (or trees) against step-by-step ones: predicted time, messages, cost.

    python bench/bench_streamed_rings.py [--algorithm nccl_ring|nccl_tree] [--big 1024,4096]
        [--out results/bench_streamed_rings.json]

ResNet-152 data parallel (full size, compute left out: the allreduces alone) with
``nccl_ring`` (or ``nccl_tree``) on GPU clusters of 8-GPU nodes (``rail_optimised``: 300
GB/s NVLink, a 50 GB/s NIC per GPU, 1 us and 5 us hops), run with
``collectives.streamed_rings`` (``streamed_trees``) off and on side by side: both
predicted iteration times, their ratio, the messages simulated and the simulator's CPU
seconds. Then contended cases, where streaming is an approximation (a fat-tree with the
ranks shuffled over it, so that hops share links; also without latency, which tells the
sharing of bytes from the paying of latencies), and the large clusters streamed only
(``--big``: step by step, 4,096 GPUs would be 2.7 billion ring messages). One process per
run, so each run's peak memory is its own. Writes the rows as JSON (default file:
results/bench_streamed_rings.json, or results/bench_streamed_trees.json for trees).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cluster() -> dict:
    return {
        "type": "rail_optimised",
        "group_size": 8,
        "link_latency_us": 1,
        "inter_latency_us": 5,
        "intra_bandwidth_gb_per_s": 300,
    }


def shuffled_fat_tree(k: int, channels_node: int | None, latency_us: float = 1.0) -> dict:
    n = k**3 // 4
    perm = list(range(n))
    random.Random(1).shuffle(perm)
    topo = {"type": "fat_tree", "k": k, "link_latency_us": latency_us, "placement": perm}
    if channels_node:
        topo["group_size"] = channels_node
    return topo


def config(
    topology: dict, gpus: int, streamed: bool, channels: int | None = None, alg: str = "nccl_ring"
) -> dict:
    what = "rings" if alg == "nccl_ring" else "trees"
    collectives = {"algorithm": alg, f"streamed_{what}": streamed}
    if channels:
        collectives["channels"] = channels
    return {
        "distributed": {"num_nodes": gpus, "bandwidth_limit_gb_per_s": 50},
        "topology": topology,
        "workload": {"name": "resnet152", "world_size": gpus, "scale": 1.0, "compute_scale": 0},
        "collectives": collectives,
    }


def run_one(cfg: dict) -> dict:
    """Simulate ``cfg`` here: predicted seconds, messages, CPU seconds, peak GB."""
    import simnet

    cpu = time.process_time()
    # (the times and the sparse pairs only, as an API user: no n x n matrices)
    res = simnet.simulate(cfg, record_series=False, dense_matrices=False)
    return {
        "time_s": res.iteration_time_s,
        "messages": sum(p.messages for p in res.phases),
        "cpu_s": time.process_time() - cpu,
        "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
    }


def run(cfg: dict) -> dict:
    """:func:`run_one` in a process of its own."""
    out = subprocess.run(
        [sys.executable, __file__, "--one", json.dumps(cfg)],
        capture_output=True,
        text=True,
        timeout=3600,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algorithm", default="nccl_ring", choices=["nccl_ring", "nccl_tree"])
    ap.add_argument("--big", default="1024,4096", help="GPUs of the streamed-only runs")
    ap.add_argument("--out", help="(default: results/bench_streamed_rings.json, or _trees)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return
    rows = []
    side_by_side = [
        ("rail-optimised, 16 GPUs", cluster(), 16, None),
        ("rail-optimised, 256 GPUs", cluster(), 256, None),
        ("fat-tree k=8 shuffled, 1 channel", shuffled_fat_tree(8, None), 128, None),
        ("fat-tree k=8 shuffled, 4 channels", shuffled_fat_tree(8, 8), 128, 4),
        # The same without latency: where the two differ above is how the steps'
        # latencies are paid (the stream after its transfers, step by step partly hidden
        # behind other hops' transfers on the shared links), not the bytes' sharing.
        ("same, 1 channel, no latency", shuffled_fat_tree(8, None, 0.0), 128, None),
        ("same, 4 channels, no latency", shuffled_fat_tree(8, 8, 0.0), 128, 4),
    ]
    print(
        f"{'case':36} {'step by step':>14} {'streamed':>12} {'ratio':>9} "
        f"{'messages':>22} {'CPU s':>14}"
    )
    for name, topo, gpus, channels in side_by_side:
        a = run(config(topo, gpus, False, channels, args.algorithm))
        b = run(config(topo, gpus, True, channels, args.algorithm))
        ratio = b["time_s"] / a["time_s"]
        print(
            f"{name:36} {a['time_s'] * 1e3:11.3f} ms {b['time_s'] * 1e3:9.3f} ms "
            f"{ratio:9.6f} {a['messages']:>12,} {b['messages']:>9,} "
            f"{a['cpu_s']:6.2f} {b['cpu_s']:6.2f}",
            flush=True,
        )
        rows.append({"case": name, "gpus": gpus, "step_by_step": a, "streamed": b, "ratio": ratio})
    for gpus in (int(x) for x in args.big.split(",") if x):
        b = run(config(cluster(), gpus, True, alg=args.algorithm))
        print(
            f"{f'rail-optimised, {gpus:,} GPUs':36} {'-':>14} {b['time_s'] * 1e3:9.3f} ms "
            f"{'':9} {'':>12} {b['messages']:>9,} {'':6} {b['cpu_s']:6.2f}  "
            f"peak {b['peak_gb']:.2f} GB",
            flush=True,
        )
        rows.append({"case": f"rail-optimised, {gpus} GPUs", "gpus": gpus, "streamed": b})
    kind = "rings" if args.algorithm == "nccl_ring" else "trees"
    out = ROOT / (args.out or f"results/bench_streamed_{kind}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(rows, indent=1))
    tmp.replace(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
