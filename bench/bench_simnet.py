"""Simulator speed: simulated messages per second and wall time.

    python bench/bench_simnet.py [--cases ring64,ring256,ring1024,gpt3_384] [--repeats 1]
                                 [--against DIR]

Cases (targets on a 2-core machine in brackets):
- ringN: one 1 GiB ring allreduce over N endpoints of a bidirectional ring
  (2 (N-1) N messages) [1024 ranks in <= 10 s; >= 300,000 messages/s];
- gpt3_384: one iteration of the GPT-3 proxy at its reference default (96
  stages, acc_scale 2: 192 micro-batches, 384 ranks) on a hierarchical cluster
  of 4 GPUs per node (NVLink-class 150 GB/s inside, 12.5 GB/s between nodes)
  [<= 30 s];
- fatN: one iteration of ResNet-152 data parallel on N ranks of a fat-tree (k = 16,
  26, 42 for 1,024, 4,096, 16,384 ranks; ECMP), through ``simulate(...,
  dense_matrices=False)`` [16,384 ranks in <= 60 s and 8 GB; >= 1M messages/s; wall
  time at most linear in messages: the fitted exponent is printed]. fat16384 is not
  run by default (minutes); ``--cases fat1024,fat4096,fat16384`` runs it;
- fathostN: fatN with a host's costs, as a calibrated run has them (0.1 ns a byte
  reduced, 1 us after each step of a collective): a delay timer after every step;
- fatsyncN (N = 256, 1,024): fathostN with collectives progressing only inside MPI
  calls, as a calibration of this machine sets them: every gradient allreduce runs in
  the step's final wait, thousands of flows share the core links at once, and each
  flow's start or end recomputes one component of nearly all of them (1,024 ranks
  take minutes: the max-min solver's open problem);
- railN, flyN: the same workload on N GPUs of a rail-optimised cluster (8 GPUs a node,
  300 GB/s NVLink and one 25 GB/s NIC per GPU) and of a dragonfly (16 routers a group,
  16 endpoints a router, 25 GB/s links): the other fabrics of big GPU clusters;
- switchN: the same workload on N ranks of one switch (the same 25 GB/s links and
  1 us hops), where no two flows share a link: the simulator's cost per message
  without contention. Run beside fatN, the summary splits fatN's time per message
  into that and what the max-min sharing of contended links adds;
- plansN: no simulation, only what a simulation of fatN makes first for every rank:
  its plan (flattened steps) of each of ResNet-152's gradient allreduces
  (Rabenseifner over N ranks); its messages are the plans' messages.
Reports wall seconds and CPU seconds (process time, less sensitive to a shared
machine; both include collecting what the run leaves to the cyclic collector; medians
over ``--repeats``, which go round the cases, every case once and then again, so that
a drift of the machine's speed slows all of them alike), messages, messages per CPU
and per wall second and the peak resident memory of the case's process, and for the
fat-tree cases the max-min work (flow rates computed per message, and how many of them
were new: the rest found a rate as it was) and the growth
exponent of their wall time (with repeats, also from each case's fastest run), and how
fast the machine was: the time of a 10-million-iteration empty Python loop in a fresh
interpreter before and after the runs (0.30 s in the fastest hour seen here, over 1 s in
slow ones); writes results/bench_simnet.json. Every run is a fresh Python process.

``--against-pure`` measures this tree's pure-Python core (COMMSIM_PURE_PYTHON=1)
side by side with the compiled one, the same way; ``--against-no-huge-pages`` this
tree with Python's object arenas on ordinary pages (COMMSIM_HUGE_PAGES=0, see
simnet/arenas.py).

``--cachegrind`` counts instead of timing: each case runs under ``valgrind
--tool=cachegrind`` with an 8 MB last-level cache (a share of a shared machine's),
and the table gives the whole process's instructions, L1 data misses and
last-level misses, and an estimate of cycles from them (instructions + 10 per L1 miss
+ 100 per last-level miss: rough weights, but it counts the memory stalls that grow
with a big case's working set; for the fat-tree cases its growth exponent in messages
is fitted and printed). The counts do not move with the machine's load, so they settle
differences of a few percent that wall times on a shared machine cannot (a case
takes about 50x its time: ring1024 or fat1024 a few minutes, fat4096 ten); with
``--against`` the ratios are this tree's over DIR's. Writes
results/bench_simnet_cachegrind.json.

``--loop`` counts the message loop alone, under callgrind: the instructions executed
inside the network's wake-ups and max-min passes (``FlowNetwork._on_wake`` and
``_on_flush``, entered from simpy: the timers, the max-min sharing and the executor's
steps they call; the set-up, simpy's own scheduling and the result are left out), per
message, and the functions that take most of them. The same code counts within about
0.5% from one run or checkout to another (string hashing is seeded alike; objects'
addresses, which some tables hash, still move), whatever the machine's load, so it
settles changes of a few percent that wall times cannot, and it says whether the loop's
work per message grows with the case (for the fat-tree cases the exponent of its
instructions in messages is printed). The compiled core only; a case takes about 50x
its time. Writes results/bench_simnet_loop.json.

``--parts`` splits each case's CPU time instead: the routes (the Router's calls), the
plans (the executor's ``_plan`` calls), the phase's result (``simulate``'s
``_phase_result``), each timed around its calls, and the rest (the message loop and the
set-up); the timers add about a microsecond a call. Writes results/bench_simnet_parts.json.

``--perf`` samples instead: each case runs under ``perf record -e cpu-clock`` (the
kernel's timer, which works where a virtual machine has no hardware counters) and the
table gives the share of the samples in each kind of work (the max-min sharing, timers
and flow phases, the executor, Python's dictionaries, allocation and the cyclic
collector, the interpreter, the kernel, the rest) and the busiest functions. Shares are
measured within one run, so a slow hour moves them little; at a big case they count
what cachegrind's simulated cache does not, the machine's real memory latency. Writes
results/bench_simnet_perf.json.

``--against DIR`` measures another checkout of the project (e.g. a ``git
worktree`` of an older commit) side by side: each repeat runs the case on
DIR's code, then on this tree's, so both see the same machine load, and the
table gains DIR's figures and the CPU-time speedup (``--against-cases`` limits
which cases also run there, e.g. to leave out one the older code cannot finish).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ring_case(n: int) -> tuple[int, float]:
    import simnet
    import topologies
    from workload.units import GIB

    g = topologies.ring(n, bandwidth_bytes_per_s=10e9, latency_s=5e-6)
    t = simnet.collective_time(g, "allreduce", "ring", GIB)
    return 2 * (n - 1) * n, t


def gpt3_case() -> tuple[int, float]:
    import simnet

    cfg = {
        "distributed": {"num_nodes": 384, "bandwidth_limit_gb_per_s": 150.0},
        "topology": {
            "type": "hierarchical",
            "num_nodes": 384,
            "group_size": 4,
            "intra_bandwidth_gb_per_s": 150.0,
            "inter_bandwidth_gb_per_s": 12.5,
            "intra_latency_us": 0.5,
            "inter_latency_us": 2.5,
        },
        "workload": {"name": "gpt3", "args": [96, 2]},
    }
    res = simnet.simulate(cfg, record_series=False)
    return sum(p.messages for p in res.phases), res.iteration_time_s


FAT_TREE_K = {1024: 16, 4096: 26, 16384: 42}  # the smallest k with k^3 / 4 >= ranks
SYNC_FAT_TREE_K = {256: 12, 1024: 16}  # (the fatsyncN cases: minutes from 1,024 ranks)


def fat_tree_config(ranks: int, k: int | None = None) -> dict:
    """The configuration of the fat-tree case of ``ranks`` ranks on a fat-tree of radix
    ``k`` (default: ``FAT_TREE_K[ranks]``)."""
    return {
        "distributed": {"num_nodes": ranks, "bandwidth_limit_gb_per_s": 25.0},
        "topology": {"type": "fat_tree", "k": k or FAT_TREE_K[ranks], "link_latency_us": 1.0},
        "workload": {"name": "resnet152", "world_size": ranks},
    }


def rail_config(ranks: int) -> dict:
    """The fat-tree case's workload on a rail-optimised cluster of 8-GPU nodes."""
    return {
        "distributed": {"num_nodes": ranks, "bandwidth_limit_gb_per_s": 25.0},
        "topology": {
            "type": "rail_optimised",
            "group_size": 8,
            "intra_bandwidth_gb_per_s": 300.0,
            "inter_bandwidth_gb_per_s": 25.0,
            "intra_latency_us": 0.1,
            "inter_latency_us": 1.0,
        },
        "workload": {"name": "resnet152", "world_size": ranks},
    }


