"""Published nccl-tests allreduce figures against simnet's prediction from link rates.

    python bench/bench_nccl_tests.py [--out DIR]

Every case is a multi-node ``all_reduce_perf`` result someone published (the source
is named with each case), modelled with nothing but the hardware's stated rates: a
rail-optimised cluster (``topologies.rail_optimised``: each GPU's NVLink to its node's
NVSwitch, each GPU's NIC to its rail) and the algorithm NCCL ran, laid out as NCCL lays
it out (``nccl_ring``: one ring per rail; ``nccl_tree``: the double binary tree, both
trees of a channel on one rail, pipelined in NCCL's 512 KiB chunks). Nothing is fitted
to the measurement; each case says how its algorithm is known. Latencies are typical
figures (1 us per NIC hop, 0.5 us per NVLink hop); at 1 GiB and above they change the
prediction by well under 1%. Where a node has fewer NICs than GPUs, each GPU is given
its share of the node's NIC bandwidth (what a rail of that node carries when every
channel uses it evenly).

Prints, per case, the measured and predicted bus bandwidth (nccl-tests' busbw, GB/s
of 1e9 bytes: algbw * 2 (n - 1) / n) and the error; then the A3 Mega run's smaller sizes
beside their predictions, and a line t = a + b S fitted from 16 MiB up to the published
times and to the predicted ones (the fixed cost a and the slope's busbw of each); writes
``nccl_tests.json`` and ``nccl_tests.csv`` into ``--out``. Takes a few seconds.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import simnet  # noqa: E402
import topologies  # noqa: E402
from workload.results import write_csv, write_json  # noqa: E402

NIC_LATENCY_S = 1e-6
NVLINK_LATENCY_S = 0.5e-6


@dataclass(frozen=True)
class Case:
    name: str
    source: str  # where the measurement was published
    quote: str  # the line of the published output (or text) the figure comes from
    nodes: int
    gpus_per_node: int
    nvlink_gb_per_s: float  # per GPU and direction, GB/s (1e9 B)
    node_nic_gbit_per_s: float  # all of a node's NICs together, Gb/s
    size_bytes: int
    measured_busbw_gb_per_s: float
    algorithm: str  # "nccl_ring" or "nccl_tree": what NCCL ran (see ``why``)
    why: str  # how the algorithm is known

    @property
    def nic_per_gpu_bytes_per_s(self) -> float:
        return self.node_nic_gbit_per_s * 1e9 / 8 / self.gpus_per_node


AZURE_A100 = (
    "https://github.com/Azure/azureml-examples/blob/main/cli/jobs/single-step/gpu_perf/"
    "README.md (Standard_ND96amsr_A100_v4 (A100), 2 nodes; out-of-place busbw)"
)
A3_MEGA = (
    "https://github.com/lessizzmore/create-a3mega-ztan-fork/blob/main/ztan-NCCL-test-result "
    "(GCP A3 Mega, 2 VMs x 8 H100, mpirun -np 16 -npernode 8; out-of-place busbw)"
)
RING_BELOW_TREE = (
    "busbw stays under the ring's bound (the NICs' rate); a tree on 2 nodes could exceed it"
)
TWO_NODE_TREE = (
    "above the ring's bound, which only a tree reaches: on 2 nodes NCCL uses the tree "
    "(nccl-tests issue 196, maintainer's answer); GCP's published NCCL tuner settings for "
    "A3 Mega (a3_mega/tuner_config.txtpb, as vendored in apple/axlearn) fix allreduce on "
    "2 nodes x 8 GPUs to the tree with the Simple protocol at every size"
)


# The machines: (name, source, NVLink GB/s per GPU and direction, algorithm, how known).
# ND A100 v4: 8 A100 SXM (NVLink 3), 8 x HDR 200 Gb/s InfiniBand.
# A3 Mega: 8 H100 SXM (NVLink 4), 8 x 200 Gb/s NICs for the GPUs.
AZURE = ("Azure ND A100 v4", AZURE_A100, 300.0, "nccl_ring", RING_BELOW_TREE)
A3 = ("GCP A3 Mega", A3_MEGA, 450.0, "nccl_tree", TWO_NODE_TREE)


def _case(machine: tuple, size_gib: int, busbw: float, row: str) -> Case:
    """A 2-node, 8-GPU, 8 x 200 Gb/s run of ``machine`` at ``size_gib`` GiB."""
    name, source, nvlink, algorithm, why = machine
    return Case(
        f"{name}, {size_gib} GiB",
        source,
        row,
        2,
        8,
        nvlink,
        8 * 200.0,
        size_gib << 30,
        busbw,
        algorithm,
        why,
    )


CASES: list[Case] = [
    _case(AZURE, 1, 182.36, "1073741824 268435456 float sum 11040 97.26 182.36"),
    _case(AZURE, 2, 185.27, "2147483648 536870912 float sum 21733 98.81 185.27"),
    _case(AZURE, 4, 187.97, "4294967296 1073741824 float sum 42843 100.25 187.97"),
    _case(AZURE, 8, 187.91, "8589934592 2147483648 float sum 85710 100.22 187.91"),
    _case(A3, 1, 297.86, "1073741824 268435456 float sum -1 6759.0 158.86 297.86"),
    _case(A3, 2, 318.40, "2147483648 536870912 float sum -1 12646 169.81 318.40"),
    _case(A3, 4, 330.58, "4294967296 1073741824 float sum -1 24361 176.31 330.58"),
    _case(A3, 8, 338.82, "8589934592 2147483648 float sum -1 47535 180.71 338.82"),
]


# Below the target's sizes, the same A3 Mega run's out-of-place times (bytes, us): shown
# beside the prediction, not part of the target (1 GiB and above).
A3_SMALLER = [
    (1 << 20, 203.2), (4 << 20, 364.6), (16 << 20, 977.6), (32 << 20, 1059.9),
    (64 << 20, 1261.6), (128 << 20, 1652.2), (256 << 20, 2360.9), (512 << 20, 3817.5),
]  # fmt: skip


def predict(case: Case) -> dict[str, float]:
    """Predicted seconds and bus bandwidth (GB/s) of one allreduce of the case's size."""
    g = topologies.rail_optimised(
        case.nodes,
        case.gpus_per_node,
        case.nvlink_gb_per_s * 1e9,
        case.nic_per_gpu_bytes_per_s,
        NVLINK_LATENCY_S,
        NIC_LATENCY_S,
    )
    p = case.nodes * case.gpus_per_node
    # One ring per rail; one tree pair per two rails (NCCL's defaults here).
    t = simnet.collective_time(
        g, "allreduce", case.algorithm, case.size_bytes, local_size=case.gpus_per_node
    )
    busbw = case.size_bytes / t * 2 * (p - 1) / p / 1e9
    return {"time_s": t, "busbw_gb_per_s": busbw}


