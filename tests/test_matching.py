"""workload.matching: rank programs that cannot pair up, found without running them."""

from __future__ import annotations

from workload.matching import unmatched
from workload.ops import Collective, Recv, Send
from workload.program import Phase, Workload
from workload.spec import RunSpec


def _workload(programs: dict[int, list]) -> Workload:
    return Workload(
        "hand", len(programs), {}, {"world": [tuple(programs)]}, [Phase("it", programs.get)]
    )


def test_every_proxy_workload_pairs_up():
    for spec in (RunSpec("gpt2", args=(8, 2), world_size=4), RunSpec("dlrm", world_size=4)):
        assert unmatched(spec.workload()) is None


def test_a_receive_nobody_sends_and_a_collective_one_member_skips_are_named():
    send, recv = Send(1, 4, 7, "world"), Recv(0, 4, 7, "world")
    assert unmatched(_workload({0: [send], 1: [recv]})) is None
    assert unmatched(_workload({0: [send], 1: [recv, recv]})) == (
        "phase 'it': rank 1 receives 2 message(s) from rank 0 (tag 7, on its 'world' group) "
        "and rank 0 sends it 1"
    )
    # Matched on the group's communicator: a receive posted on another group waits.
    other = Recv(0, 4, 7, "dp")
    w = _workload({0: [send], 1: [other]})
    w.groups["dp"] = [(0,), (1,)]
    assert unmatched(w) == (
        "phase 'it': rank 1 receives 1 message(s) from rank 0 (tag 7, on its 'dp' group) and "
        "rank 0 sends it 0"
    )
    ar = Collective("allreduce", "world", 16)
    assert unmatched(_workload({0: [ar, ar], 1: [ar]})) == (
        "phase 'it': the members of a 'world' group call different numbers of collectives "
        "on it (rank 0: 2, rank 1: 1)"
    )
