"""GPT-3 175B (data x tensor x pipeline) and GPT-3 MoE (data x expert x
pipeline), full iterations and single steady-state pipeline steps.

Both share one pipeline description: a GPipe schedule (all forwards, then all
backwards) whose every micro-batch is followed by two collectives of the
inner parallelism (tensor-parallel allreduces, or expert all-to-alls), then
the gradient allreduces of the outer groups.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..layout import LayoutError, block_groups, require_multiple, strided_groups
from ..ops import Op
from ..program import BuildOptions, Phase, ProgramBuilder, Workload
from .base import Arg, BuildRequest, Counts, Model

PIPELINE_ELEMS = 25165824  # hidden 12288 x sequence 2048 x micro-batch 1
TP_SHARDS = 4
TP_ALLREDUCE_ELEMS = 25165824
GPT3_DP_GRADIENTS = 452984832  # one shard of one layer
GPT3_FORWARD_US = 15915
GPT3_BACKWARD_US = 31830

EXPERTS = 16
MOE_ALLTOALL_PER_PEER = 25165824 // EXPERTS
MOE_EXPERT_GRADIENTS = 1207959552 // EXPERTS
MOE_ATTENTION_GRADIENTS = 603979776
# C integer arithmetic of the reference: 22367 + 41293/16 and 44734 + 82586/16.
MOE_FORWARD_US = 22367 + 41293 // 16
MOE_BACKWARD_US = 44734 + 82586 // 16

Inner = Callable[[ProgramBuilder], None]


@dataclass(frozen=True)
class Hybrid:
    """One rank's place in a pipeline x inner x data layout."""

    stage: int
    stages: int
    pred: int  # global rank of the previous stage (unused at stage 0)
    succ: int  # global rank of the next stage (unused at the last stage)


def gpipe_direction(
    b: ProgramBuilder,
    pos: int,
    stages: int,
    *,
    pred: int,
    succ: int,
    microbatches: int,
    compute_us: float,
    inner: Inner,
    phase: str,
) -> int | None:
    """All micro-batches of one direction; returns the last, unwaited send."""
    prev: int | None = None
    for i in range(microbatches):
        if pos > 0:
            b.recv(pred, PIPELINE_ELEMS, tag=i, group="pp", label=f"{phase}_recv")
        if pos < stages - 1:
            b.wait(prev, label=f"{phase}_send_wait")
        b.compute(compute_us, phase)
        if pos < stages - 1:
            prev = b.send(
                succ, PIPELINE_ELEMS, tag=i, group="pp", blocking=False, label=f"{phase}_send"
            )
        inner(b)
    return prev


def gpipe_program(
    h: Hybrid,
    microbatches: int,
    fwd_us: float,
    bwd_us: float,
    inner: Inner,
    outer: Inner,
    options: BuildOptions,
) -> list[Op]:
    b = ProgramBuilder(options)
    last_fwd = gpipe_direction(
        b,
        h.stage,
        h.stages,
        pred=h.pred,
        succ=h.succ,
        microbatches=microbatches,
        compute_us=fwd_us,
        inner=inner,
        phase="forward",
    )
    last_bwd = gpipe_direction(
        b,
        h.stages - 1 - h.stage,
        h.stages,
        pred=h.succ,
        succ=h.pred,
        microbatches=microbatches,
        compute_us=bwd_us,
        inner=inner,
        phase="backward",
    )
    if options.fix_quirks:
        # The reference never waits for the last forward and backward sends.
        b.wait(last_fwd, last_bwd, label="last_send_wait")
    outer(b)
    return b.ops


def one_step_program(
    h: Hybrid, fwd_us: float, bwd_us: float, inner: Inner, options: BuildOptions
) -> list[Op]:
    """A steady-state step: even stages run a forward, odd stages a backward."""
    b = ProgramBuilder(options)
    if h.stage % 2 == 0:
        peer, compute_us, phase = h.succ, fwd_us, "forward"
    else:
        peer, compute_us, phase = h.pred, bwd_us, "backward"
    r = b.recv(peer, PIPELINE_ELEMS, tag=0, group="pp", blocking=False, label="step_recv")
    b.compute(compute_us, phase)
    inner(b)
    b.send(peer, PIPELINE_ELEMS, tag=0, group="pp", label="step_send")
    b.wait(r, label="step_recv_wait")
    return b.ops


