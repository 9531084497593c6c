"""The prediction of a run on the machine it ran on: every rank on this one host,
as the host's calibration (``python -m simnet calibrate-host``) describes it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simnet.config import Config, HostsSection
from simnet.hostparams import HostParams
from workload.run_result import TrainerSettings


@dataclass
class ThisMachine:
    """The host this job ran on, as its calibration describes it: every rank on it."""

    params: HostParams
    source: str  # the parameter file
    notes: list[str]
    cores: int | None
    # Where the calibration was made, when not on this machine ("othernode, 64 cores"):
    # it then describes that host, and the descriptions say so.
    elsewhere: str | None = None

    @classmethod
    def calibrate(
        cls, world_size: int, say: Any, params_file: str | None = None, force: bool = False
    ) -> ThisMachine:
        """From ``params_file``, or this host's cached calibration (measured if stale)."""
        from simnet.hostparams import load_host_calibration
        from workflows import hostcal

        if params_file:
            cal, source = load_host_calibration(params_file, "--host-params"), params_file
        else:
            # (a 1-rank job sends nothing: it takes the 2-rank figures, with a note)
            ranks = sorted(r for r in {*hostcal.DEFAULT_RANKS, world_size} if r >= 2)
            cal, path = hostcal.calibrate_host(ranks, force=force, say=say)
            source = str(path)
        params, note = cal.at(world_size)
        notes = [note] if note else []
        here = hostcal.host_key()

        def differ(keys: tuple[str, ...]) -> list[str]:
            return [
                f"{k} {cal.key[k]} (here {here[k]})"
                for k in keys
                if k in cal.key and cal.key[k] != here[k]
            ]

        host, software = differ(("hostname", "cores", "machine")), differ(("mpich", "openmpi"))
        elsewhere = None
        if host:
            elsewhere = f"{cal.key.get('hostname')}, {cal.key.get('cores')} cores"
            notes.append(
                f"the host calibration {source} was not made on this machine: "
                + ", ".join(host + software)
            )
        elif software:
            notes.append(
                f"the host calibration {source} was made here with other MPI software: "
                + ", ".join(software)
            )
        return cls(params, source, notes, cal.key.get("cores"), elsewhere)

    def describe(self) -> dict[str, Any]:
        return {
            "ranks_per_host": self.params.ranks_per_host,
            "cores": self.cores,
            "copy_bandwidth_gb_per_s": self.params.copy_bandwidth_gb_per_s,
            "copy_latency_us": self.params.copy_latency_us,
            "rank_copy_bandwidth_gb_per_s": self.params.rank_copy_bandwidth_gb_per_s,
            "gamma_s_per_byte": self.params.gamma_s_per_byte,
            "step_latency_us": self.params.step_latency_us,
            "alltoall_step_latency_us": self.params.alltoall_step_latency_us,
            "send_overhead_us": self.params.send_overhead_us,
            "compute_overhead_us": self.params.compute_overhead_us,
            "compute_stretch": self.params.compute_stretch,
            "params_file": self.source,
            "notes": self.notes,
        }

    def why(self, beside_configured: bool = True) -> str:
        """One line: which prediction is meant to match the run, and why;
        ``beside_configured`` False: the only prediction made (validate's)."""
        cores = f" of {self.cores} cores" if self.cores else ""
        if self.elsewhere:
            where = f"the host its calibration describes ({self.elsewhere}; not this machine)"
            if not beside_configured:
                return (
                    f"predicted on {where}: its {self.params.ranks_per_host} ranks on one "
                    "host, sharing its memory copies, not on the network the configuration "
                    "describes"
                )
            return (
                f"this_machine is meant to match the run, but is predicted on {where}; "
                "configured predicts the network the configuration describes, which this run "
                "did not use"
            )
        if not beside_configured:
            return (
                f"predicted on this machine: its {self.params.ranks_per_host} ranks ran on "
                f"this one host{cores}, sharing its memory copies (calibrated here), not on "
                "the network the configuration describes"
            )
        return (
            f"this_machine is meant to match the run: its {self.params.ranks_per_host} ranks "
            f"ran on this one host{cores}, sharing its memory copies (calibrated here); "
            "configured predicts the network the configuration describes, which this run "
            "did not use"
        )


def machine_result(cfg: Config, machine: ThisMachine, **kw: Any):  # -> SimResult
    """The configured workload simulated on the calibrated host: every rank on it, the
    host's copy capacity and per-message cost, and its reduction cost."""
    from dataclasses import replace

    from simnet.simulate import simulate
    from workflows import hostcal
    from workload.models import MODELS

    p = machine.params
    paced = []
    limit = cfg.distributed.bandwidth_limit_gb_per_s
    model = MODELS.get(cfg.workload.name)
    trainer = model is not None and model.trainer_module is not None
    # The ring trainer paces every pair to the limit, and a rank sends to one peer at a
    # time in its rings: its copies go no faster than that, however fast the host.
    if trainer and 0 < limit < p.rank_copy_bandwidth_gb_per_s:
        paced.append(
            f"the ring trainer paces every pair to {limit:g} GB/s: a rank's copies capped "
            f"there (the host copies {p.rank_copy_bandwidth_gb_per_s:.3g} GB/s for one rank)"
        )
        p = replace(p, rank_copy_bandwidth_gb_per_s=limit)
    if trainer and limit > 0:
        # Measured here (10 ranks, 2 cores, polled progress): the chunks cost about 12%
        # of a step against whole transfers; the calibrated per-message costs do not
        # give it (it is MPICH's progress of many messages while ranks poll).
        chunk = TrainerSettings().chunk_bytes
        paced.append(
            f"the ring trainer sends every transfer in paced chunks of {chunk >> 20} MiB, "
            "the prediction whole: what the chunks cost beyond their per-message costs is "
            "not modelled"
        )
    cpu = p.processor_updates()
    mcfg = cfg.model_copy(
        update={
            "collectives": cfg.collectives.model_copy(update=cpu["collectives"]),
            # The hosts the configuration describes (its ranks per host, its host
            # calibration file) are not this one: the graph below is this host.
            "hosts": HostsSection(**cpu["hosts"]),
            "network": cfg.network.model_copy(
                update={
                    "alpha_us": 0.0,
                    "send_overhead_us": p.send_overhead_us,
                    "injection_bandwidth_gb_per_s": None,
                    # A link calibration describes the configured network, not this host.
                    "link_params_file": None,
                    # The protocol the host's costs were fitted with (hostcal.simulate_row:
                    # every message waits for its receiver, no request-to-send first): a
                    # handshake would pay the fitted per-message cost twice.
                    "eager_threshold_bytes": 0,
                    "rendezvous_handshake": False,
                }
            ),
        }
    )
    notes = [
        f"this machine: {p.ranks_per_host} ranks on one host, copy capacity "
        f"{p.copy_bandwidth_gb_per_s:.3g} GB/s, {p.copy_latency_us:.3g} us per message "
        f"(and {p.send_overhead_us:.3g} us at its sender, one after another), "
        f"gamma {p.gamma_s_per_byte:.3g} s/B, {p.step_latency_us:.3g} us per step of the "
        f"library's collectives ({p.alltoall_step_latency_us:.3g} us for alltoall), "
        f"from {machine.source}",
        *machine.notes,
        *paced,
    ]
    return simulate(
        mcfg, record_series=False, topology=hostcal.host_graph(p), topology_notes=notes, **kw
    )
