"""``python -m simnet --config config.json``: predict, write results, summarise."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import gc
import json
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from workload.brief_argparse import BriefParser

from .config import ConfigError, load_config, schema
from .progress import Progress, live_progress
from .sizecheck import (
    DENSE_MAX_ENDPOINTS,
    MATRICES,
    SERIES_CSV_MAX_POINTS,
    TRACE_MAX_EVENTS,
    dense_matrices,
)

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # as a shell reports a command ended by SIGINT


def build_parser(subcommands: Sequence[str] = ()) -> argparse.ArgumentParser:
    p = BriefParser(
        prog="python -m simnet",
        description="Predict the time, traffic and bandwidth of a workload (the ring trainer "
        "or any proxy) on a modelled network, and draw them. Subcommands: "
        + ", ".join(subcommands)
        + " (python -m simnet SUBCOMMAND --help).",
    )
    p.add_argument(
        "--config",
        default="config.json",
        help="configuration file (JSON; default: config.json in the current folder)",
    )
    p.add_argument(
        "--schema", action="store_true", help="print the configuration's JSON Schema and exit"
    )
    p.add_argument("--out", default=None, help="results directory (default: logging.log_dir)")
    p.add_argument(
        "--prefix",
        default="sim_",
        help="prefix of every file written (the page: report.html, or PREFIXreport.html "
        "with another prefix)",
    )
    series = p.add_mutually_exclusive_group()
    series.add_argument(
        "--no-series",
        action="store_true",
        help="do not record per-link rate series (faster on huge runs)",
    )
    series.add_argument(
        "--series",
        action="store_true",
        help=f"record them above {DENSE_MAX_ENDPOINTS:,} endpoints too (not by default there) "
        f"and write their CSV whatever its size (by default up to "
        f"{SERIES_CSV_MAX_POINTS:,} change points)",
    )
    p.add_argument(
        "--trace-ranks",
        default="auto",
        metavar="RANKS",
        help=f"ranks of the timeline trace: all, none, or a list such as 0-63,517 (default: "
        f"all up to {TRACE_MAX_EVENTS:,} events, else the ranks from 0 up that fit and the "
        "last rank to finish)",
    )
    p.add_argument(
        "--matrices",
        choices=MATRICES,
        default="auto",
        help="n x n endpoint matrices (traffic, route bandwidth, achieved rate) as CSV, "
        f"JSON and full heatmaps: dense; or only the pairs that communicated and heatmaps "
        f"in blocks: sparse; auto: dense up to {DENSE_MAX_ENDPOINTS:,} endpoints",
    )
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument(
        "--force",
        action="store_true",
        help="simulate even when the memory estimate exceeds what this machine has",
    )
    return p


def _check_trace_ranks(text: str, world_size: int | None) -> None:
    """--trace-ranks as a ConfigError if malformed or (with ``world_size``) out of range."""
    from .output import parse_ranks, rank_spans

    try:
        rank_spans(text) if world_size is None else parse_ranks(text, world_size)
    except ValueError as e:
        raise ConfigError(f"--trace-ranks: {e}") from None


def main(argv: Sequence[str] | None = None, subcommands: Sequence[str] = ()) -> int:
    """Simulate the configuration; ``subcommands`` only name the front end's others in --help."""
    # Without the cyclic collector from start to end, as simulate and write_all run:
    # between the two, the first allocations after a big simulation would set off
    # collections that trace every object it left (0.6-0.9 s at 1,024 ranks with link
    # series, whose 2 million points are objects); a command frees everything at exit.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _main(argv, subcommands)
    finally:
        if enabled:
            gc.enable()


