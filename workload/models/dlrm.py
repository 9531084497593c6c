"""DLRM: embedding model parallelism (all-to-all) x MLP data parallelism."""

from __future__ import annotations

from ..layout import LayoutError, world_groups
from ..ops import Op
from ..program import BuildOptions, Phase, ProgramBuilder, Workload, every_rank
from .base import BuildRequest, Counts, Model

GLOBAL_BATCH = 2048
ALLTOALL_TOTAL_ELEMS = 262144  # split evenly: 262144 / P elements per peer
TOP_MLP_GRADIENTS = 728065
BOTTOM_MLP_GRADIENTS = 49536


def dlrm_program(world_size: int, options: BuildOptions) -> list[Op]:
    per_peer = ALLTOALL_TOTAL_ELEMS // world_size
    b = ProgramBuilder(options)
    b.compute(95, "embedding_fwd")
    b.collective("alltoall", "world", per_peer, label="embedding_alltoall_fwd")
    b.compute(341, "bottom_mlp_fwd")
    b.compute(209, "interaction_fwd")
    b.compute(455, "top_mlp_fwd")
    b.compute(910, "top_mlp_bwd")
    top = b.allreduce("world", TOP_MLP_GRADIENTS, blocking=False, label="top_mlp_allreduce")
    b.compute(209, "interaction_bwd")
    b.compute(682, "bottom_mlp_bwd")
    bottom = b.allreduce(
        "world", BOTTOM_MLP_GRADIENTS, blocking=False, label="bottom_mlp_allreduce"
    )
    b.collective("alltoall", "world", per_peer, label="embedding_alltoall_bwd")
    b.compute(190, "embedding_bwd")
    b.wait(top, bottom, label="waitall")
    return b.ops


class DLRM(Model):
    name = "dlrm"
    description = "DLRM: embedding all-to-all x MLP data parallelism"
    order = 70
    batch_definition = (
        "global batch = 2048 at every process count (reference; per-rank compute is "
        "fixed too, so speedup = t(P1) / t(P))"
    )
    counts = Counts(0, 1, 2, 20)

    def _build(self, req: BuildRequest) -> Workload:
        world_size, params, options, _ = req
        if world_size < 1 or ALLTOALL_TOTAL_ELEMS % world_size:
            valid = [1 << k for k in range(19)]
            near = {
                max([v for v in valid if v <= world_size], default=1),
                min([v for v in valid if v >= world_size], default=valid[-1]),
            }
            raise LayoutError(
                f"{self.name}: the world size must divide {ALLTOALL_TOTAL_ELEMS} "
                f"(got {world_size}); nearest valid world sizes: "
                f"{', '.join(map(str, sorted(near)))}"
            )

        return self.workload(
            world_size,
            params,
            {"world": world_groups(world_size)},
            [Phase("iteration", every_rank(lambda: dlrm_program(world_size, options)))],
            info={
                "global_batch": GLOBAL_BATCH,
                "alltoall_elems_per_peer": ALLTOALL_TOTAL_ELEMS // world_size,
            },
            summary=[("world_size", world_size), ("global_batch", GLOBAL_BATCH)],
        )
