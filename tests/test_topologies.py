"""Tests of topologies: builder invariants (counts by formula, degree histograms, attributes),
routes, ECMP, placement and error messages."""

import ast
import contextlib
import itertools
import math
import pathlib
import random
import zlib
from collections import Counter

import networkx as nx
import numpy as np
import pytest

import topologies
from topologies import (
    Router,
    TopologyError,
    apply_placement,
    build,
    dragonfly,
    endpoints,
    fat_tree,
    hierarchical,
    path_bandwidth_bytes_per_s,
    path_latency_s,
    rail_optimised,
    ring,
    switch,
    torus,
    validate,
)

BW = 12.5e9  # 100 Gb/s in bytes/s
LAT = 1e-6

# One small instance of every builder, exercised by the shared invariant tests.
GRAPHS = {
    "ring-2": lambda: ring(2, BW, LAT),
    "ring-5": lambda: ring(5, BW, LAT),
    "ring-5-uni": lambda: ring(5, BW, LAT, bidirectional=False),
    "switch-1": lambda: switch(1, BW),
    "switch-6": lambda: switch(6, BW, LAT),
    "hier-switch": lambda: hierarchical(3, 4, 300e9, BW, 0.5e-6, 2.5e-6),
    "hier-direct": lambda: hierarchical(3, 4, 300e9, BW, 0.5e-6, 2.5e-6, intra="direct"),
    "hier-1x2": lambda: hierarchical(1, 2, 300e9, BW),
    "fat-tree-2": lambda: fat_tree(2, BW),
    "fat-tree-4": lambda: fat_tree(4, BW, LAT, oversubscription=2.0),
    "torus-4x4": lambda: torus((4, 4), BW, LAT),
    "torus-2x3x4": lambda: torus([2, 3, 4], BW, LAT),
    "rail-2x4": lambda: rail_optimised(2, 4, 300e9, BW, 0.1e-6, LAT),
    "rail-3x1": lambda: rail_optimised(3, 1, 300e9, BW),
    "dragonfly-5x2x2": lambda: dragonfly(5, 2, 2, BW, BW, BW / 2, LAT, LAT, 3 * LAT),
    "dragonfly-1x3x1": lambda: dragonfly(1, 3, 1, BW, BW, BW),
}


@contextlib.contextmanager
def raises_message(expected):
    """Expect a TopologyError whose message contains ``expected`` verbatim."""
    with pytest.raises(TopologyError) as info:
        yield
    assert expected in str(info.value), f"{expected!r} not in {str(info.value)!r}"


def out_degree_histogram(graph, nodes):
    return Counter(graph.out_degree(v) for v in nodes)


def switches(graph):
    return [v for v, kind in graph.nodes(data="kind") if kind == "switch"]


# --------------------------------------------------------------------------------------------
# Data model, for every builder


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_data_model(name):
    graph = GRAPHS[name]()
    assert type(graph) is nx.DiGraph
    n = graph.graph["num_endpoints"]
    assert endpoints(graph) == list(range(n))
    assert all(isinstance(e, int) for e in endpoints(graph))
    assert all(isinstance(s, str) for s in switches(graph))
    assert set(endpoints(graph)) | set(switches(graph)) == set(graph.nodes)
    for u, v, data in graph.edges(data=True):
        assert isinstance(data["bandwidth"], float) and data["bandwidth"] > 0, (u, v)
        assert isinstance(data["latency"], float) and data["latency"] >= 0, (u, v)
    assert nx.number_of_selfloops(graph) == 0
    validate(graph)
    # params rebuild the same graph
    again = build(graph.graph["name"], **graph.graph["params"])
    assert nx.utils.graphs_equal(graph, again)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_links_are_symmetric_unless_unidirectional(name):
    graph = GRAPHS[name]()
    if not graph.graph["params"].get("bidirectional", True):
        return
    for u, v, data in graph.edges(data=True):
        back = dict(graph.edges[v, u])
        if "link" in back:  # the physical link an edge is drawn for, named one way
            back["link"] = back["link"][::-1]
        assert back == data


# --------------------------------------------------------------------------------------------
# Builder invariants


@pytest.mark.parametrize("n", [2, 3, 8])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_ring_counts(n, bidirectional):
    graph = ring(n, BW, LAT, bidirectional=bidirectional)
    assert graph.graph["name"] == "ring"
    assert graph.number_of_nodes() == n
    if bidirectional:
        assert graph.number_of_edges() == (2 if n == 2 else 2 * n)
        assert out_degree_histogram(graph, graph) == {1 if n == 2 else 2: n}
    else:
        assert graph.number_of_edges() == n
        assert set(graph.edges) == {(i, (i + 1) % n) for i in range(n)}


def test_switch_counts():
    graph = switch(6, BW, LAT)
    assert graph.number_of_nodes() == 7
    assert graph.number_of_edges() == 12
    assert graph.nodes["sw"]["kind"] == "switch"
    assert out_degree_histogram(graph, range(6)) == {1: 6}
    assert graph.out_degree("sw") == 6


@pytest.mark.parametrize("intra", ["switch", "direct"])
@pytest.mark.parametrize(("groups", "size"), [(1, 2), (2, 1), (3, 4)])
def test_hierarchical_counts(intra, groups, size):
    graph = hierarchical(groups, size, 300e9, BW, intra=intra)
    n = groups * size
    assert graph.graph["num_endpoints"] == n
    assert graph.out_degree("top") == n
    if intra == "switch":
        assert sorted(switches(graph)) == sorted([f"g{g}" for g in range(groups)] + ["top"])
        assert graph.number_of_edges() == 4 * n
        assert out_degree_histogram(graph, range(n)) == {2: n}
        assert all(graph.out_degree(f"g{g}") == size for g in range(groups))
    else:
        assert switches(graph) == ["top"]
        assert graph.number_of_edges() == 2 * n + groups * size * (size - 1)
        assert out_degree_histogram(graph, range(n)) == {size: n}  # size-1 peers + top


def test_hierarchical_groups_are_group_major():
    graph = hierarchical(3, 4, 300e9, BW)
    for g in range(3):
        assert sorted(graph.predecessors(f"g{g}")) == list(range(4 * g, 4 * g + 4))


