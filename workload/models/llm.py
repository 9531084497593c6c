"""``llm``: a decoder-only transformer trained with tensor, pipeline, data and expert
parallelism, built from its dimensions (or a preset) and a parallel layout.

Message sizes follow Megatron-LM's analyses (Shoeybi et al. 2019; Narayanan et al.
2021; Korthikanti et al. 2022) and ZeRO's (Rajbhandari et al. 2020); the formulas are
in docs/llm.md and the module docstring of :mod:`.transformer`. Activations and their
gradients are bf16 (2 bytes); gradients are reduced in ``grad_bytes`` bytes per value
(2: bf16, as ZeRO's analysis counts; 4: fp32, Megatron-LM's default). Byte counts
become the project's 4-byte elements rounded up.

Ranks are numbered tensor-parallel fastest, then data-parallel, then pipeline stage
(Megatron-LM's order): rank = t + tp (d + dp s). Expert-parallel groups are ``ep``
consecutive data-parallel ranks; the expert weights' data-parallel group ("edp") is
the data-parallel ranks that hold the same experts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..layout import LayoutError, require_multiple
from ..ops import Op
from ..program import BuildOptions, Phase, ProgramBuilder, Workload
from ..units import ELEM_BYTES
from .base import Arg, BuildRequest, Counts, Model
from .pipeline_schedule import PIPELINE_SCHEDULES, stage_schedule
from .transformer import PRESETS, TransformerShape

ACT_BYTES = 2  # bf16 activations and activation gradients
PARAM_BYTES = 2  # bf16 weights, as ZeRO all-gathers them
CROSS_ENTROPY_ALLREDUCES = 3  # max, sum of exponentials, target logit: b s fp32 each
ZERO_STAGES = (0, 1, 2, 3)
SHAPE_FLAGS = ("layers", "hidden", "heads", "kv_heads", "ffn", "seq", "vocab", "experts", "top_k")

MAX_LAYERS = 10_000
"""The most transformer layers (the largest models have a few hundred): every stage's
program holds a unit per layer, built before the memory check can weigh it (a billion
layers ran out of memory in a traceback)."""

MAX_DIMENSION = 10_000_000
"""The largest of the other shape values (hidden, heads, ffn, seq, vocab, experts): a
layout check that does not hold looks for the nearest that would among their
divisors."""


def elems(nbytes: int) -> int:
    """Bytes as the project's 4-byte elements, rounded up."""
    return -(-nbytes // ELEM_BYTES)


@dataclass(frozen=True)
class Layout:
    """The parallel layout and training settings of one build (all checked)."""

    shape: TransformerShape
    tp: int
    pp: int
    dp: int
    ep: int
    sp: bool
    micro_batch: int  # sequences per micro-batch
    microbatches: int  # per pipeline, per iteration
    schedule: str
    zero: int
    bucket_bytes: int
    overlap: bool
    recompute: bool
    flops_per_s: float  # sustained per device: peak x efficiency
    grad_bytes: int

    # -- message sizes, bytes ------------------------------------------------------------
    @property
    def activation_bytes(self) -> int:
        """b s h x 2: one micro-batch's hidden states."""
        return self.micro_batch * self.shape.seq * self.shape.hidden * ACT_BYTES

    @property
    def pipeline_bytes(self) -> int:
        """Between stages: the activations, split over tp with sequence parallelism."""
        return self.activation_bytes // self.tp if self.sp else self.activation_bytes

    @property
    def alltoall_bytes_per_peer(self) -> int:
        """Per expert-parallel peer, each way of a dispatch or combine: b s k h x 2 / ep
        (uniform routing; the tokens are split over tp with sequence parallelism)."""
        tokens = self.micro_batch * self.shape.seq // (self.tp if self.sp else 1)
        return tokens * self.shape.top_k * self.shape.hidden * ACT_BYTES // self.ep

    # -- weights held by one rank --------------------------------------------------------
    def layer_weights(self) -> tuple[int, int]:
        """(dense, expert) weights of one layer on one rank: the attention and dense MLP
        split over tp (the router whole); each of E / ep experts split over tp."""
        s = self.shape
        if s.moe:
            experts = s.experts // self.ep * s.expert_params // self.tp
            return s.attention_params // self.tp + s.router_params, experts
        return (s.attention_params + s.expert_params) // self.tp, 0

    @property
    def embedding_weights(self) -> int:
        """V h / tp: a vocabulary-parallel embedding (or output layer) shard."""
        return self.shape.embedding_params // self.tp

    # -- compute, microseconds -----------------------------------------------------------
    def us(self, flops: int) -> float:
        """Microseconds of ``flops`` split over tp at the sustained rate."""
        return flops / self.tp / self.flops_per_s * 1e6


@dataclass(frozen=True)
class Unit:
    """A part of a stage whose weights are gathered and reduced together under ZeRO:
    the embedding, one layer, or the output layer."""

    kind: str  # "embedding", "layer" or "head"
    dense_weights: int
    expert_weights: int = 0


class _Buckets:
    """Gradient buckets of one reduction group: filled in backward order and issued
    when full (``bucket_bytes``), as PyTorch DDP and Megatron-LM do."""

    def __init__(self, bucket_bytes: int) -> None:
        self.bucket_bytes = bucket_bytes
        self.pending = 0

    def add(self, nbytes: int) -> list[int]:
        """Gradient bytes that became ready; returns the sizes of the buckets now full."""
        self.pending += nbytes
        full = []
        while self.pending >= self.bucket_bytes:
            full.append(self.bucket_bytes)
            self.pending -= self.bucket_bytes
        return full

    def flush(self) -> list[int]:
        rest, self.pending = self.pending, 0
        return [rest] if rest else []


def _flag(
    name: str, default: int | str, help: str, choices: tuple[str, ...] = (), real: bool = False
) -> Arg:
    return Arg(name, default, help, choices, real=real)


class LLM(Model):
    name = "llm"
    has_reference = False
    no_per_tensor_reason = "its gradients go in buckets of --bucket-mib, as DDP sends them"
    no_quirks_reason = "it has no reference proxy, hence no quirk to repair"
    description = (
        "a transformer LLM from its dimensions or a preset: tensor x pipeline x data "
        "(x expert) parallelism, 1F1B or GPipe, DDP or ZeRO-1/2/3"
    )
    order = 120
    batch_definition = "global batch = micro_batch x micro_batches x dp sequences"
    counts = Counts(0, 1, 1, 3)
    flags = (
        _flag("preset", "llama-3-8b", "model dimensions", tuple(PRESETS)),
        _flag("layers", 0, "transformer layers (0: the preset's)"),
        _flag("hidden", 0, "hidden size (0: the preset's)"),
        _flag("heads", 0, "attention heads (0: the preset's)"),
        _flag("kv_heads", 0, "key/value heads, grouped-query attention (0: the preset's)"),
        _flag("ffn", 0, "FFN (MLP) size (0: the preset's)"),
        _flag("seq", 0, "sequence length, tokens (0: the preset's)"),
        _flag("vocab", 0, "vocabulary size (0: the preset's)"),
        _flag("experts", 0, "MoE experts per layer (0: the preset's)"),
        _flag("top_k", 0, "experts per token (0: the preset's)"),
        _flag("tp", 1, "tensor-parallel size"),
        _flag("pp", 1, "pipeline stages"),
        _flag("dp", 0, "data-parallel size (0: world size / (tp x pp))"),
        _flag("ep", 1, "expert-parallel size (divides dp and experts)"),
        _flag(
            "sp",
            0,
            "1: sequence parallelism (reduce-scatter/all-gather instead of "
            "tensor-parallel allreduce)",
        ),
        _flag("micro_batch", 1, "sequences per micro-batch"),
        _flag("micro_batches", 0, "micro-batches per iteration and pipeline (0: 4 x pp)"),
        _flag("schedule", "1f1b", "pipeline schedule", PIPELINE_SCHEDULES),
        _flag("zero", 0, "0: DDP allreduce; 1, 2, 3: ZeRO stage"),
        _flag("bucket_mib", 25, "gradient bucket, MiB (2^20 bytes)"),
        _flag("overlap", 1, "1: gradient reductions overlap the backward pass"),
        _flag(
            "recompute",
            0,
            "1: full activation recomputation (each layer's forward, collectives too, "
            "again before its backward)",
        ),
        _flag("peak_tflops", 989, "device peak, TFLOP/s (989: H100 SXM dense bf16)", real=True),
        _flag("efficiency_pct", 50, "sustained share of the peak, percent", real=True),
        _flag("grad_bytes", 2, "bytes per gradient value reduced (2: bf16, 4: fp32)"),
    )

    # -- layout ----------------------------------------------------------------------------
    def layout(self, world_size: int, params: dict) -> Layout:
        """The checked layout of ``params`` on ``world_size`` ranks (LayoutError: the
        rule broken, in one line)."""
        shape = PRESETS[params["preset"]].with_overrides(**{k: int(params[k]) for k in SHAPE_FLAGS})
        tp, pp, ep = params["tp"], params["pp"], params["ep"]
        for name in ("tp", "pp", "ep", "micro_batch", "bucket_mib"):
            self._require(params[name] >= 1, f"{name} must be >= 1 (got {params[name]})")
        self._require(
            params["peak_tflops"] > 0, f"peak_tflops must be > 0 (got {params['peak_tflops']})"
        )
        for name in ("sp", "overlap", "recompute"):
            self._require(params[name] in (0, 1), f"{name} must be 0 or 1 (got {params[name]})")
        for name in (*SHAPE_FLAGS, "dp", "micro_batches"):
            self._require(params[name] >= 0, f"{name} must be >= 0 (got {params[name]})")
        for name in SHAPE_FLAGS:
            most = MAX_LAYERS if name == "layers" else MAX_DIMENSION
            got = getattr(shape, name)
            self._require(got <= most, f"{name} must be at most {most:,} (got {got})")
        self._require(
            params["zero"] in ZERO_STAGES, f"zero must be 0, 1, 2 or 3 (got {params['zero']})"
        )
        # DeepSpeed refuses these with its pipeline engine: ZeRO-2 keeps only a shard of
        # the gradients that pipeline micro-batches accumulate into, ZeRO-3 partitions the
        # weights the stages hold. (ZeRO-1, the optimizer's state, works with pp; so does
        # Megatron's distributed optimizer, which is ZeRO-1.)
        self._require(
            params["zero"] < 2 or pp == 1,
            f"zero = {params['zero']} with pp = {pp}: ZeRO-2 and ZeRO-3 do not work with "
            "pipeline parallelism (DeepSpeed refuses them); use --zero 1 or --pp 1",
        )
        self._require(
            params["grad_bytes"] in (2, 4),
            f"grad_bytes must be 2 or 4 (got {params['grad_bytes']})",
        )
        self._require(
            0 < params["efficiency_pct"] <= 100,
            f"efficiency_pct must be above 0 and at most 100 (got {params['efficiency_pct']})",
        )
        # The model's own rules first (their suggestions meet all of them), then the
        # world size, whose suggestion then takes a tp and pp that can work.
        s = shape
        sp = bool(params["sp"]) and tp > 1
        tp_divides = math.gcd(s.heads, s.kv_heads, s.ffn, s.seq if sp else 0)
        self._divides("hidden", s.hidden, "heads", s.heads, multiple_of=("kv_heads", s.kv_heads))
        self._divides("heads", s.heads, "kv_heads", s.kv_heads)
        self._divides("heads", s.heads, "tp", tp, common=tp_divides)
        self._divides("kv_heads", s.kv_heads, "tp", tp, common=tp_divides)
        self._divides("ffn", s.ffn, "tp", tp, common=tp_divides)
        self._divides("layers", s.layers, "pp", pp)
        if sp:
            self._divides("seq", s.seq, "tp", tp, common=tp_divides)
        require_multiple(
            self.name,
            world_size,
            tp * pp,
            f"the world size must be a multiple of tp x pp = {tp * pp}",
        )
        dp = params["dp"] or world_size // (tp * pp)
        self._require(
            tp * pp * dp == world_size,
            f"tp x pp x dp = {tp} x {pp} x {dp} = {tp * pp * dp} must equal the world size "
            f"({world_size})",
        )
        if s.moe:
            self._require(
                tp == 1 or sp,
                f"MoE with tp = {tp} needs sequence parallelism (--sp 1), as Megatron "
                "requires: without it every tensor-parallel rank would send all tokens",
            )
            self._require(
                1 <= s.top_k <= s.experts,
                f"top_k must be 1..experts = {s.experts} (got {s.top_k})",
            )
            # (ep must divide both: a suggestion for the one divides the other too)
            self._divides("experts", s.experts, "ep", ep, common=dp)
            self._divides("dp", dp, "ep", ep, common=s.experts)
        else:
            self._require(
                ep == 1,
                f"ep = {ep} needs experts (the {params['preset']} shape "
                "has none; give --experts and --top-k)",
            )
            self._require(
                not params["top_k"],
                f"top_k = {params['top_k']} needs experts (the {params['preset']} shape "
                "has none; give --experts too)",
            )
        peak = params["peak_tflops"] * 1e12
        return Layout(
            shape=s,
            tp=tp,
            pp=pp,
            dp=dp,
            ep=ep,
            sp=sp,
            micro_batch=params["micro_batch"],
            microbatches=params["micro_batches"] or 4 * pp,
            schedule=params["schedule"],
            zero=params["zero"],
            bucket_bytes=params["bucket_mib"] << 20,
            overlap=bool(params["overlap"]),
            recompute=bool(params["recompute"]),
            flops_per_s=peak * params["efficiency_pct"] / 100,
            grad_bytes=params["grad_bytes"],
        )

    def _require(self, ok: bool, rule: str) -> None:
        if not ok:
            raise LayoutError(f"{self.name}: {rule}")

    def _divides(
        self,
        big_name: str,
        big: int,
        small_name: str,
        small: int,
        common: int = 0,
        multiple_of: tuple[str, int] = ("", 1),
    ) -> None:
        """Refuse unless ``small`` divides ``big``, suggesting the nearest values that
        divide ``common`` too (every size the same option must divide; 0: ``big`` alone)
        and are multiples of ``multiple_of`` (its option's name and value)."""
        if small < 1 or big % small:
            limit = math.gcd(big, common)
            of_name, of = multiple_of
            near = sorted(
                {d for d in range(1, limit + 1) if limit % d == 0 and d % of == 0},
                key=lambda d: (abs(d - small), d),
            )[:2]
            hint = (
                f"nearest valid {small_name}: {', '.join(map(str, sorted(near)))}"
                if near
                # (only with a multiple_of: 1 divides everything)
                else f"no {small_name} value both divides {big} and is a multiple of "
                f"{of_name} ({of})"
            )
            raise LayoutError(
                f"{self.name}: {big_name} ({big}) must be a multiple of {small_name} "
                f"({small}); {hint}"
            )

    # -- groups ----------------------------------------------------------------------------
    @staticmethod
    def groups(lay: Layout) -> dict[str, list[tuple[int, ...]]]:
        tp, dp, pp = lay.tp, lay.dp, lay.pp
        world = tp * dp * pp

        def rank(t: int, d: int, s: int) -> int:
            return t + tp * (d + dp * s)

        dpg = [tuple(rank(t, d, s) for d in range(dp)) for s in range(pp) for t in range(tp)]
        groups = {
            "tp": [tuple(range(b, b + tp)) for b in range(0, world, tp)],
            "dp": dpg,
            "pp": [tuple(rank(t, d, s) for s in range(pp)) for d in range(dp) for t in range(tp)],
        }
        if lay.shape.moe:
            groups["ep"] = [g[k : k + lay.ep] for g in dpg for k in range(0, dp, lay.ep)]
            groups["edp"] = [g[j :: lay.ep] for g in dpg for j in range(lay.ep)]
        if lay.shape.tied_embeddings and pp > 1:
            pairs = [(rank(t, d, 0), rank(t, d, pp - 1)) for d in range(dp) for t in range(tp)]
            middle = [(r,) for r in range(rank(0, 0, 1), rank(0, 0, pp - 1))]
            groups["embed"] = pairs + middle
        return groups

    # -- one rank's iteration ------------------------------------------------------------
    def units(self, lay: Layout, stage: int) -> list[Unit]:
        """The stage's parts in forward order."""
        per_stage = lay.shape.layers // lay.pp
        dense, expert = lay.layer_weights()
        out = []
        if stage == 0:
            out.append(Unit("embedding", lay.embedding_weights))
        out += [Unit("layer", dense, expert) for _ in range(per_stage)]
        if stage == lay.pp - 1:
            # A tied output layer on the embedding's own stage shares its weights.
            shared = lay.shape.tied_embeddings and lay.pp == 1
            out.append(Unit("head", 0 if shared else lay.embedding_weights))
        return out

    def program(self, lay: Layout, rank: int, options: BuildOptions) -> list[Op]:
        return _RankProgram(lay, rank, self.units(lay, rank // (lay.tp * lay.dp)), options).build()

    # -- the model -------------------------------------------------------------------------
    def _build(self, req: BuildRequest) -> Workload:
        world_size, params, options, _ = req
        lay = self.layout(world_size, params)

        def program(rank: int) -> list[Op]:
            return self.program(lay, rank, options)

        s = lay.shape
        global_batch = lay.micro_batch * lay.microbatches * lay.dp
        tokens = global_batch * s.seq
        fwd = s.layers * (s.attention_flops(1) + s.mlp_flops(1)) + s.logits_flops(1)
        model_flops = 3 * fwd * global_batch  # forward + backward, no recomputation
        info = {
            "preset": params["preset"],
            # The shape that ran (params hold 0 for "the preset's"):
            "shape": {k: getattr(s, k) for k in SHAPE_FLAGS},
            "total_params_billions": round(s.total_params / 1e9, 3),
            "tp": lay.tp,
            "pp": lay.pp,
            "dp": lay.dp,
            "ep": lay.ep,
            "sequence_parallel": lay.sp,
            "micro_batches": lay.microbatches,
            "global_batch": global_batch,
            "tokens_per_iteration": tokens,
            "model_flops_per_iteration": model_flops,
            "peak_flops_per_device": params["peak_tflops"] * 1e12,
            "zero": lay.zero,
            "schedule": lay.schedule,
        }
        return self.workload(
            world_size,
            params,
            self.groups(lay),
            [Phase("iteration", program)],
            info=info,
            summary=[
                ("world_size", world_size),
                ("model", params["preset"]),
                ("params", f"{s.total_params / 1e9:.2f}B"),
                ("tp", lay.tp),
                ("pp", lay.pp),
                ("dp", lay.dp),
                ("micro_batches", lay.microbatches),
                ("global_batch", global_batch),
            ],
        )


class _RankProgram:
    """Builds one rank's iteration: the pipeline schedule's passes, each unit's
    collectives, and the gradient reductions."""

    def __init__(self, lay: Layout, rank: int, units: list[Unit], options: BuildOptions):
        self.lay = lay
        self.b = ProgramBuilder(options)
        per_stage = lay.tp * lay.dp
        self.stage = rank // per_stage
        self.pred, self.succ = rank - per_stage, rank + per_stage
        self.units = units
        self.first, self.last = self.stage == 0, self.stage == lay.pp - 1
        moe_split = lay.shape.moe and lay.ep > 1
        # Expert gradients are reduced over "edp" when experts are spread over ep ranks.
        self.streams = {"dp": _Buckets(lay.bucket_bytes)}
        if moe_split:
            self.streams["edp"] = _Buckets(lay.bucket_bytes)
        self.sizes = {"dp": lay.dp, "edp": lay.dp // lay.ep}
        self.pending: list[int | None] = []

    # -- collectives of one unit -------------------------------------------------------
    def _tp_gather(self) -> None:
        if self.lay.sp:
            self.b.collective(
                "allgather",
                "tp",
                elems(self.lay.activation_bytes // self.lay.tp),
                label="sp_allgather",
            )

    def _tp_reduce(self) -> None:
        lay = self.lay
        if lay.tp == 1:
            return
        if lay.sp:
            self.b.collective(
                "reduce_scatter",
                "tp",
                elems(lay.activation_bytes // lay.tp),
                label="sp_reduce_scatter",
            )
        else:
            self.b.allreduce("tp", elems(lay.activation_bytes), label="tp_allreduce")

    def _alltoall(self, label: str) -> None:
        if self.lay.shape.moe and self.lay.ep > 1:
            self.b.collective(
                "alltoall", "ep", elems(self.lay.alltoall_bytes_per_peer), label=label
            )

    def _by_group(self, unit: Unit) -> dict[str, int]:
        """The unit's weights by the group that reduces their gradients."""
        if "edp" in self.streams:
            return {"dp": unit.dense_weights, "edp": unit.expert_weights}
        return {"dp": unit.dense_weights + unit.expert_weights}

    def _gather_weights(self, unit: Unit) -> None:
        """ZeRO-3: the unit's weights, gathered before use (bf16)."""
        if self.lay.zero != 3:
            return
        for group, weights in self._by_group(unit).items():
            n = self.sizes[group]
            if weights and n > 1:
                self.b.collective(
                    "allgather",
                    group,
                    elems(-(-weights * PARAM_BYTES // n)),
                    label="zero3_allgather",
                )

    def _forward_unit(self, unit: Unit) -> None:
        lay, b = self.lay, self.b
        mb = lay.micro_batch
        self._gather_weights(unit)
        if unit.kind == "embedding":
            self._tp_reduce()  # vocabulary-parallel lookup: partial sums
        elif unit.kind == "layer":
            self._layer_forward("forward")
        else:
            self._tp_gather()
            b.compute(lay.us(lay.shape.logits_flops(mb)), "logits_forward")
            if lay.tp > 1:
                n = elems(mb * lay.shape.seq * 4)
                for _ in range(CROSS_ENTROPY_ALLREDUCES):
                    b.allreduce("tp", n, label="cross_entropy_allreduce")

    def _layer_forward(self, what: str) -> None:
        """A transformer layer's forward: its compute and its collectives (``what``:
        "forward", or "recompute" when full recomputation runs it again in backward)."""
        lay, b = self.lay, self.b
        mb = lay.micro_batch
        self._tp_gather()
        b.compute(lay.us(lay.shape.attention_flops(mb)), f"attention_{what}")
        self._tp_reduce()
        self._tp_gather()
        self._alltoall(f"moe_dispatch{'' if what == 'forward' else '_' + what}")
        b.compute(lay.us(lay.shape.mlp_flops(mb)), f"mlp_{what}")
        self._alltoall(f"moe_combine{'' if what == 'forward' else '_' + what}")
        self._tp_reduce()

    def _backward_unit(self, unit: Unit, reduce_grads: bool) -> None:
        lay, b = self.lay, self.b
        mb, k = lay.micro_batch, 2  # a backward costs two forwards
        self._gather_weights(unit)
        if unit.kind == "layer":
            if lay.recompute:
                # Full recomputation: the layer's forward again, collectives and all (the
                # output layer and the embedding are not recomputed).
                self._layer_forward("recompute")
            self._tp_gather()
            self._alltoall("moe_combine_backward")
            b.compute(k * lay.us(lay.shape.mlp_flops(mb)), "mlp_backward")
            self._alltoall("moe_dispatch_backward")
            self._tp_reduce()
            self._tp_gather()
            b.compute(k * lay.us(lay.shape.attention_flops(mb)), "attention_backward")
            self._tp_reduce()
        elif unit.kind == "head":
            b.compute(k * lay.us(lay.shape.logits_flops(mb)), "logits_backward")
            self._tp_reduce()
        else:
            # The embedding's reduce-scatter into the sequence shards (with sequence
            # parallelism) has an all-gather as its backward: every tensor-parallel rank
            # updates its vocabulary shard from the whole sequence's gradient.
            self._tp_gather()
        if reduce_grads:
            self._grads_ready(unit)

    # -- gradient reduction --------------------------------------------------------------
    def _grads_ready(self, unit: Unit) -> None:
        lay = self.lay
        for group, weights in self._by_group(unit).items():
            nbytes = weights * lay.grad_bytes
            if lay.zero == 3:
                self._reduce(group, [nbytes] if nbytes else [])
            else:
                self._reduce(group, self.streams[group].add(nbytes))

    def _reduce(self, group: str, buckets: list[int]) -> None:
        lay, n = self.lay, self.sizes[group]
        if n == 1:
            return
        for nbytes in buckets:
            if lay.zero == 0:
                req = self.b.allreduce(
                    group, elems(nbytes), blocking=not lay.overlap, label="grad_allreduce"
                )
            else:
                req = self.b.collective(
                    "reduce_scatter",
                    group,
                    elems(-(-nbytes // n)),
                    blocking=not lay.overlap,
                    label="grad_reduce_scatter",
                )
            self.pending.append(req)

    def _flush_grads(self) -> None:
        for group, stream in self.streams.items():
            self._reduce(group, stream.flush())

    def _wait_grads(self) -> None:
        self.b.wait(*self.pending, label="grad_wait")
        self.pending = []

    def _gather_updated_weights(self) -> None:
        """ZeRO-1/2: after the optimizer step, every rank's updated shard, gathered in
        buckets (bf16)."""
        lay = self.lay
        totals: dict[str, int] = {}
        for u in self.units:
            for group, weights in self._by_group(u).items():
                totals[group] = totals.get(group, 0) + weights
        for group, weights in totals.items():
            n = self.sizes[group]
            if not weights or n == 1:
                continue
            nbytes = weights * PARAM_BYTES
            sizes = [lay.bucket_bytes] * (nbytes // lay.bucket_bytes)
            if nbytes % lay.bucket_bytes:
                sizes.append(nbytes % lay.bucket_bytes)
            for size in sizes:
                self.b.collective(
                    "allgather", group, elems(-(-size // n)), label="zero_param_allgather"
                )

    # -- the iteration -------------------------------------------------------------------
    def build(self) -> list[Op]:
        lay, b = self.lay, self.b
        pp_elems = elems(lay.pipeline_bytes)
        sends: dict[str, int | None] = {"F": None, "B": None}
        last_mb = lay.microbatches - 1
        for direction, i in stage_schedule(lay.schedule, self.stage, lay.pp, lay.microbatches):
            if direction == "F":
                if not self.first:
                    b.recv(self.pred, pp_elems, tag=0, group="pp", label="pp_recv_activation")
                for unit in self.units:
                    self._forward_unit(unit)
                if not self.last:
                    b.wait(sends["F"], label="pp_send_wait")
                    sends["F"] = b.send(
                        self.succ,
                        pp_elems,
                        tag=0,
                        group="pp",
                        blocking=False,
                        label="pp_send_activation",
                    )
                continue
            if not self.last:
                b.recv(self.succ, pp_elems, tag=1, group="pp", label="pp_recv_gradient")
            # DDP and ZeRO-1 reduce once, in the last micro-batch's backward; ZeRO-2 and -3
            # keep only their shard of the gradients, so they reduce every micro-batch's.
            reduce_now = lay.zero >= 2 or i == last_mb
            overlapped = reduce_now and lay.overlap
            for unit in reversed(self.units):
                self._backward_unit(unit, overlapped)
            if overlapped and lay.zero != 3:
                self._flush_grads()
            if not self.first:
                b.wait(sends["B"], label="pp_send_wait")
                sends["B"] = b.send(
                    self.pred,
                    pp_elems,
                    tag=1,
                    group="pp",
                    blocking=False,
                    label="pp_send_gradient",
                )
            if reduce_now and not lay.overlap:
                # Blocking reductions after the gradient has left for the stage before (as
                # Megatron reduces once its schedule is done): not on the pipeline's path.
                for unit in reversed(self.units):
                    self._grads_ready(unit)
                if lay.zero != 3:
                    self._flush_grads()
        b.wait(sends["F"], sends["B"], label="pp_send_wait")
        self._wait_grads()
        if lay.shape.tied_embeddings and lay.pp > 1 and (self.first or self.last):
            # The embedding and the output layer hold one matrix: their gradients are
            # summed across the first and last stage.
            b.allreduce(
                "embed",
                elems(lay.embedding_weights * lay.grad_bytes),
                label="embedding_grad_allreduce",
            )
        if lay.zero in (1, 2):
            self._gather_updated_weights()
        return b.ops
