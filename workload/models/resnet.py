"""Data-parallel ResNets: ResNet-50 (allreduce and ring phases) and ResNet-152
(backward buckets overlapped with non-blocking allreduces)."""

from __future__ import annotations

from ..layout import LayoutError, world_groups
from ..ops import Op
from ..program import BuildOptions, Phase, ProgramBuilder, Workload, every_rank
from .base import PHASE, RANK, Arg, BuildRequest, Counts, Model

RESNET50_MESSAGES = (3104745, 4461568, 4462592, 4986880, 4468736, 4074560)
# The reference's non-aggregated branch (resnet50.cpp, NUM 161): one message per
# trainable tensor, from the classifier back to the first convolution (elements); the
# same 25,559,081 parameters as the six aggregated messages.
RESNET50_TENSORS = (
    1001, 2050048, 2048, 2048, 1048576, 512, 512, 2359296, 512, 512,
    1048576, 2048, 2048, 1048576, 512, 512, 2359296, 512, 512, 1048576,
    2048, 2048, 1048576, 512, 512, 2359296, 512, 512, 524288, 2048,
    2048, 2097152, 1024, 1024, 262144, 256, 256, 589824, 256, 256,
    262144, 1024, 1024, 262144, 256, 256, 589824, 256, 256, 262144,
    1024, 1024, 262144, 256, 256, 589824, 256, 256, 262144, 1024,
    1024, 262144, 256, 256, 589824, 256, 256, 262144, 1024, 1024,
    262144, 256, 256, 589824, 256, 256, 262144, 1024, 1024, 262144,
    256, 256, 589824, 256, 256, 131072, 1024, 1024, 524288, 512,
    512, 65536, 128, 128, 147456, 128, 128, 65536, 512, 512,
    65536, 128, 128, 147456, 128, 128, 65536, 512, 512, 65536,
    128, 128, 147456, 128, 128, 65536, 512, 512, 65536, 128,
    128, 147456, 128, 128, 32768, 512, 512, 131072, 256, 256,
    16384, 64, 64, 36864, 64, 64, 16384, 256, 256, 16384,
    64, 64, 36864, 64, 64, 16384, 256, 256, 16384, 64,
    64, 36864, 64, 64, 4096, 256, 256, 16384, 64, 64,
    9408,
)  # fmt: skip

RESNET152_BUCKETS = (
    6511592,
    6567936,
    5905920,
    6113280,
    6176256,
    6112768,
    6176256,
    6112768,
    5321216,
    5194816,
)
RESNET152_LOCAL_BATCH = 128
RESNET152_FORWARD_US = 119000.0
RESNET152_BACKWARD_US = 23800.0

# Strong scaling: world size -> (local batch, forward us, backward us per bucket).
RESNET152_STRONG = {
    256: (128, 119000.0, 23800.0),
    512: (64, 63000.0, 12600.0),
    1024: (32, 36000.0, 7200.0),
    2048: (16, 27667.0, 5533.0),
}
STRONG_ROWS = sorted(RESNET152_STRONG)  # 256, 512, 1024, 2048


class ResNet50(Model):
    name = "resnet50"
    description = "ResNet-50: data parallelism, an allreduce phase then a ring phase"
    order = 30
    no_batch_reason = (
        "the reference publishes no batch size (nor compute) for ResNet-50 and times "
        "two separate phases, so no throughput can be defined; use resnet152 or another model"
    )
    counts = Counts(10, 512, 2, 10)
    per_tensor_available = True

    def _build(self, req: BuildRequest) -> Workload:
        world_size, params, options, _ = req
        messages = RESNET50_TENSORS if options.per_tensor else RESNET50_MESSAGES

        def allreduce_phase(rank: int) -> list[Op]:
            b = ProgramBuilder(options)
            for m in messages:
                b.allreduce("world", m, label="grad_allreduce")
            return b.ops

        def ring_phase(rank: int) -> list[Op]:
            b = ProgramBuilder(options)
            left, right = (rank - 1) % world_size, (rank + 1) % world_size
            for m in messages:
                r = b.recv(left, m, tag=0, group="world", blocking=False, label="ring_recv")
                b.send(right, m, tag=0, group="world", label="ring_send")
                b.wait(r)
            return b.ops

        total = sum(RESNET50_MESSAGES)
        return self.workload(
            world_size,
            params,
            {"world": world_groups(world_size)},
            [Phase("allreduce", allreduce_phase), Phase("ring", ring_phase)],
            info={"total_params": total},
            summary=[
                ("Rank", RANK),
                ("world_size", world_size),
                ("phase", PHASE),
                ("total_params", total),
            ],
            summary_all_ranks=True,
        )


