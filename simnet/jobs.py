"""Several jobs on one network: each simulated alone, then all of them together.

A configuration's ``jobs`` list gives every job its workload, its endpoints and its
start time. :func:`simulate_jobs` runs each job alone on the network (its time alone),
then all of them in one simulation whose ranks are the jobs' ranks side by side (job
``j``'s rank ``r`` is combined rank ``offset_j + r``, on the job's endpoint ``r``), each
job's ranks starting at its start time. A job's shared time is from its start to the
end of its last rank; its slowdown is shared over alone.

A job with several phases runs them one after another (each for the workload's
iterations) as one program, alone and shared alike, and with ``whatif.compute_noise``
a job's rank draws the same random stream alone as shared (that of its combined rank),
and its collectives are laid out with the same schedule parameters (its own, else the
network's: ``JobRanks.collective_params``): the slowdown measures what the other jobs
cost it, nothing else. A link two jobs send over is where they contend only if their
bytes drain over it at the same moment while it is full (a job there could go faster
only at another's expense): the shared run records that on the links their alone runs
share (``FlowNetwork.watch_links``). Links where their bytes meet without filling it are
listed apart (``JobsReport.met_not_full``), as are those they cross at other times.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workload.ops import Collective, Compute, Op, Recv, Send, Testany, Wait
from workload.program import JobRanks, Phase, Workload

from .config import Config, ConfigError, JobSection, load_config
from .network import LinkMeeting
from .pairs import dense_matrix
from .policy import build_policy
from .whatif import NO_COMPUTE

# Request ids of a job's phase k become k * _REQ_STRIDE + id in the combined program,
# so that phases run back to back never share an id.
_REQ_STRIDE = 1 << 24


@dataclass
class JobReport:
    """One job of a shared-network simulation. Times in seconds, bytes in bytes."""

    name: str
    model: str
    ranks: tuple[int, int]  # its combined ranks: first, last + 1
    endpoints: list[int]
    start_s: float
    scale: float  # its workload's message scale
    alone_s: float  # the job by itself on the network (its phases back to back)
    shared_s: float  # from its start to its last rank's end, with the other jobs
    # (src endpoint, dst endpoint) -> bytes of the shared run, between the job's endpoints
    pair_bytes: dict[tuple[int, int], int]
    num_endpoints: int  # of the network
    link_bytes: dict[tuple, int]  # bytes the job sent over each link

    @property
    def total_bytes(self) -> int:
        """Bytes the job's ranks sent one another in the shared run."""
        return sum(self.pair_bytes.values())

    @functools.cached_property
    def traffic_bytes(self) -> np.ndarray:
        """[src endpoint, dst endpoint] bytes of the shared run, over the whole network
        (n x n, built on first use: zero outside the job's endpoints)."""
        return dense_matrix(self.pair_bytes, self.num_endpoints, np.int64)

    @property
    def slowdown(self) -> float:
        """Shared time over time alone (1.0: the other jobs cost it nothing)."""
        return self.shared_s / self.alone_s if self.alone_s > 0 else 1.0


@dataclass
class ContendedLink:
    """A link over which two or more jobs' bytes drained at the same time: contended if it
    was full meanwhile (a job there could go faster only at another's expense; full with
    nobody waiting too, where each job's flows are held elsewhere at exactly their share)."""

    link: tuple
    # every job that sends over it, those that run there at another time included (so
    # that the bytes add up to what the link carried in busy_s)
    bytes_by_job: dict[str, int]
    capacity_bytes_per_s: float
    busy_s: float  # in the shared run
    # the jobs whose bytes drained over it while another's did
    meeting: list[str] = field(default_factory=list)
    together_s: float = 0.0  # seconds during which two or more jobs' bytes drained over it
    # of together_s, the seconds during which the link was full: 0.0 for a link the jobs
    # shared without slowing each other there
    full_s: float = 0.0
    # the largest load (bytes/s) it carried in the shared run
    peak_load_bytes_per_s: float = 0.0
    # the largest load (bytes/s) it carried while two or more jobs drained over it
    peak_together_bytes_per_s: float = 0.0

    def apart(self) -> list[str]:
        """The jobs that send over the link, but never while another job's bytes drain there."""
        return [j for j in self.bytes_by_job if j not in self.meeting]

    @property
    def together_fraction(self) -> float:
        """How full it got while two or more jobs drained over it: that largest load over
        the capacity (0.0 without a capacity)."""
        cap = self.capacity_bytes_per_s
        return self.peak_together_bytes_per_s / cap if cap > 0 else 0.0


