"""What-if scenarios on a configured network: degraded and failed links, slow ranks.

The link changes rewrite the topology graph before anything routes on it, so every
route, the max-min sharing and the route matrices see the changed network: a failed
link's traffic takes the next shortest route, and a change that leaves two endpoints
without any route is refused, naming them. The compute changes (per-rank slowdown
factors, random noise with a seed) are applied by the executor; this module only
describes them. Every change is stated in a note for the summary and the results.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Hashable, Sequence

import networkx as nx
import numpy as np

import topologies
from workload.results import counted
from workload.units import bytes_per_s_to_gb_per_s, gb_per_s_to_bytes_per_s

from .config import MIN_GB_PER_S, ConfigError, WhatIfSection

_REROUTE_CHECK_MAX_ENDPOINTS = 512  # counting changed routes costs n^2 routes
# The least bandwidth the configuration takes for a link
MIN_BANDWIDTH_BYTES_PER_S = gb_per_s_to_bytes_per_s(MIN_GB_PER_S)


def gb_per_s(bytes_per_s: float) -> str:
    return f"{bytes_per_s_to_gb_per_s(bytes_per_s):.4g} GB/s"


def _shown(x: Hashable, hosts: bool) -> str:
    """A node as messages name it: with hosts, endpoint h is ``'host<h>'`` (as the
    outputs name it; the what-ifs apply to the topology's endpoints, before the hosts
    are added)."""
    return repr(f"host{x}") if hosts and type(x) is int else repr(x)


def _node(graph: nx.DiGraph, name: int | str, where: str, hosts: bool = False) -> Hashable:
    """The graph node a configuration names (an endpoint's number, a switch's name; with
    hosts, ``host<h>`` too)."""
    if name in graph:
        return name
    if isinstance(name, str) and name.isdigit() and int(name) in graph:
        return int(name)
    host = name[4:] if isinstance(name, str) and name.startswith("host") else ""
    if host.isdigit() and int(host) in graph:
        return int(host)
    switches = sorted(str(n) for n, k in graph.nodes(data="kind") if k == "switch")
    some = ", ".join(switches[:8]) + (", ..." if len(switches) > 8 else "")
    n = graph.graph.get("num_endpoints", 0)
    ends = f"the hosts host0..host{n - 1} (or 0..{n - 1})" if hosts else f"the endpoints 0..{n - 1}"
    raise ConfigError(
        f"{where}: no node {name!r} in the {graph.graph.get('name')} topology; its nodes are "
        f"{ends}" + (f" and the switches {some}" if switches else "")
    )


def _edge(
    graph: nx.DiGraph, link: list, where: str, hosts: bool = False
) -> tuple[Hashable, Hashable]:
    u, v = (_node(graph, x, where, hosts) for x in link)
    if not graph.has_edge(u, v):
        nbrs = ", ".join(_shown(w, hosts) for w in list(graph.successors(u))[:8])
        raise ConfigError(
            f"{where}: there is no link {_shown(u, hosts)} -> {_shown(v, hosts)} "
            f"(from {_shown(u, hosts)}: {nbrs})"
        )
    return u, v


NO_COMPUTE = "the workload computes nothing: stragglers and noise change nothing"
"""Said among the what-ifs when stragglers or noise are set on a workload without compute."""


def apply_links(
    graph: nx.DiGraph,
    whatif: WhatIfSection,
    used: Sequence[Collection[int]] | None = None,
    hosts: bool = False,
    ecmp: bool | None = None,
    names: Sequence[str] | None = None,
) -> tuple[nx.DiGraph, list[str]]:
    """``graph`` with the degraded links' bandwidths scaled and the failed links removed
    (a copy; ``graph`` is unchanged when there is nothing to apply), and one note per
    change. ``used``: the endpoints ranks sit on, in groups that never exchange a message
    (one group; with jobs, one a job, named by ``names``; None: every endpoint); each
    group's endpoints must still reach one another, and others the failures cut off are
    noted, as are groups the failures separate (the graph's ``parts``). Raises ConfigError
    naming an unknown node or link, or the used endpoints a failure separates. ``hosts``:
    the endpoints become hosts (hosts.ranks_per_host), which the notes name as the outputs
    do (``host<h>``); ``ecmp``: the run's routing (``topologies.Router``'s), whose routes
    the count of reroutes compares."""
    if not whatif.degraded_links and not whatif.failed_links:
        return graph, []

    def shown(x: Hashable) -> str:
        return _shown(x, hosts)

    g = graph.copy()
    notes = []
    changed: dict[tuple[Hashable, Hashable], str] = {}  # directed link -> where it changed
    degraded: list[list[tuple[Hashable, Hashable]]] = []  # each change's edges
    # Edges drawn for one physical link (a dragonfly's global link is three), by that link.
    parts: dict[Hashable, list[tuple[Hashable, Hashable]]] = {}
    for a, b, name in g.edges(data="link"):
        if name is not None:
            parts.setdefault(name, []).append((a, b))
    for i, change in enumerate(whatif.degraded_links):
        where = f"whatif.degraded_links[{i}]"
        u, v = _edge(g, change.link, where, hosts)
        dirs = [(u, v)] if change.one_way else [(u, v), (v, u)]
        for a, b in dirs:
            if not g.has_edge(a, b):
                raise ConfigError(
                    f"{where}: the link {shown(b)} -> {shown(a)} is one-way (there is no "
                    f"{shown(a)} -> {shown(b)}); set one_way to change it alone"
                )
        whole = [e for a, b in dirs for e in parts.get(g.edges[a, b].get("link"), [(a, b)])]
        for a, b in whole:
            if (a, b) in changed:
                raise ConfigError(
                    f"{where}: the link {shown(a)} -> {shown(b)} is already changed by "
                    f"{changed[(a, b)]}; give each link once (with one factor)"
                )
            changed[(a, b)] = where
            old = g.edges[a, b]["bandwidth"]
            new = old * change.bandwidth_factor
            if new < MIN_BANDWIDTH_BYTES_PER_S:
                raise ConfigError(
                    f"{where}: {gb_per_s(old)} x {change.bandwidth_factor:g} is below "
                    f"{gb_per_s(MIN_BANDWIDTH_BYTES_PER_S)}, the least bandwidth a link may "
                    "have; to take the link out, list it in whatif.failed_links"
                )
            g.edges[a, b]["bandwidth"] = new
        degraded.append(whole)
        arrow = "->" if change.one_way else "<->"
        edges = len(whole) // len(dirs)
        drawn = f", its {edges} edges" if edges > 1 else ""
        notes.append(
            f"link {shown(u)} {arrow} {shown(v)} at {change.bandwidth_factor:g}x bandwidth "
            f"({gb_per_s(old)} -> {gb_per_s(old * change.bandwidth_factor)}{drawn})"
        )
    removed: list[tuple[Hashable, Hashable]] = []
    removed_edges: list[tuple[Hashable, Hashable, dict]] = []  # with their attributes
    for i, link in enumerate(whatif.failed_links):
        where = f"whatif.failed_links[{i}]"
        u, v = (_node(g, x, where, hosts) for x in link)
        for a, b in ((u, v), (v, u)):
            if (a, b) in changed:
                raise ConfigError(
                    f"{where}: the link {shown(a)} -> {shown(b)} is already changed by "
                    f"{changed[(a, b)]}; give each link once"
                )
        u, v = _edge(g, link, where, hosts)
        changed[(u, v)] = changed[(v, u)] = where
        for a, b in ((u, v), (v, u)):
            if g.has_edge(a, b):
                removed_edges.append((a, b, dict(g.edges[a, b])))
                g.remove_edge(a, b)
        removed.append((u, v))
    g.graph["whatif_degraded"] = degraded
    if removed:
        said = ", ".join(f"{shown(u)} <-> {shown(v)}" for u, v in removed)
        unit = "host" if hosts else "endpoint"
        idle, parts = _check_connected(g, said, used, unit, names)
        notes.append(f"failed: {said}; {_rerouted(graph, g, idle, unit, ecmp, parts)}")
        g.graph["whatif_failed"] = removed_edges
        if idle:
            notes.append(f"{_listed(idle, unit)} cut off by the failures (no rank there)")
            g.graph["cut_off"] = idle  # (no routes to or from them: see route_matrices)
        if len(parts) > 1:
            # (only groups that never exchange a message, jobs, can be apart)
            notes.append(
                f"the failures split the network into {len(parts)} parts, "
                + ", ".join(f"{unit}s {_span(p)}" for p in parts[:4])
                + (", ..." if len(parts) > 4 else "")
                + ": the jobs in each still reach one another, and no route joins two parts"
            )
            g.graph["parts"] = parts  # (no routes between them: see route_matrices)
    return g, notes


def _span(ends: list[int]) -> str:
    """Sorted endpoints as ranges: [0, 1, 2, 3, 6] -> "0..3, 6" (at most 4 ranges shown)."""
    runs: list[list[int]] = []
    for e in ends:
        if runs and e == runs[-1][1] + 1:
            runs[-1][1] = e
        else:
            runs.append([e, e])
    shown = [f"{a}..{b}" if b > a + 1 else (f"{a}, {b}" if b > a else f"{a}") for a, b in runs]
    return ", ".join(shown[:4]) + (", ..." if len(shown) > 4 else "")


def _listed(ends: list[int], unit: str = "endpoint") -> str:
    return f"{unit}(s) {ends[:8]}{'...' if len(ends) > 8 else ''}"


def _check_connected(
    graph: nx.DiGraph,
    what: str,
    used: Sequence[Collection[int]] | None,
    unit: str = "endpoint",
    names: Sequence[str] | None = None,
) -> tuple[list[int], list[list[int]]]:
    """Check that each group of ``used`` endpoints (a job's; None: all endpoints, one
    group) still reach one another; returns the unused endpoints the failures (``what``)
    cut off from every group, and the parts the groups sit in (each part's endpoints,
    those still reaching one another; several where the failures separated groups that
    never exchange a message: jobs). A split of a group is told from its largest set of
    endpoints that still reach one another: every one of its endpoints outside it is
    named, however many pieces the rest fell into; ``names`` name the groups (jobs)."""
    n = graph.graph["num_endpoints"]
    group = {}
    for i, comp in enumerate(nx.strongly_connected_components(graph)):
        group.update((x, i) for x in comp if type(x) is int and x < n)
    groups = [range(n)] if used is None else used
    held: dict[int, None] = {}  # the components holding a group, in the groups' order
    for g_index, members in enumerate(groups):
        ends = sorted(set(members))
        if not ends:
            continue
        sizes: dict[int, int] = {}
        first: dict[int, int] = {}  # component -> its smallest endpoint (ends is sorted)
        for e in ends:
            sizes[group[e]] = sizes.get(group[e], 0) + 1
            first.setdefault(group[e], e)
        # The largest component, the one with the smallest endpoint among equals.
        main = max(sizes, key=lambda c: (sizes[c], -first[c]))
        held[main] = None
        outside = [e for e in ends if group[e] != main]
        if outside:
            whose = f" job {names[g_index]}" if names and used is not None else ""
            _refuse_split(graph, what, used is None, unit, outside, first[main], sizes[main],
                          group, whose)  # fmt: skip
    parts = [[e for e in range(n) if group[e] == c] for c in held]
    if used is None:
        return [], parts
    inside = {e for part in parts for e in part}
    return [e for e in range(n) if e not in inside], parts


def _refuse_split(
    graph: nx.DiGraph,
    what: str,
    everyone: bool,
    unit: str,
    outside: list[int],
    root: int,
    kept: int,
    group: dict[int, int],
    whose: str,
) -> None:
    """Raise the ConfigError of a group of used endpoints that the failures split:
    ``outside`` its endpoints beyond its largest part, ``root`` that part's smallest
    endpoint and ``kept`` its size; ``group`` each endpoint's strongly connected part;
    ``whose`` names the group's job (" job b", or "")."""
    ranks = "" if everyone else " with ranks"
    units = (f"{unit}{ranks}", f"{unit}s{ranks}")
    reach = nx.descendants(graph, root) | {root}
    back = nx.ancestors(graph, root) | {root}
    unreached = [e for e in outside if e not in reach]
    unreaching = [e for e in outside if e not in back]
    if unreached == unreaching == outside:
        parts = len({group[e] for e in outside})
        apart = f" (in {parts} parts)" if parts > 1 else ""
        lost = [
            f"{_listed(outside, unit)}{apart} and the other {counted(kept, *units)} "
            "have no route between them"
        ]
    else:
        lost = []
        if unreached:
            lost.append(f"{unit} {root} has no route to {_listed(unreached, unit)}")
        if unreaching:
            lost.append(f"{_listed(unreaching, unit)} have no route to {unit} {root}")
    raise ConfigError(
        f"whatif.failed_links: without {what} the network splits{whose}: "
        f"{' and '.join(lost)}; fail fewer links"
    )