def test_hierarchical_attributes():
    graph = hierarchical(2, 2, 300e9, BW, 0.5e-6, 2.5e-6)
    assert graph.edges[0, "g0"] == {"bandwidth": 300e9, "latency": 0.5e-6}
    assert graph.edges["g1", 3] == {"bandwidth": 300e9, "latency": 0.5e-6}
    assert graph.edges[3, "top"] == {"bandwidth": BW, "latency": 2.5e-6}
    assert graph.edges["top", 0] == {"bandwidth": BW, "latency": 2.5e-6}


@pytest.mark.parametrize("k", [2, 4, 6])
def test_fat_tree_counts(k):
    graph = fat_tree(k, BW, LAT)
    n, half = k**3 // 4, k // 2
    assert graph.graph["num_endpoints"] == n
    kinds = Counter(s.rstrip("0123456789.") for s in switches(graph))
    assert kinds == {"core": half * half, "agg": k * half, "edge": k * half}
    assert graph.number_of_edges() == 3 * k**3 // 2
    assert out_degree_histogram(graph, range(n)) == {1: n}
    assert out_degree_histogram(graph, switches(graph)) == {k: 5 * k * k // 4}
    assert out_degree_histogram(graph.reverse(copy=False), graph) == out_degree_histogram(
        graph, graph
    )


def test_fat_tree_oversubscription_divides_edge_agg_links_only():
    graph = fat_tree(4, BW, oversubscription=4.0)
    by_tier = {}
    for u, v, bw in graph.edges(data="bandwidth"):
        tier = tuple(sorted(str(x).rstrip("0123456789.") or "host" for x in (u, v)))
        by_tier.setdefault(tier, set()).add(bw)
    assert by_tier == {
        ("edge", "host"): {BW},
        ("agg", "edge"): {BW / 4},
        ("agg", "core"): {BW},
    }


@pytest.mark.parametrize("dims", [(4, 4), (2, 2), (3, 5), (2, 3, 4), (3, 3, 3)])
def test_torus_counts(dims):
    graph = torus(dims, BW, LAT)
    n = math.prod(dims)
    degree = sum(2 if d > 2 else 1 for d in dims)
    assert graph.number_of_nodes() == n
    assert not switches(graph)
    assert graph.number_of_edges() == n * degree
    assert out_degree_histogram(graph, graph) == {degree: n}


def test_torus_is_row_major():
    graph = torus((2, 3, 4), BW)
    index = {c: i for i, c in enumerate(itertools.product(range(2), range(3), range(4)))}
    expected = set()
    for c in index:
        for d, size in enumerate((2, 3, 4)):
            for step in (1, -1):
                other = list(c)
                other[d] = (c[d] + step) % size
                expected.add((index[c], index[tuple(other)]))
    assert set(graph.edges) == expected


# --------------------------------------------------------------------------------------------
# Routing


def hops(route):
    return len(route)


def nodes_of(route):
    return [route[0][0]] + [v for _, v in route] if route else []


def test_route_is_a_chain_of_graph_edges():
    graph = fat_tree(4, BW, LAT)
    router = Router(graph)
    for src, dst in itertools.product(range(16), repeat=2):
        route = router.path(src, dst)
        if src == dst:
            assert route == ()
            continue
        assert route[0][0] == src and route[-1][1] == dst
        assert all(a[1] == b[0] for a, b in itertools.pairwise(route))
        assert all(graph.has_edge(u, v) for u, v in route)


def test_ring_bidirectional_takes_shorter_way():
    router = Router(ring(6, BW, LAT))
    assert router.path(0, 1) == ((0, 1),)
    assert router.path(0, 5) == ((0, 5),)
    assert router.path(1, 4) == ((1, 2), (2, 3), (3, 4))  # tie: deterministic
    assert nodes_of(router.path(0, 4)) == [0, 5, 4]
    for src, dst in itertools.product(range(6), repeat=2):
        d = abs(src - dst)
        assert hops(router.path(src, dst)) == min(d, 6 - d)


def test_ring_unidirectional_always_forward():
    router = Router(ring(6, BW, LAT, bidirectional=False))
    assert nodes_of(router.path(0, 5)) == [0, 1, 2, 3, 4, 5]
    assert nodes_of(router.path(4, 1)) == [4, 5, 0, 1]
    for src, dst in itertools.product(range(6), repeat=2):
        assert hops(router.path(src, dst)) == (dst - src) % 6


def test_path_latency_and_bandwidth():
    graph = ring(6, BW, LAT)
    router = Router(graph)
    route = router.path(0, 3)
    assert path_latency_s(graph, route) == pytest.approx(3 * LAT)
    assert path_bandwidth_bytes_per_s(graph, route) == BW
    assert path_latency_s(graph, ()) == 0.0
    assert path_bandwidth_bytes_per_s(graph, ()) == math.inf


@pytest.mark.parametrize("ecmp", [False, True])
def test_hierarchical_routes(ecmp):
    # Intra latency below inter latency, as physically: the group switch wins even with ECMP.
    graph = hierarchical(3, 4, 300e9, BW, 0.5e-6, 2.5e-6)
    router = Router(graph, ecmp=ecmp)
    for src, dst in itertools.permutations(range(12), 2):
        for flow_key in range(3):
            route = router.path(src, dst, flow_key)
            if src // 4 == dst // 4:
                assert nodes_of(route) == [src, f"g{src // 4}", dst]
                assert path_bandwidth_bytes_per_s(graph, route) == 300e9
                assert path_latency_s(graph, route) == pytest.approx(1e-6)
            else:
                assert nodes_of(route) == [src, "top", dst]
                assert path_bandwidth_bytes_per_s(graph, route) == BW
                assert path_latency_s(graph, route) == pytest.approx(5e-6)


def test_hierarchical_equal_latencies_use_group_switch():
    graph = hierarchical(2, 4, 300e9, BW)  # both latencies default to 0
    router = Router(graph)
    assert nodes_of(router.path(1, 3)) == [1, "g0", 3]
    assert nodes_of(router.path(5, 6)) == [5, "g1", 6]
    assert nodes_of(router.path(1, 6)) == [1, "top", 6]
    # Documented: with equal latencies the two 2-hop routes are equal-cost for ECMP.
    assert Router(graph, ecmp=True).num_paths(1, 3) == 2


def test_hierarchical_direct_routes():
    graph = hierarchical(2, 4, 300e9, BW, 1e-6, 2.5e-6, intra="direct")
    router = Router(graph)
    assert router.path(0, 3) == ((0, 3),)
    assert nodes_of(router.path(0, 7)) == [0, "top", 7]


def test_switch_routes():
    graph = switch(4, BW, LAT)
    router = Router(graph)
    assert router.path(2, 0) == ((2, "sw"), ("sw", 0))
    assert path_latency_s(graph, router.path(2, 0)) == pytest.approx(2 * LAT)


def test_fat_tree_hops_and_path_counts():
    router = Router(fat_tree(4, BW, LAT))
    # endpoints 0,1 share edge0.0; 2,3 on edge0.1 (same pod); 4.. in other pods
    assert (hops(router.path(0, 1)), router.num_paths(0, 1)) == (2, 1)
    assert (hops(router.path(0, 2)), router.num_paths(0, 2)) == (4, 2)
    assert (hops(router.path(0, 15)), router.num_paths(0, 15)) == (6, 4)


def test_fat_tree_ecmp_spreads_and_is_deterministic():
    graph = fat_tree(4, BW, LAT)
    router = Router(graph, ecmp=True)
    routes = [router.path(0, 15, key) for key in range(32)]
    assert len(set(routes)) == 4  # all (k/2)^2 core paths used
    assert max(Counter(routes).values()) <= 16
    # same answer from a fresh router (no state, no salted hash), and from the cache
    fresh = Router(fat_tree(4, BW, LAT), ecmp=True)
    assert [fresh.path(0, 15, key) for key in range(32)] == routes
    assert [router.path(0, 15, key) for key in range(32)] == routes
    # string / tuple / numpy keys work; numpy ints hash like ints
    assert router.path(0, 15, np.int64(7)) == routes[7]
    assert router.path(0, 15, ("tag", 3)) in set(routes)
    # without ECMP the flow key is ignored
    plain = Router(graph, ecmp=False)
    assert {plain.path(0, 15, key) for key in range(32)} == {plain.path(0, 15)}


def test_ecmp_index_is_the_crc32_of_the_flows_repr():
    """The route a flow takes is crc32 of repr((src, dst, key)) modulo the routes, in
    every process: integer keys (formatted directly, the fast way) give the same bytes."""
    from topologies.routing import _ecmp_index

    for src, dst in ((0, 15), (3, 1), (1023, 2**40)):
        for key in (0, 7, -1, 2**70, -(2**65), "tag", ("tag", 3), True):
            for count in (1, 4, 64, 97):
                want = zlib.crc32(repr((src, dst, key)).encode()) % count
                assert _ecmp_index(src, dst, key, count) == want, (src, dst, key, count)


def test_fat_tree_oversubscribed_bottleneck():
    graph = fat_tree(4, BW, LAT, oversubscription=2.0)
    router = Router(graph)
    assert path_bandwidth_bytes_per_s(graph, router.path(0, 1)) == BW
    assert path_bandwidth_bytes_per_s(graph, router.path(0, 15)) == BW / 2


@pytest.mark.parametrize("dims", [(4, 4), (2, 3, 4)])
def test_torus_hops_are_wraparound_manhattan(dims):
    router = Router(torus(dims, BW, LAT))
    coords = list(itertools.product(*(range(d) for d in dims)))
    for (i, a), (j, b) in itertools.product(enumerate(coords), repeat=2):
        distance = sum(min(abs(x - y), d - abs(x - y)) for x, y, d in zip(a, b, dims, strict=True))
        assert hops(router.path(i, j)) == distance


@pytest.mark.parametrize(
    "make",
    [lambda: fat_tree(4, BW, LAT), lambda: torus((3, 4), BW, LAT), lambda: ring(9, BW, LAT)],
    ids=["fat_tree", "torus", "ring"],
)
def test_router_search_grown_on_demand_gives_the_same_routes_in_any_order(make):
    # The per-source search stops at the requested destination's layer; farthest-first,
    # nearest-first and shuffled request orders must agree, with networkx's path counts.
    graph = make()
    n = graph.graph["num_endpoints"]
    pairs = list(itertools.product(range(n), repeat=2))
    shuffled = pairs[:]
    random.Random(7).shuffle(shuffled)
    by_distance = sorted(pairs, key=lambda p: -nx.shortest_path_length(graph, *p))
    for ecmp in (False, True):
        reference = Router(graph, ecmp=ecmp)
        expected = {p: (reference.path(*p, 5), reference.num_paths(*p)) for p in pairs}
        for order in (shuffled, by_distance):
            router = Router(graph, ecmp=ecmp)
            assert {p: (router.path(*p, 5), router.num_paths(*p)) for p in order} == expected
    for src, dst in pairs:
        if src != dst:
            assert expected[(src, dst)][1] == len(list(nx.all_shortest_paths(graph, src, dst)))


def test_router_prefers_lower_latency_among_equal_hops():
    graph = ring(4, BW, LAT)
    graph.edges[0, 1]["latency"] = 5e-6  # 0->2 via 1 is now slower than via 3
    assert nodes_of(Router(graph).path(0, 2)) == [0, 3, 2]


def test_router_cache_returns_same_object():
    router = Router(torus((4, 4), BW))
    assert router.path(0, 10) is router.path(0, 10)


def test_router_errors():
    router = Router(fat_tree(4, BW))
    with raises_message("src='core0' is not an endpoint"):
        router.path("core0", 1)
    with raises_message("dst=99 is not a node of the graph; endpoints are 0..15"):
        router.path(0, 99)
    with raises_message("flow_key must be an int, a str or a tuple"):
        Router(fat_tree(4, BW), ecmp=True).path(0, 15, 1.5)
    disconnected = nx.union(switch(2, BW), ring(2, BW), rename=("a", "b"))
    disconnected = nx.relabel_nodes(disconnected, {"a0": 0, "a1": 1, "b0": 2, "b1": 3})
    with raises_message("no route from endpoint 0 to endpoint 2"):
        Router(disconnected).path(0, 2)
    missing = ring(3, BW)
    del missing.edges[0, 1]["latency"]
    with raises_message("Router: edge (0, 1) has no 'latency' attribute"):
        Router(missing)


# --------------------------------------------------------------------------------------------
# validate


def test_validate_accepts_user_graph():
    graph = nx.DiGraph()
    graph.add_nodes_from([0, 1], kind="endpoint")
    graph.add_node("x", kind="switch")
    for u, v in [(0, "x"), ("x", 1), (1, 0)]:
        graph.add_edge(u, v, bandwidth=1e9, latency=0.0)
    validate(graph)
    assert Router(graph).path(0, 1) == ((0, "x"), ("x", 1))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda g: g.add_node("s"), "node 's' has kind=None; set the node attribute kind="),
        (
            lambda g: g.add_node(7, kind="endpoint"),
            "the 4 endpoints must be exactly 0..3; missing [3]",
        ),
        (lambda g: g.add_node("e", kind="endpoint"), "endpoint 'e' is not an int"),
        (
            lambda g: g.edges[0, 1].pop("bandwidth"),
            "edge (0, 1) has no 'bandwidth' attribute",
        ),
        (
            lambda g: g.edges[0, 1].update(bandwidth=0.0),
            "edge (0, 1) has bandwidth=0.0; it must be a finite number > 0 in bytes/s",
        ),
        (
            lambda g: g.edges[0, 1].update(latency=-1.0),
            "edge (0, 1) has latency=-1.0; it must be a finite number >= 0 in s",
        ),
        (
            lambda g: g.remove_edges_from([(2, 1), (2, 0)]),
            "no route from endpoint 0 from endpoint(s) [2]",
        ),
        (lambda g: g.graph.update(num_endpoints=5), "num_endpoints'] is 5 but the graph has 3"),
        (lambda g: g.add_edge(0, 0, bandwidth=1.0, latency=0.0), "self-loop on node 0"),
    ],
)
def test_validate_errors(mutate, message):
    graph = ring(3, BW)
    mutate(graph)
    with raises_message(message):
        validate(graph)


