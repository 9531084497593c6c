"""The Python proxies side by side with the published C++ reference proxies.

    python bench/bench_reference.py --reference DIR [--cases resnet50,dlrm,...]
                                    [--repeats 3] [--iters N] [--warmup N]

DIR is a checkout of the public C++/MPI proxy suite (its ``proxies/`` folder holds
``comm_only/resnet50.cpp``, ``dlrm.cpp`` and the others); the environment variable
``COMMSIM_REFERENCE_DIR`` may name it instead. Nothing of it is kept in this project:
each case's source is copied to a temporary folder with its compiled-in iteration
counts (``#define RUNS`` and ``WARM_UP``) set to this run's, so both sides time the
same iterations, and compiled with the ``mpicxx`` beside ``mpiexec`` (the MPICH wheel
ships it), ``-O2``.

Both sides run with the same ranks and environment: thread level single (the
reference's ``MPI_Init``), blocking MPI calls in the proxy (``--progress blocking``,
as the reference waits), MPICH's progress throttle on (more ranks than cores here).
Runs alternate, reference first in odd rounds and proxy first in even ones, so a
shared machine's noise hits both alike. Figures: rank 0's seconds per iteration (the
reference's printed figure: wall time of the timed loop over its iterations; the
proxy's JSON ``runtime_per_iteration_s.rank0``, defined the same way), medians over the
rounds and the ratio proxy / reference, with the per-round ratios; and every rank's
peak resident memory, read by ``/usr/bin/time -f %M`` wrapped around each rank of
both sides alike, summed over ranks and of the largest rank. Writes
results/bench_reference.json (atomically) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

from bench.bench_executor import (
    MPIEXEC,
    RunError,
    compared,
    memory_compared,
    proxy_command,
    run_job,
)
from bench.mpi_build import mpi_compile
from proxies.launch import THROTTLE_VARS
from workload.results import counted, versions, write_json

ROOT = Path(__file__).resolve().parent.parent
TIME = "/usr/bin/time"


@dataclass(frozen=True)
class RefCase:
    """A reference program and the proxy that mirrors it."""

    name: str
    source: str  # path inside the reference checkout
    module: str  # python -m proxies.<module>
    args: tuple[str, ...]  # positional arguments, the same for both
    ranks: int
    # (the proxy's phase name, text that marks the reference's output line of that phase)
    phases: tuple[tuple[str, str], ...]
    iters: int  # timed iterations by default (a few seconds per run on 2 cores)
    warmup: int

    def label(self, phase: str) -> str:
        return self.name if len(self.phases) == 1 else f"{self.name}/{phase}"


CASES = {
    c.name: c
    for c in (
        RefCase(
            "resnet50", "proxies/comm_only/resnet50.cpp", "resnet50", (), 4,
            (("allreduce", "(allreduce)"), ("ring", "(neighbors in ring)")), 10, 2,
        ),
        RefCase(
            "resnet152", "proxies/resnet152.cpp", "resnet152", (), 4,
            (("iteration", "ResNet-152"),), 5, 1,
        ),
        RefCase(
            "cosmoflow", "proxies/cosmoflow.cpp", "cosmoflow", (), 4,
            (("iteration", "CosmoFlow"),), 5, 1,
        ),
        RefCase("dlrm", "proxies/dlrm.cpp", "dlrm", (), 4, (("iteration", "DLRM"),), 200, 5),
        RefCase(
            "gpt2", "proxies/comm_only/gpt2_large.cpp", "gpt2", ("48", "4"), 4,
            (("iteration", "GPT2-large"),), 100, 5,
        ),
        RefCase(
            "bert", "proxies/comm_only/bert_large.cpp", "bert", ("24", "4"), 4,
            (("iteration", "Bert-large"),), 100, 5,
        ),
        RefCase(
            "gpt3_one_pipe_step", "proxies/gpt3_one_pipe_step.cpp", "gpt3_one_pipe_step",
            ("2",), 8, (("step", "one pipeline step"),), 5, 1,
        ),
    )
}  # fmt: skip

_FIGURE = re.compile(r"=\s*([0-9.]+(?:[eE][-+]?[0-9]+)?)\s*s\b")
_OTHER_RANK = re.compile(r"Rank = [1-9]")
_DEFINE = {"RUNS": re.compile(r"^#define RUNS\s+\d+", re.M),
           "WARM_UP": re.compile(r"^#define WARM_UP\s+\d+", re.M)}  # fmt: skip


EXIT_USAGE = 2  # as every command's usage errors


class UsageError(Exception):
    """What is wrong with the command line or what it names, found before any work."""


def reference_dir(given: str | None) -> Path:
    """The reference checkout; UsageError saying how to name one when it is missing."""
    raw = given or os.environ.get("COMMSIM_REFERENCE_DIR")
    if not raw:
        raise UsageError(
            "name a checkout of the C++ reference proxies with --reference "
            "DIR (or COMMSIM_REFERENCE_DIR); its proxies/ folder holds dlrm.cpp and the others"
        )
    path = Path(raw).expanduser().resolve()
    if not (path / "proxies").is_dir():
        raise UsageError(f"{path} has no proxies/ folder (not the reference?)")
    return path


def case_problem(ref: Path, case: RefCase) -> str | None:
    """Why ``case`` cannot run (its source missing: a UsageError), or why it is skipped at
    its rank count (a layout the model refuses, e.g. 4 stages on 2 ranks), or None."""
    from workload.layout import LayoutError
    from workload.spec import RunSpec

    src = ref / case.source
    if not src.is_file():
        raise UsageError(f"{src} is missing from the reference checkout")
    try:
        RunSpec(case.module, args=tuple(map(int, case.args))).workload(case.ranks)
    except (LayoutError, ValueError) as e:
        return str(e)
    return None


def patched_source(text: str, iters: int, warmup: int) -> str:
    """The reference source with its compiled-in iteration counts set to ours; ValueError
    if a count is not defined where expected (a changed source must not run unnoticed)."""
    for name, value in (("RUNS", iters), ("WARM_UP", warmup)):
        text, n = _DEFINE[name].subn(f"#define {name} {value}", text, count=1)
        if n != 1:
            raise ValueError(f"no '#define {name} <n>' line in the reference source")
    return text


def build(ref: Path, case: RefCase, iters: int, warmup: int, out_dir: Path) -> Path:
    """The case's reference program with our iteration counts, compiled; its path."""
    src = ref / case.source
    copy = out_dir / f"{case.name}.cpp"
    copy.write_text(patched_source(src.read_text(), iters, warmup))
    return mpi_compile(copy, out_dir / case.name, "mpicxx", "bench_reference")


