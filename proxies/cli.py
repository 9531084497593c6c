"""Command line of every proxy: ``mpirun -n P python -m proxies.<model> [args]``.

Order matters: arguments and the process layout are checked before MPI is
initialised (a bad world size gives one line from rank 0 and exit code 2 on
every rank, no hang), then MPI settings are applied, then MPI starts.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from workload.brief_argparse import BriefParser
from workload.layout import LayoutError
from workload.models import MODELS, Model, get_model
from workload.spec import COMPUTE_MODES, RunSpec, SpecError, known_algorithms

from .launch import REFERENCE_THREAD_LEVEL, THREAD_LEVELS, launch_info, prepare_mpi
from .outputs import output_files_problem
from .usage import EXIT_USAGE, fail, parse_quietly

__all__ = ["EXIT_USAGE", "build_parser", "dispatch", "fail", "main", "parse_quietly"]

DEFAULT_TIMEOUT_S = 300.0


def whole_number(text: str) -> int:
    """A whole-number option's value: ``4``, or ``4.0`` taken as 4 (as a configuration
    file's JSON number is); ``4.5`` is refused."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"must be a whole number (got {text})")
    return int(value)


def build_parser(model: Model) -> argparse.ArgumentParser:
    usage_args = " ".join(f"[{a.name}={a.default}]" for a in model.args)
    where = f". Positional arguments as the reference: {usage_args}" if model.args else ""
    p = BriefParser(
        prog=f"mpirun -n P python -m proxies.{model.name}",
        description=f"{model.description}{where}",
    )
    for a in model.args:
        p.add_argument(
            a.name,
            type=whole_number,
            nargs="?",
            default=None,
            help=f"{a.help} (default {a.default})",
        )
    for a in model.flags:
        p.add_argument(
            "--" + a.name.replace("_", "-"),
            dest=a.name,
            type=str if a.choices or a.text else float if a.real else whole_number,
            choices=a.choices or None,
            default=None,
            metavar="PATH" if a.text else "NAME" if a.choices else "X" if a.real else "N",
            help=a.help + (f" ({', '.join(a.choices)}; default {a.default})" if a.choices else ""),
        )
    g = p.add_argument_group("iterations")
    c = model.counts
    if model.has_reference:
        runs = f"sized for a 2-core machine; the reference runs {c.reference_runs}"
        warmups = f"; reference {c.reference_warmup}"
        fixed = f"use the reference's own counts ({c.reference_warmup} warm-up, "
    else:  # (llm, chakra: no reference proxy; their longer counts are the project's)
        runs, warmups = "sized for a 2-core machine", ""
        fixed = f"use the model's fixed counts, having no reference ({c.reference_warmup} warm-up, "
    g.add_argument(
        "--iters",
        type=int,
        default=None,
        metavar="N",
        help=f"timed iterations (default {c.default_runs}, {runs})",
    )
    g.add_argument(
        "--warmup",
        type=int,
        default=None,
        metavar="N",
        help=f"untimed warm-up iterations (default {c.default_warmup}{warmups})",
    )
    g.add_argument(
        "--reference-counts",
        action="store_true",
        help=f"{fixed}{c.reference_runs} timed)",
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
        choices=COMPUTE_MODES,
        default="sleep",
        help="emulated compute: sleep (the reference), spin (busy), none",
    )
    g.add_argument(
        "--per-tensor",
        action="store_true",
        help="one gradient message per tensor instead of aggregated messages"
        + ("" if model.per_tensor_available else f" (not for {model.name}: "
           f"{model.no_per_tensor_reason})"),
    )  # fmt: skip
    g.add_argument(
        "--fix-quirks",
        action="store_true",
        help="repair the reference's quirks instead of reproducing them"
        + ("" if model.quirks_available else f" (not for {model.name}: "
           f"{model.no_quirks_reason})"),
    )  # fmt: skip
    g.add_argument(
        "--algorithm",
        default=None,
        metavar="NAME",
        help="run every collective with this project schedule instead of the MPI "
        f"library's own ({', '.join(proxy_algorithms(model))})",
    )
    add_mpi_options(p.add_argument_group("MPI and safety"), poll_by_default=True)
    g = p.add_argument_group("output")
    g.add_argument("--json", default=None, metavar="PATH", help="write results as JSON")
    g.add_argument(
        "--trace",
        default=None,
        metavar="PATH",
        help="write a Chrome/Perfetto trace of every rank's operations; a PATH with "
        "{rank} (e.g. trace.{rank}.json): one file per rank, written by that rank",
    )
    summary = "the reference's summary lines" if model.has_reference else "the summary lines"
    g.add_argument("--quiet", action="store_true", help=f"only {summary}")
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
        help="abort when one operation blocks longer than S seconds, an emulated compute "
        f"beyond its own time (0: never; default {DEFAULT_TIMEOUT_S:g})",
    )
    g.add_argument(
        "--force",
        action="store_true",
        help="run even when the memory estimate exceeds what this host has",
    )


