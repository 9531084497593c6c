"""Hosts on a topology: several ranks per endpoint, sharing the host's memory and NIC.

:func:`with_hosts` turns any topology whose endpoints are machines into one whose endpoints
are the ranks running on them. Every host ``h`` (an endpoint ``h`` of the input graph)
becomes:

- ``ranks_per_host`` rank endpoints, numbered host-major (host ``h`` holds ranks
  ``h * k .. h * k + k - 1``), each a new ``kind="endpoint"`` node;
- the memory path of intra-host messages: ``rank -> "h{h}.mem" -> "h{h}.mem_out" -> rank'``.
  The middle edge is the host's **memory-copy capacity** (bytes/s), shared max-min by all
  of its intra-host flows at once; the edges to and from a rank carry the **copy rate of
  one rank** (one core copying), so a lone flow cannot use the whole host. The middle
  edge's latency is the per-message cost of an intra-host message;
- the NIC path of inter-host messages: ``rank -> "h{h}.tx" -> "host{h}"`` and
  ``"host{h}" -> "h{h}.rx" -> rank``. ``"host{h}"`` is the input's endpoint ``h``, renamed,
  with all its links; the ``tx``/``rx`` edges are the host's NIC (bytes/s, shared by its
  ranks).

Routes are shortest in hops, so an intra-host message (3 hops through memory) never takes
the NIC (4 hops), and inter-host routes follow the input graph's own routes.

Units: bandwidths bytes/s, latencies seconds, as every builder.
"""

from __future__ import annotations

import math
from typing import Any

import networkx as nx

from topologies.errors import TopologyError
from topologies.routing import endpoints

__all__ = ["host_of", "with_hosts"]


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TopologyError(f"hosts: {name} must be a number > 0 in bytes/s (got {value!r})")
    if not math.isfinite(value) or value <= 0:
        raise TopologyError(f"hosts: {name} must be a finite number > 0 in bytes/s (got {value})")
    return float(value)


