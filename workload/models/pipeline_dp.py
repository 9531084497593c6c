"""Pipeline x data parallelism without compute: GPT-2-large and BERT-large.

Layout: stage = rank % stages; the data-parallel group is the ranks of one
stage; the pipeline group is ``stages`` consecutive ranks. Each iteration
sends every micro-batch's activations forward then its gradients backward,
then allreduces the stage's gradients in the data-parallel group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..layout import LayoutError, block_groups, require_multiple, strided_groups
from ..ops import Op
from ..program import BuildOptions, Phase, ProgramBuilder, Workload
from .base import RANK, Arg, BuildRequest, Counts, Model


@dataclass(frozen=True)
class PipelineSpec:
    """Sizes in float32 elements."""

    pipeline_elems: int
    first_layer: tuple[int, ...]  # aggregated: one message; per tensor: the tensors
    middle_layer: tuple[int, ...]
    last_layer: tuple[int, ...]


def stage_gradients(
    spec: PipelineSpec, stage: int, stages: int, layers_per_stage: int
) -> list[int]:
    """The stage's gradient messages in allreduce order (elements)."""
    middle = list(spec.middle_layer)
    if stage == 0:
        return list(spec.first_layer) + middle * (layers_per_stage - 1)
    if stage == stages - 1:
        return middle * (layers_per_stage - 1) + list(spec.last_layer)
    return middle * layers_per_stage


def pipeline_program(
    rank: int,
    stages: int,
    microbatches: int,
    spec: PipelineSpec,
    grads: list[int],
    dp_size: int,
    options: BuildOptions,
) -> list[Op]:
    b = ProgramBuilder(options)
    stage = rank % stages
    base = rank - stage
    nxt, prv = base + stage + 1, base + stage - 1
    n = spec.pipeline_elems
    if stages > 1:
        for i in range(microbatches):
            _exchange(
                b, stage, stages, succ=nxt, pred=prv, n=n, tag=i, options=options, phase="fwd"
            )
        for i in range(microbatches):
            # Backward mirrors forward: the roles of predecessor and successor swap.
            _exchange(
                b,
                stages - 1 - stage,
                stages,
                succ=prv,
                pred=nxt,
                n=n,
                tag=i,
                options=options,
                phase="bwd",
            )
    if dp_size > 1:
        for g in grads:
            b.allreduce("dp", g, label="grad_allreduce")
    return b.ops


def _exchange(
    b: ProgramBuilder,
    pos: int,
    stages: int,
    *,
    succ: int,
    pred: int,
    n: int,
    tag: int,
    options: BuildOptions,
    phase: str,
) -> None:
    """One micro-batch of one direction; pos is the position along that direction."""
    if pos == 0:
        b.send(succ, n, tag=tag, group="pp", label=f"{phase}_send")
    elif pos == stages - 1:
        b.recv(pred, n, tag=tag, group="pp", label=f"{phase}_recv")
    elif options.fix_quirks:
        b.recv(pred, n, tag=tag, group="pp", label=f"{phase}_recv")
        b.send(succ, n, tag=tag, group="pp", label=f"{phase}_send")
    else:
        # Reference quirk: send and receive posted together, no data dependency.
        s = b.send(succ, n, tag=tag, group="pp", blocking=False, label=f"{phase}_send")
        r = b.recv(pred, n, tag=tag, group="pp", blocking=False, label=f"{phase}_recv")
        b.wait(s, r)


def pipeline_args(layers: int) -> tuple[Arg, ...]:
    """The reference's positional arguments, with its default layer count."""
    return (
        Arg("layers", layers, "transformer layers"),
        Arg("stages", 4, "pipeline stages"),
        Arg("microbatches", 8, "micro-batches per iteration"),
    )


