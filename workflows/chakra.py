"""``python -m simnet chakra``: a configuration's workload as a Chakra trace set or a GOAL
schedule, and a summary of a trace set.

    python -m simnet chakra export --config CFG --out DIR [--prefix trace] [--goal]
    python -m simnet chakra goal --config CFG --out FILE.goal
    python -m simnet chakra show DIR

A trace set is simulated with ``"workload": {"name": "chakra", "flags": {"trace_dir":
DIR}, "world_size": P}`` and replayed over MPI with ``mpirun -n P python -m
proxies.chakra --trace-dir DIR``.
"""

from __future__ import annotations

import argparse
import glob
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from simnet.config import ConfigError, load_config
from simnet.progress import Progress, live_progress
from simnet.simulate import build_policy, build_workload
from workload.brief_argparse import BriefParser
from workload.chakra_et import COMM_GROUP_FILE, ChakraError, export_trace_set, read_trace_set
from workload.goal import write_goal
from workload.ops import Collective, Recv, Send, call_bytes
from workload.program import Phase, Workload
from workload.results import (
    lock_output_dir,
    mark_finished,
    mark_unfinished,
    output_dir_problem,
    output_file_problem,
    prefix_problem,
    write_json,
)

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    p = BriefParser(prog="python -m simnet chakra", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    e = sub.add_parser("export", help="write the workload as a Chakra trace set")
    e.add_argument("--config", default="config.json", help="configuration file (JSON)")
    e.add_argument("--out", required=True, help="directory for <prefix>.<rank>.et")
    e.add_argument("--prefix", default="trace", help="file prefix (default trace)")
    e.add_argument("--goal", action="store_true", help="also write <prefix>.goal")
    g = sub.add_parser("goal", help="write the point-to-point expansion as GOAL")
    g.add_argument("--config", default="config.json", help="configuration file (JSON)")
    g.add_argument("--out", required=True, help="the .goal file to write")
    s = sub.add_parser("show", help="summarise a trace set")
    s.add_argument("dir", help="directory of the trace set")
    return p


def _workload(config: str) -> tuple[Workload, object]:
    cfg = load_config(config)
    if cfg.jobs:
        raise ConfigError("jobs: export one job at a time (a configuration without jobs)")
    return build_workload(cfg), cfg


def _progress(what: str, total: int):
    """``tick(rank)`` after each rank: "what: rank r/total" as a run's progress is shown
    (``simnet.progress``), the last rank's always, ending the line."""
    shown = Progress(live_progress())

    def tick(rank: int) -> None:
        shown(f"{what}: rank {rank + 1}/{total}")
        if rank == total - 1:
            shown.end()

    return tick


CALL_BYTES_DEFINITION = (
    "call bytes, as the proxies count them: a send's or receive's message, the vector of "
    "an allreduce, bcast or reduce, a rank's contribution to an allgather, the whole input "
    "of a reduce-scatter, and of an alltoall the bytes to the other ranks ((p - 1) / p of "
    "its nodes' comm_size, which is the whole input)"
)


def summary(workload: Workload) -> dict:
    """Operation counts and call bytes per kind over every rank and phase (see
    ``CALL_BYTES_DEFINITION``: an alltoall's are not its nodes' comm_size)."""
    ops: Counter[str] = Counter()
    nbytes: Counter[str] = Counter()
    for phase in workload.phases:
        for rank in range(workload.world_size):
            for op in phase.program(rank):
                kind = op.op if isinstance(op, Collective) else type(op).__name__.lower()
                ops[kind] += 1
                if isinstance(op, (Send, Recv, Collective)):
                    nbytes[kind] += call_bytes(op, len(workload.group_of(op.group, rank)))
    return {
        "ops": dict(ops),
        "call_bytes": dict(nbytes),
        "call_bytes_definition": CALL_BYTES_DEFINITION,
    }


def _print_summary(title: str, doc: dict) -> None:
    print(title)
    for kind, n in sorted(doc["ops"].items()):
        b = doc["call_bytes"].get(kind)
        print(f"  {kind:<16} {n:>10,} operations" + (f"  {b / 1e9:12.6f} GB" if b else ""))
    if doc["call_bytes"]:
        # (an alltoall's figure is not the sum of its nodes' comm_size: say which it is)
        print(f"  (GB: {doc['call_bytes_definition']})")


def _sizes(groups: list) -> str:
    """``4``, or ``2-4`` when the groups of a kind differ in size."""
    sizes = sorted({len(g) for g in groups})
    return str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"


def export_files_problem(out: Path, prefix: str, world_size: int, goal: bool) -> str | None:
    """Why the set's files cannot all be written into ``out``, or None: checked before
    the first file is written, so that a refused export leaves no partial set."""
    names = [f"{prefix}.{rank}.et" for rank in range(world_size)]
    names += [COMM_GROUP_FILE, f"{prefix}.export.json", f"{prefix}.goal"]
    # (An earlier set's rank file that this export would remove counts too.)
    olds = [p.name for p in out.glob(f"{glob.escape(prefix)}.*.et")]
    for name in names + olds:
        if (out / name).is_dir():
            return f"{out / name} is a folder: remove it or choose another --out"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    problem = None
    if ns.action == "export":
        problem = (
            prefix_problem(ns.prefix)
            or output_dir_problem(ns.out, "--out")
            or lock_output_dir(ns.out, "--out")  # (held until the set is written)
        )
    elif ns.action == "goal":
        problem = output_file_problem(ns.out, "--out")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if ns.action == "show":
            traces = read_trace_set(Path(ns.dir))
            phases = [
                Phase(name, lambda r, name=name: traces.programs[name][r]) for name in traces.phases
            ]
            w = Workload(traces.model, traces.world_size, {}, traces.groups, phases)
            from workload.models.chakra import trace_set_said

            _print_summary(
                f"{traces.source}: {trace_set_said(traces)}, {traces.world_size} ranks, "
                f"phases {', '.join(traces.phases)}, process groups "
                + ", ".join(
                    f"{k}: {len(v)} of {_sizes(v)} ranks" for k, v in sorted(traces.groups.items())
                ),
                summary(w),
            )
            return 0
        workload, cfg = _workload(ns.config)
        if ns.action == "export":
            out = Path(ns.out)
            others = sorted({p.name.rsplit(".", 2)[0] for p in out.glob("*.*.et")} - {ns.prefix})
            if others:
                # A folder holds one set: comm_group.json is the set's, not the prefix's,
                # and would be replaced under the other set's rank files.
                raise ChakraError(
                    f"{out} holds the trace set {others[0]!r} (its {others[0]}.<rank>.et and "
                    f"{COMM_GROUP_FILE}); a folder holds one set: export {ns.prefix!r} into "
                    f"another folder, or remove that set first"
                )
            problem = export_files_problem(out, ns.prefix, workload.world_size, ns.goal)
            if problem:
                raise ChakraError(problem)
            # Until the set is whole, the folder says so (and a replay refuses it): an
            # interrupted export would leave new rank files beside an earlier set's.
            mark_unfinished(out, "python -m simnet chakra export")
            files = export_trace_set(
                workload, out, ns.prefix, _progress("writing traces", workload.world_size)
            )
            doc = {
                "kind": "chakra-export",
                "config": str(ns.config),
                "model": workload.model,
                # (messages relative to the model's full size; null: unknown, a replayed
                # set that did not record its own)
                "scale": workload.scale,
                "world_size": workload.world_size,
                "phases": [ph.name for ph in workload.phases],
                "files": [f.name for f in files],
                **summary(workload),
            }
            if ns.goal:
                goal_path = out / f"{ns.prefix}.goal"
                doc["goal"] = write_goal(
                    workload,
                    goal_path,
                    _chooser(cfg),
                    _progress("writing GOAL", workload.world_size),
                    **_order(cfg),
                )
                files.append(goal_path)
            write_json(out / f"{ns.prefix}.export.json", doc)
            # An earlier, larger set's rank files (and GOAL file) would read as this set's.
            written = {f.name for f in files}
            for old in out.glob(f"{glob.escape(ns.prefix)}.*.et"):
                rank = old.name[len(ns.prefix) + 1 : -len(".et")]
                if rank.isdigit() and old.name not in written:
                    old.unlink()
            if not ns.goal:
                (out / f"{ns.prefix}.goal").unlink(missing_ok=True)
            mark_finished(out)
            size = sum(f.stat().st_size for f in files if f.suffix != ".goal")
            goal_note = ""
            if ns.goal:
                goal_size = (out / f"{ns.prefix}.goal").stat().st_size
                goal_note = f", and the GOAL schedule {ns.prefix}.goal ({goal_size / 1e6:.1f} MB)"
            scale = "unknown" if workload.scale is None else f"{workload.scale:g}"
            _print_summary(
                f"wrote {workload.world_size} Chakra traces of {workload.model} (message "
                f"scale {scale}) and comm_group.json to {out} ({size / 1e6:.1f} MB){goal_note}",
                doc,
            )
            return 0
        counts = write_goal(
            workload,
            Path(ns.out),
            _chooser(cfg),
            _progress("writing GOAL", workload.world_size),
            **_order(cfg),
        )
        print(
            f"wrote {ns.out}: {workload.world_size} ranks, {counts['sends']:,} sends, "
            f"{counts['recvs']:,} receives, {counts['calcs']:,} calcs, "
            f"{counts['bytes'] / 1e9:.6f} GB sent"
        )
        return 0
    except (ConfigError, ChakraError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE


def _order(cfg) -> dict:
    """write_goal's library and stream order, as the configuration gives them."""
    return {
        "library": cfg.collectives.library or "auto",
        "stream_order": cfg.collectives.stream_order,
    }


def _chooser(cfg):
    policy = build_policy(cfg)
    # (params without the algorithm: NCCL rings and trees are exported step by step, as a
    # trace holds each message and no delay a stream would add after it)
    return lambda op, p: (policy.choose(op, p), policy.params(p))
