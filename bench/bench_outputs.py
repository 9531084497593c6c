"""What writing a big run's result files costs, beside its simulation.

    python bench/bench_outputs.py [--ranks 4096,16384] [--repeats 1] [--against DIR]

For each rank count, the fat-tree case of ``bench_simnet.py`` (ResNet-152 data parallel,
one iteration, a fat-tree with ECMP) is simulated as ``python -m simnet`` does (sparse
pairs above 2,048 endpoints), then every result file ``python -m simnet`` writes
(``simnet.output.write_all``: pairs and links CSVs, heatmaps, the Chrome trace, the
results JSON, the summary and the HTML report) is written into a temporary folder. Each
run is a fresh process; with ``--against`` the same runs of another checkout's code
alternate with this one's (a shared machine's drift slows both alike). Prints CPU and
wall seconds of the simulation and of the writing, the files' megabytes and the peak
resident memory; writes results/bench_outputs.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_one(ranks: int) -> dict:
    """Simulate the fat-tree case of ``ranks`` ranks and write its files, in this process."""
    import resource
    import time

    from bench_simnet import fat_tree_config

    import simnet
    from simnet import output

    cfg = fat_tree_config(ranks)
    w0, c0 = time.perf_counter(), time.process_time()
    res = simnet.simulate(cfg, record_series=False, dense_matrices=False)
    w1, c1 = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="bench_outputs.") as tmp:
        files = output.write_all(res, tmp)
        w2, c2 = time.perf_counter(), time.process_time()
        size = sum(f.stat().st_size for f in files)
    return {
        "ranks": ranks,
        "messages": sum(p.messages for p in res.phases),
        "simulate_cpu_s": c1 - c0,
        "simulate_wall_s": w1 - w0,
        "write_cpu_s": c2 - c1,
        "write_wall_s": w2 - w1,
        "files": len(files),
        "bytes_written": size,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "code": str(Path(sys.modules["simnet"].__file__).resolve().parent.parent),
    }


def run_case(ranks: int, tree: Path) -> dict:
    """``run_one(ranks)`` in a fresh process on the code of ``tree``."""
    from checkouts import last_json, run_on

    proc = run_on(tree, Path(__file__).resolve(), ["--one", str(ranks)])
    return last_json(proc, f"{ranks} ranks on {tree}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="4096", help="comma-separated: 1024, 4096, 16384")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--against", type=Path, help="another checkout, measured side by side")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench_outputs.json"))
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_simnet, checkouts
    if ns.one is not None:
        print(json.dumps(run_one(ns.one)))
        return
    from bench_simnet import FAT_TREE_K

    ranks = [int(r) for r in ns.ranks.split(",")]
    bad = [r for r in ranks if r not in FAT_TREE_K]
    if bad:
        raise SystemExit(f"--ranks: {bad} not among {sorted(FAT_TREE_K)}")
    trees = [ROOT] + ([ns.against.resolve()] if ns.against else [])
    for t in trees[1:]:
        if not (t / "simnet").is_dir():
            raise SystemExit(f"--against {t}: not a checkout of this project (no simnet/)")
    runs: dict[tuple[int, int], list[dict]] = {}
    for rep in range(ns.repeats):
        for r in ranks:
            for i, tree in enumerate(trees):
                fig = run_case(r, tree)
                runs.setdefault((r, i), []).append(fig)
                print(
                    f"  round {rep + 1}/{ns.repeats}: {r} ranks on {tree.name}: simulate "
                    f"{fig['simulate_cpu_s']:.2f} CPU s, write {fig['write_cpu_s']:.2f} CPU s",
                    flush=True,
                )
    rows = []
    med = {
        k: {f: statistics.median(x[f] for x in v) for f in v[0] if f != "code"}
        for k, v in runs.items()
    }
    print(
        f"{'ranks':>6} {'tree':<12} {'simulate cpu':>12} {'write cpu':>10} {'write wall':>10} "
        f"{'MB written':>10} {'peak GB':>8} {'write speedup':>13}"
    )
    for r in ranks:
        for i, tree in enumerate(trees):
            m = med[(r, i)]
            speedup = ""
            if i == 0 and len(trees) > 1:
                speedup = f"{med[(r, 1)]['write_cpu_s'] / m['write_cpu_s']:.2f}x"
            print(
                f"{r:>6} {tree.name[:12]:<12} {m['simulate_cpu_s']:>12.2f} "
                f"{m['write_cpu_s']:>10.2f} {m['write_wall_s']:>10.2f} "
                f"{m['bytes_written'] / 1e6:>10.1f} "
                f"{m['peak_rss_bytes'] / 1e9:>8.2f} {speedup:>13}"
            )
            rows.append({"tree": str(tree), **m, "runs": runs[(r, i)]})
    sys.path.insert(0, str(ROOT))
    from workload.results import versions, write_json

    write_json(ns.out, {"kind": "bench_outputs", "versions": versions(), "cases": rows})
    print(f"wrote {ns.out}")


if __name__ == "__main__":
    main()
