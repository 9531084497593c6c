"""What must be settled before MPI initialises: who we are, and MPI settings.

Nothing here imports mpi4py: the thread level and MPICH's progress throttle
only take effect if set before ``from mpi4py import MPI``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from workload.results import counted

# MPICH busy-polls; with more ranks than cores collectives crawl unless told
# to yield (measured: a 4-rank 1 MiB allreduce on 2 cores, 1.03 s vs 1.6 ms).
MPICH_THROTTLE = "MPIR_CVAR_CH4_PROGRESS_THROTTLE"
THROTTLE_VARS = {
    MPICH_THROTTLE: "1",
    "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "1",
    "OMPI_MCA_mpi_yield_when_idle": "1",  # Open MPI's counterpart; MPICH ignores it
}
# The reference proxies call plain MPI_Init (thread level single); the level
# changes which collective algorithms MPICH runs.
REFERENCE_THREAD_LEVEL = "single"
THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")

# Polled progress (see proxies.mpi_executor): a waiting rank tests its requests, then
# sleeps a fixed pause. A fixed pause keeps the cost of a library collective's steps
# steady, which the host model can calibrate: a pause that doubled up to 1 ms made a
# 4-rank 16 KiB allreduce on 2 cores take 4.5 ms on average (1.1 ms at best), a fixed
# 100 us pause 1.1 ms (0.95 ms at best). The pause grows with the ranks per core so
# that polling costs the host about the same share of its cores at any load.
POLL_PAUSE_PER_RANK_PER_CORE_S = 50e-6
POLL_PAUSE_MIN_S = 100e-6
POLL_PAUSE_MAX_S = 1e-3


def poll_pause_s(ranks_on_host: int, cores: int) -> float:
    """Seconds a polling rank sleeps between tests, for ``ranks_on_host`` ranks on
    ``cores`` cores: 50 us per rank per core, within 100 us .. 1 ms."""
    per_core = max(ranks_on_host, 1) / max(cores, 1)
    return min(max(POLL_PAUSE_PER_RANK_PER_CORE_S * per_core, POLL_PAUSE_MIN_S), POLL_PAUSE_MAX_S)


_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "SLURM_NTASKS", "MPI_LOCALNRANKS")
_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
# Ranks that share this machine's cores when the launcher's per-host count says fewer:
# emulated hosts (python -m simnet testbed) are namespaces on one machine.
SHARING_CORES_VAR = "COMMSIM_RANKS_SHARING_CORES"
_LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")


MPI_LAUNCHER_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")
"""Variables an MPI launcher sets in every process it starts (not Slurm's allocation
variables, which a process run by hand in a batch script sees too)."""


def mpi_launcher_size() -> int | None:
    """The world size an MPI launcher gave this process, or None if none started it."""
    for var in MPI_LAUNCHER_SIZE_VARS:
        v = os.environ.get(var, "")
        if v.isdigit():
            return int(v)
    return None


def slurm_step_size() -> int | None:
    """The tasks of the Slurm job step (srun) that started this very process, or None
    when srun did not start it directly: outside a step, or under a shell or launcher a
    task of the step runs (``srun -n 2 --pty bash``, then ``mpiexec ...``), which inherit
    the step's variables."""
    v = os.environ.get("SLURM_STEP_NUM_TASKS", "")
    if not v.isdigit() or "SLURM_PROCID" not in os.environ:
        return None
    try:
        with open(f"/proc/{os.getppid()}/comm") as f:
            parent = f.read().strip()
    except OSError:
        return None
    return int(v) if parent == "slurmstepd" else None


def _slurm_tasks_on_first_node() -> int | None:
    """Tasks on a node from SLURM_TASKS_PER_NODE ("32(x2)", "4,3(x2)": the first count)."""
    v = os.environ.get("SLURM_TASKS_PER_NODE", "")
    head = v.split(",")[0].split("(")[0]
    return int(head) if head.isdigit() else None


def _first_int(names: tuple[str, ...], default: int) -> int:
    for n in names:
        v = os.environ.get(n, "")
        if v.isdigit():
            return int(v)
    return default


