"""The AlexNet ring trainer on real MPI: ``mpirun -n P python -m proxies.ring_trainer``.

Measures the pairwise bandwidth matrix under the bandwidth limit, then trains
for epochs x steps: every step emulates the compute, then reduce-scatters and
all-gathers the gradient over the configured rings with the project's own
point-to-point schedules, paced so that no pair exceeds the limit. Counts the
bytes every pair exchanges per epoch and phase, tracks transfers against the
buffer size, and writes ``measured.json`` (rank 0, atomically).

Usually started by ``./run_training.sh`` (``python -m workflows.endtoend``) from
the configuration file; every setting is also a flag here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from workload.brief_argparse import BriefParser
from workload.layout import LayoutError
from workload.run_result import TrainerRun, TrainerSettings
from workload.spec import RunSpec, SpecError
from workload.units import MB, MS_PER_S, gb_per_s_to_bytes_per_s

from .launch import REFERENCE_THREAD_LEVEL, launch_info, prepare_mpi
from .outputs import outlive_stdout_reader
from .usage import fail, parse_quietly

TRAINER_MODEL = "alexnet_ring"  # the model description this trainer runs

PHASES = {True: "reduce_scatter", False: "allgather"}


def build_parser() -> argparse.ArgumentParser:
    d = TrainerSettings()  # the defaults, in one place
    p = BriefParser(
        prog="mpirun -n P python -m proxies.ring_trainer", description=__doc__.split("\n\n")[1]
    )
    # (option, type, metavar, help): the default is the settings' own.
    options: tuple[tuple[str, type, str | None, str | None], ...] = (
        ("--epochs", int, None, None),
        ("--steps", int, None, "steps per epoch"),
        ("--warmup", int, None, "untimed steps before epoch 1"),
        ("--input-channels", int, None, None),
        ("--num-classes", int, None, None),
        ("--batch-size", int, None, "reported (samples/s)"),
        ("--rings", str, None, "JSON list of ring orders (each a permutation of the ranks); "
         "default: one ring 0, 1, ..., P-1"),
        ("--hierarchical", int, "G", "use the two-level algorithm with groups of G ranks"),
        ("--bandwidth-limit", float, "GB/s",
         "max bandwidth between two ranks (GB = 1e9 B); 0: unlimited"),
        ("--buffer-bytes", int, None, "communication buffer per transfer; 0: not checked"),
        ("--compute-us", float, None, "emulated compute per step (us)"),
        ("--scale", float, None, "gradient size multiplier"),
        ("--bandwidth-bytes", int, None, "message size of the bandwidth measurement"),
        ("--chunk-bytes", int, None,
         "pacing granularity: transfers are sent in chunks of this size"),
    )  # fmt: skip
    for flag, kind, metavar, text in options:
        default = getattr(d, flag[2:].replace("-", "_"))
        p.add_argument(flag, type=kind, default=default, metavar=metavar, help=text)
    p.add_argument("--timeout", type=float, default=d.timeout)
    p.add_argument("--progress", choices=("auto", "blocking", "poll"), default=d.progress)
    p.add_argument("--out", default=d.out, help="directory of measured.json")
    return p


def run_spec(ns: argparse.Namespace, world_size: int) -> RunSpec:
    """The trainer's rank program as a run specification (raises ValueError)."""
    rings = json.loads(ns.rings) if ns.rings else None
    return RunSpec(
        model=TRAINER_MODEL,
        args=(ns.input_channels, ns.num_classes),
        flags={"compute_us": ns.compute_us, "hierarchical": ns.hierarchical},
        world_size=world_size,
        scale=ns.scale,
        rings=tuple(tuple(r) for r in rings) if rings else None,
    )