def dragonfly_config(ranks: int) -> dict:
    """The fat-tree case's workload on a dragonfly of 256-endpoint groups."""
    return {
        "distributed": {"num_nodes": ranks, "bandwidth_limit_gb_per_s": 25.0},
        "topology": {
            "type": "dragonfly",
            "routers_per_group": 16,
            "endpoints_per_router": 16,
            "link_latency_us": 1.0,
        },
        "workload": {"name": "resnet152", "world_size": ranks},
    }


def host_config(ranks: int, k: int | None = None) -> dict:
    """The fat-tree case with a host's costs, as a calibrated run has them: a reduction
    cost (0.1 ns a byte reduced) and 1 us after each step of a collective."""
    cfg = fat_tree_config(ranks, k)
    cfg["collectives"] = {"gamma_s_per_byte": 1e-10, "step_latency_us": 1.0}
    return cfg


def sync_config(ranks: int) -> dict:
    """``host_config`` with collectives that progress only while their rank is inside an
    MPI call (``async_progress`` false), as a calibration of this machine's processor
    sets them: the gradient allreduces of a data-parallel step then all run in the
    final wait, together."""
    cfg = host_config(ranks, SYNC_FAT_TREE_K[ranks])
    cfg["collectives"]["async_progress"] = False
    return cfg


def switch_config(ranks: int) -> dict:
    """The fat-tree case's workload and links on one switch: no contention."""
    return {
        "distributed": {"num_nodes": ranks, "bandwidth_limit_gb_per_s": 25.0},
        "topology": {"type": "switch", "link_latency_us": 1.0},
        "workload": {"name": "resnet152", "world_size": ranks},
    }


def fat_tree_case(
    ranks: int, config: Callable[[int], dict] | None = None
) -> tuple[int, float, int, int | None]:
    """ResNet-152 data parallel (10 gradient allreduces of 21-26 MB, Rabenseifner at these
    sizes) on the first ``ranks`` endpoints of a fat-tree, 25 GB/s links, 1 us per hop,
    flows spread over the cores (ECMP): thousands of flows contend on the core links."""
    import inspect

    import simnet

    cfg = (config or fat_tree_config)(ranks)
    kw: dict = {"record_series": False}
    if "dense_matrices" in inspect.signature(simnet.simulate).parameters:
        kw["dense_matrices"] = False  # the times and sparse pairs only, as an API user
    res = simnet.simulate(cfg, **kw)
    # Max-min work: flow rates computed, and of those the new ones (the network's
    # counters; a checkout older than rates_changed has only the first), over the phases.
    nets = [p.timeline.net for p in res.phases]
    rated = sum(net.flows_rerated for net in nets)
    changed = None
    if all(hasattr(net, "rates_changed") for net in nets):
        changed = sum(net.rates_changed for net in nets)
    return sum(p.messages for p in res.phases), res.iteration_time_s, rated, changed


