"""Whether a workload's rank programs pair up: every message received is sent and every
collective's members call it alike. Checked from the programs alone, without running
them or any network model: for a replay (``proxies.chakra``) to refuse a trace set
that would wait forever, before any MPI work."""

from __future__ import annotations

from collections import Counter

from .ops import Collective, Recv, Send
from .program import Workload


def unmatched(workload: Workload) -> str | None:
    """The first mismatch of ``workload``'s programs, phase by phase, or None: a
    point-to-point message (group, source, destination, tag) received more or fewer
    times than it is sent, or the members of a group calling different numbers of collectives on
    it. Programs whose counts match may still wait on each other in a bad order; a
    simulation (``python -m simnet``) finds that too."""
    for phase in workload.phases:
        # (group kind, source, destination, tag): a message is matched on its group's
        # communicator, as both executors match it.
        sends: Counter[tuple[str, int, int, int]] = Counter()
        recvs: Counter[tuple[str, int, int, int]] = Counter()
        calls: dict[str, Counter[int]] = {kind: Counter() for kind in workload.groups}
        for rank in range(workload.world_size):
            for op in phase.program(rank):
                if isinstance(op, Send):
                    sends[(op.group, rank, op.peer, op.tag)] += 1
                elif isinstance(op, Recv):
                    recvs[(op.group, op.peer, rank, op.tag)] += 1
                elif isinstance(op, Collective) and op.group in calls:
                    calls[op.group][rank] += 1
        for key in sorted(sends.keys() | recvs.keys()):
            if sends[key] != recvs[key]:
                group, src, dst, tag = key
                return (
                    f"phase {phase.name!r}: rank {dst} receives {recvs[key]} message(s) "
                    f"from rank {src} (tag {tag}, on its {group!r} group) and rank {src} "
                    f"sends it {sends[key]}"
                )
        for kind, counts in calls.items():
            for group in workload.groups[kind]:
                made = {r: counts[r] for r in group}
                if len(set(made.values())) > 1:
                    shown = ", ".join(f"rank {r}: {n}" for r, n in made.items())
                    return (
                        f"phase {phase.name!r}: the members of a {kind!r} group call "
                        f"different numbers of collectives on it ({shown})"
                    )
    return None