REROUTES_NOT_COUNTED = "traffic rerouted on the remaining shortest routes"
"""A failure's note where the network is too big to count every pair's reroute before
the run (:func:`after_run` counts the pairs that communicated)."""

REROUTE_COUNT_MAX_PAIRS = 100_000
"""The most endpoint pairs that communicated whose reroutes :func:`after_run` counts
(about 35 us a pair on a 4,394-endpoint fat-tree)."""


def _rerouted(
    before: nx.DiGraph,
    after: nx.DiGraph,
    cut: list[int],
    unit: str,
    ecmp: bool | None,
    parts: list[list[int]] | None = None,
) -> str:
    """How many endpoint pairs' routes the failures lengthened (counted on small graphs;
    pairs with an endpoint ``cut`` off, or with their endpoints in two of the ``parts``
    the failures left, left out), the endpoints called ``unit``s, routed as the run
    routes them (``ecmp``)."""
    n = before.graph["num_endpoints"]
    if n > _REROUTE_CHECK_MAX_ENDPOINTS:
        return REROUTES_NOT_COUNTED
    r0, r1 = topologies.Router(before, ecmp=ecmp), topologies.Router(after, ecmp=ecmp)
    changed = longer = pairs = 0
    off = set(cut)
    together = parts if parts and len(parts) > 1 else [[e for e in range(n) if e not in off]]
    for ends in together:
        for s in ends:
            for d in ends:
                if s != d:
                    a, b = r0.path(s, d), r1.path(s, d)
                    changed += a != b
                    longer += len(b) > len(a)
                    pairs += 1
    return f"{changed} of {pairs} {unit} pairs rerouted ({longer} on longer routes)"


