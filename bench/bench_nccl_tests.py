"""Published nccl-tests allreduce figures against simnet's prediction from link rates.

    python bench/bench_nccl_tests.py [--out DIR]

Every case is a multi-node ``all_reduce_perf`` result someone published (the source
is named with each case), modelled with nothing but the hardware's stated rates: a
rail-optimised cluster (``topologies.rail_optimised``: each GPU's NVLink to its node's
NVSwitch, each GPU's NIC to its rail) and NCCL's ring layout (``nccl_ring``, one
channel per rail). Nothing is fitted to the measurement. Latencies are typical
figures (1 us per NIC hop, 0.5 us per NVLink hop); at 1 GiB and above they change the
prediction by well under 1%. Where a node has fewer NICs than GPUs, each GPU is given
its share of the node's NIC bandwidth (what a rail of that node carries when every
channel uses it evenly).

Prints, per case, the measured and predicted bus bandwidth (nccl-tests' busbw, GB/s
of 1e9 bytes: algbw * 2 (n - 1) / n) and the error; writes ``nccl_tests.json`` and
``nccl_tests.csv`` into ``--out``. Takes a few seconds.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass
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

    @property
    def nic_per_gpu_bytes_per_s(self) -> float:
        return self.node_nic_gbit_per_s * 1e9 / 8 / self.gpus_per_node


CASES: list[Case] = []


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
    t = simnet.collective_time(
        g,
        "allreduce",
        "nccl_ring",
        case.size_bytes,
        local_size=case.gpus_per_node,
        channels=case.gpus_per_node,
    )
    busbw = case.size_bytes / t * 2 * (p - 1) / p / 1e9
    return {"time_s": t, "busbw_gb_per_s": busbw}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/bench_nccl_tests")
    ns = ap.parse_args()
    out = (ROOT / ns.out).resolve()
    rows = []
    print(
        f"{'case':<34} {'nodes x GPUs':>12} {'NIC/node':>9} {'size':>8} "
        f"{'measured':>9} {'predicted':>9} {'error':>7}"
    )
    for case in CASES:
        pred = predict(case)
        err = 100 * (pred["busbw_gb_per_s"] / case.measured_busbw_gb_per_s - 1)
        rows.append({**asdict(case), **pred, "error_pct": err})
        print(
            f"{case.name:<34} {case.nodes:>5} x {case.gpus_per_node:<4} "
            f"{case.node_nic_gbit_per_s:>5.0f} Gb/s {case.size_bytes / 2**30:>5.0f} GiB "
            f"{case.measured_busbw_gb_per_s:>9.1f} {pred['busbw_gb_per_s']:>9.1f} {err:>+6.1f}%"
        )
    errs = [abs(r["error_pct"]) for r in rows]
    gm = math.exp(sum(math.log(max(e, 1e-3)) for e in errs) / len(errs)) if errs else 0.0
    worst = max(errs, default=0.0)
    print(f"\nbus bandwidth in GB/s; geometric mean |error| {gm:.1f}%, worst {worst:.1f}%")
    write_json(
        out / "nccl_tests.json",
        {"cases": rows, "geomean_abs_error_pct": gm, "max_abs_error_pct": worst},
    )
    header = list(rows[0]) if rows else ["name"]
    write_csv(out / "nccl_tests.csv", header, [list(r.values()) for r in rows])
    print(f"wrote {out / 'nccl_tests.json'} and {out / 'nccl_tests.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