@dataclass
class JobsReport:
    jobs: list[JobReport]
    # links two or more jobs' bytes drained over at once while they were full, the
    # longest full together first
    contended: list[ContendedLink] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # links two or more jobs send over, but never while another's bytes drain there
    shared_apart: list[tuple] = field(default_factory=list)
    # links two or more jobs' bytes drained over at once, never while they were full (the
    # jobs did not slow each other there), the fullest first
    met_not_full: list[ContendedLink] = field(default_factory=list)


def _remap(op: Op, offset: int, req_base: int, compute_scale: float) -> Op:
    """``op`` of a job's rank as a combined rank runs it: peers and request ids moved,
    compute scaled by the job's ``workload.compute_scale``."""
    t = type(op)
    if t is Compute:
        return (
            op
            if compute_scale == 1.0
            else dataclasses.replace(op, duration_us=op.duration_us * compute_scale)
        )
    if t is Send or t is Recv:
        req = None if op.req is None else op.req + req_base
        return dataclasses.replace(op, peer=op.peer + offset, req=req)
    if t is Collective and op.req is not None:
        return dataclasses.replace(op, req=op.req + req_base)
    if t is Wait or t is Testany:
        return dataclasses.replace(op, reqs=tuple(r + req_base for r in op.reqs))
    return op


def combine(
    workloads: list[Workload],
    iterations: list[int],
    starts_s: list[float],
    compute_scales: list[float] | None = None,
    jobs: list[tuple[str, dict[str, Any]]] | None = None,
) -> Workload:
    """One workload running ``workloads`` side by side: job j's ranks follow job j - 1's,
    its phases run back to back ``iterations[j]`` times each, from ``starts_s[j]``
    (seconds), its compute times ``compute_scales[j]`` (default 1). ``jobs``: each
    job's name and complete schedule parameters (``JobRanks.collective_params``), with
    which its collectives are laid out; without, one workload keeps its own
    ``collective_params`` and several have none.

    Every group kind of any job partitions the combined world: a job without that kind
    contributes its ranks as groups of one (which it never uses).
    """
    offsets = []
    total = 0
    for w in workloads:
        offsets.append(total)
        total += w.world_size
    kinds = sorted({k for w in workloads for k in w.groups})
    groups: dict[str, list[tuple[int, ...]]] = {}
    for kind in kinds:
        out: list[tuple[int, ...]] = []
        for w, off in zip(workloads, offsets, strict=True):
            if kind in w.groups:
                out += [tuple(r + off for r in g) for g in w.groups[kind]]
            else:
                out += [(off + r,) for r in range(w.world_size)]
        groups[kind] = out
    owner = [j for j, w in enumerate(workloads) for _ in range(w.world_size)]
    scales = compute_scales or [1.0] * len(workloads)

    def program(rank: int) -> list[Op]:
        j = owner[rank]
        w, off = workloads[j], offsets[j]
        ops: list[Op] = []
        for k, phase in enumerate(w.phases):
            base = k * _REQ_STRIDE
            one = [_remap(op, off, base, scales[j]) for op in phase.program(rank - off)]
            ops += one * iterations[j]
        return ops

    start = [starts_s[owner[r]] for r in range(total)]
    parts: tuple[JobRanks, ...] = ()
    if jobs is not None:
        parts = tuple(
            JobRanks(name, off, off + w.world_size, dict(params))
            for (name, params), w, off in zip(jobs, workloads, offsets, strict=True)
        )
    return Workload(
        model="+".join(w.model for w in workloads),
        world_size=total,
        params={},
        groups=groups,
        phases=[Phase("jobs", program)],
        # (with jobs, each job's parameters are in its part, for its own groups)
        collective_params=dict(workloads[0].collective_params)
        if len(workloads) == 1 and not parts
        else {},
        rank_start_s=start if any(start) else None,
        jobs=parts,
    )


def _job_config(cfg: Config, index: int, endpoints: list[int]) -> Config:
    job = cfg.jobs[index]
    data = cfg.model_dump()
    data["workload"] = job.workload.model_dump()
    data["topology"]["placement"] = endpoints
    data["jobs"] = []
    # Stragglers name combined ranks: a job alone keeps those of its own ranks.
    first = sum(len(p) for p in cfg.job_placements()[:index])
    data["whatif"]["stragglers"] = {
        str(int(r) - first): f
        for r, f in cfg.whatif.stragglers.items()
        if first <= int(r) < first + len(endpoints)
    }
    return load_config(data)