def with_memory(cmd: list[str], rss_dir: Path) -> list[str]:
    """``mpiexec -n P prog ...`` with every rank run under ``/usr/bin/time``, which writes
    the rank's peak resident memory (KiB) to rss_dir/rss.<rank> (MPICH's launcher sets
    PMI_RANK; Open MPI's OMPI_COMM_WORLD_RANK)."""
    wrap = (
        f'r="${{PMI_RANK:-${{OMPI_COMM_WORLD_RANK:-x$$}}}}"; exec {TIME} -f %M -o "$0/rss.$r" "$@"'
    )
    return [*cmd[:3], "sh", "-c", wrap, str(rss_dir), *cmd[3:]]


def read_rss(rss_dir: Path, ranks: int) -> list[int]:
    """Every rank's peak resident memory (bytes), in rank order."""
    out = []
    for r in range(ranks):
        lines = (rss_dir / f"rss.{r}").read_text().split()
        out.append(int(lines[-1]) * 1024)
    return out


def reference_figures(case: RefCase, output: str) -> dict[str, float]:
    """Rank 0's seconds per iteration of each phase, from the reference's printout."""
    figures = {}
    for phase, marker in case.phases:
        for line in output.splitlines():
            if marker in line and not _OTHER_RANK.search(line):
                m = _FIGURE.search(line)
                if m:
                    figures[phase] = float(m.group(1))
                    break
        else:
            raise RunError(f"{case.name}: no '{marker}' figure in the reference's output")
    return figures


