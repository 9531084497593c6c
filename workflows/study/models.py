"""What a scaling study needs to know about each proxy model.

* the samples one iteration processes (the global batch), for throughput;
* which models support strong scaling (a fixed global batch) and how the
  workload changes with the process count P;
* the proxy command line and the simnet workload section of one point, so
  that the real run and the prediction describe the same rank program.

Batch definitions (samples per iteration, all ranks together):

| model | samples per iteration | source |
|---|---|---|
| resnet152, resnet152_scal | local batch x P (128 x P; the strong table's row) | reference |
| cosmoflow | 8 x data shards (P / 4) | reference |
| dlrm | 2048 at every P | reference (fixed global batch) |
| gpt3 | P x acc_scale / 4 | reference |
| gpt3_moe | P x acc_scale | reference |
| gpt2 | micro-batches x 1 x data shards (P / stages) | defined here: micro-batch 1 |
| bert | micro-batches x 8 x data shards (P / stages) | defined here: micro-batch 8 |
| alexnet_ring | 32 x compute_us / 5000 per process | defined here |

GPT-2's and BERT's pipeline messages are sized for a micro-batch of 1
(sequence 632) and 8 (sequence 128) in the reference, so a replica processes
``micro-batches x micro-batch`` sequences per iteration. The ring trainer's
default compute per step (5000 us) is its stated assumption for a batch of 32
on one device; a process's batch is taken proportional to its emulated
compute, which is exactly how strong scaling divides the work.

Refused (no batch can be defined): resnet50 (the reference publishes neither
a batch nor compute, and times two separate phases) and the one-pipeline-step
variants of GPT-3 (they time one steady-state step, not an iteration).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from workload.models import MODELS, Model
from workload.models.alexnet import DEFAULT_COMPUTE_US_PER_STEP
from workload.models.resnet import RESNET152_STRONG
from workload.program import BuildOptions, LayoutError, Workload

from .util import StudyError, parse_flags

MICROBATCH_SAMPLES = {"gpt2": 1, "bert": 8}
ALEXNET_BATCH_PER_PROCESS = 32  # at DEFAULT_COMPUTE_US_PER_STEP us of compute per step

NO_BATCH = {
    "resnet50": "the reference publishes no batch size (nor compute) for ResNet-50 and times "
    "two separate phases, so no throughput can be defined; use resnet152 or another model",
    "gpt3_one_pipe_step": "it times one steady-state pipeline step, not a training "
    "iteration, so no throughput can be defined; use gpt3",
    "gpt3_moe_one_pipe_step": "it times one steady-state pipeline step, not a training "
    "iteration, so no throughput can be defined; use gpt3_moe",
}

BATCH_DEFINITION = {
    "resnet152": "global batch = 128 per process x P (reference)",
    "resnet152_scal": "global batch = the strong-scaling table's local batch x P (reference)",
    "cosmoflow": "global batch = 8 x data shards, data shards = P / 4 (reference)",
    "dlrm": "global batch = 2048 at every process count (reference; per-rank compute is "
    "fixed too, so speedup = t(P1) / t(P))",
    "gpt3": "global batch = P x acc_scale / 4 (reference)",
    "gpt3_moe": "global batch = P x acc_scale (reference)",
    "gpt2": "samples = micro-batches x 1 sequence x data shards (P / stages); the reference's "
    "pipeline message is a micro-batch of 1 sequence of 632 tokens",
    "bert": "samples = micro-batches x 8 sequences x data shards (P / stages); the "
    "reference's pipeline message is a micro-batch of 8 sequences of 128 tokens",
    "alexnet_ring": f"samples per process = {ALEXNET_BATCH_PER_PROCESS} x compute_us / "
    f"{DEFAULT_COMPUTE_US_PER_STEP} (the trainer's {DEFAULT_COMPUTE_US_PER_STEP} us per step is "
    f"its assumption for a batch of {ALEXNET_BATCH_PER_PROCESS}); global = that x P",
}

STRONG_MODELS = ("resnet152_scal", "alexnet_ring")
STRONG_ROWS = sorted(RESNET152_STRONG)  # 256, 512, 1024, 2048


def samples_per_iteration(
    model: str, world_size: int, params: dict[str, Any], info: dict[str, Any]
) -> float | None:
    """Samples one iteration processes over all ranks; None when not defined."""
    if model in NO_BATCH or model not in MODELS:
        return None
    if model in MICROBATCH_SAMPLES:
        mb, shards = info.get("micro_batches"), info.get("data_shards")
        if mb is None or shards is None:
            return None
        return float(mb * MICROBATCH_SAMPLES[model] * shards)
    if model == "alexnet_ring":
        compute = info.get("compute_us_per_step", DEFAULT_COMPUTE_US_PER_STEP)
        return ALEXNET_BATCH_PER_PROCESS * float(compute) / DEFAULT_COMPUTE_US_PER_STEP * world_size
    gb = info.get("global_batch")
    return float(gb) if gb is not None else None


@dataclass(frozen=True)
class Study:
    """What the user asked for, the same at every process count."""

    model: str
    args: tuple[int, ...] = ()
    flags: dict[str, int] = field(default_factory=dict)
    mode: str = "weak"
    scale: float = 1.0
    compute: str = "sleep"
    per_tensor: bool = False
    fix_quirks: bool = False

    @classmethod
    def from_options(cls, ns: Any) -> Study:
        """The study the options of ``study.util.add_model_options`` (and --mode) ask for."""
        return cls(
            model=ns.model,
            args=tuple(ns.args),
            flags=parse_flags(ns.flag),
            mode=ns.mode,
            scale=ns.scale,
            compute=ns.compute,
            per_tensor=ns.per_tensor,
            fix_quirks=ns.fix_quirks,
        )

    @property
    def spec(self) -> Model:
        return MODELS[self.model]

    def options(self) -> BuildOptions:
        return BuildOptions(
            scale=self.scale, per_tensor=self.per_tensor, fix_quirks=self.fix_quirks
        )


def check_study(study: Study) -> None:
    """Refuse what cannot be studied, with the reason and the fix."""
    if study.model not in MODELS:
        raise StudyError(f"--model: unknown model {study.model!r}; known: {', '.join(MODELS)}")
    if study.model in NO_BATCH:
        raise StudyError(f"{study.model}: cannot run a scaling study: {NO_BATCH[study.model]}")
    if study.mode not in ("weak", "strong"):
        raise StudyError(f"--mode must be weak or strong (got {study.mode!r})")
    if not (study.scale > 0 and math.isfinite(study.scale)):
        raise StudyError(f"--scale must be a positive number (got {study.scale})")
    spec = study.spec
    known = {a.name for a in spec.flags}
    for name in study.flags:
        if name not in known:
            have = ", ".join(sorted(known)) or "none"
            raise StudyError(f"--flag {name}: {study.model} has no such option (it has: {have})")
    try:
        spec.params(list(study.args))
    except ValueError as e:
        raise StudyError(f"--args: {e}") from None
    if study.mode == "strong":
        if study.model not in STRONG_MODELS:
            hint = (
                "; use resnet152_scal, whose strong-scaling table shrinks the local batch"
                if study.model == "resnet152"
                else ""
            )
            raise StudyError(
                f"{study.model}: strong scaling (a fixed global batch) is not meaningful for "
                "this proxy: its per-process compute does not shrink as processes are added. "
                "Strong scaling is available for resnet152_scal (the reference's "
                "table, through --scaling-size) and alexnet_ring (compute per step divided by "
                f"P){hint}. Use --mode weak."
            )
        if study.model == "resnet152_scal" and "scaling_size" in study.flags:
            raise StudyError(
                "resnet152_scal --mode strong chooses --scaling-size for every process count; "
                "drop --flag scaling_size"
            )


def base_count(study: Study, counts: Sequence[int]) -> int | None:
    """The smallest count the model's layout accepts (the strong-scaling anchor P1)."""
    for p in sorted(counts):
        if layout_problem(study, p, weak_flags(study)) is None:
            return p
    return None


