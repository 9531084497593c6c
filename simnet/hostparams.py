"""The host model's parameter file (``python -m simnet calibrate-host`` writes it).

Per number of ranks on a host: the host's memory-copy capacity shared by its
intra-host messages, the per-message cost of an intra-host message, the
fastest copy of one rank and the reduction cost gamma, in the configuration's
units (GB/s with GB = 1e9 bytes, microseconds, seconds per byte). A
configuration uses it with ``"hosts": {"params_file": ...}``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from workload.units import GB

FORMAT = 3  # of the parameter file; a file of another format is refused
US = 1e6  # microseconds per second


class HostCalibrationError(ValueError):
    """A calibration that cannot be used, worded for the user."""


@dataclass(frozen=True)
class HostParams:
    """The host model at ``ranks_per_host`` ranks (config units)."""

    ranks_per_host: int
    copy_bandwidth_gb_per_s: float
    copy_latency_us: float
    rank_copy_bandwidth_gb_per_s: float
    gamma_s_per_byte: float
    step_latency_us: float = 0.0  # per step of a collective the MPI library runs
    alltoall_step_latency_us: float = 0.0  # the same, for the library's alltoall
    compute_overhead_us: float = 0.0  # an emulated compute of d takes d (1 + stretch) + this
    compute_stretch: float = 0.0
    send_overhead_us: float = 0.0  # per message at its sender, one after another

    @property
    def copy_bandwidth_bytes_per_s(self) -> float:
        return self.copy_bandwidth_gb_per_s * GB

    @property
    def rank_copy_bandwidth_bytes_per_s(self) -> float:
        return self.rank_copy_bandwidth_gb_per_s * GB

    @property
    def copy_latency_s(self) -> float:
        return self.copy_latency_us / US

    def step_latency_by_op_us(self) -> dict[str, float]:
        """``collectives.step_latency_us_by_op`` for these parameters (us)."""
        return {"alltoall": self.alltoall_step_latency_us}

    def processor_updates(self) -> dict[str, dict[str, Any]]:
        """What this host's processor does to a run, as updates of the configuration's
        ``collectives`` and ``hosts`` sections: the library's reduction and per-step
        costs (collectives progress only inside MPI calls, as in the proxies' library,
        which has no progress thread) and the emulated compute's overshoot."""
        return {
            "collectives": {
                "gamma_s_per_byte": self.gamma_s_per_byte,
                "step_latency_us": self.step_latency_us,
                "step_latency_us_by_op": self.step_latency_by_op_us(),
                "async_progress": False,
            },
            "hosts": {
                "compute_overhead_us": self.compute_overhead_us,
                "compute_stretch": self.compute_stretch,
            },
        }