def test_validate_rejects_non_digraph():
    with raises_message("expected a networkx.DiGraph"):
        validate(nx.Graph())


# --------------------------------------------------------------------------------------------
# Parameter errors: the message names the parameter and the fix


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ring(1, BW), "ring: num_endpoints must be >= 2 (got 1)"),
        (lambda: ring(2.5, BW), "ring: num_endpoints must be an integer >= 2 (got 2.5)"),
        (lambda: ring(4, 0), "ring: bandwidth_bytes_per_s must be a finite number > 0 in bytes/s"),
        (lambda: ring(4, math.inf), "ring: bandwidth_bytes_per_s must be a finite number > 0"),
        (lambda: ring(4, BW, -1e-6), "ring: latency_s must be a finite number >= 0 in seconds"),
        (lambda: ring(4, BW, math.nan), "ring: latency_s must be a finite number >= 0"),
        (lambda: ring(4, BW, bidirectional="yes"), "ring: bidirectional must be True or False"),
        (lambda: switch(0, BW), "switch: num_endpoints must be >= 1 (got 0)"),
        (lambda: hierarchical(0, 4, BW, BW), "hierarchical: num_groups must be >= 1 (got 0)"),
        (
            lambda: hierarchical(1, 1, BW, BW),
            "hierarchical: num_groups * group_size must be >= 2 endpoints (got 1 * 1)",
        ),
        (
            lambda: hierarchical(2, 2, BW, -BW),
            "hierarchical: inter_bandwidth_bytes_per_s must be a finite number > 0",
        ),
        (
            lambda: hierarchical(2, 2, BW, BW, intra="ring"),
            "hierarchical: intra must be 'switch' or 'direct' (got 'ring')",
        ),
        (
            lambda: hierarchical(2, 2, BW, BW, intra_latency_s=2e-6, inter_latency_s=1e-6),
            "with intra='switch', intra_latency_s (2e-06) must be <= inter_latency_s (1e-06), "
            "otherwise shortest-path routing sends intra-group traffic through 'top'; lower "
            "intra_latency_s or use intra='direct'",
        ),
        (lambda: fat_tree(3, BW), "fat_tree: k must be even (got 3); use e.g. k=4"),
        (lambda: fat_tree(0, BW), "fat_tree: k must be >= 2 (got 0)"),
        (
            lambda: fat_tree(4, BW, oversubscription=0.5),
            "fat_tree: oversubscription must be a finite number >= 1 (got 0.5)",
        ),
        (lambda: torus((4,), BW), "torus: dims must be a sequence of 2 or 3 sizes"),
        (lambda: torus(16, BW), "torus: dims must be a sequence of 2 or 3 sizes"),
        (lambda: torus((4, 1), BW), "torus: dims[1] must be >= 2 (got 1)"),
        (
            lambda: build("mesh"),
            "unknown topology 'mesh'; choose one of dragonfly, fat_tree, hierarchical, rail_",
        ),
        (lambda: build("ring", size=4), "ring: bad parameters"),
    ],
)
def test_parameter_errors(make, message):
    with raises_message(message):
        make()