FIT_MIN_BYTES = 16 << 20
"""Sizes from which the A3 Mega times are fitted with a line (below, NCCL's protocols
and the pipeline's fill change with the size)."""


def size_fit(case: Case, smaller: list[dict]) -> dict[str, tuple[float, float]]:
    """Least-squares ``t = a + b S`` over ``case``'s machine's published times (the
    smaller sizes' and the target cases', from ``FIT_MIN_BYTES`` up) and over the
    predicted ones: ``{"published": (a in s, busbw of b in GB/s), "predicted": ...}``,
    busbw as nccl-tests gives it (``2 (n - 1) / n / b / 1e9``)."""
    import numpy as np

    p = case.nodes * case.gpus_per_node
    factor = 2 * (p - 1) / p
    sizes, published, predicted = [], [], []
    for row in smaller:
        if row["size_bytes"] >= FIT_MIN_BYTES:
            sizes.append(row["size_bytes"])
            published.append(row["published_us"] * 1e-6)
            predicted.append(row["predicted_us"] * 1e-6)
    for c in CASES:
        if c.name.split(",")[0] == case.name.split(",")[0]:
            sizes.append(c.size_bytes)
            published.append(c.size_bytes * factor / (c.measured_busbw_gb_per_s * 1e9))
            predicted.append(predict(c)["time_s"])
    out = {}
    for key, times in (("published", published), ("predicted", predicted)):
        b, a = np.polyfit(np.array(sizes, float), np.array(times), 1)
        out[key] = (float(a), factor / float(b) / 1e9)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/bench_nccl_tests")
    ns = ap.parse_args()
    out = (ROOT / ns.out).resolve()
    rows = []
    print(
        f"{'case':<28} {'algorithm':<10} {'nodes x GPUs':>12} {'NICs/node':>10} "
        f"{'measured':>9} {'predicted':>9} {'error':>7}"
    )
    for case in CASES:
        pred = predict(case)
        err = 100 * (pred["busbw_gb_per_s"] / case.measured_busbw_gb_per_s - 1)
        rows.append({**asdict(case), **pred, "error_pct": err})
        print(
            f"{case.name:<28} {case.algorithm:<10} {case.nodes:>5} x {case.gpus_per_node:<4} "
            f"{case.node_nic_gbit_per_s:>5.0f} Gb/s "
            f"{case.measured_busbw_gb_per_s:>9.1f} {pred['busbw_gb_per_s']:>9.1f} {err:>+6.1f}%"
        )
    errs = [abs(r["error_pct"]) for r in rows]
    gm = math.exp(sum(math.log(max(e, 1e-3)) for e in errs) / len(errs)) if errs else 0.0
    worst = max(errs, default=0.0)
    print(f"\nbus bandwidth in GB/s; geometric mean |error| {gm:.1f}%, worst {worst:.1f}%")
    for src in sorted({c.source for c in CASES}):
        print(f"source: {src}")
    a3 = next(c for c in CASES if c.name.startswith("GCP A3 Mega"))
    print(f"\nbelow the target's sizes ({a3.name.split(',')[0]}, same run; not in the target):")
    print(f"{'size':>9} {'published (us)':>15} {'predicted (us)':>15} {'ratio':>6}")
    smaller = []
    for size, published_us in A3_SMALLER:
        t_us = predict(replace(a3, size_bytes=size))["time_s"] * 1e6
        smaller.append({"size_bytes": size, "published_us": published_us, "predicted_us": t_us})
        ratio = published_us / t_us
        print(f"{size >> 20:>5} MiB {published_us:>15.1f} {t_us:>15.1f} {ratio:>6.2f}")
    fit = size_fit(a3, smaller)
    print(
        f"\n{a3.name.split(',')[0]} from {FIT_MIN_BYTES >> 20} MiB up, least squares t = a + b S "
        f"(S bytes; b as busbw, GB/s):\n"
        f"  published: a = {fit['published'][0] * 1e3:.3f} ms, busbw {fit['published'][1]:.1f}"
        f"\n  predicted: a = {fit['predicted'][0] * 1e3:.3f} ms, busbw {fit['predicted'][1]:.1f}"
        f"\n  (the slopes' busbw {100 * (fit['predicted'][1] / fit['published'][1] - 1):+.1f}%"
        f" apart; the published times carry "
        f"{(fit['published'][0] - fit['predicted'][0]) * 1e3:.2f} ms more of fixed cost, "
        "which no link rate gives: the 1 and 2 GiB misses)"
    )
    write_json(
        out / "nccl_tests.json",
        {
            "cases": rows,
            "geomean_abs_error_pct": gm,
            "max_abs_error_pct": worst,
            "a3_mega_below_target": smaller,
            "a3_mega_fit": {
                "min_bytes": FIT_MIN_BYTES,
                "units": "fixed_s: seconds; busbw: GB/s (1e9 B) of t's slope",
                **{k: {"fixed_s": a, "busbw_gb_per_s": b} for k, (a, b) in fit.items()},
            },
        },
    )
    header = list(rows[0]) if rows else ["name"]
    write_csv(out / "nccl_tests.csv", header, [list(r.values()) for r in rows])
    print(f"wrote {out / 'nccl_tests.json'} and {out / 'nccl_tests.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
