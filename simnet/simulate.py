"""The Python API: ``simulate(config)`` and ``collective_time(...)``.

simnet allocates no message buffers: it predicts workloads at sizes no single
machine could run (e.g. the GPT-3 proxy at 384 ranks).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import numbers
import re
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import networkx as nx
import numpy as np
import simpy

import topologies
from topologies.hosts import with_hosts
from workload.collectives import SCHEDULE_PARAM_READERS
from workload.models import MODELS
from workload.ops import Collective, Send
from workload.program import BuildOptions, Phase, ProgramBuilder, Workload
from workload.spec import CONFIG_NAMES, RunSpec, SpecError
from workload.timeline import BreakdownPlan, breakdown_of
from workload.units import ELEM_BYTES, MS_PER_S, gb_per_s_to_bytes_per_s, us_to_s

from . import arenas, whatif
from .config import (
    GROUPED_TOPOLOGIES,
    MAX_LATENCY_US,
    Config,
    ConfigError,
    apply_link_params,
    load_config,
    ring_orders,
    same_links,
)
from .executor import AlgorithmPolicy, PhaseSim, SimExecutor, node_layout
from .hostparams import HostCalibrationError, apply_host_params
from .network import FlowNetwork
from .pairs import dense_matrix
from .policy import build_policy


@dataclass
class PhaseResult:
    """One simulated phase. Times in seconds, sizes in bytes, rates in bytes/s."""

    name: str
    iterations: int
    iteration_time_s: float  # makespan / iterations
    makespan_s: float
    # The endpoint-pair figures as sparse dicts: (src endpoint, dst endpoint) -> value;
    # the dense matrices below are built from them on first use (n^2 entries: 2.7 GB
    # each at 18,522 endpoints, far more than the simulation itself holds).
    num_endpoints: int
    pair_bytes: dict[tuple[int, int], int]  # all simulated iterations
    pair_busy: dict[tuple[int, int], float]  # seconds with a message of the pair in flight
    per_rank: list[dict[str, float]]  # compute_s, comm_s, exposed_comm_s (per iteration)
    wire_bytes_by_group: dict[str, int]
    part_pair_bytes: dict[str, dict[tuple[int, int], int]]  # "reduce" / "copy" / "p2p"
    algorithms: dict[str, list[str]]
    messages: int
    # Per physical link and direction, keyed (u, v): a link drawn as several edges (a
    # dragonfly's global link: three) counts once, keyed by the edge its ``link``
    # attribute names (see ``link_parts``).
    link_bytes: dict[tuple, int]
    link_busy_s: dict[tuple, float]
    link_capacity_bytes_per_s: dict[tuple, float]
    # Per link, its load's change points as an (n, 2) float64 array of time_s,
    # rate_bytes_per_s rows (``FlowNetwork.link_series_arrays``); {} when not recorded.
    link_series: dict[tuple, np.ndarray]
    max_link_overload: float
    sim_wall_s: float
    timeline: PhaseSim | None = field(default=None, repr=False)
    # Which library ran the phase's collectives: "nccl" (every one ran as NCCL runs
    # them), "mpi" (none did) or "nccl+mpi" (some did: nccl_algorithms names them; under
    # the default library an alltoall falls back to MPI's pairwise).
    library: str = "mpi"
    # op -> the algorithms that ran as NCCL runs them (the others of ``algorithms`` ran as
    # MPI runs them).
    nccl_algorithms: dict[str, list[str]] = field(default_factory=dict)
    # Bytes of the messages ranks sent to themselves (copies: not in wire_bytes_by_group).
    self_bytes: int = 0

    @functools.cached_property
    def traffic_bytes(self) -> np.ndarray:
        """[src endpoint, dst endpoint] exact bytes, all simulated iterations."""
        return dense_matrix(self.pair_bytes, self.num_endpoints, np.int64)

    @functools.cached_property
    def pair_busy_s(self) -> np.ndarray:
        """[src, dst] seconds with a message of the pair in flight."""
        return dense_matrix(self.pair_busy, self.num_endpoints, np.float64)

    @functools.cached_property
    def part_traffic_bytes(self) -> dict[str, np.ndarray]:
        """ "reduce" / "copy" / "p2p" -> [src, dst] exact bytes."""
        return {
            part: dense_matrix(pairs, self.num_endpoints, np.int64)
            for part, pairs in self.part_pair_bytes.items()
        }

    @property
    def achieved_bytes_per_s(self) -> np.ndarray:
        """[src, dst] mean rate the pair obtained under the workload's contention: its
        bytes over the time it had messages in flight (0 where it sent nothing)."""
        return _rate(self.traffic_bytes, self.pair_busy_s)


@dataclass
class SimResult:
    """What ``simulate`` returns; matrices are indexed by endpoint."""

    config: Config
    workload: Workload
    graph: nx.DiGraph
    placement: list[int]
    phases: list[PhaseResult]
    # () -> (bandwidth, latency) matrices; computed on first use (a route per endpoint
    # pair: more than the whole simulation on large fat-trees), then kept.
    routes: Callable[[], tuple[np.ndarray, np.ndarray]] = field(repr=False)
    # (src, dst) endpoint pairs -> their (bandwidth, latency) arrays, route by route:
    # what ``bandwidth_bytes_per_s`` / ``latency_s`` hold for those pairs, without n^2.
    pair_routes: Callable[[Sequence[tuple[int, int]]], tuple[np.ndarray, np.ndarray]] = field(
        repr=False
    )
    assumed: list[str]
    scenario: list[str] = field(default_factory=list)  # the what-ifs simulated
    jobs: Any = None  # a simnet.jobs.JobsReport when several jobs shared the network
    # b -> the smallest route bandwidth (bytes/s) of each block of b x b endpoint pairs
    # (see ``route_bandwidth_blocks``), or None where the network has no closed form.
    bandwidth_blocks: Callable[[int], np.ndarray | None] | None = field(default=None, repr=False)
    # The smallest route bandwidth inside each node of a given number of consecutive
    # endpoints (see ``route_bandwidth_in_nodes``), or None without a closed form.
    node_bandwidth: Callable[[int], np.ndarray | None] | None = field(default=None, repr=False)
    _route_matrices: tuple[np.ndarray, np.ndarray] | None = field(
        default=None, init=False, repr=False
    )

    @property
    def bandwidth_bytes_per_s(self) -> np.ndarray:
        """Achievable point-to-point bandwidth per endpoint pair (bytes/s): the route's
        bottleneck, capped by network.injection_bandwidth_gb_per_s when set."""
        return self._routes()[0]

    @property
    def latency_s(self) -> np.ndarray:
        """Route latency per endpoint pair (s)."""
        return self._routes()[1]

    def _routes(self) -> tuple[np.ndarray, np.ndarray]:
        if self._route_matrices is None:
            self._route_matrices = self.routes()
        return self._route_matrices

    @property
    def iteration_time_s(self) -> float:
        """Predicted time of one iteration: the sum over the workload's phases."""
        return sum(p.iteration_time_s for p in self.phases)

    @property
    def traffic_bytes(self) -> np.ndarray:
        """Exact bytes from each endpoint to each other, all phases and iterations."""
        return sum(
            (p.traffic_bytes for p in self.phases),
            start=np.zeros_like(self.phases[0].traffic_bytes),
        )

    @property
    def pair_busy_s(self) -> np.ndarray:
        """[src, dst] seconds with a message of the pair in flight, all phases."""
        return sum(
            (p.pair_busy_s for p in self.phases), start=np.zeros_like(self.phases[0].pair_busy_s)
        )

    @property
    def achieved_bytes_per_s(self) -> np.ndarray:
        """Achieved pair rates over all phases (see ``PhaseResult.achieved_bytes_per_s``)."""
        return _rate(self.traffic_bytes, self.pair_busy_s)


def _rate(traffic_bytes: np.ndarray, busy_s: np.ndarray) -> np.ndarray:
    out = np.zeros(busy_s.shape)
    np.divide(traffic_bytes, busy_s, out=out, where=busy_s > 0)
    return out


