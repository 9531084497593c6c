"""Executor overhead: a proxy's time per iteration against a bare mpi4py loop.

For each model and scale, runs the proxy

    mpiexec -n P python -m proxies.<model> [args] --scale F --iters N --warmup W
        --progress blocking --thread-level single --json TMP

and bench/bare_loops.py, which makes the same MPI calls (same thread level,
communicator kind, scratch buffers, sizes, sleeps, warm-up and timed
iterations) in a plain loop. Both report rank 0's wall time of the timed loop
after a barrier, divided by the timed iterations. Runs alternate bare, proxy,
bare, proxy... (``--repeats`` of each) so that the noise of a shared machine
hits both alike; the table gives medians, their spread ((max - min) / median
over the repeats) and the ratio proxy / bare, with the range of the ratios of
adjacent bare/proxy pairs and the ratio of the fastest runs (noise only ever
adds time, so best-of is the other usual estimate). When the spreads are
larger than the distance of the ratio from 1, the run did not resolve the
overhead: raise --repeats, or run on a quiet machine. "overhead" is median
proxy - median bare per iteration, and per operation of rank 0's program (MPI
calls, waits and compute sleeps: the executor's unit of work).

A second table gives each side's peak resident memory (the whole process: interpreter,
imports, MPI library, buffers), of the largest rank and summed over the ranks, median
over the runs: what a proxy rank costs beyond the calls it makes.

Cases: ResNet-50 (allreduce and ring phases), DLRM, and GPT-2 with 2 stages
(2 ranks only). Each run checks that both sides made the same number of calls
with the same call bytes (summed over ranks, per iteration) and ran at thread
level single with blocking progress.

Usage: python bench/bench_executor.py [--ranks 2] [--repeats 3] [--iters N] [--warmup N]
       [--scales 1.0,0.01] [--models resnet50,dlrm,gpt2] [--timeout S] [--out PATH]
Writes results/bench_executor.json (atomically).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxies.launch import THROTTLE_VARS
from workload.models.dlrm import ALLTOALL_TOTAL_ELEMS
from workload.results import versions, write_json
from workload.units import s_to_us

ROOT = Path(__file__).resolve().parent.parent
BARE = Path(__file__).resolve().with_name("bare_loops.py")
MPIEXEC = shutil.which("mpiexec") or "mpiexec"
SMALL_SCALE = 0.1  # at or below: the case's iteration count for small messages


@dataclass(frozen=True)
class Case:
    """A proxy and its bare twin (bench/bare_loops.py has a loop of the same name)."""

    model: str
    proxy_args: tuple[str, ...]  # the reference's positional arguments
    phases: tuple[str, ...]
    iters_full: int  # timed iterations at scale > SMALL_SCALE (~0.5-1.5 s of loop on 2 ranks)
    iters_small: int  # ... at scale <= SMALL_SCALE
    label: str = ""

    def name(self, phase: str) -> str:
        return f"{self.label or self.model}/{phase}"

    def unsupported(self, ranks: int) -> str | None:
        if self.model == "gpt2" and ranks != 2:
            return "GPT-2 with 2 stages is mirrored for 2 ranks only"
        if self.model == "dlrm" and ALLTOALL_TOTAL_ELEMS % ranks:
            return f"DLRM needs the world size to divide {ALLTOALL_TOTAL_ELEMS}"
        return None


CASES = {
    c.model: c
    for c in (
        Case("resnet50", (), ("allreduce", "ring"), 10, 1000),
        Case("dlrm", (), ("iteration",), 100, 100),
        Case("gpt2", ("48", "2"), ("iteration",), 50, 1000, label="gpt2(48,2)"),
    )
}


class RunError(RuntimeError):
    pass


def run_job(cmd: list[str], env: dict[str, str], timeout_s: float) -> str:
    """Run an MPI job in its own process group (stopped on timeout); its output."""
    from workflows.launcher import run_command

    res = run_command(cmd, timeout_s, env=env, cwd=ROOT)
    if res.timed_out:
        raise RunError(f"timed out after {timeout_s:g} s: {shlex.join(cmd)}")
    if res.returncode != 0:
        tail = "\n".join(res.output.strip().splitlines()[-5:])
        raise RunError(f"exit code {res.returncode}: {shlex.join(cmd)}\n{tail}")
    return res.output


def bare_cmd(case: Case, ranks: int, scale: float, iters: int, warmup: int) -> list[str]:
    return [
        MPIEXEC, "-n", str(ranks), sys.executable, str(BARE), case.model,
        "--scale", repr(scale), "--iters", str(iters), "--warmup", str(warmup),
        "--thread-level", "single",
    ]  # fmt: skip


def proxy_cmd(
    case: Case, ranks: int, scale: float, iters: int, warmup: int, throttle: bool, timeout_s: float
) -> list[str]:
    return proxy_command(
        case.model, case.proxy_args, ranks, scale, iters, warmup, throttle, timeout_s
    )


def proxy_command(
    module: str,
    args: Sequence[str],
    ranks: int,
    scale: float,
    iters: int,
    warmup: int,
    throttle: bool,
    timeout_s: float,
) -> list[str]:
    """``mpiexec`` of ``python -m proxies.<module> args`` as the benchmarks run a proxy:
    thread level single, blocking calls, quiet."""
    return [
        MPIEXEC, "-n", str(ranks), sys.executable, "-m", f"proxies.{module}", *args,
        "--scale", repr(scale), "--iters", str(iters), "--warmup", str(warmup),
        "--progress", "blocking", "--thread-level", "single",
        "--throttle", "on" if throttle else "off", "--timeout", f"{timeout_s:g}", "--quiet",
    ]  # fmt: skip


def run_bare(cmd: list[str], env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    out = run_job(cmd, env, timeout_s)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        raise RunError(f"no JSON line from {shlex.join(cmd)}:\n{out[-500:]}")
    doc = json.loads(lines[-1])
    return {
        "thread_level": doc["thread_level"],
        "progress": "blocking",
        "peak_rss_bytes_per_rank": doc.get("peak_rss_bytes_per_rank", []),
        "phases": {
            p["phase"]: {
                "s_per_iter": p["runtime_per_iteration_s"],
                "total_s_per_rank": p["total_s_per_rank"],
                "calls": p["calls_all_ranks"],
                "call_bytes": p["call_bytes_all_ranks"],
            }
            for p in doc["phases"]
        },
    }


def run_proxy(cmd: list[str], env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench_executor.") as tmp:
        path = Path(tmp) / "proxy.json"
        run_job([*cmd, "--json", str(path)], env, timeout_s)
        doc = json.loads(path.read_text())
    phases = {}
    for p in doc["phases"]:
        per_iter = p["per_iteration_all_ranks"]
        phases[p["phase"]] = {
            "s_per_iter": p["runtime_per_iteration_s"]["rank0"],
            "total_s_per_rank": [r["total_s"] for r in p["per_rank"]],
            "calls": sum(per_iter["calls_by_group"].values()),
            "call_bytes": sum(per_iter["call_bytes_by_group"].values()),
            "ops_rank0": sum(p["per_rank"][0]["program"]["op_counts"].values()),
        }
    return {
        "thread_level": doc["mpi"]["thread_level"],
        "progress": doc["mpi"]["progress"],
        "peak_rss_bytes_per_rank": doc.get("peak_rss_bytes_per_rank", []),
        "phases": phases,
    }


def check_same(case: Case, bare: dict[str, Any], proxy: dict[str, Any]) -> list[str]:
    """Differences between the two sides that would make the comparison unfair."""
    problems = []
    for side, doc in (("bare", bare), ("proxy", proxy)):
        if doc["thread_level"] != "single":
            problems.append(f"{side} ran at thread level {doc['thread_level']}")
        if doc["progress"] != "blocking":
            problems.append(f"{side} ran with progress {doc['progress']}")
    for ph in case.phases:
        b, p = bare["phases"].get(ph), proxy["phases"].get(ph)
        if b is None or p is None:
            problems.append(f"phase {ph} missing ({'bare' if b is None else 'proxy'})")
            continue
        for key in ("calls", "call_bytes"):
            if b[key] != p[key]:
                problems.append(f"{ph}: {key} per iteration differ: bare {b[key]}, proxy {p[key]}")
    return problems


def spread(xs: list[float]) -> float:
    return (max(xs) - min(xs)) / statistics.median(xs) if xs else float("nan")


def compared(a: str, a_s: list[float], b: str, b_s: list[float]) -> dict[str, Any]:
    """Two sides' per-run seconds side by side: medians, spreads, ``ratio_<b>_over_<a>``
    of the medians and ``paired_ratios`` (b / a of the runs made back to back)."""
    ma, mb = statistics.median(a_s), statistics.median(b_s)
    return {
        f"{a}_median_s": ma,
        f"{b}_median_s": mb,
        f"{a}_spread": spread(a_s),
        f"{b}_spread": spread(b_s),
        f"ratio_{b}_over_{a}": mb / ma,
        "paired_ratios": [y / x for x, y in zip(a_s, b_s, strict=False)],
    }


def memory_compared(sides: dict[str, list], a: str, b: str) -> dict[str, Any]:
    """Per side, every run's per-rank peak memory (bytes) -> the medians over the runs of
    the largest rank and of the ranks' sum, and b / a of both."""
    row: dict[str, Any] = {}
    for side in (a, b):
        per_run = [r for r in sides[side] if r]
        if per_run:
            row[f"{side}_max_rank_bytes"] = statistics.median(max(r) for r in per_run)
            row[f"{side}_sum_ranks_bytes"] = statistics.median(sum(r) for r in per_run)
    if f"{a}_max_rank_bytes" in row and f"{b}_max_rank_bytes" in row:
        row["ratio_max_rank"] = row[f"{b}_max_rank_bytes"] / row[f"{a}_max_rank_bytes"]
        row["ratio_sum_ranks"] = row[f"{b}_sum_ranks_bytes"] / row[f"{a}_sum_ranks_bytes"]
    return row