def test_topology_error_is_value_error():
    assert issubclass(TopologyError, ValueError)


def test_numpy_parameters_are_accepted():
    graph = torus(np.array([2, 3]), np.float32(1e9), np.float64(0.0))
    assert graph.graph["params"]["dims"] == (2, 3)
    assert isinstance(graph.edges[0, 1]["bandwidth"], float)


# --------------------------------------------------------------------------------------------
# Placement


def test_placement_identity_and_explicit():
    graph = ring(4, BW)
    assert apply_placement(4, graph) == [0, 1, 2, 3]
    assert apply_placement(2, graph, None) == [0, 1]
    assert apply_placement(3, graph, [3, np.int64(0), 2]) == [3, 0, 2]


@pytest.mark.parametrize(
    ("num_ranks", "placement", "message"),
    [
        (5, None, "placement: 5 ranks but the ring topology has only 4 endpoints"),
        (0, None, "placement: num_ranks must be an integer >= 1 (got 0)"),
        (2, [0], "placement: has 1 entries but there are 2 ranks"),
        (2, [0, 4], "placement: rank 1 is placed on 4, not an endpoint of the ring topology"),
        (2, [0, -1], "rank 1 is placed on -1, not an endpoint"),
        (3, [1, 2, 1], "placement: ranks 0 and 2 are both placed on endpoint 1"),
        (1, "0", "placement: must be a list of endpoints, one per rank"),
    ],
)
def test_placement_errors(num_ranks, placement, message):
    with raises_message(message):
        apply_placement(num_ranks, ring(4, BW), placement)


