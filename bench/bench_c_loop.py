"""The ResNet-50 proxy's allreduce phase against the same calls from a bare C loop.

    python bench/bench_c_loop.py [--ranks 4] [--repeats 3] [--iters 10] [--warmup 3]

Builds ``bench/c_loops/resnet50_allreduce.c`` with the ``mpicc`` beside ``mpiexec``
(the MPICH wheel ships both), then runs, alternating so that a shared machine's noise
hits all alike: the C loop with a send and a receive buffer per message, the C loop in
place in one shared buffer (as the proxy), the proxy with blocking MPI calls, and the
proxy with its default progress (with more ranks than cores it polls, sleeping between
tests). MPICH's progress throttle is set for all. Prints median seconds per iteration,
their spread ((max - min) / median) and each one's ratio to the C loop in place; writes
results/bench_c_loop.json (atomically).

The C loop is written from the documented facts of the reference proxy (message sizes,
zero-filled float32 buffers, SUM, thread level single), not from its code: a stand-in
for it where it is not built, that tells the MPI library's own time from the proxy's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

from bench.bench_executor import MPIEXEC, RunError, run_job
from bench.mpi_build import mpi_compile
from proxies.launch import THROTTLE_VARS
from workload.results import versions, write_json

SOURCE = Path(__file__).resolve().parent / "c_loops" / "resnet50_allreduce.c"
VARIANTS = ("c_separate", "c_in_place", "proxy_blocking", "proxy_default")


def build(out_dir: Path) -> Path:
    """The C loop compiled with the mpicc beside mpiexec; SystemExit saying what is missing."""
    return mpi_compile(SOURCE, out_dir / "resnet50_allreduce", "mpicc", "bench_c_loop")


def run(variant: str, exe: Path, ns: argparse.Namespace, env: dict[str, str]) -> float:
    """Seconds per iteration of rank 0 for one run of ``variant``."""
    n = ["-n", str(ns.ranks)]
    if variant.startswith("c_"):
        mode = "0" if variant == "c_separate" else "1"
        out = run_job([MPIEXEC, *n, str(exe), mode, str(ns.warmup), str(ns.iters)], env, 600)
        line = [ln for ln in out.splitlines() if ln.startswith("{")][-1]
        return float(json.loads(line)["s_per_iter"])
    progress = "blocking" if variant == "proxy_blocking" else "auto"
    with tempfile.TemporaryDirectory(prefix="bench_c_loop.") as tmp:
        path = Path(tmp) / "proxy.json"
        cmd = [
            MPIEXEC, *n, sys.executable, "-m", "proxies.resnet50",
            "--iters", str(ns.iters), "--warmup", str(ns.warmup), "--progress", progress,
            "--thread-level", "single", "--throttle", "on", "--quiet", "--json", str(path),
        ]  # fmt: skip
        run_job(cmd, env, 600)
        doc = json.loads(path.read_text())
    phase = next(p for p in doc["phases"] if p["phase"] == "allreduce")
    return float(phase["runtime_per_iteration_s"]["rank0"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", default="results/bench_c_loop.json")
    ns = ap.parse_args(argv)
    env = dict(os.environ, **THROTTLE_VARS)
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="bench_c_loop.") as tmp:
        exe = build(Path(tmp))
        for r in range(ns.repeats):
            for v in VARIANTS:
                try:
                    times[v].append(run(v, exe, ns, env))
                except RunError as exc:
                    raise SystemExit(f"bench_c_loop: {v}: {exc}") from None
                print(f"repeat {r + 1}/{ns.repeats} {v}: {times[v][-1]:.4f} s", flush=True)
    base = statistics.median(times["c_in_place"])
    rows = []
    print(f"\nResNet-50 allreduce phase, {ns.ranks} ranks, throttle on, medians of {ns.repeats}")
    print(f"{'variant':16s} {'s/iter':>9s} {'spread':>7s} {'/ C in place':>12s}")
    for v in VARIANTS:
        med = statistics.median(times[v])
        spread = (max(times[v]) - min(times[v])) / med
        rows.append({"variant": v, "s_per_iter": times[v], "median_s": med, "ratio": med / base})
        print(f"{v:16s} {med:9.4f} {spread:7.1%} {med / base:12.2f}")
    write_json(
        ns.out,
        {
            "kind": "bench-c-loop",
            "ranks": ns.ranks,
            "iters": ns.iters,
            "warmup": ns.warmup,
            "cpus": os.cpu_count(),
            "versions": versions(),
            "rows": rows,
        },
    )
    print(f"wrote {ns.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
