"""A proxy run once MPI is up: checks, communicators, phases, results.

Importing this module initialises MPI (through the executor).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

from workload.accounting import BASE_RANK_BYTES, program_stats
from workload.hostmem import available_memory_bytes, peak_rss_bytes
from workload.layout import LayoutError
from workload.matching import unmatched
from workload.models import Model
from workload.program import Workload
from workload.results import counted
from workload.spec import RunSpec, SpecError
from workload.timeline import breakdown
from workload.units import GIB

from . import report
from .launch import MPISettings, mpi_launcher_size, slurm_step_size
from .mpi_executor import (
    MPI,
    MPIExecutor,
    abort_job,
    any_true,
    gather,
    library_version,
    node_memory_check,
    thread_level_name,
)
from .outputs import outlive_stdout_reader, output_files_problem
from .usage import EXIT_USAGE

MEMORY_HEADROOM = 0.9  # refuse above this fraction of the available memory


def _stop(comm: MPI.Intracomm, message: str | None, code: int = EXIT_USAGE) -> None:
    if comm.Get_rank() == 0 and message:
        sys.stderr.write(f"error: {message}\n")
        sys.stderr.flush()
    MPI.Finalize()
    raise SystemExit(code)


def trace_files_problem(comm: MPI.Intracomm, ns: argparse.Namespace) -> str | None:
    """Why a rank's ``--trace`` file of a ``{rank}`` pattern cannot be written (the
    lowest such rank's), on every rank, or None: each rank checks its own file (rank 0's
    was checked before MPI started), rank 0 gathers the answers and tells them all, so
    that all stop together before any work."""
    trace = getattr(ns, "trace", None)
    if not trace or "{rank}" not in trace or comm.Get_size() == 1:
        return None
    rank = comm.Get_rank()
    mine = output_files_problem(ns, (rank,), json=False) if rank else None
    found = comm.gather(mine, root=0)
    first = next((p for p in found if p), None) if found is not None else None
    return comm.bcast(first, root=0)


def memory_message(
    model: Model, scale: float, need: int, ranks: int, avail: int, buffers: int
) -> str:
    """The refusal, naming a --scale that would fit (sizes in bytes)."""
    base = need - buffers
    fit = (avail * MEMORY_HEADROOM * 0.9 - base) / buffers * scale if buffers else 0
    if fit > 0:
        digits = 10 ** math.floor(math.log10(fit))
        smaller = math.floor(fit / digits) * digits
        hint = f"try --scale {smaller:g} (every message {smaller:g} x its size{_than(smaller)})"
    else:
        hint = "use fewer ranks per host"
    return (
        f"{model.name}: the {counted(ranks, 'rank')} on this host "
        f"{'needs' if ranks == 1 else 'need'} about {need / GIB:.1f} GiB, "
        f"{over_limit(avail)}; {hint}, or --force to run anyway"
    )


def over_limit(avail: int) -> str:
    """What a refused run's memory is more than (``avail``: bytes available)."""
    return (
        f"more than the {avail * MEMORY_HEADROOM / GIB:.1f} GiB they may take "
        f"({MEMORY_HEADROOM:.0%} of the {avail / GIB:.1f} GiB available)"
    )


def _than(scale: float) -> str:
    """What messages at ``scale`` x their size make of the reference's workload."""
    if scale == 1:
        return ": the reference's workload"
    return f": a {'smaller' if scale < 1 else 'larger'} workload than the reference's"


def scale_note(scale: float) -> str:
    """The summary's line on a scaled run: what it measured is not the full-size job."""
    which = "smaller" if scale < 1 else "larger"
    return (
        f"note: messages at {scale:g} x their full size (--scale {scale:g}); the times "
        f"above are those of that {which} workload, not of the full-size job"
    )