def _microbatches(params: dict[str, int], given: int | None, options: BuildOptions) -> int:
    stages, acc = params["stages"], params["acc_scale"]
    if given == 1 and not options.fix_quirks:
        # Reference quirk: with one argument the micro-batch count keeps its default.
        return 96 * 2
    return stages * acc


class _PipelineModel(Model):
    quirks_available = True  # unwaited last sends; one argument keeps 192 micro-batches
    args = (
        Arg("stages", 96, "pipeline stages (= layers)"),
        Arg("acc_scale", 2, "gradient accumulation: micro-batches = stages x acc_scale"),
    )
    one_step = False

    def _layout(self, req: BuildRequest, per_stage: int, what: str) -> tuple[int, int, int]:
        """Refuse a world size that is not a multiple of stages x ``per_stage`` (``what``
        names them) or an odd stage count for one step; returns (stages, acc_scale,
        micro-batches)."""
        world_size, params, options, given = req
        stages, acc = params["stages"], params["acc_scale"]
        require_multiple(
            self.name,
            world_size,
            stages * per_stage,
            f"the world size must be a multiple of stages x {what} = {stages * per_stage}",
        )
        self._check_one_step(stages)
        return stages, acc, _microbatches(params, given, options)

    def _program(
        self,
        place: Callable[[int], Hybrid],
        mb: int,
        compute_us: tuple[float, float],
        inner: Callable[[ProgramBuilder], None],
        outer: Callable[[ProgramBuilder], None],
        options: BuildOptions,
    ) -> Callable[[int], list[Op]]:
        """A rank's program: one steady-state step, or a GPipe iteration of ``mb``
        micro-batches; ``compute_us``: (forward, backward) per micro-batch."""
        fwd, bwd = compute_us
        if self.one_step:
            return lambda rank: one_step_program(place(rank), fwd, bwd, inner, options)
        return lambda rank: gpipe_program(place(rank), mb, fwd, bwd, inner, outer, options)

    @staticmethod
    def _pipeline_fields(world_size: int, stages: int) -> list[tuple[str, object]]:
        return [("world_size", world_size), ("layers", stages), ("stages", stages)]

    def _check_one_step(self, stages: int) -> None:
        if self.one_step and stages % 2:
            raise LayoutError(
                f"{self.name}: a pipeline step pairs even and odd stages, so "
                f"stages must be even (got {stages}); nearest valid: "
                f"{', '.join(map(str, sorted({max(2, stages - 1), stages + 1})))}"
            )


class GPT3(_PipelineModel):
    name = "gpt3"
    description = "GPT-3 175B: data x tensor (4 shards) x pipeline parallelism"
    order = 80
    batch_definition = "global batch = P x acc_scale / 4 (reference)"
    counts = Counts(8, 128, 0, 1)

    def _build(self, req: BuildRequest) -> Workload:
        world_size, params, options, _ = req
        stages, acc, mb = self._layout(req, TP_SHARDS, f"{TP_SHARDS} tensor shards")
        replica = stages * TP_SHARDS
        # Inside a replica of stages x 4 consecutive ranks, tensor rank t holds the
        # pipeline block [t*stages, (t+1)*stages), so pipeline groups are plain blocks.
        tp = [
            tuple(base + s + t * stages for t in range(TP_SHARDS))
            for base in range(0, world_size, replica)
            for s in range(stages)
        ]
        groups = {
            "pp": block_groups(world_size, stages),
            "tp": tp,
            "dp": strided_groups(world_size, replica),
        }

        def inner(b: ProgramBuilder) -> None:
            for _ in range(2):
                b.allreduce("tp", TP_ALLREDUCE_ELEMS, label="tp_allreduce")

        def outer(b: ProgramBuilder) -> None:
            b.allreduce("dp", GPT3_DP_GRADIENTS, label="dp_grad_allreduce")

        def place(rank: int) -> Hybrid:
            stage = (rank % replica) % stages
            return Hybrid(stage, stages, rank - 1, rank + 1)

        compute_us = (GPT3_FORWARD_US, GPT3_BACKWARD_US)
        program = self._program(place, mb, compute_us, inner, outer, options)

        # The reference's all-integer C expression: 1811939328/1024*layers/1024/1024.
        total_b = 1811939328 // 1024 * stages // 1024 // 1024
        global_batch = world_size * acc // 4

        return self.workload(
            world_size,
            params,
            groups,
            [Phase("step" if self.one_step else "iteration", program)],
            info={
                "total_params_billions": total_b,
                "micro_batches": mb,
                "global_batch": global_batch,
                "data_shards": world_size // replica,
            },
            summary=[
                *self._pipeline_fields(world_size, stages),
                ("micro_batches", mb),
                ("total_params", f"{total_b}B"),
                ("global_batch", global_batch),
            ],
        )