def main(argv: Sequence[str] | None = None) -> None:
    info = launch_info()
    ns = parse_quietly(build_parser(), sys.argv[1:] if argv is None else argv, info.rank)
    for name in ("epochs", "steps"):
        if getattr(ns, name) < 1:
            fail(info.rank, f"ring_trainer: --{name} must be >= 1")
    try:
        spec = run_spec(ns, info.world_size)
        workload = spec.workload()
        if spec.rings:
            from workload.collectives import build_schedule

            build_schedule(
                "allgather", "multiring", info.world_size, 1, rings=[list(r) for r in spec.rings]
            )
    except SpecError as e:
        fail(info.rank, f"ring_trainer: {e.render()}")
    except (LayoutError, ValueError) as e:
        fail(info.rank, f"ring_trainer: {e}")
    settings = prepare_mpi(info, REFERENCE_THREAD_LEVEL, None)
    from . import mpi_executor as mx

    comm = mx.MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    outlive_stdout_reader()  # (``| head``: the later lines dropped, measured.json written)
    if size != workload.world_size:
        fail(
            rank,
            f"ring_trainer: started with {size} ranks but the launcher said {workload.world_size}",
        )
    progress = ns.progress if ns.progress != "auto" else settings.auto_progress()
    settings.progress = progress
    started = time.perf_counter()

    def say(msg: str) -> None:
        if rank == 0:
            print(f"[{time.perf_counter() - started:7.1f} s] {msg}", flush=True)

    try:
        ex = mx.MPIExecutor(
            workload,
            compute="sleep",
            timeout_s=ns.timeout,
            comm=comm,
            **settings.executor_options(),
        )
        if ns.bandwidth_limit > 0:
            ex.pacer = mx.Pacer(
                gb_per_s_to_bytes_per_s(ns.bandwidth_limit),
                ns.chunk_bytes,
                settings.poll_pause_s,
            )
        ex.buffer_bytes = ns.buffer_bytes or None
        ex.create_communicators()
        ex.allocate()
        inf = workload.info
        say(
            f"ring trainer: {size} ranks, AlexNet {inf['parameters']} parameters, "
            f"{inf['gradient_elems']} gradient elements per step (scale {ns.scale:g}), "
            f"algorithm {inf['algorithm']}, {len(workload.collective_params['rings'])} ring(s), "
            f"limit {ns.bandwidth_limit:g} GB/s, progress {settings.progress_text()}"
        )
        say(
            f"measuring the bandwidth of {size * (size - 1)} ordered pairs "
            f"({ns.bandwidth_bytes} B each)"
        )
        bw_rows = mx.pairwise_bandwidth(comm, ns.bandwidth_bytes, pacer=ex.pacer)
        if ns.warmup:
            ex.run_phase("step", ns.warmup, 0)
        ex.sent_bytes.clear()
        epochs = []
        op_sum_s: list[float] = []  # this rank's summed duration per operation of a step
        for epoch in range(ns.epochs):
            run = ex.run_phase("step", 0, ns.steps)
            for starts, ends in zip(run.starts, run.ends, strict=True):
                durations = [e - b for b, e in zip(starts, ends, strict=True)]
                if op_sum_s:
                    op_sum_s = [a + d for a, d in zip(op_sum_s, durations, strict=True)]
                else:
                    op_sum_s = durations
            sent = ex.sent_bytes.copy()
            ex.sent_bytes.clear()
            gathered = comm.gather(
                {
                    "sent": [[PHASES[red], dst, b] for (_lbl, red, dst), b in sent.items()],
                    "steps_s": [
                        b - a
                        for a, b in zip(
                            run.iteration_starts,
                            [*run.iteration_starts[1:], run.total_s],
                            strict=True,
                        )
                    ],
                    "total_s": run.total_s,
                },
                root=0,
            )
            if rank == 0:
                e = epoch_record(epoch, gathered, size)
                epochs.append(e)
                say(
                    f"epoch {epoch + 1}/{ns.epochs}: {e['time_s']:.2f} s "
                    f"({MS_PER_S * e['time_s'] / ns.steps:.1f} ms/step), reduce-scatter "
                    f"{e['traffic_mb']['reduce_scatter']:.1f} MB, all-gather "
                    f"{e['traffic_mb']['allgather']:.1f} MB"
                )
        steps_run = ns.epochs * ns.steps
        op_means = comm.gather([d / steps_run for d in op_sum_s], root=0)
        overruns = comm.gather(list(ex.overruns.values()), root=0)
        pacing = comm.gather(ex.pacer.waited_s if ex.pacer else 0.0, root=0)
        if rank == 0:
            from workload.results import versions, write_json

            doc = TrainerRun(
                settings=TrainerSettings.from_json(
                    vars(ns)
                    | {
                        "world_size": size,
                        "progress": progress,
                        "poll_pause_s": settings.poll_pause_s if progress == "poll" else None,
                        "throttle": settings.throttle,
                    }
                ),
                workload={"info": workload.info, "rings": workload.collective_params["rings"]},
                mpi={
                    "library": mx.library_version(),
                    "thread_level": mx.thread_level_name(mx.MPI.Query_thread()),
                },
                bandwidth_bytes_per_s=bw_rows,
                epochs=epochs,
                total_time_s=sum(e["time_s"] for e in epochs),
                pacing_wait_s_per_rank=pacing,
                buffer_overruns=[o for per in overruns for o in per],
                ops={
                    "labels": [op.label for op in run.ops],
                    "mean_s_by_rank": op_means,
                },
                wall_s=time.perf_counter() - started,
                versions=versions(),
            )
            path = write_json(Path(ns.out) / "measured.json", doc.to_json())
            say(f"wrote {path}")
    except SystemExit:
        raise
    except BaseException:
        mx.abort_job(comm, rank)


def epoch_record(epoch: int, gathered: list[dict], size: int) -> dict:
    """Rank 0: one epoch's figures from every rank's counters."""
    traffic = {ph: [[0] * size for _ in range(size)] for ph in PHASES.values()}
    for src, g in enumerate(gathered):
        for phase, dst, b in g["sent"]:
            traffic[phase][src][dst] += b
    steps = [max(g["steps_s"][i] for g in gathered) for i in range(len(gathered[0]["steps_s"]))]
    return {
        "epoch": epoch + 1,
        "time_s": max(g["total_s"] for g in gathered),
        "step_s": {"mean": sum(steps) / len(steps), "min": min(steps), "max": max(steps)},
        "traffic_bytes": traffic,
        "traffic_mb": {ph: sum(map(sum, m)) / MB for ph, m in traffic.items()},
    }


if __name__ == "__main__":
    main()