def run(
    spec: RunSpec,
    workload: Workload,
    ns: argparse.Namespace,
    settings: MPISettings,
    started: float,
) -> None:
    """Run ``spec`` (its ``workload`` as the launcher sized it); ``ns`` holds the
    command line's MPI, safety and output options."""
    model = spec.spec_model
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    # (``proxy | head``: the lines after head's are dropped, the results still written)
    outlive_stdout_reader()
    try:
        launched = mpi_launcher_size()
        if size == 1 and launched is not None and launched > 1:
            # A launcher of another MPI (its variables name more ranks than this MPI
            # gives): each process would run alone, all writing the same files.
            _stop(
                comm,
                f"{model.name}: the launcher says {launched} ranks but MPI "
                "started this process alone: launch it with the mpiexec of the MPI "
                "mpi4py was built with (python -m mpi4py --mpi-lib-version names it)",
            )
        step = slurm_step_size()
        if size == 1 and step is not None and step > 1:
            # srun without the process manager this MPI takes: each task is a world of
            # its own, every one of them writing the same result file.
            _stop(
                comm,
                f"{model.name}: srun started {step} tasks but MPI started this process "
                "alone: srun does not give this MPI its process manager; add srun's "
                "--mpi option for your MPI (srun --mpi=list shows them; e.g. pmi2 or pmix "
                "for MPICH, pmix for Open MPI) or use the MPI's own mpiexec",
            )
        if size != workload.world_size:
            # The launcher's environment named another size (or none): rebuild.
            try:
                workload = spec.workload(size)
            except SpecError as e:
                _stop(comm, f"{model.name}: {e.render()}")
            except (LayoutError, ValueError) as e:
                _stop(comm, str(e))
        problem = trace_files_problem(comm, ns)
        if problem:
            _stop(comm, f"{model.name}: {problem}")
        if model.name == "chakra":
            # A trace set whose ranks cannot all finish (a receive nobody sends) would
            # hang until --timeout: its programs, checked on rank 0 before any MPI work.
            problem = unmatched(workload) if rank == 0 else None
            if problem:
                problem += "; the replay would wait for it until --timeout"
            problem = comm.bcast(problem, root=0)
            if problem:
                _stop(comm, f"{model.name}: {problem}")
        progress = ns.progress
        if progress == "auto":
            progress = settings.auto_progress()
        settings.progress = progress
        ex = MPIExecutor(
            workload,
            compute=spec.compute,
            timeout_s=ns.timeout,
            comm=comm,
            **settings.executor_options(),
        )
        need, ranks, avail = node_memory_check(
            comm, ex.needs.resident_bytes, available_memory_bytes()
        )
        buffers = need - ranks * BASE_RANK_BYTES
        too_big = need > avail * MEMORY_HEADROOM and not ns.force
        if any_true(comm, too_big):
            msg = memory_message(model, spec.scale, need, ranks, avail, buffers)
            _stop(comm, msg if rank == 0 else None)
        ex.create_communicators()
        ex.allocate()
        warmup, runs = spec.iteration_counts()
        say = (
            (lambda m: print(f"[{time.perf_counter() - started:7.1f} s] {m}", flush=True))
            if rank == 0 and not ns.quiet
            else None
        )
        if say:
            # (every option that changes what runs is named here, not only in the JSON)
            algorithm = f"algorithm {spec.algorithm}, " if spec.algorithm else ""
            whose = " (--reference-counts)" if spec.reference_counts else ""
            note = f", {workload.start_note}" if workload.start_note else ""
            say(
                f"{model.name}: {counted(size, 'rank')}{note}, thread level "
                f"{thread_level_name(MPI.Query_thread())}, progress throttle "
                f"{'on' if settings.throttle else 'off'} ({settings.throttle_reason}), "
                f"progress {settings.progress_text()}, "
                f"scale {spec.scale:g}, compute {spec.compute}, {algorithm}{warmup} warm-up + "
                f"{counted(runs, 'timed iteration')}{whose}; {library_version()}"
            )
        runs_done = [ex.run_phase(ph.name, warmup, runs, say) for ph in workload.phases]
        local = [report.rank_figures(r, breakdown) for r in runs_done]
        stats = [program_stats(workload, rank, r.ops).as_dict() for r in runs_done]
        everyone = gather(
            comm,
            {
                "rank": rank,
                "phases": local,
                "program": stats,
                "resident_estimate_bytes": ex.needs.resident_bytes,
                "peak_rss_bytes": peak_rss_bytes(),
            },
        )
        trace = None
        if ns.trace and "{rank}" in ns.trace:
            # Each rank its own file: nothing crosses the network for it (the testbed counts
            # every byte between hosts).
            path = ns.trace.replace("{rank}", str(rank))  # as the check before the run
            report.save_trace(path, [report.trace_events(rank, runs_done)])
        elif ns.trace:
            trace = gather(comm, report.trace_events(rank, runs_done))
        if rank == 0:
            doc = report.document(
                model,
                workload,
                ns,
                settings,
                everyone,
                runs_done,
                library=library_version(),
                thread_level=thread_level_name(MPI.Query_thread()),
                warmup=warmup,
                runs=runs,
                wall_s=time.perf_counter() - started,
            )
            # The files before the summary: under MPICH's mpiexec, which forwards the
            # ranks' output, a closed reader (``| head -1``) ends the whole job at the
            # first line mpiexec cannot pass on, which would otherwise be the summary's.
            if ns.json:
                report.save_json(ns.json, doc)
            if trace is not None:
                report.save_trace(ns.trace, trace)
            report.emit(workload, doc, quiet=ns.quiet)
            if spec.scale != 1.0 and not ns.quiet:
                print(scale_note(spec.scale), flush=True)
    except SystemExit:
        raise
    except BaseException:
        abort_job(comm, rank)