def weak_flags(study: Study) -> dict[str, int]:
    flags = dict(study.flags)
    if study.model == "resnet152_scal" and study.mode == "strong":
        flags["scaling_size"] = STRONG_ROWS[0]
    return flags


def point_flags(study: Study, p: int, base: int) -> dict[str, int]:
    """The model options of the point at ``p`` processes; raises StudyError to skip it.

    Weak: the user's options at every count. Strong:
    * resnet152_scal: count ``p`` emulates the table row ``256 x p / P1`` (local batch
      128 / (p / P1)), so the global batch stays 128 x P1; only p / P1 in 1, 2, 4, 8 exist;
    * alexnet_ring: compute per step ``C x P1 / p`` (C: --flag compute_us, default 5000),
      rounded to whole microseconds.
    """
    flags = dict(study.flags)
    if study.mode == "weak":
        return flags
    ratio = p / base
    if study.model == "resnet152_scal":
        row = STRONG_ROWS[0] * ratio
        if row not in RESNET152_STRONG:
            ok = ", ".join(str(base * r // STRONG_ROWS[0]) for r in STRONG_ROWS)
            raise StudyError(
                f"the strong-scaling table has rows for {ok} processes only "
                f"(P1 = {base} x 1, 2, 4, 8)"
            )
        flags["scaling_size"] = int(row)
    elif study.model == "alexnet_ring":
        c = flags.get("compute_us", DEFAULT_COMPUTE_US_PER_STEP)
        flags["compute_us"] = max(1, round(c * base / p))
    return flags


def layout_problem(study: Study, p: int, flags: dict[str, int]) -> str | None:
    """Why the model's layout rejects ``p`` processes, or None."""
    try:
        build(study, p, flags)
    except (LayoutError, ValueError) as e:
        return str(e)
    return None


def build(study: Study, p: int, flags: dict[str, int]) -> Workload:
    """The workload (cheap: programs are built lazily) of one point."""
    spec = study.spec
    params = spec.params(list(study.args))
    for a in spec.flags:
        params[a.name] = flags.get(a.name) or a.default
    return spec.build(p, params, study.options(), given=len(study.args))


def proxy_module_argv(model: str) -> list[str]:
    """``-m proxies.<model>`` when that module exists, else ``-m proxies <model>``."""
    if importlib.util.find_spec(f"proxies.{model}") is not None:
        return ["-m", f"proxies.{model}"]
    return ["-m", "proxies", model]


def proxy_options(
    study: Study,
    flags: dict[str, int],
    iters: int | None = None,
    warmup: int | None = None,
) -> list[str]:
    """The proxy's arguments after the module: positionals, then options (no --json)."""
    out = [str(a) for a in study.args]
    if study.scale != 1.0:
        out += ["--scale", f"{study.scale:g}"]
    if study.compute != "sleep":
        out += ["--compute", study.compute]
    for name, value in sorted(flags.items()):
        out += [f"--{name.replace('_', '-')}", str(value)]
    if study.per_tensor:
        out.append("--per-tensor")
    if study.fix_quirks:
        out.append("--fix-quirks")
    if iters is not None:
        out += ["--iters", str(iters)]
    if warmup is not None:
        out += ["--warmup", str(warmup)]
    return out


def proxy_command(
    study: Study,
    p: int,
    flags: dict[str, int],
    json_path: str,
    *,
    mpiexec: str,
    iters: int | None = None,
    warmup: int | None = None,
) -> list[str]:
    return [
        mpiexec,
        "-n",
        str(p),
        sys.executable,
        *proxy_module_argv(study.model),
        *proxy_options(study, flags, iters, warmup),
        "--json",
        json_path,
        "--quiet",
    ]


def workload_section(
    study: Study, p: int, flags: dict[str, int], base: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The simnet ``workload`` section that describes the same program as the proxy run."""
    base = dict(base or {})
    wl_flags = dict(flags)
    if study.model == "alexnet_ring":
        # The proxy runs the ring schedule unless told otherwise; say so, or simnet
        # would pick the two-level algorithm on a hierarchical topology.
        wl_flags.setdefault("hierarchical", 0)
        wl_flags.setdefault("compute_us", DEFAULT_COMPUTE_US_PER_STEP)
    compute_scale = base.get("compute_scale", 1.0)
    if study.compute == "none":
        compute_scale = 0.0
    return {
        "name": study.model,
        "args": list(study.args),
        "world_size": p,
        "scale": study.scale,
        "per_tensor": study.per_tensor,
        "fix_quirks": study.fix_quirks,
        "iterations": base.get("iterations", 1),
        "compute_scale": compute_scale,
        "flags": wl_flags,
    }
