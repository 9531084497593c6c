"""How much memory a simulation will take, estimated from its configuration alone.

``simulate`` checks this before it builds anything: a case that cannot fit is refused
in one line naming the size that would (a ring of 100,000 nodes used to print nothing
for 83 s while its memory passed 12 GB; a fat-tree with k = 200 crashed after 77 s
allocating 29.1 TiB).

What grows with the case, in bytes (each figure measured here or counted exactly):

- the endpoint-pair matrices: ``n x n`` float64/int64 entries for the route bandwidths
  and latencies and the whole run's traffic, then per phase its traffic, busy time and
  up to three traffic parts, and the heatmaps' copies: ``8 (6 + 5 phases) n^2``;
- the network graph: about 400 B per node and per edge (networkx; measured on rings,
  switches and fat-trees), ``3 n`` nodes and edges on rings and switches, ``1.75 k^3 +
  1.25 k^2`` on a fat-tree;
- the rank programs and their timelines: about 110 B per operation (measured) and 64 B
  per operation and simulated iteration;
- the messages of one iteration (their plans, flows and records): about 900 B each
  (measured: DLRM on 256, 512 and 1,024 ranks of a switch peaked at 0.19, 0.56 and 2.0
  GB for 0.14, 0.54 and 2.1 million messages).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workload.units import GIB

from .config import Config

MATRIX_ENTRY_BYTES = 8
GRAPH_ELEMENT_BYTES = 400
OP_BYTES = 110
OP_ITERATION_BYTES = 64
MESSAGE_BYTES = 900
HEADROOM = 0.8  # of the available memory a simulation may plan to use

DENSE_MAX_ENDPOINTS = 2048
"""Above this many endpoints the command line writes no n x n file by default: at
16,384 endpoints one such matrix is 268 million cells (2 GB in memory, several GB of
CSV), and the route of every pair costs more than the simulation itself."""
MATRICES = ("auto", "dense", "sparse")  # what --matrices accepts (simnet.output)


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
    """Nodes plus edges of the configured network graph, hosts included."""
    t = cfg.topology
    if t.type == "fat_tree" and t.k:
        base = int(1.75 * t.k**3 + 1.25 * t.k**2)
    else:
        base = 3 * cfg.num_endpoints + 1
    # A host adds its ranks' endpoints, its memory and NIC nodes, and their links.
    rph = cfg.hosts.ranks_per_host or 0
    return base + (cfg.num_endpoints * (3 * rph + 8) if rph else 0)


def matrix_bytes(endpoints: int, phases: int) -> int:
    return MATRIX_ENTRY_BYTES * (6 + 5 * phases) * endpoints * endpoints


def _no_matrices(endpoints: int, phases: int) -> int:
    return 0


def estimate(
    cfg: Config,
    ops_per_rank: int,
    phases: int,
    messages_per_rank: int = 0,
    matrices: bool = True,
) -> SizeEstimate:
    """The memory of simulating ``cfg`` whose ranks run about ``ops_per_rank`` operations
    and send ``messages_per_rank`` messages per iteration in all (over ``phases`` phases);
    ``matrices``: with the dense endpoint-pair matrices the outputs build (a simulation
    alone keeps its pairs sparse)."""
    n = cfg.num_rank_endpoints
    ops = ops_per_rank * cfg.world_size
    return SizeEstimate(
        n,
        matrix_bytes(n, phases) if matrices else 0,
        GRAPH_ELEMENT_BYTES * graph_elements(cfg),
        ops * (OP_BYTES + OP_ITERATION_BYTES * cfg.workload.iterations),
        MESSAGE_BYTES * messages_per_rank * cfg.world_size,
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

    linear = est.graph_bytes + est.program_bytes
    # Messages grow up to quadratically with the ranks (an alltoall's do).
    quadratic = est.message_bytes
    if t.type == "fat_tree" and t.k:
        ok = [
            k
            for k in range(2, t.k, 2)
            if matrices(k**3 // 4 * (cfg.hosts.ranks_per_host or 1), phases)
            + GRAPH_ELEMENT_BYTES * 1.75 * k**3
            <= budget
        ]
        hint = f"topology.k = {ok[-1]} fits" if ok else "no fat-tree fits"
    elif t.type == "torus":
        side = largest_fitting(lambda n: matrices(n, phases) <= budget, est.endpoints)
        hint = f"at most about {side:,} endpoints fit (fewer in topology.dims)" if side else ""
    else:
        big = max(est.endpoints, 1)
        n = largest_fitting(
            lambda n: matrices(n, phases) + linear * n / big + quadratic * (n / big) ** 2 <= budget,
            est.endpoints,
        )
        field = "topology.num_nodes" if t.num_nodes else "distributed.num_nodes"
        hint = f"at most about {n:,} endpoints fit ({field})" if n else ""
    return (
        f"this case would need {est.describe()} but {available_bytes / GIB:.1f} GiB is "
        f"available; {hint or 'nothing this size fits'}, or --force to try anyway"
    )
