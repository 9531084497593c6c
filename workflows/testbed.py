"""``python -m simnet testbed --config CFG``: a proxy on emulated hosts, against its prediction.

From the configuration's ``switch`` topology (``topology.num_nodes`` hosts, one rank
each, or ``hosts.ranks_per_host``), makes a :class:`workflows.netns.Cluster`: a
network namespace per host on a bridge, every host-switch hop shaped to
``distributed.bandwidth_limit_gb_per_s``. Then:

1. calibrates what the emulated network adds beyond its nominal rate: a pingpong
   between two hosts (MPI over TCP) gives the per-message cost of the TCP path and
   the payload rate (the rate less the TCP/IP and Ethernet headers);
2. runs the configured proxy across the hosts (MPICH over TCP: ``MPIR_CVAR_CH4_NETMOD=
   ofi FI_PROVIDER=tcp MPIR_CVAR_NOLOCAL=1``, one ``ip netns exec`` per host), counting
   the bytes every host's interface sends and receives;
3. predicts the same workload on the same topology with those calibrated link
   parameters (and, with several ranks per host, this host's calibration inside
   hosts), and compares per phase (seconds and %) and per host (bytes on the wire
   against the predicted payload, with the header overhead).

Writes ``testbed.json`` (per phase measured/predicted/error; per host bytes; the
calibration and where each parameter came from), ``testbed_phases.csv``,
``testbed_hosts.csv``, ``testbed.txt`` (also printed) and ``testbed_phases.png``.
Needs root and iproute2; refuses in one line otherwise. Every namespace it makes is
removed at the end, on error and on Ctrl-C/SIGTERM/SIGHUP.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simnet.config import Config, ConfigError, load_config
from workload.brief_argparse import BriefParser
from workload.results import (
    output_dir_problem,
    versions,
    write_csv,
    write_json,
    write_text,
)
from workload.run_result import ProxyRun

from .launcher import mpiexec, run_command, stop_on_signals
from .netns import Cluster, TestbedError

EXIT_USAGE = 2
MPI_OVER_TCP = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "MPIR_CVAR_NOLOCAL": "1"}
# Pingpong sizes (first, last, factor): from 16 KiB up, past the shaper's burst of two
# frames that lets a small message through at once when the link was idle.
CALIBRATION_SIZES = ("16K", "4M", "4")


def mpmd_command(cluster: Cluster, ranks_per_host: int, program: Sequence[str]) -> list[str]:
    """``mpiexec -n k ip netns exec H0 PROGRAM : -n k ip netns exec H1 PROGRAM ...``."""
    cmd = [mpiexec()]
    for h in range(cluster.hosts):
        if h:
            cmd.append(":")
        cmd += ["-n", str(ranks_per_host), *cluster.exec_prefix(h), *program]
    return cmd


def interface_bytes(cluster: Cluster) -> list[tuple[int, int]]:
    """(tx, rx) bytes of every host's interface, from the kernel's counters."""
    out = []
    for h in range(cluster.hosts):
        stats = []
        for what in ("tx_bytes", "rx_bytes"):
            r = run_command(
                [*cluster.exec_prefix(h), "cat", f"/sys/class/net/eth0/statistics/{what}"], 10
            )
            stats.append(int(r.output.strip()))
        out.append((stats[0], stats[1]))
    return out


def fit_link(doc: dict[str, Any]) -> tuple[float, float, dict[str, Any]]:
    """Per-message cost (s) and payload rate (bytes/s) of the TCP path from a
    micro-benchmark document: pingpong one-way time = alpha + size x 2 hops / rate
    (the message crosses host -> switch -> host, each hop at the link rate)."""
    from workflows.calibrate import least_squares

    rows = sorted(
        (int(r["size_bytes"]), float(r["time_s"]["min"]))
        for r in doc["results"]
        if r["op"] == "pingpong"
    )
    if len(rows) < 2:
        raise TestbedError("the testbed's pingpong gave fewer than 2 sizes")
    s = np.array([r[0] for r in rows], float)
    t = np.array([r[1] for r in rows], float)
    alpha, beta, _ = least_squares(np.ones_like(t), s, t)
    # A store-and-forward switch would pay the bytes twice; the bridge forwards frame by
    # frame, so a long message pays them about once: the fitted beta is per message.
    rate = 1.0 / beta if beta > 0 else float("inf")
    model = alpha + s * beta
    fit = {
        "points": [{"size_bytes": int(a), "time_s": float(b)} for a, b in rows],
        "alpha_us": alpha * 1e6,
        "payload_rate_bytes_per_s": rate,
        "max_rel_error": float(np.max(np.abs(model - t) / t)),
    }
    return alpha, rate, fit


def predict(
    cfg: Config, alpha_s: float, rate_bytes_per_s: float, iters: int, cpu: Any = None
) -> Any:
    """The configured workload on the same switch, links at the calibrated payload rate
    and per-message cost (its latency folded into it). ``cpu``: this machine's host
    parameters (``simnet.hostparams.HostParams``) at the world size, whose processor
    effects apply since every emulated host runs on this machine's cores: the emulated
    compute's overshoot and the library collectives' reduction and per-step costs."""
    from simnet.simulate import simulate

    extra: dict[str, Any] = {}
    if cpu is not None:
        up = cpu.processor_updates()
        extra = {
            "hosts": cfg.hosts.model_copy(update=up["hosts"]),
            "collectives": cfg.collectives.model_copy(update=up["collectives"]),
        }
    new = cfg.model_copy(
        update={
            **extra,
            "distributed": cfg.distributed.model_copy(
                update={"bandwidth_limit_gb_per_s": rate_bytes_per_s / 1e9}
            ),
            "topology": cfg.topology.model_copy(update={"link_latency_us": 0.0}),
            "network": cfg.network.model_copy(update={"alpha_us": alpha_s * 1e6}),
            "workload": cfg.workload.model_copy(update={"iterations": iters}),
        }
    )
    return simulate(new, record_series=False)


def host_bytes(res: Any, hosts: int, ranks_per_host: int) -> list[tuple[int, int]]:
    """Predicted payload bytes every host sends to and receives from other hosts."""
    m = np.asarray(res.traffic_bytes, dtype=np.int64)
    host = np.arange(len(m)) // ranks_per_host
    out = []
    for h in range(hosts):
        mine = host == h
        out.append((int(m[mine][:, ~mine].sum()), int(m[~mine][:, mine].sum())))
    return out


def machine_cpu(world_size: int) -> tuple[Any, str]:
    """This machine's host parameters at ``world_size`` ranks from its cached calibration
    (``python -m simnet calibrate-host``), or (None, why not)."""
    from workflows import hostcal

    cal, line = hostcal.load_cached([world_size] if world_size > 1 else [2])
    if cal is None:
        return None, f"not used: {line}"
    params, note = cal.at(world_size)
    return params, f"{hostcal.cache_path(cal.key)}" + (f" ({note})" if note else "")


def run(cfg: Config, out: Path, iters: int, warmup: int, timeout_s: float) -> dict[str, Any]:
    """Make the cluster, calibrate, run, predict, compare; returns the document."""
    if cfg.topology.type != "switch":
        raise TestbedError(
            f"testbed: topology.type {cfg.topology.type!r} is not supported yet; use switch"
        )
    hosts = cfg.num_endpoints
    k = cfg.hosts.ranks_per_host or 1
    if cfg.world_size != hosts * k:
        raise TestbedError(
            f"testbed: the world size ({cfg.world_size}) must be hosts ({hosts}) x ranks "
            f"per host ({k})"
        )
    if k > 1:
        raise TestbedError("testbed: one rank per host for now (hosts.ranks_per_host = 1)")
    rate_bit = cfg.distributed.bandwidth_limit_gb_per_s * 8e9
    py = sys.executable
    env = dict(os.environ, **MPI_OVER_TCP)
    out.mkdir(parents=True, exist_ok=True)
    with (
        stop_on_signals(),
        Cluster(hosts, rate_bit) as cluster,
        tempfile.TemporaryDirectory() as tmp,
    ):
        # 1. what the emulated network adds: pingpong between hosts 0 and 1
        first, last, factor = CALIBRATION_SIZES
        cal_json = Path(tmp) / "pingpong.json"
        prog = [py, "-m", "proxies.microbench", "--ops", "pingpong", "-b", first, "-e", last,
                "-f", factor, "-n", "5", "-w", "1", "--json", str(cal_json)]  # fmt: skip
        r = run_command(mpmd_command(cluster, 1, prog), timeout_s, env=env)
        if r.returncode != 0 or not cal_json.exists():
            raise TestbedError(f"the testbed's pingpong failed: {r.output.strip()[-300:]}")
        alpha_s, rate, link_fit = fit_link(json.loads(cal_json.read_text()))
        # 2. the workload, with the interfaces' counters around it
        meas_json = out / "measured.json"
        meas_json.unlink(missing_ok=True)
        from workload.spec import RunSpec

        spec = RunSpec(
            model=cfg.workload.name,
            args=tuple(cfg.workload.args),
            flags=dict(cfg.workload.flags),
            world_size=cfg.world_size,
            scale=cfg.workload.scale,
            iters=iters,
            warmup=warmup,
        )
        prog = [py, *spec.proxy_argv(), "--json", str(meas_json)]
        before = interface_bytes(cluster)
        r = run_command(mpmd_command(cluster, k, prog), timeout_s, env=env)
        after = interface_bytes(cluster)
        write_text(out / "proxy_output.txt", r.output)
        if r.returncode != 0 or not meas_json.exists():
            raise TestbedError(f"the proxy run failed: {r.output.strip()[-300:]}")
    measured = ProxyRun.load(meas_json)
    cpu, cpu_source = machine_cpu(cfg.world_size)
    res = predict(cfg, alpha_s, rate, int(measured.iterations["timed"]), cpu)
    phases = []
    for ph_m, ph_p in zip(measured.phases, res.phases, strict=True):
        m = ProxyRun.slowest_s(ph_m)
        p = ph_p.iteration_time_s
        phases.append(
            {"phase": ph_p.name, "measured_s": m, "predicted_s": p, "error_pct": (p - m) / m * 100}
        )
    # The counters saw the warm-up iterations too; the prediction holds the timed ones.
    its = measured.iterations
    ran = int(its["timed"]) + int(its.get("warmup", 0))
    pred_bytes = [
        (tx * ran // int(its["timed"]), rx * ran // int(its["timed"]))
        for tx, rx in host_bytes(res, hosts, k)
    ]
    per_host = []
    for h in range(hosts):
        tx = after[h][0] - before[h][0]
        rx = after[h][1] - before[h][1]
        ptx, prx = pred_bytes[h]
        per_host.append(
            {
                "host": h,
                "wire_tx_bytes": tx,
                "wire_rx_bytes": rx,
                "predicted_payload_tx_bytes": ptx,
                "predicted_payload_rx_bytes": prx,
                "tx_overhead_pct": (tx - ptx) / ptx * 100 if ptx else None,
            }
        )
    errs = [abs(p["error_pct"]) for p in phases]
    return {
        "kind": "testbed",
        "config": cfg.model_dump(),
        "versions": versions(),
        "cluster": {"hosts": hosts, "ranks_per_host": k, "link_rate_bit_per_s": rate_bit},
        "calibration": link_fit
        | {
            "source": "pingpong between hosts 0 and 1 on the testbed (MPI over TCP)",
            "header_overhead_pct": (rate_bit / 8 / rate - 1) * 100,
        },
        "parameters": {
            "network.alpha_us": {"value": alpha_s * 1e6, "from": "testbed pingpong"},
            "distributed.bandwidth_limit_gb_per_s": {
                "value": rate / 1e9,
                "from": "testbed pingpong (payload rate)",
            },
            "topology": {"value": "switch", "from": "the configuration"},
            "processor effects (compute overshoot, library step and reduction costs)": {
                "value": None
                if cpu is None
                else {
                    "compute_overhead_us": cpu.compute_overhead_us,
                    "compute_stretch": cpu.compute_stretch,
                    "step_latency_us": cpu.step_latency_us,
                    "alltoall_step_latency_us": cpu.alltoall_step_latency_us,
                    "gamma_s_per_byte": cpu.gamma_s_per_byte,
                },
                "from": cpu_source,
            },
        },
        "phases": phases,
        "hosts": per_host,
        "geomean_abs_error_pct": float(np.exp(np.mean(np.log(np.maximum(errs, 0.01))))),
        "iterations": measured.iterations,
    }


def summary_text(doc: dict[str, Any]) -> str:
    c, cal = doc["cluster"], doc["calibration"]
    lines = [
        f"testbed: {c['hosts']} hosts x {c['ranks_per_host']} rank(s) on a switch, links of "
        f"{c['link_rate_bit_per_s'] / 1e6:g} Mbit/s (MPI over TCP)",
        f"calibrated on the testbed: {cal['alpha_us']:.1f} us per message, payload "
        f"{cal['payload_rate_bytes_per_s'] * 8 / 1e6:.1f} Mbit/s (headers "
        f"{cal['header_overhead_pct']:.1f}%)",
        "per phase, time per iteration (slowest rank):",
    ]
    for p in doc["phases"]:
        lines.append(
            f"  {p['phase']:<12} measured {1e3 * p['measured_s']:10.3f} ms, predicted "
            f"{1e3 * p['predicted_s']:10.3f} ms, error {p['error_pct']:+.1f}%"
        )
    lines.append("per host, bytes sent on the wire against the predicted payload:")
    for h in doc["hosts"]:
        ov = "-" if h["tx_overhead_pct"] is None else f"{h['tx_overhead_pct']:+.1f}%"
        lines.append(
            f"  host {h['host']}: wire {h['wire_tx_bytes']:,} B, payload predicted "
            f"{h['predicted_payload_tx_bytes']:,} B ({ov})"
        )
    return "\n".join(lines) + "\n"


def write_outputs(doc: dict[str, Any], out: Path) -> None:
    from simnet import plots

    write_json(out / "testbed.json", doc)
    write_csv(
        out / "testbed_phases.csv",
        ["phase", "measured_s", "predicted_s", "error_pct"],
        [[p["phase"], p["measured_s"], p["predicted_s"], p["error_pct"]] for p in doc["phases"]],
    )
    write_csv(
        out / "testbed_hosts.csv",
        ["host", "wire_tx_bytes", "wire_rx_bytes", "predicted_payload_tx_bytes",
         "predicted_payload_rx_bytes"],
        [[h["host"], h["wire_tx_bytes"], h["wire_rx_bytes"], h["predicted_payload_tx_bytes"],
          h["predicted_payload_rx_bytes"]] for h in doc["hosts"]],
    )  # fmt: skip
    write_text(out / "testbed.txt", summary_text(doc))
    plots.measured_vs_predicted(
        list(range(len(doc["phases"]))),
        [p["measured_s"] for p in doc["phases"]],
        [p["predicted_s"] for p in doc["phases"]],
        out / "testbed_phases.png",
        title="testbed: time per iteration, measured vs predicted",
        xlabel="phase",
        ylabel="time (s)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = BriefParser(prog="python -m simnet testbed", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="configuration (a switch topology)")
    p.add_argument(
        "--out", default=None, help="results directory (default: logging.log_dir/testbed)"
    )
    p.add_argument("--iters", type=int, default=5, help="timed iterations of the proxy")
    p.add_argument("--warmup", type=int, default=1, help="warm-up iterations of the proxy")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per MPI run")
    ns = p.parse_args(argv)
    try:
        cfg = load_config(ns.config)
        out = Path(ns.out or Path(cfg.logging.log_dir) / "testbed")
        problem = output_dir_problem(out)
        if problem:
            raise ConfigError(problem)
        doc = run(cfg, out, ns.iters, ns.warmup, ns.timeout)
    except (ConfigError, TestbedError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\ninterrupted: every process stopped, every namespace removed", file=sys.stderr)
        return 130
    write_outputs(doc, out)
    print(summary_text(doc), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