# -- building blocks from a configuration -------------------------------------------
def _used_endpoints(
    cfg: Config,
    graph: nx.DiGraph,
    rank_groups: Sequence[range] | None = None,
    jobs_apart: bool = True,
) -> list[list[int]] | None:
    """The network's endpoints the ranks sit on, in groups that never exchange a message:
    one, or with jobs one a job; with hosts (added after the what-if changes, so
    ``graph``'s endpoints are the hosts) the hosts holding a rank. None when the
    placement is not one this network can take (its own check says why);
    ``rank_groups``, ``jobs_apart``: as ``build_topology`` takes them."""
    k = cfg.hosts.ranks_per_host or 1
    n = graph.graph["num_endpoints"] * k
    if cfg.jobs:
        groups = [list(placement) for placement in cfg.job_placements()]
        if not jobs_apart:
            groups = [[e for g in groups for e in g]]
    else:
        placed = list(cfg.topology.placement or range(cfg.world_size))
        groups = [placed]
        if rank_groups is not None and len(placed) == cfg.world_size:
            groups = [[placed[r] for r in ranks] for ranks in rank_groups]
    used = [e for g in groups for e in g]
    if not used or any(not 0 <= e < n for e in used):
        if not cfg.jobs and cfg.topology.placement is not None:
            # The placement's own error first (a failure's split, the whole network
            # taken as used, would hide it); with hosts, on their rank endpoints.
            ranks = graph
            if k > 1:
                ranks = nx.DiGraph(name=graph.graph.get("name", "topology"))
                ranks.add_nodes_from(range(n), kind="endpoint")
            try:
                topologies.apply_placement(cfg.world_size, ranks, cfg.topology.placement)
            except topologies.TopologyError as e:
                raise ConfigError(f"topology.{e}") from None
        return None
    if k > 1:
        # Rank endpoint r sits on host r // k (topologies.with_hosts).
        return [sorted({e // k for e in g}) for g in groups]
    return groups


def build_topology(
    cfg: Config, rank_groups: Sequence[range] | None = None, jobs_apart: bool = True
) -> tuple[nx.DiGraph, list[str]]:
    """The networkx graph a configuration describes, and what was assumed.
    ``rank_groups``: ranks that never exchange a message with another group's (the jobs
    of a shared run, which the configuration gives as one workload), so that a failure
    may separate the groups (see ``whatif.apply_links``); ``jobs_apart``: the
    configuration's ``jobs`` are such groups (False where one workload runs on all their
    ranks, which must then all reach one another)."""
    t, d = cfg.topology, cfg.distributed
    n = cfg.num_endpoints
    bw = gb_per_s_to_bytes_per_s(d.bandwidth_limit_gb_per_s)
    lat = us_to_s(t.link_latency_us)
    assumed = []
    try:
        if t.type == "ring":
            g = topologies.ring(
                n, bandwidth_bytes_per_s=bw, latency_s=lat, bidirectional=t.bidirectional
            )
            if len(t.permutations) > 1:
                with contextlib.suppress(ValueError):  # (refused where the rings are read)
                    for i, j in same_links(ring_orders(t.permutations, n)):
                        assumed.append(
                            f"topology.permutations[{j}] is ring {i} rotated: the same links "
                            "in the same direction, so the data split over them takes one "
                            "ring's path (a reversed or reordered ring adds links)"
                        )
        elif t.type in ("hierarchical", "rail_optimised"):
            size, intra, inter, intra_lat, inter_lat = _two_levels(cfg, assumed)
            if t.type == "hierarchical":
                g = topologies.hierarchical(
                    n // size,
                    size,
                    intra_bandwidth_bytes_per_s=intra,
                    inter_bandwidth_bytes_per_s=inter,
                    intra_latency_s=intra_lat,
                    inter_latency_s=inter_lat,
                )
            else:
                g = topologies.rail_optimised(
                    n // size,
                    size,
                    nvlink_bandwidth_bytes_per_s=intra,
                    nic_bandwidth_bytes_per_s=inter,
                    nvlink_latency_s=intra_lat,
                    nic_latency_s=inter_lat,
                )
        elif t.type == "dragonfly":
            a, e = t.routers_per_group or 1, t.endpoints_per_router or 1
            glob = t.global_bandwidth_gb_per_s or d.bandwidth_limit_gb_per_s
            g = topologies.dragonfly(
                n // (a * e),
                a,
                e,
                endpoint_bandwidth_bytes_per_s=bw,
                local_bandwidth_bytes_per_s=bw,
                global_bandwidth_bytes_per_s=gb_per_s_to_bytes_per_s(glob),
                endpoint_latency_s=lat,
                local_latency_s=lat,
                global_latency_s=us_to_s(
                    t.global_latency_us if t.global_latency_us is not None else t.link_latency_us
                ),
            )
        elif t.type == "switch":
            g = topologies.switch(n, bandwidth_bytes_per_s=bw, latency_s=lat)
        elif t.type == "fat_tree":
            g = topologies.fat_tree(
                t.k, bandwidth_bytes_per_s=bw, latency_s=lat, oversubscription=t.oversubscription
            )
        else:
            g = topologies.torus(tuple(t.dims or ()), bandwidth_bytes_per_s=bw, latency_s=lat)
    except topologies.TopologyError as e:
        raise ConfigError(f"topology: {e}") from None
    for name in ("link_latency_us", "intra_latency_us", "inter_latency_us", "global_latency_us"):
        value = getattr(t, name)
        if value and value < 1e-3:  # under a nanosecond: seconds typed as microseconds?
            assumed.append(
                f"topology.{name} = {value:g} us is {value * 1e6:g} ps, less than any "
                "link's latency: latencies here are in microseconds"
            )
    unused = t.unused_fields()
    if unused:
        assumed.append(
            f"not used by a {t.type} topology: "
            + ", ".join(f"topology.{f}" for f in unused)
            + " (the README's configuration table says which type reads which)"
        )
    # What-if link changes apply to the network as configured (its node names), before
    # hosts are added; the graph keeps their notes.
    g, link_notes = whatif.apply_links(
        g,
        cfg.whatif,
        _used_endpoints(cfg, g, rank_groups, jobs_apart),
        hosts=bool(cfg.hosts.ranks_per_host),
        ecmp=cfg.topology.effective_ecmp,
        names=[j.name for j in cfg.jobs] if cfg.jobs and jobs_apart else None,
    )
    if cfg.hosts.ranks_per_host:
        degraded = g.graph.get("whatif_degraded")
        cut = g.graph.get("cut_off", [])
        parts = g.graph.get("parts")
        g = add_hosts(cfg, g, assumed)
        if degraded:
            # The changed links as the hosts' network names them (endpoint h: host<h>), for
            # the notes made after the run.
            def host(x: Any) -> Any:
                return f"host{x}" if type(x) is int else x

            g.graph["whatif_degraded"] = [[(host(a), host(b)) for a, b in e] for e in degraded]
        k = cfg.hosts.ranks_per_host

        def rank_endpoints(hosts: list[int]) -> list[int]:
            return [r for h in hosts for r in range(h * k, (h + 1) * k)]  # host h's: h k ..

        if cut:
            # A host the failures cut off holds no rank: its rank endpoints have no routes.
            g.graph["cut_off"] = rank_endpoints(cut)
        if parts:
            g.graph["parts"] = [rank_endpoints(p) for p in parts]
    else:
        # (a calibration file fills these for hosts; the compute fields apply without)
        idle = [
            f"hosts.{f}"
            for f in ("cores", "copy_bandwidth_gb_per_s", "rank_copy_bandwidth_gb_per_s",
                      "copy_latency_us", "nic_bandwidth_gb_per_s", "nic_latency_us")
            if getattr(cfg.hosts, f)
        ]  # fmt: skip
        if idle:
            assumed.append(
                f"{', '.join(idle)}: not used without hosts.ranks_per_host (every rank "
                "then has an endpoint of its own)"
            )
    g.graph["whatif"] = link_notes
    return g, assumed


def _two_levels(cfg: Config, assumed: list[str]) -> tuple[int, float, float, float, float]:
    """A grouped topology's (group size, intra and inter bandwidth in bytes/s, intra and
    inter latency in seconds), its defaults stated in ``assumed``: groups of endpoints
    (hierarchical) or nodes of GPUs (rail_optimised: NVLink inside, a NIC per GPU)."""
    t, d = cfg.topology, cfg.distributed
    size = t.effective_group_size
    inter = t.inter_bandwidth_gb_per_s or d.bandwidth_limit_gb_per_s / 4
    if t.inter_bandwidth_gb_per_s is None:
        what = "inter-group bandwidth" if t.type == "hierarchical" else "NIC bandwidth per GPU"
        assumed.append(f"{what} {inter:g} GB/s (bandwidth_limit / 4)")
    if t.group_size is None:
        hier = t.type == "hierarchical"
        assumed.append(f"group size {size}" if hier else f"{size} GPUs per node")
    intra_lat = t.intra_latency_us if t.intra_latency_us is not None else t.link_latency_us / 10
    inter_lat = t.inter_latency_us if t.inter_latency_us is not None else t.link_latency_us
    if t.type == "hierarchical" and intra_lat > inter_lat:
        given = {
            "intra": "" if t.intra_latency_us is not None else ", link_latency_us / 10",
            "inter": "" if t.inter_latency_us is not None else ", link_latency_us",
        }
        raise ConfigError(
            f"topology.intra_latency_us ({intra_lat:g} us{given['intra']}) must be at most "
            f"topology.inter_latency_us ({inter_lat:g} us{given['inter']}): shortest routes "
            "would take traffic inside a group through the top switch"
        )
    return (
        size,
        gb_per_s_to_bytes_per_s(t.intra_bandwidth_gb_per_s or d.bandwidth_limit_gb_per_s),
        gb_per_s_to_bytes_per_s(inter),
        us_to_s(intra_lat),
        us_to_s(inter_lat),
    )


def add_hosts(cfg: Config, graph: nx.DiGraph, assumed: list[str]) -> nx.DiGraph:
    """``graph``'s endpoints as hosts of ``hosts.ranks_per_host`` ranks each."""
    h = cfg.hosts
    if h.copy_bandwidth_gb_per_s is None:
        raise ConfigError(
            "hosts.copy_bandwidth_gb_per_s: needed with hosts.ranks_per_host (or give "
            "hosts.params_file, made by `python -m simnet calibrate-host`)"
        )
    if h.copy_latency_us is None:
        assumed.append("no per-message cost inside a host (hosts.copy_latency_us = 0)")
    if h.nic_bandwidth_gb_per_s is None and graph.graph["num_endpoints"] > 1:
        assumed.append(
            "NICs as fast as their hosts' links together, each way (hosts.nic_bandwidth_gb_per_s "
            "unset)"
        )
    nic = h.nic_bandwidth_gb_per_s
    rank_bw = h.rank_copy_bandwidth_gb_per_s
    if rank_bw is not None and rank_bw > h.copy_bandwidth_gb_per_s:
        # (a calibration's separate fits can cross; the host's capacity caps a rank anyway)
        assumed.append(
            f"hosts.rank_copy_bandwidth_gb_per_s ({rank_bw:g}) is above the host's "
            f"hosts.copy_bandwidth_gb_per_s ({h.copy_bandwidth_gb_per_s:g}): one rank copies "
            "at most at its host's rate"
        )
    try:
        return with_hosts(
            graph,
            h.ranks_per_host,
            gb_per_s_to_bytes_per_s(h.copy_bandwidth_gb_per_s),
            rank_copy_bandwidth_bytes_per_s=None
            if rank_bw is None
            else gb_per_s_to_bytes_per_s(rank_bw),
            copy_latency_s=us_to_s(h.copy_latency_us or 0.0),
            nic_bandwidth_bytes_per_s=None if nic is None else gb_per_s_to_bytes_per_s(nic),
            nic_latency_s=us_to_s(h.nic_latency_us),
        )
    except topologies.TopologyError as e:
        raise ConfigError(str(e)) from None


def run_spec(cfg: Config) -> RunSpec:
    """The run specification the configuration's ``workload`` section describes.

    A model driven by the seed sections (the ring trainer) also takes its
    arguments from ``model``, its compute from ``training`` and its rings or
    groups from ``topology``, where the workload section leaves them unset.
    """
    w = cfg.workload
    if w.name not in MODELS:
        raise ConfigError(f"workload.name: unknown model {w.name!r}; known: {', '.join(MODELS)}")
    model = MODELS[w.name]
    args = list(w.args)
    flags = dict(w.flags)
    rings = None
    if model.args_from_config_model and not args:
        args = [getattr(cfg.model, a.name) for a in model.args]
    if model.compute_flag and cfg.training.compute_us_per_step is not None:
        flags.setdefault(model.compute_flag, round(cfg.training.compute_us_per_step))
    if model.group_size_flag and cfg.topology.type in GROUPED_TOPOLOGIES:
        flags.setdefault(model.group_size_flag, cfg.topology.effective_group_size)
    elif model.uses_ring_orders and cfg.topology.type == "ring":
        orders = ring_orders(cfg.topology.permutations, cfg.world_size)
        rings = tuple(tuple(r) for r in orders)
    try:
        return RunSpec(
            model=w.name,
            args=tuple(args),
            flags=flags,
            world_size=cfg.world_size,
            scale=w.scale,
            per_tensor=w.per_tensor,
            fix_quirks=w.fix_quirks,
            rings=rings,
        )
    except SpecError as e:
        raise ConfigError(e.render(CONFIG_NAMES)) from None


def build_workload(cfg: Config) -> Workload:
    """The workload the configuration describes; raises ConfigError naming the field."""
    spec = run_spec(cfg)
    try:
        return spec.workload()
    except SpecError as e:  # (an option the model's build refused: named as the file does)
        raise ConfigError(e.render(CONFIG_NAMES)) from None
    except ValueError as e:
        raise ConfigError(f"workload: {e}") from None


def _job_rank_name(workload: Workload) -> Callable[[int], str] | None:
    """With several jobs, how the summary names a combined rank: its job, its rank in
    the job, then the combined rank the configuration gives (``b:1 (rank 5)``)."""
    if not workload.jobs:
        return None
    jobs = workload.jobs

    def name(rank: int) -> str:
        for job in jobs:
            if job.first <= rank < job.stop:
                return f"{job.name}:{rank - job.first} (rank {rank})"
        return f"rank {rank}"

    return name


def _watch_args(
    watch_jobs: tuple[Collection[tuple], Sequence[range]] | None, placement: Sequence[int]
) -> tuple[Collection[tuple], list[int], int] | None:
    """``FlowNetwork.watch_links``'s arguments for ``simulate``'s ``watch_jobs``: each
    job's ranks' endpoints (by ``placement``, rank -> endpoint) taken to its index."""
    if watch_jobs is None:
        return None
    keys, ranks = watch_jobs
    job_of = [-1] * (max(placement, default=-1) + 1)
    for j, rs in enumerate(ranks):
        for r in rs:
            job_of[placement[r]] = j
    return keys, job_of, len(ranks)


def network_factory(
    cfg: Config,
    graph: nx.DiGraph,
    record_series: bool = True,
    router: topologies.Router | None = None,
    watch: tuple[Collection[tuple], list[int], int] | None = None,
) -> Callable[[simpy.Environment], FlowNetwork]:
    """Makes the configured network on a simpy environment (one per phase); routes
    come from ``router`` (a new one on ``graph`` if None); ``watch``: the arguments of
    its ``watch_links`` (links, each endpoint's job, jobs)."""
    if router is None:
        router = topologies.Router(graph, ecmp=cfg.topology.effective_ecmp)
    inj = cfg.network.injection_bandwidth_gb_per_s
    alpha = us_to_s(cfg.network.alpha_us)
    overhead = us_to_s(cfg.network.send_overhead_us)

    def make(env: simpy.Environment) -> FlowNetwork:
        net = FlowNetwork(
            env,
            graph,
            router.path,
            alpha_s=alpha,
            send_overhead_s=overhead,
            injection_bandwidth_bytes_per_s=gb_per_s_to_bytes_per_s(inj) if inj else None,
            record_link_series=record_series,
            rendezvous_handshake=cfg.network.rendezvous_handshake,
        )
        if watch is not None:
            net.watch_links(*watch)
        return net

    return make


T = TypeVar("T")


def _as_simulation(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` run with the cyclic garbage collector off, and Python's objects on huge
    pages from then on (see :mod:`simnet.arenas`): building a large case allocates
    millions of objects (routes, plans, flows) that live to the end or that reference
    counting frees, and the collector would only rescan them, again and again (a tenth
    of a 16,384-rank run)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        arenas.enable()  # the objects about to be built, on huge pages (process-wide)
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was:
                gc.enable()

    return run


# -- the API --------------------------------------------------------------------------
@_as_simulation
def simulate(
    config: str | dict[str, Any] | Config,
    *,
    progress: Callable[[str], None] | None = None,
    record_series: bool = True,
    topology: nx.DiGraph | None = None,
    topology_notes: Sequence[str] = (),
    force: bool = False,
    available_bytes: int | None = None,
    workload: Workload | None = None,
    dense_matrices: bool = True,
    noise_streams_from: int = 0,
    watch_jobs: tuple[Collection[tuple], Sequence[range]] | None = None,
) -> SimResult:
    """Predict a workload on a topology, as a configuration describes them.

    ``config`` may be a path, a dict or a :class:`Config`. Raises ConfigError
    with a message naming the field to fix. ``topology`` runs the configured
    workload on that graph instead of the configured one (rank ``r`` on its
    endpoint ``r``; ``topology_notes`` say where it came from): e.g. the
    calibrated host a real run ran on. Before building anything, a case whose
    estimated memory (:mod:`simnet.sizecheck`) exceeds what is available
    (``available_bytes``, default: this machine's) is refused with a ConfigError naming
    the size that fits, unless ``force``. ``workload`` runs those rank programs instead
    of the configured workload (e.g. the micro-benchmarks' cases, one phase each).

    The endpoint-pair matrices of the result (traffic, busy time, route bandwidth and
    latency) are built on first use; ``dense_matrices=False`` says the caller will not
    ask for them (it reads the sparse ``pair_bytes`` and the times), which leaves their
    ``n^2`` entries out of the memory check. With ``whatif.compute_noise``, rank ``r``
    draws the random stream numbered ``r + noise_streams_from`` (a job of several alone
    draws those of its ranks in the jobs' shared run). ``watch_jobs`` = (link keys, each
    job's ranks) records on those links when two or more jobs' bytes drain over them at
    once, and when while full (each phase network's ``meetings()``: how
    :mod:`simnet.jobs` finds contention),
    and lets failed links separate the jobs (each must stay connected in itself).
    """
    cfg = load_config(config)
    if cfg.jobs and workload is None and topology is None:
        from .jobs import simulate_jobs

        run = functools.partial(
            simulate,
            record_series=record_series,
            force=force,
            available_bytes=available_bytes,
            dense_matrices=dense_matrices,
        )
        if cfg.whatif.failed_links:
            # Checked against every job's endpoints before any job runs alone (each
            # alone sees only its own).
            build_topology(cfg)
        return simulate_jobs(cfg, run, build_workload, progress)
    base = Path(config).parent if isinstance(config, (str, Path)) else Path(".")
    cfg, calibrated = apply_link_params(cfg, base)
    try:
        cfg, host_notes = apply_host_params(cfg)
    except HostCalibrationError as e:
        raise ConfigError(str(e)) from None
    if workload is None:
        workload = build_workload(cfg)
    big = cfg.num_rank_endpoints > 2000
    if topology is None and not force:
        import psutil

        from . import sizecheck

        counts = _rank0_counts(cfg, workload)
        est = sizecheck.estimate(
            cfg,
            counts.ops,
            len(workload.phases),
            counts.messages,
            dense_matrices,
            ring_run_messages=counts.ring_run_messages,
            repeated_messages=counts.repeated_messages,
        )
        avail = psutil.virtual_memory().available if available_bytes is None else available_bytes
        why = sizecheck.refusal(cfg, est, len(workload.phases), avail)
        if why:
            raise ConfigError(why)
    if progress is not None and big:
        progress(f"building the {cfg.topology.type} network ({cfg.num_rank_endpoints:,} endpoints)")
    if topology is None:
        # (jobs given here run as the one workload given: not apart)
        graph, assumed = build_topology(
            cfg, watch_jobs[1] if watch_jobs else None, jobs_apart=False
        )
    else:
        graph, assumed = topology, list(topology_notes)
    assumed = [*calibrated, *host_notes, *assumed]
    if "jobs" in cfg.model_fields_set and not cfg.jobs and "workload" not in cfg.model_fields_set:
        assumed.append(
            f"jobs: [] lists no jobs: the workload section's default runs "
            f"({cfg.workload.name} on {cfg.world_size} ranks)"
        )
    n_end = graph.graph["num_endpoints"]
    world = cfg.world_size
    k = cfg.hosts.ranks_per_host
    if k and topology is None and world < n_end and cfg.topology.placement is None:
        used = -(-world // k)
        assumed.append(
            f"hosts: {world} ranks on {n_end // k} hosts of {k} fill the first {used} "
            f"host(s) (host-major); workload.world_size = {n_end} fills them all"
        )
    try:
        chosen = cfg.topology.placement if topology is None else None
        placement = topologies.apply_placement(world, graph, chosen)
    except topologies.TopologyError as e:
        raise ConfigError(f"topology.{e}") from None  # "placement: ..."
    # Not when the sender pays a per-message cost (send_overhead_us), nor when no message
    # crosses a network (every rank on one host, as the host model has them: its
    # per-message cost is the host's copy latency, which its own notes give).
    if (
        cfg.network.alpha_us == 0
        and cfg.network.send_overhead_us == 0
        and (graph.graph.get("hosts") or {}).get("num_hosts") != 1
    ):
        assumed.append("no per-message overhead (network.alpha_us = 0)")
    if cfg.distributed.buffer_size_bytes is not None:
        assumed.append(
            "distributed.buffer_size_bytes: not modelled, messages go whole (the main "
            "job's ring trainer reports transfers above it as overruns)"
        )
    if cfg.topology.ecmp is None and cfg.topology.effective_ecmp:
        assumed.append(
            f"flows spread over equal-cost routes, hashed per pair (the {cfg.topology.type} "
            "default; topology.ecmp = false for one route per pair)"
        )
    if cfg.topology.ecmp and cfg.topology.type in ("hierarchical", "switch"):
        assumed.append(
            f"topology.ecmp: a {cfg.topology.type} topology has one shortest route per "
            "pair, so ecmp changes nothing"
        )
    if cfg.topology.ecmp and cfg.topology.type == "torus":
        assumed.append(
            "topology.ecmp: flows spread over all shortest routes, hashed per pair, instead "
            "of the torus's dimension-order routes (its default)"
        )
    router = topologies.Router(graph, ecmp=cfg.topology.effective_ecmp)
    ex = SimExecutor(
        workload,
        network_factory(cfg, graph, record_series, router, _watch_args(watch_jobs, placement)),
        placement,
        policy=build_policy(cfg),
        eager_threshold_bytes=cfg.network.eager_threshold_bytes,
        compute_scale=cfg.workload.compute_scale,
        gamma_s_per_byte=cfg.collectives.gamma_s_per_byte,
        step_latency_s=us_to_s(cfg.collectives.step_latency_us),
        step_latency_by_op_s={
            op: us_to_s(v) for op, v in cfg.collectives.step_latency_us_by_op.items()
        },
        compute_overhead_s=us_to_s(cfg.hosts.compute_overhead_us),
        compute_stretch=cfg.hosts.compute_stretch,
        async_progress=cfg.collectives.async_progress,
        rank_compute_factors=whatif.compute_factors(cfg.whatif, world)
        if cfg.whatif.stragglers
        else None,
        compute_noise=_noise(cfg.whatif, noise_streams_from),
        stream_order=cfg.collectives.stream_order,
        library=cfg.collectives.library or "auto",
    )
    scenario = [
        *graph.graph.get("whatif", []),
        *whatif.compute_notes(cfg.whatif, _job_rank_name(workload)),
    ]
    phases = []
    link_of = link_parts(graph)
    nccl_ran = chosen_ran = library_ran = False
    for i, ph in enumerate(workload.phases):
        t0 = time.perf_counter()
        report = None
        if progress is not None:

            def report(sim: PhaseSim, name: str = ph.name, t0: float = t0) -> None:
                progress(_progress_line(name, sim, time.perf_counter() - t0))

        sim = ex.run_phase(i, cfg.workload.iterations, report)
        phases.append(
            _phase_result(sim, n_end, cfg.workload.iterations, time.perf_counter() - t0, link_of)
        )
        nccl_ran = nccl_ran or sim.nccl_ran
        chosen_ran = chosen_ran or sim.chosen_ran
        library_ran = library_ran or sim.library_ran
        sim.release()
    ex.release_plans()
    link_notes = graph.graph.get("whatif", [])
    if link_notes:

        def carried(edge: tuple) -> bool:
            key = link_of.get(edge, edge)
            return any(p.link_bytes.get(key, 0) > 0 for p in phases)

        # Only a failure's note counts pairs (with hosts they are hosts', whose routes the
        # count does not take).
        pairs = None
        if graph.graph.get("whatif_failed") and not cfg.hosts.ranks_per_host:
            pairs = sorted({k for p in phases for k in p.pair_bytes})
        ecmp = cfg.topology.effective_ecmp
        scenario[: len(link_notes)] = whatif.after_run(graph, link_notes, carried, pairs, ecmp)
    assumed.extend(ex.policy_notes())
    if nccl_ran and cfg.collectives.library is None:
        order = {
            None: "one at a time per group, in call order (NCCL's stream per communicator)",
            True: "one at a time per group, in call order (collectives.stream_order)",
            False: "non-blocking ones on a group together (collectives.stream_order = false)",
        }[cfg.collectives.stream_order]
        assumed.append(
            "collectives given an NCCL algorithm run as NCCL runs them: "
            f"{order}, every message waiting for its receiver without a handshake, no host "
            "reduction cost (collectives.library = mpi runs them as MPI messages)"
        )
    assumed += _unused_settings(cfg, phases, nccl_ran, chosen_ran, library_ran)
    messages = sum(p.messages for p in phases)
    rings_ran = any("nccl_ring" in algs for p in phases for algs in p.algorithms.values())
    trees_ran = any("nccl_tree" in algs for p in phases for algs in p.algorithms.values())
    streamed = ex.streamed_algorithms()
    streams = [
        what for what, alg in (("rings", "nccl_ring"), ("trees", "nccl_tree")) if alg in streamed
    ]
    if streams:
        assumed.append(
            f"streamed {' and '.join(streams)}: a pair's busy time and achieved bandwidth "
            "(sim_pairs.csv, the achieved-bandwidth map) count a stream's transfer, not the "
            "latency of the steps it stands for (added after it): higher rates than step "
            "by step"
        )
    if (
        rings_ran
        and nccl_ran
        and not cfg.collectives.streamed_rings
        and messages >= STREAM_HINT_MESSAGES
    ):
        assumed.append(
            f"nccl_ring's rings ran step by step ({messages:,} messages in the run): "
            "collectives.streamed_rings = true sends each run of a ring's steps as one "
            "message per hop (p - 1 times fewer), the same time where its hops are "
            "uncontended"
        )
    if (
        trees_ran
        and nccl_ran
        and not cfg.collectives.streamed_trees
        and messages >= STREAM_HINT_MESSAGES
    ):
        assumed.append(
            f"nccl_tree's trees ran step by step ({messages:,} messages in the run): "
            "collectives.streamed_trees = true sends each tree edge's chunks as one "
            "message each way (as many times fewer as a tree has chunks), the same time "
            "where its hops are uncontended"
        )
    if (cfg.whatif.stragglers or cfg.whatif.compute_noise) and not any(
        r["compute_s"] for p in phases for r in p.per_rank
    ):
        scenario.append(whatif.NO_COMPUTE)

    # Every message also crosses its endpoints' injection ports: the route figures'
    # bandwidth is capped at their rate where one is set.
    inj = cfg.network.injection_bandwidth_gb_per_s
    cap = gb_per_s_to_bytes_per_s(inj) if inj else None

    def routes() -> tuple[np.ndarray, np.ndarray]:
        if progress is not None and big:
            progress(f"routes of every endpoint pair ({n_end:,} x {n_end:,})")
        bw, lat = route_matrices(graph, cfg.topology.effective_ecmp, router)
        if cap is not None:
            off_diagonal = ~np.eye(len(bw), dtype=bool)
            bw[off_diagonal] = np.minimum(bw[off_diagonal], cap)
        return bw, lat

    def pair_routes(pairs: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        # The phases' networks routed with this router: the pairs they carried are not
        # routed again (at 16,384 ranks, 229k routes: 3 of the 3.4 s of pairs.csv).
        nets = [p.timeline.net for p in phases]
        return pair_route_metrics(router, pairs, cap, _routed_by(nets))

    # The map of a large run and its nodes' figures come from one pass over the rows.
    node_size = topologies.endpoints_per_node(graph)
    node_figures: dict[int, np.ndarray | None] = {}

    def bandwidth_blocks(b: int) -> np.ndarray | None:
        blocks, nodes = _route_bandwidth_pass(router, b, node_size, cap)
        if node_size is not None:
            node_figures[node_size] = nodes
        return blocks

    def node_bandwidth(size: int) -> np.ndarray | None:
        if size in node_figures:
            return node_figures[size]
        return route_bandwidth_in_nodes(router, size, cap)

    return SimResult(
        cfg,
        workload,
        graph,
        placement,
        phases,
        routes,
        pair_routes,
        assumed,
        scenario,
        bandwidth_blocks=bandwidth_blocks,
        node_bandwidth=node_bandwidth,
    )


def _noise(w: Any, first: int = 0) -> Callable[[int], Callable[[], float]] | None:
    """Each rank's source of random compute factors (rank r: stream r + first), or None
    without noise."""
    if not w.compute_noise:
        return None
    return lambda rank: whatif.ComputeNoise(w.compute_noise, w.seed, rank + first).factor


_COUNT_DIRECTLY = 4096  # ranks of a group up to which its schedule is counted as is


class RankCounts(NamedTuple):
    """What one rank does in an iteration of every phase (the most of a few ranks)."""

    ops: int
    messages: int  # it sends
    ring_run_messages: int  # of those, in schedules of ring runs (nothing kept per message)
    # Of the others, those of calls that repeat a collective the rank already called
    # (same operation, algorithm, group size, count, root): its schedule and plans are
    # kept once, and a call's messages are held only while it runs.
    repeated_messages: int = 0


def _given(
    fields: Sequence[tuple[str, object]], given: Callable[[object], bool] = bool
) -> list[str]:
    """The names of ``(name, value)`` whose value is given."""
    return [name for name, value in fields if given(value)]


def _unused_settings(
    cfg: Config, phases: Sequence[PhaseResult], nccl_ran: bool, chosen_ran: bool, library_ran: bool
) -> list[str]:
    """Notes on settings of the configuration the run could not use: host costs the
    collectives run as NCCL's or by their own schedules do not pay, an algorithm choice
    the workload's collectives override, NCCL options without an NCCL algorithm."""
    c = cfg.collectives
    notes = []
    host_costs = _given(
        (
            ("collectives.gamma_s_per_byte", c.gamma_s_per_byte),
            ("collectives.step_latency_us", c.step_latency_us),
            ("collectives.step_latency_us_by_op", c.step_latency_us_by_op),
            ("network.send_overhead_us", cfg.network.send_overhead_us),
        )
    )
    if nccl_ran and host_costs:
        as_mpi = sorted(
            {
                f"{op}={alg}"
                for p in phases
                for op, algs in p.algorithms.items()
                for alg in algs
                if alg not in p.nccl_algorithms.get(op, ())
            }
        )
        also = f"the collectives run as MPI runs them ({', '.join(as_mpi)}) and " if as_mpi else ""
        notes.append(
            f"{', '.join(host_costs)}: not paid by the collectives run as NCCL runs them "
            f"(GPU kernels), only by {also}the messages MPI sends"
        )
    had_collectives = any(p.algorithms for p in phases)
    costs = [name for name in host_costs if name.startswith("collectives.")]
    if costs and had_collectives and not (nccl_ran or library_ran):
        notes.append(
            f"{', '.join(costs)}: not paid, the workload's collectives run their own "
            "schedules (as its proxy does), which move data without the library's "
            "reduction and progress"
        )
    choice = _given((("collectives.algorithm", c.algorithm), ("collectives.by_op", c.by_op)))
    if choice and had_collectives and not chosen_ran:
        notes.append(
            f"{', '.join(choice)}: not used, the workload's collectives name their own "
            "algorithms (see algorithms:)"
        )
    ran = {a for p in phases for algs in p.algorithms.values() for a in algs}
    given = _given(
        (("collectives.channels", c.channels), ("collectives.pipeline_chunks", c.pipeline_chunks)),
        lambda v: v is not None,
    )
    given += [
        f"collectives.streamed_{what}"
        for what, on in (("rings", c.streamed_rings), ("trees", c.streamed_trees))
        if on
    ]
    for name in given:
        readers, why = _READ_BY[name]
        if had_collectives and not ran & readers:
            notes.append(f"{name}: not used, {why}")
    # Against the default, not model_fields_set: a job's run, made from the whole
    # configuration dumped, and a recorded configuration loaded again have every field
    # set, so every such run said it of a seed nobody gave.
    if (
        cfg.whatif.seed != type(cfg.whatif).model_fields["seed"].default
        and not cfg.whatif.compute_noise
    ):
        notes.append("whatif.seed: not used, it seeds whatif.compute_noise, which is 0")
    t = cfg.topology
    if t.group_size is not None and t.type not in GROUPED_TOPOLOGIES and not ran & _NODE_SIZED:
        notes.append(
            f"topology.group_size: not used, a {t.type} topology has no groups and only "
            f"the {', '.join(sorted(_NODE_SIZED))} algorithms read it (as their node "
            "size), none of which ran"
        )
    return notes


_READ_BY = {
    "collectives.channels": (
        frozenset(SCHEDULE_PARAM_READERS["channels"]),
        "only nccl_ring and nccl_tree read them and neither ran",
    ),
    "collectives.pipeline_chunks": (
        frozenset(SCHEDULE_PARAM_READERS["pipeline_chunks"]),
        "only nccl_tree reads them (its chunks per tree) and it did not run",
    ),
    "collectives.streamed_rings": (
        frozenset({"nccl_ring"}),
        "only nccl_ring streams its rings and it did not run",
    ),
    "collectives.streamed_trees": (
        frozenset({"nccl_tree"}),
        "only nccl_tree streams its trees and it did not run",
    ),
}
"""The algorithms that read each NCCL setting, and what the note says when none ran."""

_NODE_SIZED = frozenset(SCHEDULE_PARAM_READERS["local_size"])
"""The algorithms that read ``topology.group_size`` where the topology has no groups."""


def _rank0_counts(cfg: Config, workload: Workload) -> RankCounts:
    """Operations of a rank and the messages it sends in one iteration of every phase,
    from its own programs and its part of each collective's schedule: the most of ranks
    0, the middle one and the last (a pipeline's end stages do less than its middle
    ones), without building any other rank's."""
    from workload.collectives import (
        RING_RUN_SCHEDULES,
        nccl_tree_messages,
        schedule_for,
        schedule_keywords,
    )

    policy = build_policy(cfg)
    library = cfg.collectives.library or "auto"
    cache: dict[tuple, int] = {}
    ranks = sorted({0, workload.world_size // 2, workload.world_size - 1})
    placement = cfg.topology.placement or range(workload.world_size)
    layouts: dict[int, tuple] = {}  # id of a group (the workload keeps it) -> its layout

    def layout(members: Sequence[int]) -> tuple:
        """(per_node, node order) of a group, as the executor lays it out."""
        got = layouts.get(id(members))
        if got is None:
            got = layouts[id(members)] = node_layout(members, placement, policy.local_size)
        return got

    def sends(op: Collective, alg: str, members: Sequence[int], me: int) -> int:
        """Member ``me``'s messages in ``op`` over the group ``members``; the schedule
        made for it counts those of the other counted ranks' groups laid out alike too
        (made once, not once a rank)."""
        p = len(members)
        per_node, order = layout(members)
        key = (op.op, alg, p, op.count_elems, op.root, per_node, order, me)
        if key not in cache:
            params = policy.params_for(op, alg, p, per_node, order, library)
            if op.op == "allreduce" and alg == "nccl_tree":
                # (counted from its trees: the schedule of 4,096 ranks takes 0.9 s to make)
                kw = schedule_keywords(alg, params)
                cache[key] = nccl_tree_messages(p, op.count_elems, me, **kw)
                return cache[key]
            sched = schedule_for(op.op, alg, p, op.count_elems, root=op.root, params=params)
            mine = {me}
            for r in ranks:
                g = workload.group_of(op.group, r)
                if len(g) == p and layout(g) == (per_node, order):
                    mine.add(g.index(r))
            for m in mine:
                cache[(*key[:-1], m)] = sum(len(s) for _, s in sched.rank_plan(m))
        return cache[key]

    def sized(op: Collective, alg: str, p: int) -> int:
        """Member 0's messages in ``op`` over ``p`` members in one node's order."""
        key = (op.op, alg, p, op.count_elems, op.root, None, None, 0)
        if key not in cache:
            sched = schedule_for(
                op.op, alg, p, op.count_elems, root=op.root, params=policy.params(p)
            )
            cache[key] = sum(len(s) for _, s in sched.rank_plan(0))
        return cache[key]

    def counts(rank: int) -> RankCounts:
        ops = msgs = ring = repeated = 0
        called: set[tuple] = set()
        for ph in workload.phases:
            for op in ph.program(rank):
                m, in_rings, key = messages(op, rank)
                ops, msgs, ring = ops + 1, msgs + m, ring + (m if in_rings else 0)
                if m and not in_rings and key is not None:
                    if key in called:
                        repeated += m
                    called.add(key)
        return RankCounts(ops, msgs, ring, repeated)

    def messages(op: object, rank: int) -> tuple[int, bool, tuple | None]:
        """The messages ``rank`` sends in ``op``, whether they are of ring runs, and the
        collective's schedule key (None for other operations): calls with one key share
        their schedule and plans."""
        if isinstance(op, Send):
            return 1, False, None
        if not isinstance(op, Collective):
            return 0, False, None
        members = workload.group_of(op.group, rank)
        p = len(members)
        if p <= 1:
            return 0, False, None
        per_node, order = layout(members)
        alg = policy.choose(op, p, per_node)
        in_rings = (op.op, alg) in RING_RUN_SCHEDULES
        key = (op.op, alg, p, op.count_elems, op.root, per_node, order)
        if p <= _COUNT_DIRECTLY or alg in ("hierarchical", "multiring", "nccl_ring", "nccl_tree"):
            return sends(op, alg, members, members.index(rank)), in_rings, key
        # Some schedules index every rank's transfers (O(p log p) memory: 16.8 GB at
        # 32,768 ranks): count at two smaller sizes and extrapolate as a power of p,
        # which overstates the log p schedules a little.
        a, b = _COUNT_DIRECTLY // 2, _COUNT_DIRECTLY
        m1, m2 = sized(op, alg, a), sized(op, alg, b)
        return round(m2 * (p / b) ** math.log2(max(m2, 1) / max(m1, 1))), in_rings, key

    sampled = [counts(r) for r in ranks]
    # The most of each kind of message (they cost differently), not of their sum.
    kept = max(c.messages - c.ring_run_messages - c.repeated_messages for c in sampled)
    repeated = max(c.repeated_messages for c in sampled)
    ring = max(c.ring_run_messages for c in sampled)
    return RankCounts(max(c.ops for c in sampled), kept + repeated + ring, ring, repeated)


STREAM_HINT_MESSAGES = 1_000_000
"""Messages from which a run of step-by-step NCCL rings says that streamed rings exist."""


PROGRESS_IN_FLIGHT_MIN = 1000
"""Messages in flight at once from which the progress line counts them."""


PROGRESS_ESTIMATE_MIN_FRACTION = 0.05
"""The progress line estimates the time left once this share of the messages is done:
earlier, the phase's set-up (routes, plans) weighs on too few messages, and the estimate
runs to many times the run's length."""


def _progress_line(name: str, sim: PhaseSim, elapsed_s: float, width: int = 24) -> str:
    """``phase: [#####.....]  42.0% 1,234/2,940 messages, simulated 1.234 ms, ~3 s left``."""
    done, total = sim.messages_done, sim.expected_messages
    frac = min(done / total, 1.0) if total else 1.0
    fill = int(frac * width)
    left = (
        f", ~{elapsed_s * (1 - frac) / frac:.0f} s left"
        if PROGRESS_ESTIMATE_MIN_FRACTION <= frac < 1
        else ""
    )
    # Thousands of messages in flight on shared links are where a contended fabric's
    # time goes (each one's end shares its links' capacity out again): said, so that a
    # count standing still while they drain does not look like a hang.
    net = sim.net
    flows = net.transfers_started - net.transfers_completed if 0 < frac < 1 else 0
    draining = f" ({flows:,} in flight)" if flows >= PROGRESS_IN_FLIGHT_MIN else ""
    if draining and flows > total - done:
        left = ""  # (the end is their draining, which the count does not measure)
    return (
        f"{name}: [{'#' * fill}{'.' * (width - fill)}] {frac:6.1%} {done:,}/{total:,} "
        f"messages{draining}, simulated {sim.env.now * MS_PER_S:.3f} ms{left}"
    )


def _library_of(sim: PhaseSim) -> str:
    """ "nccl" if every collective of the phase ran as NCCL runs them, "mpi" if none did,
    "nccl+mpi" if some did (``sim.nccl_algorithms``)."""
    if not sim.nccl_ran:
        return "mpi"
    as_mpi = any(
        alg not in sim.nccl_algorithms.get(op, ())
        for op, algs in sim.algorithms.items()
        for alg in algs
    )
    return "nccl+mpi" if as_mpi else "nccl"


def link_parts(graph: nx.DiGraph) -> dict[tuple, tuple]:
    """Edges drawn as part of a physical link named by another edge -> that link's key:
    a dragonfly's global link is a chain of three edges (router -> port -> port ->
    router), each naming the link in its ``link`` attribute, the port-to-port edge;
    {} on topologies that draw every link as one edge."""
    return {
        (a, b): tuple(name)
        for a, b, name in graph.edges(data="link")
        if name is not None and (a, b) != tuple(name)
    }


def _per_physical_link(figures: dict[tuple, Any], parts: dict[tuple, tuple]) -> dict[tuple, Any]:
    """``figures`` by edge, one entry per physical link (``parts``: as ``link_parts``
    gives them), keyed by the link and holding its named edge's figure.

    Taking one edge's figure for the link is exact: a flow that enters a global link's
    chain crosses all three edges (a port's only neighbours are its router and the other
    port, and no route ends at a port), starts and ends on all three at once, and at one
    rate; so the three carry the same bytes, busy time and load series, and have the same
    capacity (a degraded link's what-if scales its three edges together)."""
    if not parts:
        return figures
    out: dict[tuple, Any] = {}
    for k, v in figures.items():
        name = parts.get(k)
        if name is None:
            out[k] = v
        elif name not in out:
            out[name] = figures.get(name, v)
    return out


def _phase_result(
    sim: PhaseSim,
    n_end: int,
    iterations: int,
    wall_s: float,
    link_of: dict[tuple, tuple] | None = None,
) -> PhaseResult:
    """The figures of a simulated phase; ``link_of``: the edges that are parts of another
    physical link (``link_parts``), whose link figures are that link's, counted once."""
    link_of = link_of or {}
    net = sim.net
    placement = sim.ex.placement
    # Ranks on endpoints of the same numbers (the default): the rank pairs are endpoint
    # pairs already (part_bytes makes new dicts, so they are ours to keep).
    identity = all(e == r for r, e in enumerate(placement))
    part_pairs = {}
    for part, pairs in sim.part_bytes.items():
        if identity:
            part_pairs[part] = pairs
            continue
        by_endpoint: dict[tuple[int, int], int] = {}
        for (s, d), b in pairs.items():
            key = (placement[s], placement[d])
            by_endpoint[key] = by_endpoint.get(key, 0) + b
        part_pairs[part] = by_endpoint
    per_rank = []
    # By the operations of a program (found once for the ranks whose programs hold the
    # same operation objects, as a data-parallel phase's all do; the programs hold
    # them while the keys are used): 57 us a rank and program, a second at 16,384
    # ranks.
    plans: dict[tuple[int, ...], BreakdownPlan] = {}
    for r, ops in enumerate(sim.programs):
        tl = sim.timelines[r]
        key = tuple(map(id, ops))
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = BreakdownPlan.of(ops)
        parts = [breakdown_of(plan, s, e) for s, e in zip(tl.starts, tl.ends, strict=True)]
        n = len(parts)
        # (math.fsum over the count: statistics.fmean's figure, without its generators)
        per_rank.append(
            {
                "rank": r,
                "compute_s": math.fsum([p.compute_s for p in parts]) / n,
                "comm_s": math.fsum([p.comm_s for p in parts]) / n,
                "exposed_comm_s": math.fsum([p.exposed_comm_s for p in parts]) / n,
            }
        )
    links = _per_physical_link(net.link_bytes(), link_of)
    return PhaseResult(
        name=sim.name,
        iterations=iterations,
        iteration_time_s=sim.makespan_s / iterations,
        makespan_s=sim.makespan_s,
        num_endpoints=n_end,
        pair_bytes=net.pair_bytes,
        pair_busy=net.pair_busy_s,
        per_rank=per_rank,
        wire_bytes_by_group=dict(sim.wire_bytes_by_group),
        self_bytes=sim.self_bytes,
        part_pair_bytes=part_pairs,
        algorithms={k: sorted(v) for k, v in sim.algorithms.items()},
        library=_library_of(sim),
        nccl_algorithms={k: sorted(v) for k, v in sim.nccl_algorithms.items()},
        messages=sim.messages_done,
        link_bytes=links,
        link_busy_s=_per_physical_link(net.link_busy_s(), link_of),
        link_capacity_bytes_per_s={k: net.link_capacity_bytes_per_s(k) for k in links},
        link_series=_per_physical_link(net.link_series_arrays(), link_of)
        if net.record_link_series
        else {},
        max_link_overload=net.max_overload_ratio(),
        sim_wall_s=wall_s,
        timeline=sim,
    )


def route_matrices(
    graph: nx.DiGraph, ecmp: bool | None = None, router: topologies.Router | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Achievable point-to-point bandwidth (bytes/s, the route's bottleneck) and
    route latency (s) between every pair of endpoints; the diagonal is inf / 0, and
    0 / inf to or from an endpoint failed links cut off (``graph.graph["cut_off"]``) and
    between two parts they split the network into (``graph.graph["parts"]``).
    ``router`` (one on ``graph`` with the same ``ecmp``) reuses its searches."""
    n = graph.graph["num_endpoints"]
    if router is None:
        router = topologies.Router(graph, ecmp=ecmp)
    for closed_form in (
        router.hierarchical_matrices,
        router.rail_matrices,
        router.fat_tree_matrices,
        router.dragonfly_matrices,
    ):
        closed = closed_form()
        if closed is not None:
            return closed
    cut = set(graph.graph.get("cut_off", ()))
    part_of = _part_of(graph)
    tree = router.tree if router.routes_are_trees else None
    if (cut or part_of) and tree is None:
        # Each pair's own route, between the endpoints still reached, part by part (0 /
        # inf for the others: no route).
        bw, lat = _no_routes(n)
        parts = graph.graph.get("parts") or [[e for e in range(n) if e not in cut]]
        for keep in parts:
            m = len(keep)
            got = router.route_metrics_pairs([(s, d) for s in keep for d in keep])
            rows = np.ix_(keep, keep)
            bw[rows], lat[rows] = got[0].reshape(m, m), got[1].reshape(m, m)
        return bw, lat
    if tree is None or n == 1:
        # Each pair's own (ECMP-hashed or dimension-ordered) route (inf / 0.0 to
        # itself, as the matrices hold); a torus routes dimension by dimension: its
        # routes are no search tree.
        return router.route_metrics_rows(range(n), n)
    bw = np.full((n, n), np.inf)
    lat = np.zeros((n, n))
    edge = router.edge_metrics()
    # Without ECMP a route is the route to its last hop's source plus that edge (a
    # node is reached from its first, smallest-named, tight predecessor): one search
    # per source gives every route's bottleneck (min) and latency. The latency is
    # kept exact, as non-overlapping partial sums (Shewchuk), so that math.fsum of
    # them equals topologies.path_latency_s (math.fsum of the route's edges).
    if cut or part_of:
        bw, lat = _no_routes(n)
    for s in range(n):
        if s in cut:
            continue
        mine = part_of.get(s) if part_of else None
        router.num_paths(s, s)  # checks that s is an endpoint
        node_bw: dict = {s: math.inf}
        node_lat: dict = {s: ()}
        for v, u in tree(s):
            b, x = edge[(u, v)]
            bu = node_bw[u]
            node_bw[v] = b if b < bu else bu
            partials = []
            for y in node_lat[u]:  # msum: add x to the exact sum of the partials
                if abs(x) < abs(y):
                    x, y = y, x
                hi = x + y
                lo = y - (hi - x)
                if lo:
                    partials.append(lo)
                x = hi
            partials.append(x)
            node_lat[v] = partials
        row_bw, row_lat = bw[s], lat[s]
        for d in range(n):
            if d != s:
                if d in cut or (part_of and part_of.get(d) != mine):
                    continue  # (0 / inf: no route)
                if d not in node_bw:
                    router.path(s, d)  # raises: no route
                row_bw[d] = node_bw[d]
                row_lat[d] = math.fsum(node_lat[d])
    return bw, lat


BLOCK_ROWS_CELLS = 1 << 22
"""Matrix cells (8 bytes each) ``route_bandwidth_blocks`` holds at a time: 32 MB."""


def route_bandwidth_blocks(
    router: topologies.Router, b: int, cap_bytes_per_s: float | None = None
) -> np.ndarray | None:
    """The smallest route bandwidth (bytes/s) of each block of ``b`` x ``b`` endpoint
    pairs (endpoints ``i b ..`` to ``j b ..``; the last block of a side may be short):
    an m x m matrix, m = ceil(n / b), of what ``route_matrices`` holds, each pair's
    bandwidth capped at ``cap_bytes_per_s`` (an injection port's rate) where given, an
    endpoint to itself left out (inf where a block holds nothing else: b = 1's
    diagonal). Made from the network's closed form a block of rows at a time
    (``Router.bandwidth_rows``), so that a 16,384-endpoint network's 2 GB matrix is never
    held; None for a network without one (its matrix takes a route per pair)."""
    return _route_bandwidth_pass(router, b, None, cap_bytes_per_s)[0]


def route_bandwidth_in_nodes(
    router: topologies.Router, size: int, cap_bytes_per_s: float | None = None
) -> np.ndarray | None:
    """The smallest route bandwidth (bytes/s) between two endpoints of each node of
    ``size`` consecutive endpoints (node k: endpoints ``k size ..``; the last node may be
    short, a node of one endpoint inf), each pair capped at ``cap_bytes_per_s`` where
    given: what a block minimum over nodes and the links between them hides (a degraded
    NVLink of 60 GB/s under the 25 GB/s of a block's NIC pairs). From the fabric's closed
    form, as :func:`route_bandwidth_blocks`; None for a network without one."""
    return _route_bandwidth_pass(router, None, size, cap_bytes_per_s)[1]


def _route_bandwidth_pass(
    router: topologies.Router,
    b: int | None,
    size: int | None,
    cap_bytes_per_s: float | None = None,
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """:func:`route_bandwidth_blocks` of blocks of ``b`` and :func:`route_bandwidth_in_nodes`
    of nodes of ``size`` (each None where not asked for), from one pass over the rows:
    making the rows is what costs (3.8 CPU s for 16,384 GPUs of a rail-optimised
    cluster), reducing them does not."""
    rows = router.bandwidth_rows()
    if rows is None:
        return None, None
    n = router.graph.graph["num_endpoints"]
    # Row chunks start on block and node boundaries both.
    unit = math.lcm(b or 1, size or 1)
    step = unit * max(1, BLOCK_ROWS_CELLS // (n * unit))
    blocks = nodes = None
    if b is not None:
        starts = np.arange(0, n, b)
        blocks = np.empty((len(starts), len(starts)))
    if size is not None:
        nodes = np.full(-(-n // size), np.inf)
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        chunk = rows(r0, r1)  # (its diagonal, an endpoint to itself, is inf)
        if blocks is not None:
            cols = np.minimum.reduceat(chunk, starts, axis=1)
            blocks[r0 // b : -(-r1 // b)] = np.minimum.reduceat(
                cols, np.arange(0, r1 - r0, b), axis=0
            )
        if nodes is not None:
            for first in range(r0, r1, size):
                last = min(r1, first + size)
                nodes[first // size] = chunk[first - r0 : last - r0, first:last].min()
    if cap_bytes_per_s is not None:
        for out in (blocks, nodes):
            if out is not None:
                np.minimum(out, cap_bytes_per_s, out=out, where=np.isfinite(out))
    return blocks, nodes


def _part_of(graph: nx.DiGraph) -> dict[int, int] | None:
    """Each endpoint's part where failed links split the network into parts that hold
    jobs never exchanging a message (``graph.graph["parts"]``, see
    ``whatif.apply_links``); None where they did not."""
    parts = graph.graph.get("parts")
    if not parts:
        return None
    return {e: i for i, part in enumerate(parts) for e in part}


def _no_routes(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Route matrices of ``n`` endpoints none of which reaches another: bandwidth 0 and
    latency inf, but inf / 0 on the diagonal (an endpoint to itself)."""
    bw, lat = np.zeros((n, n)), np.full((n, n), np.inf)
    np.fill_diagonal(bw, np.inf)
    np.fill_diagonal(lat, 0.0)
    return bw, lat


def _routed_by(nets: Sequence[FlowNetwork]) -> Callable[[int, int], tuple | None]:
    """The links of the route a pair's transfers took in one of ``nets`` (each with the
    ``capacity_bytes_per_s`` and ``latency_s`` of its graph edge; injection ports left
    out), or None where none of them keeps it (see ``FlowNetwork.known_path``)."""
    keeping = [net for net in nets if net.routes_per_pair]

    def routed(src: int, dst: int) -> tuple | None:
        for net in keeping:
            path = net.known_path(src, dst)
            if path is not None:
                links = path.links
                # With injection ports, the route's links lie between the two ports.
                return links if len(links) == len(path.edges) else links[1:-1]
        return None

    return routed


def pair_route_metrics(
    router: topologies.Router,
    pairs: Sequence[tuple[int, int]],
    injection_bytes_per_s: float | None = None,
    routed: Callable[[int, int], tuple | None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Bottleneck bandwidth (bytes/s) and latency (s) of the route of each ``(src, dst)``
    endpoint pair, as ``route_matrices`` gives them (inf / 0 for ``src == dst``, 0 / inf
    to or from an endpoint failed links cut off and between two parts they split the
    network into; ``injection_bytes_per_s`` caps the
    others' bandwidth): the routes of the pairs asked
    only, so a workload's pairs cost what it routed, not n^2 routes. ``routed(src, dst)``
    gives the links of a pair's route where one is known, the one ``router`` gives (a
    simulation's, made by it; see ``_routed_by``): the same minimum and ``math.fsum`` of
    the same edges' figures, without routing again."""
    bw = np.full(len(pairs), np.inf)
    lat = np.zeros(len(pairs))
    rest: list[int] = []
    cut = set(router.graph.graph.get("cut_off", ()))
    part_of = _part_of(router.graph)
    for i, (s, d) in enumerate(pairs):
        if s != d and (
            (cut and (s in cut or d in cut)) or (part_of and part_of.get(s) != part_of.get(d))
        ):
            bw[i], lat[i] = 0.0, math.inf  # cut off or split by failed links: no route
            continue
        links = routed(s, d) if routed is not None and s != d else None
        if links:
            b = min([link.capacity_bytes_per_s for link in links])
            bw[i] = b if injection_bytes_per_s is None else min(b, injection_bytes_per_s)
            lat[i] = math.fsum([link.latency_s for link in links])
        else:
            rest.append(i)
    if rest:
        # Sources of one search share their routes' parts (Router.route_metrics_pairs).
        b, x = router.route_metrics_pairs([pairs[i] for i in rest])
        if injection_bytes_per_s is not None:
            mine = np.array([pairs[i][0] == pairs[i][1] for i in rest])
            b = np.where(mine, b, np.minimum(b, injection_bytes_per_s))
        bw[rest], lat[rest] = b, x
    return bw, lat


def _endpoints(topology: nx.DiGraph) -> int:
    """The endpoints of a graph given to the time functions; a hand-made graph that lacks
    what the builders record is refused naming what (``topologies.validate``), not with a
    KeyError."""
    n = topology.graph.get("num_endpoints")
    if n is None:
        topologies.validate(topology)
        raise topologies.TopologyError(
            "the graph does not record its endpoints: set graph.graph['num_endpoints'] to "
            "their number (the endpoints are the nodes 0..n-1 of kind 'endpoint')"
        )
    return n


def _elements(size_bytes: int) -> int:
    """float32 elements of a message of ``size_bytes``; raises ValueError unless it is a
    whole number of bytes >= 0 and a multiple of 4."""
    if (
        not isinstance(size_bytes, numbers.Integral)
        or isinstance(size_bytes, bool)
        or size_bytes < 0
    ):
        raise ValueError(f"size_bytes must be a whole number of bytes >= 0 (got {size_bytes!r})")
    if size_bytes % ELEM_BYTES:
        raise ValueError(
            f"size_bytes must be a multiple of {ELEM_BYTES} (float32 elements; got {size_bytes})"
        )
    return int(size_bytes) // ELEM_BYTES


_SCHEDULE_KEYWORDS = frozenset(SCHEDULE_PARAM_READERS)


def collective_time(
    topology: nx.DiGraph,
    op: str,
    algorithm: str,
    size_bytes: int,
    alpha_s: float = 0.0,
    gamma_s_per_byte: float = 0.0,
    step_latency_s: float = 0.0,
    send_overhead_s: float = 0.0,
    eager_threshold_bytes: int = -1,
    rendezvous_handshake: bool = False,
    **schedule_kw: Any,
) -> float:
    """Simulated seconds of one collective over all endpoints of ``topology``.

    ``size_bytes`` follows the MPI count semantics of ``workload.ops`` (the
    whole vector for allreduce; each rank's contribution for allgather; each
    rank's block for reduce_scatter; per peer for alltoall), in bytes: it must
    be a multiple of 4 (float32 elements). ``gamma_s_per_byte`` is the reduction
    cost (seconds per reduced byte) and ``step_latency_s`` the cost per step (seconds)
    of a collective the MPI library runs; ``send_overhead_s`` LogGP's o (seconds per
    message at its sender, one message after another). Messages above
    ``eager_threshold_bytes`` (default -1: all) wait for their receiver, after a
    request-to-send with ``rendezvous_handshake`` (as :func:`simulate` sends them).
    ``schedule_kw``: ``local_size``
    (ranks per node; default: the topology's ``gpus_per_node`` or ``group_size``, where
    its builder records one), ``rings``, ``channels``, ``pipeline_chunks``, ``streamed``
    (nccl_ring: each run of ring steps one message per hop, see
    ``workload.collectives.stream_steps``; nccl_tree: its pipeline one message per edge
    and way, see ``workload.collectives.stream_tree``).
    """
    arenas.enable()  # as simulate does (process-wide, decided once)
    unknown = sorted(set(schedule_kw) - _SCHEDULE_KEYWORDS)
    if unknown:
        raise TypeError(
            f"collective_time: no keyword {unknown[0]!r}; the schedule's are "
            f"{', '.join(sorted(_SCHEDULE_KEYWORDS))}"
        )
    for name, value in schedule_kw.items():
        readers = SCHEDULE_PARAM_READERS[name]
        if value is not None and value is not False and algorithm not in readers:
            # (the policy passes each only to the algorithms that read it: this one would
            # be dropped, and the time returned as if it had not been given)
            raise ValueError(
                f"collective_time: {name} is read by {', '.join(readers)} only, not by "
                f"{algorithm!r}; leave it out"
            )
    for name, value in (
        ("alpha_s", alpha_s),
        ("step_latency_s", step_latency_s),
        ("send_overhead_s", send_overhead_s),
    ):
        if not 0.0 <= value <= MAX_LATENCY_US * 1e-6:  # (NaN refused too)
            raise ValueError(
                f"collective_time: {name} is seconds, 0 to {MAX_LATENCY_US * 1e-6:g} as the "
                f"configuration allows (got {value!r}; 5 us is 5e-6)"
            )
    if not gamma_s_per_byte >= 0.0:
        raise ValueError(
            f"collective_time: gamma_s_per_byte must be >= 0 (got {gamma_s_per_byte!r})"
        )
    given = schedule_kw.get("local_size")
    if given is not None and (
        isinstance(given, bool) or not isinstance(given, numbers.Integral) or given < 1
    ):
        # (0 stood for the topology's node size, -2 made nodes of 1, 2, 2, 2 and 1 GPUs)
        raise ValueError(
            f"collective_time: local_size is the GPUs (ranks) of a node, an integer >= 1 "
            f"(got {given!r}; leave it out for the topology's own)"
        )
    streamed = schedule_kw.get("streamed")
    if streamed is not None and type(streamed) is not bool:
        raise ValueError(f"collective_time: streamed is True or False (got {streamed!r})")
    streamed = bool(streamed)
    if streamed:
        costs = [
            name
            for name, value in (
                ("gamma_s_per_byte", gamma_s_per_byte),
                ("step_latency_s", step_latency_s),
                ("send_overhead_s", send_overhead_s),
                ("rendezvous_handshake", rendezvous_handshake),
            )
            if value
        ]
        if costs:
            raise ValueError(
                f"collective_time: streamed rings and trees run as NCCL runs its collectives, "
                "without "
                f"MPI's per-message and per-step costs; leave out {', '.join(costs)}"
            )
    count = _elements(size_bytes)
    p = _endpoints(topology)
    params = topology.graph.get("params") or {}
    local_size = schedule_kw.get("local_size") or params.get("gpus_per_node")
    local_size = local_size or params.get("group_size")

    def program(rank: int) -> list:
        # (streamed: left to the library, which runs it as NCCL does; see runs_as_nccl)
        b = ProgramBuilder(BuildOptions(algorithm=None if streamed else algorithm))
        b.collective(op, "world", count)
        return b.ops

    policy = AlgorithmPolicy(
        fixed=algorithm if streamed else None,
        local_size=local_size,
        rings=schedule_kw.get("rings"),
        channels=schedule_kw.get("channels"),
        pipeline_chunks=schedule_kw.get("pipeline_chunks"),
        streamed_rings=streamed and algorithm == "nccl_ring",
        streamed_trees=streamed and algorithm == "nccl_tree",
    )
    # An explicit algorithm is a question about that algorithm: never answer another's.
    # (Ranks on endpoints in order: nodes of local_size, the last one short if it does
    # not divide p, as the run lays the group out.)
    policy.choose(program(0)[0], p, node_layout(range(p), range(p), local_size)[0])
    if policy.fallbacks:
        hint = {
            "hierarchical": " (pass local_size=, the group size)",
            "multiring": " (pass rings=, a list of rank orders)",
        }.get(algorithm, "")
        why = next(iter(policy.fallbacks))
        # The policy's words say which algorithm it would run instead; here none runs.
        why = re.sub(r"^(\w+): '([^']*)' asked for, '[^']*' used: ", r"\1 cannot run '\2': ", why)
        raise ValueError(f"collective_time: {why}{hint}")
    # The library's reduction cost applies as if the library chose this algorithm.
    return program_time(
        topology,
        program,
        name=f"{op}/{algorithm}",
        alpha_s=alpha_s,
        gamma_s_per_byte=gamma_s_per_byte,
        step_latency_s=step_latency_s,
        send_overhead_s=send_overhead_s,
        eager_threshold_bytes=eager_threshold_bytes,
        rendezvous_handshake=rendezvous_handshake,
        policy=policy,
        library_algorithm=True,
    )


def program_time(
    topology: nx.DiGraph,
    program: Callable[[int], list],
    *,
    name: str = "program",
    alpha_s: float = 0.0,
    gamma_s_per_byte: float = 0.0,
    step_latency_s: float = 0.0,
    send_overhead_s: float = 0.0,
    eager_threshold_bytes: int = -1,
    rendezvous_handshake: bool = False,
    policy: AlgorithmPolicy | None = None,
    library_algorithm: bool = False,
) -> float:
    """Simulated seconds of one iteration of ``program(rank)`` (rank programs of
    ``workload.ops``) on every endpoint of ``topology``, one group ``"world"``.

    Messages above ``eager_threshold_bytes`` (bytes; default -1: every message, a
    zero-byte one too, so that a step whose blocks are empty waits for its receiver as
    the others do, as a closed form of steps assumes) use rendezvous, with its
    request-to-send if ``rendezvous_handshake``."""
    p = _endpoints(topology)
    wl = Workload("program", p, {}, {"world": [tuple(range(p))]}, [Phase(name, program)])
    router = topologies.Router(topology)
    ex = SimExecutor(
        wl,
        lambda env: FlowNetwork(
            env,
            topology,
            router.path,
            alpha_s=alpha_s,
            send_overhead_s=send_overhead_s,
            rendezvous_handshake=rendezvous_handshake,
        ),
        list(range(p)),
        policy=policy or AlgorithmPolicy(),
        eager_threshold_bytes=eager_threshold_bytes,
        gamma_s_per_byte=gamma_s_per_byte,
        gamma_for_named_algorithms=library_algorithm,
        step_latency_s=step_latency_s,
    )
    sim = ex.run_phase()
    sim.release()
    ex.release_plans()
    return sim.makespan_s


def exchange_time(
    topology: nx.DiGraph,
    size_bytes: int,
    alpha_s: float = 0.0,
    window: int = 1,
    send_overhead_s: float = 0.0,
) -> float:
    """Seconds per message for every endpoint to send ``window`` messages of
    ``size_bytes`` to the next one and receive as many from the previous, all at once
    (the micro-benchmark's ``exchange``: the whole exchange's time / ``window``)."""
    count = _elements(size_bytes)
    if not isinstance(window, numbers.Integral) or window < 1:
        raise ValueError(f"window must be a whole number of messages >= 1 (got {window!r})")
    p = _endpoints(topology)

    def program(rank: int) -> list:
        b = ProgramBuilder()
        reqs = []
        for _ in range(window):
            reqs.append(b.recv((rank - 1) % p, count, tag=1, group="world", blocking=False))
            reqs.append(b.send((rank + 1) % p, count, tag=1, group="world", blocking=False))
        b.wait(*reqs)
        return b.ops

    t = program_time(
        topology, program, name="exchange", alpha_s=alpha_s, send_overhead_s=send_overhead_s
    )
    return t / window


def message_time(
    topology: nx.DiGraph,
    src: int,
    dst: int,
    size_bytes: int,
    alpha_s: float = 0.0,
    send_overhead_s: float = 0.0,
    eager_threshold_bytes: int = -1,
    rendezvous_handshake: bool = False,
) -> float:
    """Seconds for one message of ``size_bytes`` from endpoint ``src`` to another
    endpoint ``dst`` (its receive posted first; above ``eager_threshold_bytes`` with a
    request-to-send first if ``rendezvous_handshake``, as :func:`collective_time`)."""
    count = _elements(size_bytes)
    p = _endpoints(topology)
    for name, e in (("src", src), ("dst", dst)):
        if not isinstance(e, numbers.Integral) or not 0 <= e < p:
            raise ValueError(f"{name}={e!r} is no endpoint of the topology (0..{p - 1})")
    if src == dst:
        raise ValueError(f"src and dst are both endpoint {src}: a message goes to another")

    def program(rank: int) -> list:
        b = ProgramBuilder()
        if rank == src:
            b.send(dst, count, tag=1, group="world")
        elif rank == dst:
            b.recv(src, count, tag=1, group="world")
        return b.ops

    return program_time(
        topology,
        program,
        name="message",
        alpha_s=alpha_s,
        send_overhead_s=send_overhead_s,
        eager_threshold_bytes=eager_threshold_bytes,
        rendezvous_handshake=rendezvous_handshake,
    )
