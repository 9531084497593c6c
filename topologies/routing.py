"""Routing on topology graphs, path metrics and validation of the data model.

A route is a tuple of directed edges ``((u0, u1), (u1, u2), ...)`` from endpoint ``src`` to
endpoint ``dst``; the empty tuple when ``src == dst``. See :mod:`topologies.builders` for the
data model (edge ``bandwidth`` in bytes/s, ``latency`` in seconds, per directed edge).
"""

from __future__ import annotations

import math
import numbers
import zlib
from collections.abc import Hashable, Iterable
from typing import Any

import networkx as nx

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

# Two route latencies closer than this (relative, plus an absolute attosecond) are a tie, so
# that summing the same latencies in a different order does not break equal-cost paths apart.
_LATENCY_REL_TOL = 1e-9
_LATENCY_ABS_TOL_S = 1e-18


def _node_key(node: Hashable) -> tuple:
    """Total order on nodes: integer endpoints by number, then other nodes by name."""
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


class _Search:
    """Shortest-path DAG from one source, grown on demand: for every node resolved so far,
    its tight predecessors (sorted by node order) and the number of shortest routes from the
    source.

    The breadth-first search stops as soon as the requested node's layer is final (every
    node one hop closer to the source has been expanded), so routes to near neighbours cost
    a few nodes, not the whole graph; a later request for a farther node resumes it.
    """

    __slots__ = ("best", "cands", "counts", "dist", "expanded", "key", "order", "preds", "succ")

    def __init__(
        self,
        src: Hashable,
        succ: dict[Hashable, list[tuple[Hashable, float]]],
        key: dict[Hashable, tuple],
    ) -> None:
        self.succ = succ
        self.key = key
        self.dist: dict[Hashable, int] = {src: 0}
        self.best: dict[Hashable, float] = {src: 0.0}
        self.cands: dict[Hashable, list[tuple[Hashable, float]]] = {src: []}
        self.order: list[Hashable] = [src]  # discovery order, so sorted by hop count
        self.expanded = 0  # order[:expanded] have had their out-edges followed
        self.preds: dict[Hashable, tuple] = {src: ()}
        self.counts: dict[Hashable, int] = {src: 1}

    def reach(self, dst: Hashable) -> bool:
        """Resolve ``dst`` (and every node as close); False if it is unreachable."""
        if dst in self.counts:
            return True
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
        for v in order[len(preds) :]:
            if dist[v] > final:
                break
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
        return dst in counts

    def all_preds(self) -> dict[Hashable, tuple]:
        """Every reachable node's tight predecessors (the search run to the end), in BFS order."""
        self.reach(object())  # a node that is in no graph: runs the search to its end
        return self.preds


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
    taken only as far as the farthest destination asked for so far;
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
        self._succ: dict[Hashable, list[tuple[Hashable, float]]] = {}
        for u in graph.nodes:
            self._succ[u] = []
        for u, v, data in graph.edges(data=True):
            problem = _edge_attribute_problem(u, v, data)
            if problem:
                raise TopologyError(f"Router: {problem}")
            self._edges[(u, v)] = (u, v)  # one shared tuple per edge, reused by every route
            self._succ[u].append((v, float(data["latency"])))
        self._key = {node: _node_key(node) for node in graph.nodes}
        self._cache: dict[tuple, Path] = {}
        self._searches: dict[Hashable, _Search] = {}
        self._ecmp_paths: dict[tuple[Hashable, Hashable, int], Path] = {}

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

    def num_paths(self, src: int, dst: int) -> int:
        """Number of equal-cost shortest routes from endpoint ``src`` to endpoint ``dst``."""
        self._check_endpoint(src, "src")
        self._check_endpoint(dst, "dst")
        search = self._search(src)
        self._check_reachable(search, src, dst)
        return search.counts[dst]

    # -- internals ----------------------------------------------------------------------------

    def _check_endpoint(self, node: Hashable, role: str) -> None:
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

    def _check_reachable(self, search: _Search, src: Hashable, dst: Hashable) -> None:
        if not search.reach(dst):
            raise TopologyError(
                f"Router.path: no route from endpoint {src!r} to endpoint {dst!r}; the graph "
                "is not strongly connected (check it with topologies.validate)"
            )

    def _search(self, src: Hashable) -> _Search:
        search = self._searches.get(src)
        if search is None:
            search = self._searches[src] = _Search(src, self._succ, self._key)
        return search

    def _compute(self, src: Hashable, dst: Hashable, flow_key: Any) -> Path:
        self._check_endpoint(src, "src")
        self._check_endpoint(dst, "dst")
        canonical_key = _canonical_flow_key(flow_key) if self.ecmp else None
        if src == dst:
            return ()
        search = self._search(src)
        self._check_reachable(search, src, dst)
        if not self.ecmp:
            if self._coord:
                return self._dimension_order(search, src, dst)
            return self._unrank(search, src, dst, 0)
        digest = zlib.crc32(repr((int(src), int(dst), canonical_key)).encode())
        index = digest % search.counts[dst]
        memo = (src, dst, index)
        route = self._ecmp_paths.get(memo)
        if route is None:
            route = self._ecmp_paths[memo] = self._unrank(search, src, dst, index)
        return route

    def _dimension_order(self, search: _Search, src: Hashable, dst: Hashable) -> Path:
        """The shortest route that moves along dimension 0 first, then 1, then 2; along a
        dimension the + way when both ways are as short. Walking back from ``dst`` it
        takes the tight predecessor across the highest dimension; nodes without
        coordinates (a host's rank ports) keep the default order."""
        preds, coord, dims = search.preds, self._coord, self._dims

        def rank(u: Hashable, v: Hashable) -> tuple[int, int]:
            cu, cv = coord.get(u), coord.get(v)
            if cu is None or cv is None:
                return (-1, 0)
            d = next(i for i in range(len(dims)) if cu[i] != cv[i])
            plus = (cu[d] + 1) % dims[d] == cv[d]
            return (d, 1 if plus else 0)

        edges = []
        v = dst
        while v != src:
            ps = preds[v]
            u = ps[0] if len(ps) == 1 else max(ps, key=lambda u, v=v: rank(u, v))
            edges.append(self._edges[(u, v)])
            v = u
        edges.reverse()
        return tuple(edges)

    def _unrank(self, search: _Search, src: Hashable, dst: Hashable, index: int) -> Path:
        """The ``index``-th shortest route (0 <= index < counts[dst]), walking back from dst;
        routes are ordered by their predecessors' node order, so index 0 is the default."""
        preds, counts = search.preds, search.counts
        edges = []
        v = dst
        while v != src:
            for u in preds[v]:
                if index < counts[u]:
                    break
                index -= counts[u]
            edges.append(self._edges[(u, v)])
            v = u
        edges.reverse()
        return tuple(edges)


def _canonical_flow_key(flow_key: Any) -> int | str | tuple:
    """``flow_key`` as plain ints, strs and tuples, whose repr is the same in every process
    (numpy integers become ints); anything else would hash by object address."""
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