def test_package_does_not_import_proxies_or_simnet():
    package = pathlib.Path(topologies.__file__).parent
    imported = set()
    for source in package.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    assert "topologies" in imported  # the walk sees the package's own imports
    assert not imported & {"proxies", "simnet"}


def test_torus_routes_go_dimension_by_dimension_the_short_way():
    g = topologies.torus((4, 4), 1e9)
    r = Router(g)
    # (0,0) -> (1,1): dimension 0 first; (0,3) -> (1,0): then the short way round, +.
    assert r.path(0, 5) == ((0, 4), (4, 5))
    assert r.path(3, 4) == ((3, 7), (7, 4))
    # half way round: the + way
    assert r.path(0, 2) == ((0, 1), (1, 2)) and r.path(0, 8) == ((0, 4), (4, 8))
    g3 = topologies.torus((2, 3, 4), 1e9)
    r3 = Router(g3)
    for src in range(24):
        for dst in range(24):
            dims_moved = []
            for u, v in r3.path(src, dst):
                cu, cv = g3.nodes[u]["coord"], g3.nodes[v]["coord"]
                dims_moved.append(next(i for i in range(3) if cu[i] != cv[i]))
            assert dims_moved == sorted(dims_moved)


def test_a_rank_order_ring_on_a_torus_costs_its_closed_form():
    from simnet.simulate import collective_time

    bw, n = 10e9, 16 << 20
    p = 16
    t = collective_time(topologies.torus((4, 4), bw), "allreduce", "ring", n)
    assert t == pytest.approx(2 * (p - 1) / p * n / bw, rel=1e-9)


def test_fat_tree_spreads_over_its_cores_by_default():
    from simnet.simulate import collective_time

    bw, m = 10e9, 16 << 20
    ft = topologies.fat_tree(4, bw, 1e-6)
    assert Router(ft).ecmp and not Router(ft, ecmp=False).ecmp
    # Direct alltoall, m bytes per peer: each host sends 15 m through its own link; one core
    # switch for all inter-pod traffic would make it 48 m / B.
    spread = collective_time(ft, "alltoall", "direct", m) / (m / bw)
    assert 15 <= spread < 16.1


def test_hierarchical_traffic_inside_a_group_never_leaves_it():
    g = topologies.hierarchical(2, 4, 100e9, 25e9, 1e-6, 1e-6)  # equal latencies
    for ecmp in (False, True):
        r = Router(g, ecmp=ecmp)
        assert not r.ecmp
        for key in range(8):
            assert r.path(0, 3, key) == ((0, "g0"), ("g0", 3))


# -- searches shared by leaves, and searches run over arrays ------------------------------
def _route_by_search(monkeypatch) -> None:
    """Fat-trees routed by search, as any other graph (not by their arithmetic)."""
    from topologies import routing

    monkeypatch.setattr(routing._FatTreeRoutes, "of", classmethod(lambda cls, g, e: None))


def _all_routes(graph, ecmp):
    r = topologies.Router(graph, ecmp=ecmp)
    n = graph.graph["num_endpoints"]
    keys = (0, 1, "x", (3, 4)) if r.ecmp else (0,)
    routes = {(s, d, k): r.path(s, d, k) for s in range(n) for d in range(n) for k in keys}
    counts = {(s, d): r.num_paths(s, d) for s in range(n) for d in range(n)}
    return r, routes, counts


@pytest.mark.parametrize(
    ("name", "graph", "ecmp"),
    [
        ("fat_tree", topologies.fat_tree(4, 1e9, 1e-6), None),
        ("fat_tree_single", topologies.fat_tree(6, 1e9, 0.7e-6, 2.0), False),
        ("torus", topologies.torus([4, 4], 1e9, 1e-6), None),
        ("torus_ecmp", topologies.torus([2, 3, 2], 1e9, 1e-6), True),
        ("rail", topologies.rail_optimised(3, 4, 1e11, 1e10, 0.2e-6, 1e-6), True),
        ("dragonfly", topologies.dragonfly(4, 3, 2, 1e10, 1e10, 5e9, 0.1e-6, 0.2e-6, 1e-6), None),
        ("hierarchical", topologies.hierarchical(3, 4, 1e10, 1e9, 0.3e-6, 1.7e-6), None),
        ("ring", topologies.ring(7, 1e9, 1e-6), None),
    ],
)
def test_array_searches_give_the_python_searches_routes(monkeypatch, name, graph, ecmp):
    from simnet.simulate import route_matrices
    from topologies import routing

    _route_by_search(monkeypatch)

    # Every search grown in Python to its end, then every search run over arrays at once.
    monkeypatch.setattr(routing, "_WIDE_NODES", 10**9)
    _, python_routes, python_counts = _all_routes(graph, ecmp)
    python_matrices = route_matrices(graph, ecmp)
    monkeypatch.setattr(routing, "_WIDE_NODES", -1)
    monkeypatch.setattr(routing, "_WIDE_NODES_PER_HOP", 0)
    r, array_routes, array_counts = _all_routes(graph, ecmp)
    assert any(type(s) is routing._FullSearch for s in r._searches.values())
    assert array_routes == python_routes
    assert array_counts == python_counts
    for python, arrays in zip(python_matrices, route_matrices(graph, ecmp), strict=True):
        assert python.tobytes() == arrays.tobytes()
    # The uncached routes (the flow network's) are path()'s default-key routes, and
    # leave the Router's caches empty.
    fresh = topologies.Router(graph, ecmp=ecmp)
    n = graph.graph["num_endpoints"]
    for s in range(n):
        for d in range(n):
            assert fresh.path_uncached(s, d) == python_routes[(s, d, 0)]
    assert not fresh._cache and not fresh._ecmp_paths


def _search_arrays(search) -> tuple:
    """A search's hop counts, route counts, uniform marks and each node's list of
    predecessor edges (the lists' places in the arrays may differ between searches)."""
    lists = tuple(
        tuple(search.pred_e[s : s + n].tolist())
        for s, n in zip(search.pred_start.tolist(), search.pred_len.tolist(), strict=True)
    )
    return (search.dist.tolist(), search.counts_a.tolist(), search.uniform.tolist(), lists)


