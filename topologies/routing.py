"""Routing on topology graphs, path metrics and validation of the data model.

A route is a tuple of directed edges ``((u0, u1), (u1, u2), ...)`` from endpoint ``src`` to
endpoint ``dst``; the empty tuple when ``src == dst``. See :mod:`topologies.builders` for the
data model (edge ``bandwidth`` in bytes/s, ``latency`` in seconds, per directed edge).
"""

from __future__ import annotations

import math
import numbers
import zlib
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import networkx as nx
import numpy as np

from topologies.builders import dragonfly_gateway
from topologies.errors import TopologyError

__all__ = [
    "Edge",
    "Path",
    "Router",
    "endpoints",
    "path_bandwidth_bytes_per_s",
    "path_latency_s",
    "validate",
]

Edge = tuple[Hashable, Hashable]
Path = tuple[Edge, ...]

# A search that has expanded more than this many nodes, at least this many per hop on
# average, is finished over arrays (_FullSearch) rather than grown on in Python.
_WIDE_NODES = 128
_WIDE_NODES_PER_HOP = 16

# Route counts at or above this stay with the Python search's exact integers (int64 ends
# at 2^63; the float copy of the counts that detects it is exact to within 2^10 there).
_MAX_ARRAY_COUNT = 2.0**62

# Two route latencies closer than this (relative, plus an absolute attosecond) are a tie, so
# that summing the same latencies in a different order does not break equal-cost paths apart.
_LATENCY_REL_TOL = 1e-9
_LATENCY_ABS_TOL_S = 1e-18


def _node_key(node: Hashable) -> tuple:
    """Total order on nodes: integer endpoints by number, then other nodes by name."""
    if type(node) is int:  # (the common cases first: no abstract-class checks)
        return (0, node, "")
    if type(node) is str:
        return (1, node, repr(node))
    if isinstance(node, numbers.Integral) and not isinstance(node, bool):
        return (0, int(node), "")
    return (1, str(node), repr(node))


def endpoints(graph: nx.DiGraph) -> list[int]:
    """The endpoint nodes (``kind == "endpoint"``) of ``graph``, sorted."""
    return sorted(
        (node for node, kind in graph.nodes(data="kind") if kind == "endpoint"), key=_node_key
    )


def _edge_attribute_problem(u: Hashable, v: Hashable, data: dict[str, Any]) -> str | None:
    """Describe what is wrong with the attributes of edge u -> v, or None if nothing."""
    bw, lat = data.get("bandwidth"), data.get("latency")
    if type(bw) is float and type(lat) is float and 0.0 < bw < math.inf and 0.0 <= lat < math.inf:
        return None  # (what the builders make: no abstract-class checks)
    for attr, unit, positive in (("bandwidth", "bytes/s", True), ("latency", "s", False)):
        if attr not in data:
            return (
                f"edge ({u!r}, {v!r}) has no {attr!r} attribute; every edge needs "
                f"'bandwidth' (bytes/s) and 'latency' (s)"
            )
        value = data[attr]
        bad = (
            isinstance(value, bool)
            or not isinstance(value, numbers.Real)
            or not math.isfinite(value)
            or (value <= 0 if positive else value < 0)
        )
        if bad:
            bound = "> 0" if positive else ">= 0"
            return (
                f"edge ({u!r}, {v!r}) has {attr}={value!r}; it must be a finite number "
                f"{bound} in {unit}"
            )
    return None


def _check_digraph(graph: Any, who: str) -> None:
    if not isinstance(graph, nx.DiGraph) or graph.is_multigraph():
        raise TopologyError(
            f"{who}: expected a networkx.DiGraph (got {type(graph).__name__}); build one with "
            "topologies.builders or convert with nx.DiGraph(g)"
        )


def validate(graph: nx.DiGraph) -> None:
    """Check that ``graph`` follows the topology data model; raise TopologyError if not.

    Checks: a (non-multi) ``nx.DiGraph``; every node has ``kind`` "endpoint" or "switch";
    the endpoints are exactly the ints ``0..n-1`` with n >= 1 (and ``graph.graph
    ["num_endpoints"]``, if set, equals n); no self-loops; every edge has a finite
    ``bandwidth`` > 0 (bytes/s) and a finite ``latency`` >= 0 (s); every endpoint can reach
    every other endpoint (switches may be one-way or unused, but not endpoints).
    """
    _check_digraph(graph, "validate")
    for node, kind in graph.nodes(data="kind"):
        if kind not in ("endpoint", "switch"):
            raise TopologyError(
                f"validate: node {node!r} has kind={kind!r}; set the node attribute "
                "kind='endpoint' (ranks, ints 0..n-1) or kind='switch'"
            )
    eps = [node for node, kind in graph.nodes(data="kind") if kind == "endpoint"]
    if not eps:
        raise TopologyError("validate: the graph has no endpoint (no node with kind='endpoint')")
    bad = [e for e in eps if isinstance(e, bool) or not isinstance(e, numbers.Integral)]
    if bad:
        raise TopologyError(
            f"validate: endpoint {bad[0]!r} is not an int; endpoints must be the ints 0..n-1 "
            "(give switches kind='switch')"
        )
    n = len(eps)
    if set(eps) != set(range(n)):
        missing = sorted(set(range(n)) - set(eps))
        raise TopologyError(
            f"validate: the {n} endpoints must be exactly 0..{n - 1}; missing "
            f"{missing[:5]}{'...' if len(missing) > 5 else ''} (renumber the endpoints)"
        )
    declared = graph.graph.get("num_endpoints")
    if declared is not None and declared != n:
        raise TopologyError(
            f"validate: graph.graph['num_endpoints'] is {declared} but the graph has {n} "
            "endpoints; fix the attribute or the nodes"
        )
    for u, v, data in graph.edges(data=True):
        if u == v:
            raise TopologyError(f"validate: self-loop on node {u!r}; remove it")
        problem = _edge_attribute_problem(u, v, data)
        if problem:
            raise TopologyError(f"validate: {problem}")
    # Strongly connected among endpoints: 0 reaches every endpoint and every endpoint reaches 0.
    for direction, reach in (
        ("to", nx.descendants(graph, 0)),
        ("from", nx.ancestors(graph, 0)),
    ):
        unreachable = [e for e in range(1, n) if e not in reach]
        if unreachable:
            raise TopologyError(
                f"validate: no route from endpoint 0 {direction} endpoint(s) "
                f"{unreachable[:5]}{'...' if len(unreachable) > 5 else ''}; every endpoint "
                "must reach every other (add the missing links)"
            )


def path_latency_s(graph: nx.DiGraph, path: Iterable[Edge]) -> float:
    """Latency of a route in seconds: the sum of its edges' ``latency`` (0.0 if empty)."""
    try:
        return math.fsum(graph.edges[u, v]["latency"] for u, v in path)
    except KeyError as exc:
        raise TopologyError(f"path_latency_s: edge or attribute {exc} not in the graph") from exc


def path_bandwidth_bytes_per_s(graph: nx.DiGraph, path: Iterable[Edge]) -> float:
    """Bottleneck bandwidth of a route in bytes/s: min edge ``bandwidth`` (math.inf if empty)."""
    try:
        return min((graph.edges[u, v]["bandwidth"] for u, v in path), default=math.inf)
    except KeyError as exc:
        raise TopologyError(
            f"path_bandwidth_bytes_per_s: edge or attribute {exc} not in the graph"
        ) from exc


def _attachment(
    leaves: dict[Hashable, tuple[Hashable, float]], root: Hashable, v: Hashable
) -> Hashable:
    """The node a search looks ``v`` up by: a leaf's attachment (a leaf has one way in),
    any other node (or the root) itself."""
    leaf = leaves.get(v)
    return leaf[0] if leaf is not None and v != root else v


class _Search:
    """Shortest-path DAG from one root, grown on demand: for every node resolved so far,
    its tight predecessors (sorted by node order) and the number of shortest routes from the
    root.

    The breadth-first search stops as soon as the requested node's layer is final (every
    node one hop closer to the root has been expanded), so routes to near neighbours cost
    a few nodes, not the whole graph; a later request for a farther node resumes it.

    Leaves (nodes whose only neighbour, both ways, is one other node: the endpoints of a
    switch, say) are never expanded, as no shortest route passes through one: a leaf is
    resolved from its attachment when asked for (one tight predecessor, the attachment's
    route count), so a search costs the switches, not the endpoints. The root may start at
    a latency above 0: a leaf's search is its attachment's search started at the leaf's
    up-link latency, which gives every node the very latencies (same floating-point sums)
    and predecessors of a search from the leaf, so the leaves of one switch share it.
    """

    __slots__ = (
        "best",
        "cands",
        "counts",
        "dist",
        "expanded",
        "key",
        "leaves",
        "order",
        "preds",
        "resolved",
        "root",
        "succ",
    )

    def __init__(
        self,
        root: Hashable,
        succ: dict[Hashable, list[tuple[Hashable, float]]],
        key: dict[Hashable, tuple],
        leaves: dict[Hashable, tuple[Hashable, float]],
        root_latency_s: float = 0.0,
    ) -> None:
        self.root = root
        self.succ = succ  # out-edges to nodes that are not leaves
        self.key = key
        self.leaves = leaves  # leaf -> (attachment, latency attachment -> leaf)
        self.dist: dict[Hashable, int] = {root: 0}
        self.best: dict[Hashable, float] = {root: root_latency_s}
        self.cands: dict[Hashable, list[tuple[Hashable, float]]] = {root: []}
        self.order: list[Hashable] = [root]  # discovery order, so sorted by hop count
        self.expanded = 0  # order[:expanded] have had their out-edges followed
        self.resolved = 1  # order[:resolved] have their preds and counts
        self.preds: dict[Hashable, tuple] = {root: ()}
        self.counts: dict[Hashable, int] = {root: 1}

    def reach(self, dst: Hashable, cached_only: bool = False) -> bool:
        """Resolve ``dst`` (and every node as close); False if it is unreachable (with
        ``cached_only``: if it is not resolved yet, and nothing is searched)."""
        if dst in self.counts:
            return True
        leaf = self.leaves.get(dst)
        if leaf is not None:
            return self.reach(leaf[0], cached_only)
        if cached_only:
            return False
        dist, best, cands, order = self.dist, self.best, self.cands, self.order
        succ = self.succ
        i = self.expanded
        # A node's latency is final once its whole previous layer has been expanded,
        # which BFS order guarantees before any node of its own layer is expanded.
        while i < len(order):
            u = order[i]
            du = dist[u]
            d = dist.get(dst)
            if d is not None and du >= d:
                break
            i += 1
            lu = best[u]
            for v, lat in succ[u]:
                dv = dist.get(v)
                if dv is None:
                    dist[v] = du + 1
                    best[v] = lu + lat
                    cands[v] = [(u, lu + lat)]
                    order.append(v)
                elif dv == du + 1:
                    cands[v].append((u, lu + lat))
                    if lu + lat < best[v]:
                        best[v] = lu + lat
        self.expanded = i
        final = dist[order[i]] if i < len(order) else math.inf  # layers <= this are final
        preds, counts, key = self.preds, self.counts, self.key
        j = self.resolved
        while j < len(order):
            v = order[j]
            if dist[v] > final:
                break
            j += 1
            found = cands.pop(v)
            if len(found) == 1:  # most nodes of most topologies: one way in
                u = found[0][0]
                preds[v] = (u,)
                counts[v] = counts[u]
                continue
            limit = best[v] + _LATENCY_REL_TOL * best[v] + _LATENCY_ABS_TOL_S
            tight = sorted((u for u, total in found if total <= limit), key=key.__getitem__)
            preds[v] = tuple(tight)
            counts[v] = sum(counts[u] for u in tight)
        self.resolved = j
        return dst in counts

    def preds_of(self, v: Hashable) -> tuple:
        """The tight predecessors of a resolved node (a leaf's: its attachment)."""
        u = _attachment(self.leaves, self.root, v)
        return (u,) if u is not v else self.preds[v]

    def count_of(self, v: Hashable) -> int:
        """The number of shortest routes from the root to a resolved node."""
        return self.counts[_attachment(self.leaves, self.root, v)]

    def tree(self) -> list[tuple[Hashable, Hashable]]:
        """Every node the root reaches, but the root, as ``(node, its first tight
        predecessor)``, predecessors first (the search run to the end; leaves last). The
        first tight predecessor is the one of the default (index 0) route."""
        self.reach(object())  # a node that is in no graph: runs the search to its end
        preds, root = self.preds, self.root
        out = [(v, preds[v][0]) for v in self.order[1:]]
        out.extend((leaf, u) for leaf, (u, _) in self.leaves.items() if leaf != root and u in preds)
        return out


