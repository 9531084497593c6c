"""Compute / communication / exposed-communication breakdown of a timeline.

Shared by every executor so that measured and predicted figures mean the same:
- compute_s: time inside Compute operations;
- exposed_comm_s: time inside communication calls (blocking calls, posting,
  waits, tests): time the rank could not compute;
- comm_s: wall time during which at least one communication operation was in
  flight (a non-blocking operation counts from its posting to the end of the
  Wait that names it), so comm_s - exposed_comm_s is the overlapped part.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .ops import Collective, Compute, Op, Recv, Send, Wait, describe
from .units import s_to_us


@dataclass(frozen=True)
class Breakdown:
    """Seconds, for one rank and one iteration (or a mean of them)."""

    compute_s: float
    comm_s: float
    exposed_comm_s: float


def breakdown(ops: Sequence[Op], starts: Sequence[float], ends: Sequence[float]) -> Breakdown:
    """Breakdown of one iteration; starts/ends are seconds, one per operation."""
    return breakdown_of(BreakdownPlan.of(ops), starts, ends)


@dataclass(frozen=True)
class BreakdownPlan:
    """Which of a program's operations :func:`breakdown` adds where, by operation index,
    found once for the ranks and iterations that run the same operations: ``compute``
    (Compute operations) and ``calls`` (all others) in program order; ``intervals``,
    (start index, end index) of each communication in flight (a blocking call's own, a
    non-blocking one's from its posting to the end of the Wait that names it), in the
    order they end; ``unwaited``: the posting of each request never waited (a reference
    quirk), in flight until the iteration's end."""

    compute: tuple[int, ...]
    calls: tuple[int, ...]
    intervals: tuple[tuple[int, int], ...]
    unwaited: tuple[int, ...]
    ops: int  # how many operations (an iteration's starts and ends, one each)

    @staticmethod
    def of(ops: Sequence[Op]) -> BreakdownPlan:
        compute: list[int] = []
        calls: list[int] = []
        intervals: list[tuple[int, int]] = []
        posted: dict[int, int] = {}
        for i, op in enumerate(ops):
            if isinstance(op, Compute):
                compute.append(i)
                continue
            calls.append(i)
            if isinstance(op, (Send, Recv, Collective)):
                if op.req is None:
                    intervals.append((i, i))
                else:
                    posted[op.req] = i
            elif isinstance(op, Wait):
                for r in op.reqs:
                    if r in posted:
                        intervals.append((posted.pop(r), i))
        return BreakdownPlan(
            tuple(compute), tuple(calls), tuple(intervals), tuple(posted.values()), len(ops)
        )


def breakdown_of(plan: BreakdownPlan, starts: Sequence[float], ends: Sequence[float]) -> Breakdown:
    """:func:`breakdown` of one iteration of the operations ``plan`` was made of (the same
    figures, added in the same order); starts/ends are seconds, one per operation."""
    if not len(starts) == len(ends) == plan.ops:
        raise ValueError(
            f"{plan.ops} operations, {len(starts)} starts and {len(ends)} ends: one each"
        )
    compute = exposed = 0.0
    for i in plan.compute:
        compute += ends[i] - starts[i]
    for i in plan.calls:
        exposed += ends[i] - starts[i]
    intervals = [(starts[i], ends[j]) for i, j in plan.intervals]
    end = ends[-1] if len(ends) else 0.0
    intervals.extend((starts[i], end) for i in plan.unwaited)
    return Breakdown(compute, union_length(intervals), exposed)


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by a set of [start, end] intervals."""
    total = 0.0
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def op_events(
    pid: int,
    phase: str,
    ops: Sequence[Op],
    starts: Sequence[Sequence[float]],
    ends: Sequence[Sequence[float]],
    offset_s: float = 0.0,
    described: dict[int, tuple[str, str, str]] | None = None,
    as_json: bool = False,
) -> list[dict] | str:
    """Chrome/Perfetto complete events (``"ph": "X"``, times in microseconds; see
    ``results.chrome_trace``) of one rank's operations over its iterations, its
    ``starts``/``ends`` (seconds) one list per iteration, shifted by ``offset_s``.

    ``described``: a dict to keep each operation's name, category and description in
    by ``id(op)``, shared by the calls for ranks whose programs share operation objects
    (described once each, not once per rank); its operations must outlive it.

    ``as_json``: the events as the compact JSON text ``json.dumps(events,
    separators=(",", ":"))`` gives, without the list's brackets, made from a JSON text per
    operation and its numbers (a 16,384-rank trace's 131,526 calls of ``json.dumps``
    took 2.4 s); ``described`` then keeps those texts (use one dict for one form)."""
    if described is None:
        described = {}
    if as_json:
        pid_s = _json_number(pid)
        phase_s = json.dumps(phase)
        parts = []
        for it, (s, e) in enumerate(zip(starts, ends, strict=True)):
            tail = f',"args":{{"phase":{phase_s},"iteration":{it},"op":'
            for op, t0, t1 in zip(ops, s, e, strict=True):
                j = described.get(id(op))
                if j is None:
                    j = described[id(op)] = (
                        json.dumps(op.label),
                        json.dumps(type(op).__name__.lower()),
                        json.dumps(describe(op)),
                    )
                parts.append(
                    f'{{"name":{j[0]},"cat":{j[1]},"ph":"X","pid":{pid_s},"tid":0,'
                    f'"ts":{_json_number(s_to_us(offset_s + t0))},'
                    f'"dur":{_json_number(s_to_us(t1 - t0))}{tail}{j[2]}}}}}'
                )
        return ",".join(parts)
    events = []
    for it, (s, e) in enumerate(zip(starts, ends, strict=True)):
        for op, t0, t1 in zip(ops, s, e, strict=True):
            d = described.get(id(op))
            if d is None:
                d = described[id(op)] = (op.label, type(op).__name__.lower(), describe(op))
            events.append(
                {
                    "name": d[0],
                    "cat": d[1],
                    "ph": "X",
                    "pid": pid,
                    "tid": 0,
                    "ts": s_to_us(offset_s + t0),
                    "dur": s_to_us(t1 - t0),
                    "args": {"phase": phase, "iteration": it, "op": d[2]},
                }
            )
    return events


def _json_number(x: object) -> str:
    """``json.dumps(x)`` of a number (a NumPy one as its Python value)."""
    if type(x) is float and math.isfinite(x):
        return float.__repr__(x)
    if type(x) is int:
        return int.__repr__(x)
    item = getattr(x, "item", None)
    return json.dumps(item() if item is not None else x)