@pytest.mark.parametrize(
    "graph",
    [
        topologies.fat_tree(8, 1e9, 1e-6),
        topologies.torus([3, 4], 1e9, 1e-6),
        topologies.dragonfly(4, 3, 2, 1e10, 1e10, 5e9, 0.1e-6, 0.2e-6, 1e-6),
    ],
    ids=["fat_tree", "torus", "dragonfly"],
)
def test_twin_searches_are_the_searches_run_from_each_twin(monkeypatch, graph):
    # Switches with the same neighbours at the same latencies (a fat-tree pod's edge
    # switches) share one array search, swapped: every derived search is the one run
    # from its own root, and the routes are the Python search's.
    from topologies import routing

    _route_by_search(monkeypatch)

    monkeypatch.setattr(routing, "_WIDE_NODES", 10**9)
    _, python_routes, _ = _all_routes(graph, True)
    monkeypatch.setattr(routing, "_WIDE_NODES", -1)
    monkeypatch.setattr(routing, "_WIDE_NODES_PER_HOP", 0)
    made = []
    monkeypatch.setattr(routing._FullSearch, "twin", _counting(routing._FullSearch.twin, made))
    r, array_routes, _ = _all_routes(graph, True)
    assert array_routes == python_routes
    for (root, latency), search in r._searches.items():
        direct = routing._FullSearch(root, r._core, r._leaves, latency)
        assert _search_arrays(search) == _search_arrays(direct)
    if graph.graph["name"] == "fat_tree":
        # k = 8: the 4 edge switches of each of the 8 pods are twins, and so are the 4
        # cores that reach the same aggregation switch of every pod (an aggregation
        # switch has cores of its own); routes start at edge switches: one search run
        # per pod, 3 derived.
        groups = {}
        for node, group in r._core.twins.items():
            groups.setdefault(group, []).append(node)
        assert sorted(len(g) for g in groups.values()) == [4] * 12
        assert len(made) == 8 * 3
    else:
        assert not made  # no two switches share their neighbours


def _counting(fn, calls: list):
    def counted(*args):
        calls.append(args[1])
        return fn(*args)

    return counted


def test_twin_refuses_a_node_that_is_not_a_twin():
    from topologies import routing

    r = topologies.Router(topologies.fat_tree(4, 1e9, 1e-6), ecmp=True)
    search = r._full((r._leaves[0][0], r._leaves[0][1]))
    assert type(search) is routing._FullSearch
    twins = r._core.twins
    other = next(n for n in r._core.nodes if twins.get(n) != twins[search.root])
    with pytest.raises(ValueError, match="is not a twin of"):
        search.twin(other)


def test_array_search_picks_among_equal_and_unequal_predecessors(monkeypatch):
    # Three equal routes from endpoint 0 to 1: two through P (reached from s0 by p1 and
    # by p2: equal counts, picked by a division), one through Q; X's predecessors P and
    # Q carry 2 and 1 routes (picked by a walk). The array search's route for every
    # index is the Python search's.
    from topologies import routing

    g = nx.DiGraph()
    g.add_nodes_from([0, 1], kind="endpoint")
    links = [(0, "s0"), ("s0", "p1"), ("s0", "p2"), ("s0", "q1"), ("p1", "P"), ("p2", "P")]
    links += [("q1", "Q"), ("P", "X"), ("Q", "X"), ("X", 1)]
    for u, v in links:
        g.add_edge(u, v, bandwidth=1e9, latency=1e-6)
        g.add_edge(v, u, bandwidth=1e9, latency=1e-6)
    g.graph["num_endpoints"] = 2
    monkeypatch.setattr(routing, "_WIDE_NODES", 10**9)
    python = topologies.Router(g, ecmp=True)
    p = python._searched(0, 1)
    assert type(p) is routing._Search and p.count_of(1) == 3
    want = [python._unrank(p, 0, 1, i) for i in range(3)]
    monkeypatch.setattr(routing, "_WIDE_NODES", -1)
    monkeypatch.setattr(routing, "_WIDE_NODES_PER_HOP", 0)
    arrays = topologies.Router(g, ecmp=True)
    a = arrays._searched(0, 1)
    assert type(a) is routing._FullSearch
    index = arrays._core.index
    assert a.uniform[index["P"]] and not a.uniform[index["X"]]
    assert [arrays._unrank(a, 0, 1, i) for i in range(3)] == want
    assert {tuple(e[1] for e in route[:-1]) for route in want} == {
        ("s0", "p1", "P", "X"),
        ("s0", "p2", "P", "X"),
        ("s0", "q1", "Q", "X"),
    }


def test_uncached_routes_raise_as_path_does():
    r = topologies.Router(topologies.fat_tree(4, 1e9, 1e-6), ecmp=True)
    r.path_uncached(0, 15)  # its source's search exists from here on
    for src, dst in ((0, 99), (0, "core0"), (99, 0)):
        with pytest.raises(TopologyError) as uncached:
            r.path_uncached(src, dst)
        with pytest.raises(TopologyError) as cached:
            r.path(src, dst)
        assert str(uncached.value) == str(cached.value)
    # Unhashable arguments: path() says so; the uncached route finds no such node.
    with pytest.raises(TopologyError, match=r"src=\[0\] is not a node of the graph"):
        r.path_uncached([0], 1)
    with pytest.raises(TopologyError, match=r"dst=\[1\] is not a node of the graph"):
        r.path_uncached(0, [1])


def test_endpoints_of_a_switch_share_one_search(monkeypatch):
    # k = 4: 16 endpoints on 8 edge switches; routes from the 2 endpoints of a switch
    # come from that switch's search, started at the up-link's latency.
    _route_by_search(monkeypatch)
    g = topologies.fat_tree(4, 1e9, 1e-6)
    r = topologies.Router(g)
    for s in range(16):
        for d in range(16):
            r.path(s, d)
    assert sorted(root for root, _ in r._searches) == sorted(
        f"edge{p}.{i}" for p in range(4) for i in range(2)
    )
    assert {lat for _, lat in r._searches} == {1e-6}
    assert r.path(0, 1) == ((0, "edge0.0"), ("edge0.0", 1))
    assert topologies.path_latency_s(g, r.path(0, 15)) == pytest.approx(6e-6)