def plans_case(ranks: int, tables: bool = False) -> tuple[int, float]:
    """Every rank's plan of every ResNet-152 bucket's allreduce over ``ranks`` ranks, kept
    as the executor keeps them for the run: with ``tables``, one step table per schedule
    (``Schedule.rank_table``, what the simulator takes now), else a tuple per rank
    (``rank_flat``, what it took before step tables); returns (messages planned, 0.0)."""
    from workload.collectives import build_schedule
    from workload.models.resnet import RESNET152_BUCKETS

    messages = 0
    kept: list = []  # their memory counts
    for count in dict.fromkeys(RESNET152_BUCKETS):  # one schedule per size, as executors keep
        sched = build_schedule("allreduce", "rabenseifner", ranks, count)
        if tables:
            kept.append(sched.rank_table())
            messages += int(kept[-1].messages.sum())
            continue
        for r in range(ranks):
            kept.append(sched.rank_flat(r))
            messages += kept[-1][3]
    return messages, 0.0


CASES = {
    "ring64": lambda: ring_case(64),
    "ring256": lambda: ring_case(256),
    "ring1024": lambda: ring_case(1024),
    "gpt3_384": gpt3_case,
    "fat1024": lambda: fat_tree_case(1024),
    "fat4096": lambda: fat_tree_case(4096),
    "fat16384": lambda: fat_tree_case(16384),
    **{f"fathost{n}": functools.partial(fat_tree_case, n, host_config) for n in FAT_TREE_K},
    **{f"fatsync{n}": functools.partial(fat_tree_case, n, sync_config) for n in SYNC_FAT_TREE_K},
    **{f"rail{n}": functools.partial(fat_tree_case, n, rail_config) for n in FAT_TREE_K},
    **{f"fly{n}": functools.partial(fat_tree_case, n, dragonfly_config) for n in FAT_TREE_K},
    "switch1024": lambda: fat_tree_case(1024, switch_config),
    "switch4096": lambda: fat_tree_case(4096, switch_config),
    "switch16384": lambda: fat_tree_case(16384, switch_config),
    "plans4096": lambda: plans_case(4096),
    "plans16384": lambda: plans_case(16384),
    "tables4096": lambda: plans_case(4096, tables=True),
    "tables16384": lambda: plans_case(16384, tables=True),
}


DEFAULT_CASES = "ring64,ring256,ring1024,gpt3_384,fat1024,fat4096"


PARTS = {  # --parts: (module, class or None, function) timed around each call
    "routes": [
        ("topologies.routing", "Router", "path"),
        ("topologies.routing", "Router", "path_uncached"),
    ],
    "plans": [("simnet.executor", "SimExecutor", "_plan")],
    "result": [("simnet.simulate", None, "_phase_result")],
}


def _time_parts() -> dict[str, float]:
    """Wrap the functions of ``PARTS`` so that each call adds its CPU seconds to its
    part (a part's call made inside another's counts in the outer one only); returns the
    totals (filled in as the case runs)."""
    import importlib

    totals = dict.fromkeys(PARTS, 0.0)
    inside = [False]  # a timed call is running

    def timed(part: str, fn: Callable) -> Callable:
        def call(*args: object, **kw: object) -> object:
            if inside[0]:
                return fn(*args, **kw)
            inside[0] = True
            t = time.process_time()
            try:
                return fn(*args, **kw)
            finally:
                totals[part] += time.process_time() - t
                inside[0] = False

        return call

    for part, where in PARTS.items():
        for module, cls, name in where:
            owner = importlib.import_module(module)
            if cls is not None:
                owner = getattr(owner, cls)
            setattr(owner, name, timed(part, getattr(owner, name)))
    return totals


def run_one(name: str, parts: bool = False) -> dict:
    """Run one case in this process (imports included in neither time); with ``parts``,
    the CPU seconds of each of ``PARTS`` too."""
    import gc
    import resource

    import simnet  # noqa: F401  (import cost is not the simulator's)

    split = _time_parts() if parts else None
    w0, c0 = time.perf_counter(), time.process_time()
    msgs, sim_s, *rated = CASES[name]()
    # What the run leaves to the cyclic collector is its cost too (a sweep of runs in one
    # process pays it): collected inside the timing.
    gc.collect()
    return {
        "messages": msgs,
        "simulated_s": sim_s,
        "wall_s": time.perf_counter() - w0,
        "cpu_s": time.process_time() - c0,
        # Peak resident memory of the whole process (Linux: ru_maxrss in KiB), in bytes.
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "flow_rates_computed": rated[0] if rated else None,
        "flow_rates_changed": rated[1] if len(rated) > 1 else None,
        "parts_cpu_s": split,
        "code": str(Path(sys.modules["simnet"].__file__).resolve().parent.parent),
        # A checkout older than the compiled core runs Python only.
        "core": getattr(sys.modules.get("simnet._compiled"), "summary", lambda: "python")(),
        # Whether the objects were on huge pages (a checkout older than simnet.arenas: no).
        "huge_pages": getattr(sys.modules.get("simnet.arenas"), "status", lambda: "off")(),
    }