def _in_job(index: int, name: str, message: str) -> str:
    """A job's configuration problem, named as the jobs list holds it."""
    if message.startswith("workload."):
        return f"jobs[{index}].{message}"
    return f"jobs[{index}] ({name}): {message.removeprefix('config: ')}"


def _end_s(phase: Any, ranks: range, start_s: float) -> float:
    """When the last of ``ranks`` ended its program in ``phase`` (``start_s`` if none
    ran)."""
    ends = phase.timeline.iteration_ends if phase.timeline is not None else {}
    return max((ends[r][-1] for r in ranks if ends.get(r)), default=start_s)


def _one_program(sub: Config, w: Workload, job: JobSection) -> tuple[Config, Workload]:
    """A job's configuration and workload as it runs alone: its phases back to back,
    as in the shared run."""
    one = combine([w], [job.workload.iterations], [0.0], [job.workload.compute_scale])
    data = sub.model_dump()
    data["workload"]["world_size"] = w.world_size
    data["workload"]["iterations"] = 1
    data["workload"]["compute_scale"] = 1.0  # in its program
    return load_config(data), one


def _schedule_params(alone: Config, w: Workload) -> dict[str, Any]:
    """The schedule parameters a job's collectives run with alone, complete: its
    workload's own where it gives them (the ring trainer's rings and group size), else
    the network's as its alone configuration has them (``alone``). The shared run lays
    the job's collectives out with these, so that a change of algorithm is never taken
    for a slowdown."""
    policy = build_policy(alone)
    cp = w.collective_params
    return {
        "rings": cp.get("rings") or policy.rings,
        "local_size": cp.get("local_size") or policy.local_size,
    }


def simulate_jobs(
    cfg: Config,
    run: Callable[..., Any],
    build: Callable[[Config], Workload],
    progress: Callable[[str], None] | None = None,
) -> Any:
    """Simulate ``cfg.jobs`` alone and together; ``run`` is :func:`simnet.simulate`
    (with the caller's options bound), called once per job and once for all, and
    ``build`` makes a configuration's workload (``simnet.simulate.build_workload``).
    Every job's configuration and workload are checked before anything runs (a
    ConfigError names ``jobs[i]``).

    Returns the shared run's ``SimResult`` (simulated as the jobs' ranks in one
    workload) with ``jobs`` set to a :class:`JobsReport` and ``config`` the one given,
    jobs and all.
    """
    placements = cfg.job_placements()
    subs: list[tuple[Config, Workload]] = []
    for i, job in enumerate(cfg.jobs):
        try:
            sub = _job_config(cfg, i, placements[i])
            subs.append((sub, build(sub)))
        except ConfigError as e:
            raise ConfigError(_in_job(i, job.name, str(e))) from None
    workloads = [w for _, w in subs]
    # Each job's ranks among the combined ranks: job j's after job j - 1's.
    ranks: list[range] = []
    for eps in placements:
        first = ranks[-1].stop if ranks else 0
        ranks.append(range(first, first + len(eps)))
    alone = []
    schedule_params = []
    for job, (sub, w), eps, mine in zip(cfg.jobs, subs, placements, ranks, strict=True):
        if progress is not None:
            progress(f"job {job.name}: alone on {len(eps)} endpoints")
        one_cfg, one = _one_program(sub, w, job)
        schedule_params.append((job.name, _schedule_params(one_cfg, w)))
        alone.append(run(one_cfg, progress=progress, workload=one, noise_streams_from=mine.start))
    # (with the what-ifs, as a single workload's)
    idle = [
        f"job {job.name}: {NO_COMPUTE}"
        for job, res in zip(cfg.jobs, alone, strict=True)
        if NO_COMPUTE in res.scenario
    ]
    notes = []
    if "workload" in cfg.model_fields_set:
        notes.append(
            "workload: the top-level section is not run; with jobs, each job runs its own "
            "(jobs[i].workload)"
        )
    combined = combine(
        workloads,
        [j.workload.iterations for j in cfg.jobs],
        [j.start_us / 1e6 for j in cfg.jobs],
        [j.workload.compute_scale for j in cfg.jobs],
        schedule_params,
    )
    data = cfg.model_dump()
    data["workload"]["world_size"] = combined.world_size
    data["workload"]["iterations"] = 1
    data["workload"]["compute_scale"] = 1.0  # each job's is in its programs
    data["topology"]["placement"] = [e for p in placements for e in p]
    data["jobs"] = []
    shared_cfg = load_config(data)
    if progress is not None:
        progress(f"all {len(cfg.jobs)} jobs together ({combined.world_size} ranks)")
    # The links two or more jobs send over alone (the same routes together): the shared
    # run records when their bytes drain there at once.
    used = [{k: b for k, b in res.phases[0].link_bytes.items() if b} for res in alone]
    shared_links = {k for i, u in enumerate(used) for k in u if any(k in o for o in used[i + 1 :])}
    shared = run(shared_cfg, progress=progress, workload=combined, watch_jobs=(shared_links, ranks))
    phase = shared.phases[0]
    pairs = phase.pair_bytes
    reports = []
    for job, eps, res, mine, link_bytes in zip(
        cfg.jobs, placements, alone, ranks, used, strict=True
    ):
        start = job.start_us / 1e6
        end = _end_s(phase, mine, start)
        here = set(eps)
        traffic = {k: b for k, b in pairs.items() if k[0] in here and k[1] in here}
        reports.append(
            JobReport(
                name=job.name,
                model=res.workload.model,
                ranks=(mine.start, mine.stop),
                endpoints=list(eps),
                start_s=start,
                scale=job.workload.scale,
                alone_s=_end_s(res.phases[0], range(len(eps)), 0.0),
                shared_s=end - start,
                pair_bytes=traffic,
                num_endpoints=phase.num_endpoints,
                link_bytes=link_bytes,
            )
        )
    net = phase.timeline.net
    contended, met, apart = _contended(
        reports, phase, net.meetings(), net.link_peak_load_bytes_per_s()
    )
    shared.jobs = JobsReport(reports, contended, notes, apart, met)
    # The configuration as given, jobs and all (what a rerun of the recorded one runs),
    # not the one combined workload the shared run was made of.
    shared.config = cfg
    shared.assumed.extend(notes)
    if idle:
        # (each job's line says it of that job: the combined workload's would say it twice)
        shared.scenario = [line for line in shared.scenario if line != NO_COMPUTE]
    shared.scenario.extend(idle)
    return shared


