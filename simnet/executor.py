"""The simnet executor: runs rank programs as simpy processes on a FlowNetwork.

Each rank is a process that walks its operations. Point-to-point messages are
matched like MPI: one FIFO per (group kind, source, destination, tag), so
messages between a pair with the same tag never overtake each other.
Collectives expand into the point-to-point schedules of
``proxies.collectives``; the messages of one collective are matched on their
own channels (keyed by the collective's sequence number on its group), so
concurrent non-blocking collectives never mix.

Protocol: a message of at most ``eager_threshold_bytes`` is sent eagerly (the
data leaves when the send is posted and the send completes at once); a larger
one uses rendezvous (the data leaves once both sides have posted, and both
complete when it is delivered).
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy

from proxies.collectives import Schedule, default_algorithm, schedule_for
from proxies.ops import Collective, Compute, Op, Recv, Send, Testany, Wait
from proxies.program import Workload

from .network import FlowNetwork

DEFAULT_EAGER_THRESHOLD_BYTES = 65536


@dataclass
class AlgorithmPolicy:
    """Which schedule a collective runs.

    by_op: op -> algorithm name, overriding the default policy.
    fixed: one algorithm for every op that supports it (e.g. "ring").
    local_size: group size of the hierarchical algorithm.
    rings: ring orders of the multiring algorithm (group indices).
    Otherwise the MPICH-like ``default_algorithm`` picks by size.
    """

    by_op: dict[str, str] = field(default_factory=dict)
    fixed: str | None = None
    local_size: int | None = None
    rings: list[list[int]] | None = None

    def choose(self, op: Collective, p: int) -> str:
        from proxies.collectives import ALGORITHMS

        name = op.algorithm or self.by_op.get(op.op) or self.fixed
        if name and name in ALGORITHMS[op.op]:
            if name == "hierarchical" and (not self.local_size or p % self.local_size):
                return default_algorithm(op.op, p, op.count_elems)
            if name == "multiring" and (not self.rings or len(self.rings[0]) != p):
                return (
                    "ring"
                    if "ring" in ALGORITHMS[op.op]
                    else default_algorithm(op.op, p, op.count_elems)
                )
            return name
        return default_algorithm(op.op, p, op.count_elems)


@dataclass
class RankTimeline:
    """Start and end (seconds) of every operation of one rank, per iteration."""

    starts: list[list[float]] = field(default_factory=list)
    ends: list[list[float]] = field(default_factory=list)


class _Channel:
    __slots__ = ("recvs", "sends")

    def __init__(self) -> None:
        self.sends: deque = deque()
        self.recvs: deque = deque()


class SimExecutor:
    """Simulates the phases of a workload; one fresh network per phase."""

    def __init__(
        self,
        workload: Workload,
        make_network: Callable[[simpy.Environment], FlowNetwork],
        placement: Sequence[int],
        *,
        policy: AlgorithmPolicy | None = None,
        eager_threshold_bytes: int = DEFAULT_EAGER_THRESHOLD_BYTES,
        compute_scale: float = 1.0,
    ) -> None:
        self.workload = workload
        self.make_network = make_network
        self.placement = list(placement)
        self.policy = policy or AlgorithmPolicy()
        # The workload's own schedule parameters (e.g. the ring trainer's rings) win.
        cp = workload.collective_params
        if cp.get("rings"):
            self.policy.rings = [list(r) for r in cp["rings"]]
        if cp.get("local_size"):
            self.policy.local_size = cp["local_size"]
        self.eager = eager_threshold_bytes
        self.compute_scale = compute_scale
        self._schedules: dict[tuple, tuple[Schedule, str]] = {}
        self._members: dict[tuple[str, int], tuple[tuple[int, ...], int]] = {}

    # -- helpers -------------------------------------------------------------------
    def _group(self, kind: str, rank: int) -> tuple[tuple[int, ...], int]:
        key = (kind, rank)
        hit = self._members.get(key)
        if hit is None:
            g = self.workload.group_of(kind, rank)
            hit = self._members[key] = (g, g.index(rank))
        return hit

    def schedule(self, op: Collective, p: int) -> tuple[Schedule, str]:
        key = (op.op, op.algorithm, p, op.count_elems, op.root)
        hit = self._schedules.get(key)
        if hit is None:
            alg = self.policy.choose(op, p)
            params = {"rings": self.policy.rings, "local_size": self.policy.local_size}
            sched = schedule_for(op.op, alg, p, op.count_elems, root=op.root, params=params)
            hit = self._schedules[key] = (sched, alg)
        return hit

    # -- running -------------------------------------------------------------------
    def run_phase(
        self,
        phase_index: int = 0,
        iterations: int = 1,
        progress: Callable[[PhaseSim], None] | None = None,
    ) -> PhaseSim:
        phase = self.workload.phases[phase_index]
        env = simpy.Environment()
        net = self.make_network(env)
        sim = PhaseSim(self, phase.name, env, net)
        programs = [phase.program(r) for r in range(self.workload.world_size)]
        for rank, ops in enumerate(programs):
            env.process(sim.rank_process(rank, ops, iterations))
        if progress is None:
            env.run()
        else:
            # Run in growing slices of simulated time, only to report progress.
            slice_s = 1e-4
            while env.peek() != float("inf"):
                t0 = time.perf_counter()
                env.run(until=env.now + slice_s)
                progress(sim)
                if time.perf_counter() - t0 < 0.5:
                    slice_s *= 2
        sim.programs = programs
        sim.finish()
        return sim


class PhaseSim:
    """The state and results of one simulated phase."""

    def __init__(
        self, ex: SimExecutor, name: str, env: simpy.Environment, net: FlowNetwork
    ) -> None:
        self.ex = ex
        self.name = name
        self.env = env
        self.net = net
        self.channels: dict[tuple, _Channel] = {}
        self.coll_seq: dict[tuple[str, int], int] = defaultdict(int)
        self.timelines: dict[int, RankTimeline] = {}
        self.programs: list[list[Op]] = []
        self.wire_bytes_by_group: dict[str, int] = defaultdict(int)
        # Bytes per (src rank, dst rank) by part: "reduce" (reduction data of a
        # collective), "copy" (copied data of a collective), "p2p".
        self.part_bytes: dict[str, dict[tuple[int, int], int]] = defaultdict(dict)
        self.algorithms: dict[str, set[str]] = defaultdict(set)
        self.messages_done = 0
        self.makespan_s = 0.0
        self.iteration_ends: dict[int, list[float]] = {}

    # -- messages ------------------------------------------------------------------
    def _transfer(
        self, src: int, dst: int, size_bytes: int, account: tuple[str, str]
    ) -> simpy.Event:
        """Start the data of a message; ``account`` is (group kind, part)."""
        self.wire_bytes_by_group[account[0]] += size_bytes
        part = self.part_bytes[account[1]]
        part[(src, dst)] = part.get((src, dst), 0) + size_bytes
        self.messages_done += 1
        pl = self.ex.placement
        return self.net.transfer(pl[src], pl[dst], size_bytes)

    def post_send(
        self, key: tuple, src: int, dst: int, size_bytes: int, account: tuple[str, str]
    ) -> simpy.Event | None:
        """Post a send; returns the event that completes it (None: complete now)."""
        channels = self.channels
        ch = channels.get(key)
        if ch is not None and ch.recvs:
            waiting = ch.recvs.popleft()
            if not ch.recvs and not ch.sends:
                del channels[key]
            data = self._transfer(src, dst, size_bytes, account)
            _chain(data, waiting)
            return None if size_bytes <= self.ex.eager else data
        if ch is None:
            ch = channels[key] = _Channel()
        if size_bytes <= self.ex.eager:
            # Eager: the data leaves now and the send completes at once.
            ch.sends.append(self._transfer(src, dst, size_bytes, account))
            return None
        ready = self.env.event()
        ch.sends.append((src, dst, size_bytes, account, ready))
        return ready

    def post_recv(self, key: tuple) -> simpy.Event:
        """Post a receive; returns the event that completes it."""
        channels = self.channels
        ch = channels.get(key)
        if ch is not None and ch.sends:
            pending = ch.sends.popleft()
            if not ch.sends and not ch.recvs:
                del channels[key]
            if isinstance(pending, simpy.Event):  # eager data already on its way
                return pending
            src, dst, size_bytes, account, ready = pending
            data = self._transfer(src, dst, size_bytes, account)
            _chain(data, ready)
            return data
        if ch is None:
            ch = channels[key] = _Channel()
        done = self.env.event()
        ch.recvs.append(done)
        return done

    @staticmethod
    def pending(events: list[simpy.Event | None]) -> list[simpy.Event]:
        """The events not yet processed. Yielding them one by one costs less than
        a combined event: most complete together, and a processed one resumes at once."""
        return [e for e in events if e is not None and e.callbacks is not None]

    # -- collectives -----------------------------------------------------------------
    def collective(self, rank: int, op: Collective) -> Generator[simpy.Event, Any, None]:
        members, me = self.ex._group(op.group, rank)
        p = len(members)
        seq_key = (op.group, rank)
        seq = self.coll_seq[seq_key]
        self.coll_seq[seq_key] = seq + 1
        if p == 1:
            return
        sched, alg = self.ex.schedule(op, p)
        self.algorithms[op.op].add(alg)
        base = ("c", op.group, members[0], seq)
        reduce_acct, copy_acct = (op.group, "reduce"), (op.group, "copy")
        post_send, post_recv = self.post_send, self.post_recv
        for sends, recvs in sched.rank_steps(me):
            events: list[simpy.Event | None] = [
                post_recv((*base, members[t.src], rank)) for t in recvs
            ]
            for t in sends:
                dst = members[t.dst]
                events.append(
                    post_send(
                        (*base, rank, dst),
                        rank,
                        dst,
                        t.size_bytes,
                        reduce_acct if t.reduce else copy_acct,
                    )
                )
            for ev in self.pending(events):  # noqa: UP028  (simpy sends into generators)
                yield ev

    # -- a rank ----------------------------------------------------------------------
    def rank_process(
        self, rank: int, ops: list[Op], iterations: int
    ) -> Generator[simpy.Event, Any, None]:
        env = self.env
        tl = self.timelines[rank] = RankTimeline()
        scale = self.ex.compute_scale
        for _ in range(iterations):
            reqs: dict[int, simpy.Event] = {}
            starts, ends = [0.0] * len(ops), [0.0] * len(ops)
            for i, op in enumerate(ops):
                starts[i] = env.now
                if isinstance(op, Compute):
                    if op.duration_us > 0:
                        yield env.timeout(op.duration_us * 1e-6 * scale)
                elif isinstance(op, (Send, Recv)):
                    ev = self._p2p(rank, op)
                    if op.req is not None:
                        reqs[op.req] = ev
                    elif ev is not None:
                        yield ev
                elif isinstance(op, Collective):
                    if op.req is None:
                        yield from self.collective(rank, op)
                    else:
                        reqs[op.req] = env.process(self.collective(rank, op))
                elif isinstance(op, Wait):
                    for ev in self.pending([reqs.pop(r) for r in op.reqs]):
                        yield ev
                elif isinstance(op, Testany):
                    pass  # progress is free in the model
                ends[i] = env.now
            tl.starts.append(starts)
            tl.ends.append(ends)
        self.iteration_ends[rank] = [e[-1] if e else 0.0 for e in tl.ends]

    def _p2p(self, rank: int, op: Send | Recv) -> simpy.Event | None:
        if isinstance(op, Send):
            return self.post_send(
                ("p", op.group, rank, op.peer, op.tag),
                rank,
                op.peer,
                op.size_bytes,
                (op.group, "p2p"),
            )
        return self.post_recv(("p", op.group, op.peer, rank, op.tag))

    def finish(self) -> None:
        # The last rank's end, not env.now: a progress-reporting run advances the
        # clock in slices past the last event.
        ends = [e[-1] for e in self.iteration_ends.values() if e]
        self.makespan_s = max(ends) if ends else 0.0
        stuck = [r for r in range(len(self.programs)) if r not in self.iteration_ends]
        if stuck:
            raise RuntimeError(
                f"phase {self.name!r}: ranks {stuck[:8]}{'...' if len(stuck) > 8 else ''} "
                "never finished (deadlock: they wait for messages nobody sends)"
            )
        unmatched = [k for k, ch in self.channels.items() if ch.sends or ch.recvs]
        if unmatched:
            raise RuntimeError(
                f"phase {self.name!r}: {len(unmatched)} unmatched message channel(s), "
                f"first {unmatched[0]}: the rank programs do not pair their sends and receives"
            )


def _chain(source: simpy.Event, target: simpy.Event) -> None:
    """Succeed ``target`` when ``source`` fires (or now, if it already has)."""
    if source.callbacks is None:
        target.succeed()
    else:
        source.callbacks.append(lambda _ev: target.succeed())
