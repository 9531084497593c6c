"""Topology builders: pure functions returning a ``networkx.DiGraph``.

Data model (every builder follows it; the simulator and :mod:`topologies.routing` rely on it):

- Endpoint nodes (ranks/GPUs) are the ints ``0..n-1`` with node attribute ``kind="endpoint"``.
  Switch nodes are strings (``"sw"``, ``"g0"``, ``"top"``, ``"core0"``, ``"agg1.0"``,
  ``"edge1.0"``) with ``kind="switch"``. Endpoints are added first, in index order.
- A link is two directed edges, one per direction (only ``ring(bidirectional=False)`` builds
  one-way links). Every edge carries ``bandwidth`` (bytes/s, float > 0) and ``latency``
  (seconds, float >= 0). Latency is **per directed edge, i.e. per hop**: a route's latency is
  the sum over its edges, so a route endpoint -> switch -> endpoint costs ``2 * latency_s``.
- ``G.graph`` holds ``name`` (the builder's name), ``num_endpoints`` and ``params`` (the
  builder's arguments, normalised), so ``build(G.graph["name"], **G.graph["params"])``
  rebuilds the same graph.

Bandwidths are bytes per second (100 Gb/s = 12.5e9 bytes/s); latencies are seconds
(5 us = 5e-6). Bad arguments raise :class:`TopologyError` naming the parameter and the fix.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import networkx as nx

from topologies.errors import TopologyError

__all__ = [
    "BUILDERS",
    "DEFAULT_GROUP_SIZE",
    "build",
    "dragonfly",
    "dragonfly_gateway",
    "fat_tree",
    "hierarchical",
    "rail_optimised",
    "ring",
    "switch",
    "torus",
]

DEFAULT_GROUP_SIZE = 4
"""Endpoints per group of a hierarchical topology when the configuration gives none
(e.g. GPUs per node): the one definition of that default."""


# ---------------------------------------------------------------------------------------------
# Parameter checks (one place for the messages)


def _int_param(topo: str, name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TopologyError(f"{topo}: {name} must be an integer >= {minimum} (got {value!r})")
    if value < minimum:
        raise TopologyError(f"{topo}: {name} must be >= {minimum} (got {value})")
    return int(value)


def _is_real(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Real)


def _bandwidth_param(topo: str, name: str, value: Any) -> float:
    if not _is_real(value) or not math.isfinite(value) or value <= 0:
        raise TopologyError(
            f"{topo}: {name} must be a finite number > 0 in bytes/s (got {value!r}); "
            "e.g. 100 Gb/s is 12.5e9"
        )
    return float(value)


def _latency_param(topo: str, name: str, value: Any) -> float:
    if not _is_real(value) or not math.isfinite(value) or value < 0:
        raise TopologyError(
            f"{topo}: {name} must be a finite number >= 0 in seconds (got {value!r}); "
            "e.g. 5 us is 5e-6"
        )
    return float(value)


# ---------------------------------------------------------------------------------------------
# Graph construction helpers


def _new_graph(name: str, num_endpoints: int, params: dict[str, Any]) -> nx.DiGraph:
    graph = nx.DiGraph(name=name, num_endpoints=num_endpoints, params=params)
    graph.add_nodes_from(range(num_endpoints), kind="endpoint")
    return graph


def _link(
    graph: nx.DiGraph,
    u: Any,
    v: Any,
    bandwidth_bytes_per_s: float,
    latency_s: float,
    *,
    both_ways: bool = True,
) -> None:
    """Add the directed edge u -> v (and v -> u if ``both_ways``) with both attributes."""
    graph.add_edge(u, v, bandwidth=bandwidth_bytes_per_s, latency=latency_s)
    if both_ways:
        graph.add_edge(v, u, bandwidth=bandwidth_bytes_per_s, latency=latency_s)


def _star(
    graph: nx.DiGraph,
    hub: str,
    endpoints: Iterable[int],
    bandwidth_bytes_per_s: float,
    latency_s: float,
) -> None:
    """Add switch ``hub`` and link every endpoint to it, both ways."""
    graph.add_node(hub, kind="switch")
    for e in endpoints:
        _link(graph, e, hub, bandwidth_bytes_per_s, latency_s)


# ---------------------------------------------------------------------------------------------
# Builders


def ring(
    num_endpoints: int,
    bandwidth_bytes_per_s: float,
    latency_s: float = 0.0,
    bidirectional: bool = True,
) -> nx.DiGraph:
    """Ring of endpoints: endpoint ``i`` is linked to ``(i + 1) % num_endpoints``.

    Args:
        num_endpoints: number of endpoints, >= 2.
        bandwidth_bytes_per_s: bandwidth of each directed edge, bytes/s.
        latency_s: latency of each directed edge (per hop), seconds.
        bidirectional: if True every link has both directions (with 2 endpoints that is a
            single pair of edges, not two parallel ones); if False only the edges
            ``i -> (i + 1) % n`` exist and every route goes forward.

    Edges: ``2n`` (bidirectional, n >= 3), ``2`` (n == 2), ``n`` (unidirectional).
    """
    topo = "ring"
    n = _int_param(topo, "num_endpoints", num_endpoints, 2)
    bw = _bandwidth_param(topo, "bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    lat = _latency_param(topo, "latency_s", latency_s)
    if not isinstance(bidirectional, bool):
        raise TopologyError(f"{topo}: bidirectional must be True or False (got {bidirectional!r})")
    graph = _new_graph(
        topo,
        n,
        {
            "num_endpoints": n,
            "bandwidth_bytes_per_s": bw,
            "latency_s": lat,
            "bidirectional": bidirectional,
        },
    )
    for i in range(n):
        _link(graph, i, (i + 1) % n, bw, lat, both_ways=bidirectional)
    return graph


def switch(num_endpoints: int, bandwidth_bytes_per_s: float, latency_s: float = 0.0) -> nx.DiGraph:
    """Star: every endpoint linked to one non-blocking switch ``"sw"`` (full bisection).

    Args:
        num_endpoints: number of endpoints, >= 1.
        bandwidth_bytes_per_s: bandwidth of each directed endpoint<->switch edge, bytes/s.
        latency_s: latency per hop, seconds; an endpoint-to-endpoint route has 2 hops, so its
            latency is ``2 * latency_s``.
    """
    topo = "switch"
    n = _int_param(topo, "num_endpoints", num_endpoints, 1)
    bw = _bandwidth_param(topo, "bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    lat = _latency_param(topo, "latency_s", latency_s)
    graph = _new_graph(topo, n, {"num_endpoints": n, "bandwidth_bytes_per_s": bw, "latency_s": lat})
    _star(graph, "sw", range(n), bw, lat)
    return graph


def hierarchical(
    num_groups: int,
    group_size: int,
    intra_bandwidth_bytes_per_s: float,
    inter_bandwidth_bytes_per_s: float,
    intra_latency_s: float = 0.0,
    inter_latency_s: float = 0.0,
    intra: str = "switch",
) -> nx.DiGraph:
    """Groups of endpoints (e.g. GPUs in a node) with fast intra-group links, under one
    slower inter-group network in which every endpoint has its own uplink (one NIC per GPU).

    Endpoints are numbered group-major: group ``g`` holds
    ``g * group_size .. (g + 1) * group_size - 1``.

    Structure:

    - Intra-group, ``intra="switch"``: a group switch ``f"g{g}"``; each endpoint of the group
      is linked to it by an intra link. ``intra="direct"``: the endpoints of a group are fully
      connected (an intra link between every pair).
    - Inter-group: every endpoint is linked to the single switch ``"top"`` by its own inter
      link (also for a single group, so every hierarchical graph has the same shape).

    Routes under :class:`topologies.routing.Router` (fewest hops, then least latency, then
    node order):

    - inter-group: endpoint -> ``"top"`` -> endpoint, 2 inter hops, latency
      ``2 * inter_latency_s``, bottleneck ``inter_bandwidth_bytes_per_s``;
    - intra-group, ``"direct"``: 1 intra hop, latency ``intra_latency_s``;
    - intra-group, ``"switch"``: endpoint -> ``f"g{g}"`` -> endpoint, 2 intra hops, latency
      ``2 * intra_latency_s``. The path via ``"top"`` has 2 hops too; the router prefers the
      group switch because its latency is not larger (the builder requires
      ``intra_latency_s <= inter_latency_s`` for this reason) and, when the latencies are
      equal, because group switch names (``"g0"``, ``"g1"``, ...) sort before ``"top"``.
      :class:`topologies.routing.Router` never uses ECMP on a hierarchical graph (it
      would spread intra-group flows over the equal-cost route via ``"top"`` when the
      latencies are equal), so a group's own traffic stays on its group switch.

    Args:
        num_groups: number of groups, >= 1.
        group_size: endpoints per group, >= 1 (and at least 2 endpoints in total).
        intra_bandwidth_bytes_per_s: bandwidth of each directed intra edge, bytes/s.
        inter_bandwidth_bytes_per_s: bandwidth of each directed endpoint<->top edge, bytes/s
            (e.g. a 100 Gb/s NIC: 12.5e9).
        intra_latency_s: latency of one intra edge (one hop), seconds. With ``"switch"`` an
            intra-group route crosses two such edges.
        inter_latency_s: latency of one endpoint<->top edge (one hop), seconds. An
            inter-group route crosses two, so to model a 5 us end-to-end network latency
            pass ``inter_latency_s=2.5e-6``.
        intra: ``"switch"`` or ``"direct"``.

    Edges: ``4n`` with ``"switch"``; ``2n + num_groups * s * (s - 1)`` with ``"direct"``
    (``s = group_size``).
    """
    topo = "hierarchical"
    groups = _int_param(topo, "num_groups", num_groups, 1)
    size = _int_param(topo, "group_size", group_size, 1)
    n = groups * size
    if n < 2:
        raise TopologyError(
            f"{topo}: num_groups * group_size must be >= 2 endpoints (got {groups} * {size}); "
            "increase num_groups or group_size"
        )
    intra_bw = _bandwidth_param(topo, "intra_bandwidth_bytes_per_s", intra_bandwidth_bytes_per_s)
    inter_bw = _bandwidth_param(topo, "inter_bandwidth_bytes_per_s", inter_bandwidth_bytes_per_s)
    intra_lat = _latency_param(topo, "intra_latency_s", intra_latency_s)
    inter_lat = _latency_param(topo, "inter_latency_s", inter_latency_s)
    if intra not in ("switch", "direct"):
        raise TopologyError(f"{topo}: intra must be 'switch' or 'direct' (got {intra!r})")
    if intra == "switch" and intra_lat > inter_lat:
        raise TopologyError(
            f"{topo}: with intra='switch', intra_latency_s ({intra_lat}) must be <= "
            f"inter_latency_s ({inter_lat}), otherwise shortest-path routing sends "
            "intra-group traffic through 'top'; lower intra_latency_s or use intra='direct'"
        )
    graph = _new_graph(
        topo,
        n,
        {
            "num_groups": groups,
            "group_size": size,
            "intra_bandwidth_bytes_per_s": intra_bw,
            "inter_bandwidth_bytes_per_s": inter_bw,
            "intra_latency_s": intra_lat,
            "inter_latency_s": inter_lat,
            "intra": intra,
        },
    )
    for g in range(groups):
        members = range(g * size, (g + 1) * size)
        if intra == "switch":
            _star(graph, f"g{g}", members, intra_bw, intra_lat)
        else:
            for a in members:
                for b in members:
                    if a < b:
                        _link(graph, a, b, intra_bw, intra_lat)
    _star(graph, "top", range(n), inter_bw, inter_lat)
    return graph


def fat_tree(
    k: int,
    bandwidth_bytes_per_s: float,
    latency_s: float = 0.0,
    oversubscription: float = 1.0,
) -> nx.DiGraph:
    """Standard k-ary fat-tree (Al-Fares et al. 2008), multi-path.

    ``k`` pods, each with ``k/2`` edge switches ``f"edge{p}.{i}"`` and ``k/2`` aggregation
    switches ``f"agg{p}.{j}"`` (every edge switch linked to every aggregation switch of its
    pod); ``(k/2)^2`` core switches ``f"core{c}"``, core ``c = j * k/2 + m`` linked to
    aggregation switch ``j`` of every pod. ``k^3/4`` endpoints, ``k/2`` per edge switch,
    numbered pod-major: endpoint ``p * (k/2)^2 + i * k/2 + h`` is host ``h`` of edge switch
    ``i`` of pod ``p``. Every switch has degree ``k``.

    Routes: same edge switch 2 hops (1 path); same pod 4 hops (``k/2`` equal-cost paths);
    other pod 6 hops (``(k/2)^2`` paths). Route latency is hops * ``latency_s``.

    Args:
        k: switch radix, an even integer >= 2.
        bandwidth_bytes_per_s: bandwidth of each directed edge, bytes/s.
        latency_s: latency per directed edge (per hop), seconds.
        oversubscription: ratio r >= 1; the edge<->aggregation edges (both directions) get
            ``bandwidth_bytes_per_s / r``, all other edges the full bandwidth.

    Edges: ``3 k^3 / 2`` directed edges (``3 k^3 / 4`` links).
    """
    topo = "fat_tree"
    k_ = _int_param(topo, "k", k, 2)
    if k_ % 2:
        raise TopologyError(f"{topo}: k must be even (got {k_}); use e.g. k=4 (16 endpoints)")
    bw = _bandwidth_param(topo, "bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    lat = _latency_param(topo, "latency_s", latency_s)
    if (
        not _is_real(oversubscription)
        or not math.isfinite(oversubscription)
        or oversubscription < 1
    ):
        raise TopologyError(
            f"{topo}: oversubscription must be a finite number >= 1 (got {oversubscription!r}); "
            "1.0 means full bisection bandwidth"
        )
    ratio = float(oversubscription)
    half = k_ // 2
    n = k_**3 // 4
    graph = _new_graph(
        topo,
        n,
        {"k": k_, "bandwidth_bytes_per_s": bw, "latency_s": lat, "oversubscription": ratio},
    )
    graph.add_nodes_from((f"core{c}" for c in range(half * half)), kind="switch")
    for p in range(k_):
        graph.add_nodes_from((f"agg{p}.{j}" for j in range(half)), kind="switch")
        graph.add_nodes_from((f"edge{p}.{i}" for i in range(half)), kind="switch")
        for i in range(half):
            edge = f"edge{p}.{i}"
            for h in range(half):
                _link(graph, p * half * half + i * half + h, edge, bw, lat)
            for j in range(half):
                _link(graph, edge, f"agg{p}.{j}", bw / ratio, lat)
        for j in range(half):
            for m in range(half):
                _link(graph, f"agg{p}.{j}", f"core{j * half + m}", bw, lat)
    return graph


def torus(
    dims: Sequence[int],
    bandwidth_bytes_per_s: float,
    latency_s: float = 0.0,
) -> nx.DiGraph:
    """2-D or 3-D torus of endpoints (no switches).

    The endpoint at coordinates ``(c0, c1[, c2])`` has index ``ravel_multi_index`` row-major
    over ``dims`` (the last coordinate varies fastest). Each endpoint is linked to its +-1
    neighbour in every dimension, with wraparound; a dimension of size 2 gives one link (not
    two parallel ones). Route hop count = wraparound Manhattan distance. Routes are
    dimension-ordered (:class:`topologies.routing.Router` without ECMP): first along
    dimension 0, then 1, then 2, each the short way round, the + way when both are as short,
    as torus networks route (e.g. Blue Gene, TPU interconnects). Nodes carry ``coord``.

    Args:
        dims: 2 or 3 sizes (any iterable of ints), each >= 2, e.g. ``(4, 4)`` or ``(2, 3, 4)``.
        bandwidth_bytes_per_s: bandwidth of each directed edge, bytes/s.
        latency_s: latency per directed edge (per hop), seconds.

    Edges: ``n * sum(2 if d > 2 else 1 for d in dims)``; every endpoint has that out-degree.
    """
    topo = "torus"
    try:
        sizes = () if isinstance(dims, str | bytes) else tuple(dims)
    except TypeError:
        sizes = ()
    if len(sizes) not in (2, 3):
        raise TopologyError(
            f"{topo}: dims must be a sequence of 2 or 3 sizes, e.g. (4, 4) or (2, 3, 4) "
            f"(got {dims!r})"
        )
    shape = tuple(_int_param(topo, f"dims[{d}]", size, 2) for d, size in enumerate(sizes))
    bw = _bandwidth_param(topo, "bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    lat = _latency_param(topo, "latency_s", latency_s)
    n = math.prod(shape)
    graph = _new_graph(topo, n, {"dims": shape, "bandwidth_bytes_per_s": bw, "latency_s": lat})
    # Coordinates on the nodes: the router's dimension-order routes read them (and they
    # survive topologies.hosts.with_hosts, which copies node attributes).
    for index in range(n):
        graph.nodes[index]["coord"] = tuple(int(c) for c in divmod_all(index, shape))
    # stride[d]: index step for +1 along dimension d (row-major).
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    for index in range(n):
        for size, stride in zip(shape, strides, strict=True):
            coord = (index // stride) % size
            neighbour = index + (((coord + 1) % size) - coord) * stride
            # Linking only the + neighbour in both directions covers the - neighbour too;
            # with size 2 the + and - neighbours coincide and add_edge does not duplicate.
            _link(graph, index, neighbour, bw, lat)
    return graph


def rail_optimised(
    num_nodes: int,
    gpus_per_node: int,
    nvlink_bandwidth_bytes_per_s: float,
    nic_bandwidth_bytes_per_s: float,
    nvlink_latency_s: float = 0.0,
    nic_latency_s: float = 0.0,
) -> nx.DiGraph:
    """GPU nodes on a rail-optimised network (DGX SuperPOD style): every GPU has its own
    NIC, and NIC ``i`` of every node is on rail ``i``.

    Endpoints are GPUs, numbered node-major: GPU ``g`` of node ``m`` is endpoint
    ``m * gpus_per_node + g``. Structure:

    - inside a node, every GPU is linked to the node's NVSwitch ``f"nvl{m}"`` by its
      NVLink (``nvlink_bandwidth_bytes_per_s`` per direction: the GPU's whole NVLink
      bandwidth, e.g. 300e9 on an A100, 450e9 on an H100);
    - every GPU is linked by its NIC to its rail's switch ``f"leaf{g}"`` (a non-blocking
      switch per rail, ``nic_bandwidth_bytes_per_s`` per direction: 200 Gb/s HDR is 25e9).

    Routes (shortest hops, then latency, then node order):

    - same node: GPU -> ``nvl{m}`` -> GPU;
    - same rail, other node: GPU -> ``leaf{g}`` -> GPU, NVLink untouched;
    - other rail, other node: GPU -> ``nvl{m}`` -> GPU ``g'`` of the sending node ->
      ``leaf{g'}`` -> GPU ``g'``: the data crosses NVLink first and leaves through the NIC
      on the *receiver's* rail, as NCCL's PXN (PCI x NVLink) sends do. The other way (own
      rail, then NVLink at the receiver) is as short; rail switches are named ``leaf*``
      so that they sort before the ``nvl*`` switches and win the tie.

    Args:
        num_nodes: nodes, >= 1.
        gpus_per_node: GPUs (and NICs, and rails) per node, >= 1; at least 2 GPUs in all.
        nvlink_bandwidth_bytes_per_s: per GPU and direction, bytes/s.
        nic_bandwidth_bytes_per_s: per NIC and direction, bytes/s.
        nvlink_latency_s: latency of one GPU<->NVSwitch edge, seconds (a route inside a
            node crosses two).
        nic_latency_s: latency of one GPU<->rail switch edge, seconds (two per route).

    Edges: ``4 n`` (``n = num_nodes * gpus_per_node``).
    """
    topo = "rail_optimised"
    nodes = _int_param(topo, "num_nodes", num_nodes, 1)
    per = _int_param(topo, "gpus_per_node", gpus_per_node, 1)
    n = nodes * per
    if n < 2:
        raise TopologyError(
            f"{topo}: num_nodes * gpus_per_node must be >= 2 GPUs (got {nodes} * {per})"
        )
    nvl_bw = _bandwidth_param(topo, "nvlink_bandwidth_bytes_per_s", nvlink_bandwidth_bytes_per_s)
    nic_bw = _bandwidth_param(topo, "nic_bandwidth_bytes_per_s", nic_bandwidth_bytes_per_s)
    nvl_lat = _latency_param(topo, "nvlink_latency_s", nvlink_latency_s)
    nic_lat = _latency_param(topo, "nic_latency_s", nic_latency_s)
    graph = _new_graph(
        topo,
        n,
        {
            "num_nodes": nodes,
            "gpus_per_node": per,
            "nvlink_bandwidth_bytes_per_s": nvl_bw,
            "nic_bandwidth_bytes_per_s": nic_bw,
            "nvlink_latency_s": nvl_lat,
            "nic_latency_s": nic_lat,
        },
    )
    for m in range(nodes):
        _star(graph, f"nvl{m}", range(m * per, (m + 1) * per), nvl_bw, nvl_lat)
    for g in range(per):
        _star(graph, f"leaf{g}", range(g, n, per), nic_bw, nic_lat)
    return graph


def dragonfly_gateway(num_groups: int, routers_per_group: int, src: int, dst: int) -> int:
    """The router (index within group ``src``) holding group ``src``'s global link to
    group ``dst``: port ``(dst - src - 1) mod num_groups`` of the group, ports dealt to
    its routers round-robin (the "consecutive" arrangement)."""
    return ((dst - src - 1) % num_groups) % routers_per_group


def dragonfly(
    num_groups: int,
    routers_per_group: int,
    endpoints_per_router: int,
    endpoint_bandwidth_bytes_per_s: float,
    local_bandwidth_bytes_per_s: float,
    global_bandwidth_bytes_per_s: float,
    endpoint_latency_s: float = 0.0,
    local_latency_s: float = 0.0,
    global_latency_s: float = 0.0,
) -> nx.DiGraph:
    """Dragonfly (Kim et al. 2008): groups of all-to-all connected routers, one global
    link between every pair of groups, minimal routing.

    Router ``r`` of group ``i`` is ``f"r{i}.{r}"``; its endpoints are numbered
    group-major, router-major: ``(i * routers_per_group + r) * endpoints_per_router + e``.
    Within a group every pair of routers has a local link. Groups ``i`` and ``j`` share
    one global link, from router :func:`dragonfly_gateway` ``(i, j)`` of group ``i`` to
    router ``dragonfly_gateway(j, i)`` of group ``j``, so each router carries about
    ``(num_groups - 1) / routers_per_group`` global links.

    A global link is drawn as a chain of three edges through two port nodes,
    ``f"gw{i}.{j}"`` (group i's port towards j) and ``f"gw{j}.{i}"``: all three carry the
    link's bandwidth, the middle one its latency (the outer ones 0), and each names the
    link it is part of in its ``link`` attribute (``(f"gw{i}.{j}", f"gw{j}.{i}")`` one way,
    reversed the other), which a degraded link's what-if scales whole. Because a global link
    counts three hops, the shortest route between groups is the minimal one, through
    exactly one global link: source router -> (local) gateway -> global -> (local) router
    -> endpoint, unique; a route through a third group would take two global links
    (Valiant routing, not modelled).

    Args:
        num_groups: groups, >= 1.
        routers_per_group: routers per group, >= 1.
        endpoints_per_router: endpoints (NICs) per router, >= 1; at least 2 in all.
        endpoint_bandwidth_bytes_per_s: endpoint<->router links, per direction, bytes/s.
        local_bandwidth_bytes_per_s: router<->router links inside a group, bytes/s.
        global_bandwidth_bytes_per_s: links between groups, bytes/s.
        endpoint_latency_s, local_latency_s, global_latency_s: per hop, seconds.

    Edges: ``2 n + g a (a - 1) + 3 g (g - 1)`` (``n`` endpoints, ``g`` groups, ``a``
    routers per group).
    """
    topo = "dragonfly"
    g = _int_param(topo, "num_groups", num_groups, 1)
    a = _int_param(topo, "routers_per_group", routers_per_group, 1)
    e = _int_param(topo, "endpoints_per_router", endpoints_per_router, 1)
    n = g * a * e
    if n < 2:
        raise TopologyError(f"{topo}: the network must have >= 2 endpoints (got {g} * {a} * {e})")
    ep_bw = _bandwidth_param(topo, "endpoint_bandwidth_bytes_per_s", endpoint_bandwidth_bytes_per_s)
    loc_bw = _bandwidth_param(topo, "local_bandwidth_bytes_per_s", local_bandwidth_bytes_per_s)
    glob_bw = _bandwidth_param(topo, "global_bandwidth_bytes_per_s", global_bandwidth_bytes_per_s)
    ep_lat = _latency_param(topo, "endpoint_latency_s", endpoint_latency_s)
    loc_lat = _latency_param(topo, "local_latency_s", local_latency_s)
    glob_lat = _latency_param(topo, "global_latency_s", global_latency_s)
    graph = _new_graph(
        topo,
        n,
        {
            "num_groups": g,
            "routers_per_group": a,
            "endpoints_per_router": e,
            "endpoint_bandwidth_bytes_per_s": ep_bw,
            "local_bandwidth_bytes_per_s": loc_bw,
            "global_bandwidth_bytes_per_s": glob_bw,
            "endpoint_latency_s": ep_lat,
            "local_latency_s": loc_lat,
            "global_latency_s": glob_lat,
        },
    )
    for i in range(g):
        for r in range(a):
            first = (i * a + r) * e
            _star(graph, f"r{i}.{r}", range(first, first + e), ep_bw, ep_lat)
        for r in range(a):
            for r2 in range(r + 1, a):
                _link(graph, f"r{i}.{r}", f"r{i}.{r2}", loc_bw, loc_lat)
    for i in range(g):
        for j in range(i + 1, g):
            out, back = f"gw{i}.{j}", f"gw{j}.{i}"
            graph.add_nodes_from((out, back), kind="switch")
            src = f"r{i}.{dragonfly_gateway(g, a, i, j)}"
            dst = f"r{j}.{dragonfly_gateway(g, a, j, i)}"
            _link(graph, src, out, glob_bw, 0.0)
            _link(graph, out, back, glob_bw, glob_lat)
            _link(graph, back, dst, glob_bw, 0.0)
            # The three edges of each direction are one physical link (see whatif).
            for chain in ((src, out), (out, back), (back, dst)):
                graph.edges[chain]["link"] = (out, back)
                graph.edges[chain[::-1]]["link"] = (back, out)
    return graph


def divmod_all(index: int, shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major coordinates of ``index`` in ``shape`` (the last varies fastest)."""
    out = []
    for size in reversed(shape):
        index, c = divmod(index, size)
        out.append(c)
    return tuple(reversed(out))


BUILDERS: dict[str, Callable[..., nx.DiGraph]] = {
    "ring": ring,
    "switch": switch,
    "hierarchical": hierarchical,
    "fat_tree": fat_tree,
    "torus": torus,
    "rail_optimised": rail_optimised,
    "dragonfly": dragonfly,
}
"""Builders by ``G.graph["name"]``."""


def build(name: str, **params: Any) -> nx.DiGraph:
    """Build the topology ``name`` (a key of :data:`BUILDERS`) with keyword ``params``.

    ``build(G.graph["name"], **G.graph["params"])`` rebuilds ``G``. Unknown names and
    unknown or missing parameters raise :class:`TopologyError`.
    """
    builder = BUILDERS.get(name)
    if builder is None:
        raise TopologyError(
            f"unknown topology {name!r}; choose one of {', '.join(sorted(BUILDERS))}"
        )
    try:
        return builder(**params)
    except TypeError as exc:
        raise TopologyError(f"{name}: bad parameters {sorted(params)}: {exc}") from exc