def test_route_counts_past_int64_stay_with_python_integers(monkeypatch):
    # Counts at or above the array limit (here 2, so any fork) fall back to the Python
    # search for good; the routes are the same.
    from topologies import routing

    g = topologies.torus([4, 4], 1e9, 1e-6)
    monkeypatch.setattr(routing, "_WIDE_NODES", 10**9)
    _, want, want_counts = _all_routes(g, True)
    monkeypatch.setattr(routing, "_WIDE_NODES", -1)
    monkeypatch.setattr(routing, "_WIDE_NODES_PER_HOP", 0)
    monkeypatch.setattr(routing, "_MAX_ARRAY_COUNT", 2.0)
    r, got, got_counts = _all_routes(g, True)
    assert r._no_arrays and not any(type(s) is routing._FullSearch for s in r._searches.values())
    assert got == want and got_counts == want_counts


@pytest.mark.parametrize(
    ("groups", "size", "intra_lat", "inter_lat", "intra"),
    [
        (4, 3, 1e-6, 2e-6, "switch"),
        (4, 3, 2e-6, 2e-6, "switch"),  # equal latencies: the group switch by node order
        (3, 4, 5e-6, 1e-6, "direct"),  # one intra hop beats two, whatever the latency
        (1, 5, 0.0, 0.0, "switch"),
        (6, 1, 0.0, 1e-6, "switch"),
    ],
)
def test_hierarchical_routes_are_known_without_searches(groups, size, intra_lat, inter_lat, intra):
    g = topologies.hierarchical(groups, size, 100e9, 10e9, intra_lat, inter_lat, intra=intra)
    fast = topologies.Router(g)
    assert fast._hier == (size, intra == "direct")
    searched = topologies.Router(g)
    searched._hier = None
    n = groups * size
    for s in range(n):
        for d in range(n):
            assert fast.path(s, d) == searched.path(s, d), (s, d)
            assert fast.path_uncached(s, d) == searched.path(s, d)
    assert not fast._searches  # none made
    # The route matrices too, to the bit (one search per source, against none).
    from simnet.simulate import route_matrices

    def matrices(router):
        bw, lat = route_matrices(g, router=router)
        return bw.tobytes() + lat.tobytes()

    g.edges[0, "top"]["bandwidth"] = 1e9  # a degraded link routes as before
    fast, searched = topologies.Router(g), topologies.Router(g)
    searched._hier = None
    assert fast.hierarchical_matrices() is not None and searched.hierarchical_matrices() is None
    assert matrices(fast) == matrices(searched)
    assert not fast._searches
    # A failed link (or another shape) routes by search.
    g.remove_edge(0, "top")
    assert topologies.Router(g)._hier is None
    assert topologies.Router(topologies.switch(4, 1e9))._hier is None


@pytest.mark.parametrize(
    ("k", "oversubscription", "latency_s", "ecmp"),
    [
        (2, 1.0, 1e-6, None),
        (4, 1.0, 1e-6, None),
        (6, 2.0, 0.0, None),  # edge links slower, no latency: the same routes
        (8, 1.0, 1e-6, None),  # cores core8..core11 sort as core10, core11, core8, core9
        (8, 1.0, 1e-6, False),
    ],
)
def test_fat_tree_routes_are_known_without_searches(k, oversubscription, latency_s, ecmp):
    # A fat-tree as its builder made it routes by arithmetic: every pair's route, for
    # every flow key, is the one the searches unrank, and no search is made for it.
    g = topologies.fat_tree(k, 10e9, latency_s, oversubscription)
    _routes_are_the_searches(g, ecmp, "_FatTreeRoutes")


def _routes_are_the_searches(g, ecmp, kind):
    """Every pair's route on ``g`` by arithmetic (``kind``), for four flow keys, the
    uncached route and the route count, against the searches'; no search made."""
    fast = topologies.Router(g, ecmp=ecmp)
    assert type(fast._arith).__name__ == kind
    searched = topologies.Router(g, ecmp=ecmp)
    searched._arith = None
    n = g.graph["num_endpoints"]
    keys = (0, 5, "x", (3, 4)) if fast.ecmp else (0,)
    for s in range(n):
        for d in range(n):
            for key in keys:
                assert fast.path(s, d, key) == searched.path(s, d, key), (s, d, key)
            assert fast.path_uncached(s, d) == searched.path(s, d)
            assert fast._arith.count(s, d) == (searched.num_paths(s, d) if s != d else 1)
    assert not fast._searches


def test_fat_tree_route_index_takes_switches_in_node_order():
    # k = 8 (4 hosts an edge switch, 16 a pod): route 9 of the 16 from pod 0 to pod 7
    # takes, walking back from the destination, aggregation switch 9 // 4 = 2 of its pod
    # (agg7.0..agg7.3 sort as numbered), then core 9 % 4 = 1 of that switch's cores in
    # node order (core10, core11, core8, core9): core11. Route 15 to pod 1: agg0.3, and
    # the last of core12..core15.
    r = topologies.Router(topologies.fat_tree(8, 1e9, 1e-6))
    route = r._arith.route(0, 127, 9)
    assert [v for _, v in route] == ["edge0.0", "agg0.2", "core11", "agg7.2", "edge7.3", 127]
    assert (
        r._arith.route(0, 17, 15)
        == (
            (0, "edge0.0"),
            ("edge0.0", "agg0.3"),
            ("agg0.3", "core15"),
            ("core15", "agg1.3"),
            ("agg1.3", "edge1.0"),
            ("edge1.0", 17),
        )
        and r._arith.count(0, 17) == 16
    )
    assert r._arith.route(0, 5, 1) == (
        (0, "edge0.0"),
        ("edge0.0", "agg0.1"),
        ("agg0.1", "edge0.1"),
        ("edge0.1", 5),
    )
    assert r._arith.count(0, 5) == 4 and r._arith.count(0, 3) == 1