def _run_case(
    name: str,
    tree: Path,
    pure: bool = False,
    tool: tuple[str, ...] = (),
    huge_pages: bool = True,
    parts: bool = False,
    env: dict[str, str] | None = None,
) -> tuple[dict, str]:
    """Run one case in a fresh process on the code of ``tree`` (its Python core if
    ``pure``; object arenas on ordinary pages unless ``huge_pages``; ``env``: more
    environment), under ``tool`` (a command prefix) if any: its figures and its stderr."""
    from checkouts import last_json, run_on

    env = dict(env or {})
    if pure:
        env["COMMSIM_PURE_PYTHON"] = "1"
    if not huge_pages:
        env["COMMSIM_HUGE_PAGES"] = "0"
    args = ["--one", name] + (["--parts"] if parts else [])
    out = run_on(tree, Path(__file__).resolve(), args, env=env, tool=tool, timeout=None)
    return last_json(out, f"case {name} on {tree}"), out.stderr


REFERENCE_LOOP = 10_000_000


def reference_loop_s() -> float:
    """Seconds a fresh interpreter takes for ``REFERENCE_LOOP`` iterations of an empty
    Python loop: how fast the machine is at the time, for reading times of different
    runs (this shared machine's speed moves 2-5x from one hour to the next)."""
    code = (
        "import time\nt = time.perf_counter()\n"
        f"for _ in range({REFERENCE_LOOP}): pass\n"
        "print(time.perf_counter() - t)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    return float(out.stdout)


def write_results(out_path: str, kind: str, doc: dict) -> None:
    """Write a results file (``kind`` and the software versions first) and say so."""
    sys.path.insert(0, str(ROOT))  # run as a script, this file's directory is first
    from workload.results import versions, write_json

    write_json(out_path, {"kind": kind, "versions": versions(), **doc})
    print(f"wrote {out_path}")


def run_fresh(name: str, tree: Path, pure: bool = False, huge_pages: bool = True) -> dict:
    """Run one case in a fresh process on the code of ``tree`` (its Python core if ``pure``;
    see ``_run_case``)."""
    return _run_case(name, tree, pure, huge_pages=huge_pages)[0]


# Cachegrind's summary lines (on stderr): "I refs:", "D1 misses:" and "LL misses:" totals.
_COUNTS = {"instructions": r"I\s+refs:", "d1_misses": r"D1\s+misses:", "ll_misses": r"LL\s+misses:"}
LL_CACHE = "8388608,16,64"  # bytes, ways, line bytes
# Cycles charged per miss in the estimate of cycles (the usual rough weights of a
# first-level miss that hits the last level, and of a miss to memory).
D1_MISS_CYCLES = 10
LL_MISS_CYCLES = 100


def run_counted(name: str, tree: Path) -> dict:
    """Run one case in a fresh process on ``tree``'s code under cachegrind; the case's
    figures plus the whole process's instructions, L1 data and last-level misses."""
    with tempfile.TemporaryDirectory() as tmp:
        tool = (
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=yes",
            f"--LL={LL_CACHE}",
            f"--cachegrind-out-file={tmp}/cachegrind.out",
        )
        row, stderr = _run_case(name, tree, tool=tool)
    for key, label in _COUNTS.items():
        m = re.search(label + r"\s+([\d,]+)", stderr)
        if m is None:
            raise SystemExit(f"case {name}: no {label!r} in cachegrind's output")
        row[key] = int(m.group(1).replace(",", ""))
    row["est_cycles"] = (
        row["instructions"] + D1_MISS_CYCLES * row["d1_misses"] + LL_MISS_CYCLES * row["ll_misses"]
    )
    return row


def counted_rows(
    names: list[str],
    other: Path | None,
    head: str,
    run: Callable[[str, Path], dict],
    cells: Callable[[dict, dict | None], str],
) -> list[dict]:
    """Print ``head``, then run each case here and, with ``other``, there (its row's
    ``against``), printing its line as it comes: the case's name, then ``cells(row,
    against)``, and a note where the two simulated different times. The rows, in order."""
    print(head, flush=True)
    rows = []
    for name in names:
        row = {"case": name, **run(name, ROOT)}
        a = row["against"] = run(name, other) if other is not None else None
        line = f"{name:10s} {cells(row, a)}"
        if a is not None and a["simulated_s"] != row["simulated_s"]:
            line += f"  (simulated {a['simulated_s']!r} there)"
        rows.append(row)
        print(line, flush=True)
    return rows


def cachegrind_table(names: list[str], other: Path | None, out_path: str) -> None:
    """``--cachegrind``: the counts of each case, here and on ``other``."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--cachegrind needs valgrind (apt install valgrind)")
    head = f"{'case':10s} {'messages':>10s} {'instr (G)':>10s} {'instr/msg':>10s}"
    head += f" {'D1 miss (M)':>12s} {'LL miss (M)':>12s} {'est cyc (G)':>12s}"
    if other is not None:
        head += f" {'vs instr':>9s} {'vs D1':>7s} {'vs LL':>7s} {'vs cyc':>7s}"

    def cells(row: dict, a: dict | None) -> str:
        line = (
            f"{row['messages']:10d} {row['instructions'] / 1e9:10.2f} "
            f"{row['instructions'] / row['messages']:10.0f} {row['d1_misses'] / 1e6:12.1f} "
            f"{row['ll_misses'] / 1e6:12.1f} {row['est_cycles'] / 1e9:12.2f}"
        )
        if a is not None:
            widths = zip((*_COUNTS, "est_cycles"), (9, 7, 7, 7), strict=True)
            line += "".join(f" {row[k] / a[k]:{w}.3f}" for k, w in widths)
        return line

    rows = counted_rows(names, other, head, run_counted, cells)
    if other is not None:
        print(f"vs: this tree's counts over {other}'s (below 1: fewer here)")
    print(
        f"est cyc: instructions + {D1_MISS_CYCLES} x D1 misses + {LL_MISS_CYCLES} x LL misses, "
        "a deterministic stand-in for time that counts memory stalls"
    )
    growth = fat_tree_growth(rows, "est_cycles", "estimated cycles")
    write_results(
        out_path,
        "bench-simnet-cachegrind",
        {
            "ll_cache": LL_CACHE,
            "est_cycles": f"instructions + {D1_MISS_CYCLES} d1_misses + {LL_MISS_CYCLES} ll_misses",
            "fat_tree_est_cycles_exponent": growth,
            "against": str(other) if other else None,
            "rows": rows,
        },
    )


# --loop: the network's entry points from simpy (Cython's Python-callable wrappers of its
# wake-up and its max-min pass), between which callgrind counts: the message loop.
LOOP_ENTRIES = (
    "__pyx_pw_6simnet_7network_11FlowNetwork_*_on_wake",
    "__pyx_pw_6simnet_7network_11FlowNetwork_*_on_flush",
)
LOOP_TOP = 10  # functions listed per case


def parse_callgrind_annotate(text: str) -> dict[str, int]:
    """Instructions by function of ``callgrind_annotate``'s table (its lines ``Ir (pct)
    file:function [object]``), summed over the files a function's lines come from (an
    inlined header's count is listed apart)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S+)", line)
        if m is None or ":" not in m.group(2):
            continue
        # (callgrind marks a function's recursion depth: f'2 is f called within f)
        fn = re.sub(r"'\d+$", "", m.group(2).rsplit(":", 1)[1])
        out[fn] = out.get(fn, 0) + int(m.group(1).replace(",", ""))
    return out