def after_run(
    graph: nx.DiGraph,
    notes: list[str],
    carried: Callable[[tuple[Hashable, Hashable]], bool],
    pairs: Collection[tuple[int, int]] | None,
    ecmp: bool | None = None,
) -> list[str]:
    """The link notes of :func:`apply_links` (``notes``, as it made them on ``graph``)
    with what the run showed: a degraded link none of whose edges ``carried`` the run's
    traffic says so (its change could change nothing); a failure whose reroutes were not
    counted before the run (a network of more than 512 endpoints) counts those of the
    endpoint ``pairs`` that communicated, up to :data:`REROUTE_COUNT_MAX_PAIRS` of them
    (None: not counted, as with hosts), routed as the run routes them (``ecmp``)."""
    out = list(notes)
    degraded = graph.graph.get("whatif_degraded", [])
    for i, edges in enumerate(degraded):
        if not any(carried(e) for e in edges):
            out[i] += "; it carried no traffic in this run"
    removed = graph.graph.get("whatif_failed")
    j = len(degraded)
    if (
        removed
        and pairs
        and len(pairs) <= REROUTE_COUNT_MAX_PAIRS
        and out[j].endswith(REROUTES_NOT_COUNTED)
    ):
        before = graph.copy()
        before.add_edges_from(removed)
        r0, r1 = topologies.Router(before, ecmp=ecmp), topologies.Router(graph, ecmp=ecmp)
        changed = longer = 0
        for s, d in pairs:
            a, b = r0.path(s, d), r1.path(s, d)
            changed += a != b
            longer += len(b) > len(a)
        out[j] = out[j][: -len(REROUTES_NOT_COUNTED)] + (
            f"{changed:,} of the {len(pairs):,} endpoint pairs that communicated rerouted "
            f"({longer:,} on longer routes)"
        )
    return out


