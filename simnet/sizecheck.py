"""How much memory a simulation will take, estimated from its configuration alone.

``simulate`` checks this before it builds anything: a case that cannot fit is refused
in one line naming the size that would (a ring of 100,000 nodes used to print nothing
for 83 s while its memory passed 12 GB; a fat-tree with k = 200 crashed after 77 s
allocating 29.1 TiB).

What grows with the case, in bytes (each figure measured here or counted exactly):

- the endpoint-pair matrices: ``n x n`` float64/int64 entries for the route bandwidths
  and latencies and the whole run's traffic, then per phase its traffic, busy time and
  up to three traffic parts, and the heatmaps' copies: ``8 (6 + 5 phases) n^2``; and
  while the dense files are written, their rows as Python lists and text: 64 B more per
  entry (a 4,394-endpoint fat-tree's dense run peaked at 3.3 GiB, 0.9 GiB over the
  estimate without it; 2,000 endpoints 0.8 GiB, 0.12 over);
- the network graph: about 400 B per node and per edge (networkx; measured on rings,
  switches, tori, fat-trees and dragonflies: 310-420 B), and as much again twice over
  for what is built on it (the router's arrays, the link tables, the sampled routes of
  a big run's heatmaps): 1,200 B in all (a k = 64 fat-tree, 464 thousand elements, with
  10 ranks peaked at 0.68 GB, the graph alone 0.15 GB; k = 200 at 13.8 GB); counted exactly per type
  (:func:`graph_elements`: ``3 n`` on rings and switches, ``1.75 k^3 + 1.25 k^2`` on a
  fat-tree, and on a dragonfly of G groups a node and three edges per ordered pair of
  groups, 4 G^2: 2,000 endpoints in 1,000 groups are 4 million elements, 1.4 GiB);
- the rank programs and their timelines: about 110 B per operation (measured) and 64 B
  per operation and simulated iteration;
- the messages of one iteration (their plans, flows and records): about 1,000 B each,
  counted once per collective a rank calls: a call repeating an earlier one (same
  operation, algorithm, group size and count) reuses its schedule and plans, and its
  messages live only while it runs (measured 2026-11-28: DLRM, whose two alltoalls per
  iteration are one such pair, on 512 and 1,024 ranks of a switch peaked at 0.36 and
  1.26 GB for 0.27 and 1.09 million messages of first calls, 0.54 and 2.1 million in
  all; an LLM's tensor-parallel allreduces repeat hundreds of times an iteration, and a
  32-rank one of 41 million messages, nearly all repeats, peaked at 0.5 GB where
  900 B for every message had asked for 34 GiB); 32 B for a message of a schedule of
  ring runs, generated per rank as it runs (ResNet-152 with ring allreduces on 1,024
  ranks: 21 million messages, 0.31 GB above the interpreter's, 16 B each; with
  Rabenseifner's 0.2 million messages, 171 B each).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workload.units import GIB

from .config import GROUPED_TOPOLOGIES, Config

MATRIX_ENTRY_BYTES = 8
MATRIX_WRITE_BYTES = 64  # per endpoint pair, while the dense files are written
GRAPH_ELEMENT_BYTES = 1200
OP_BYTES = 110
OP_ITERATION_BYTES = 64
MESSAGE_BYTES = 1000
RING_RUN_MESSAGE_BYTES = 32
HEADROOM = 0.8  # of the available memory a simulation may plan to use

DENSE_MAX_ENDPOINTS = 2048
"""Above this many endpoints the command line writes no n x n file by default: at
16,384 endpoints one such matrix is 268 million cells (2 GB in memory, several GB of
CSV), and the route of every pair costs more than the simulation itself."""
MATRICES = ("auto", "dense", "sparse")  # what --matrices accepts (simnet.output)


TRACE_MAX_EVENTS = 1_000_000
"""The timeline trace's events by default (100-210 bytes each in the file, by how long
an operation's description is): a trace of every rank's operations beyond this (a
1,152-rank GPT-3 run has 2.6 million, a 556 MB file that took 25 s and 3 GB to write)
is more than a trace viewer opens well; by default the trace then holds the ranks from
0 up that fit, and the last rank to finish."""

SERIES_CSV_MAX_POINTS = 4_000_000
"""The link series CSV's change points by default (about 50 bytes a row): beyond this
the CSV is not written unless asked for (``--series``); the utilisation plot still
draws the busiest links' series."""


