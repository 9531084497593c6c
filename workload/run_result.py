"""The documents real runs write and the workflows read back, typed.

A proxy's ``--json`` document (:class:`ProxyRun`) and the ring trainer's
``measured.json`` (:class:`TrainerRun`, with its :class:`TrainerSettings`)
are written and read through these classes, so their keys are spelled in one
place. ``to_json`` gives exactly the JSON object the files hold (key order
included); ``from_json`` reads it back. Times are in seconds, sizes in bytes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .spec import RunSpec


def _load(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


@dataclass
class ProxyRun:
    """A proxy run (``python -m proxies.<model> ... --json PATH``), rank 0's figures.

    phases: per phase, ``runtime_per_iteration_s`` (rank0 / slowest /
      slowest_rank), ``iteration_s`` (mean / min / max over iterations of the
      slowest rank per iteration), ``compute_s``, ``comm_s``,
      ``exposed_comm_s`` (mean / max over ranks), calls and per-rank figures.
    """

    model: str
    world_size: int
    phases: list[dict[str, Any]]
    description: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    groups: dict[str, list[list[int]]] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    iterations: dict[str, int] = field(default_factory=dict)  # warmup, timed
    mpi: dict[str, Any] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    wall_s: float | None = None
    # Each rank's peak resident memory (bytes) when the figures were gathered.
    peak_rss_bytes_per_rank: list[int] = field(default_factory=list)
    kind: str = "proxy-run"

    _ORDER = (
        "kind", "model", "description", "world_size", "params", "info", "groups", "options",
        "iterations", "mpi", "units", "versions", "wall_s", "peak_rss_bytes_per_rank", "phases",
    )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._ORDER}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ProxyRun:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in known})

    @classmethod
    def load(cls, path: str | Path) -> ProxyRun:
        return cls.from_json(_load(path))

    @property
    def scale(self) -> float:
        return float(self.options.get("scale", 1.0))

    @property
    def phase_names(self) -> list[str]:
        return [ph["phase"] for ph in self.phases]

    @property
    def timed_iterations(self) -> int:
        return int(self.phases[0]["iterations"])

    @property
    def iteration_time_s(self) -> float:
        """One iteration: the sum over phases of the slowest rank's time per iteration."""
        return sum(self.slowest_s(ph) for ph in self.phases)

    @staticmethod
    def slowest_s(phase: dict[str, Any]) -> float:
        """The slowest rank's time per iteration of one phase (s)."""
        return float(phase["runtime_per_iteration_s"]["slowest"])

    def mean_s(self, key: str) -> float:
        """``compute_s``, ``comm_s`` or ``exposed_comm_s``: the mean over ranks, summed
        over phases (s per iteration)."""
        return sum(ph[key]["mean"] for ph in self.phases)


@dataclass(frozen=True)
class TrainerSettings:
    """What the ring trainer ran with (its options, then what MPI decided).

    rings: a JSON list of ring orders, or None (one ring 0..P-1);
    bandwidth_limit in GB/s (1e9 B/s), 0: unlimited; compute_us per step.
    """

    epochs: int = 5
    steps: int = 100
    warmup: int = 1
    input_channels: int = 3
    num_classes: int = 10
    batch_size: int = 32
    rings: str | None = None
    hierarchical: int = 0
    bandwidth_limit: float = 0.0
    buffer_bytes: int = 0
    compute_us: float = 5000.0
    scale: float = 1.0
    bandwidth_bytes: int = 4 << 20
    chunk_bytes: int = 1 << 20
    timeout: float = 300.0
    progress: str = "auto"
    out: str = "results"
    world_size: int | None = None  # known once MPI started
    throttle: bool | None = None
    poll_pause_s: float | None = None  # seconds between tests when polling

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TrainerSettings:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in known})

    @classmethod
    def for_run(cls, spec: RunSpec, **settings: Any) -> TrainerSettings:
        """The settings that train ``spec`` (a run of the ring trainer's model:
        AlexNet's shapes, compute per step, groups or rings) with ``settings``."""
        p = spec.params()
        return cls(
            input_channels=p["input_channels"],
            num_classes=p["num_classes"],
            compute_us=p["compute_us"],
            hierarchical=p["hierarchical"],
            scale=spec.scale,
            rings=json.dumps([list(r) for r in spec.rings]) if spec.rings else None,
            **settings,
        )

    def options(self) -> list[str]:
        """The trainer's command-line options that set these settings (the ones that
        differ from the defaults, and never those MPI decides)."""
        out: list[str] = []
        default = TrainerSettings()
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("world_size", "throttle", "poll_pause_s") or v == getattr(
                default, f.name
            ):
                continue
            out += [f"--{f.name.replace('_', '-')}", str(v)]
        return out


@dataclass
class TrainerRun:
    """The ring trainer's ``measured.json``.

    bandwidth_bytes_per_s: [sender][receiver] measured pair bandwidth;
    epochs: per epoch ``epoch``, ``time_s``, ``step_s`` (mean/min/max),
      ``traffic_bytes`` (phase -> [src][dst]) and ``traffic_mb`` (phase -> MB, 1e6 B).
    """

    settings: TrainerSettings
    workload: dict[str, Any]  # info, rings
    bandwidth_bytes_per_s: list[list[float]]
    epochs: list[dict[str, Any]]
    total_time_s: float
    mpi: dict[str, Any] = field(default_factory=dict)
    units: dict[str, str] = field(
        default_factory=lambda: {"time": "s", "bandwidth": "bytes/s", "traffic": "bytes"}
    )
    pacing_wait_s_per_rank: list[float] = field(default_factory=list)
    buffer_overruns: list[dict[str, Any]] = field(default_factory=list)
    # Per operation of a step: its label and each rank's mean duration (s) over all steps.
    ops: dict[str, Any] = field(default_factory=dict)
    wall_s: float | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    kind: str = "ring-trainer-measurement"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "settings": self.settings.to_json(),
            "workload": self.workload,
            "mpi": self.mpi,
            "units": self.units,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "epochs": self.epochs,
            "total_time_s": self.total_time_s,
            "pacing_wait_s_per_rank": self.pacing_wait_s_per_rank,
            "buffer_overruns": self.buffer_overruns,
            "ops": self.ops,
            "wall_s": self.wall_s,
            "versions": self.versions,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TrainerRun:
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in doc.items() if k in known}
        data["settings"] = TrainerSettings.from_json(doc["settings"])
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> TrainerRun:
        return cls.from_json(_load(path))