def proxy_figures(case: RefCase, doc: dict[str, Any]) -> dict[str, float]:
    """Rank 0's seconds per iteration of each phase, from the proxy's JSON."""
    if doc["mpi"]["thread_level"] != "single":
        raise RunError(f"{case.name}: proxy ran at {doc['mpi']['thread_level']}")
    got = {p["phase"]: p["runtime_per_iteration_s"]["rank0"] for p in doc["phases"]}
    missing = [ph for ph, _ in case.phases if ph not in got]
    if missing:
        raise RunError(f"{case.name}: proxy JSON lacks phase(s) {missing}")
    return {ph: got[ph] for ph, _ in case.phases}


def run_side(
    side: str, case: RefCase, exe: Path, iters: int, warmup: int, env: dict, timeout_s: float
) -> tuple[dict[str, float], list[int], str]:
    """One run of one side: per-phase seconds per iteration, per-rank peak memory, command."""
    with tempfile.TemporaryDirectory(prefix="bench_reference.") as tmp:
        tmpd = Path(tmp)
        doc = tmpd / "proxy.json"
        if side == "reference":
            cmd = [MPIEXEC, "-n", str(case.ranks), str(exe), *case.args]
        else:
            cmd = proxy_command(
                case.module, case.args, case.ranks, 1.0, iters, warmup, True, timeout_s
            )
            cmd += ["--json", str(doc)]
        out = run_job(with_memory(cmd, tmpd), env, timeout_s + 30)
        figures = (
            reference_figures(case, out)
            if side == "reference"
            else proxy_figures(case, json.loads(doc.read_text()))
        )
        return figures, read_rss(tmpd, case.ranks), shlex.join(cmd)


