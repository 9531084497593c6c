"""Placement of ranks on the endpoints of a topology."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import networkx as nx

from topologies.errors import TopologyError
from topologies.routing import endpoints

__all__ = ["apply_placement"]


def apply_placement(
    num_ranks: int, graph: nx.DiGraph, placement: Sequence[int] | None = None
) -> list[int]:
    """Map each rank to an endpoint: returns ``mapping`` with ``mapping[rank] = endpoint``.

    Args:
        num_ranks: number of ranks of the job, >= 1.
        graph: the topology; its endpoints are ``0..n-1``.
        placement: ``placement[rank]`` is the endpoint of ``rank``; one distinct endpoint in
            ``0..n-1`` per rank. ``None`` places rank ``r`` on endpoint ``r`` (needs
            ``num_ranks <= n``).

    Raises TopologyError for a wrong length, an endpoint out of range, or two ranks on one
    endpoint.
    """
    if isinstance(num_ranks, bool) or not isinstance(num_ranks, numbers.Integral) or num_ranks < 1:
        raise TopologyError(f"placement: num_ranks must be an integer >= 1 (got {num_ranks!r})")
    n = len(endpoints(graph))
    name = graph.graph.get("name", "topology")
    if placement is None:
        if num_ranks > n:
            raise TopologyError(
                f"placement: {num_ranks} ranks but the {name} topology has only {n} "
                "endpoints; use a larger topology or fewer ranks"
            )
        return list(range(num_ranks))
    if isinstance(placement, str | bytes) or not isinstance(placement, Sequence):
        raise TopologyError(
            f"placement: must be a list of endpoints, one per rank (got {type(placement).__name__})"
        )
    if len(placement) != num_ranks:
        raise TopologyError(
            f"placement: has {len(placement)} entries but there are {num_ranks} ranks; give "
            "exactly one endpoint per rank"
        )
    owner: dict[int, int] = {}
    mapping: list[int] = []
    for rank, endpoint in enumerate(placement):
        if (
            isinstance(endpoint, bool)
            or not isinstance(endpoint, numbers.Integral)
            or not 0 <= endpoint < n
        ):
            raise TopologyError(
                f"placement: rank {rank} is placed on {endpoint!r}, not an endpoint of the "
                f"{name} topology; endpoints are 0..{n - 1}"
            )
        endpoint = int(endpoint)
        if endpoint in owner:
            raise TopologyError(
                f"placement: ranks {owner[endpoint]} and {rank} are both placed on endpoint "
                f"{endpoint}; each rank needs its own endpoint"
            )
        owner[endpoint] = rank
        mapping.append(endpoint)
    return mapping
