"""One run of a proxy model, as every front end describes it.

A :class:`RunSpec` is the model, its positional arguments and named options,
and the options every model shares (``--scale``, ``--compute``, ...). It is
checked once, when made, and then gives the two things the executors need:
the :class:`~workload.program.Workload` (``spec.workload()``) and the proxy's
command line (``spec.proxy_argv()``), so that a real run and a prediction of
one spec describe the same rank program.

Front ends name the fields differently (``--scale`` on a proxy's command
line, ``workload.scale`` in a simnet configuration); a :class:`SpecError`
knows its field and is worded by the front end with :meth:`SpecError.render`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .models import MODELS, Model
from .program import BuildOptions, Workload

COMPUTE_MODES = ("sleep", "spin", "none")

# How each front end names the fields; None: the message needs no field name.
OPTION_NAMES: dict[str, str | None] = {
    "model": "model",
    "args": None,
    "flags": "--flag",
    "world_size": "the world size",
    "scale": "--scale",
    "compute": "--compute",
    "per_tensor": "--per-tensor",
    "fix_quirks": "--fix-quirks",
    "algorithm": "--algorithm",
    "iters": "--iters",
    "warmup": "--warmup",
    "reference_counts": "--reference-counts",
    # One named option of the model (``{field:flags.NAME}``): ``{name}``, ``{dashed}``.
    "flag": "--{dashed}",
}
CONFIG_NAMES: dict[str, str | None] = {
    "model": "workload.name",
    "args": "workload.args",
    "flags": "workload.flags",
    "world_size": "workload.world_size",
    "scale": "workload.scale",
    "compute": "workload.compute",
    "per_tensor": "workload.per_tensor",
    "fix_quirks": "workload.fix_quirks",
    "algorithm": "collectives.algorithm",
    "iters": "workload.iterations",
    "warmup": "workload.warmup",
    "flag": "workload.flags.{name}",
}
STUDY_NAMES: dict[str, str | None] = {
    **OPTION_NAMES,
    "model": "--model",
    "args": "--args",
    "flag": "--flag {name}",
}


_OTHER_FIELD = re.compile(r"\{field:([\w.]+)\}")


def field_label(name: str, names: Mapping[str, str | None] = OPTION_NAMES) -> str | None:
    """How the front end ``names`` words field ``name``: ``flags.NAME`` is one named
    option of the model (``--name-dashed``, ``workload.flags.name``)."""
    if name.startswith("flags."):
        flag = name.removeprefix("flags.")
        template = names.get("flag") or "{name}"
        return template.format(name=flag, dashed=flag.replace("_", "-"))
    return names.get(name, name)


class SpecError(ValueError):
    """A field of a run specification that cannot be used, and the fix.

    ``reason`` holds ``{field}`` where the front end's name of the field goes, and
    ``{field:NAME}`` where another field's goes (``{field:flags.hierarchical}``: a named
    option of the model), so that a message about two fields names both.
    """

    def __init__(self, field_name: str, reason: str) -> None:
        self.field = field_name
        self.reason = reason
        super().__init__(self.render())

    def render(self, names: Mapping[str, str | None] = OPTION_NAMES) -> str:
        """The message with the fields named as the front end ``names`` them."""
        reason = _OTHER_FIELD.sub(
            lambda m: field_label(m.group(1), names) or m.group(1), self.reason
        )
        label = field_label(self.field, names)
        if label is None:
            return reason.replace("{field}: ", "").replace("{field} ", "")
        return reason.replace("{field}", label)


def known_algorithms() -> list[str]:
    """Every collective algorithm name of the project's schedules, sorted."""
    from .collectives import ALGORITHMS

    return sorted({a for algs in ALGORITHMS.values() for a in algs})


def proxy_module_argv(model: str) -> list[str]:
    """``-m proxies.<model>`` (every model has its module)."""
    return ["-m", f"proxies.{model}"]


MAX_SCALE = 1000.0  # message size multiplier: the reference's sizes are scale 1


