"""CosmoFlow: spatial (operator) parallelism over 4 shards x data parallelism."""

from __future__ import annotations

from ..layout import block_groups, require_multiple, strided_groups, world_groups
from ..ops import Op
from ..program import BuildOptions, Phase, ProgramBuilder, Workload
from .base import BuildRequest, Counts, Model

SHARDS = 4
LOCAL_BATCH = 8
FORWARD_US = (6567, 13135, 6567, 3283, 1641, 5, 3, 1)
BACKWARD_US = (2, 6, 10, 3283, 6567, 13135, 26270, 13135)
FORWARD_HALO = {1: 2097152, 2: 1048576, 3: 524288, 4: 262144}  # conv layer -> elements
FORWARD_ALLGATHER = {5: 65536, 6: 256, 7: 128}  # dense layer -> elements per rank
BACKWARD_REDUCE_SCATTER = (128, 256, 65536)  # steps 0..2, elements per rank
BACKWARD_HALO = (131072, 262144, 524288, 1048576)  # steps 3..6
DENSE_GRADIENTS = 1050737
CONV_GRADIENTS = (3539456, 884992, 221312, 55360, 3488)  # steps 3..7


def halo_exchange(b: ProgramBuilder, rank: int, count: int, label: str) -> None:
    """Exchange with the two neighbours mp_rank ^ 1 and mp_rank ^ 2 of the 2x2 shard grid."""
    base, mp_rank = rank - rank % SHARDS, rank % SHARDS
    reqs = []
    for nb in (base + (mp_rank ^ 1), base + (mp_rank ^ 2)):
        reqs.append(b.send(nb, count, tag=0, group="mp", blocking=False, label=f"{label}_send"))
        reqs.append(b.recv(nb, count, tag=0, group="mp", blocking=False, label=f"{label}_recv"))
    b.wait(*reqs, label="halo_wait")


def cosmoflow_program(rank: int, options: BuildOptions) -> list[Op]:
    b = ProgramBuilder(options)
    for layer in range(8):
        if layer in FORWARD_HALO:
            halo_exchange(b, rank, FORWARD_HALO[layer], "halo_fwd")
        elif layer in FORWARD_ALLGATHER:
            b.collective("allgather", "mp", FORWARD_ALLGATHER[layer], label="dense_allgather")
        b.compute(FORWARD_US[layer], f"forward_{layer}")
    grads: list[int | None] = []
    for step in range(8):
        if step > 3:
            b.testany(grads)
        b.compute(BACKWARD_US[step], f"backward_{step}")
        if step < 3:
            b.collective(
                "reduce_scatter", "mp", BACKWARD_REDUCE_SCATTER[step], label="dense_reduce_scatter"
            )
        elif step < 7:
            halo_exchange(b, rank, BACKWARD_HALO[step - 3], "halo_bwd")
        if step == 2:
            grads.append(
                b.allreduce("dp", DENSE_GRADIENTS, blocking=False, label="dense_grad_allreduce")
            )
        elif step >= 3:
            grads.append(
                b.allreduce(
                    "world", CONV_GRADIENTS[step - 3], blocking=False, label="conv_grad_allreduce"
                )
            )
    b.wait(*grads, label="waitall")
    return b.ops


class CosmoFlow(Model):
    name = "cosmoflow"
    description = "CosmoFlow: 4-way spatial (operator) parallelism x data parallelism"
    order = 60
    batch_definition = "global batch = 8 x data shards, data shards = P / 4 (reference)"
    counts = Counts(8, 128, 2, 10)

    def _build(self, req: BuildRequest) -> Workload:
        world_size, params, options, _ = req
        require_multiple(
            self.name,
            world_size,
            SHARDS,
            f"the world size must be a multiple of the {SHARDS} model shards",
        )
        data_shards = world_size // SHARDS
        total = DENSE_GRADIENTS * SHARDS + sum(CONV_GRADIENTS)

        return self.workload(
            world_size,
            params,
            {
                "mp": block_groups(world_size, SHARDS),
                "dp": strided_groups(world_size, SHARDS),
                "world": world_groups(world_size),
            },
            [Phase("iteration", lambda rank: cosmoflow_program(rank, options))],
            info={
                "total_params": total,
                "model_shards": SHARDS,
                "data_shards": data_shards,
                "global_batch": LOCAL_BATCH * data_shards,
            },
            summary=[
                ("model_shards", SHARDS),
                ("data_shards", data_shards),
                ("total_params", total),
                ("global_batch", LOCAL_BATCH * data_shards),
            ],
        )