def run_loop_counted(name: str, tree: Path) -> dict:
    """Run one case on ``tree``'s code under callgrind, counting only inside the network's
    wake-ups and max-min passes (the message loop, the executor's work they call
    included; the set-up, simpy's own scheduling and the result are left out): the
    case's figures plus the loop's instructions and its busiest functions'."""
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/callgrind.out"
        tool = (
            "valgrind",
            "--tool=callgrind",
            *[f"--toggle-collect={e}" for e in LOOP_ENTRIES],
            f"--callgrind-out-file={out}",
        )
        # One string hash for both checkouts: a dict's probes, hence its instructions,
        # move with it (by about 0.3% of the loop's count from one seed to another).
        row, _ = _run_case(name, tree, tool=tool, env={"PYTHONHASHSEED": "0"})
        ann = subprocess.run(
            ["callgrind_annotate", out], capture_output=True, text=True, check=False, timeout=600
        )
    if ann.returncode != 0:
        raise SystemExit(
            f"case {name} on {tree}: callgrind_annotate failed ({ann.returncode}): "
            f"{ann.stderr.strip()[-2000:]}"
        )
    by_fn = parse_callgrind_annotate(ann.stdout)
    total = re.search(r"^Ir\s*\n-+\n\s*([\d,]+)", ann.stdout, re.M)
    counted = int(total.group(1).replace(",", "")) if total else sum(by_fn.values())
    row["loop_instructions"] = counted
    if not row["loop_instructions"]:
        raise SystemExit(
            f"case {name} on {tree}: callgrind counted nothing in the loop (the compiled "
            "core's entry points were not entered: is the core compiled?)"
        )
    top = sorted(by_fn.items(), key=lambda kv: -kv[1])[:LOOP_TOP]
    row["loop_top"] = [{"function": _short_symbol(f), "instructions": n} for f, n in top]
    return row


def loop_table(names: list[str], other: Path | None, out_path: str) -> None:
    """``--loop``: the message loop's instructions per message of each case, here and on
    ``other``, and its busiest functions."""
    for tool in ("valgrind", "callgrind_annotate"):
        if shutil.which(tool) is None:
            raise SystemExit(f"--loop needs {tool} (apt install valgrind)")
    head = f"{'case':10s} {'messages':>10s} {'loop instr (G)':>15s} {'instr/msg':>10s}"
    if other is not None:
        head += f" {'vs instr/msg':>13s} {'ratio':>6s}"

    def cells(row: dict, a: dict | None) -> str:
        per = row["loop_instructions"] / row["messages"]
        line = f"{row['messages']:10d} {row['loop_instructions'] / 1e9:15.3f} {per:10.0f}"
        if a is not None:
            theirs = a["loop_instructions"] / a["messages"]
            line += f" {theirs:13.0f} {per / theirs:6.3f}"
        return line

    rows = counted_rows(names, other, head, run_loop_counted, cells)
    for row in rows:
        print(f"{row['case']}, instructions per message by function:")
        for t in row["loop_top"]:
            print(f"  {t['instructions'] / row['messages']:8.0f}  {t['function']}")
    if other is not None:
        print(f"ratio: this tree's instructions per message over {other}'s (below 1: fewer here)")
    growth = fat_tree_growth(rows, "loop_instructions", "loop instructions")
    write_results(
        out_path,
        "bench-simnet-loop",
        {
            "counted": "instructions inside FlowNetwork._on_wake and _on_flush (callgrind)",
            "fat_tree_loop_instructions_exponent": growth,
            "against": str(other) if other else None,
            "rows": rows,
        },
    )