@dataclass
class HostCalibration:
    """What the parameter file holds: the key it is valid for, and the per-count fits."""

    key: dict[str, Any]
    created: str
    by_ranks: list[HostParams]
    fits: list[dict[str, Any]] = field(default_factory=list)
    points: list[dict[str, Any]] = field(default_factory=list)
    # How it was measured: {"stat", "iters", "repeats"} (None in files made before
    # they were recorded).
    settings: dict[str, Any] | None = None

    def ranks(self) -> list[int]:
        return sorted(p.ranks_per_host for p in self.by_ranks)

    def at(self, ranks_per_host: int) -> tuple[HostParams, str | None]:
        """The parameters for ``ranks_per_host``: measured, or interpolated linearly
        between the nearest measured counts (held constant beyond them), with a note."""
        table = sorted(self.by_ranks, key=lambda p: p.ranks_per_host)
        for p in table:
            if p.ranks_per_host == ranks_per_host:
                return p, None
        lo = [p for p in table if p.ranks_per_host < ranks_per_host]
        hi = [p for p in table if p.ranks_per_host > ranks_per_host]
        if not lo or not hi:
            near = (lo or hi)[-1 if lo else 0]
            return (
                HostParams(ranks_per_host, *_values(near)),
                f"host model at {ranks_per_host} ranks per host taken from the measurement "
                f"at {near.ranks_per_host} (outside the measured counts {self.ranks()})",
            )
        a, b = lo[-1], hi[0]
        w = (ranks_per_host - a.ranks_per_host) / (b.ranks_per_host - a.ranks_per_host)
        vals = [x + w * (y - x) for x, y in zip(_values(a), _values(b), strict=True)]
        return (
            HostParams(ranks_per_host, *vals),
            f"host model at {ranks_per_host} ranks per host interpolated between "
            f"{a.ranks_per_host} and {b.ranks_per_host}",
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "host-calibration",
            "format": FORMAT,
            "key": self.key,
            "created": self.created,
            "units": {
                "copy_bandwidth_gb_per_s": "GB/s (1e9 bytes), shared by the host's ranks",
                "copy_latency_us": "microseconds per intra-host message",
                "rank_copy_bandwidth_gb_per_s": "GB/s, one rank's fastest copy",
                "gamma_s_per_byte": "seconds per reduced byte",
                "step_latency_us": "microseconds per step of a collective the library runs",
                "alltoall_step_latency_us": "microseconds per step of the library's alltoall",
                "compute_overhead_us": "microseconds more per emulated compute (a sleep)",
                "compute_stretch": "extra emulated compute per unit of compute",
                "send_overhead_us": "microseconds per message at its sender, serialised",
            },
            "settings": self.settings,
            "by_ranks_per_host": [asdict(p) for p in self.by_ranks],
            "fits": self.fits,
            "points": self.points,
        }

    @classmethod
    def from_json(cls, doc: Any, source: str = "host calibration") -> HostCalibration:
        if not isinstance(doc, dict) or doc.get("kind") != "host-calibration":
            raise HostCalibrationError(
                f'{source}: not a host calibration (no "kind": "host-calibration"); '
                "make one with `python -m simnet calibrate-host`"
            )
        if doc.get("format") != FORMAT:
            raise HostCalibrationError(
                f"{source}: written in format {doc.get('format')!r}, this version reads "
                f"{FORMAT}; run `python -m simnet calibrate-host --force` again"
            )
        try:
            rows = [HostParams(**r) for r in doc["by_ranks_per_host"]]
            if not rows:
                raise ValueError("by_ranks_per_host is empty")
            for r in rows:
                _check_row(r)
            settings = doc.get("settings")
            if settings is not None and not isinstance(settings, dict):
                raise ValueError(f"settings = {settings!r}: an object")
            return cls(
                doc["key"],
                doc["created"],
                rows,
                doc.get("fits", []),
                doc.get("points", []),
                settings,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise HostCalibrationError(f"{source}: malformed host calibration ({e})") from None


_POSITIVE = ("copy_bandwidth_gb_per_s", "rank_copy_bandwidth_gb_per_s")


def _check_row(r: HostParams) -> None:
    """Raises ValueError naming a value no host has: ranks_per_host a count >= 1, the
    bandwidths numbers > 0, the other parameters numbers >= 0 (never true/false)."""
    n = r.ranks_per_host
    if type(n) is not int or n < 1:
        raise ValueError(f"ranks_per_host = {n!r}: a count >= 1")
    for f in dataclasses.fields(r)[1:]:
        v = getattr(r, f.name)
        least = "> 0" if f.name in _POSITIVE else ">= 0"
        if (
            isinstance(v, bool)
            or not isinstance(v, int | float)
            or not math.isfinite(v)
            or (v <= 0 if f.name in _POSITIVE else v < 0)
        ):
            raise ValueError(f"{f.name} = {v!r} at {n} ranks: a number {least}")


def _values(p: HostParams) -> tuple[float, ...]:
    return (
        p.copy_bandwidth_gb_per_s,
        p.copy_latency_us,
        p.rank_copy_bandwidth_gb_per_s,
        p.gamma_s_per_byte,
        p.step_latency_us,
        p.alltoall_step_latency_us,
        p.compute_overhead_us,
        p.compute_stretch,
        p.send_overhead_us,
    )


def load_host_calibration(path: str, option: str = "hosts.params_file") -> HostCalibration:
    """Read a parameter file; raises HostCalibrationError naming the problem and the
    ``option`` that named the file (a configuration field or a command-line option)."""
    import json
    from pathlib import Path

    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HostCalibrationError(f"{option}: no such file {path!r}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HostCalibrationError(f"{option}: cannot read {path}: {e}") from None
    return HostCalibration.from_json(doc, f"{option} {path}")


def apply_host_params(cfg: Any) -> tuple[Any, list[str]]:
    """Fill the ``hosts`` fields a configuration leaves unset (and ``collectives.
    gamma_s_per_byte`` when not given) from ``hosts.params_file``, at the configured
    ranks per host; returns the new configuration and a note per value taken."""
    h = cfg.hosts
    if not h.params_file:
        return cfg, []
    if not h.ranks_per_host:
        raise HostCalibrationError(
            "hosts.params_file needs hosts.ranks_per_host (the count to take parameters at)"
        )
    cal = load_host_calibration(h.params_file)
    params, note = cal.at(h.ranks_per_host)
    name = h.params_file.rsplit("/", 1)[-1]
    notes = [note] if note else []
    update: dict[str, Any] = {}
    for fld in (
        "copy_bandwidth_gb_per_s",
        "copy_latency_us",
        "rank_copy_bandwidth_gb_per_s",
        "compute_overhead_us",
        "compute_stretch",
    ):
        if fld not in h.model_fields_set:  # the configuration's own values win
            update[fld] = getattr(params, fld)
            notes.append(f"calibrated: hosts.{fld} = {getattr(params, fld):.6g} from {name}")
    if h.cores is None and isinstance(cal.key.get("cores"), int):
        update["cores"] = cal.key["cores"]
    hosts = h.model_copy(update=update)
    coll = cfg.collectives
    for fld in ("gamma_s_per_byte", "step_latency_us"):
        if fld not in coll.model_fields_set:
            coll = coll.model_copy(update={fld: getattr(params, fld)})
            notes.append(f"calibrated: collectives.{fld} = {getattr(params, fld):.3g} from {name}")
    net = cfg.network
    if "send_overhead_us" not in net.model_fields_set:
        net = net.model_copy(update={"send_overhead_us": params.send_overhead_us})
        notes.append(
            f"calibrated: network.send_overhead_us = {params.send_overhead_us:.3g} from {name}"
        )
    if "step_latency_us_by_op" not in coll.model_fields_set:
        by_op = params.step_latency_by_op_us()
        coll = coll.model_copy(update={"step_latency_us_by_op": by_op})
        notes.append(
            f"calibrated: collectives.step_latency_us_by_op = "
            f"{ {k: round(v, 3) for k, v in by_op.items()} } from {name}"
        )
    return cfg.model_copy(update={"hosts": hosts, "collectives": coll, "network": net}), notes