class _CoreGraph:
    """The graph without its leaves, as arrays for :class:`_FullSearch`: nodes numbered
    0..m-1, directed edges ``(u, v, latency)`` sorted by ``v`` then by ``u``'s node order
    (the order tight predecessors are kept in); ``edges[e]`` is edge ``e``'s shared
    ``(u, v)`` tuple (the Router's), so routes are made of edge numbers without looking
    their pairs up."""

    __slots__ = ("_edge_number", "edges", "index", "lat", "nodes", "twins", "u", "u_view", "v")

    def __init__(
        self,
        succ: dict[Hashable, list[tuple[Hashable, float]]],
        key: dict[Hashable, tuple],
        leaves: dict[Hashable, tuple[Hashable, float]],
        edge_of: dict[Edge, Edge],
    ) -> None:
        self.nodes = sorted((n for n in succ if n not in leaves), key=key.__getitem__)
        self.index = {n: i for i, n in enumerate(self.nodes)}  # also the node order
        index = self.index
        edges = sorted(
            (index[v], index[u], lat) for u, out in succ.items() if u in index for v, lat in out
        )
        self.v = np.array([e[0] for e in edges], dtype=np.int64)
        self.u = np.array([e[1] for e in edges], dtype=np.int64)
        self.lat = np.array([e[2] for e in edges], dtype=np.float64)
        nodes = self.nodes
        self.edges = [edge_of[(nodes[u], nodes[v])] for v, u, _ in edges]
        self.u_view = memoryview(self.u)  # its items plain ints (see _FullSearch.views)
        # Twins: nodes with the same successors and the same predecessors, at the same
        # latencies (the edge switches of a fat-tree's pod), numbered by group. Swapping
        # two twins maps the graph onto itself (a node is never its own neighbour here,
        # so twins are not neighbours), so the search from one is the other's, swapped
        # (_FullSearch.twin): one search per group instead of one per switch.
        out_of: list[list] = [[] for _ in nodes]
        in_of: list[list] = [[] for _ in nodes]
        for v, u, lat in edges:
            out_of[u].append((v, lat))
            in_of[v].append((u, lat))
        groups: dict[tuple, list[int]] = {}
        for i in range(len(nodes)):
            if any(v == i for v, _ in out_of[i]):
                continue  # a loop: no twin
            groups.setdefault((tuple(out_of[i]), tuple(in_of[i])), []).append(i)
        self.twins: dict[Hashable, int] = {}
        for g, members in enumerate(m for m in groups.values() if len(m) > 1):
            for i in members:
                self.twins[nodes[i]] = g
        self._edge_number: dict[tuple[int, int], int] | None = None

    @property
    def edge_number(self) -> dict[tuple[int, int], int]:
        """``(u, v)`` node numbers -> the edge's number (made when first asked for)."""
        if self._edge_number is None:
            pairs = zip(self.u.tolist(), self.v.tolist(), strict=True)
            self._edge_number = {pair: e for e, pair in enumerate(pairs)}
        return self._edge_number


class _FullSearch:
    """:class:`_Search` run to the end at once, layer by layer over arrays: the same
    hop counts, latencies (the same floating-point sums), tight predecessors in node order
    and route counts, for graphs whose searches reach thousands of switches (a fat-tree's
    edge switch reaches every core and every pod). Made by :class:`Router` instead of a
    :class:`_Search` when it is exact to (route counts below 2^62)."""

    __slots__ = (
        "core",
        "counts_a",
        "dist",
        "leaves",
        "pred_e",
        "pred_len",
        "pred_start",
        "root",
        "uniform",
        "views",
    )

    def __init__(
        self,
        root: Hashable,
        core: _CoreGraph,
        leaves: dict[Hashable, tuple[Hashable, float]],
        root_latency_s: float,
    ) -> None:
        self.root = root
        self.core = core
        self.leaves = leaves
        m = len(core.nodes)
        r = core.index[root]
        U, V, LAT = core.u, core.v, core.lat
        dist = np.full(m, -1, dtype=np.int64)
        best = np.full(m, math.inf)
        counts = np.zeros(m, dtype=np.int64)
        fcounts = np.zeros(m)  # the counts again as floats: an int64 overflow shows here
        dist[r], best[r], counts[r], fcounts[r] = 0, root_latency_s, 1, 1.0
        frontier = np.zeros(m, dtype=bool)
        frontier[r] = True
        pred_start = np.zeros(m, dtype=np.int64)
        pred_len = np.zeros(m, dtype=np.int64)
        tight_e = []
        used = 0
        layer = 0
        while True:
            e = np.flatnonzero(frontier[U])
            vs = V[e]
            fresh = dist[vs] < 0
            e, vs = e[fresh], vs[fresh]
            if not len(e):
                break
            layer += 1
            starts = np.flatnonzero(np.concatenate(([True], vs[1:] != vs[:-1])))
            reached = vs[starts]
            us = U[e]
            cand = best[us] + LAT[e]
            low = np.minimum.reduceat(cand, starts)
            best[reached] = low
            dist[reached] = layer
            b = best[vs]
            tight = cand <= b + _LATENCY_REL_TOL * b + _LATENCY_ABS_TOL_S
            counts[reached] = np.add.reduceat(np.where(tight, counts[us], 0), starts)
            fcounts[reached] = np.add.reduceat(np.where(tight, fcounts[us], 0.0), starts)
            n_tight = np.add.reduceat(tight.astype(np.int64), starts)
            pred_len[reached] = n_tight
            pred_start[reached] = used + np.concatenate(([0], np.cumsum(n_tight)[:-1]))
            tight_e.append(e[tight])
            used += int(n_tight.sum())
            frontier[:] = False
            frontier[reached] = True
        if fcounts.max(initial=0.0) >= _MAX_ARRAY_COUNT:
            raise OverflowError("route counts beyond int64")
        # Kept for as long as the Router lives, one per root (781 at 16,384 ranks of a
        # fat-tree): hop counts and numbers in 32 bits, the counts in 64. A node's tight
        # predecessors are kept as the numbers of the edges from them (core.u[e] is the
        # predecessor): a route is made of its edges.
        self.dist = dist.astype(np.int32)
        pred_e = np.concatenate(tight_e).astype(np.int32) if tight_e else np.zeros(0, np.int32)
        self._keep(counts, pred_start.astype(np.int32), pred_len.astype(np.int32), pred_e)

    def _keep(
        self,
        counts: np.ndarray,
        pred_start: np.ndarray,
        pred_len: np.ndarray,
        pred_e: np.ndarray,
        uniform: np.ndarray | None = None,
    ) -> None:
        """Keep the search's arrays (``dist`` set already) and what is read from them;
        ``uniform`` is worked out unless given."""
        self.counts_a = counts
        self.pred_start = pred_start
        self.pred_len = pred_len
        self.pred_e = pred_e
        # Nodes whose tight predecessors all have the same route count (every node of a
        # symmetric fabric): a route index picks among them by a division, not a walk.
        if uniform is None:
            uniform = np.zeros(len(counts), dtype=np.uint8)
            has = np.flatnonzero(pred_len)
            if len(has):
                has = has[np.argsort(pred_start[has], kind="stable")]  # the segments' order
                cu = counts[self.core.u[pred_e]]
                first = pred_start[has]
                same = np.minimum.reduceat(cu, first) == np.maximum.reduceat(cu, first)
                uniform[has] = same
        self.uniform = uniform
        # The same arrays read element by element from Python: a memoryview's item is a
        # plain int, several times cheaper to get than a numpy scalar and its int().
        self.views = tuple(
            memoryview(a) for a in (self.dist, counts, pred_start, pred_len, pred_e, self.uniform)
        )

    def twin(self, root: Hashable) -> _FullSearch:
        """The search from ``root``, a twin of this search's root (``core.twins``) with
        the same root latency: this search with the two nodes swapped, which is a
        symmetry of the graph, so the hop counts, route counts and tight predecessors
        are this search's, swapped. Every list of predecessors stays in node order: the
        root is the one predecessor of the nodes one hop away, and the other twin, at
        least two hops away, is nobody's (its successors are the root's, one hop
        away); so a list either swaps the root for the twin and holds nothing else, or
        is the twin's own, whose predecessors do not move."""
        core = self.core
        a, b = core.index[self.root], core.index[root]
        if core.twins.get(self.root, -1) != core.twins.get(root, -2):
            raise ValueError(f"{root!r} is not a twin of {self.root!r}")
        swap = np.arange(len(core.nodes))
        swap[a], swap[b] = b, a
        out = _FullSearch.__new__(_FullSearch)
        out.root, out.core, out.leaves = root, core, self.leaves
        out.dist = self.dist[swap]
        pred_start, pred_len = self.pred_start[swap], self.pred_len[swap]
        pred_e = self.pred_e.copy()
        U, V = core.u, core.v
        eu, ev = U[pred_e], V[pred_e]
        touched = np.flatnonzero((eu == a) | (eu == b) | (ev == a) | (ev == b))
        number, other = core.edge_number, {a: b, b: a}
        ends = zip(touched.tolist(), eu[touched].tolist(), ev[touched].tolist(), strict=True)
        for p, u, v in ends:
            pred_e[p] = number[(other.get(u, u), other.get(v, v))]
        out._keep(self.counts_a[swap], pred_start, pred_len, pred_e, self.uniform[swap])
        return out

    def reach(self, dst: Hashable) -> bool:
        i = self.core.index.get(_attachment(self.leaves, self.root, dst))
        return i is not None and self.views[0][i] >= 0

    def preds_of(self, v: Hashable) -> tuple:
        u = _attachment(self.leaves, self.root, v)
        if u is not v:
            return (u,)
        i = self.core.index[v]
        _, _, start, length, pred_e, _ = self.views
        s = start[i]
        nodes, cu = self.core.nodes, self.core.u_view
        return tuple(nodes[cu[e]] for e in pred_e[s : s + length[i]])

    def count_of(self, v: Hashable) -> int:
        return self.views[1][self.core.index[_attachment(self.leaves, self.root, v)]]

    def unrank_edges(self, i: int, index: int, out: list[Edge]) -> None:
        """The ``index``-th shortest route from the root to the node numbered ``i``
        (0 <= index < its count), appended to ``out`` as its edges (the Router's tuples),
        the last edge first (see :meth:`walk_back`)."""
        edges = self.core.edges
        out.extend([edges[e] for e in self.walk_back(i, index)])

    def walk_back(self, i: int, index: int) -> list[int]:
        """The edge numbers of the ``index``-th shortest route from the root to the node
        numbered ``i`` (0 <= index < its count), last first, walking back from it: at each
        node the predecessors are taken in node order, each covering its own count of
        routes."""
        dist, counts, start, length, pred_e, uniform = self.views
        cu = self.core.u_view
        hops = []
        while dist[i]:
            s = start[i]
            n = length[i]
            j = index
            if n == 1:
                e = pred_e[s]
            elif uniform[i]:
                c = counts[cu[pred_e[s]]]
                q = j // c
                j -= q * c
                e = pred_e[s + q]
            else:
                for e in pred_e[s : s + n]:
                    c = counts[cu[e]]
                    if j < c:
                        break
                    j -= c
            hops.append(e)
            i, index = cu[e], j
        return hops

    def tree(self) -> list[tuple[Hashable, Hashable]]:
        nodes, dist = self.core.nodes, self.dist
        reached = np.flatnonzero(dist > 0)
        # BFS order: by hop count (any order within a layer: a node's predecessor is
        # in the layer before).
        reached = reached[np.argsort(dist[reached], kind="stable")]
        first = self.core.u[self.pred_e[self.pred_start[reached]]]
        out = [(nodes[v], nodes[u]) for v, u in zip(reached.tolist(), first.tolist(), strict=True)]
        index = self.core.index
        out.extend(
            (leaf, u)
            for leaf, (u, _) in self.leaves.items()
            if leaf != self.root and dist[index[u]] >= 0
        )
        return out


