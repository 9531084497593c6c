"""The configuration file (pydantic v2).

The seed file of the topology-aware ring trainer (``config.json`` at the root)
loads unchanged; everything else is an optional extension with a default.
Unknown keys are rejected, naming them.

Units: every dimensioned field names its unit: bandwidths in GB/s with
GB = 1e9 bytes (``..._gb_per_s``), latencies, overheads and compute in
microseconds (``..._us``), sizes in bytes (``..._bytes``). The simulator
converts them to bytes/s and seconds with :mod:`workload.units` where it
builds the network (``simnet.simulate.build_topology`` and
``network_factory``).

Renamed fields: the bandwidths got their unit in their names
(:data:`DEPRECATED_NAMES`, e.g. ``distributed.bandwidth_limit`` is now
``distributed.bandwidth_limit_gb_per_s``, same unit). The old names still
load, with a note (:attr:`Config.deprecation_notes`) that the commands show
once; giving both names is an error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from topologies.builders import DEFAULT_GROUP_SIZE
from workload.collectives import MAX_NCCL_CHANNELS, MAX_PIPELINE_CHUNKS
from workload.spec import MAX_SCALE
from workload.units import GB  # noqa: F401  (re-exported: the config's GB)

DEPRECATED_NAMES: dict[str, dict[str, str]] = {
    "distributed": {"bandwidth_limit": "bandwidth_limit_gb_per_s"},
    "topology": {
        "intra_bandwidth": "intra_bandwidth_gb_per_s",
        "inter_bandwidth": "inter_bandwidth_gb_per_s",
    },
    "network": {"injection_bandwidth": "injection_bandwidth_gb_per_s"},
}
"""section -> {old field name: new field name}; the unit is unchanged."""


def rename_deprecated(section: str, data: Any) -> Any:
    """``data`` (a section's raw dict) with its deprecated field names replaced.

    Raises a validation error naming both when a field is given under both names.
    """
    renames = DEPRECATED_NAMES.get(section, {})
    if not isinstance(data, dict) or not renames.keys() & data.keys():
        return data
    out = dict(data)
    for old, new in renames.items():
        if old not in out:
            continue
        if new in out:
            raise PydanticCustomError(
                "deprecated_and_new_name",
                "{section}.{old} and {section}.{new} name the same field: give only "
                "{section}.{new} (the old name {old} is deprecated)",
                {"section": section, "old": old, "new": new},
            )
        out[new] = out.pop(old)
    return out


def current_key(dotted: str) -> str:
    """A dotted configuration key (``section.field``) with a deprecated field name
    replaced by today's; other keys unchanged."""
    section, _, rest = dotted.partition(".")
    new = DEPRECATED_NAMES.get(section, {}).get(rest)
    return f"{section}.{new}" if new else dotted


def current_names(data: dict[str, Any]) -> dict[str, Any]:
    """A raw configuration dict with its deprecated field names replaced by today's
    (a field given under both names is left for validation to report)."""
    out = dict(data)
    for section, renames in DEPRECATED_NAMES.items():
        given = out.get(section)
        if isinstance(given, dict):
            out[section] = {
                (renames[k] if k in renames and renames[k] not in given else k): v
                for k, v in given.items()
            }
    return out


def deprecation_notes(data: Any) -> list[str]:
    """One note per deprecated field name in a raw configuration dict."""
    notes = []
    if isinstance(data, dict):
        for section, renames in DEPRECATED_NAMES.items():
            given = data.get(section)
            if isinstance(given, dict):
                notes += [
                    f"{section}.{old} is deprecated; use {section}.{new} (same unit)"
                    for old, new in renames.items()
                    if old in given
                ]
    return notes


# Bounds of what is physically meaningful and runnable: a bandwidth from 1 kB/s to 1 PB/s,
# a latency up to 1 s, a message size multiplier up to 1000 (the reference proxies are
# full size at 1), up to a million ranks and iterations.
MIN_GB_PER_S = 1e-6
MAX_GB_PER_S = 1e6
MAX_LATENCY_US = 1e6
MAX_RANKS = 1_000_000
MAX_ITERATIONS = 1_000_000


def _a_number(value: Any) -> Any:
    if isinstance(value, bool | str):
        raise ValueError(f"a number is needed, not {json.dumps(value)}")
    return value


def _only_bool(value: Any) -> Any:
    if not isinstance(value, bool):
        raise ValueError("true or false is needed")
    return value


# Numbers inside lists and dicts: JSON's true/false are not numbers there either.
Int = Annotated[int, BeforeValidator(_a_number)]
Float = Annotated[float, BeforeValidator(_a_number)]
# A switch is true or false: not 1, 0, "yes" or "off", which pydantic would take.
Bool = Annotated[bool, BeforeValidator(_only_bool)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    _section: ClassVar[str] = ""

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        return rename_deprecated(cls._section, data)

    @field_validator("*", mode="before")
    @classmethod
    def _only_numbers_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # JSON's true/false and strings are not numbers (pydantic would read true as 1
        # and "16" as 16: a quoted number is more often a mistake elsewhere too).
        if not isinstance(value, bool | str):
            return value
        f = cls.model_fields.get(info.field_name or "")
        if f is not None and _is_number(f.annotation):
            raise ValueError(f"a number is needed, not {json.dumps(value)}")
        return value


def _is_number(annotation: Any) -> bool:
    """An int or float field, possibly optional (``X | None``), that takes no bool or
    string."""
    import types
    import typing

    if typing.get_origin(annotation) not in (None, typing.Union, types.UnionType):
        return False  # a list, dict, Literal, ...
    kinds = {annotation, *typing.get_args(annotation)}
    return bool(kinds & {int, float}) and not kinds & {bool, str}


class ModelSection(_Strict):
    """The ring trainer's network: AlexNet with CIFAR-10 shapes by default."""

    input_channels: int = Field(3, ge=1)
    num_classes: int = Field(10, ge=1)


class TrainingSection(_Strict):
    batch_size: int = Field(32, ge=1)
    num_epochs: int = Field(5, ge=1, le=MAX_ITERATIONS)
    steps_per_epoch: int = Field(100, ge=1, le=MAX_ITERATIONS)
    learning_rate: float = Field(0.001, gt=0)
    compute_us_per_step: float | None = Field(
        None,
        ge=0,
        le=1e9,
        description="emulated compute per training step (us, at most 1e9: 1,000 s); "
        "default: the ring trainer's documented estimate",
    )


class DistributedSection(_Strict):
    _section: ClassVar[str] = "distributed"

    num_nodes: int = Field(10, ge=1, le=MAX_RANKS, description="processes (ranks)")
    use_localhost: Bool = True
    host: str = "127.0.0.1"
    port: int = Field(29500, ge=1, le=65535)
    bandwidth_limit_gb_per_s: float = Field(
        10.0,
        ge=MIN_GB_PER_S,
        le=MAX_GB_PER_S,
        description="max bandwidth between two nodes, GB/s (GB = 1e9 bytes); "
        "formerly bandwidth_limit",
    )
    buffer_size_bytes: int | None = Field(
        None,
        ge=1,
        description="communication buffer per transfer (bytes); larger transfers "
        "are reported as overruns",
    )


TopologyType = Literal[
    "ring", "hierarchical", "switch", "fat_tree", "torus", "rail_optimised", "dragonfly"
]
GROUPED_TOPOLOGIES = ("hierarchical", "rail_optimised")
"""Topologies whose endpoints come in groups of ``topology.group_size`` (nodes of GPUs)."""


class TopologySection(_Strict):
    _section: ClassVar[str] = "topology"

    type: TopologyType = "ring"
    num_nodes: int | None = Field(
        None, ge=1, le=MAX_RANKS, description="endpoints (default: distributed.num_nodes)"
    )
    permutations: list[Int | list[Int]] = Field(
        default_factory=lambda: [0],
        description=(
            "ring topology: one ring per entry, each carrying an equal share of the data. "
            "An integer s is the ring order rotated by s: s, s+1, ..., n-1, 0, ..., s-1 "
            "(0 <= s < n); a list is an explicit ring order, a permutation of 0..n-1"
        ),
    )
    link_latency_us: float = Field(
        5.0, ge=0, le=MAX_LATENCY_US, description="latency per link (us)"
    )
    bidirectional: Bool = True
    group_size: int | None = Field(
        None,
        ge=1,
        description=f"hierarchical: endpoints per group; rail_optimised: GPUs per node "
        f"(default {DEFAULT_GROUP_SIZE})",
    )
    intra_bandwidth_gb_per_s: float | None = Field(
        None,
        ge=MIN_GB_PER_S,
        le=MAX_GB_PER_S,
        description="hierarchical intra-group GB/s; rail_optimised: each GPU's NVLink "
        "(default: distributed.bandwidth_limit_gb_per_s); formerly intra_bandwidth",
    )
    inter_bandwidth_gb_per_s: float | None = Field(
        None,
        ge=MIN_GB_PER_S,
        le=MAX_GB_PER_S,
        description="hierarchical inter-group GB/s; rail_optimised: each GPU's NIC "
        "(default: distributed.bandwidth_limit_gb_per_s / 4); formerly inter_bandwidth",
    )
    intra_latency_us: float | None = Field(None, ge=0, le=MAX_LATENCY_US)
    inter_latency_us: float | None = Field(None, ge=0, le=MAX_LATENCY_US)
    k: int | None = Field(None, ge=2, description="fat_tree: switch radix (even)")
    oversubscription: float = Field(1.0, ge=1.0, le=1000.0)
    dims: list[Int] | None = Field(None, description="torus dimensions, e.g. [4, 4]")
    routers_per_group: int | None = Field(None, ge=1, description="dragonfly: routers per group")
    endpoints_per_router: int | None = Field(
        None, ge=1, description="dragonfly: endpoints per router"
    )
    global_bandwidth_gb_per_s: float | None = Field(
        None,
        ge=MIN_GB_PER_S,
        le=MAX_GB_PER_S,
        description="dragonfly: each global link between groups, GB/s (default: "
        "distributed.bandwidth_limit_gb_per_s, as the local and endpoint links)",
    )
    global_latency_us: float | None = Field(
        None, ge=0, le=MAX_LATENCY_US, description="dragonfly: global link latency (us)"
    )
    ecmp: Bool | None = Field(
        None,
        description="spread flows over equal-cost routes (hashed per pair); default: on "
        "for fat_tree, off otherwise; never on hierarchical",
    )
    placement: list[Int] | None = Field(
        None, description="endpoint of each rank (default: identity)"
    )

    def unused_fields(self) -> list[str]:
        """The fields set here that this topology type does not read (each type's own
        fields: a dragonfly's links take no intra/inter bandwidth, a fat-tree no dims)."""
        mine = {f for t, fs in TYPE_FIELDS.items() if t != self.type for f in fs}
        mine -= TYPE_FIELDS.get(self.type, frozenset())
        if self.type in ("fat_tree", "torus"):
            mine.add("num_nodes")  # their size is k or dims
        # Against the defaults, not model_fields_set: a configuration dumped and loaded
        # again (a job's, a sweep point's) has every field set.
        fields = type(self).model_fields
        default = {f: fields[f].get_default(call_default_factory=True) for f in mine}
        return sorted(f for f in mine if getattr(self, f) != default[f])

    @property
    def effective_ecmp(self) -> bool:
        """``ecmp``, or the topology's default when unset."""
        from topologies.routing import default_ecmp

        return default_ecmp(self.type) if self.ecmp is None else self.ecmp

    @property
    def effective_group_size(self) -> int | None:
        """Endpoints per group: ``group_size``, else the default on a hierarchical
        topology, else None (the hierarchical algorithm then has no group size)."""
        if self.group_size is not None:
            return self.group_size
        return DEFAULT_GROUP_SIZE if self.type in GROUPED_TOPOLOGIES else None


_TWO_LEVELS = frozenset(
    {"intra_bandwidth_gb_per_s", "inter_bandwidth_gb_per_s", "intra_latency_us", "inter_latency_us"}
)
TYPE_FIELDS: dict[str, frozenset[str]] = {
    "ring": frozenset({"bidirectional", "permutations"}),
    "hierarchical": _TWO_LEVELS,
    "rail_optimised": _TWO_LEVELS,
    "fat_tree": frozenset({"k", "oversubscription"}),
    "torus": frozenset({"dims"}),
    "dragonfly": frozenset(
        {
            "routers_per_group",
            "endpoints_per_router",
            "global_bandwidth_gb_per_s",
            "global_latency_us",
        }
    ),
}
"""The topology fields only some types read, by type (the others every type reads, or
the workloads' groups; ``num_nodes`` all but fat_tree and torus, sized by k and dims)."""


class WorkloadSection(_Strict):
    """What runs: the ring trainer (default) or any proxy with its arguments."""

    name: str = Field("alexnet_ring", description="a model of `python -m proxies --help`")
    args: list[Int] = Field(default_factory=list, description="the proxy's positional args")
    world_size: int | None = Field(
        None, ge=1, le=MAX_RANKS, description="default: distributed.num_nodes"
    )
    scale: float = Field(1.0, gt=0, le=MAX_SCALE, description="message size multiplier")
    per_tensor: Bool = False
    fix_quirks: Bool = False
    iterations: int = Field(
        1, ge=1, le=MAX_ITERATIONS, description="simulated iterations per phase"
    )
    compute_scale: float = Field(1.0, ge=0, le=1000, description="multiplier of emulated compute")
    flags: dict[str, Int | Float | str] = Field(
        default_factory=dict,
        description='model-specific options, e.g. {"scaling_size": 512} or {"preset": '
        '"llama-3-8b", "tp": 8}',
    )

    @field_validator("flags", mode="before")
    @classmethod
    def _no_nulls(cls, value: Any) -> Any:
        # (null matched none of a flag's types, and the first one's complaint, "a valid
        # integer", was all that was said, even of a string option)
        if isinstance(value, dict):
            for k, v in value.items():
                if v is None:
                    raise ValueError(f"{k}: null is no value; leave it out for its default")
        return value


class NetworkSection(_Strict):
    _section: ClassVar[str] = "network"

    alpha_us: float = Field(0.0, ge=0, le=MAX_LATENCY_US, description="per-message overhead (us)")
    send_overhead_us: float = Field(
        0.0,
        ge=0,
        le=1e6,
        description="LogGP's o: processor time per message at its sender (us), paid one "
        "message after another by each rank (alpha_us is paid by concurrent messages side "
        "by side)",
    )
    injection_bandwidth_gb_per_s: float | None = Field(
        None,
        ge=MIN_GB_PER_S,
        le=MAX_GB_PER_S,
        description="per-endpoint injection limit, GB/s; formerly injection_bandwidth",
    )
    eager_threshold_bytes: int = Field(
        65536,
        ge=0,
        description="largest message sent eagerly (bytes); larger ones use rendezvous",
    )
    rendezvous_handshake: Bool = Field(
        True,
        description="a rendezvous message's data waits for its request-to-send to reach "
        "the receiver (a zero-byte message: alpha_us + the route's latency) after the send "
        "is posted; false: the data leaves as soon as both sides have posted",
    )
    link_params_file: str | None = Field(
        None, description="calibrated parameters (JSON) overriding alpha and bandwidths"
    )


def _check_algorithms(algorithm: str | None, by_op: dict[str, str]) -> None:
    from workload.collectives import ALGORITHMS

    known = sorted({a for algs in ALGORITHMS.values() for a in algs})
    if algorithm is not None and algorithm not in known:
        raise ValueError(
            f"collectives.algorithm: unknown algorithm {algorithm!r}; known: {', '.join(known)}"
        )
    for op, alg in by_op.items():
        if op not in ALGORITHMS:
            raise ValueError(
                f"collectives.by_op: unknown collective {op!r}; known: {', '.join(ALGORITHMS)}"
            )
        if alg not in ALGORITHMS[op]:
            raise ValueError(
                f"collectives.by_op.{op}: {alg!r} is not an algorithm of {op}; "
                f"choose one of {', '.join(ALGORITHMS[op])}"
            )


class HostsSection(_Strict):
    """Ranks sharing a machine (topologies.hosts): with ``ranks_per_host`` set, the
    topology's endpoints are hosts, each running that many ranks (host-major)."""

    ranks_per_host: int | None = Field(
        None, ge=1, le=4096, description="ranks on each host (default: one rank per endpoint)"
    )
    cores: int | None = Field(None, ge=1, description="cores per host (reported)")
    copy_bandwidth_gb_per_s: float | None = Field(
        None,
        ge=MIN_GB_PER_S,
        le=MAX_GB_PER_S,
        description="memory-copy capacity of a host, shared by its intra-host messages, GB/s",
    )
    rank_copy_bandwidth_gb_per_s: float | None = Field(
        None,
        ge=MIN_GB_PER_S,
        le=MAX_GB_PER_S,
        description="fastest copy of one rank, GB/s (default: the host's capacity)",
    )
    copy_latency_us: float | None = Field(
        None,
        ge=0,
        le=MAX_LATENCY_US,
        description="per-message cost of an intra-host message (us; default 0)",
    )
    nic_bandwidth_gb_per_s: float | None = Field(
        None,
        ge=MIN_GB_PER_S,
        le=MAX_GB_PER_S,
        description="each host's NIC per direction, GB/s (default: its links)",
    )
    nic_latency_us: float = Field(
        0.0, ge=0, le=MAX_LATENCY_US, description="NIC latency per direction (us)"
    )
    compute_overhead_us: float = Field(
        0.0,
        ge=0,
        le=1e6,
        description="extra time of every emulated compute operation (us): a sleep wakes up "
        "late; with compute_stretch, a compute of d takes d (1 + stretch) + overhead",
    )
    compute_stretch: float = Field(
        0.0, ge=0, le=10, description="extra time of emulated compute per unit of compute"
    )
    params_file: str | None = Field(
        None,
        description="host calibration (python -m simnet calibrate-host) filling the fields "
        "left unset, at ranks_per_host",
    )


class CollectivesSection(_Strict):
    algorithm: str | None = Field(
        None,
        description="one algorithm for every collective "
        "(e.g. ring, multiring, hierarchical); default: MPICH-like",
    )
    by_op: dict[str, str] = Field(default_factory=dict, description="op -> algorithm")
    channels: int | None = Field(
        None,
        ge=1,
        le=MAX_NCCL_CHANNELS,
        description="nccl_ring: rings, nccl_tree: tree pairs, each with an equal share "
        "(default: GPUs per node of either; 1 where a group is laid out as one node)",
    )
    pipeline_chunks: int | None = Field(
        None,
        ge=1,
        le=MAX_PIPELINE_CHUNKS,
        description="nccl_tree: chunks each tree's share is pipelined in (default: its share "
        "in 512 KiB chunks, 1 to 64)",
    )
    streamed_rings: Bool = Field(
        False,
        description="nccl_ring run as NCCL runs it: each run of a ring's steps as one "
        "message per hop (the same bytes), then what the steps it stands for take beyond "
        "it (each GPU's steps settling into the pace of the ring's slowest hop, from "
        "its own start): C p messages an allreduce of C channels instead of 2 C p (p - 1) "
        "(thousands of GPUs); exact on uncontended rings, an upper bound where ring hops "
        "share links",
    )
    streamed_trees: Bool = Field(
        False,
        description="nccl_tree run as NCCL runs it: its pipeline as one message per tree "
        "edge and way (all its chunks), then what the pipeline's steps take beyond it "
        "(each GPU's critical path over its steps, from every GPU's start): 4 C (p - 1) "
        "messages an allreduce of C channels instead of k times as many (k chunks a tree: "
        "by default up to 64); exact where no two of its hops share a link at once (on "
        "GPU clusters: when the GPUs start together, as an inner GPU takes both children's "
        "chunks over one NIC link), an approximation otherwise",
    )
    gamma_s_per_byte: float = Field(
        0.0,
        ge=0,
        le=1e-6,
        description="reduction cost per reduced byte (s/B), paid by the receiver of every "
        "reducing step of a collective the MPI library runs (the proxies' own schedules "
        "move data without reducing it)",
    )
    async_progress: Bool = Field(
        True,
        description="non-blocking collectives progress in the background (a progress "
        "thread or offload); false: only while their rank is inside an MPI call (waiting, "
        "testing, or blocked), as in MPICH and Open MPI by default",
    )
    library: Literal["mpi", "nccl"] | None = Field(
        None,
        description="what runs the collectives: mpi (MPI's protocol: eager and rendezvous "
        "with the network's handshake, gamma and step latency, non-blocking ones "
        "progressing together), nccl (as NCCL runs them: GPU kernels, one at a time per "
        "group in call order, every message waiting for its receiver without a "
        "handshake, no host reduction cost); default: nccl for the collectives given an "
        "NCCL algorithm (nccl_ring, nccl_tree), mpi for the others",
    )
    stream_order: Bool | None = Field(
        None,
        description="true: a rank's collectives on one group run one at a time in call "
        "order, as NCCL runs a communicator's collectives on its CUDA stream; false: "
        "non-blocking collectives on a group progress together, as in MPI libraries; "
        "default: stream order for the collectives run as NCCL runs them (library)",
    )
    step_latency_us: float = Field(
        0.0,
        ge=0,
        le=1e6,
        description="cost per step of a collective the MPI library runs (us), paid at the "
        "step's end: a library without a progress thread advances a collective only when "
        "the program tests it (as the proxies' polled progress does)",
    )
    step_latency_us_by_op: dict[str, Float] = Field(
        default_factory=dict,
        description="op -> cost per step (us) for that collective instead of "
        "step_latency_us (e.g. alltoall, whose library schedule takes more tests per step)",
    )

    @property
    def names_nccl(self) -> bool:
        """Whether ``algorithm`` or ``by_op`` names an NCCL algorithm."""
        from workload.collectives import NCCL_ALGORITHMS

        return any(a in NCCL_ALGORITHMS for a in (self.algorithm, *self.by_op.values()))

    @model_validator(mode="after")
    def _known(self) -> CollectivesSection:
        _check_algorithms(self.algorithm, self.by_op)
        from workload.collectives import ALGORITHMS

        for op, v in self.step_latency_us_by_op.items():
            if op not in ALGORITHMS:
                raise ValueError(
                    f"step_latency_us_by_op: unknown collective {op!r} "
                    f"(one of {', '.join(ALGORITHMS)})"
                )
            if isinstance(v, bool) or not 0 <= v <= 1e6:
                raise ValueError(f"step_latency_us_by_op.{op} must be within 0 .. 1e6 us")
        return self


NodeName = Int | str
"""A topology node as the configuration names it: an endpoint's number or a switch's name
(e.g. 3, "top", "g0", "core1", "edge0.1")."""


class LinkChange(_Strict):
    """A link whose bandwidth is scaled (a degraded cable, a port at a lower speed)."""

    link: list[NodeName] = Field(min_length=2, max_length=2, description="[node, node]")
    bandwidth_factor: float = Field(
        gt=0, le=1000, description="multiplier of the link's bandwidth, e.g. 0.5"
    )
    one_way: Bool = Field(False, description="only the direction link[0] -> link[1]")


class WhatIfSection(_Strict):
    """What-if scenarios: slow ranks and degraded or failed links."""

    stragglers: dict[str, Float] = Field(
        default_factory=dict,
        description='rank -> compute slowdown factor, e.g. {"3": 1.5}: rank 3 computes '
        "1.5x as long",
    )
    compute_noise: float = Field(
        0.0,
        ge=0,
        le=100,
        description="random slowdown of every compute operation: it takes d (1 + X), X "
        "exponential with this mean (OS noise, thermal throttling); 0: none",
    )
    seed: int = Field(0, ge=0, description="seed of compute_noise (same seed, same run)")
    degraded_links: list[LinkChange] = Field(default_factory=list)
    failed_links: list[list[NodeName]] = Field(
        default_factory=list,
        description='links removed (both directions), e.g. [[3, "top"]]; traffic takes '
        "the next shortest route",
    )

    @field_validator("stragglers")
    @classmethod
    def _ranks(cls, value: dict[str, float]) -> dict[str, float]:
        for k, f in value.items():
            if not k.isdigit():
                raise ValueError(f"{k!r} is not a rank number")
            if str(int(k)) != k:  # "01" and "1" would name one rank twice
                raise ValueError(f"write rank {k!r} as {str(int(k))!r}")
            if not 0 < f <= 1000:
                raise ValueError(f"rank {k}: the slowdown factor must be in (0, 1000]")
        return value

    @field_validator("failed_links")
    @classmethod
    def _pairs(cls, value: list[list[Any]]) -> list[list[Any]]:
        for link in value:
            if len(link) != 2:
                raise ValueError(f"failed_links: {link!r} is not a pair [node, node]")
        return value

    @property
    def active(self) -> bool:
        return bool(
            self.stragglers or self.compute_noise or self.degraded_links or self.failed_links
        )


class JobSection(_Strict):
    """One job sharing the network with others: what it runs, where, and when."""

    name: str = Field(..., min_length=1, max_length=40, pattern=r"^[A-Za-z0-9_.-]+$")
    workload: WorkloadSection = Field(default_factory=WorkloadSection)
    placement: list[Int] | None = Field(
        None,
        description="endpoint of each of the job's ranks (default: the next free endpoints "
        "in job order)",
    )
    start_us: float = Field(0.0, ge=0, le=1e12, description="when the job starts (us)")


class LoggingSection(_Strict):
    # ("" would write every output into the current folder)
    log_dir: str = Field("results", min_length=1, description="the outputs' folder")
    enable_metrics: Bool = True


class Config(_Strict):
    model: ModelSection = Field(default_factory=ModelSection)
    training: TrainingSection = Field(default_factory=TrainingSection)
    distributed: DistributedSection = Field(default_factory=DistributedSection)
    topology: TopologySection = Field(default_factory=TopologySection)
    logging: LoggingSection = Field(default_factory=LoggingSection)
    workload: WorkloadSection = Field(default_factory=WorkloadSection)
    network: NetworkSection = Field(default_factory=NetworkSection)
    collectives: CollectivesSection = Field(default_factory=CollectivesSection)
    hosts: HostsSection = Field(default_factory=HostsSection)
    whatif: WhatIfSection = Field(default_factory=WhatIfSection)
    jobs: list[JobSection] = Field(
        default_factory=list,
        description="several jobs on one network (each its own workload, placement and "
        "start); the top-level workload section is then not used",
    )

    _deprecation_notes: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _note_old_names(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Config:
        cfg = handler(data)
        if isinstance(data, dict):  # a Config passed in keeps its own notes
            cfg._deprecation_notes = deprecation_notes(data)
        return cfg

    @property
    def deprecation_notes(self) -> list[str]:
        """One note per deprecated field name the configuration was given with."""
        return list(self._deprecation_notes)

    def as_run(self) -> dict[str, Any]:
        """The configuration as a run took it (every default filled in), to record beside
        its results: loaded again, it runs the same. With jobs, the top-level workload (not
        run) is left out unless it was given."""
        data = self.model_dump()
        if self.jobs and "workload" not in self.model_fields_set:
            del data["workload"]
        return data

    @model_validator(mode="after")
    def _check(self) -> Config:
        t = self.topology
        n = self.num_endpoints
        if self.jobs and t.permutations != [0]:
            raise ValueError(
                "topology.permutations: with jobs, rings of one workload's ranks do not "
                "apply; place each job's ranks with jobs[i].placement"
            )
        if t.type == "ring" and self.hosts.ranks_per_host:
            # The rings order ranks; the topology's ring joins hosts.
            ring_orders(t.permutations, self.world_size)
        elif t.type == "ring":
            ring_orders(t.permutations, n)  # raises with the offending entry
            if self.world_size != n and t.permutations != [0]:
                raise ValueError(
                    f"topology.permutations: rings order the ranks, so the world "
                    f"size ({self.world_size}) must equal topology.num_nodes ({n})"
                )
        # The field that set the number of endpoints (for the types that take it).
        nodes = "topology.num_nodes" if t.num_nodes else "distributed.num_nodes"
        if t.type in GROUPED_TOPOLOGIES:
            g = t.effective_group_size
            if n % g:
                raise ValueError(f"topology.group_size={g} must divide {nodes}={n}")
        if t.type == "dragonfly":
            if t.routers_per_group is None or t.endpoints_per_router is None:
                raise ValueError(
                    "topology.routers_per_group, topology.endpoints_per_router: a dragonfly "
                    "needs both (e.g. 4 and 2); its groups are num_nodes / (their product)"
                )
            per_group = t.routers_per_group * t.endpoints_per_router
            if n % per_group:
                raise ValueError(
                    f"{nodes}={n} must be a multiple of topology.routers_per_group * "
                    f"endpoints_per_router = {per_group} (the endpoints of one dragonfly group)"
                )
        if t.type == "fat_tree" and (t.k is None or t.k % 2):
            raise ValueError("topology.k: a fat_tree needs an even switch radix k (e.g. 4)")
        if t.type == "torus" and not t.dims:
            raise ValueError("topology.dims: a torus needs its dimensions, e.g. [4, 4]")
        if t.type == "torus":
            for d, size in enumerate(t.dims):
                if size < 2:  # (before the endpoints are counted: 0 would make none)
                    raise ValueError(f"topology.dims[{d}] must be >= 2 (got {size})")
        if not self.jobs and self.world_size > self.num_rank_endpoints:
            # Before anything is built or sized (a case too big for memory would be
            # refused with a size that cannot hold its ranks either).
            ranks = (
                "workload.world_size"
                if self.workload.world_size
                else "distributed.num_nodes (the world size when workload.world_size is not given)"
            )
            size = {"fat_tree": "topology.k", "torus": "topology.dims"}.get(t.type, nodes)
            per_host = (
                f" ({self.num_endpoints:,} x {self.hosts.ranks_per_host} ranks per host)"
                if self.hosts.ranks_per_host
                else ""
            )
            raise ValueError(
                f"{ranks}: {self.world_size:,} ranks but the {t.type} topology has only "
                f"{self.num_rank_endpoints:,} endpoints{per_host}; use a larger topology "
                f"({size}) or fewer ranks"
            )
        if self.jobs:
            self._check_jobs()
            if t.placement is not None:
                raise ValueError(
                    "topology.placement: with jobs, each job places its ranks (jobs[i].placement)"
                )
        for k in self.whatif.stragglers:
            if int(k) >= self.world_size:
                raise ValueError(
                    f"whatif.stragglers: rank {k} does not exist (ranks 0..{self.world_size - 1})"
                )
        return self

    def _check_jobs(self) -> None:
        names = [j.name for j in self.jobs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"jobs: names must be unique ({', '.join(dup)} repeated)")
        limit = self.num_rank_endpoints
        taken: dict[int, str] = {}
        for i, (job, eps) in enumerate(zip(self.jobs, self.job_placements(), strict=True)):
            ranks = job.workload.world_size or self.distributed.num_nodes
            if job.placement is not None and len(job.placement) != ranks:
                raise ValueError(
                    f"jobs[{i}].placement: {len(job.placement)} endpoints for {ranks} ranks "
                    f"(jobs[{i}].workload.world_size)"
                )
            twice = sorted({e for e in eps if eps.count(e) > 1})
            if twice:
                raise ValueError(
                    f"jobs[{i}].placement: endpoint {twice[0]} is given more than once; "
                    "each rank takes its own endpoint"
                )
            for e in eps:
                if not 0 <= e < limit:
                    raise ValueError(
                        f"jobs[{i}] ({job.name}): endpoint {e} does not exist (0..{limit - 1}); "
                        f"the jobs need {sum(len(p) for p in self.job_placements())} endpoints"
                    )
                if e in taken:
                    raise ValueError(
                        f"jobs[{i}] ({job.name}): endpoint {e} is also used by job "
                        f"{taken[e]!r}; jobs take distinct endpoints"
                    )
                taken[e] = job.name

    def job_placements(self) -> list[list[int]]:
        """Each job's endpoints: its placement, or the next endpoints no earlier job
        took, in order."""
        out: list[list[int]] = []
        used: set[int] = set()
        for job in self.jobs:
            if job.placement is not None:
                out.append(list(job.placement))
                used.update(job.placement)
        nxt = 0
        result = []
        given = iter(out)
        for job in self.jobs:
            if job.placement is not None:
                result.append(next(given))
                continue
            ranks = job.workload.world_size or self.distributed.num_nodes
            eps = []
            while len(eps) < ranks:
                if nxt not in used:
                    eps.append(nxt)
                    used.add(nxt)
                nxt += 1
            result.append(eps)
        return result

    @property
    def num_endpoints(self) -> int:
        t = self.topology
        if t.type == "fat_tree" and t.k:
            return t.k**3 // 4
        if t.type == "torus" and t.dims:
            out = 1
            for d in t.dims:
                out *= d
            return out
        return t.num_nodes or self.distributed.num_nodes

    @property
    def world_size(self) -> int:
        """Ranks: the workload's, or with ``jobs`` all the jobs' together."""
        if self.jobs:
            return sum(j.workload.world_size or self.distributed.num_nodes for j in self.jobs)
        return self.workload.world_size or self.distributed.num_nodes

    @property
    def num_rank_endpoints(self) -> int:
        """Endpoints ranks can be placed on: the topology's, times ranks per host."""
        return self.num_endpoints * (self.hosts.ranks_per_host or 1)


def ring_orders(permutations: list[int | list[int]], n: int) -> list[list[int]]:
    """The ring orders (rank sequences) that ``topology.permutations`` describes."""
    if not permutations:
        raise ValueError("topology.permutations: give at least one ring (e.g. [0])")
    orders: list[list[int]] = []
    for i, entry in enumerate(permutations):
        if isinstance(entry, int):
            if not 0 <= entry < n:
                raise ValueError(
                    f"topology.permutations[{i}] = {entry}: a rotation must be "
                    f"in 0..{n - 1} for {n} nodes"
                )
            order = [(entry + k) % n for k in range(n)]
        else:
            if sorted(entry) != list(range(n)):
                raise ValueError(
                    f"topology.permutations[{i}]: a ring order must list every "
                    f"rank 0..{n - 1} exactly once (got {entry})"
                )
            order = list(entry)
        if order in orders:
            raise ValueError(
                f"topology.permutations[{i}] repeats ring "
                f"{orders.index(order)}; give distinct rings"
            )
        orders.append(order)
    return orders


def same_links(orders: list[list[int]]) -> list[tuple[int, int]]:
    """Pairs (i, j), i < j, of ring orders that are one cycle in the same direction (a
    rotation of it): their hops are the same links, so splitting data over them adds no
    path."""

    def hops(order: list[int]) -> frozenset[tuple[int, int]]:
        return frozenset(zip(order, order[1:] + order[:1], strict=True))

    edges = [hops(o) for o in orders]
    return [
        (i, j) for i in range(len(edges)) for j in range(i + 1, len(edges)) if edges[i] == edges[j]
    ]


class ConfigError(ValueError):
    """A configuration problem, worded for the user (field and fix)."""


def format_validation_error(e: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid configuration"]
    seen: set[str] = set()
    for err in e.errors():
        parts = [str(x) for x in err["loc"]]
        if parts and ("[" in parts[-1] or parts[-1] in _UNION_BRANCHES):
            # One branch of a union (an int or a name): the first branch's words only.
            parts.pop()
            if ".".join(parts) in seen:
                continue
        loc = ".".join(parts)
        seen.add(loc)
        msg = err["msg"]
        if err["type"] == "value_error":  # our own words: without pydantic's prefix
            msg = msg.removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            lines.append(f"  {loc}: unknown key; remove it (see `python -m simnet --schema`)")
        elif err["type"] == "deprecated_and_new_name" or not loc:
            lines.append(f"  {msg}")  # a check across fields names them itself
        else:
            lines.append(f"  {loc}: {msg}{_got(err.get('input'))}")
    return "\n".join(lines)


# The tags pydantic puts at the end of an error's location inside a union
_UNION_BRANCHES = frozenset({"int", "str", "float", "bool", "list", "dict"})


def _got(value: Any, limit: int = 60) -> str:
    """`` (got VALUE)`` for a scalar; nothing for a whole section (a check across fields
    names its fields in its message, and pasting the section buries it)."""
    if isinstance(value, dict):
        return ""
    text = repr(value)
    return f" (got {text if len(text) <= limit else text[: limit - 3] + '...'})"


class _KeyTwice(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's dict, refusing a key given twice (json keeps the last)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _KeyTwice(k)
        out[k] = v
    return out


def read_json_file(path: str | Path) -> Any:
    """The JSON document in the file ``path``; raises ConfigError saying why it cannot be
    read (the caller names the file and the option)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"), object_pairs_hook=_no_twice)
    except _KeyTwice as e:
        raise ConfigError(
            f"{json.dumps(e.key)} is given twice in one object (JSON would keep the last "
            "silently); keep one"
        ) from None
    except FileNotFoundError:
        raise ConfigError("no such file") from None
    except IsADirectoryError:
        raise ConfigError("a folder; name the configuration file") from None
    except OSError as e:
        raise ConfigError(f"cannot read it: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"not UTF-8 text (byte {e.start} is 0x{e.object[e.start]:02x}); save it as UTF-8"
        ) from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"not valid JSON: {e}") from None


def load_config(source: str | Path | dict[str, Any] | Config) -> Config:
    """A Config from a path, a dict or a Config; raises ConfigError with readable text."""
    if isinstance(source, Config):
        return source
    name = "config"
    if isinstance(source, (str, Path)):
        name = str(source)
        try:
            data = read_json_file(source)
        except ConfigError as e:
            raise ConfigError(f"{name}: {e}") from None
    else:
        data = source
    if isinstance(source, (str, Path)) and isinstance(data, dict):
        # Relative to the configuration file, wherever the command runs from (the dict
        # was just read from it: changed in place).
        absolute_input_paths(data, Path(source).parent)
    try:
        cfg = Config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, name)) from None
    return cfg


INPUT_FILES: tuple[tuple[str, str], ...] = (
    ("network", "link_params_file"),
    ("hosts", "params_file"),
)
"""(section, field) of the files a configuration reads: a link and a host calibration."""


def workload_input_paths(workload: Any) -> list[str]:
    """Names of the options of a ``workload`` section (a dict, as in the file) that name
    a file or folder (``Arg.path``: a Chakra trace set's ``trace_dir``)."""
    if not isinstance(workload, dict) or not isinstance(workload.get("flags"), dict):
        return []
    from workload.models import MODELS

    name = workload.get("name")  # an unknown name (or not a name) is refused later
    model = MODELS.get(name) if isinstance(name, str) else None
    return [a.name for a in model.flags if a.path] if model is not None else []


def workload_sections(data: dict[str, Any]) -> list[Any]:
    """The ``workload`` sections of a configuration (a dict, as in the file): its own and
    every job's, whatever their types (validation refuses the wrong ones)."""
    jobs = data.get("jobs")
    job_sections = (
        [j.get("workload") for j in jobs if isinstance(j, dict)] if isinstance(jobs, list) else []
    )
    return [data.get("workload"), *job_sections]


def workload_input_files(data: dict[str, Any]) -> list[str]:
    """The files and folders the workloads of a configuration (a dict) name in their path
    options, as given (non-empty strings only)."""
    out = []
    for workload in workload_sections(data):
        for key in workload_input_paths(workload):
            value = workload["flags"].get(key)
            if isinstance(value, str) and value:
                out.append(value)
    return out


def absolute_input_paths(data: dict[str, Any], base_dir: str | Path) -> None:
    """Make every file or folder a configuration (a dict, as in the file) reads absolute,
    in place: the calibrations of ``INPUT_FILES`` and the workloads' path options (of
    the workload and of every job), a relative one being taken from ``base_dir`` (the
    configuration file's folder). Entries of the wrong type are left for validation."""

    def resolve(part: Any, key: str) -> None:
        if isinstance(part, dict) and isinstance(part.get(key), str) and part[key]:
            path = Path(part[key]).expanduser()
            part[key] = str(path if path.is_absolute() else (Path(base_dir) / path).resolve())

    for section, key in INPUT_FILES:
        resolve(data.get(section), key)
    for workload in workload_sections(data):
        for key in workload_input_paths(workload):
            resolve(workload["flags"], key)


LINK_PARAM_KEYS: dict[str, str] = {
    "alpha_us": "network",
    "bandwidth_limit_gb_per_s": "distributed",
    "link_latency_us": "topology",
    "intra_bandwidth_gb_per_s": "topology",
    "inter_bandwidth_gb_per_s": "topology",
    "intra_latency_us": "topology",
    "inter_latency_us": "topology",
    "eager_threshold_bytes": "network",
    "injection_bandwidth_gb_per_s": "network",
}
"""Keys of a link-parameter file: each is the configuration field of that name,
in that section (same name, same unit)."""

OLD_LINK_PARAM_KEYS: dict[str, str] = {"bandwidth_gb_per_s": "bandwidth_limit_gb_per_s"}
"""Keys of older link-parameter files -> today's key."""


def apply_link_params(cfg: Config, base_dir: str | Path = ".") -> tuple[Config, list[str]]:
    """Apply ``network.link_params_file`` (a calibration result) to a configuration.

    The file is JSON whose top-level keys among :data:`LINK_PARAM_KEYS` override
    the configuration fields of the same names (GB/s and microseconds, as the
    config); keys of older files (:data:`OLD_LINK_PARAM_KEYS`) are read as
    today's; other keys (fit details, provenance) are ignored. A relative path
    is taken from ``base_dir``. Returns the new configuration and a note per
    override.
    """
    name = cfg.network.link_params_file
    if not name:
        return cfg, []
    path = Path(name)
    if not path.is_absolute():
        path = Path(base_dir) / path
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"network.link_params_file: no such file {str(path)!r}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"network.link_params_file: cannot read {path}: {e}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"network.link_params_file: {path} is not valid JSON: {e}") from None
    sections = {
        sec: getattr(cfg, sec).model_dump() for sec in ("network", "distributed", "topology")
    }
    if not isinstance(data, dict):
        raise ConfigError(f"network.link_params_file: {path} is not a JSON object")
    for old, new in OLD_LINK_PARAM_KEYS.items():
        if old in data and new in data:
            raise ConfigError(
                f"network.link_params_file: {path} gives both {new} and its old name {old}"
            )
        if old in data:
            data[new] = data.pop(old)
    if not any(data.get(key) is not None for key in LINK_PARAM_KEYS):
        fit = data.get("fit")
        kind = data.get("kind", fit.get("kind") if isinstance(fit, dict) else None)
        what = f" (a {kind!r} document)" if isinstance(kind, str) else ""
        raise ConfigError(
            f"network.link_params_file: {path}{what} holds none of the link parameters "
            f"({', '.join(LINK_PARAM_KEYS)}); give the file `python -m simnet calibrate` "
            "writes"
        )
    notes = []
    for key, sec in LINK_PARAM_KEYS.items():
        if data.get(key) is not None:
            sections[sec][key] = data[key]
            notes.append(f"calibrated: {sec}.{key} = {data[key]} from {path.name}")
    try:
        new = cfg.model_copy(
            update={sec: type(getattr(cfg, sec)).model_validate(v) for sec, v in sections.items()}
        )
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, str(path))) from None
    return new, notes


def schema() -> dict[str, Any]:
    return Config.model_json_schema()