def compute_factors(whatif: WhatIfSection, world_size: int) -> list[float]:
    """Each rank's compute slowdown factor (1.0 for ranks not named)."""
    out = [1.0] * world_size
    for k, f in whatif.stragglers.items():
        out[int(k)] = float(f)
    return out


def compute_notes(
    whatif: WhatIfSection, rank_name: Callable[[int], str] | None = None
) -> list[str]:
    """The compute what-ifs as the summary says them; ``rank_name`` names a straggler
    rank (default ``rank 3``; with jobs, its job and rank in it)."""
    name = rank_name or (lambda r: f"rank {r}")
    notes = [
        f"{name(int(k))} computes {f:g}x as long"
        for k, f in sorted(whatif.stragglers.items(), key=lambda kv: int(kv[0]))
    ]
    if whatif.compute_noise:
        notes.append(
            f"every compute takes d (1 + X), X exponential with mean {whatif.compute_noise:g} "
            f"(seed {whatif.seed})"
        )
    return notes


class ComputeNoise:
    """Random extra compute of one rank: ``factor()`` returns 1 + X, X exponential with
    mean ``mean``. Each rank draws from its own stream, seeded by ``(seed, rank)``, so a
    rank's draws do not depend on the order in which ranks happen to compute."""

    __slots__ = ("_draws", "_i", "_mean", "_rng")

    _BATCH = 4096

    def __init__(self, mean: float, seed: int, rank: int) -> None:
        if not (math.isfinite(mean) and mean >= 0):
            raise ValueError(f"compute noise mean must be >= 0 (got {mean!r})")
        self._mean = float(mean)
        self._rng = np.random.default_rng((int(seed), int(rank)))
        self._draws = np.empty(0)
        self._i = 0

    def factor(self) -> float:
        if self._i == len(self._draws):
            self._draws = 1.0 + self._rng.exponential(self._mean, self._BATCH)
            self._i = 0
        x = float(self._draws[self._i])
        self._i += 1
        return x