def summarise(rows: dict[tuple[str, str, float], dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for (model, phase, scale), r in rows.items():
        bare, proxy = r["bare_s_per_iter"], r["proxy_s_per_iter"]
        row: dict[str, Any] = {
            "case": r["case"],
            "model": model,
            "phase": phase,
            "scale": scale,
            "ranks": r["ranks"],
            "iterations": r["iterations"],
            "executor_ops_per_iter_rank0": r["ops_per_rank"],
            "bare_s_per_iter": bare,
            "proxy_s_per_iter": proxy,
            "problems": r["problems"],
        }
        if bare and proxy:
            row |= compared("bare", bare, "proxy", proxy)
            mb, mp = row["bare_median_s"], row["proxy_median_s"]
            row |= {
                "bare_best_s": min(bare),
                "proxy_best_s": min(proxy),
                "ratio_best_proxy_over_best_bare": min(proxy) / min(bare),
                "overhead_us_per_iter": s_to_us(mp - mb),
                "overhead_us_per_op": s_to_us(mp - mb) / max(1, r["ops_per_rank"]),
            }
        out.append(row)
    return out


def table(summary: list[dict[str, Any]]) -> str:
    head = (
        f"{'model/phase':22s} {'scale':>5s} {'iters':>5s} {'bare (s/iter)':>13s} {'spread':>6s} "
        f"{'proxy (s/iter)':>14s} {'spread':>6s} {'proxy/bare':>10s} {'pair ratios':>13s} "
        f"{'best/best':>9s} {'overhead (us/iter)':>18s} {'(us/op)':>7s}"
    )
    lines = [head, "-" * len(head)]
    for r in summary:
        name, scale = r["case"], f"{r['scale']:g}"
        if "ratio_proxy_over_bare" not in r:
            lines.append(f"{name:22s} {scale:>5s} {r['iterations']['timed']:5d}  failed")
            continue
        pr = r["paired_ratios"]
        lines.append(
            f"{name:22s} {scale:>5s} {r['iterations']['timed']:5d} {r['bare_median_s']:13.6f} "
            f"{r['bare_spread']:6.1%} {r['proxy_median_s']:14.6f} {r['proxy_spread']:6.1%} "
            f"{r['ratio_proxy_over_bare']:10.3f} {f'{min(pr):.3f}-{max(pr):.3f}':>13s} "
            f"{r['ratio_best_proxy_over_best_bare']:9.3f} "
            f"{r['overhead_us_per_iter']:18.1f} {r['overhead_us_per_op']:7.2f}"
        )
    return "\n".join(lines)


def memory_summary(runs: dict[tuple[str, float], dict[str, list]]) -> list[dict[str, Any]]:
    """Per case: the peak resident memory of the largest rank and of all ranks summed,
    median over the runs, bare and proxy (bytes)."""
    return [_memory_row(model, scale, sides) for (model, scale), sides in runs.items()]


def _memory_row(model: str, scale: float, sides: dict[str, list]) -> dict[str, Any]:
    return {"model": model, "scale": scale, "runs": sides} | memory_compared(sides, "bare", "proxy")


def memory_table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'model':10s} {'scale':>5s} {'bare (MB/rank)':>14s} {'proxy (MB/rank)':>15s} "
        f"{'proxy/bare':>10s} {'bare (MB, all)':>14s} {'proxy (MB, all)':>15s} {'proxy/bare':>10s}"
    )
    return "\n".join([head, "-" * len(head), *map(_memory_line, rows)])


