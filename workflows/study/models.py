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

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from workload.layout import LayoutError
from workload.models import MODELS, Model
from workload.program import Workload
from workload.spec import STUDY_NAMES, RunSpec, SpecError
from workload.spec import proxy_module_argv as proxy_module_argv

from .util import StudyError, parse_flags


def samples_per_iteration(
    model: str, world_size: int, params: dict[str, Any], info: dict[str, Any]
) -> float | None:
    """Samples one iteration processes over all ranks; None when not defined."""
    if model not in MODELS:
        return None
    return MODELS[model].samples_per_iteration(world_size, params, info)


def batch_definition(model: str) -> str:
    """What a sample is for ``model`` and how many an iteration processes."""
    return MODELS[model].batch_definition if model in MODELS else ""


def _strong_models() -> str:
    """``a (how) and b (how)``: the models that support strong scaling."""
    parts = [f"{m.name} ({m.strong_scaling})" for m in MODELS.values() if m.strong_scaling]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)


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
        """The model description."""
        return MODELS[self.model]

    def run_spec(
        self,
        p: int | None = None,
        flags: dict[str, int] | None = None,
        iters: int | None = None,
        warmup: int | None = None,
    ) -> RunSpec:
        """The run of one point: ``p`` processes with the model options ``flags``
        (default: the user's); raises StudyError worded for the study's options."""
        try:
            return RunSpec(
                model=self.model,
                args=self.args,
                flags=self.flags if flags is None else flags,
                world_size=p,
                scale=self.scale,
                compute=self.compute,
                per_tensor=self.per_tensor,
                fix_quirks=self.fix_quirks,
                iters=iters,
                warmup=warmup,
            )
        except SpecError as e:
            raise StudyError(e.render(STUDY_NAMES)) from None


def check_study(study: Study) -> None:
    """Refuse what cannot be studied, with the reason and the fix."""
    if study.model not in MODELS:
        study.run_spec()  # raises: the unknown model, with the known ones
    model = study.spec
    if model.no_batch_reason is not None:
        raise StudyError(f"{study.model}: cannot run a scaling study: {model.no_batch_reason}")
    if study.mode not in ("weak", "strong"):
        raise StudyError(f"--mode must be weak or strong (got {study.mode!r})")
    study.run_spec()
    if study.mode == "strong":
        if not model.strong_scaling:
            raise StudyError(
                f"{study.model}: strong scaling (a fixed global batch) is not meaningful for "
                "this proxy: its per-process compute does not shrink as processes are added. "
                f"Strong scaling is available for {_strong_models()}"
                f"{model.strong_scaling_hint}. Use --mode weak."
            )
        chosen = model.strong_scaling_flag
        if chosen is not None and chosen in study.flags:
            raise StudyError(
                f"{study.model} --mode strong chooses --{chosen.replace('_', '-')} for every "
                f"process count; drop --flag {chosen}"
            )


def base_count(study: Study, counts: Sequence[int]) -> int | None:
    """The smallest count the model's layout accepts (the strong-scaling anchor P1)."""
    for p in sorted(counts):
        if layout_problem(study, p, weak_flags(study)) is None:
            return p
    return None


def weak_flags(study: Study) -> dict[str, int]:
    """The model options at the smallest count (strong scaling may choose some)."""
    if study.mode == "strong":
        return study.spec.strong_anchor_flags(dict(study.flags))
    return dict(study.flags)


def point_flags(study: Study, p: int, base: int) -> dict[str, int]:
    """The model options of the point at ``p`` processes; raises StudyError to skip it.

    Weak: the user's options at every count. Strong: as the model divides the
    work (``Model.strong_point_flags``), anchored at ``base`` processes.
    """
    if study.mode == "weak":
        return dict(study.flags)
    try:
        return study.spec.strong_point_flags(dict(study.flags), p, base)
    except ValueError as e:
        raise StudyError(str(e)) from None


def strong_note(study: Study, base: int) -> str:
    """How the strong-scaling study anchored at ``base`` divides the work."""
    return study.spec.strong_note(dict(study.flags), base)


def layout_problem(study: Study, p: int, flags: dict[str, int]) -> str | None:
    """Why the model's layout rejects ``p`` processes, or None."""
    try:
        build(study, p, flags)
    except SpecError as e:
        return e.render(STUDY_NAMES)
    except (LayoutError, ValueError) as e:
        return str(e)
    return None


def build(study: Study, p: int, flags: dict[str, int]) -> Workload:
    """The workload (cheap: programs are built lazily) of one point."""
    return study.run_spec(p, flags).workload()


def proxy_options(
    study: Study,
    flags: dict[str, int],
    iters: int | None = None,
    warmup: int | None = None,
) -> list[str]:
    """The proxy's arguments after the module: positionals, then options (no --json)."""
    return study.run_spec(None, flags, iters, warmup).proxy_options()


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
    """``mpiexec -n P python -m proxies.<model> ... --json PATH --quiet``."""
    spec = study.run_spec(p, flags, iters, warmup)
    return [mpiexec, "-n", str(p), sys.executable, *spec.proxy_argv(), "--json", json_path,
            "--quiet"]  # fmt: skip


def workload_section(
    study: Study, p: int, flags: dict[str, int], base: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The simnet ``workload`` section that describes the same program as the proxy run."""
    base = dict(base or {})
    wl_flags = dict(flags)
    model = study.spec
    # What simnet would take from the configuration's other sections (e.g. the
    # two-level algorithm on a hierarchical topology) is pinned to the proxy's default.
    for name in (model.group_size_flag, model.compute_flag):
        if name is not None:
            wl_flags.setdefault(name, model.flag_default(name))
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
