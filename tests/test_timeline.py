"""The compute / communication breakdown of a timeline (workload/timeline.py)."""

from __future__ import annotations

import pytest

from workload.ops import Compute, Recv, Send, Wait
from workload.timeline import BreakdownPlan, breakdown, breakdown_of


def test_a_timeline_by_hand() -> None:
    ops = [
        Compute(1e6),
        Send(1, 4, 0, "world", req=1),
        Compute(1e6),
        Wait((1,)),
        Recv(1, 4, 0, "world"),
    ]
    starts = [0.0, 1.0, 1.25, 2.0, 3.0]
    ends = [1.0, 1.25, 2.0, 2.5, 4.0]
    got = breakdown(ops, starts, ends)
    # compute 1 + 0.75; exposed: the post 0.25, the wait 0.5, the receive 1; in flight:
    # the send from its post to its wait's end (1.5), then the receive (1).
    assert (got.compute_s, got.exposed_comm_s, got.comm_s) == (1.75, 1.75, 2.5)


def test_requests_never_waited_are_in_flight_to_the_iteration_end() -> None:
    ops = [Recv(1, 4, 0, "world", req=7), Compute(1e6), Send(1, 4, 0, "world", req=8), Wait((8,))]
    got = breakdown(ops, [0.0, 0.5, 2.0, 2.5], [0.5, 2.0, 2.5, 3.0])
    # the receive from 0 to the end (3.0) covers the send (2.0 to 3.0)
    assert (got.compute_s, got.exposed_comm_s, got.comm_s) == (1.5, 1.5, 3.0)


def test_a_plan_names_each_operations_part_by_index() -> None:
    # A program's plan is found once for the ranks that run it: which operations add to
    # compute, which to the calls, and the intervals in flight by start and end index.
    ops = [
        Compute(1e6),
        Send(1, 4, 0, "world", req=1),
        Recv(1, 4, 0, "world"),
        Recv(1, 4, 0, "world", req=2),
        Compute(1e6),
        Wait((1, 9)),  # request 9 was never posted
    ]
    plan = BreakdownPlan.of(ops)
    assert plan.compute == (0, 4)
    assert plan.calls == (1, 2, 3, 5)
    assert plan.intervals == ((2, 2), (1, 5))
    assert plan.unwaited == (3,)
    starts, ends = [0.0, 1.0, 1.5, 2.0, 2.25, 3.0], [1.0, 1.5, 2.0, 2.25, 3.0, 3.5]
    got = breakdown_of(plan, starts, ends)
    # compute 1 + 0.75; calls 0.5 + 0.5 + 0.25 + 0.5; in flight: the send 1.0 to 3.5
    assert (got.compute_s, got.exposed_comm_s, got.comm_s) == (1.75, 1.75, 2.5)
    assert got == breakdown(ops, starts, ends)


def test_times_that_do_not_match_the_operations_are_refused() -> None:
    ops = [Compute(1e6), Recv(1, 4, 0, "world")]
    with pytest.raises(ValueError, match="2 operations, 1 starts and 2 ends: one each"):
        breakdown(ops, [0.0], [1.0, 2.0])