def summarise(case: RefCase, runs: dict[str, list]) -> list[dict[str, Any]]:
    rows = []
    for phase, _ in case.phases:
        ref = [r[0][phase] for r in runs["reference"]]
        prx = [r[0][phase] for r in runs["proxy"]]
        row: dict[str, Any] = {"case": case.label(phase), "ranks": case.ranks}
        row |= {"reference_s_per_iter": ref, "proxy_s_per_iter": prx}
        if ref and prx:
            row |= compared("reference", ref, "proxy", prx)
        rows.append(row)
    sides = {side: [r[1] for r in runs[side]] for side in ("reference", "proxy")}
    mem = {"case": case.name, "ranks": case.ranks} | memory_compared(sides, "reference", "proxy")
    rows[0]["memory"] = mem
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'case':24s} {'ranks':>5s} {'C++ (s/iter)':>12s} {'spread':>6s} {'Python (s/iter)':>15s} "
        f"{'spread':>6s} {'Py/C++':>7s} {'per round':>13s} {'C++ MB (all)':>12s} "
        f"{'Py MB (all)':>11s} {'Py/C++':>7s}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        if "ratio_proxy_over_reference" not in r:
            lines.append(f"{r['case']:24s} {r['ranks']:5d}  failed")
            continue
        pr = r["paired_ratios"]
        line = (
            f"{r['case']:24s} {r['ranks']:5d} {r['reference_median_s']:12.6f} "
            f"{r['reference_spread']:6.1%} {r['proxy_median_s']:15.6f} {r['proxy_spread']:6.1%} "
            f"{r['ratio_proxy_over_reference']:7.3f} {f'{min(pr):.3f}-{max(pr):.3f}':>13s}"
        )
        m = r.get("memory", {})
        if "ratio_sum_ranks" in m:
            line += (
                f" {m['reference_sum_ranks_bytes'] / 1e6:12.1f} "
                f"{m['proxy_sum_ranks_bytes'] / 1e6:11.1f} {m['ratio_sum_ranks']:7.3f}"
            )
        lines.append(line)
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", metavar="DIR", help="checkout of the C++ reference proxies")
    ap.add_argument("--cases", default=",".join(CASES), help=f"subset of {','.join(CASES)}")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each side per case")
    ap.add_argument(
        "--ranks", type=int, metavar="P",
        help="ranks of every case instead of its own (4, 8 for GPT-3); at 2 ranks nothing is "
        "oversubscribed on 2 cores, which steadies the figures of the cases that allow it",
    )  # fmt: skip
    ap.add_argument("--iters", type=int, metavar="N", help="timed iterations (default per case)")
    ap.add_argument("--warmup", type=int, metavar="N", help="warm-up iterations (default per case)")
    ap.add_argument("--timeout", type=float, default=300.0, metavar="S", help="per MPI job")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench_reference.json"))
    ns = ap.parse_args(argv)
    ns.cases = [c.strip() for c in ns.cases.split(",") if c.strip()]
    unknown = [c for c in ns.cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    if ns.repeats < 1 or (ns.iters is not None and ns.iters < 1):
        ap.error("need --repeats >= 1 and --iters >= 1")
    if ns.ranks is not None and ns.ranks < 2:
        ap.error("need --ranks >= 2")
    if ns.warmup is not None and ns.warmup < 0:
        ap.error("need --warmup >= 0")
    return ns


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    cases = [CASES[c] for c in ns.cases]
    if ns.ranks:
        cases = [replace(case, ranks=ns.ranks) for case in cases]
    skipped: dict[str, str] = {}
    try:
        ref = reference_dir(ns.reference)
        if not Path(TIME).is_file():
            raise UsageError(f"{TIME} is needed to read each rank's peak memory")
        for case in cases:
            why = case_problem(ref, case)
            if why:
                skipped[case.name] = why
        if len(skipped) == len(cases):
            raise UsageError(
                f"no case runs on {counted(cases[0].ranks, 'rank')}: " + "; ".join(skipped.values())
            )
    except UsageError as e:
        print(f"error: bench_reference: {e}", file=sys.stderr)
        return EXIT_USAGE
    started = time.perf_counter()

    def say(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {msg}", file=sys.stderr, flush=True)

    env = dict(os.environ) | THROTTLE_VARS
    rows: list[dict[str, Any]] = []
    commands: dict[str, dict[str, str]] = {}
    failed = False
    for name, why in skipped.items():
        # (both sides would fail: the reference asserts, the proxy refuses the layout)
        say(f"{name} skipped: {why}")
    with tempfile.TemporaryDirectory(prefix="bench_reference.build.") as build_dir:
        for case in cases:
            if case.name in skipped:
                continue
            iters = ns.iters or case.iters
            warmup = case.warmup if ns.warmup is None else ns.warmup
            exe = build(ref, case, iters, warmup, Path(build_dir))
            runs: dict[str, list] = {"reference": [], "proxy": []}
            for rep in range(ns.repeats):
                order = ("reference", "proxy") if rep % 2 == 0 else ("proxy", "reference")
                for side in order:
                    try:
                        figs, rss, cmd = run_side(side, case, exe, iters, warmup, env, ns.timeout)
                    except (RunError, OSError, ValueError, KeyError) as e:
                        failed = True
                        say(f"{case.name} round {rep + 1} {side} failed: {e}")
                        continue
                    commands.setdefault(case.name, {})[side] = cmd
                    runs[side].append((figs, rss))
                    shown = ", ".join(f"{ph} {s:.6f} s" for ph, s in figs.items())
                    say(f"{case.name} round {rep + 1}/{ns.repeats} {side}: {shown}")
            rows += summarise(case, runs)
    print(table(rows))
    write_json(
        ns.out,
        {
            "benchmark": "bench_reference",
            "reference_dir": str(ref),
            "repeats": ns.repeats,
            "environment": THROTTLE_VARS,
            "cases": rows,
            "skipped": skipped,
            "commands": commands,
            "versions": versions(),
        },
    )
    print(f"wrote {ns.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