def dense_matrices(num_endpoints: int, matrices: str = "auto") -> bool:
    """Whether n x n endpoint matrices are written: ``"dense"`` always, ``"sparse"``
    never, ``"auto"`` up to :data:`DENSE_MAX_ENDPOINTS` endpoints."""
    if matrices not in MATRICES:
        raise ValueError(f"matrices must be one of {', '.join(MATRICES)} (got {matrices!r})")
    return matrices == "dense" or (matrices == "auto" and num_endpoints <= DENSE_MAX_ENDPOINTS)


@dataclass(frozen=True)
class SizeEstimate:
    """The estimate of one case, in bytes."""

    endpoints: int
    matrix_bytes: int
    graph_bytes: int
    program_bytes: int
    message_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.matrix_bytes + self.graph_bytes + self.program_bytes + self.message_bytes

    def describe(self) -> str:
        return (
            f"about {self.total_bytes / GIB:.1f} GiB ({self.endpoints:,} x {self.endpoints:,} "
            f"endpoint-pair matrices {self.matrix_bytes / GIB:.1f} GiB, messages "
            f"{self.message_bytes / GIB:.1f} GiB, network graph {self.graph_bytes / GIB:.1f} "
            f"GiB, rank programs {self.program_bytes / GIB:.1f} GiB)"
        )


def graph_elements(cfg: Config) -> int:
    """Nodes plus edges of the configured network graph, hosts included (as the
    builders of ``topologies`` make them)."""
    t = cfg.topology
    n = cfg.num_endpoints
    if t.type == "fat_tree" and t.k:
        base = fat_tree_elements(t.k)
    elif t.type == "torus" and t.dims:
        # a link each way along every dimension longer than 2; one along one of 2
        base = n + sum(n if d == 2 else 2 * n for d in t.dims if d > 1)
    elif t.type in ("hierarchical", "rail_optimised"):
        # endpoints, four links each, a switch per group (node), and the top switch
        # (hierarchical) or a switch per rail (rail_optimised: one per GPU of a node)
        size = t.effective_group_size or n
        base = 5 * n + n // size + (1 if t.type == "hierarchical" else size)
    elif t.type == "dragonfly" and t.routers_per_group and t.endpoints_per_router:
        a = t.routers_per_group
        groups = n // (a * t.endpoints_per_router)
        # endpoints and their links, routers and their local links, and per ordered
        # pair of groups a global link's node and its three edges
        base = 3 * n + groups * a * a + 4 * groups * (groups - 1)
    elif t.type == "ring":
        base = 3 * n if t.bidirectional else 2 * n
    else:  # a switch
        base = 3 * n + 1
    # A host adds its ranks' endpoints, its memory and NIC nodes, and their links.
    return base + host_elements(cfg.num_endpoints, cfg.hosts.ranks_per_host)


def fat_tree_elements(k: int) -> int:
    """Nodes and edges of a k-ary fat-tree (k^3 / 4 endpoints)."""
    return int(1.75 * k**3 + 1.25 * k**2)


def host_elements(hosts: int, ranks_per_host: int | None) -> int:
    """Nodes and edges the host model adds: per host, its ranks' endpoints, its memory
    and NIC nodes and their links, 5 r + 7 for r ranks (counted on built graphs)."""
    return hosts * (5 * ranks_per_host + 7) if ranks_per_host else 0


def matrix_bytes(endpoints: int, phases: int) -> int:
    """The dense endpoint-pair matrices of a run of ``phases`` phases, and writing them."""
    return (MATRIX_ENTRY_BYTES * (6 + 5 * phases) + MATRIX_WRITE_BYTES) * endpoints * endpoints


def _no_matrices(endpoints: int, phases: int) -> int:
    return 0


def estimate(
    cfg: Config,
    ops_per_rank: int,
    phases: int,
    messages_per_rank: int = 0,
    matrices: bool = True,
    ring_run_messages: int = 0,
    repeated_messages: int = 0,
) -> SizeEstimate:
    """The memory of simulating ``cfg`` whose ranks run about ``ops_per_rank`` operations
    and send ``messages_per_rank`` messages per iteration in all (over ``phases`` phases),
    ``ring_run_messages`` of them in schedules of ring runs and ``repeated_messages``
    others in calls repeating a collective the rank already called (charged nothing: its
    schedule and plans are the first call's, whose messages are charged); ``matrices``:
    with the dense endpoint-pair matrices the outputs build (a simulation alone keeps its
    pairs sparse)."""
    n = cfg.num_rank_endpoints
    ops = ops_per_rank * cfg.world_size
    others = messages_per_rank - ring_run_messages - repeated_messages
    return SizeEstimate(
        n,
        matrix_bytes(n, phases) if matrices else 0,
        GRAPH_ELEMENT_BYTES * graph_elements(cfg),
        ops * (OP_BYTES + OP_ITERATION_BYTES * cfg.workload.iterations),
        (MESSAGE_BYTES * others + RING_RUN_MESSAGE_BYTES * ring_run_messages) * cfg.world_size,
    )