# --perf: each sampled function's kind of work, by the first rule that matches its
# object file and symbol (order matters: the network's flow phases before its max-min).
PERF_KINDS = (
    (
        "max-min sharing",
        r"network\.cpython.*(_flush|_water_fill|_sum_load|_set_load|_unlist|_apply_rate|_begin)\b",
    ),
    ("timers and flow phases", r"network\.cpython"),
    ("executor", r"executor\.cpython"),
    (
        "dictionaries",
        r"libpython.*\b(_?Py_?[Dd]ict\w*|dict\w*|insertdict|\w*keys_lookup\w*|lookdict\w*)$",
    ),
    (
        "allocation and collector",
        r"libpython.*\b(\w*Malloc|\w*Free|\w*Realloc|PyObject_(?:IS_)?GC\w*|gc_\w+|visit_\w+|"
        r"\w*dealloc|tuple_alloc|Py\w*_New|_Py_NewReference|PyType_GenericAlloc|\w*_alloc)$",
    ),
    ("interpreter", r"libpython"),
    ("kernel", r"\[kernel"),
)
PERF_TOP = 12  # functions listed per case


def perf_kind(dso: str, symbol: str) -> str:
    """The kind of work (a name of ``PERF_KINDS``, or "other") of a sampled function."""
    where = f"{dso} {symbol}"
    for kind, pattern in PERF_KINDS:
        if re.search(pattern, where):
            return kind
    return "other"


def parse_perf_report(text: str) -> list[tuple[float, str, str]]:
    """(percent of the samples, object file, symbol) of each line of ``perf report
    --stdio --sort dso,sym``, in its order (the busiest first)."""
    out = []
    for line in text.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(.+?)\s*$", line)
        if m:
            out.append((float(m.group(1)), m.group(2), m.group(3)))
    return out