PARAMETRISED_ALGORITHMS = {
    "hierarchical": "a group size",
    "multiring": "ring orders",
}
"""Schedules that need parameters a model gives (alexnet_ring's --hierarchical G and its
ring), which no other proxy's command line can set."""


def proxy_algorithms(model: Model) -> list[str]:
    """The project's schedules ``model``'s proxy can run with --algorithm."""
    if model.gives_schedule_params:
        return known_algorithms()
    return [a for a in known_algorithms() if a not in PARAMETRISED_ALGORITHMS]


def algorithm_problem(model: Model, algorithm: str | None) -> str | None:
    """Why ``model``'s proxy cannot take ``--algorithm algorithm``, or None."""
    if algorithm is None or algorithm in proxy_algorithms(model):
        return None
    if algorithm in PARAMETRISED_ALGORITHMS:
        return (
            f"--algorithm {algorithm} needs {PARAMETRISED_ALGORITHMS[algorithm]}, which "
            f"{model.name}'s command line cannot give (alexnet_ring's can); choose one of "
            f"{', '.join(proxy_algorithms(model))}"
        )
    return f"--algorithm must be one of {', '.join(proxy_algorithms(model))} (got {algorithm!r})"


def spec_from_namespace(model: Model, ns: argparse.Namespace) -> RunSpec:
    """The run a proxy's parsed command line asks for (checked: raises SpecError)."""
    values = [getattr(ns, a.name) for a in model.args]
    given = [v for v in values if v is not None]
    if any(v is None for v in values[: len(given)]):
        raise SpecError("args", "positional arguments must be given in order")
    return RunSpec(
        model=model.name,
        args=tuple(given),
        flags={a.name: getattr(ns, a.name) for a in model.flags if getattr(ns, a.name) is not None},
        scale=ns.scale,
        compute=ns.compute,
        per_tensor=ns.per_tensor,
        fix_quirks=ns.fix_quirks,
        algorithm=ns.algorithm,
        iters=ns.iters,
        warmup=ns.warmup,
        reference_counts=ns.reference_counts,
    )


def check_options(ns: argparse.Namespace) -> str | None:
    """What the run specification does not cover: the MPI safety options, and the
    output files (rank 0's --trace file of a ``{rank}`` pattern: each rank checks its
    own once MPI has started)."""
    if not ns.timeout >= 0:  # nan too
        return f"--timeout must be >= 0 seconds (got {ns.timeout})"
    if ns.json == "" or getattr(ns, "trace", None) == "":
        return "--json and --trace need a file name (got an empty one)"
    return output_files_problem(ns)


def main(model_name: str, argv: Sequence[str] | None = None) -> None:
    model = get_model(model_name)
    info = launch_info()
    ns = parse_quietly(build_parser(model), sys.argv[1:] if argv is None else argv, info.rank)
    problem = algorithm_problem(model, ns.algorithm)
    if problem:
        fail(info.rank, f"{model.name}: {problem}")
    try:
        spec = spec_from_namespace(model, ns)
    except SpecError as e:
        fail(info.rank, e.render() if e.field == "args" else f"{model.name}: {e.render()}")
    problem = check_options(ns)
    if problem:
        fail(info.rank, f"{model.name}: {problem}")
    try:
        workload = spec.workload(info.world_size)
    except SpecError as e:  # (an option the model's build refused)
        fail(info.rank, f"{model.name}: {e.render()}")
    except (LayoutError, ValueError) as e:
        fail(info.rank, str(e))
    throttle = {"auto": None, "on": True, "off": False}[ns.throttle]
    settings = prepare_mpi(info, ns.thread_level, throttle)

    from . import run  # initialises MPI

    run.run(spec, workload, ns, settings, started=time.perf_counter())


def dispatch(argv: Sequence[str] | None = None) -> None:
    """``python -m proxies <model> [args]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or args[0] not in MODELS:
        rank = launch_info().rank
        if rank == 0 and args and args[0] not in ("-h", "--help"):
            print(f"error: unknown model {args[0]!r}", file=sys.stderr)
        if rank == 0:
            print(
                "usage: mpirun -n P python -m proxies <model> [args] [options]\n"
                "models:\n" + "\n".join(f"  {n:24s} {m.description}" for n, m in MODELS.items())
            )
        raise SystemExit(0 if args and args[0] in ("-h", "--help") else EXIT_USAGE)
    main(args[0], args[1:])