def _latency(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TopologyError(f"hosts: {name} must be a number >= 0 in seconds (got {value!r})")
    if not math.isfinite(value) or value < 0:
        raise TopologyError(f"hosts: {name} must be a finite number >= 0 in seconds (got {value})")
    return float(value)


def with_hosts(
    graph: nx.DiGraph,
    ranks_per_host: int,
    copy_bandwidth_bytes_per_s: float,
    *,
    rank_copy_bandwidth_bytes_per_s: float | None = None,
    copy_latency_s: float = 0.0,
    nic_bandwidth_bytes_per_s: float | None = None,
    nic_latency_s: float = 0.0,
) -> nx.DiGraph:
    """The topology with ``ranks_per_host`` rank endpoints on each endpoint (host) of ``graph``.

    Args:
        graph: a topology of the builders' data model; its endpoints are the hosts.
        ranks_per_host: ranks on every host, >= 1.
        copy_bandwidth_bytes_per_s: the host's memory-copy capacity, shared by all its
            intra-host messages (bytes/s).
        rank_copy_bandwidth_bytes_per_s: the fastest one rank copies (bytes/s); default: the
            host's whole capacity.
        copy_latency_s: per-message cost of an intra-host message (seconds).
        nic_bandwidth_bytes_per_s: the host's NIC, each direction (bytes/s); default: the sum
            of the host's link bandwidths (the NIC is then never the bottleneck).
        nic_latency_s: latency of the NIC, per direction (seconds).

    ``graph.graph`` of the result keeps the input's ``name`` and ``params`` and adds
    ``hosts``: the parameters above, in these units, and ``num_hosts``.
    """
    k = ranks_per_host
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise TopologyError(f"hosts: ranks_per_host must be an integer >= 1 (got {k!r})")
    copy_bw = _positive("copy_bandwidth_bytes_per_s", copy_bandwidth_bytes_per_s)
    rank_bw = (
        copy_bw
        if rank_copy_bandwidth_bytes_per_s is None
        else _positive("rank_copy_bandwidth_bytes_per_s", rank_copy_bandwidth_bytes_per_s)
    )
    copy_lat = _latency("copy_latency_s", copy_latency_s)
    nic_lat = _latency("nic_latency_s", nic_latency_s)
    nic_bw = (
        None
        if nic_bandwidth_bytes_per_s is None
        else _positive("nic_bandwidth_bytes_per_s", nic_bandwidth_bytes_per_s)
    )
    hosts = endpoints(graph)
    rename = {h: f"host{h}" for h in hosts}
    taken = set(graph.nodes) - set(hosts)
    clash = sorted(
        str(n)
        for h in hosts
        for n in (rename[h], f"h{h}.mem", f"h{h}.mem_out", f"h{h}.tx", f"h{h}.rx")
        if n in taken
    )
    if clash:
        raise TopologyError(f"hosts: the topology already has nodes named {', '.join(clash)}")

    out = nx.DiGraph(
        name=graph.graph.get("name", "topology"),
        num_endpoints=len(hosts) * k,
        params=dict(graph.graph.get("params", {})),
        hosts={
            "num_hosts": len(hosts),
            "ranks_per_host": k,
            "copy_bandwidth_bytes_per_s": copy_bw,
            "rank_copy_bandwidth_bytes_per_s": rank_bw,
            "copy_latency_s": copy_lat,
            "nic_bandwidth_bytes_per_s": nic_bw,
            "nic_latency_s": nic_lat,
        },
    )
    # Rank endpoints first, in index order, as the data model asks.
    out.add_nodes_from(range(len(hosts) * k), kind="endpoint")
    for node, data in graph.nodes(data=True):
        # A host's network port is a switch now: only ranks are endpoints.
        attrs = {**data, "kind": "switch"} if node in rename else data
        out.add_node(rename.get(node, node), **attrs)
    for u, v, data in graph.edges(data=True):
        out.add_edge(rename.get(u, u), rename.get(v, v), **data)
    for h in hosts:
        port = rename[h]
        if nic_bw is None:
            links = [d["bandwidth"] for _, _, d in graph.out_edges(h, data=True)]
            links += [d["bandwidth"] for _, _, d in graph.in_edges(h, data=True)]
            nic = sum(links) or copy_bw
        else:
            nic = nic_bw
        mem, mem_out, tx, rx = f"h{h}.mem", f"h{h}.mem_out", f"h{h}.tx", f"h{h}.rx"
        for n in (mem, mem_out, tx, rx):
            out.add_node(n, kind="switch", host=h)
        out.add_edge(mem, mem_out, bandwidth=copy_bw, latency=copy_lat)
        out.add_edge(tx, port, bandwidth=nic, latency=nic_lat)
        out.add_edge(port, rx, bandwidth=nic, latency=nic_lat)
        for r in range(h * k, (h + 1) * k):
            out.nodes[r]["host"] = h
            out.add_edge(r, mem, bandwidth=rank_bw, latency=0.0)
            out.add_edge(mem_out, r, bandwidth=rank_bw, latency=0.0)
            out.add_edge(r, tx, bandwidth=nic, latency=0.0)
            out.add_edge(rx, r, bandwidth=nic, latency=0.0)
    return out


def host_of(graph: nx.DiGraph, endpoint: int) -> int | None:
    """The host of a rank endpoint of a :func:`with_hosts` graph (None without hosts)."""
    return graph.nodes[endpoint].get("host")


def endpoints_per_node(graph: nx.DiGraph) -> int | None:
    """Consecutive endpoints that share a node of ``graph`` (endpoints ``k n ..`` are node
    k), or None where it has no such nodes: a host's ranks (:func:`with_hosts`), a
    rail-optimised cluster's GPUs per node, a hierarchical network's endpoints per group."""
    hosts = graph.graph.get("hosts")
    if hosts:
        size = hosts["ranks_per_host"]
    else:
        params = graph.graph.get("params", {})
        size = params.get("gpus_per_node") or (
            params.get("group_size") if graph.graph.get("name") == "hierarchical" else None
        )
    return size if size and size > 1 else None