def _memory_line(r: dict[str, Any]) -> str:
    if "ratio_max_rank" not in r:
        return f"{r['model']:10s} {r['scale']:>5g}  no figures"
    mb = {k: r[k] / 1e6 for k in r if k.endswith("_bytes")}
    return (
        f"{r['model']:10s} {r['scale']:>5g} {mb['bare_max_rank_bytes']:14.1f} "
        f"{mb['proxy_max_rank_bytes']:15.1f} {r['ratio_max_rank']:10.3f} "
        f"{mb['bare_sum_ranks_bytes']:14.1f} {mb['proxy_sum_ranks_bytes']:15.1f} "
        f"{r['ratio_sum_ranks']:10.3f}"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--ranks", type=int, default=2, help="MPI ranks (default 2: this machine's cores)"
    )
    ap.add_argument("--repeats", type=int, default=3, help="runs of each side per case (default 3)")
    ap.add_argument(
        "--iters", type=int, default=None, metavar="N",
        help="timed iterations of every case (default: per case and scale, 0.5-1.5 s of loop)",
    )  # fmt: skip
    ap.add_argument(
        "--warmup", type=int, default=None, metavar="N",
        help="warm-up iterations (default: max(2, iters // 10))",
    )  # fmt: skip
    ap.add_argument("--scales", default="1.0,0.01", help="comma-separated (default 1.0,0.01)")
    ap.add_argument("--models", default=",".join(CASES), help=f"subset of {','.join(CASES)}")
    ap.add_argument(
        "--timeout", type=float, default=120.0, metavar="S",
        help="per MPI job: the proxy's --timeout, and S + 30 for the whole job (default 120)",
    )  # fmt: skip
    ap.add_argument("--out", default=str(ROOT / "results" / "bench_executor.json"))
    ns = ap.parse_args(argv)
    try:
        ns.scales = [float(s) for s in ns.scales.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--scales must be numbers (got {ns.scales!r})")
    ns.models = [m.strip() for m in ns.models.split(",") if m.strip()]
    unknown = [m for m in ns.models if m not in CASES]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    if ns.ranks < 2 or ns.repeats < 1 or not ns.scales or any(s <= 0 for s in ns.scales):
        ap.error("need --ranks >= 2, --repeats >= 1 and positive --scales")
    if (ns.iters is not None and ns.iters < 1) or (ns.warmup is not None and ns.warmup < 0):
        ap.error("need --iters >= 1 and --warmup >= 0")
    return ns


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    started = time.perf_counter()

    def say(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {msg}", file=sys.stderr, flush=True)

    cores = os.cpu_count() or 1
    throttle = ns.ranks > cores  # as the proxy's auto; the bare loop gets the same environment
    env = dict(os.environ)
    if throttle:
        env.update(THROTTLE_VARS)
    job_timeout = ns.timeout + 30

    cases, skipped = [], {}
    for m in ns.models:
        why = CASES[m].unsupported(ns.ranks)
        if why:
            skipped[m] = why
            say(f"skipping {m}: {why}")
        else:
            cases.append(CASES[m])

    plan = []  # (case, scale, iters, warmup)
    rows: dict[tuple[str, str, float], dict[str, Any]] = {}
    for case in cases:
        for scale in ns.scales:
            iters = ns.iters or (case.iters_small if scale <= SMALL_SCALE else case.iters_full)
            warmup = ns.warmup if ns.warmup is not None else max(2, iters // 10)
            plan.append((case, scale, iters, warmup))
            for ph in case.phases:
                rows[(case.model, ph, scale)] = {
                    "case": case.name(ph),
                    "ranks": ns.ranks,
                    "iterations": {"warmup": warmup, "timed": iters},
                    "ops_per_rank": 0,
                    "bare_s_per_iter": [],
                    "proxy_s_per_iter": [],
                    "bare_total_s_per_rank": [],
                    "proxy_total_s_per_rank": [],
                    "problems": [],
                }

    commands: dict[str, dict[str, str]] = {}
    # (model, scale) -> side -> per run, every rank's peak resident memory (bytes)
    memory: dict[tuple[str, float], dict[str, list]] = {
        (case.model, scale): {"bare": [], "proxy": []} for case, scale, _, _ in plan
    }
    failed = False
    # Rounds outermost: every case gets one bare and one proxy run per round, back to back.
    load: list[dict[str, Any]] = []  # the machine's load average, per round
    for rep in range(ns.repeats):
        load.append({"round": rep + 1, "loadavg_1_5_15min": list(os.getloadavg())})
        for case, scale, iters, warmup in plan:
            bcmd = bare_cmd(case, ns.ranks, scale, iters, warmup)
            pcmd = proxy_cmd(case, ns.ranks, scale, iters, warmup, throttle, ns.timeout)
            commands[f"{case.model} scale {scale:g}"] = {
                "bare": shlex.join(bcmd),
                "proxy": shlex.join([*pcmd, "--json", "PATH"]),
            }
            try:
                bare = run_bare(bcmd, env, job_timeout)
                proxy = run_proxy(pcmd, env, job_timeout)
            except (RunError, OSError, ValueError, KeyError) as e:
                failed = True
                say(f"round {rep + 1}: {case.model} scale {scale:g} failed: {e}")
                for ph in case.phases:
                    rows[(case.model, ph, scale)]["problems"].append(f"round {rep + 1}: {e}")
                continue
            problems = check_same(case, bare, proxy)
            if problems:
                failed = True
            for side, doc in (("bare", bare), ("proxy", proxy)):
                memory[(case.model, scale)][side].append(doc["peak_rss_bytes_per_rank"])
            for ph in case.phases:
                row = rows[(case.model, ph, scale)]
                row["problems"] += [f"round {rep + 1}: {p}" for p in problems]
                b, p = bare["phases"].get(ph), proxy["phases"].get(ph)
                if b is None or p is None:
                    continue
                row["ops_per_rank"] = p["ops_rank0"]
                row["bare_s_per_iter"].append(b["s_per_iter"])
                row["proxy_s_per_iter"].append(p["s_per_iter"])
                row["bare_total_s_per_rank"].append(b["total_s_per_rank"])
                row["proxy_total_s_per_rank"].append(p["total_s_per_rank"])
                say(
                    f"round {rep + 1}/{ns.repeats} {case.name(ph)} scale {scale:g}: "
                    f"bare {b['s_per_iter']:.6f}, proxy {p['s_per_iter']:.6f} s/iter"
                    + (f"  PROBLEM: {'; '.join(problems)}" if problems else "")
                )

    summary = summarise(rows)
    for s in summary:
        key = (s["model"], s["phase"], s["scale"])
        s["bare_total_s_per_rank"] = rows[key]["bare_total_s_per_rank"]
        s["proxy_total_s_per_rank"] = rows[key]["proxy_total_s_per_rank"]
    text = table(summary)
    loads = ", ".join(f"{x['loadavg_1_5_15min'][0]:.1f}" for x in load)
    print(
        f"Executor overhead, {ns.ranks} ranks on {cores} cores, {ns.repeats} alternating "
        f"bare/proxy runs per row; rank 0's timed loop / iterations; thread level single, "
        f"blocking progress, progress throttle {'on' if throttle else 'off'}; "
        f"1-min load average at the start of each round: {loads}"
    )
    print(text)
    print(
        "spread = (max - min) / median over the runs; proxy/bare = ratio of the medians; "
        "pair ratios = range of proxy/bare over adjacent runs; best/best = fastest proxy run / "
        "fastest bare run; overhead = median difference (per op: per operation of rank 0's "
        "program: MPI calls, waits, sleeps)"
    )
    mem_rows = memory_summary(memory)
    mem_text = memory_table(mem_rows)
    print(
        "\nPeak resident memory (the whole process: interpreter, MPI library, buffers), "
        "median over the runs: of the largest rank, and summed over the ranks"
    )
    print(mem_text)
    for m, why in skipped.items():
        print(f"skipped {m}: {why}")
    for s in summary:
        for p in s["problems"]:
            print(f"PROBLEM {s['case']} scale {s['scale']:g}: {p}")

    doc = {
        "kind": "bench-executor",
        "description": __doc__.split("\n\n")[0],
        "ranks": ns.ranks,
        "cores": cores,
        "repeats": ns.repeats,
        "scales": ns.scales,
        "order": "rounds; in each round, per case: bare run then proxy run",
        "timing": "rank 0: wall time of the timed loop after a barrier / timed iterations (s)",
        "mpi": {
            "thread_level": "single",
            "progress": "blocking",
            "progress_throttle": throttle,
            "env": {k: env[k] for k in THROTTLE_VARS if k in env},
        },
        "commands": commands,
        "load": load,
        "skipped": skipped,
        "versions": versions(),
        "wall_s": time.perf_counter() - started,
        "rows": summary,
        "table": text,
        "memory": mem_rows,
        "memory_table": mem_text,
    }
    path = write_json(ns.out, doc)
    print(f"wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
