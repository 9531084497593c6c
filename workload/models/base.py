"""What every model description provides: its arguments, a builder, and the
facts the studies and the configuration file need about it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..program import BuildOptions, Phase, Workload


@dataclass(frozen=True)
class Arg:
    """A positional argument of the reference program (an integer), or a named option:
    a whole number, with ``real`` any number (e.g. TFLOP/s), one of ``choices`` (e.g. a
    preset's name), or with ``text`` any word (a path)."""

    name: str
    default: int | float | str
    help: str
    choices: tuple[str, ...] = ()
    text: bool = False  # any non-empty word (e.g. a path) instead of a number
    real: bool = False  # a number with a fraction allowed, not only a whole one
    # A file or folder (a text option): in a configuration file, relative to its folder.
    path: bool = False
    # The smallest value a number takes (None: any).
    minimum: float | None = None

    def check(self, value: object) -> str | None:
        """Why ``value`` cannot be this option's value (None: it can)."""
        if self.text or self.path:
            if isinstance(value, str) and value:
                return None
            return f"must be a non-empty string (got {value!r})"
        if self.choices:
            if value in self.choices:
                return None
            return f"must be one of {', '.join(self.choices)} (got {value!r})"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number (got {value!r})"
        if not self.real and isinstance(value, float) and not value.is_integer():
            return f"must be a whole number (got {value!r})"
        if self.minimum is not None and value < self.minimum:
            return f"must be >= {self.minimum:g} (got {value:g})"
        return None


@dataclass(frozen=True)
class Counts:
    """Iterations: the reference's (warm-up, timed) and this project's defaults, sized
    for a 2-core machine (documented in the README)."""

    reference_warmup: int = 0
    reference_runs: int = 1
    default_warmup: int = 1
    default_runs: int = 3


class BuildRequest(NamedTuple):
    """What a model is built for: ``world_size`` ranks, all ``params``, the shared
    ``options``, and ``given``: how many positional arguments the user passed (some
    reference quirks depend on it; None means all)."""

    world_size: int
    params: dict[str, Any]
    options: BuildOptions
    given: int | None


class _Field:
    """A summary-line value known only when the line is printed."""

    def __init__(self, name: str) -> None:
        self.name = name


RANK = _Field("rank")  # the printing rank
PHASE = _Field("phase")  # the phase's name


def summary_line(
    fields: Sequence[tuple[str, object]],
    rank: int,
    phase: str,
    runtime_s: float,
    per: str = "iteration",
) -> str:
    """``name = value, ..., runtime per <per> = <runtime_s> s`` (the reference's line)."""
    values = {id(RANK): rank, id(PHASE): phase}
    parts = [f"{k} = {values.get(id(v), v)}" for k, v in fields]
    return ", ".join([*parts, f"runtime per {per} = {runtime_s:.6f} s"])


class Model(ABC):
    """A proxy model: a short description that builds a :class:`Workload`.

    A new model is one class in a module of ``workload.models`` with a
    ``name``; the registry (``MODELS``) finds it.
    """

    name: str = ""
    description: str = ""
    # Position in listings (``python -m proxies --help``, "known:" in messages).
    order: int = 1000
    args: tuple[Arg, ...] = ()
    # Model-specific named options (``--name-with-dashes N``).
    flags: tuple[Arg, ...] = ()
    counts: Counts = Counts()
    per_tensor_available: bool = False
    # Whether the model reproduces a quirk of its reference that ``fix_quirks`` repairs.
    quirks_available: bool = False
    # Whether the model is one of the reference's proxies (llm and chakra are not: no
    # reference counts, quirks or tensor lists to speak of).
    has_reference: bool = True
    # Why ``per_tensor`` / ``fix_quirks`` are refused, when they are.
    no_per_tensor_reason: str = "the reference has aggregated gradient messages only"
    no_quirks_reason: str = "it reproduces no quirk of its reference"
    # Whether the model gives the parameters of the hierarchical and multiring schedules
    # (a group size, ring orders): only then can a proxy run them.
    gives_schedule_params: bool = False

    # -- throughput: samples one iteration processes over all ranks -------------------
    batch_definition: str = ""
    # Why no batch can be defined (the model is refused by throughput studies).
    no_batch_reason: str | None = None

    # -- strong scaling (a fixed global batch as the process count P grows) -----------
    # How the model supports it, in words ("": not meaningful for this model).
    strong_scaling: str = ""
    # Said when strong scaling is refused (e.g. which related model supports it).
    strong_scaling_hint: str = ""
    # A flag that strong scaling chooses at every P (the user must not give it).
    strong_scaling_flag: str | None = None

    # -- the configuration file's seed sections (the ring trainer) --------------------
    # Positional arguments default to the configuration's ``model`` section (by name).
    args_from_config_model: bool = False
    # The flag that ``training.compute_us_per_step`` sets (us per step).
    compute_flag: str | None = None
    # The flag that a hierarchical topology's group size sets.
    group_size_flag: str | None = None
    # Runs its collectives over the ring topology's ring orders.
    uses_ring_orders: bool = False
    # Its real runs are those of this trainer module, with its own end-to-end job.
    trainer_module: str | None = None

    def params(self, values: list[int]) -> dict[str, int]:
        """Positional values (possibly fewer than args) -> all parameters."""
        if len(values) > len(self.args):
            names = " ".join(f"[{a.name}={a.default}]" for a in self.args)
            raise ValueError(f"{self.name}: too many arguments; usage: {self.name} {names}")
        out = {a.name: a.default for a in self.args}
        for a, v in zip(self.args, values, strict=False):
            if v < 1:
                raise ValueError(f"{self.name}: {a.name} must be >= 1 (got {v})")
            out[a.name] = v
        return out

    def options_problem(
        self, params: Mapping[str, Any], algorithm: str | None
    ) -> tuple[str, str] | None:
        """Why the model's options cannot run together, known before any world size:
        (the field to fix, the reason with ``{field}`` and ``{field:NAME}`` where the front
        end names the fields, as :class:`workload.spec.SpecError` takes them), or None.
        ``params``: every argument and option, defaults filled in; ``algorithm``: the
        ``--algorithm`` given, if any."""
        return None

    def flag_default(self, name: str) -> int | str:
        """The default of the named option ``name``."""
        return next(a.default for a in self.flags if a.name == name)

    def build(
        self,
        world_size: int,
        params: dict[str, Any],
        options: BuildOptions,
        given: int | None = None,
    ) -> Workload:
        """Instantiate for ``world_size`` ranks; raise LayoutError if impossible.

        ``given`` is how many positional arguments the user passed (some
        reference quirks depend on it); None means all.
        """
        wl = self._build(BuildRequest(world_size, params, options, given))
        # _build's scale is its sizes' before options.scale (1: the model's own; a trace
        # set's: the scale it was exported at), and its programs apply options.scale.
        wl.scale = None if wl.scale is None else wl.scale * options.scale
        return wl

    @abstractmethod
    def _build(self, req: BuildRequest) -> Workload:
        """The model's own description (see :meth:`build`)."""

    def workload(
        self,
        world_size: int,
        params: dict[str, Any],
        groups: dict[str, list[tuple[int, ...]]],
        phases: list[Phase],
        info: dict[str, object],
        summary: Sequence[tuple[str, object]],
        *,
        per: str = "iteration",
        summary_all_ranks: bool = False,
        collective_params: dict[str, Any] | None = None,
    ) -> Workload:
        """The :class:`Workload` of this model from its parts; ``summary`` lists the
        (name, value) pairs of the reference's summary line (``RANK``, ``PHASE``:
        filled in when printed), which ends with the runtime per ``per``."""
        fields = tuple(summary)

        def line(rank: int, runtime_s: float, phase: str) -> str:
            return summary_line(fields, rank, phase, runtime_s, per)

        return Workload(
            model=self.name,
            world_size=world_size,
            params=dict(params),
            groups=groups,
            phases=phases,
            info=info,
            summary=line,
            summary_all_ranks=summary_all_ranks,
            collective_params=collective_params or {},
        )

    # -- study hooks -------------------------------------------------------------------
    def samples_per_iteration(
        self, world_size: int, params: dict[str, Any], info: dict[str, Any]
    ) -> float | None:
        """Samples one iteration processes over all ranks; None when not defined.

        Default: the workload's ``global_batch`` figure.
        """
        if self.no_batch_reason is not None:
            return None
        gb = info.get("global_batch")
        return float(gb) if gb is not None else None

    def strong_anchor_flags(self, flags: dict[str, int]) -> dict[str, int]:
        """The options of a strong-scaling study at its smallest count P1."""
        return dict(flags)

    def strong_point_flags(self, flags: dict[str, int], p: int, base: int) -> dict[str, int]:
        """The options at ``p`` processes of a strong-scaling study anchored at ``base``.

        Raises ValueError (the reason) when the model cannot keep the batch at ``p``.
        """
        return dict(flags)

    def strong_note(self, flags: dict[str, int], base: int) -> str:
        """How a strong-scaling study anchored at ``base`` processes divides the work."""
        return ""