ECMP_BY_DEFAULT = ("fat_tree",)


def default_ecmp(topology_name: str | None) -> bool:
    """Whether a topology's routes spread over equal-cost paths unless told otherwise: a
    fat-tree's switches hash flows over their up-links (a single path would send all
    inter-pod traffic through one core switch)."""
    return topology_name in ECMP_BY_DEFAULT


class Router:
    """Deterministic shortest-path routing between endpoints, cached.

    A route minimises, in order: the hop count; the total latency (sum of edge ``latency``,
    equal within a relative 1e-9); then, without ECMP, it is the route whose node sequence,
    read backwards from ``dst``, is smallest in node order (integer endpoints by number
    before switches by name), i.e. every node is reached from its smallest-named equal-cost
    predecessor. The same graph always gives the same routes, in any process.

    With ``ecmp=True`` the route is one of *all* equal-cost shortest routes (equal hops and
    latency), chosen by ``zlib.crc32`` of ``(src, dst, flow_key)``, so flows with different
    keys spread over the routes, and a given key always takes the same one.

    Routes are computed on first request and cached: one breadth-first search per source,
    taken only as far as the farthest destination asked for so far (a fat-tree, a
    rail-optimised cluster, a dragonfly or a hierarchical graph exactly as its builder
    made it routes by arithmetic instead, the same routes);
    a repeated ``path()`` call is a dict lookup. The graph must not be modified after the
    Router is made. With ECMP the cache grows with the number of distinct flow keys used.

    Args:
        graph: a topology following the data model (see :func:`validate`); every edge must
            have a valid ``bandwidth`` and ``latency`` (checked here). Connectivity is not
            checked here: ``path()`` raises for an unreachable pair.
        ecmp: spread flows over equal-cost routes by ``flow_key``; None: the topology's
            default (:func:`default_ecmp`: on for fat-trees). Never on a hierarchical
            graph, whose only tie would take a group's own traffic out of it. Without
            ECMP a torus routes in dimension order (its nodes' ``coord``).
    """

    def __init__(self, graph: nx.DiGraph, ecmp: bool | None = None) -> None:
        _check_digraph(graph, "Router")
        self.graph = graph
        name = graph.graph.get("name")
        if ecmp is None:  # the fabric's own default: fat-trees spread over their cores
            ecmp = default_ecmp(name)
        # A hierarchical graph has one route per pair that stays inside a group; the
        # way through "top" ties with it only when the latencies are equal, and no fabric
        # would send a group's own traffic out of it: no ECMP there.
        self.ecmp = bool(ecmp) and name != "hierarchical"
        # Tori route dimension by dimension, read from the nodes' coordinates.
        self._coord: dict[Hashable, tuple[int, ...]] = {}
        self._dims: tuple[int, ...] = ()
        if name == "torus" and "dims" in graph.graph.get("params", {}):
            self._dims = tuple(graph.graph["params"]["dims"])
            self._coord = {n: d["coord"] for n, d in graph.nodes(data=True) if "coord" in d}
        self._edges: dict[Edge, Edge] = {}
        for u, v, data in graph.edges(data=True):
            problem = _edge_attribute_problem(u, v, data)
            if problem:
                raise TopologyError(f"Router: {problem}")
            self._edges[(u, v)] = (u, v)  # one shared tuple per edge, reused by every route
        self._leaves = _leaves(graph)
        leaves = self._leaves
        # Searches never expand a leaf (no shortest route passes through one).
        self._succ: dict[Hashable, list[tuple[Hashable, float]]] = {
            u: [(v, float(d["latency"])) for v, d in graph.succ[u].items() if v not in leaves]
            for u in graph.nodes
        }
        self._key = {node: _node_key(node) for node in graph.nodes}
        self._cache: dict[tuple, Path] = {}
        # (root, root latency) -> its search; a leaf's is its attachment's (see _Search).
        self._searches: dict[tuple[Hashable, float], _Search | _FullSearch] = {}
        self._core: _CoreGraph | None = None  # the graph as arrays, once a search is wide
        # (group of twins, root latency) -> the first array search of one of them.
        self._twin_searches: dict[tuple[int, float], _FullSearch] = {}
        self._wide = False  # a search has grown wide: new ones run over arrays at once
        self._no_arrays = False  # route counts passed int64: searches stay in Python
        self._roots: dict[Hashable, tuple[Hashable, float]] = {}  # src -> its search's key
        self._edge_attrs: dict[Edge, tuple[float, float]] | None = None
        # id(search) -> (search, {(node, route index there): (bottleneck, latencies)})
        self._metric_memos: dict[Any, tuple[Any, dict]] = {}
        # The core graph and, as arrays: its edges' bandwidths and latencies by edge
        # number, and by endpoint number its attachment's core number (-1: not an
        # endpoint or not in the core) and the bandwidth and latency of its one way in
        # (NaN where it is no leaf) (see _metrics_over_arrays).
        self._metric_arrays: tuple[_CoreGraph, tuple[np.ndarray, ...]] | None = None
        self._endpoints = frozenset(
            n for n, kind in graph.nodes(data="kind") if kind == "endpoint" and type(n) is int
        )
        self._ecmp_paths: dict[tuple[Hashable, Hashable, int], Path] = {}
        # A hierarchical graph as its builder made it: (group size, direct intra links),
        # whose routes are known without a search (see _hierarchical_shape).
        self._hier = _hierarchical_shape(graph) if not self.ecmp else None
        # A fat-tree, rail-optimised cluster or dragonfly as its builder made it: routes
        # by arithmetic (see _FatTreeRoutes, ...), the same as the searches'.
        self._arith = (
            _FatTreeRoutes.of(graph, self._edges)
            or _RailRoutes.of(graph, self._edges)
            or _DragonflyRoutes.of(graph, self._edges)
        )

    # -- public -------------------------------------------------------------------------------

    def path(self, src: int, dst: int, flow_key: int | str | tuple = 0) -> Path:
        """Directed edges of the route from endpoint ``src`` to endpoint ``dst``.

        ``flow_key`` (an int, str or tuple of those) selects among equal-cost routes when the
        Router was made with ``ecmp=True`` and is ignored otherwise. Returns ``()`` if
        ``src == dst``. Raises TopologyError for a non-endpoint or an unreachable ``dst``.
        """
        key = (src, dst, flow_key) if self.ecmp else (src, dst)
        try:
            return self._cache[key]
        except KeyError:
            pass
        except TypeError as exc:  # an unhashable argument, e.g. a list as flow_key
            raise TopologyError(
                f"Router.path: src, dst and flow_key must be hashable; flow_key is an int, a "
                f"str or a tuple of those (got {src!r}, {dst!r}, {flow_key!r})"
            ) from exc
        route = self._compute(src, dst, flow_key)
        self._cache[key] = route
        return route

    def path_uncached(self, src: int, dst: int) -> Path:
        """:meth:`path` with the default flow key, worked out without keeping it: for a
        caller that keeps every route it asks for itself (the flow network's table of
        routes by pair), to which the Router's own cache would only add a copy."""
        arith = self._arith
        if (
            arith is not None
            and type(src) is int
            and type(dst) is int
            and src != dst
            and 0 <= src < arith.n
            and 0 <= dst < arith.n
        ):
            if not self.ecmp:
                return arith.route(src, dst, 0)
            return arith.route(src, dst, _ecmp_index(src, dst, 0, arith.count(src, dst)))
        if self.ecmp and type(src) is int and type(dst) is int and src != dst:
            # A source whose search already runs over arrays (checked then), to another
            # endpoint: the lean way; anything else, with every check, the general one.
            search = self._searches.get(self._roots.get(src))  # type: ignore[arg-type]
            if type(search) is _FullSearch and dst in self._endpoints:
                return self._ecmp_full(search, src, dst)
        return self._compute(src, dst, 0, keep=False)

    @property
    def endpoint_ints(self) -> frozenset[int]:
        """The graph's endpoints (``kind == "endpoint"``) that are ints: the ranks'
        nodes, which routes run between."""
        return self._endpoints

    def num_paths(self, src: int, dst: int) -> int:
        """Number of equal-cost shortest routes from endpoint ``src`` to endpoint ``dst``."""
        self._check_endpoint(src, "src")
        self._check_endpoint(dst, "dst")
        if src == dst:
            return 1
        return self._searched(src, dst).count_of(dst)

    def route_metrics(self, src: int, dsts: int | Iterable[int]) -> list[tuple[float, float]]:
        """``(bottleneck bandwidth in bytes/s, latency in s)`` of ``path(src, d)`` for every
        endpoint ``d`` of ``dsts`` (an int n: ``0..n-1``; ``(inf, 0.0)`` for ``d == src``):
        the minimum and the exact sum (``math.fsum``) over the route's edges, as
        ``path_bandwidth_bytes_per_s`` and ``path_latency_s`` give them.

        With ECMP every pair has its own route: a route's part up to a node, for a given
        route index there, is shared by many destinations and worked out once; once the
        source's search runs over arrays, the rest at once (see :meth:`route_metrics_rows`)."""
        out: list[tuple[float, float]] = []
        attrs = self.edge_metrics()
        targets = range(dsts) if isinstance(dsts, int) else dsts
        if not self.ecmp:
            for d in targets:
                route = self.path(src, d)
                out.append(
                    (
                        min((attrs[e][0] for e in route), default=math.inf),
                        math.fsum(attrs[e][1] for e in route),
                    )
                )
            return out
        self._check_endpoint(src, "src")
        memos = self._metric_memos
        targets = list(targets)
        over_arrays = type(src) is int and all(type(d) is int for d in targets)
        for pos, d in enumerate(targets):
            if d == src:
                out.append((math.inf, 0.0))
                continue
            self._check_endpoint(d, "dst")
            search = self._searched(src, d)
            if over_arrays:
                search = self._over_arrays(src, search)
            if over_arrays and type(search) is _FullSearch:
                rest = np.array(targets[pos:], dtype=np.int64)
                got = self._metrics_over_arrays(search, np.full(len(rest), src), rest)
                if got is not None:
                    out.extend(zip(got[0].tolist(), got[1].tolist(), strict=True))
                    break
                over_arrays = False  # one is out of reach: pair by pair, to raise there
            root = search.root
            memo = memos.get(id(search))
            if memo is None or memo[0] is not search:
                memo = memos[id(search)] = (search, {})
            known = memo[1]
            index = _ecmp_index(src, d, 0, search.count_of(d))
            bw, lats = math.inf, []
            v = _attachment(self._leaves, root, d)
            if v is not d:  # one way into a leaf, the same route index
                b, x = attrs[(v, d)]
                bw, lats = b, [x]
            # Walk back to the root or to a part already known, then fill in forward.
            chain = []
            while v != root and (v, index) not in known:
                ps = search.preds_of(v)
                u, j = _pick(search.count_of, ps, index) if len(ps) > 1 else (ps[0], index)
                chain.append((v, index, u))
                v, index = u, j
            part = known[(v, index)] if v != root else (math.inf, ())
            for node, i, u in reversed(chain):
                b, x = attrs[(u, node)]
                part = (b if b < part[0] else part[0], (*part[1], x))
                known[(node, i)] = part
            bw = part[0] if part[0] < bw else bw
            lats.extend(part[1])
            if root != src:  # a leaf's up-link
                b, x = attrs[(src, root)]
                bw = b if b < bw else bw
                lats.append(x)
            out.append((bw, math.fsum(lats)))
        return out

    def route_metrics_rows(self, srcs: Iterable[int], n: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`route_metrics` of every source of ``srcs`` to the endpoints ``0..n-1``:
        two ``(len(srcs), n)`` arrays, bottleneck bandwidths (bytes/s) and latencies (s)
        (inf and 0.0 from a source to itself), the same floats.

        With ECMP, the sources whose routes come from one search over arrays (a big
        fabric's endpoints on one switch) are worked out together, every destination at
        once: each pair's route index from its crc32 as :func:`_ecmp_index` makes it,
        the routes walked back one hop at a time for all pairs as
        :meth:`_FullSearch.walk_back` walks one, the minimum of their edges' bandwidths,
        and ``math.fsum`` of each distinct list of their edges' latencies. Any other
        source (and one with a destination out of reach, to raise as it does) goes
        through :meth:`route_metrics`."""
        srcs = list(srcs)
        bw = np.full((len(srcs), n), np.inf)
        lat = np.zeros((len(srcs), n))
        targets = np.arange(n, dtype=np.int64)
        groups: dict[int, tuple[Any, list[int]]] = {}  # id(search) -> (search, rows)
        for row, s in enumerate(srcs):
            search = None
            if self.ecmp and type(s) is int and s in self._endpoints and n > 1:
                search = self._array_search(s, 1 if s == 0 else 0)
            if search is not None:
                groups.setdefault(id(search), (search, []))[1].append(row)
            else:
                bw[row], lat[row] = self._metrics_one_by_one(s, range(n))
        for search, rows in groups.values():
            m = len(rows)
            src_of = np.repeat(np.array([srcs[r] for r in rows], dtype=np.int64), n)
            got = self._metrics_over_arrays(search, src_of, np.tile(targets, m))
            if got is None:
                for r in rows:
                    bw[r], lat[r] = self._metrics_one_by_one(srcs[r], range(n))
            else:
                bw[rows], lat[rows] = got[0].reshape(m, n), got[1].reshape(m, n)
        return bw, lat

    def route_metrics_pairs(
        self, pairs: Sequence[tuple[int, int]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`route_metrics` of each ``(src, dst)`` endpoint pair of ``pairs``: two
        arrays, bottleneck bandwidths (bytes/s) and latencies (s) (inf and 0.0 where
        ``src == dst``), the same floats. With ECMP, the pairs whose sources' routes come
        from one search over arrays are worked out together (see
        :meth:`route_metrics_rows`); the others source by source."""
        bw = np.full(len(pairs), np.inf)
        lat = np.zeros(len(pairs))
        by_src: dict[int, list[int]] = {}
        for i, (s, _) in enumerate(pairs):
            by_src.setdefault(s, []).append(i)
        groups: dict[int, tuple[Any, list[int]]] = {}  # id(search) -> (search, pair rows)
        for s, rows in by_src.items():
            dsts = [pairs[i][1] for i in rows]
            search = None
            if (
                self.ecmp
                and type(s) is int
                and s in self._endpoints
                and all(type(d) is int for d in dsts)
            ):
                other = next((d for d in dsts if d != s), None)
                search = self._array_search(s, other) if other is not None else None
            if search is not None:
                groups.setdefault(id(search), (search, []))[1].extend(rows)
            else:
                bw[rows], lat[rows] = self._metrics_one_by_one(s, dsts)
        for search, rows in groups.values():
            src_of = np.array([pairs[i][0] for i in rows], dtype=np.int64)
            dst_of = np.array([pairs[i][1] for i in rows], dtype=np.int64)
            got = self._metrics_over_arrays(search, src_of, dst_of)
            if got is None:  # one is out of reach: source by source, to raise there
                for s in dict.fromkeys(src_of.tolist()):
                    mine = [i for i in rows if pairs[i][0] == s]
                    bw[mine], lat[mine] = self._metrics_one_by_one(s, [pairs[i][1] for i in mine])
            else:
                bw[rows], lat[rows] = got
        return bw, lat

    def _array_search(self, src: int, dst: int) -> _FullSearch | None:
        """``src``'s search, run as far as ``dst``, if it runs over arrays; None if it
        runs in Python, or ``dst`` is out of reach (route_metrics raises, for the first
        such destination)."""
        try:
            search = self._searched(src, dst)
        except TopologyError:
            return None
        search = self._over_arrays(src, search)
        return search if type(search) is _FullSearch else None

    def _over_arrays(self, src: Hashable, search: _Search | _FullSearch) -> _Search | _FullSearch:
        """``src``'s search over arrays where the graph is wide: a search that has not
        grown for a destination it had reached already (on the source's own switch) is
        still in Python; the same routes over arrays, as its next destination would have
        made them."""
        if type(search) is _Search and self._wide:
            search = self._full(self._roots[src]) or search
        return search

    def _metrics_one_by_one(self, src: int, dsts: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
        out = self.route_metrics(src, dsts)
        return np.array([b for b, _ in out], dtype=float), np.array(
            [x for _, x in out], dtype=float
        )

    def _metrics_over_arrays(
        self, search: _FullSearch, src_of: np.ndarray, dst_of: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The route metrics of the endpoint pairs ``(src_of[j], dst_of[j])`` (int64
        arrays), whose sources' routes all come from ``search`` (see
        :meth:`route_metrics_rows`): two arrays, bandwidths (bytes/s) and latencies (s);
        None where a destination is no endpoint or out of reach (route_metrics raises
        for those)."""
        core = search.core
        if self._metric_arrays is None or self._metric_arrays[0] is not core:
            self._metric_arrays = (core, self._metric_figures(core))
        edge_bw, edge_lat, attach, leaf_bw, leaf_lat = self._metric_arrays[1]
        if not len(dst_of):
            return np.empty(0), np.empty(0)
        if dst_of.min() < 0 or dst_of.max() >= len(attach):
            return None
        # The distinct sources (endpoints, as the callers check) and each pair's among them
        row_of = np.full(len(attach), -1, dtype=np.int64)
        row_of[src_of] = 0
        distinct = np.flatnonzero(row_of == 0)
        row_of[distinct] = np.arange(len(distinct))
        srcs, src_row = distinct.tolist(), row_of[src_of]
        i = attach[dst_of]
        mine = dst_of == src_of
        dist = search.dist
        if (i[~mine] < 0).any() or (dist[i[~mine]] < 0).any():
            return None
        i[mine] = core.index[search.root]  # (no route: figures set below)
        counts = search.counts_a
        # _ecmp_index(src, d, 0, count): crc32 of the repr of (src, d, 0)
        heads = np.array([zlib.crc32(f"({s}, ".encode()) for s in srcs], dtype=np.int64)[src_row]
        index = _crc32_of_decimals(heads, dst_of, b", 0)") % counts[i]
        hops = _walk_back_many(search, i, index, np.flatnonzero((dist[i] > 0) & ~mine))
        # Each route's figures: its edges', its destination's way in if a leaf, its
        # source's up-link if a leaf; -0.0 (which leaves any sum as it is) elsewhere.
        parts_bw = [np.where(h >= 0, edge_bw[h], np.inf) for h in hops]
        parts_lat = [np.where(h >= 0, edge_lat[h], -0.0) for h in hops]
        way_bw, way_lat = leaf_bw[dst_of], leaf_lat[dst_of]
        leafy = ~np.isnan(way_bw)
        parts_bw.append(np.where(leafy, way_bw, np.inf))
        parts_lat.append(np.where(leafy, way_lat, -0.0))
        root = search.root
        if any(s != root for s in srcs):
            attrs = self.edge_metrics()
            ups = [attrs[(s, root)] if s != root else (math.inf, -0.0) for s in srcs]
            parts_bw.append(np.array([b for b, _ in ups])[src_row])
            parts_lat.append(np.array([x for _, x in ups])[src_row])
        bw = np.minimum.reduce(parts_bw)
        lats = np.ascontiguousarray(np.stack(parts_lat, axis=1))
        # Distinct lists by their bytes (so -0.0 and 0.0 stay apart, as fsum keeps them)
        as_bytes = lats.view(np.dtype((np.void, lats.shape[1] * lats.itemsize))).ravel()
        _, first, which = np.unique(as_bytes, return_index=True, return_inverse=True)
        sums = np.array([math.fsum(row) for row in lats[first].tolist()])
        lat = sums[which.reshape(-1)]
        bw[mine] = math.inf
        lat[mine] = 0.0
        return bw, lat

    def _metric_figures(self, core: _CoreGraph) -> tuple[np.ndarray, ...]:
        """The arrays of ``_metric_arrays`` for ``core``."""
        attrs = self.edge_metrics()
        figures = [attrs[e] for e in core.edges]
        edge_bw = np.array([b for b, _ in figures], dtype=float)
        edge_lat = np.array([x for _, x in figures], dtype=float)
        size = max(self._endpoints, default=-1) + 1
        attach = np.full(size, -1, dtype=np.int64)
        leaf_bw = np.full(size, np.nan)
        leaf_lat = np.full(size, np.nan)
        for d in self._endpoints:
            leaf = self._leaves.get(d)
            # (a leaf is never a search's root: its attachment's search is its own)
            a = leaf[0] if leaf is not None else d
            attach[d] = core.index.get(a, -1)
            if leaf is not None:
                leaf_bw[d], leaf_lat[d] = attrs[(a, d)]
        return edge_bw, edge_lat, attach, leaf_bw, leaf_lat

    def edge_metrics(self) -> dict[Edge, tuple[float, float]]:
        """(bandwidth in bytes/s, latency in s) of every directed edge, read once (shared:
        do not modify)."""
        if self._edge_attrs is None:
            self._edge_attrs = {
                (u, v): (d["bandwidth"], d["latency"]) for u, v, d in self.graph.edges(data=True)
            }
        return self._edge_attrs

    def hierarchical_matrices(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Of a hierarchical graph as its builder made it (see ``_hierarchical_shape``;
        None for any other graph): the bottleneck bandwidth (bytes/s) and latency (s) of
        every endpoint pair's route, as one search per source would give them (inf / 0
        on the diagonal; a two-edge route's latency the sum of two floats, which is
        their ``math.fsum``), without the searches (2 GB at 2,048 endpoints)."""
        rows = self._hierarchical_rows()
        if rows is None:
            return None
        size = self._hier[0]
        n = self.graph.graph["num_endpoints"]
        up, down, group_block = self._hierarchical_figures(1, np.add.outer)
        lat = np.add.outer(up, down)
        for g0 in range(0, n, size):
            lat[g0 : g0 + size, g0 : g0 + size] = group_block(g0)
        np.fill_diagonal(lat, 0.0)
        return rows(0, n), lat

    def _hierarchical_figures(
        self, k: int, outer: Callable[[np.ndarray, np.ndarray], np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, Callable[[int], np.ndarray]]:
        """Figure ``k`` (0: bandwidth, 1: latency) of a hierarchical graph's edges: each
        endpoint's up-link and down-link to the top, and the pairs of the group whose
        endpoints start at ``g0`` (its direct links, or ``outer`` of its links into and
        out of its group switch: ``np.minimum.outer`` for a bottleneck, ``np.add.outer``
        for a latency)."""
        size, direct = self._hier
        n = self.graph.graph["num_endpoints"]
        attrs = self.edge_metrics()
        up = np.array([attrs[(e, "top")][k] for e in range(n)], dtype=float)
        down = np.array([attrs[("top", e)][k] for e in range(n)], dtype=float)

        def group_block(g0: int) -> np.ndarray:
            group = range(g0, g0 + size)
            if direct:
                cells = [[attrs.get((a, b), (np.inf, 0.0))[k] for b in group] for a in group]
                return np.array(cells, dtype=float)
            sw = f"g{g0 // size}"
            into = np.array([attrs[(e, sw)][k] for e in group], dtype=float)
            out_of = np.array([attrs[(sw, e)][k] for e in group], dtype=float)
            return outer(into, out_of)

        return up, down, group_block

    def _hierarchical_rows(self) -> BandwidthRows | None:
        """The bandwidth of :meth:`hierarchical_matrices` a block of rows at a time."""
        if self._hier is None:
            return None
        size = self._hier[0]
        up, down, group_block = self._hierarchical_figures(0, np.minimum.outer)

        def rows(r0: int, r1: int) -> np.ndarray:
            out = np.minimum.outer(up[r0:r1], down)
            for g0 in range(r0 - r0 % size, r1, size):
                lo, hi = max(r0, g0), min(r1, g0 + size)
                out[lo - r0 : hi - r0, g0 : g0 + size] = group_block(g0)[lo - g0 : hi - g0]
            out[np.arange(r1 - r0), np.arange(r0, r1)] = math.inf
            return out

        return rows

    def bandwidth_rows(self) -> BandwidthRows | None:
        """The route bandwidth matrix of :func:`simnet.simulate.route_matrices` (bytes/s,
        inf on the diagonal) a block of rows at a time, from the fabric's closed form: a
        hierarchical network's, a rail-optimised cluster's, a fat-tree's or a dragonfly's
        as its builder made it (what :meth:`hierarchical_matrices` and its kind take,
        and a dragonfly of any latencies); None for any other network, whose matrix
        takes a route per pair. A 16,384-endpoint matrix is 2 GB: its rows can be
        reduced a block at a time."""
        rows = self._hierarchical_rows()
        if rows is not None:
            return rows
        attrs = self.edge_metrics()
        arith = self._arith
        if type(arith) is _RailRoutes:
            rails = self._rails()
            return None if rails is None else rails.bandwidth_rows(attrs)
        if type(arith) is _FatTreeRoutes:
            return arith.bandwidth_rows(attrs, self.ecmp)
        if type(arith) is _DragonflyRoutes:
            return arith.bandwidth_rows(attrs)
        return None

    def rail_matrices(self) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`hierarchical_matrices` of a rail-optimised cluster as its builder made it
        (routes by :class:`_RailRoutes`; with ECMP only where each kind of link has one
        bandwidth; None otherwise): one search per source took 8 s at 1,024 GPUs, the
        square of the GPUs in all."""
        rails = self._rails()
        if rails is None:
            return None
        params = self.graph.graph["params"]
        return rails.matrices(
            self.edge_metrics(), params["nvlink_latency_s"], params["nic_latency_s"]
        )

    def _rails(self) -> _RailRoutes | None:
        """The routes of a rail-optimised cluster as its builder made it, where every
        pair's route has route 0's bottleneck (without ECMP, or with it where each kind
        of link has one bandwidth); None otherwise."""
        rails = self._arith
        if type(rails) is not _RailRoutes:
            return None
        if self.ecmp:
            # A pair's hashed route (PXN or not) has route 0's bottleneck when each kind
            # of link (NVLink up, down; NIC up, down) has one bandwidth.
            attrs = self.edge_metrics()
            kinds = (rails.up_nvl, rails.down_nvl, rails.up_rail, rails.down_rail)
            if any(len({attrs[e][0] for e in links}) > 1 for links in kinds):
                return None
        return rails

    def fat_tree_matrices(self) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`hierarchical_matrices` of a fat-tree as its builder made it (routes by
        :class:`_FatTreeRoutes`; with ECMP only where every layer's links have one
        bandwidth, so that every hashed route has route 0's bottleneck; None otherwise):
        the searches, or each pair's hashed route, took 10 s at 4,096 endpoints."""
        tree = self._arith
        if type(tree) is not _FatTreeRoutes:
            return None
        return tree.matrices(
            self.edge_metrics(), self.graph.graph["params"]["latency_s"], self.ecmp
        )

    def dragonfly_matrices(self) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`hierarchical_matrices` of a dragonfly as its builder made it (its one
        route a pair, by :class:`_DragonflyRoutes`, with or without ECMP; None otherwise):
        the searches took 51 s at 4,096 endpoints."""
        fly = self._arith
        if type(fly) is not _DragonflyRoutes:
            return None
        return fly.matrices(self.edge_metrics())

    @property
    def routes_are_trees(self) -> bool:
        """Whether one source's routes form a tree, so that :meth:`tree` gives them all:
        true without ECMP, but on a torus (its routes go dimension by dimension)."""
        return not self.ecmp and not self._dims

    def tree(self, src: Hashable) -> list[tuple[Hashable, Hashable]]:
        """Every node ``src`` reaches as ``(node, predecessor on the default route)``,
        predecessors first: the routes without ECMP (but a torus's dimension order), all
        at once."""
        search = self._searched(src, src)
        out = search.tree()
        if search.root != src:  # a leaf: its up-link first, and not back to itself
            out = [(search.root, src), *(item for item in out if item[0] != src)]
        return out

    # -- internals ----------------------------------------------------------------------------

    def _check_endpoint(self, node: Hashable, role: str) -> None:
        if type(node) is int and node in self._endpoints:
            return
        if isinstance(node, bool) or node not in self.graph:
            raise TopologyError(
                f"Router.path: {role}={node!r} is not a node of the graph; endpoints are "
                f"0..{len(endpoints(self.graph)) - 1}"
            )
        kind = self.graph.nodes[node].get("kind")
        if kind != "endpoint":
            raise TopologyError(
                f"Router.path: {role}={node!r} is not an endpoint (kind={kind!r}); routes "
                "run between endpoints (ranks)"
            )

    def _searched(self, src: Hashable, dst: Hashable) -> _Search | _FullSearch:
        """The search that gives the routes from ``src``, run as far as ``dst``; raises
        when ``dst`` is out of reach.

        A leaf's search is its attachment's, started at the up-link's latency (shared by
        the leaves of one attachment). A search that has grown wide (many nodes per hop:
        a fat-tree's or a torus's, not a ring's) is replaced by the same search run to
        the end over arrays, far cheaper per node than growing it on in Python."""
        key = self._roots.get(src)
        if key is None:
            leaf = self._leaves.get(src)
            if leaf is None:
                key = (src, 0.0)
            else:
                key = (leaf[0], 0.0 + float(self.graph.edges[src, leaf[0]]["latency"]))
            self._roots[src] = key
        search = self._searches.get(key)
        if search is None:
            search = self._searches[key] = _Search(
                key[0], self._succ, self._key, self._leaves, key[1]
            )
        if type(search) is _Search and self._wide and not search.reach(dst, cached_only=True):
            search = self._full(key) or search  # the graph is wide: no growing in Python
        found = search.reach(dst)
        if type(search) is _Search and search.expanded > _WIDE_NODES and not self._no_arrays:
            layers = search.dist[search.order[search.expanded - 1]]
            if search.expanded >= _WIDE_NODES_PER_HOP * max(layers, 1):
                self._wide = True
                search = self._full(key) or search
        if not found:
            raise TopologyError(
                f"Router.path: no route from endpoint {src!r} to endpoint {dst!r}; the graph "
                "is not strongly connected (check it with topologies.validate)"
            )
        return search

    def _full(self, key: tuple[Hashable, float]) -> _FullSearch | None:
        """The search of ``key`` run to the end over arrays, now kept for it; None when
        its route counts pass int64 (the Python search, with exact integers, goes on)."""
        if self._core is None:
            self._core = _CoreGraph(self._succ, self._key, self._leaves, self._edges)
        group = self._core.twins.get(key[0])
        if group is not None:
            twin = self._twin_searches.get((group, key[1]))
            if twin is not None:
                search = self._searches[key] = twin.twin(key[0])
                return search
        try:
            search = _FullSearch(key[0], self._core, self._leaves, key[1])
        except OverflowError:
            self._wide = False  # counts this large: every search goes on in Python
            self._no_arrays = True
            return None
        self._searches[key] = search
        if group is not None:
            self._twin_searches[(group, key[1])] = search
        return search

    def _ecmp_full(self, search: _FullSearch, src: int, dst: int) -> Path:
        """The default-key ECMP route from ``src`` (whose search is ``search``, run to the
        end over arrays) to another endpoint ``dst``: :meth:`_compute` without its checks
        and caches, for the many routes of a big fabric (the same route)."""
        i = search.core.index.get(_attachment(self._leaves, search.root, dst))
        dist, counts = search.views[0], search.views[1]
        if i is None or dist[i] < 0:
            return self._compute(src, dst, 0, keep=False)  # raises: out of reach
        return self._full_route(search, src, dst, i, _ecmp_index(src, dst, 0, counts[i]))

    def _compute(self, src: Hashable, dst: Hashable, flow_key: Any, keep: bool = True) -> Path:
        self._check_endpoint(src, "src")
        self._check_endpoint(dst, "dst")
        canonical_key = _canonical_flow_key(flow_key) if self.ecmp else None
        if src == dst:
            return ()
        if self._hier is not None and type(src) is int and type(dst) is int:
            return self._hierarchical_route(src, dst)
        if self._arith is not None and type(src) is int and type(dst) is int:
            index = 0
            if self.ecmp:
                index = _ecmp_index(src, dst, canonical_key, self._arith.count(src, dst))
            return self._arith.route(src, dst, index)
        search = self._searched(src, dst)
        if not self.ecmp:
            if self._coord:
                return self._dimension_order(search, src, dst)
            return self._unrank(search, src, dst, 0)
        index = _ecmp_index(src, dst, canonical_key, search.count_of(dst))
        if not keep:
            return self._unrank(search, src, dst, index)
        memo = (src, dst, index)
        route = self._ecmp_paths.get(memo)
        if route is None:
            route = self._ecmp_paths[memo] = self._unrank(search, src, dst, index)
        return route

    def _hierarchical_route(self, src: int, dst: int) -> Path:
        """The route between two endpoints of a hierarchical graph as its builder made
        it, the one a search finds (see ``topologies.hierarchical``): inside a group its
        direct link, or through its group switch (no more latency than through "top", and
        before it in node order); between groups through "top"."""
        size, direct = self._hier  # type: ignore[misc]
        edge = self._edges
        if src // size != dst // size:
            return (edge[(src, "top")], edge[("top", dst)])
        if direct:
            return (edge[(src, dst)],)
        sw = f"g{src // size}"
        return (edge[(src, sw)], edge[(sw, dst)])

    def _walk(self, search: _Search, src: Hashable, dst: Hashable, choose: Any) -> Path:
        """The route from ``src`` back from ``dst``: ``choose(v, preds)`` picks the
        predecessor of every node on the way that has several."""
        preds_of, root, edge_of = search.preds_of, search.root, self._edges
        edges = []
        v = dst
        leaf = self._leaves.get(dst)
        if leaf is not None and dst != root:  # one way into a leaf
            edges.append(edge_of[(leaf[0], dst)])
            v = leaf[0]
        while v != root:
            ps = preds_of(v)
            u = ps[0] if len(ps) == 1 else choose(v, ps)
            edges.append(edge_of[(u, v)])
            v = u
        if root != src:  # a leaf's up-link
            edges.append(edge_of[(src, root)])
        edges.reverse()
        return tuple(edges)

    def _dimension_order(self, search: _Search, src: Hashable, dst: Hashable) -> Path:
        """The shortest route that moves along dimension 0 first, then 1, then 2; along a
        dimension the + way when both ways are as short. Walking back from ``dst`` it
        takes the tight predecessor across the highest dimension; nodes without
        coordinates (a host's rank ports) keep the default order."""
        coord, dims = self._coord, self._dims

        def rank(u: Hashable, v: Hashable) -> tuple[int, int]:
            cu, cv = coord.get(u), coord.get(v)
            if cu is None or cv is None:
                return (-1, 0)
            d = next(i for i in range(len(dims)) if cu[i] != cv[i])
            plus = (cu[d] + 1) % dims[d] == cv[d]
            return (d, 1 if plus else 0)

        return self._walk(search, src, dst, lambda v, ps: max(ps, key=lambda u: rank(u, v)))

    def _unrank(self, search: _Search, src: Hashable, dst: Hashable, index: int) -> Path:
        """The ``index``-th shortest route (0 <= index < its count), walking back from dst;
        routes are ordered by their predecessors' node order, so index 0 is the default."""
        if type(search) is _FullSearch:
            i = search.core.index[_attachment(self._leaves, search.root, dst)]
            return self._full_route(search, src, dst, i, index)
        left = [index]

        def choose(v: Hashable, ps: tuple) -> Hashable:
            u, left[0] = _pick(search.count_of, ps, left[0])
            return u

        return self._walk(search, src, dst, choose)

    def _full_route(
        self, search: _FullSearch, src: Hashable, dst: Hashable, i: int, index: int
    ) -> Path:
        """:meth:`_unrank` over arrays, ``i`` the core number of ``dst``'s attachment
        (``dst`` itself if it is not a leaf)."""
        edge_of = self._edges
        root = search.root
        out: list[Edge] = []
        if search.core.nodes[i] != dst:  # one way into a leaf
            out.append(edge_of[(search.core.nodes[i], dst)])
        search.unrank_edges(i, index, out)
        if root != src:  # a leaf's up-link
            out.append(edge_of[(src, root)])
        out.reverse()
        return tuple(out)


def _walk_back_many(
    search: _FullSearch, i: np.ndarray, index: np.ndarray, rows: np.ndarray
) -> list[np.ndarray]:
    """The routes of ``rows`` (positions in ``i`` and ``index``: each route's node
    number and route index there, both updated in place) walked back to the search's
    root one hop at a time for all of them, as :meth:`_FullSearch.walk_back` walks one:
    ``hops[k]`` holds each route's k-th edge number from its end (-1: shorter)."""
    dist, counts, cu = search.dist, search.counts_a, search.core.u
    start, length, pred_e, uniform = (
        search.pred_start,
        search.pred_len,
        search.pred_e,
        search.uniform,
    )
    hops: list[np.ndarray] = []
    while len(rows):
        at, x = i[rows], index[rows]
        s, k_preds = start[at].astype(np.int64), length[at]
        e = np.empty(len(rows), dtype=np.int64)
        # One predecessor, or all with the same route count: a division picks it.
        even = np.flatnonzero((k_preds == 1) | (uniform[at] != 0))
        if len(even):
            c = counts[cu[pred_e[s[even]]]]
            q = x[even] // c
            e[even] = pred_e[s[even] + q]
            x[even] -= q * c
        odd = np.flatnonzero((k_preds != 1) & (uniform[at] == 0))
        if len(odd):
            # Predecessors in order, each covering its own count of routes.
            so, no, xo = s[odd], k_preds[odd], x[odd]
            chosen = np.full(len(odd), -1, dtype=np.int64)
            for k in range(int(no.max())):
                live = np.flatnonzero((chosen < 0) & (k < no))
                ek = pred_e[so[live] + k].astype(np.int64)
                ck = counts[cu[ek]]
                take = xo[live] < ck
                chosen[live[take]] = ek[take]
                xo[live[~take]] -= ck[~take]
            e[odd] = chosen
            x[odd] = xo
        col = np.full(len(i), -1, dtype=np.int64)
        col[rows] = e
        hops.append(col)
        i[rows] = cu[e]
        index[rows] = x
        rows = rows[dist[i[rows]] > 0]
    return hops


def _crc32_table() -> np.ndarray:
    """zlib's CRC-32 table (reflected polynomial 0xEDB88320), one entry per byte value."""
    table = np.arange(256, dtype=np.int64)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ 0xEDB88320, table >> 1)
    return table


_CRC32_TABLE = _crc32_table()


def _crc32_of_decimals(heads: np.ndarray, values: np.ndarray, tail: bytes) -> np.ndarray:
    """``zlib.crc32(b"%d" % v + tail, h)`` of every v of ``values`` (integers from 0 to
    below 10**18, as endpoint numbers are) and h of ``heads`` (the crc32 of what comes
    before), as int64: the same table-driven steps, one byte position at a time for all
    values together."""
    if len(values) and not 0 <= int(np.min(values)) <= int(np.max(values)) < 10**18:
        raise ValueError("_crc32_of_decimals takes integers from 0 to below 10**18")
    values = np.asarray(values, dtype=np.int64)
    ndigits = np.ones(len(values), dtype=np.int64)
    power = np.ones(len(values), dtype=np.int64)  # 10 ** (ndigits - 1)
    while True:
        more = values >= power * 10
        if not more.any():
            break
        ndigits += more
        power = np.where(more, power * 10, power)
    ends = np.frombuffer(tail, dtype=np.uint8).astype(np.int64)
    state = np.asarray(heads, dtype=np.int64) ^ 0xFFFFFFFF
    rest = values.copy()
    for pos in range(int(ndigits.max(initial=0)) + len(tail)):
        digit = rest // power
        byte = np.where(pos < ndigits, 48 + digit, ends[np.clip(pos - ndigits, 0, len(tail) - 1)])
        stepped = _CRC32_TABLE[(state ^ byte) & 0xFF] ^ (state >> 8)
        state = np.where(pos < ndigits + len(tail), stepped, state)
        rest -= np.where(pos < ndigits, digit * power, 0)
        power = np.where(power > 1, power // 10, power)
    return state ^ 0xFFFFFFFF


def _ecmp_index(src: Hashable, dst: Hashable, canonical_key: Any, count: int) -> int:
    """Which of the ``count`` equal-cost routes a flow of ``(src, dst, key)`` takes: its
    crc32, the same in every process."""
    if type(canonical_key) is int:
        # The bytes of the repr below, formatted directly: 2.5x faster, and most routes
        # (every one a flow network keeps by pair) take key 0.
        return zlib.crc32(b"(%d, %d, %d)" % (int(src), int(dst), canonical_key)) % count
    return zlib.crc32(repr((int(src), int(dst), canonical_key)).encode()) % count


def _pick(count_of: Any, preds: tuple, index: int) -> tuple[Hashable, int]:
    """The predecessor that route ``index`` passes through, taking ``preds`` in order,
    each covering ``count_of(pred)`` routes, and the route's index from there on."""
    for u in preds:
        n = count_of(u)
        if index < n:
            break
        index -= n
    return u, index


def _hierarchical_shape(graph: nx.DiGraph) -> tuple[int, bool] | None:
    """(group size, whether groups are fully connected) of a graph exactly as
    ``topologies.hierarchical`` builds it: its endpoints, links and latencies (through a
    group switch, an intra link's no more than an inter one's), bandwidths aside (a
    degraded link routes as before); None for anything else (a failed link, added
    hosts), which routes by search.
    At 4,096 ranks a search from every endpoint (each has two ways out, so none is
    shared) held 4.8 GB."""
    params = graph.graph.get("params") or {}
    keys = ("group_size", "num_groups", "intra_latency_s", "inter_latency_s")
    if graph.graph.get("name") != "hierarchical" or any(k not in params for k in keys):
        return None
    size, groups = params["group_size"], params["num_groups"]
    intra_lat, inter_lat = params["intra_latency_s"], params["inter_latency_s"]
    direct = params.get("intra") == "direct"
    n = graph.graph.get("num_endpoints")
    if n != size * groups or graph.number_of_nodes() != n + 1 + (0 if direct else groups):
        return None
    expected = 2 * n + (groups * size * (size - 1) if direct else 2 * n)
    if graph.number_of_edges() != expected or (intra_lat > inter_lat and not direct):
        return None
    edges = graph.edges
    for e in range(n):
        g = e // size
        ups = [(e, "top", inter_lat), ("top", e, inter_lat)]
        if direct:
            ups += [(e, m, intra_lat) for m in range(g * size, (g + 1) * size) if m != e]
        else:
            ups += [(e, f"g{g}", intra_lat), (f"g{g}", e, intra_lat)]
        for u, v, lat in ups:
            if (u, v) not in edges or float(edges[u, v]["latency"]) != lat:
                return None
    return size, direct


def _as_built(graph: nx.DiGraph, n: int, latencies: Iterable[tuple[Iterable[Edge], float]]) -> bool:
    """The last checks of a graph whose routes are known by arithmetic: every link of each
    group of ``latencies`` has that group's latency (seconds) as its builder gave it, and
    nodes 0..n-1 are endpoints."""
    lats = graph.edges
    for links, lat in latencies:
        for u, v in links:
            if float(lats[u, v]["latency"]) != lat:
                return False
    return all(graph.nodes[e].get("kind") == "endpoint" for e in range(n))


def _blocks(m: np.ndarray, size: int) -> np.ndarray:
    """``m`` with every entry a ``size`` x ``size`` block (switch pairs to endpoint pairs)."""
    k = m.shape[0]
    out = np.empty((k * size, k * size))
    out.reshape(k, size, k, size)[...] = m[:, None, :, None]  # (a view: out is contiguous)
    return out


BandwidthRows = Callable[[int, int], np.ndarray]
"""``(r0, r1) ->`` rows ``r0..r1-1`` of a route bandwidth matrix (bytes/s; endpoints
``r0..r1-1`` to every endpoint, inf to itself): a fabric's closed form, a block of rows
at a time, so that a big fabric's n x n matrix need not be held."""


def _block_rows(m: np.ndarray, size: int, up: np.ndarray, down: np.ndarray) -> BandwidthRows:
    """:data:`BandwidthRows` of ``min(m[s // size, d // size], up[s], down[d])`` (``m``
    per switch pair, ``up`` and ``down`` per endpoint; bytes/s)."""
    n = len(down)
    of = np.arange(n) // size

    def rows(r0: int, r1: int) -> np.ndarray:
        out = np.empty((r1 - r0, n))
        blocks = out.reshape(r1 - r0, n // size, size)  # (a view: out is contiguous)
        np.minimum(m[of[r0:r1]][:, :, None], up[r0:r1, None, None], out=blocks)
        np.minimum(out, down[None, :], out=out)
        out[np.arange(r1 - r0), np.arange(r0, r1)] = math.inf
        return out

    return rows


class _FatTreeRoutes:
    """The routes of a fat-tree exactly as ``topologies.fat_tree`` builds it (its
    endpoints, links and one latency on every link; bandwidths aside, so a degraded
    link routes as before), known without a search: the route a search unranks for a
    route index, from the fabric's arithmetic. Between pods the ``(k/2)^2`` routes,
    walked back from the destination, take aggregation switch ``agg{q}.j`` (its pod's
    in node order, each covering ``k/2`` routes), then core ``core{j k/2 + m}`` (the
    switch's cores in node order); inside a pod the ``k/2`` routes take an aggregation
    switch in that order; under one edge switch there is one. Built by :meth:`of`,
    None for any other graph (a failed link, added hosts), which routes by search.

    Kept as one edge tuple per directed link, by switch numbers, so a route is a few
    list reads: at 16,384 ranks the searches' unranking cost 2.1 of 17.8 CPU s."""

    __slots__ = ("a2c", "a2e", "agg_order", "c2a", "core_order", "down", "e2a", "half", "n", "up")

    def __init__(self, k: int, edges: dict[Edge, Edge]) -> None:
        half = k // 2
        self.half = half
        self.n = k * half * half  # endpoints
        sw = [[f"edge{p}.{i}" for i in range(half)] for p in range(k)]
        agg = [[f"agg{p}.{j}" for j in range(half)] for p in range(k)]
        core = [f"core{c}" for c in range(half * half)]
        ends = range(k * half * half)
        self.up = [edges[(e, sw[e // (half * half)][e // half % half])] for e in ends]
        self.down = [edges[(sw[e // (half * half)][e // half % half], e)] for e in ends]
        # [pod][edge switch][agg], [pod][agg][edge switch], [pod][agg][core of the agg's],
        # [agg][core of the agg's][pod]: the directed links by switch numbers.
        self.e2a = [[[edges[(sw[p][i], a)] for a in agg[p]] for i in range(half)] for p in range(k)]
        self.a2e = [[[edges[(agg[p][j], s)] for s in sw[p]] for j in range(half)] for p in range(k)]
        mine = [[core[j * half + m] for m in range(half)] for j in range(half)]
        self.a2c = [
            [[edges[(agg[p][j], c)] for c in mine[j]] for j in range(half)] for p in range(k)
        ]
        self.c2a = [
            [[edges[(c, agg[p][j])] for p in range(k)] for c in mine[j]] for j in range(half)
        ]
        # A search lists a node's predecessors in node order (names sort as strings:
        # "agg0.10" before "agg0.2"); the order is the same in every pod.
        self.agg_order = sorted(range(half), key=lambda j: _node_key(agg[0][j]))
        self.core_order = [
            sorted(range(half), key=lambda m, j=j: _node_key(core[j * half + m]))
            for j in range(half)
        ]

    @classmethod
    def of(cls, graph: nx.DiGraph, edges: dict[Edge, Edge]) -> _FatTreeRoutes | None:
        """The routes of ``graph`` if it is a fat-tree as its builder made it, else None."""
        params = graph.graph.get("params") or {}
        if graph.graph.get("name") != "fat_tree" or "k" not in params or "latency_s" not in params:
            return None
        k, lat = params["k"], params["latency_s"]
        if type(k) is not int or k < 2 or k % 2:
            return None
        half = k // 2
        n = k * half * half
        if (
            graph.graph.get("num_endpoints") != n
            or graph.number_of_nodes() != n + k * k + half * half
            or graph.number_of_edges() != 3 * k**3 // 2
        ):
            return None
        try:
            routes = cls(k, edges)
        except KeyError:  # a link the builder makes is missing
            return None
        return routes if _as_built(graph, n, [(edges, lat)]) else None

    def matrices(
        self, attrs: dict[Edge, tuple[float, float]], lat: float, ecmp: bool
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The bottleneck bandwidth (bytes/s; ``attrs``: each edge's bandwidth and latency)
        and latency (s) of every pair's route, inf / 0 on the diagonal: route 0's, or with
        ``ecmp`` each pair's hashed route, which has the same bottleneck when every layer's
        links (edge to aggregation, aggregation to core, and back) have one bandwidth (None
        when they do not: the pairs' own routes decide). Every link has latency ``lat``
        (checked by :meth:`of`), so a route's latency is the ``math.fsum`` of its 2, 4 or
        6 hops' ``lat``. Edge switch ``s`` (pod ``s // (k/2)``) holds endpoints ``s k/2
        ..``: the matrices are blocks of switch pairs."""
        rows = self.bandwidth_rows(attrs, ecmp)
        if rows is None:
            return None
        half = self.half
        pod = np.arange(2 * half * half) // half
        same_pod = pod[:, None] == pod[None, :]
        sw_lat = np.where(same_pod, math.fsum([lat] * 4), math.fsum([lat] * 6))
        np.fill_diagonal(sw_lat, math.fsum([lat] * 2))
        lat_m = _blocks(sw_lat, half)
        np.fill_diagonal(lat_m, 0.0)
        return rows(0, len(lat_m)), lat_m

    def bandwidth_rows(
        self, attrs: dict[Edge, tuple[float, float]], ecmp: bool
    ) -> BandwidthRows | None:
        """The bandwidth of :meth:`matrices` (bytes/s) a block of rows at a time (None
        where it is None)."""
        half = self.half
        switches = 2 * half * half

        def bandwidths(links: Iterable) -> np.ndarray:
            return np.array([attrs[e][0] for e in links], dtype=float)

        e2a = bandwidths(x for pod in self.e2a for sw in pod for x in sw).reshape(-1, half, half)
        a2e = bandwidths(x for pod in self.a2e for ag in pod for x in ag).reshape(-1, half, half)
        a2c = bandwidths(x for pod in self.a2c for ag in pod for x in ag).reshape(-1, half, half)
        c2a = bandwidths(x for ag in self.c2a for c in ag for x in c).reshape(half, half, -1)
        if ecmp and any(layer.min() != layer.max() for layer in (e2a, a2e, a2c, c2a)):
            return None
        j = self.agg_order[0]  # route 0: its aggregation switch and core
        m = self.core_order[j][0]
        rise = e2a[:, :, j].reshape(switches)  # edge switch -> its pod's agg j
        fall = a2e[:, j, :].reshape(switches)  # agg j of the pod -> edge switch
        pod = np.arange(switches) // half
        same_pod = pod[:, None] == pod[None, :]
        sw_bw = np.minimum.outer(np.minimum(rise, a2c[pod, j, m]), np.minimum(fall, c2a[j, m, pod]))
        sw_bw[same_pod] = np.minimum.outer(rise, fall)[same_pod]
        np.fill_diagonal(sw_bw, np.inf)
        return _block_rows(sw_bw, half, bandwidths(self.up), bandwidths(self.down))

    def count(self, src: int, dst: int) -> int:
        """Equal-cost routes from endpoint ``src`` to another endpoint ``dst``."""
        half = self.half
        if src // half == dst // half:
            return 1
        return half if src // (half * half) == dst // (half * half) else half * half

    def route(self, src: int, dst: int, index: int) -> Path:
        """Route ``index`` (0 <= index < :meth:`count`) from ``src`` to another endpoint
        ``dst``, as the search unranks it."""
        half = self.half
        p, i = divmod(src // half, half)
        q, i2 = divmod(dst // half, half)
        if p == q:
            if i == i2:
                return (self.up[src], self.down[dst])
            j = self.agg_order[index]
            return (self.up[src], self.e2a[p][i][j], self.a2e[p][j][i2], self.down[dst])
        j = self.agg_order[index // half]
        m = self.core_order[j][index % half]
        return (
            self.up[src],
            self.e2a[p][i][j],
            self.a2c[p][j][m],
            self.c2a[j][m][q],
            self.a2e[q][j][i2],
            self.down[dst],
        )


class _RailRoutes:
    """The routes of a rail-optimised cluster exactly as ``topologies.rail_optimised``
    builds it (its GPUs, NVLinks and NICs, one latency on every NVLink and one on every
    NIC; bandwidths aside), known without a search. Inside a node a route crosses the
    node's NVSwitch, on one rail the rail's switch; between other GPUs of other nodes two
    routes of four hops tie (each crosses two NVLink and two NIC links, so their
    latencies are equal), and walking back from the destination the search takes the
    receiver's rail switch ``leaf{g}`` before its NVSwitch ``nvl{m}`` (names sort as
    strings): route 0 crosses the sender's NVLink to its node's GPU on the receiver's
    rail and leaves by that rail (NCCL's PXN), route 1 leaves by the sender's rail and
    crosses the receiver's NVLink. Built by :meth:`of`, None for any other graph (a
    failed link, added hosts), which routes by search.

    The searches cost 0.5 ms a route at 4,096 GPUs (the graph's nodes are few, but every
    GPU is a node with two links that a search expands): 72% of a ResNet-152 run's time,
    growing as the square of the GPUs."""

    __slots__ = ("down_nvl", "down_rail", "n", "per", "up_nvl", "up_rail")

    def __init__(self, nodes: int, per: int, edges: dict[Edge, Edge]) -> None:
        n = nodes * per
        self.n = n  # endpoints
        self.per = per
        self.up_nvl = [edges[(e, f"nvl{e // per}")] for e in range(n)]
        self.down_nvl = [edges[(f"nvl{e // per}", e)] for e in range(n)]
        self.up_rail = [edges[(e, f"leaf{e % per}")] for e in range(n)]
        self.down_rail = [edges[(f"leaf{e % per}", e)] for e in range(n)]

    @classmethod
    def of(cls, graph: nx.DiGraph, edges: dict[Edge, Edge]) -> _RailRoutes | None:
        """The routes of ``graph`` if it is a rail-optimised cluster as its builder made
        it, else None."""
        params = graph.graph.get("params") or {}
        if graph.graph.get("name") != "rail_optimised":
            return None
        nodes, per = params.get("num_nodes"), params.get("gpus_per_node")
        nvl_lat, nic_lat = params.get("nvlink_latency_s"), params.get("nic_latency_s")
        if type(nodes) is not int or type(per) is not int or nodes < 1 or per < 1:
            return None
        if nvl_lat is None or nic_lat is None:
            return None
        n = nodes * per
        if (
            graph.graph.get("num_endpoints") != n
            or graph.number_of_nodes() != n + nodes + per
            or graph.number_of_edges() != 4 * n
        ):
            return None
        try:
            routes = cls(nodes, per, edges)
        except KeyError:  # a link the builder makes is missing
            return None
        latencies = [
            (routes.up_nvl, nvl_lat),
            (routes.down_nvl, nvl_lat),
            (routes.up_rail, nic_lat),
            (routes.down_rail, nic_lat),
        ]
        return routes if _as_built(graph, n, latencies) else None

    def matrices(
        self, attrs: dict[Edge, tuple[float, float]], nvl_lat: float, nic_lat: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Route 0's bottleneck bandwidth (bytes/s; ``attrs``: each edge's bandwidth and
        latency) and latency (s) between every pair, inf / 0 on the diagonal: inside a
        node over its NVSwitch, on one rail over its switch, else PXN. Every NVLink edge
        has latency ``nvl_lat`` and every NIC edge ``nic_lat`` (checked by :meth:`of`), so
        a route's latency is ``(a + a) + (b + b)``: the two doublings are exact and the sum
        rounds once, as the ``math.fsum`` of its edges' latencies does."""
        n, per = self.n, self.per
        two_a, two_b = nvl_lat + nvl_lat, nic_lat + nic_lat
        lat = np.full((n, n), two_a + two_b)
        rail = np.arange(n) % per
        same_rail = rail[None, :] == np.arange(per)[:, None]  # [sender's rail, dst]
        for m in range(n // per):  # the rows of node m's GPUs
            rows = slice(m * per, (m + 1) * per)
            lat[rows][same_rail] = two_b
            lat[rows, rows] = two_a
        np.fill_diagonal(lat, 0.0)
        return self.bandwidth_rows(attrs)(0, n), lat

    def bandwidth_rows(self, attrs: dict[Edge, tuple[float, float]]) -> BandwidthRows:
        """The bandwidth of :meth:`matrices` (bytes/s) a block of rows at a time."""
        n, per = self.n, self.per

        def bandwidths(links: list[Edge]) -> np.ndarray:
            return np.fromiter((attrs[e][0] for e in links), dtype=float, count=n)

        up_nvl, down_nvl = bandwidths(self.up_nvl), bandwidths(self.down_nvl)
        up_rail, down_rail = bandwidths(self.up_rail), bandwidths(self.down_rail)
        rail = np.arange(n) % per
        same_rail = rail[None, :] == np.arange(per)[:, None]  # [sender's rail, dst]

        def rows(r0: int, r1: int) -> np.ndarray:
            out = np.empty((r1 - r0, n))
            # Some nodes at a time (about a million cells: a whole matrix's rows would
            # take three more of its size)
            step = max(1, (1 << 20) // (per * n))
            for m in range(r0 // per, -(-r1 // per), step):
                lo, hi = max(r0, m * per), min(r1, (m + step) * per)
                out[lo - r0 : hi - r0] = nodes(lo, hi)
            out[np.arange(r1 - r0), np.arange(r0, r1)] = math.inf
            return out

        def nodes(r0: int, r1: int) -> np.ndarray:
            # The rows of the nodes holding r0..r1-1 (k of them), then those asked.
            m0, m1 = r0 // per, -(-r1 // per)
            k = m1 - m0
            gpus = slice(m0 * per, m1 * per)
            up = up_nvl[gpus].reshape(k, per, 1)
            # Per node and destination: the node's GPU on the destination's rail.
            mid = (np.arange(m0, m1) * per)[:, None] + rail[None, :]
            beyond = np.minimum(np.minimum(down_nvl[mid], up_rail[mid]), down_rail[None, :])
            block = np.minimum(up, beyond[:, None, :])  # [node, its GPU, destination]
            on_rail = np.minimum(up_rail[gpus].reshape(k, per, 1), down_rail[None, None, :])
            np.copyto(block, on_rail, where=same_rail[None, :, :])
            for i, m in enumerate(range(m0, m1)):  # a node's own GPUs: over its NVSwitch
                own = slice(m * per, (m + 1) * per)
                block[i, :, own] = np.minimum.outer(up_nvl[own], down_nvl[own])
            return block.reshape(k * per, n)[r0 - m0 * per : r1 - m0 * per]

        return rows

    def count(self, src: int, dst: int) -> int:
        """Equal-cost routes from endpoint ``src`` to another endpoint ``dst``."""
        per = self.per
        return 1 if src // per == dst // per or src % per == dst % per else 2

    def route(self, src: int, dst: int, index: int) -> Path:
        """Route ``index`` (0 <= index < :meth:`count`) from ``src`` to another endpoint
        ``dst``, as the search unranks it."""
        per = self.per
        if src // per == dst // per:
            return (self.up_nvl[src], self.down_nvl[dst])
        if src % per == dst % per:
            return (self.up_rail[src], self.down_rail[dst])
        if index == 0:
            mid = src - src % per + dst % per  # the sender's node, the receiver's rail
            return (self.up_nvl[src], self.down_nvl[mid], self.up_rail[mid], self.down_rail[dst])
        mid = dst - dst % per + src % per  # the receiver's node, the sender's rail
        return (self.up_rail[src], self.down_rail[mid], self.up_nvl[mid], self.down_nvl[dst])


class _DragonflyRoutes:
    """The routes of a dragonfly exactly as ``topologies.dragonfly`` builds it (its
    endpoints, routers and links; bandwidths and latencies aside), known without a
    search. Every route is the only one with the fewest hops, so latencies do not choose
    it: on one router, through it; in one group, over the two routers' local link;
    between groups, to the source group's gateway router (a local hop unless it is the
    source's router), over the groups' global link (three edges through the two port
    nodes), then to the destination's router (a local hop unless the gateway is it).
    Built by :meth:`of`, None for any other graph (a failed link, added hosts), which
    routes by search.

    The searches cost about 80 us a route at 4,096 endpoints, a third of a ResNet-152
    run's time, and more as the network grows."""

    __slots__ = ("a", "e", "edges", "g", "n", "routers")

    def __init__(self, g: int, a: int, e: int, edges: dict[Edge, Edge]) -> None:
        self.g, self.a, self.e = g, a, e
        self.n = g * a * e  # endpoints
        self.edges = edges
        self.routers = [f"r{i}.{r}" for i in range(g) for r in range(a)]  # by i * a + r

    @classmethod
    def of(cls, graph: nx.DiGraph, edges: dict[Edge, Edge]) -> _DragonflyRoutes | None:
        """The routes of ``graph`` if it is a dragonfly as its builder made it, else None."""
        params = graph.graph.get("params") or {}
        if graph.graph.get("name") != "dragonfly":
            return None
        keys = ("num_groups", "routers_per_group", "endpoints_per_router")
        g, a, e = (params.get(k) for k in keys)
        if any(type(x) is not int or x < 1 for x in (g, a, e)):
            return None
        n = g * a * e
        if (
            graph.graph.get("num_endpoints") != n
            or graph.number_of_nodes() != n + g * a + g * (g - 1)
            or graph.number_of_edges() != 2 * n + g * a * (a - 1) + 3 * g * (g - 1)
        ):
            return None
        routes = cls(g, a, e, edges)
        # Every link the builder makes, so that the counts leave no room for another.
        names = routes.routers
        for x in range(n):
            if (x, names[x // e]) not in edges or (names[x // e], x) not in edges:
                return None
        for i in range(g):
            for r in range(a):
                for r2 in range(a):
                    if r != r2 and (names[i * a + r], names[i * a + r2]) not in edges:
                        return None
            for j in range(g):
                if i != j:
                    out, back = f"gw{i}.{j}", f"gw{j}.{i}"
                    go = names[i * a + dragonfly_gateway(g, a, i, j)]
                    if (go, out) not in edges or (out, back) not in edges or (out, go) not in edges:
                        return None
        return routes if _as_built(graph, n, []) else None

    def matrices(
        self, attrs: dict[Edge, tuple[float, float]]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The bottleneck bandwidth (bytes/s; ``attrs``: each edge's bandwidth and latency)
        and latency (s) of every pair's route, inf / 0 on the diagonal, by router pairs:
        each route is the endpoint's link, its router's route to the other router, the
        other endpoint's link. None unless each kind of edge (endpoint up, endpoint down,
        local, the three of a global link) has one latency, as the builder gives them, so
        that a route's latency depends only on which hops it takes (the ``math.fsum`` of
        them, as a route's is)."""
        g, a, e = self.g, self.a, self.e
        rows, gate, kinds = self._figures(attrs)
        if any(len(k) != 1 for k in kinds):
            return None
        up_lat, down_lat, loc, o1, mid, o2 = (next(iter(k)) for k in kinds)
        r = np.arange(g * a)
        grp = r // a
        same_group = grp[:, None] == grp[None, :]
        go = gate[grp[:, None], grp[None, :]]  # the source group's gateway router
        come = gate[grp[None, :], grp[:, None]]  # the destination group's
        hop_go = (go != r[:, None]).astype(np.int64)  # a local hop to the gateway
        hop_come = (come != r[None, :]).astype(np.int64)  # one from the far gateway
        table = np.array(
            [
                [math.fsum([up_lat, *[loc] * x, o1, mid, o2, *[loc] * y, down_lat]) for y in (0, 1)]
                for x in (0, 1)
            ]
        )
        r_lat = table[hop_go, hop_come]
        r_lat[same_group] = math.fsum([up_lat, loc, down_lat])
        np.fill_diagonal(r_lat, math.fsum([up_lat, down_lat]))
        lat = _blocks(r_lat, e)
        np.fill_diagonal(lat, 0.0)
        return rows(0, len(lat)), lat

    def bandwidth_rows(self, attrs: dict[Edge, tuple[float, float]]) -> BandwidthRows:
        """The bandwidth of :meth:`matrices` (bytes/s) a block of rows at a time, whatever
        the latencies (a route is the one with the fewest hops: they do not choose it)."""
        return self._figures(attrs)[0]

    def _figures(
        self, attrs: dict[Edge, tuple[float, float]]
    ) -> tuple[BandwidthRows, np.ndarray, list[set[float]]]:
        """The route bandwidth's rows, the gateway router of each group towards each other
        (``[i, j]``) and the latencies of each kind of edge (endpoint up, endpoint down,
        local, the three of a global link; ``{0.0}`` for a kind the fabric lacks)."""
        g, a, e, n = self.g, self.a, self.e, self.n
        edges, names = self.edges, self.routers
        nr = g * a
        ups = [attrs[edges[(x, names[x // e])]] for x in range(n)]
        downs = [attrs[edges[(names[x // e], x)]] for x in range(n)]
        local = np.full((nr, nr), np.inf)
        local_lats = set()
        for i in range(g):
            for r in range(i * a, (i + 1) * a):
                for r2 in range(i * a, (i + 1) * a):
                    if r != r2:
                        b, x = attrs[edges[(names[r], names[r2])]]
                        local[r, r2] = b
                        local_lats.add(x)
        gate = np.zeros((g, g), dtype=np.int64)  # [i, j]: group i's router towards j
        glob = np.full((g, g), np.inf)  # [i, j]: the global link's bottleneck, i to j
        outs, mids, ins = set(), set(), set()
        for i in range(g):
            for j in range(g):
                if i == j:
                    continue
                gate[i, j] = i * a + dragonfly_gateway(g, a, i, j)
                out, back = f"gw{i}.{j}", f"gw{j}.{i}"
                come = names[j * a + dragonfly_gateway(g, a, j, i)]
                three = (
                    attrs[edges[(names[gate[i, j]], out)]],
                    attrs[edges[(out, back)]],
                    attrs[edges[(back, come)]],
                )
                glob[i, j] = min(b for b, _ in three)
                outs.add(three[0][1])
                mids.add(three[1][1])
                ins.add(three[2][1])
        kinds = [{x for _, x in ups}, {x for _, x in downs}, local_lats or {0.0}]
        kinds += [outs or {0.0}, mids or {0.0}, ins or {0.0}]
        r = np.arange(nr)
        grp = r // a
        same_group = grp[:, None] == grp[None, :]
        go = gate[grp[:, None], grp[None, :]]  # the source group's gateway router
        come_r = gate[grp[None, :], grp[:, None]]  # the destination group's
        r_bw = np.minimum(
            np.minimum(local[r[:, None], go], glob[grp[:, None], grp[None, :]]),
            local[come_r, r[None, :]],
        )
        r_bw[same_group] = local[same_group]  # (inf from a router to itself)
        up_bw = np.array([b for b, _ in ups])
        down_bw = np.array([b for b, _ in downs])
        return _block_rows(r_bw, e, up_bw, down_bw), gate, kinds

    def count(self, src: int, dst: int) -> int:
        """Equal-cost routes from endpoint ``src`` to another endpoint ``dst``: one."""
        return 1

    def route(self, src: int, dst: int, index: int) -> Path:
        """The route from ``src`` to another endpoint ``dst`` (``index`` 0)."""
        e, a, edges, names = self.e, self.a, self.edges, self.routers
        rs, rd = src // e, dst // e
        here, there = names[rs], names[rd]
        if rs == rd:
            return (edges[(src, here)], edges[(here, dst)])
        i, j = rs // a, rd // a
        if i == j:
            return (edges[(src, here)], edges[(here, there)], edges[(there, dst)])
        out, back = f"gw{i}.{j}", f"gw{j}.{i}"
        go = names[i * a + dragonfly_gateway(self.g, a, i, j)]
        come = names[j * a + dragonfly_gateway(self.g, a, j, i)]
        hops = [edges[(src, here)]]
        if go != here:
            hops.append(edges[(here, go)])
        hops += (edges[(go, out)], edges[(out, back)], edges[(back, come)])
        if come != there:
            hops.append(edges[(come, there)])
        hops.append(edges[(there, dst)])
        return tuple(hops)


def _leaves(graph: nx.DiGraph) -> dict[Hashable, tuple[Hashable, float]]:
    """Nodes whose one neighbour, both ways, is a node with others (an endpoint on a
    switch): leaf -> (that attachment, latency attachment -> leaf in s)."""
    pred, succ = graph.pred, graph.succ
    out = {}
    for v in graph.nodes:
        out_v, in_v = succ[v], pred[v]
        if len(out_v) == 1 and len(in_v) == 1:
            (u,) = out_v
            if u in in_v and len(succ[u]) + len(pred[u]) > 2:
                out[v] = (u, float(in_v[u]["latency"]))
    return out


def _canonical_flow_key(flow_key: Any) -> int | str | tuple:
    """``flow_key`` as plain ints, strs and tuples, whose repr is the same in every process
    (numpy integers become ints); anything else would hash by object address."""
    if type(flow_key) is int:  # the common case, first
        return flow_key
    if isinstance(flow_key, str):
        return flow_key
    if isinstance(flow_key, numbers.Integral) and not isinstance(flow_key, bool):
        return int(flow_key)
    if isinstance(flow_key, tuple):
        return tuple(_canonical_flow_key(part) for part in flow_key)
    raise TopologyError(
        f"Router.path: flow_key must be an int, a str or a tuple of those, for a stable ECMP "
        f"hash (got {type(flow_key).__name__} {flow_key!r})"
    )
