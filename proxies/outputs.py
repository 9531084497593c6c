"""The proxies' result files (--json, --trace), checked before any MPI work."""

from __future__ import annotations

import argparse
import os

from workload.results import output_file_problem


def output_files_problem(ns: argparse.Namespace, world_size: int = 1) -> str | None:
    """Why ``--json`` or ``--trace`` cannot be written, checked before any MPI work
    rather than found after the run: a ``{rank}`` pattern of --trace for each of the
    ``world_size`` ranks (each rank checks them all, so that all stop together)."""
    json_path, trace = ns.json, getattr(ns, "trace", None)
    if json_path and "{rank}" in json_path:
        return (
            f"--json {json_path}: the results are one file, written by rank 0; {{rank}} "
            "is for --trace"
        )
    tried: dict = {}  # folders found writable or not: one test file each, not one a rank
    if json_path:
        problem = output_file_problem(json_path, "--json", tried)
        if problem:
            return problem
    if not trace:
        return None
    per_rank = "{rank}" in trace
    same = os.path.realpath(json_path) if json_path else None
    for rank in range(world_size if per_rank else 1):
        path = trace.replace("{rank}", str(rank))
        option = f"--trace (rank {rank}'s file)" if per_rank else "--trace"
        if same is not None and os.path.realpath(path) == same:
            return (
                f"{option} {path} is the --json file too: the trace would replace the "
                "results; name two files"
            )
        problem = output_file_problem(path, option, tried)
        if problem:
            return problem
    return None
