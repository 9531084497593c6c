"""Command line of every proxy: ``mpirun -n P python -m proxies.<model> [args]``.

Order matters: arguments and the process layout are checked before MPI is
initialised (a bad world size gives one line from rank 0 and exit code 2 on
every rank, no hang), then MPI settings are applied, then MPI starts.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import sys
import time
from collections.abc import Sequence

from workload.models import MODELS, Model, get_model
from workload.program import BuildOptions, LayoutError, Workload

from .launch import REFERENCE_THREAD_LEVEL, THREAD_LEVELS, launch_info, prepare_mpi

EXIT_USAGE = 2
DEFAULT_TIMEOUT_S = 300.0


def build_parser(model: Model) -> argparse.ArgumentParser:
    usage_args = " ".join(f"[{a.name}={a.default}]" for a in model.args)
    p = argparse.ArgumentParser(
        prog=f"mpirun -n P python -m proxies.{model.name}",
        description=f"{model.description}. Positional arguments as the reference: {usage_args}",
    )
    for a in model.args:
        p.add_argument(
            a.name, type=int, nargs="?", default=None, help=f"{a.help} (default {a.default})"
        )
    for a in model.flags:
        p.add_argument(
            "--" + a.name.replace("_", "-"),
            dest=a.name,
            type=int,
            default=None,
            metavar="N",
            help=a.help,
        )
    g = p.add_argument_group("iterations")
    g.add_argument(
        "--iters",
        type=int,
        default=None,
        metavar="N",
        help=f"timed iterations (default {model.default_runs}, sized for a 2-core "
        f"machine; the reference runs {model.reference_runs})",
    )
    g.add_argument(
        "--warmup",
        type=int,
        default=None,
        metavar="N",
        help=f"untimed warm-up iterations (default {model.default_warmup}; "
        f"reference {model.reference_warmup})",
    )
    g.add_argument(
        "--reference-counts",
        action="store_true",
        help=f"use the reference's own counts ({model.reference_warmup} warm-up, "
        f"{model.reference_runs} timed)",
    )
    g = p.add_argument_group("workload")
    g.add_argument(
        "--scale",
        type=float,
        default=1.0,
        metavar="F",
        help="multiply every message size by F (whole elements, at least 1)",
    )
    g.add_argument(
        "--compute",
        choices=("sleep", "spin", "none"),
        default="sleep",
        help="emulated compute: sleep (the reference), spin (busy), none",
    )
    g.add_argument(
        "--per-tensor",
        action="store_true",
        help="one gradient message per tensor instead of aggregated messages",
    )
    g.add_argument(
        "--fix-quirks",
        action="store_true",
        help="repair the reference's quirks instead of reproducing them",
    )
    g.add_argument(
        "--algorithm",
        default=None,
        metavar="NAME",
        help="run every collective with this project schedule (e.g. ring) "
        "instead of the MPI library's own",
    )
    add_mpi_options(p.add_argument_group("MPI and safety"), poll_by_default=True)
    g = p.add_argument_group("output")
    g.add_argument("--json", default=None, metavar="PATH", help="write results as JSON")
    g.add_argument(
        "--trace",
        default=None,
        metavar="PATH",
        help="write a Chrome/Perfetto trace of every rank's operations",
    )
    g.add_argument("--quiet", action="store_true", help="only the reference summary line")
    return p


def add_mpi_options(
    g: argparse._ArgumentGroup,
    *,
    poll_by_default: bool,
    timeout_flags: tuple[str, ...] = ("--timeout",),
) -> None:
    """The MPI start-up and safety options every MPI command shares."""
    g.add_argument(
        "--thread-level",
        choices=THREAD_LEVELS,
        default=REFERENCE_THREAD_LEVEL,
        help="MPI thread level (default: single, as the reference's MPI_Init)",
    )
    g.add_argument(
        "--throttle",
        choices=("auto", "on", "off"),
        default="auto",
        help="MPICH progress throttle (auto: on when ranks outnumber cores)",
    )
    auto = (
        "poll when ranks outnumber cores"
        if poll_by_default
        else "blocking, with MPICH's throttle when ranks outnumber cores"
    )
    g.add_argument(
        "--progress",
        choices=("auto", "blocking", "poll"),
        default="auto",
        help="blocking: MPI's blocking calls (the reference); poll: their "
        "non-blocking forms tested with a sleep in between, so waiting ranks free "
        f"the cores (auto: {auto})",
    )
    g.add_argument(
        *timeout_flags,
        dest="timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help="abort when one operation blocks longer than S seconds "
        f"(0: never; default {DEFAULT_TIMEOUT_S:g})",
    )
    g.add_argument(
        "--force",
        action="store_true",
        help="run even when the memory estimate exceeds what this host has",
    )


def parse_quietly(
    parser: argparse.ArgumentParser, argv: Sequence[str], rank: int
) -> argparse.Namespace:
    """Parse on every rank; only rank 0 prints usage errors (all exit with code 2)."""
    if rank == 0:
        return parser.parse_args(argv)
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        return parser.parse_args(argv)


def check_options(ns: argparse.Namespace) -> str | None:
    if not (ns.scale > 0 and math.isfinite(ns.scale)):
        return f"--scale must be a positive number (got {ns.scale})"
    for name in ("iters", "warmup"):
        v = getattr(ns, name)
        if v is not None and v < 0:
            return f"--{name} must be >= 0 (got {v})"
    if ns.iters == 0:
        return "--iters must be >= 1"
    if ns.timeout < 0:
        return f"--timeout must be >= 0 seconds (got {ns.timeout})"
    if ns.algorithm is not None:
        from workload.collectives import ALGORITHMS

        known = sorted({a for algs in ALGORITHMS.values() for a in algs})
        if ns.algorithm not in known:
            return f"--algorithm must be one of {', '.join(known)} (got {ns.algorithm!r})"
    return None


def make_workload(model: Model, ns: argparse.Namespace, world_size: int) -> Workload:
    values = [getattr(ns, a.name) for a in model.args]
    given = [v for v in values if v is not None]
    if any(v is None for v in values[: len(given)]):
        raise ValueError("positional arguments must be given in order")
    params = model.params(given)
    for a in model.flags:
        params[a.name] = getattr(ns, a.name) or a.default
    options = BuildOptions(
        scale=ns.scale, per_tensor=ns.per_tensor, fix_quirks=ns.fix_quirks, algorithm=ns.algorithm
    )
    if ns.per_tensor and not model.per_tensor_available:
        raise ValueError(
            f"{model.name}: --per-tensor is not available for this model "
            "(the reference has aggregated gradient messages only)"
        )
    workload = model.build(world_size, params, options, given=len(given))
    if ns.algorithm is not None:
        check_algorithms(workload)
    return workload


def check_algorithms(workload: Workload) -> None:
    """Refuse, before MPI starts, a named algorithm some collective cannot run."""
    from workload.collectives import schedule_for
    from workload.ops import Collective

    seen: set[tuple[str, str, int]] = set()
    for phase in workload.phases:
        for rank in range(workload.world_size):
            for op in phase.program(rank):
                if not isinstance(op, Collective) or op.algorithm is None:
                    continue
                p = len(workload.group_of(op.group, rank))
                key = (op.op, op.algorithm, p)
                if key in seen or p == 1:
                    continue
                seen.add(key)
                try:
                    schedule_for(
                        op.op, op.algorithm, p, p, root=op.root, params=workload.collective_params
                    )
                except ValueError as e:
                    raise ValueError(
                        f"{workload.model}: --algorithm {op.algorithm} cannot run "
                        f"its {op.op} on {p} ranks ({op.group} group): {e}"
                    ) from None


def fail(rank: int, message: str, code: int = EXIT_USAGE) -> None:
    if rank == 0:
        sys.stderr.write(f"error: {message}\n")
        sys.stderr.flush()
    raise SystemExit(code)


def main(model_name: str, argv: Sequence[str] | None = None) -> None:
    model = get_model(model_name)
    info = launch_info()
    ns = parse_quietly(build_parser(model), sys.argv[1:] if argv is None else argv, info.rank)
    problem = check_options(ns)
    if problem:
        fail(info.rank, f"{model.name}: {problem}")
    try:
        workload = make_workload(model, ns, info.world_size)
    except (LayoutError, ValueError) as e:
        fail(info.rank, str(e))
    throttle = {"auto": None, "on": True, "off": False}[ns.throttle]
    settings = prepare_mpi(info, ns.thread_level, throttle)

    from . import run  # initialises MPI

    run.run(model, workload, ns, settings, started=time.perf_counter())


def dispatch(argv: Sequence[str] | None = None) -> None:
    """``python -m proxies <model> [args]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or args[0] not in MODELS:
        rank = launch_info().rank
        if rank == 0:
            print(
                "usage: mpirun -n P python -m proxies <model> [args] [options]\n"
                "models:\n" + "\n".join(f"  {n:24s} {m.description}" for n, m in MODELS.items())
            )
        raise SystemExit(0 if args and args[0] in ("-h", "--help") else EXIT_USAGE)
    main(args[0], args[1:])