def _main(argv: Sequence[str] | None, subcommands: Sequence[str]) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if subcommands and args and not args[0].startswith("-"):
        # A word where an option or a subcommand is due: a mistyped subcommand, likeliest.
        near = difflib.get_close_matches(args[0], subcommands, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        print(
            f"python -m simnet: error: unknown subcommand {args[0]!r}{hint} (subcommands: "
            f"{', '.join(subcommands)}; a simulation: python -m simnet --config FILE)",
            file=sys.stderr,
        )
        return 2
    ns = build_parser(subcommands).parse_args(args)
    if ns.schema:
        print(json.dumps(schema(), indent=1))
        return 0
    from workload.results import output_dir_problem, prefix_problem

    from .executor import ProgramsStuckError
    from .output import write_all
    from .simulate import simulate

    progress = Progress(live_progress())

    try:
        cfg = load_config(ns.config)
        for note in cfg.deprecation_notes:
            print(f"note: {note}", file=sys.stderr)
        if ns.out == "":
            raise ConfigError("--out: empty; name a folder (default: logging.log_dir)")
        problem = output_dir_problem(ns.out or cfg.logging.log_dir) or prefix_problem(
            ns.prefix, allow_empty=True
        )
        if problem:
            raise ConfigError(problem)
        if ns.trace_ranks != "auto":
            # Before simulating: the form, and the ranks where they are known (with jobs,
            # theirs together are known after).
            _check_trace_ranks(ns.trace_ranks, None if cfg.jobs else cfg.world_size)
        n = cfg.num_rank_endpoints
        large = n > DENSE_MAX_ENDPOINTS
        record_series = ns.series or not (ns.no_series or large)
        if large and not (ns.series or ns.no_series or ns.quiet):
            print(
                f"note: {n:,} endpoints: link rate series not recorded (--series records "
                "them; millions of change points)",
                file=sys.stderr,
            )
        res = simulate(
            cfg,
            progress=None if ns.quiet else progress,
            record_series=record_series,
            force=ns.force,
            dense_matrices=dense_matrices(n, ns.matrices),
        )
    except ConfigError as e:
        progress.break_line()
        hint = ""
        if ns.matrices == "dense" and "endpoint-pair matrices" in str(e):
            hint = "; --matrices sparse leaves the n x n matrices out"
        print(f"error: {e}{hint}", file=sys.stderr)
        return EXIT_USAGE
    except ProgramsStuckError as e:  # a workload or trace whose ranks cannot all finish
        progress.break_line()
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\ninterrupted: the simulation stopped, nothing was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    trace_ranks: str | list[int] = ns.trace_ranks
    if trace_ranks != "auto":
        # Parsed once, against the ranks that ran (the jobs' together).
        from .output import parse_ranks

        try:
            trace_ranks = parse_ranks(ns.trace_ranks, res.workload.world_size)
        except ValueError as e:
            print(f"\nerror: --trace-ranks: {e}; nothing was written", file=sys.stderr)
            return EXIT_USAGE
    progress.end()  # the last line shown may be seconds old: end on the final state
    out = ns.out or cfg.logging.log_dir
    if not ns.quiet:
        points = sum(len(v) for p in res.phases for v in p.link_series.values())
        ops = sum(len(ops) for p in res.phases if p.timeline for ops in p.timeline.programs)
        print(
            f"writing results to {out} ({ops:,} operations in the trace, {points:,} link "
            f"series points{'; --no-series skips them' if points > 100_000 else ''}) ...",
            file=sys.stderr,
            flush=True,
        )
    shown = progress.last

    def say(summary: str) -> None:
        if progress.last != shown:  # a progress line was shown while writing: end it first
            progress.end()
        print(summary)

    def written(msg: str) -> None:
        # An interrupt that came inside a callback Python ignores exceptions from (the
        # plots' weakref callbacks) is seen here, at the next file.
        if interrupted.is_set():
            raise KeyboardInterrupt
        if not ns.quiet:
            progress(msg)

    try:
        with _interrupts_recorded() as interrupted:
            write_all(
                res,
                out,
                ns.prefix,
                say=say,
                matrices=ns.matrices,
                progress=written,
                trace_ranks=trace_ranks,
                series_csv=True if ns.series else None,
            )
            if interrupted.is_set():  # (during the last file, and ignored there)
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        if (Path(out) / f"{ns.prefix}summary.txt").exists():  # (an earlier run's went first)
            print(
                f"\ninterrupted as the last files were written: {out} holds this run's "
                f"{ns.prefix}summary.txt and the files it lists",
                file=sys.stderr,
            )
        else:
            print(
                f"\ninterrupted while writing: {out} holds this run's files written so far "
                f"and no {ns.prefix}summary.txt (an earlier run's files there were removed "
                "first)",
                file=sys.stderr,
            )
        return EXIT_INTERRUPTED
    return 0


@contextlib.contextmanager
def _interrupts_recorded() -> Iterator[threading.Event]:
    """While inside, Ctrl-C (SIGINT) also sets the event it yields, besides raising
    KeyboardInterrupt as always: a raise inside a callback whose exceptions Python
    ignores is otherwise lost. Outside the main thread, or with a handler of the
    caller's own, the event is never set."""
    seen = threading.Event()
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler or (
        threading.current_thread() is not threading.main_thread()
    ):
        yield seen
        return

    def handler(signum: int, frame: object) -> None:
        seen.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, previous)