def _contended(
    reports: list[JobReport],
    phase: Any,
    meetings: dict[tuple, LinkMeeting],
    peaks: dict[tuple, float],
) -> tuple[list[ContendedLink], list[ContendedLink], list[tuple]]:
    """Of the links two or more jobs send over (``meetings``: the network's record of the
    links the jobs' alone runs share; ``peaks``: each link's largest load, bytes/s):
    those where their bytes drained at the same time while it was full, the longest full
    first (then the longest together, then where the job sending least there among those
    meeting sends most, then the busiest); those where they drained at the same time,
    never full, the fullest first; and those the jobs send over only at different times.
    A link's bytes are every job's there, those of a job that crossed it at another time
    too."""
    index = {r.name: i for i, r in enumerate(reports)}
    met, apart = [], []
    for k in sorted({k for r in reports for k in r.link_bytes}, key=repr):
        by_job = {r.name: r.link_bytes[k] for r in reports if r.link_bytes.get(k)}
        if len(by_job) < 2:
            continue
        seen = meetings.get(k, LinkMeeting(0.0, 0.0, []))
        job_s = seen.job_s
        meeting = [a for a in by_job if index[a] < len(job_s) and job_s[index[a]] > 0.0]
        if len(meeting) < 2:
            apart.append(k)
            continue
        met.append(
            ContendedLink(
                link=k,
                bytes_by_job=by_job,
                capacity_bytes_per_s=phase.link_capacity_bytes_per_s.get(k, 0.0),
                busy_s=phase.link_busy_s.get(k, 0.0),
                meeting=meeting,
                together_s=seen.together_s,
                full_s=seen.full_s,
                peak_load_bytes_per_s=peaks.get(k, 0.0),
                peak_together_bytes_per_s=seen.peak_together_bytes_per_s,
            )
        )

    def least_meeting(c: ContendedLink) -> int:
        return min(c.bytes_by_job[j] for j in c.meeting)

    contended = [c for c in met if c.full_s > 0.0]
    contended.sort(
        key=lambda c: (-c.full_s, -c.together_s, -least_meeting(c), -c.busy_s, repr(c.link))
    )
    not_full = [c for c in met if c.full_s <= 0.0]
    not_full.sort(key=lambda c: (-c.together_fraction, -c.together_s, repr(c.link)))
    return contended, not_full, apart