@dataclass(frozen=True)
class LaunchInfo:
    """The job as the launcher describes it (before MPI is initialised)."""

    world_size: int
    rank: int
    local_size: int
    cores: int


def launch_info() -> LaunchInfo:
    """World size and rank from the launcher's environment (1 and 0 if none)."""
    world = _first_int(_SIZE_VARS, 1)
    # Without a per-host count (e.g. a multi-node srun), never assume all ranks share a host.
    local = _first_int(_LOCAL_SIZE_VARS, 0) or _slurm_tasks_on_first_node() or world
    local = max(local, _first_int((SHARING_CORES_VAR,), 0))
    return LaunchInfo(world, _first_int(_RANK_VARS, 0), local, os.cpu_count() or 1)


@dataclass
class MPISettings:
    """What was decided about MPI initialisation, reported with every result."""

    thread_level: str = REFERENCE_THREAD_LEVEL
    throttle: bool = False
    throttle_reason: str = ""
    oversubscribed: bool = False
    progress: str = "blocking"  # decided after start-up: see MPIExecutor
    poll_pause_s: float = POLL_PAUSE_MIN_S  # seconds between tests when polling
    env: dict[str, str] = field(default_factory=dict)

    def auto_progress(self) -> str:
        """``--progress auto``: poll when this host runs more ranks than it has cores
        (blocking ranks would spin on the cores the others need), else blocking."""
        return "poll" if self.oversubscribed else "blocking"

    def executor_options(self) -> dict[str, object]:
        """The ``MPIExecutor`` keywords these settings decide."""
        return {"progress": self.progress, "poll_pause_s": self.poll_pause_s}

    def progress_text(self) -> str:
        """The progress mode for a run's header, e.g. "poll (a test every 100 us)"."""
        if self.progress != "poll":
            return self.progress
        return f"poll (a test every {self.poll_pause_s * 1e6:.0f} us)"


def prepare_mpi(
    info: LaunchInfo, thread_level: str = REFERENCE_THREAD_LEVEL, throttle: bool | None = None
) -> MPISettings:
    """Apply settings that must precede MPI initialisation.

    throttle None: enable MPICH's progress throttle when this host runs more
    ranks than it has cores, unless the user exported MPICH's variable: then the
    environment is left as it is and what it says is reported. True / False: the
    throttle's variables are set / removed before MPI reads them, whatever the user
    exported. ``throttle`` of the result is what MPICH will read.
    """
    if thread_level not in THREAD_LEVELS:
        raise ValueError(
            f"thread level must be one of {', '.join(THREAD_LEVELS)} (got {thread_level!r})"
        )
    import mpi4py

    mpi4py.rc.thread_level = thread_level
    s = MPISettings(
        thread_level=thread_level,
        oversubscribed=info.local_size > info.cores,
        poll_pause_s=poll_pause_s(info.local_size, info.cores),
    )
    mpich = MPICH_THROTTLE
    exported = os.environ.get(mpich)
    if throttle is None and exported is not None:
        # The user's own setting is what MPICH takes: left as it is, and reported.
        s.throttle_reason = f"{mpich}={exported} in the environment"
    elif throttle is None:
        throttle = info.local_size > info.cores
        s.throttle_reason = (
            f"{counted(info.local_size, 'rank')} on {counted(info.cores, 'core')}"
            if throttle
            else f"{counted(info.local_size, 'rank')} "
            f"{'fits' if info.local_size == 1 else 'fit'} {counted(info.cores, 'core')}"
        )
        if throttle:
            for k, v in THROTTLE_VARS.items():
                os.environ.setdefault(k, v)
    elif throttle:
        s.throttle_reason = "requested"
        os.environ.update(THROTTLE_VARS)
    else:
        s.throttle_reason = "disabled by request"
        for k in THROTTLE_VARS:
            os.environ.pop(k, None)
    s.throttle = os.environ.get(mpich, "0") not in ("", "0")
    s.env = {k: os.environ[k] for k in THROTTLE_VARS if k in os.environ}
    return s