def largest_fitting(fits: Callable[[int], bool], start: int) -> int | None:
    """The largest size <= ``start`` for which ``fits`` holds (fits is monotone), or None."""
    lo, hi = 0, start
    if not fits(1):
        return None
    lo = 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def refusal(cfg: Config, est: SizeEstimate, phases: int, available_bytes: int) -> str | None:
    """Why ``cfg`` cannot be simulated in ``available_bytes``, naming what would fit; None
    when it fits."""
    budget = HEADROOM * available_bytes
    if est.total_bytes <= budget:
        return None
    t = cfg.topology
    matrices = matrix_bytes if est.matrix_bytes else _no_matrices
    rph = cfg.hosts.ranks_per_host or 1
    world = cfg.world_size
    # What the ranks need, whatever the network: programs grow with the ranks, messages
    # up to quadratically (an alltoall's do).
    linear, quadratic = est.program_bytes, est.message_bytes

    def endpoints_hint(n: int, field: str) -> str:
        """``n`` rank endpoints, named as ``field`` counts them (hosts, with hosts)."""
        if rph > 1:
            return f"at most about {n // rph:,} hosts of {rph} ranks fit ({field})"
        return f"at most about {n:,} endpoints fit ({field})"

    def ranks_fit(r: int) -> bool:
        share = r / world
        network = est.matrix_bytes + est.graph_bytes
        return network + linear * share + quadratic * share * share <= budget

    # Where the network's size is set apart from the ranks (k, dims, a world size of its
    # own), name a network that fits them, else how many ranks fit this network.
    if t.type in ("fat_tree", "torus") or world != est.endpoints:
        hint = ""
        if t.type == "fat_tree" and t.k:
            ok = [
                k
                for k in range(2, t.k, 2)
                if k**3 // 4 * rph >= world
                and matrices(k**3 // 4 * rph, phases)
                + GRAPH_ELEMENT_BYTES
                * (fat_tree_elements(k) + host_elements(k**3 // 4, cfg.hosts.ranks_per_host))
                + linear
                + quadratic
                <= budget
            ]
            hint = f"topology.k = {ok[-1]} fits" if ok else ""
        else:
            # A smaller network for the same ranks: its graph grows linearly with the
            # endpoints, a dragonfly's with the square of its groups.
            big = max(est.endpoints, 1)
            power = 2 if t.type == "dragonfly" else 1

            def network_fits(n: int) -> bool:
                graph = est.graph_bytes * (n / big) ** power
                return matrices(n, phases) + graph + linear + quadratic <= budget

            side = largest_fitting(network_fits, est.endpoints)
            if side and side >= world:
                field = (
                    "fewer in topology.dims"
                    if t.type == "torus"
                    else ("topology.num_nodes" if t.num_nodes else "distributed.num_nodes")
                )
                hint = endpoints_hint(side, field)
        if not hint:
            r = largest_fitting(ranks_fit, world)
            field = "workload.world_size" if cfg.workload.world_size else "distributed.num_nodes"
            hint = f"at most about {r:,} ranks fit ({field})" if r else ""
            if r and r & (r - 1):
                # Many workloads take only some counts (DLRM's divide 2^18): name one.
                hint += f"; the largest power of two below is {1 << (r.bit_length() - 1):,}"
    else:
        big = max(est.endpoints, 1)
        linear += est.graph_bytes
        n = largest_fitting(
            lambda n: matrices(n, phases) + linear * n / big + quadratic * (n / big) ** 2 <= budget,
            est.endpoints,
        )
        field = "topology.num_nodes" if t.num_nodes else "distributed.num_nodes"
        group = t.effective_group_size if t.type in GROUPED_TOPOLOGIES else None
        if n and group:
            n -= n % (group * rph)  # (a grouped network's size is whole groups)
        if cfg.workload.world_size:
            # The ranks are set apart from the network: a smaller network alone would
            # not hold them.
            field += " and workload.world_size"
        hint = endpoints_hint(n, field) if n and n >= rph else ""
    return (
        f"this case would need {est.describe()} but {available_bytes / GIB:.1f} GiB is "
        f"available; {hint or 'nothing this size fits'}, or --force to try anyway"
    )