class GPT3MoE(_PipelineModel):
    name = "gpt3_moe"
    description = "GPT-3 MoE: data x expert (16 experts) x pipeline parallelism"
    order = 100
    batch_definition = "global batch = P x acc_scale (reference)"
    counts = Counts(4, 128, 0, 1)

    def _build(self, req: BuildRequest) -> Workload:
        world_size, params, options, _ = req
        stages, acc, mb = self._layout(req, EXPERTS, f"{EXPERTS} experts")
        dp = strided_groups(world_size, stages)
        moe, ep = [], []
        for g in dp:
            moe += [g[k : k + EXPERTS] for k in range(0, len(g), EXPERTS)]
            ep += [g[j::EXPERTS] for j in range(EXPERTS)]
        groups = {"pp": block_groups(world_size, stages), "dp": dp, "moe": moe, "ep": ep}

        def inner(b: ProgramBuilder) -> None:
            for _ in range(2):
                b.collective("alltoall", "moe", MOE_ALLTOALL_PER_PEER, label="moe_alltoall")

        def outer(b: ProgramBuilder) -> None:
            b.allreduce("ep", MOE_EXPERT_GRADIENTS, label="expert_grad_allreduce")
            b.allreduce("dp", MOE_ATTENTION_GRADIENTS, label="attention_grad_allreduce")

        def place(rank: int) -> Hybrid:
            return Hybrid(rank % stages, stages, rank - 1, rank + 1)

        compute_us = (MOE_FORWARD_US, MOE_BACKWARD_US)
        program = self._program(place, mb, compute_us, inner, outer, options)

        global_batch = world_size * acc

        return self.workload(
            world_size,
            params,
            groups,
            [Phase("step" if self.one_step else "iteration", program)],
            info={"experts": EXPERTS, "micro_batches": mb, "global_batch": global_batch},
            summary=[
                *self._pipeline_fields(world_size, stages),
                ("experts", EXPERTS),
                ("micro_batches", mb),
                ("global_batch", global_batch),
            ],
        )


def _one_pipe_step(base: type[_PipelineModel], name: str, order: int) -> type[_PipelineModel]:
    """``base`` timing one steady-state pipeline step instead of an iteration."""
    label = base.description.split(":")[0]
    return type(
        base.__name__ + "OnePipeStep",
        (base,),
        {
            "__module__": __name__,
            "name": name,
            "description": f"{label}: one steady-state pipeline step (needs an even number "
            "of stages)",
            "order": order,
            "no_batch_reason": "it times one steady-state pipeline step, not a training "
            f"iteration, so no throughput can be defined; use {base.name}",
            "one_step": True,
            # A step's rank programs have neither quirk of the iteration (it waits for its
            # send and runs no micro-batch loop): --fix-quirks would change nothing run.
            "quirks_available": False,
            "no_quirks_reason": "a step's rank programs have neither quirk of "
            f"{base.name}'s iteration: it waits for its send and runs no micro-batch loop; "
            "only the printed micro-batch count would change",
            "counts": replace(base.counts, default_warmup=1, default_runs=5),
        },
    )


GPT3OnePipeStep = _one_pipe_step(GPT3, "gpt3_one_pipe_step", order=90)
GPT3MoEOnePipeStep = _one_pipe_step(GPT3MoE, "gpt3_moe_one_pipe_step", order=110)