@dataclass(frozen=True)
class RunSpec:
    """One run of a proxy model; checked when made (raises :class:`SpecError`).

    model: a name of ``workload.models.MODELS``.
    args: the reference's positional arguments, possibly fewer than it has.
    flags: model-specific named options (``Model.flags``); absent: the default.
    world_size: ranks (None: decided later, e.g. by the MPI launcher).
    scale: multiplier of every message size (elements, at least 1 per message).
    compute: emulated compute of a real run: sleep, spin or none.
    per_tensor, fix_quirks, algorithm, rings: see :class:`BuildOptions`.
    iters, warmup: timed and untimed iterations of a real run (None: the model's
      defaults); reference_counts: the reference's own counts instead.
    """

    model: str
    args: tuple[int, ...] = ()
    flags: Mapping[str, int | str] = field(default_factory=dict)
    world_size: int | None = None
    scale: float = 1.0
    compute: str = "sleep"
    per_tensor: bool = False
    fix_quirks: bool = False
    algorithm: str | None = None
    rings: tuple[tuple[int, ...], ...] | None = None
    iters: int | None = None
    warmup: int | None = None
    reference_counts: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(int(a) for a in self.args))
        object.__setattr__(self, "flags", dict(self.flags))
        if self.rings is not None:
            object.__setattr__(self, "rings", tuple(tuple(r) for r in self.rings))
        self._check()

    def _check(self) -> None:
        if self.model not in MODELS:
            raise SpecError(
                "model", f"{{field}}: unknown model {self.model!r}; known: {', '.join(MODELS)}"
            )
        m = self.spec_model
        if not (0 < self.scale <= MAX_SCALE):
            raise SpecError(
                "scale",
                f"{{field}} must be a positive number up to {MAX_SCALE:g} (got {self.scale})",
            )
        if self.compute not in COMPUTE_MODES:
            raise SpecError(
                "compute",
                f"{{field}} must be one of {', '.join(COMPUTE_MODES)} (got {self.compute!r})",
            )
        for name, low in (("iters", 1), ("warmup", 0)):
            v = getattr(self, name)
            if v is not None and v < low:
                raise SpecError(name, f"{{field}} must be >= {low} (got {v})")
        if self.world_size is not None and self.world_size < 1:
            raise SpecError("world_size", f"{{field}} must be >= 1 (got {self.world_size})")
        if self.algorithm is not None and self.algorithm not in known_algorithms():
            raise SpecError(
                "algorithm",
                f"{{field}} must be one of {', '.join(known_algorithms())} "
                f"(got {self.algorithm!r})",
            )
        known = {a.name: a for a in m.flags}
        for name in sorted(self.flags):
            if name not in known:
                have = ", ".join(sorted(known)) or "none"
                raise SpecError(
                    "flags", f"{{field}} {name}: {m.name} has no such option (it has: {have})"
                )
            arg, value = known[name], self.flags[name]
            problem = arg.check(value)
            if problem:
                raise SpecError("flags", f"{{field:flags.{name}}}: {problem}")
            if isinstance(value, float) and not (arg.real or arg.text or arg.choices):
                self.flags[name] = int(value)  # a whole number written 4.0 (JSON allows it)
        try:
            m.params(list(self.args))
        except ValueError as e:
            raise SpecError("args", f"{{field}}: {e}") from None
        if self.fix_quirks and not m.quirks_available:
            raise SpecError(
                "fix_quirks", f"{{field}} is not available for {m.name} ({m.no_quirks_reason})"
            )
        if self.per_tensor and not m.per_tensor_available:
            raise SpecError(
                "per_tensor",
                f"{{field}} is not available for {m.name} ({m.no_per_tensor_reason})",
            )
        given = [name for name in ("iters", "warmup") if getattr(self, name) is not None]
        if self.reference_counts and given:
            # Either the counts are the reference's or they are the user's: one of them
            # silently winning made a run that was neither what was asked.
            c = m.counts
            whose = "the reference's" if m.has_reference else "the model's fixed"
            raise SpecError(
                "reference_counts",
                f"{{field}} runs {whose} counts ({c.reference_warmup} warm-up + "
                f"{c.reference_runs} timed), so "
                + " and ".join(f"{{field:{name}}}" for name in given)
                + " cannot go with it: leave out one or the other",
            )
        problem = m.options_problem(self.params(), self.algorithm)
        if problem:
            raise SpecError(*problem)

    # -- what the spec gives ------------------------------------------------------------
    @property
    def spec_model(self) -> Model:
        """The model description (``MODELS[model]``)."""
        return MODELS[self.model]

    def params(self) -> dict[str, Any]:
        """Every positional argument and named option (integers, or words for an option
        with choices), defaults filled in."""
        m = self.spec_model
        params = m.params(list(self.args))
        for a in m.flags:
            params[a.name] = self.flags.get(a.name, a.default)
        return params

    def options(self) -> BuildOptions:
        return BuildOptions(
            scale=self.scale,
            per_tensor=self.per_tensor,
            fix_quirks=self.fix_quirks,
            algorithm=self.algorithm,
            rings=self.rings,
        )

    def workload(self, world_size: int | None = None) -> Workload:
        """The model built for ``world_size`` ranks (default: the spec's).

        Raises LayoutError (a ValueError) when the layout cannot take them.
        """
        p = world_size if world_size is not None else self.world_size
        if p is None:
            raise SpecError("world_size", "{field} is needed to build the workload")
        workload = self.spec_model.build(p, self.params(), self.options(), given=len(self.args))
        if self.algorithm is not None:
            check_algorithms(workload)
        return workload

    def iteration_counts(self) -> tuple[int, int]:
        """(warm-up, timed) iterations of a real run."""
        m = self.spec_model
        warmup = (
            self.warmup
            if self.warmup is not None
            else (m.counts.reference_warmup if self.reference_counts else m.counts.default_warmup)
        )
        runs = (
            self.iters
            if self.iters is not None
            else (m.counts.reference_runs if self.reference_counts else m.counts.default_runs)
        )
        return warmup, runs

    def proxy_options(self) -> list[str]:
        """The proxy's arguments after its module: positionals, then options.

        Output options (``--json``, ``--trace``, ``--quiet``) are the caller's.
        """
        out = [str(a) for a in self.args]
        if self.scale != 1.0:
            out += ["--scale", repr(float(self.scale))]
        if self.compute != "sleep":
            out += ["--compute", self.compute]
        for name, value in sorted(self.flags.items()):
            out += [f"--{name.replace('_', '-')}", str(value)]
        if self.per_tensor:
            out.append("--per-tensor")
        if self.fix_quirks:
            out.append("--fix-quirks")
        if self.algorithm is not None:
            out += ["--algorithm", self.algorithm]
        if self.reference_counts:
            out.append("--reference-counts")
        if self.iters is not None:
            out += ["--iters", str(self.iters)]
        if self.warmup is not None:
            out += ["--warmup", str(self.warmup)]
        return out

    def proxy_argv(self) -> list[str]:
        """``[-m, proxies.<model>, args..., options...]`` (the launcher adds mpiexec)."""
        return [*proxy_module_argv(self.model), *self.proxy_options()]

    def replace(self, **changes: Any) -> RunSpec:
        """A copy with ``changes`` applied (and checked again)."""
        return replace(self, **changes)


def check_algorithms(workload: Workload) -> None:
    """Refuse a named algorithm some collective of ``workload`` cannot run."""
    from .collectives import schedule_for
    from .ops import Collective

    seen: set[tuple[str, str, int]] = set()
    for phase in workload.phases:
        for rank in range(workload.world_size):
            for op in phase.program(rank):
                if not isinstance(op, Collective) or op.algorithm is None:
                    continue
                p = len(workload.group_of(op.group, rank))
                key = (op.op, op.algorithm, p)
                if key in seen or p == 1:
                    continue
                seen.add(key)
                try:
                    schedule_for(
                        op.op, op.algorithm, p, p, root=op.root, params=workload.collective_params
                    )
                except ValueError as e:
                    raise ValueError(
                        f"{workload.model}: --algorithm {op.algorithm} cannot run "
                        f"its {op.op} on {p} ranks ({op.group} group): {e}"
                    ) from None
