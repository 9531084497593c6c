"""Digests of everything a simulation outputs, to check that a change to the simulator's
core leaves its results identical.

    python bench/fingerprint.py [--cases fat1024,examples,gpt3_384,ring256] [--out FILE]
    (also railN, flyN: the fat-tree case's workload on bench_simnet's rail-optimised
    cluster and dragonfly; fathostN, fatsyncN: with a host's costs, and calibrated)
    python bench/fingerprint.py --against DIR [--cases ...]

Per case and phase: the iteration time and every rank's compute / communication times
(as exact float reprs), the pair and link byte counts, pair and link busy times, peak
link loads and every link's load series (with ``record_series``), each reduced to a
SHA-256 of its sorted items. ``--against DIR`` computes the same digests on another
checkout's code (e.g. a ``git worktree`` of the previous commit, its core compiled) in
a fresh process, and prints which digests differ; the exit status is 1 if any does.

Cases: ``fatN`` is ResNet-152 data parallel on an N-rank fat-tree (as in
bench_simnet, with link series), ``ringN`` a 1 GiB ring allreduce, ``gpt3_384`` the
GPT-3 proxy, ``examples`` every configuration in ``examples/``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

# bench_simnet's cases, imported from this folder, not as bench.bench_simnet: putting the
# checkout's root on the path would import its simnet where --against must measure DIR's.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_simnet
from checkouts import last_json, run_on

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CASES = "fat1024,ring256,gpt3_384,examples"


def _digest(items: object) -> str:
    return hashlib.sha256(repr(items).encode()).hexdigest()[:16]


def _series_points(series: dict) -> list:
    """Per link its change points as tuples, links sorted: the same whether a checkout
    keeps them as lists of tuples or as ``(n, 2)`` arrays (since 2026-11-27)."""
    return sorted(
        (
            (k, [tuple(p) for p in np.asarray(v, dtype=float).reshape(-1, 2).tolist()])
            for k, v in series.items()
        ),
        key=repr,
    )


def _phase_digests(ph: object) -> dict[str, str]:
    """Digests of one phase's outputs (a ``simnet.PhaseResult``)."""
    net = ph.timeline.net if ph.timeline is not None else None  # type: ignore[attr-defined]
    out = {
        "iteration_time_s": repr(ph.iteration_time_s),  # type: ignore[attr-defined]
        "per_rank": _digest(ph.per_rank),  # type: ignore[attr-defined]
        "pair_bytes": _digest(sorted(ph.pair_bytes.items())),  # type: ignore[attr-defined]
        "pair_busy": _digest(sorted(ph.pair_busy.items())),  # type: ignore[attr-defined]
        "link_bytes": _digest(sorted(ph.link_bytes.items(), key=repr)),  # type: ignore[attr-defined]
        "link_busy_s": _digest(sorted(ph.link_busy_s.items(), key=repr)),  # type: ignore[attr-defined]
        "link_series": _digest(_series_points(ph.link_series)),  # type: ignore[attr-defined]
        "messages": str(ph.messages),  # type: ignore[attr-defined]
    }
    if net is not None:
        peaks = net.link_peak_load_bytes_per_s()
        out["link_peak"] = _digest(sorted(peaks.items(), key=repr))
    return out


def _config_cases(name: str) -> list[tuple[str, object]]:
    """(label, what to run) of a case name: a configuration to simulate, or a
    bench_simnet case function returning (messages, seconds) whose time is the output."""
    if name == "examples":
        return [(f"examples/{p.name}", str(p)) for p in sorted((ROOT / "examples").glob("*.json"))]
    fabrics = {
        "fat": ("fat-tree", bench_simnet.fat_tree_config),
        "fathost": ("host-cost fat-tree", bench_simnet.host_config),
        "fatsync": ("calibrated fat-tree", bench_simnet.sync_config),
        "rail": ("rail-optimised", bench_simnet.rail_config),
        "fly": ("dragonfly", bench_simnet.dragonfly_config),
    }
    prefix = name.rstrip("0123456789")
    if prefix in fabrics:
        ranks = int(name[len(prefix) :]) if name[len(prefix) :] else 0
        known = bench_simnet.SYNC_FAT_TREE_K if prefix == "fatsync" else bench_simnet.FAT_TREE_K
        if ranks not in known:
            sizes = ", ".join(f"{prefix}{n}" for n in known)
            kind = fabrics[prefix][0]
            raise SystemExit(f"unknown case {name!r}: the {kind} cases are {sizes}")
        return [(name, fabrics[prefix][1](ranks))]
    if name == "gpt3_384":
        return [(name, bench_simnet.gpt3_case)]
    if name.startswith("ring") and name[4:].isdigit() and int(name[4:]) >= 2:
        n = int(name[4:])
        return [(name, lambda: bench_simnet.ring_case(n))]
    raise SystemExit(
        f"unknown case {name!r}: fatN, fathostN, fatsyncN, railN, flyN, ringN, gpt3_384 or examples"
    )


def fingerprints(cases: list[str]) -> dict[str, dict[str, str]]:
    """Digests per case (and phase) on the code this process imports."""
    import simnet

    out: dict[str, dict[str, str]] = {}
    for name in cases:
        for label, what in _config_cases(name):
            print(f"  {label} ...", file=sys.stderr, flush=True)
            if callable(what):
                out[label] = {"time_s": repr(what()[1])}
                continue
            res = simnet.simulate(what, record_series=True)
            for i, ph in enumerate(res.phases):
                for key, val in _phase_digests(ph).items():
                    out.setdefault(label, {})[f"{i}:{ph.name}:{key}"] = val
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--against", help="another checkout whose digests to compare with")
    ap.add_argument("--out", help="write the digests (JSON) here")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    cases = [c for c in ns.cases.split(",") if c]
    if ns.json:  # the child process of --against
        print(json.dumps(fingerprints(cases)))
        return 0
    mine = fingerprints(cases)
    if ns.out:
        Path(ns.out).write_text(json.dumps(mine, indent=1))
    print(json.dumps(mine, indent=1))
    if not ns.against:
        return 0
    other_root = Path(ns.against).resolve()
    proc = run_on(other_root, Path(__file__).resolve(), ["--json", "--cases", ns.cases])
    theirs = last_json(proc, f"fingerprints on {other_root}")
    differ = [
        (case, key)
        for case in sorted(set(mine) | set(theirs))
        for key in sorted(set(mine.get(case, {})) | set(theirs.get(case, {})))
        if mine.get(case, {}).get(key) != theirs.get(case, {}).get(key)
    ]
    total = sum(len(v) for v in mine.values())
    if differ:
        print(f"\n{len(differ)} of {total} digests differ from {other_root}:")
        for case, key in differ:
            print(
                f"  {case} {key}: {theirs.get(case, {}).get(key)} -> {mine.get(case, {}).get(key)}"
            )
        return 1
    print(f"\nall {total} digests equal to {other_root}'s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