def test_fat_tree_routes_by_search_once_changed():
    # A failed link, another latency on one link, or an added host: the searches route.
    for change in (
        lambda g: g.remove_edge("core0", "agg1.0"),
        lambda g: g.edges["core0", "agg1.0"].update(latency=2e-6),
        lambda g: (
            g.add_node(16, kind="endpoint"),
            g.add_edge(16, "edge0.0", bandwidth=1e9, latency=1e-6),
        ),
    ):
        g = topologies.fat_tree(4, 1e9, 1e-6)
        change(g)
        assert topologies.Router(g)._arith is None
    g = topologies.fat_tree(4, 1e9, 1e-6)
    g.edges["core0", "agg1.0"]["bandwidth"] = 1e8  # a degraded link routes as before
    assert topologies.Router(g)._arith is not None


@pytest.mark.parametrize(
    ("nodes", "per", "nvl_lat", "nic_lat", "ecmp"),
    [
        (3, 4, 1e-7, 1e-6, None),
        (2, 12, 0.0, 0.0, None),  # rails leaf10, leaf11 sort before leaf2
        (4, 3, 2e-7, 5e-7, True),  # both routes of a pair, by flow key
        (5, 1, 1e-7, 1e-6, None),  # one GPU a node: every route on the one rail
        (1, 6, 1e-7, 1e-6, True),  # one node: every route over its NVSwitch
    ],
)
def test_rail_optimised_routes_are_known_without_searches(nodes, per, nvl_lat, nic_lat, ecmp):
    # A rail-optimised cluster as its builder made it routes by arithmetic: every pair's
    # route, for every flow key, is the one the searches unrank, and no search is made.
    g = topologies.rail_optimised(nodes, per, 300e9, 25e9, nvl_lat, nic_lat)
    _routes_are_the_searches(g, ecmp, "_RailRoutes")


def test_rail_optimised_routes_by_hand():
    # 3 nodes of 4 GPUs: GPU 1 (node 0, rail 1) to GPU 10 (node 2, rail 2) crosses its
    # NVLink to GPU 2 of its node, then rail 2 (NCCL's PXN); the other route of the tie
    # leaves by rail 1 to GPU 9 and crosses node 2's NVLink.
    r = topologies.Router(topologies.rail_optimised(3, 4, 300e9, 25e9, 1e-7, 1e-6), ecmp=True)
    assert r._arith.route(1, 10, 0) == ((1, "nvl0"), ("nvl0", 2), (2, "leaf2"), ("leaf2", 10))
    assert r._arith.route(1, 10, 1) == ((1, "leaf1"), ("leaf1", 9), (9, "nvl2"), ("nvl2", 10))
    assert r._arith.route(1, 3, 0) == ((1, "nvl0"), ("nvl0", 3))
    assert r._arith.route(1, 9, 0) == ((1, "leaf1"), ("leaf1", 9))
    assert [r._arith.count(1, d) for d in (3, 9, 10)] == [1, 1, 2]


def test_rail_optimised_routes_by_search_once_changed():
    # A failed NIC, another latency on one NVLink, or an added host: the searches route.
    for change in (
        lambda g: g.remove_edge(2, "leaf2"),
        lambda g: g.edges[2, "nvl0"].update(latency=2e-7),
        lambda g: (
            g.add_node(12, kind="endpoint"),
            g.add_edge(12, "nvl0", bandwidth=1e9, latency=1e-7),
        ),
    ):
        g = topologies.rail_optimised(3, 4, 300e9, 25e9, 1e-7, 1e-6)
        change(g)
        assert topologies.Router(g)._arith is None
    g = topologies.rail_optimised(3, 4, 300e9, 25e9, 1e-7, 1e-6)
    g.edges[2, "leaf2"]["bandwidth"] = 1e8  # a degraded link routes as before
    assert topologies.Router(g)._arith is not None
    # ... and its route matrices are worked out without searches (compared pair by pair in
    # test_simnet_perf_equivalence.py), but with ECMP (each pair's hashed route, whose
    # bottleneck the degraded link decides), unless every NIC link has one bandwidth.
    assert topologies.Router(g).rail_matrices() is not None
    assert topologies.Router(g, ecmp=True).rail_matrices() is None
    g.edges[2, "leaf2"]["bandwidth"] = 25e9
    assert topologies.Router(g, ecmp=True).rail_matrices() is not None


@pytest.mark.parametrize(
    ("groups", "routers", "per_router", "ecmp"),
    [(4, 3, 2, None), (5, 2, 1, True), (1, 4, 2, None), (3, 1, 3, None), (2, 12, 1, None)],
)
def test_dragonfly_routes_are_known_without_searches(groups, routers, per_router, ecmp):
    # A dragonfly as its builder made it routes by arithmetic: every pair's route is the
    # one the searches find (the only one with the fewest hops), and no search is made.
    g = topologies.dragonfly(groups, routers, per_router, 25e9, 50e9, 12.5e9, 1e-7, 2e-7, 1e-6)
    _routes_are_the_searches(g, ecmp, "_DragonflyRoutes")


def test_dragonfly_routes_by_hand_and_by_search_once_changed():
    # 3 groups of 2 routers, 2 endpoints each: endpoint 1 (r0.0) to endpoint 9 (r2.0):
    # group 0's port to group 2 is port (2 - 0 - 1) mod 3 = 1, on router 1 % 2 = r0.1;
    # group 2's port to group 0 is port (0 - 2 - 1) mod 3 = 0, on r2.0, the destination's.
    g = topologies.dragonfly(3, 2, 2, 25e9, 50e9, 12.5e9)
    assert topologies.Router(g)._arith.route(1, 9, 0) == (
        (1, "r0.0"), ("r0.0", "r0.1"), ("r0.1", "gw0.2"), ("gw0.2", "gw2.0"), ("gw2.0", "r2.0"),
        ("r2.0", 9),
    )  # fmt: skip
    for change in (
        lambda g: g.remove_edge("gw0.2", "gw2.0"),
        lambda g: g.remove_edge("r1.0", "r1.1"),
        lambda g: (
            g.add_node(12, kind="endpoint"),
            g.add_edge(12, "r0.0", bandwidth=1e9, latency=0),
        ),
    ):
        g = topologies.dragonfly(3, 2, 2, 25e9, 50e9, 12.5e9)
        change(g)
        assert topologies.Router(g)._arith is None
    g = topologies.dragonfly(3, 2, 2, 25e9, 50e9, 12.5e9)
    g.edges["r1.0", "r1.1"]["latency"] = 1e-3  # latencies do not choose among one route
    assert topologies.Router(g)._arith is not None