def resnet152_program(options: BuildOptions, forward_us: float, backward_us: float) -> list[Op]:
    b = ProgramBuilder(options)
    b.compute(forward_us, "forward")
    reqs: list[int | None] = []
    for i, bucket in enumerate(RESNET152_BUCKETS):
        if i > 1:
            b.testany(reqs)
        b.compute(backward_us, "backward")
        reqs.append(b.allreduce("world", bucket, blocking=False, label="grad_allreduce"))
    b.wait(*reqs, label="waitall")
    return b.ops


class ResNet152(Model):
    name = "resnet152"
    description = "ResNet-152: data parallelism with compute/communication overlap"
    order = 40
    batch_definition = "global batch = 128 per process x P (reference)"
    strong_scaling_hint = "; use resnet152_scal, whose strong-scaling table shrinks the local batch"
    counts = Counts(8, 128, 1, 5)

    def timings(self, world_size: int, params: dict[str, int]) -> tuple[int, float, float]:
        return RESNET152_LOCAL_BATCH, RESNET152_FORWARD_US, RESNET152_BACKWARD_US

    def _build(self, req: BuildRequest) -> Workload:
        world_size, params, options, _ = req
        local_batch, fwd, bwd = self.timings(world_size, params)
        total = sum(RESNET152_BUCKETS)

        return self.workload(
            world_size,
            params,
            {"world": world_groups(world_size)},
            [Phase("iteration", every_rank(lambda: resnet152_program(options, fwd, bwd)))],
            info={
                "total_params": total,
                "local_batch": local_batch,
                "global_batch": local_batch * world_size,
                "data_shards": world_size,
                "forward_us": fwd,
                "backward_us_per_bucket": bwd,
            },
            summary=[
                ("world_size", world_size),
                ("data_shards", world_size),
                ("total_params", total),
                ("global_batch", local_batch * world_size),
            ],
        )


class ResNet152Strong(ResNet152):
    name = "resnet152_scal"
    flags = (
        Arg("scaling_size", 0, "table row to emulate (256/512/1024/2048); default: the world size"),
    )
    description = (
        "ResNet-152 strong scaling: global batch 32768 over 256/512/1024/2048 ranks "
        "(--scaling-size picks the row on a smaller machine)"
    )
    order = 50
    batch_definition = "global batch = the strong-scaling table's local batch x P (reference)"
    strong_scaling = "the reference's table, through --scaling-size"
    strong_scaling_flag = "scaling_size"

    @staticmethod
    def row(world_size: int, params: dict[str, int]) -> int:
        """The table row (world size of the reference's strong-scaling table) a run on
        ``world_size`` ranks emulates: ``--scaling-size``, else the world size."""
        return params.get("scaling_size") or world_size

    def timings(self, world_size: int, params: dict[str, int]) -> tuple[int, float, float]:
        size = self.row(world_size, params)
        if size not in RESNET152_STRONG:
            valid = sorted(RESNET152_STRONG)
            near = min(valid, key=lambda n: (abs(n - size), n))
            raise LayoutError(
                f"{self.name}: the strong-scaling table covers world sizes "
                f"{', '.join(map(str, valid))} only (got {size}); nearest valid world size: "
                f"{near} (or pass --scaling-size {near} to emulate it on fewer ranks)"
            )
        return RESNET152_STRONG[size]

    def _build(self, req: BuildRequest) -> Workload:
        wl = super()._build(req)
        row = self.row(req.world_size, req.params)
        # The row as it ran: with no --scaling-size the world size chose it, and the
        # global batch alone does not say which row a run on fewer ranks emulated.
        wl.info = {"scaling_size": row, **wl.info}
        wl.start_note = (
            f"emulating the strong-scaling row --scaling-size {row} (local batch "
            f"{wl.info['local_batch']}, global batch {wl.info['global_batch']})"
        )
        return wl

    def strong_anchor_flags(self, flags: dict[str, int]) -> dict[str, int]:
        return {**flags, "scaling_size": STRONG_ROWS[0]}

    def strong_point_flags(self, flags: dict[str, int], p: int, base: int) -> dict[str, int]:
        """Count ``p`` emulates the table row ``256 x p / P1`` (local batch 128 / (p / P1)),
        so the global batch stays 128 x P1; only p / P1 in 1, 2, 4, 8 exist."""
        row = STRONG_ROWS[0] * p / base
        if row not in RESNET152_STRONG:
            ok = ", ".join(str(base * r // STRONG_ROWS[0]) for r in STRONG_ROWS)
            raise ValueError(
                f"the strong-scaling table has rows for {ok} processes only "
                f"(P1 = {base} x 1, 2, 4, 8)"
            )
        return {**flags, "scaling_size": int(row)}

    def strong_note(self, flags: dict[str, int], base: int) -> str:
        return (
            f"P = {base} x (1, 2, 4, 8) emulates the table rows 256, 512, 1024, 2048 "
            f"(--scaling-size), local batch 128 / (P / {base}), global batch {128 * base}"
        )
