"""Bare mpi4py loops making the same MPI calls as a proxy, without the executor.

The baseline of bench/bench_executor.py. Run under MPI:

    mpiexec -n P python bench/bare_loops.py {resnet50,dlrm,gpt2} --scale F --iters N --warmup W

Each loop mirrors, call for call, what ``proxies.mpi_executor`` makes of the
model's rank program in blocking progress mode:

* the same thread level (``single`` by default, set through
  ``mpi4py.rc.thread_level`` before MPI is imported);
* the same kind of communicator: one split from COMM_WORLD (the executor
  splits one per group kind), with the barrier before the timed loop on
  COMM_WORLD;
* the same scratch buffers (``proxies.buffers``): one zero-filled send buffer
  that is never written and one receive buffer for receives and in-place
  collectives (views of it overlap, as in the executor);
* the same sizes, scaled the same way: ``max(1, round(count * scale))``
  float32 elements;
* the same emulated compute: one ``time.sleep`` per compute operation.

What is left out is the executor itself: compiled call lists, per-operation
timestamps, the watchdog, request bookkeeping. Timing as the reference's:
MPI.Wtime over the timed loop after a barrier, divided by the iterations.
Rank 0 prints one JSON line on stdout, with every rank's peak resident memory.

Message sizes come from the model modules (pure data, no MPI); the call
sequences are written out here and must be kept in step with the models.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable

from proxies.buffers import zeros
from workload.hostmem import peak_rss_bytes
from workload.models.dlrm import ALLTOALL_TOTAL_ELEMS, BOTTOM_MLP_GRADIENTS, TOP_MLP_GRADIENTS
from workload.models.pipeline_dp import GPT2
from workload.models.resnet import RESNET50_MESSAGES
from workload.units import ELEM_BYTES, us_to_s

GPT2_MICROBATCHES = 8
# DLRM's emulated compute, in program order (microseconds; see workload/models/dlrm.py).
DLRM_FWD_US = (341.0, 209.0, 455.0, 910.0)  # bottom MLP, interaction, top MLP fwd; top MLP bwd
DLRM_MID_US = (209.0, 682.0)  # interaction bwd, bottom MLP bwd


def scaled(count_elems: int, scale: float) -> int:
    return max(1, round(count_elems * scale))


class Phase:
    """One timed loop: ``run(n)`` makes n iterations; calls and call bytes per iteration."""

    def __init__(self, name: str, run: Callable[[int], None], calls: int, call_bytes: int) -> None:
        self.name, self.run, self.calls, self.call_bytes = name, run, calls, call_bytes


def resnet50_phases(comm, rank: int, size: int, scale: float) -> list[Phase]:
    from mpi4py import MPI  # initialised by main()

    counts = [scaled(m, scale) for m in RESNET50_MESSAGES]
    big = max(counts)
    sbuf, rbuf = zeros(big), zeros(big)
    pairs = [(rbuf[:n], sbuf[:n]) for n in counts]
    left, right = (rank - 1) % size, (rank + 1) % size
    op_sum = MPI.SUM
    allreduce, irecv, send = comm.Allreduce, comm.Irecv, comm.Send
    nbytes = sum(counts) * ELEM_BYTES

    def allreduce_loop(n: int) -> None:
        for _ in range(n):
            for rv, sv in pairs:
                allreduce(sv, rv, op_sum)

    def ring_loop(n: int) -> None:
        for _ in range(n):
            for rv, sv in pairs:
                req = irecv(rv, left, 0)
                send(sv, right, 0)
                req.Wait()

    return [
        Phase("allreduce", allreduce_loop, len(counts), nbytes),
        Phase("ring", ring_loop, 2 * len(counts), 2 * nbytes),
    ]


def dlrm_phases(comm, rank: int, size: int, scale: float) -> list[Phase]:
    from mpi4py import MPI  # initialised by main()

    per_peer = scaled(ALLTOALL_TOTAL_ELEMS // size, scale)
    top, bottom = scaled(TOP_MLP_GRADIENTS, scale), scaled(BOTTOM_MLP_GRADIENTS, scale)
    recv_elems = max(per_peer * size, top, bottom)
    sbuf, rbuf = zeros(recv_elems), zeros(recv_elems)
    a2a_send, a2a_recv = sbuf[: per_peer * size], rbuf[: per_peer * size]
    top_v, bottom_v = rbuf[:top], rbuf[:bottom]
    top_s, bottom_s = sbuf[:top], sbuf[:bottom]
    op_sum = MPI.SUM
    alltoall, iallreduce, waitall = comm.Alltoall, comm.Iallreduce, MPI.Request.Waitall
    sleep = time.sleep
    embedding_fwd, embedding_bwd = us_to_s(95.0), us_to_s(190.0)
    fwd = [us_to_s(us) for us in DLRM_FWD_US]
    mid = [us_to_s(us) for us in DLRM_MID_US]

    def loop(n: int) -> None:
        for _ in range(n):
            sleep(embedding_fwd)
            alltoall(a2a_send, a2a_recv)
            for d in fwd:
                sleep(d)
            r_top = iallreduce(top_s, top_v, op_sum)
            for d in mid:
                sleep(d)
            r_bottom = iallreduce(bottom_s, bottom_v, op_sum)
            alltoall(a2a_send, a2a_recv)
            sleep(embedding_bwd)
            waitall([r_top, r_bottom])

    nbytes = (2 * per_peer * (size - 1) + top + bottom) * ELEM_BYTES
    return [Phase("iteration", loop, 4, nbytes)]


def gpt2_phases(comm, rank: int, size: int, scale: float) -> list[Phase]:
    """GPT-2 with 2 stages on 2 ranks: no middle stage, no data-parallel allreduce."""
    if size != 2:
        raise SystemExit("bare_loops: gpt2 is mirrored for 2 ranks (2 stages) only")
    n_elems = scaled(GPT2.spec.pipeline_elems, scale)
    sbuf, rbuf = zeros(n_elems), zeros(n_elems)
    peer = 1 - rank
    send, recv = comm.Send, comm.Recv
    tags = range(GPT2_MICROBATCHES)

    # The first stage sends forward, then receives backward; the last stage the reverse.
    sending, receiving = (send, sbuf), (recv, rbuf)
    (fwd, fwd_buf), (bwd, bwd_buf) = (sending, receiving) if rank == 0 else (receiving, sending)

    def loop(n: int) -> None:
        for _ in range(n):
            for t in tags:
                fwd(fwd_buf, peer, t)
            for t in tags:
                bwd(bwd_buf, peer, t)

    calls = 2 * GPT2_MICROBATCHES
    return [Phase("iteration", loop, calls, calls * n_elems * ELEM_BYTES)]


MODELS = {"resnet50": resnet50_phases, "dlrm": dlrm_phases, "gpt2": gpt2_phases}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("--scale", type=float, default=1.0, metavar="F")
    ap.add_argument("--iters", type=int, default=10, metavar="N", help="timed iterations")
    ap.add_argument("--warmup", type=int, default=2, metavar="N", help="untimed iterations")
    ap.add_argument(
        "--thread-level", default="single", choices=("single", "funneled", "serialized", "multiple")
    )
    ns = ap.parse_args()
    if ns.iters < 1 or ns.warmup < 0 or not ns.scale > 0:
        ap.error("need --iters >= 1, --warmup >= 0 and --scale > 0")

    import mpi4py

    mpi4py.rc.thread_level = ns.thread_level  # before MPI initialises
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    comm = world.Split(0, rank)
    try:
        phases = MODELS[ns.model](comm, rank, size, ns.scale)
        results = []
        for ph in phases:
            ph.run(ns.warmup)
            world.Barrier()
            t0 = MPI.Wtime()
            ph.run(ns.iters)
            total_s = MPI.Wtime() - t0
            totals = world.gather(total_s, root=0)
            calls = world.gather((ph.calls, ph.call_bytes), root=0)
            if rank == 0:
                results.append(
                    {
                        "phase": ph.name,
                        "runtime_per_iteration_s": total_s / ns.iters,
                        "total_s_per_rank": totals,
                        "calls_all_ranks": sum(c for c, _ in calls),
                        "call_bytes_all_ranks": sum(b for _, b in calls),
                    }
                )
    except Exception:
        # One failing rank must not leave the others waiting forever.
        traceback.print_exc()
        sys.stderr.flush()
        world.Abort(1)
    peaks = world.gather(peak_rss_bytes(), root=0)
    if rank == 0:
        levels = {
            MPI.THREAD_SINGLE: "single",
            MPI.THREAD_FUNNELED: "funneled",
            MPI.THREAD_SERIALIZED: "serialized",
            MPI.THREAD_MULTIPLE: "multiple",
        }
        doc = {
            "kind": "bare-loop",
            "model": ns.model,
            "world_size": size,
            "scale": ns.scale,
            "iterations": {"warmup": ns.warmup, "timed": ns.iters},
            "thread_level": levels.get(MPI.Query_thread(), str(MPI.Query_thread())),
            "library": MPI.Get_library_version().strip().splitlines()[0],
            "phases": results,
            "peak_rss_bytes_per_rank": peaks,
        }
        print(json.dumps(doc), flush=True)
    comm.Free()


if __name__ == "__main__":
    main()