class PipelineDataParallel(Model):
    quirks_available = True  # a middle stage's blocking send before its receive
    spec: PipelineSpec
    per_tensor_spec: PipelineSpec | None = None
    microbatch_samples = 1  # sequences in the micro-batch one pipeline message carries
    sequence_tokens = 0  # tokens of one sequence (the reference's, for the batch text)

    @property
    def batch_definition(self) -> str:  # type: ignore[override]
        n = self.microbatch_samples
        seq = "sequence" if n == 1 else "sequences"
        return (
            f"samples = micro-batches x {n} {seq} x data shards (P / stages); the "
            f"reference's pipeline message is a micro-batch of {n} {seq} of "
            f"{self.sequence_tokens} tokens"
        )

    # Defaults: ~2.5 min for the headline `mpirun -n 32 python -m proxies.gpt2 64 8` on
    # 2 cores (measured: 50 s first-touch warm-up, then ~9.3 s per iteration).
    counts = Counts(10, 256, 1, 10)

    def _build(self, req: BuildRequest) -> Workload:
        world_size, params, options, _ = req
        layers, stages, mb = params["layers"], params["stages"], params["microbatches"]
        require_multiple(
            self.name, world_size, stages, f"the world size must be a multiple of stages={stages}"
        )
        lps = layers // stages
        if lps < 1:
            raise LayoutError(f"{self.name}: layers={layers} must be >= stages={stages}")
        if options.per_tensor:
            if self.per_tensor_spec is None:
                raise ValueError(
                    f"{self.name}: per-tensor gradient messages are not available "
                    "(the project has no tensor list for it); drop --per-tensor"
                )
            spec = self.per_tensor_spec
        else:
            spec = self.spec
        dp_size = world_size // stages
        grads = {s: stage_gradients(spec, s, stages, lps) for s in range(stages)}
        agg = self.spec
        total = sum(agg.first_layer) + sum(agg.last_layer) + sum(agg.middle_layer) * (layers - 2)

        def program(rank: int) -> list[Op]:
            return pipeline_program(rank, stages, mb, spec, grads[rank % stages], dp_size, options)

        return self.workload(
            world_size,
            params,
            {
                "pp": block_groups(world_size, stages),
                "dp": strided_groups(world_size, stages),
            },
            [Phase("iteration", program)],
            info={
                "total_params": total,
                "layers_per_stage": lps,
                "micro_batches": mb,
                "data_shards": dp_size,
            },
            summary=[
                ("Rank", RANK),
                ("world_size", world_size),
                ("layers", layers),
                ("stages", stages),
                ("total_params", total),
            ],
            summary_all_ranks=True,
        )

    def samples_per_iteration(
        self, world_size: int, params: dict[str, Any], info: dict[str, Any]
    ) -> float | None:
        """Micro-batches x the micro-batch the pipeline message carries x data shards."""
        mb, shards = info.get("micro_batches"), info.get("data_shards")
        if mb is None or shards is None:
            return None
        return float(mb * self.microbatch_samples * shards)


# Per-tensor gradients of the reference (elements): a middle stage's tensors; the first
# stage lists the token and position embeddings before them; the last stage lists the
# output embedding and a layer-norm among them, and one more layer-norm at the end.
_GPT2_MIDDLE = (1280, 4915200, 1638400, 1280, 6553600, 6553600, 1280, 3840, 1280, 1280, 5120, 1280)
_GPT2_FIRST = (64328960, 1310720, *_GPT2_MIDDLE)
_GPT2_LAST = (*_GPT2_MIDDLE[:7], 64328960, 1280, *_GPT2_MIDDLE[7:], 1280)


class GPT2(PipelineDataParallel):
    name = "gpt2"
    description = "GPT-2-large: pipeline x data parallelism (communication only)"
    order = 10
    sequence_tokens = 632
    args = pipeline_args(layers=48)
    spec = PipelineSpec(808960, (85317120,), (19677440,), (84008960,))
    per_tensor_spec = PipelineSpec(808960, _GPT2_FIRST, _GPT2_MIDDLE, _GPT2_LAST)
    per_tensor_available = True


# BERT-large's per-tensor gradients (elements), the reference's non-aggregated lists
# (bert_large.cpp): the first stage's layer leads with the 31,254,528-element token
# embedding, the last stage's holds it again (the tied output embedding) and ends with
# the heads' small tensors. They sum to the aggregated messages exactly.
_BERT_MIDDLE = (
    *(1048576,) * 4, 4194304, 4194304, *(1024,) * 6, 4096, 1024, 1024, 1024
)  # fmt: skip
_BERT_FIRST = (
    31254528, 524288, 2048, *(1048576,) * 4, 4194304, 4194304, *(1024,) * 8, 4096,
    1024, 1024, 1024,
)  # fmt: skip
_BERT_LAST = (
    *(1048576,) * 4, 4194304, 4194304, 1048576, 1048576, 31254528, 2048, *(1024,) * 6,
    4096, *(1024,) * 4, 30522, 1024, 1024, 1024, 2,
)  # fmt: skip


class BERT(PipelineDataParallel):
    name = "bert"
    description = "BERT-large: pipeline x data parallelism (communication only)"
    order = 20
    microbatch_samples = 8
    sequence_tokens = 128
    args = pipeline_args(layers=24)
    spec = PipelineSpec(1049600, (44379136,), (12596224,), (45984572,))
    per_tensor_spec = PipelineSpec(1049600, _BERT_FIRST, _BERT_MIDDLE, _BERT_LAST)
    per_tensor_available = True