def run_sampled(name: str, tree: Path) -> dict:
    """Run one case in a fresh process on ``tree``'s code under ``perf record``; the
    case's figures plus the share of the samples (percent) by kind and its busiest
    functions."""
    with tempfile.TemporaryDirectory() as tmp:
        data = f"{tmp}/perf.data"
        tool = ("perf", "record", "-q", "-e", "cpu-clock", "-F", "499", "-o", data, "--")
        row, _ = _run_case(name, tree, tool=tool)
        out = subprocess.run(
            ["perf", "report", "-i", data, "--stdio", "--sort", "dso,sym"],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
    lines = parse_perf_report(out.stdout)
    if not lines:
        raise SystemExit(f"case {name}: perf report gave no samples:\n{out.stderr[-2000:]}")
    sampled = [
        {"pct": pct, "dso": dso, "symbol": sym, "kind": perf_kind(dso, sym)}
        for pct, dso, sym in lines
    ]
    kinds = dict.fromkeys([k for k, _ in PERF_KINDS] + ["other"], 0.0)
    for t in sampled:
        kinds[t["kind"]] += t["pct"]
    row["perf_kinds_pct"] = kinds
    row["perf_top"] = sampled[:PERF_TOP]
    return row


def _short_symbol(symbol: str) -> str:
    """A Cython function's name without its mangling: __pyx_f_6simnet_7network_11FlowNetwork__flush
    -> network.FlowNetwork._flush (other symbols as they are)."""
    m = re.match(r"__pyx_(?:f|pw|pf|tp_\w+?)_6simnet_(.*)$", symbol)
    if not m:
        return symbol
    rest, parts = m.group(1), []
    # Each name of the path is its length, then itself, then "_"; the last one is bare.
    while (n := re.match(r"(\d+)(.*)$", rest)) and len(n.group(2)) > int(n.group(1)):
        k = int(n.group(1))
        parts.append(n.group(2)[:k])
        rest = n.group(2)[k + 1 :]
    return ".".join([*parts, rest] if rest else parts)


def perf_table(names: list[str], out_path: str) -> None:
    """``--perf``: each case's samples by kind of work, and its busiest functions."""
    if shutil.which("perf") is None:
        raise SystemExit("--perf needs perf (apt install linux-perf, or linux-tools)")
    kinds = [k for k, _ in PERF_KINDS] + ["other"]
    print(f"{'case':10s} {'cpu (s)':>8s} " + " ".join(f"{k:>{max(len(k), 6)}s}" for k in kinds))
    rows = []
    for name in names:
        row = {"case": name, **run_sampled(name, ROOT)}
        rows.append(row)
        shares = row["perf_kinds_pct"]
        print(
            f"{name:10s} {row['cpu_s']:8.2f} "
            + " ".join(f"{shares[k]:{max(len(k), 6) - 1}.1f}%" for k in kinds),
            flush=True,
        )
    print("percent of the CPU-clock samples (499 a second) of the case's whole process")
    for row in rows:
        print(f"{row['case']}, busiest functions:")
        for t in row["perf_top"]:
            print(f"  {t['pct']:5.1f}%  {_short_symbol(t['symbol'])}  ({t['kind']})")
    write_results(out_path, "bench-simnet-perf", {"rows": rows})


def summarise(runs: list[dict]) -> dict:
    wall = statistics.median(r["wall_s"] for r in runs)
    # The least disturbed run: on a shared machine the other runs' extra time is load.
    wall_min = min(r["wall_s"] for r in runs)
    cpu = statistics.median(r["cpu_s"] for r in runs)
    msgs = runs[0]["messages"]
    return {
        "messages": msgs,
        "simulated_s": runs[0]["simulated_s"],
        "wall_s": wall,
        "wall_min_s": wall_min,
        "cpu_s": cpu,
        "messages_per_cpu_s": msgs / cpu,
        "messages_per_wall_s": msgs / wall,
        "peak_rss_bytes": max(r.get("peak_rss_bytes", 0) for r in runs),
        "flow_rates_computed": runs[0].get("flow_rates_computed"),
        "flow_rates_changed": runs[0].get("flow_rates_changed"),
        "code": runs[0]["code"],
        "core": runs[0]["core"],
        "huge_pages": runs[0].get("huge_pages", "off"),
    }


def fitted_exponent(rows: list[dict], key: str = "wall_s") -> float | None:
    """The exponent b of ``key`` = a messages^b fitted to ``rows`` (None for fewer than 2)."""
    if len(rows) < 2:
        return None
    import numpy as np

    x = np.log([r["messages"] for r in rows])
    y = np.log([r[key] for r in rows])
    return float(np.polyfit(x, y, 1)[0])


def fat_families(rows: list[dict]) -> dict[str, list[dict]]:
    """The fat-tree rows of ``rows`` by family, the case's name without its rank count
    ("fat": fatN, "fathost", "fatsync"): a growth is fitted within one family, not across
    workloads of equal message counts."""
    out: dict[str, list[dict]] = {}
    for r in rows:
        if r["case"].startswith("fat"):
            out.setdefault(r["case"].rstrip("0123456789"), []).append(r)
    return out


def family_label(family: str) -> str:
    """How the growth lines name a family of fat-tree cases."""
    return "fat-tree cases" if family == "fat" else f"{family}N cases"


def fat_tree_growth(rows: list[dict], key: str, what: str) -> float | None:
    """The exponent of ``key`` in messages over each family of fat-tree cases of ``rows``
    (see ``fat_families``), printed as the growth of ``what``; returns the fatN cases'
    (None for fewer than two)."""
    first = None
    for family, members in fat_families(rows).items():
        growth = fitted_exponent(members, key)
        if growth is not None:
            print(
                f"{family_label(family)}: {what} grow as messages^{growth:.2f} "
                "(least squares on logs; 1 is linear)"
            )
        if family == "fat":
            first = growth
    return first


def contention_lines(rows: list[dict]) -> list[str]:
    """For each fatN row with a switchN row beside it: its CPU microseconds per message,
    those of the same workload on one switch, and the difference (the max-min sharing's
    cost per message)."""
    by_case = {r["case"]: r for r in rows}
    out = []
    for r in rows:
        alone = by_case.get("switch" + r["case"][3:]) if r["case"].startswith("fat") else None
        if alone:
            us, base = (1e6 * x["cpu_s"] / x["messages"] for x in (r, alone))
            out.append(
                f"{r['case']}: {us:.2f} CPU us per message, {base:.2f} of them on one switch "
                f"({alone['case']}, no contention), {us - base:.2f} the max-min sharing adds"
            )
    return out


def parts_table(names: list[str], repeats: int, out_path: str) -> None:
    """``--parts``: each case's CPU seconds split into ``PARTS`` and the rest (medians
    over ``repeats`` fresh runs)."""
    head = f"{'case':10s} {'messages':>10s} {'cpu (s)':>8s}"
    head += "".join(f" {p + ' (s)':>12s}" for p in PARTS) + f" {'rest (s)':>9s}"
    print(head, flush=True)
    rows = []
    for name in names:
        runs = [_run_case(name, ROOT, parts=True)[0] for _ in range(repeats)]
        row = {
            "case": name,
            "messages": runs[0]["messages"],
            "cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "parts_cpu_s": {p: statistics.median(r["parts_cpu_s"][p] for r in runs) for p in PARTS},
        }
        row["rest_cpu_s"] = row["cpu_s"] - sum(row["parts_cpu_s"].values())
        cpu = row["cpu_s"]
        line = f"{name:10s} {row['messages']:10d} {cpu:8.2f}"
        for p in PARTS:
            t = row["parts_cpu_s"][p]
            line += f" {t:6.2f} ({t / cpu:3.0%})"
        line += f" {row['rest_cpu_s']:9.2f}"
        rows.append(row)
        print(line, flush=True)
    print(
        "rest: the message loop and the set-up; each part is timed around its calls "
        "(about a microsecond more a call)"
    )
    write_results(out_path, "bench-simnet-parts", {"repeats": repeats, "rows": rows})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=DEFAULT_CASES, help=f"of {', '.join(CASES)}")
    ap.add_argument(
        "--against-cases",
        help="with --against: only these cases also on the other checkout (default: all)",
    )
    ap.add_argument("--repeats", type=int, default=1)
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--against", type=Path, help="another checkout, measured side by side")
    what.add_argument(
        "--against-pure", action="store_true", help="this tree's pure-Python core, side by side"
    )
    what.add_argument(
        "--against-no-huge-pages",
        action="store_true",
        help="this tree with its object arenas on ordinary pages, side by side",
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument(
        "--cachegrind",
        action="store_true",
        help="count instructions and cache misses under valgrind instead of timing",
    )
    mode.add_argument(
        "--loop",
        action="store_true",
        help="count the message loop's instructions per message under callgrind instead of "
        "timing (deterministic; the compiled core only)",
    )
    mode.add_argument(
        "--parts",
        action="store_true",
        help="split each case's CPU time into routes, plans, result and the rest",
    )
    mode.add_argument(
        "--perf",
        action="store_true",
        help="sample each case under perf and split its time by kind of work",
    )
    ap.add_argument("--out", help="results file (default: results/bench_simnet.json)")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: one case, JSON on stdout
    ns = ap.parse_args()
    if ns.one:
        print(json.dumps(run_one(ns.one, ns.parts)))
        return
    names = ns.cases.split(",")
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(f"--cases: unknown {unknown}; known: {', '.join(CASES)}")
    other = ns.against.resolve() if ns.against else None
    if other is not None and not (other / "simnet" / "__init__.py").is_file():
        raise SystemExit(f"--against {other}: not a checkout of this project (no simnet/)")
    if ns.cachegrind:
        if ns.against_pure or ns.against_no_huge_pages:
            raise SystemExit(
                "--cachegrind compares with --against DIR, not --against-pure or "
                "--against-no-huge-pages (cachegrind does not model address translation)"
            )
        cachegrind_table(names, other, ns.out or "results/bench_simnet_cachegrind.json")
        return
    if ns.loop:
        if ns.against_pure or ns.against_no_huge_pages:
            raise SystemExit(
                "--loop compares with --against DIR only (it counts the compiled core)"
            )
        loop_table(names, other, ns.out or "results/bench_simnet_loop.json")
        return
    versus = other is not None or ns.against_pure or ns.against_no_huge_pages
    if (ns.perf or ns.parts) and versus:
        flag = "--perf" if ns.perf else "--parts"
        raise SystemExit(f"{flag} measures this tree's cases; it compares with nothing")
    if ns.perf:
        perf_table(names, ns.out or "results/bench_simnet_perf.json")
        return
    if ns.parts:
        parts_table(names, ns.repeats, ns.out or "results/bench_simnet_parts.json")
        return
    ns.out = ns.out or "results/bench_simnet.json"
    head = (
        f"{'case':10s} {'messages':>10s} {'simulated (s)':>14s} {'wall (s)':>9s} "
        f"{'cpu (s)':>8s} {'msgs/cpu-s':>11s} {'msgs/wall-s':>11s} {'peak GB':>8s}"
    )
    both = set(ns.against_cases.split(",")) if ns.against_cases else set(names)
    if versus:
        head += f" {'vs cpu (s)':>11s} {'vs msgs/cpu-s':>14s} {'vs peak GB':>10s} {'speedup':>8s}"
    # Repeats go round the cases (every case once, then again), so that a machine whose
    # speed drifts over minutes slows every case alike, not the last ones.
    mine: dict[str, list[dict]] = {name: [] for name in names}
    theirs: dict[str, list[dict]] = {name: [] for name in names}
    loop_before = reference_loop_s()
    for rep in range(ns.repeats):
        for name in names:
            if name in both and other is not None:
                theirs[name].append(run_fresh(name, other))
            elif name in both and ns.against_pure:
                theirs[name].append(run_fresh(name, ROOT, pure=True))
            elif name in both and ns.against_no_huge_pages:
                theirs[name].append(run_fresh(name, ROOT, huge_pages=False))
            mine[name].append(run_fresh(name, ROOT))
            if ns.repeats > 1:
                print(
                    f"  round {rep + 1}/{ns.repeats}: {name} {mine[name][-1]['wall_s']:.2f} s",
                    file=sys.stderr,
                    flush=True,
                )
    loop_after = reference_loop_s()
    print(head)
    rows = []
    for name in names:
        row = {"case": name, **summarise(mine[name])}
        line = (
            f"{name:10s} {row['messages']:10d} {row['simulated_s']:14.6f} {row['wall_s']:9.2f} "
            f"{row['cpu_s']:8.2f} {row['messages_per_cpu_s']:11.0f} "
            f"{row['messages_per_wall_s']:11.0f} {row['peak_rss_bytes'] / 1e9:8.2f}"
        )
        if versus and theirs[name]:
            row["against"] = summarise(theirs[name])
            a = row["against"]
            row["cpu_speedup"] = a["cpu_s"] / row["cpu_s"]
            row["same_simulated_s"] = a["simulated_s"] == row["simulated_s"]
            line += (
                f" {a['cpu_s']:11.2f} {a['messages_per_cpu_s']:14.0f} "
                f"{a['peak_rss_bytes'] / 1e9:10.2f} {row['cpu_speedup']:7.2f}x"
            )
            if not row["same_simulated_s"]:
                line += f"  (simulated {a['simulated_s']!r} there)"
        rows.append(row)
        print(line, flush=True)

    cores = f"core: {rows[0]['core']}, huge pages {rows[0]['huge_pages']}" if rows else ""
    compared = [r for r in rows if "against" in r]
    if compared:
        a = compared[0]["against"]
        cores += f"; vs: {a['core']}, huge pages {a['huge_pages']}"
    print(cores)
    for r in rows:
        if r.get("flow_rates_computed"):
            per = r["flow_rates_computed"] / r["messages"]
            there = (r.get("against") or {}).get("flow_rates_computed")
            vs = f" (vs {there / r['messages']:.2f})" if there else ""
            changed = r.get("flow_rates_changed")
            new = f", {changed / r['messages']:.2f} of them new" if changed is not None else ""
            print(f"{r['case']}: {per:.2f} flow rates computed per message{new}{vs}")
    for line in contention_lines(rows):
        print(line)
    wall_growth = None  # the fatN cases' (the JSON's figure), None without two of them
    for family, fat in fat_families(rows).items():
        growth = fitted_exponent(fat)
        if growth is None:
            continue
        if family == "fat":
            wall_growth = growth
        print(
            f"{family_label(family)}: wall time grows as messages^{growth:.2f} "
            "(least squares on log wall vs log messages; 1 is linear)"
        )
        if ns.repeats > 1:
            print(
                f"  as messages^{fitted_exponent(fat, 'wall_min_s'):.2f} on each case's fastest run"
            )
    print(
        f"machine speed: a {REFERENCE_LOOP:,}-iteration empty Python loop took "
        f"{loop_before:.3f} s before the runs and {loop_after:.3f} s after"
    )
    write_results(
        ns.out,
        "bench-simnet",
        {
            "machine": platform.processor(),
            "cpus": os.cpu_count(),
            "repeats": ns.repeats,
            "reference_loop_s": {"before": loop_before, "after": loop_after},
            "fat_tree_wall_exponent": wall_growth,
            "against": "pure-python core" if ns.against_pure else (str(other) if other else None),
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
