"""``python -m simnet testbed --config CFG``: a workload on emulated hosts, against its prediction.

From the configuration's topology (switch, ring, hierarchical, torus or a small fat-tree;
``topology.num_nodes`` hosts of ``hosts.ranks_per_host`` ranks, default 1), makes a
:class:`workflows.netns.Cluster`: a network namespace per host and per switch, every
link a veth pair shaped to the model's link bandwidth, routes that follow the model's
routes, and a control network for the MPI launcher apart from them. Then:

1. calibrates what the emulated network adds beyond its nominal rates: MPI pingpongs
   between hosts (MPI over TCP) give the per-message cost of the TCP path and the payload
   share of the link rate; a second pair at another hop count, where the topology has
   one, gives the cost per hop;
2. runs the workload across the hosts: the configured proxy, or with ``--microbench`` the
   micro-benchmarks (``proxies.microbench``), under MPICH over TCP (``MPIR_CVAR_CH4_NETMOD=
   ofi FI_PROVIDER=tcp``; one MPI launcher proxy per host, so ranks of one host share
   memory and only ranks of different hosts use the links), counting on every host's
   links the bytes and packets it sends to every other host;
3. predicts the same workload on the same topology with those calibrated link
   parameters and this machine's processor (its host calibration: every emulated host
   runs on this machine's cores), and compares per case (seconds and %) and per host
   pair (TCP payload counted on the links against the predicted traffic).

Writes ``testbed.json`` (``cases``, ``geomean_abs_error_pct``, ``traffic`` per pair, the
calibration and where each parameter came from), ``testbed_cases.csv``,
``testbed_pairs.csv``, ``testbed.txt`` (also printed), ``testbed_cases.png`` and
``testbed_pairs.png``. Needs root and iproute2; refuses in one line otherwise. Every
namespace it makes is removed at the end, on error and on Ctrl-C/SIGTERM/SIGHUP.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from proxies.launch import SHARING_CORES_VAR
from simnet.config import Config, ConfigError, load_config
from simnet.hostparams import HostCalibrationError, load_host_calibration
from workload.brief_argparse import BriefParser
from workload.results import (
    UNFINISHED_MARKER,
    ResultsWriteError,
    lock_output_dir,
    mark_finished,
    mark_unfinished,
    output_dir_problem,
    versions,
    write_csv,
    write_json,
    write_text,
)
from workload.run_result import ProxyRun

from .launcher import (
    EXIT_TIMEOUT,
    as_mpi_run,
    ignored_settings,
    interrupt_cause,
    mpiexec,
    run_command,
    stop_on_signals,
)
from .netns import (
    ETHERNET_MTU_FRAME_BYTES,
    TCP_FRAME_HEADER_BYTES,
    Cluster,
    TestbedError,
    check_available,
    graph_problem,
    remove_stale,
)

EXIT_USAGE = 2
EXIT_FAILED = 1  # the run's results could not be written (e.g. a full disk)
MAX_RANKS_PER_HOST = 8
MAX_GSO_SEGS = 65535  # the kernel's largest gso_max_segs
OPS_SHOWN = 8  # operations in the summary, longest first
# MPI over TCP on the shaped interfaces only: e0 holds each host's address.
MPI_OVER_TCP = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "e0"}
# Calibration sizes (first, last, factor): small ones give the per-message cost, large
# ones (far past the shaper's burst of two frames) the rate.
CALIBRATION_SIZES = ("8", "2M", "4")
# The mean, as the cases are compared by their mean iteration (the best of each size made
# every prediction 2-5% fast).
CALIBRATION_STAT = "avg"
# Timed iterations per size (10 fitted 1-3% more payload than the workloads then got).
CALIBRATION_ITERS = 5
# TCP payload of a full Ethernet frame (1448 of 1514 bytes, timestamps on): the most of a
# link's rate a transfer can have.
MAX_PAYLOAD_SHARE = 1448 / ETHERNET_MTU_FRAME_BYTES
SMALL_BYTES = 512  # up to here a pingpong's time is the per-message cost
LARGE_BYTES = 1 << 16  # from here an exchange's time grows with the rate
DEFAULT_MICROBENCH_SIZES = ("64K", "4M", "4")
DEFAULTS = {"sizes": ",".join(DEFAULT_MICROBENCH_SIZES), "algorithm": "mpi"}


@dataclass
class Emulated:
    """What the testbed emulates: the hosts' network graph and ranks per host."""

    graph: nx.DiGraph  # endpoints = hosts; bandwidth bytes/s
    ranks_per_host: int

    @property
    def hosts(self) -> int:
        return int(self.graph.graph["num_endpoints"])


def _mbit(rate_bit_per_s: float, limit_bit_per_s: float) -> str:
    """``rate`` in Mbit/s with the digits that tell it from ``limit`` (1,000.08 beside
    1,000, not 1,000 beside 1,000)."""
    for digits in range(7):
        text = f"{rate_bit_per_s / 1e6:,.{digits}f}"
        if text != f"{limit_bit_per_s / 1e6:,.{digits}f}":
            return text
    return f"{rate_bit_per_s / 1e6:,.6f}"


def emulated(cfg: Config) -> Emulated:
    """The network the configuration describes, checked for what the testbed can do."""
    from simnet.simulate import build_topology

    if cfg.topology.effective_ecmp and cfg.topology.type != "hierarchical":
        raise TestbedError(
            "testbed: topology.ecmp spreads flows over routes per message, which static "
            "routes cannot follow; set it to false (a fat_tree has it on unless told)"
        )
    k = cfg.hosts.ranks_per_host or 1
    if k > MAX_RANKS_PER_HOST:
        raise TestbedError(
            f"testbed: at most {MAX_RANKS_PER_HOST} ranks per host on this machine "
            f"(hosts.ranks_per_host = {k})"
        )
    if cfg.topology.placement is not None:
        raise TestbedError("testbed: ranks are placed host-major; leave topology.placement unset")
    net = cfg.model_copy(update={"hosts": cfg.hosts.model_copy(update={"ranks_per_host": None})})
    graph, _ = build_topology(net)
    # Everything the cluster would refuse, refused before the host calibration.
    problem = graph_problem(graph)
    if problem:
        raise TestbedError(f"testbed: {problem}")
    fastest = max(d["bandwidth"] for _u, _v, d in graph.edges(data=True)) * 8
    if fastest > MAX_LINK_BIT_PER_S:
        raise TestbedError(
            f"testbed: links of {_mbit(fastest, MAX_LINK_BIT_PER_S)} Mbit/s; this machine "
            f"forwards at most about {MAX_LINK_BIT_PER_S / 1e6:,.0f} Mbit/s per emulated link (the "
            "payload "
            "would be a few percent of the rate, and the comparison about its processor): "
            "give the rates in GB/s, e.g. distributed.bandwidth_limit_gb_per_s = 0.0125 "
            "for 100 Mbit/s"
        )
    hosts = int(graph.graph["num_endpoints"])
    if cfg.world_size != hosts * k:
        raise TestbedError(
            f"testbed: the world size ({cfg.world_size}) must be hosts ({hosts}) x ranks "
            f"per host ({k})"
        )
    return Emulated(graph, k)


# -- launching ------------------------------------------------------------------------------


def launcher_script(cluster: Cluster, path: Path) -> Path:
    """The program MPI's launcher calls as ``ssh``: ``SCRIPT [-x ...] HOST COMMAND``
    runs COMMAND in the namespace of the host whose control address is HOST."""
    cases = "\n".join(
        f"  {cluster.control_address(h)}) ns={cluster.ns(h)} ;;" for h in range(cluster.hosts)
    )
    path.write_text(
        "#!/bin/sh\n"
        'while [ "${1#-}" != "$1" ]; do shift; done\n'
        'host=$1; shift\ncase "$host" in\n'
        f"{cases}\n"
        '  *) echo "testbed launcher: unknown host $host" >&2; exit 1 ;;\nesac\n'
        'exec ip netns exec "$ns" sh -c "$*"\n'
    )
    path.chmod(0o755)
    return path


def mpi_command(
    cluster: Cluster,
    script: Path,
    ranks_per_host: int,
    program: Sequence[str],
    hosts: Sequence[int] | None = None,
) -> list[str]:
    """``mpiexec`` in the control namespace, one launcher proxy per host (so MPI sees
    each namespace as a node: shared memory inside, TCP between), ranks host-major."""
    hosts = list(range(cluster.hosts)) if hosts is None else list(hosts)
    return [
        *cluster.control_prefix(),
        mpiexec(),
        "-launcher", "ssh", "-launcher-exec", str(script),
        "-localhost", cluster.control_address(),
        "-hosts", ",".join(f"{cluster.control_address(h)}:{ranks_per_host}" for h in hosts),
        "-n", str(ranks_per_host * len(hosts)),
        *program,
    ]  # fmt: skip


# -- calibration ----------------------------------------------------------------------------


def _rows(doc: dict[str, Any], op: str) -> tuple[np.ndarray, np.ndarray]:
    rows = sorted(
        (int(r["size_bytes"]), float(r["time_s"][CALIBRATION_STAT]))
        for r in doc["results"]
        if r["op"] == op
    )
    return np.array([r[0] for r in rows], float), np.array([r[1] for r in rows], float)


def fit_rate(doc: dict[str, Any], op: str) -> tuple[float, dict[str, Any]]:
    """Payload rate (bytes/s) of one TCP path from a micro-benchmark document's ``op``
    rows of at least ``LARGE_BYTES`` (pingpong: the one-way time; exchange: the time of a
    message while the two hosts also send each other theirs): the slope of time = a +
    size / rate. Smaller messages pass the shaper's bucket at once, so they would bend
    the line."""
    from workflows.calibrate import least_squares

    s, t = _rows(doc, op)
    large = s >= LARGE_BYTES
    if large.sum() < 2:
        raise TestbedError(f"the testbed's {op} gave fewer than 2 sizes of {LARGE_BYTES} B or more")
    a, beta, _ = least_squares(np.ones(large.sum()), s[large], t[large])
    rate = 1.0 / beta if beta > 0 else float("inf")
    return rate, {
        "op": op,
        "points": [{"size_bytes": int(x), "time_s": float(y)} for x, y in zip(s, t, strict=True)],
        "payload_rate_bytes_per_s": rate,
        "max_rel_error_large": float(np.max(np.abs(a + s[large] * beta - t[large]) / t[large])),
    }


ALPHA_SPREAD = 3.0  # small pingpong points further apart than this factor: a warning


def fit_alpha(doc: dict[str, Any]) -> float:
    """Per-message cost (s) of one TCP path: the pingpong's one-way time of its messages
    up to ``SMALL_BYTES``, which the shaper's bucket lets through at once. Each size is
    a sample of the one cost, so their median: one slow sample (the first message's
    connection set-up or page faults, a scheduler hiccup at few --iters) would take a
    share of itself into a mean (8 B at 757 us among three of 10-22 us made 202 us)."""
    s, t = _rows(doc, "pingpong")
    small = s <= SMALL_BYTES
    if not small.any():
        raise TestbedError(f"the testbed's pingpong gave no size of {SMALL_BYTES} B or less")
    return float(np.median(t[small]))


def alpha_spread_warning(doc: dict[str, Any], where: str) -> str | None:
    """A warning when the pingpong's small messages, which should all cost the same,
    differ by more than ``ALPHA_SPREAD`` times (None when they agree)."""
    s, t = _rows(doc, "pingpong")
    small = s <= SMALL_BYTES
    if not small.any() or not t[small].min() > 0:
        return None
    if t[small].max() / t[small].min() <= ALPHA_SPREAD:
        return None
    pairs = zip(s[small], t[small], strict=True)
    points = ", ".join(f"{int(x)} B {y * 1e6:.1f} us" for x, y in pairs)
    return (
        f"{where}: the pingpong's small messages, which should cost the same, disagree "
        f"({points}): the per-message cost takes their median, {fit_alpha(doc) * 1e6:.1f} us "
        "(more --iters steady them)"
    )


def frame_time_s(bandwidth_bytes_per_s: float) -> float:
    """Seconds a full Ethernet frame takes on a link: what a hop adds when it stores and
    forwards frame by frame."""
    return ETHERNET_MTU_FRAME_BYTES / bandwidth_bytes_per_s


@dataclass
class LinkCalibration:
    """What the emulated network adds beyond its nominal rates (model units)."""

    alpha_s: float  # per message, the software of both ends (MPI, TCP)
    efficiency_by_rate: dict[float, float]  # nominal bytes/s -> payload share of it
    hop_scale: float  # a hop's latency in frame times
    fits: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)  # samples that disagree

    def efficiency(self, bandwidth_bytes_per_s: float) -> float:
        """The payload share of a link of this rate: as measured at that rate, or at the
        nearest measured one (by ratio)."""
        near = min(self.efficiency_by_rate, key=lambda r: abs(math.log(r / bandwidth_bytes_per_s)))
        return self.efficiency_by_rate[near]

    def model_graph(self, graph: nx.DiGraph) -> nx.DiGraph:
        """``graph`` as the model sees the testbed: every link at its payload rate, every
        hop's latency ``hop_scale`` frame times."""
        out = graph.copy()
        for _u, _v, d in out.edges(data=True):
            d["latency"] = self.hop_scale * frame_time_s(d["bandwidth"])
            d["bandwidth"] = d["bandwidth"] * self.efficiency(d["bandwidth"])
        return out

    def describe_efficiency(self) -> str:
        return ", ".join(
            f"{100 * e:.2f}% at {r * 8 / 1e6:g} Mbit/s"
            for r, e in sorted(self.efficiency_by_rate.items())
        )


MAX_CALIBRATION_PAIRS = 3
# The fastest link the testbed emulates: this machine's two cores forward 400 Mbit/s
# at 71-91% payload (README), and well above it only a few percent.
MAX_LINK_BIT_PER_S = 1e9
# A calibrated payload share below this says the links ran slower than their rates.
LOW_EFFICIENCY = 0.5


def calibration_peers(cluster: Cluster) -> list[int]:
    """The hosts host 0 calibrates with: the nearest host of every distinct path
    bottleneck rate, and for the first rate also its host of the most hops, when that
    differs (at most ``MAX_CALIBRATION_PAIRS``)."""
    assert cluster.routes is not None
    g = cluster.graph

    def key(h: int) -> tuple[float, int]:
        path = cluster.routes[(0, h)]  # type: ignore[index]
        return min(g.edges[e]["bandwidth"] for e in path), len(path)

    peers: dict[float, list[int]] = {}
    for h in sorted(range(1, cluster.hosts), key=lambda h: (key(h)[1], h)):
        peers.setdefault(key(h)[0], []).append(h)
    chosen = [hs[0] for hs in peers.values()]
    first = next(iter(peers.values()))
    if key(first[-1])[1] > key(first[0])[1]:
        chosen.append(first[-1])
    return chosen[:MAX_CALIBRATION_PAIRS]


def calibrate_links(run_pair: Callable[[int], dict[str, Any]], cluster: Cluster) -> LinkCalibration:
    """Micro-benchmarks between host 0 and the :func:`calibration_peers` (``run_pair(peer)``
    returns the document of a pingpong and an exchange between hosts 0 and ``peer``):

    - the per-message cost, from the pingpong's small messages (one message at a time);
    - the payload share of each link rate, from the exchange's large messages: both
      directions of the path busy at once, as in collectives, where each direction also
      carries the other's acknowledgements;
    - with two hop counts at one rate, the cost of a hop in frame times (the pingpongs'
      difference); with one hop count it stays in the per-message cost."""
    assert cluster.routes is not None
    g = cluster.graph
    fits = []
    alphas = []
    warnings = []
    for peer in calibration_peers(cluster):
        doc = run_pair(peer)
        alpha = fit_alpha(doc)
        spread = alpha_spread_warning(doc, f"host 0 <-> host {peer}")
        if spread:
            warnings.append(spread)
        ping_rate, ping = fit_rate(doc, "pingpong")
        rate, exchange = fit_rate(doc, "exchange")
        path = cluster.routes[(0, peer)]
        bottleneck = min(g.edges[e]["bandwidth"] for e in path)
        frames = sum(frame_time_s(g.edges[e]["bandwidth"]) for e in path)
        alphas.append(alpha)
        fits.append(
            {
                "hosts": [0, peer],
                "hops": len(path),
                "nominal_rate_bytes_per_s": bottleneck,
                "efficiency": rate / bottleneck,
                "one_way_efficiency": ping_rate / bottleneck,
                "alpha_us": alpha * 1e6,
                "frame_times_s": frames,
                "pingpong": ping,
                "exchange": exchange,
            }
        )
    by_rate: dict[float, list[float]] = {}
    for f in fits:
        by_rate.setdefault(f["nominal_rate_bytes_per_s"], []).append(f["efficiency"])
    # No link carries more TCP payload than a full frame holds: a fit above that is noise.
    efficiency = {r: min(float(np.mean(e)), MAX_PAYLOAD_SHARE) for r, e in by_rate.items()}
    first = fits[0]
    twin = [
        (f, a)
        for f, a in zip(fits[1:], alphas[1:], strict=True)
        if f["nominal_rate_bytes_per_s"] == first["nominal_rate_bytes_per_s"]
        and f["frame_times_s"] > first["frame_times_s"]
    ]
    if twin:
        f, a = twin[0]
        scale = max(0.0, (a - alphas[0]) / (f["frame_times_s"] - first["frame_times_s"]))
    else:  # one hop count: the hops' share of the per-message cost cannot be told apart
        scale = 0.0
    # Every pair measures the same per-message cost (its hops taken out): their median,
    # not the first pair's alone, so that one pair's slow samples do not decide it.
    per_pair = [max(0.0, a - scale * f["frame_times_s"]) for f, a in zip(fits, alphas, strict=True)]
    alpha = float(np.median(per_pair))
    if len(per_pair) > 1 and min(per_pair) > 0 and max(per_pair) / min(per_pair) > ALPHA_SPREAD:
        warnings.append(
            "the host pairs' per-message costs disagree ("
            + ", ".join(
                f"host 0 <-> host {f['hosts'][1]} {a * 1e6:.1f} us"
                for f, a in zip(fits, per_pair, strict=True)
            )
            + f"): the model takes their median, {alpha * 1e6:.1f} us"
        )
    return LinkCalibration(alpha, efficiency, scale, fits, warnings)


# -- prediction -----------------------------------------------------------------------------


def predict(
    cfg: Config,
    em: Emulated,
    links: LinkCalibration,
    iterations: int,
    cpu: Any,
    workload: Any = None,
) -> Any:
    """The workload on the model of the testbed: its graph at the calibrated payload rates
    and hop latencies, the calibrated per-message cost, and ``cpu``, this machine's host
    parameters at the world size (``simnet.hostparams.HostParams``), whose processor
    effects apply since every emulated host runs on this machine's cores: the emulated
    compute's overshoot, the library collectives' reduction and per-step costs, and the
    memory copies of ranks sharing a host."""
    from simnet.simulate import simulate
    from topologies.hosts import with_hosts

    graph = links.model_graph(em.graph)
    notes = [
        f"links at {links.describe_efficiency()} of their rate (TCP/IP and Ethernet headers), "
        f"{links.hop_scale:.2f} frame times per hop, {links.alpha_s * 1e6:.1f} us per "
        "message: calibrated on the testbed"
    ]
    if em.ranks_per_host > 1:
        graph = with_hosts(
            graph,
            em.ranks_per_host,
            cpu.copy_bandwidth_bytes_per_s,
            rank_copy_bandwidth_bytes_per_s=cpu.rank_copy_bandwidth_bytes_per_s,
            copy_latency_s=cpu.copy_latency_s,
        )
        notes.append("copies inside a host from this machine's host calibration")
    up = cpu.processor_updates()
    new = cfg.model_copy(
        update={
            "hosts": cfg.hosts.model_copy(update=up["hosts"]),
            "collectives": cfg.collectives.model_copy(update=up["collectives"]),
            "network": cfg.network.model_copy(
                update={"alpha_us": links.alpha_s * 1e6, "link_params_file": None}
            ),
            "workload": cfg.workload.model_copy(update={"iterations": iterations}),
        }
    )
    new, mpi_notes = as_mpi_run(new)
    return simulate(
        new,
        record_series=False,
        topology=graph,
        topology_notes=[*notes, *mpi_notes],
        workload=workload,
    )


def host_pair_bytes(traffic: np.ndarray, ranks_per_host: int) -> np.ndarray:
    """[src host, dst host] bytes from a [src rank, dst rank] matrix (host-major ranks);
    the diagonal (inside a host) is zero."""
    n = len(traffic) // ranks_per_host
    m = np.asarray(traffic, dtype=np.int64).reshape(n, ranks_per_host, n, ranks_per_host)
    out = m.sum(axis=(1, 3))
    np.fill_diagonal(out, 0)
    return out


def measured_ops(trace_pattern: Path, world_size: int) -> dict[tuple[str, str], float]:
    """Mean seconds of every (phase, operation label) over ranks and timed iterations,
    from a proxy's Chrome traces, one per rank (microseconds there)."""
    acc: dict[tuple[str, str], list[float]] = {}
    for rank in range(world_size):
        doc = json.loads(Path(str(trace_pattern).format(rank=rank)).read_text())
        for e in doc["traceEvents"]:
            if e.get("ph") == "X":
                acc.setdefault((e["args"]["phase"], e["name"]), []).append(e["dur"] / 1e6)
    return {k: float(np.mean(v)) for k, v in acc.items()}


def predicted_ops(res: Any) -> dict[tuple[str, str], float]:
    """The same from a simulation's timelines (seconds)."""
    acc: dict[tuple[str, str], list[float]] = {}
    for ph in res.phases:
        sim = ph.timeline
        for r, tl in sim.timelines.items():
            ops = sim.programs[r]
            for s, e in zip(tl.starts, tl.ends, strict=True):
                for op, t0, t1 in zip(ops, s, e, strict=True):
                    acc.setdefault((ph.name, op.label), []).append(t1 - t0)
    return {k: float(np.mean(v)) for k, v in acc.items()}


EAGER_SEND_NOTE = (
    "an eager send: the model completes it when posted (its data is on its way; the "
    "testbed's per-message cost is paid in flight, no sender overhead is modelled), the "
    "real one when MPI has handed its data to TCP: no error is given"
)


def eager_sends(res: Any) -> set[tuple[str, str]]:
    """The (phase, label) pairs whose every operation is a blocking send of at most the
    eager threshold, on a model without a sender overhead (network.send_overhead_us 0):
    the model completes them at once by its protocol (see simnet.executor), so their
    predicted time is 0 by definition, not by a wrong estimate."""
    from workload.ops import Send

    net = res.config.network
    if net.send_overhead_us > 0:
        return set()
    eager: dict[tuple[str, str], bool] = {}
    for ph in res.phases:
        for ops in ph.timeline.programs:
            for op in ops:
                key = (ph.name, op.label)
                one = (
                    type(op) is Send
                    and op.req is None
                    and 4 * op.count_elems <= net.eager_threshold_bytes
                )  # (float32 elements)
                eager[key] = eager.get(key, True) and one
    return {k for k, v in eager.items() if v}


def op_rows(
    measured: dict, predicted: dict, eager: set[tuple[str, str]] | None = None
) -> list[dict[str, Any]]:
    """Per (phase, operation): mean measured and predicted seconds and the error, in the
    order of the measured time, longest first. ``eager`` (see :func:`eager_sends`): the
    operations the model completes at once, given no error (it would read -100%) but a
    note saying why."""
    eager = eager or set()
    rows = []
    for (ph, op), m in measured.items():
        if (ph, op) not in predicted:
            continue
        p = predicted[(ph, op)]
        row = {"phase": ph, "op": op, "measured_s": m, "predicted_s": p,
               "error_pct": None if (ph, op) in eager else _error_pct(p, m)}  # fmt: skip
        if (ph, op) in eager:
            row["note"] = EAGER_SEND_NOTE
        rows.append(row)
    return sorted(rows, key=lambda r: -r["measured_s"])


def _error_pct(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured * 100 if measured else float("nan")


def traffic_document(
    counted: dict[tuple[int, int], tuple[int, int]], predicted: np.ndarray, control_bytes: int
) -> dict[str, Any]:
    """Per host pair: the frames counted on the links, the TCP payload they carried (the
    bytes less 66 header bytes per segment), against the predicted bytes."""
    pairs = []
    for (s, d), (wire, packets) in sorted(counted.items()):
        payload = wire - TCP_FRAME_HEADER_BYTES * packets
        pred = int(predicted[s, d])
        pairs.append(
            {
                "src": s,
                "dst": d,
                "wire_bytes": wire,
                "packets": packets,
                "payload_bytes": payload,
                "predicted_bytes": pred,
                # None where the program sends nothing (the library's own set-up and
                # acknowledgements): -100% would read as a prediction that failed.
                # (and where nothing was counted: no relative error to give)
                "error_pct": _error_pct(pred, payload) if pred and payload > 0 else None,
            }
        )
    busy = [p for p in pairs if p["predicted_bytes"] or p["payload_bytes"] > 1 << 16]
    wire = sum(p["wire_bytes"] for p in pairs)
    payload = sum(p["payload_bytes"] for p in pairs)
    pred = sum(p["predicted_bytes"] for p in pairs)
    return {
        "pairs": pairs,
        "max_pair_error_pct": max(
            (100.0 if p["error_pct"] is None else abs(p["error_pct"]) for p in busy), default=0.0
        ),
        "total_wire_bytes": wire,
        "total_payload_bytes": payload,
        "total_predicted_bytes": pred,
        "header_overhead_pct": (wire - payload) / payload * 100 if payload else None,
        "payload_over_predicted_pct": _error_pct(payload, pred) if pred else None,
        "control_network_bytes": control_bytes,
        "note": "payload = bytes counted on the source host's link less 66 bytes (Ethernet, "
        "IPv4, TCP with timestamps) per segment; it holds the MPI library's own headers and "
        "messages besides the program's bytes",
    }


# -- the run --------------------------------------------------------------------------------


@dataclass
class TestbedWorkload:
    """What runs on the testbed: the argv after ``python``, how to read its measured
    cases, and how to predict them."""

    __test__ = False  # not a test class, whatever pytest makes of its name

    argv: list[str]
    result_json: Path
    measured: Callable[[Path], list[tuple[str, float]]]  # (case, seconds) from result_json
    model: Any  # a workload.program.Workload, or None for the configured one
    names: list[str]
    divisors: list[int]  # a case's figure is its iteration over this (pingpong: 2)
    repeats: int  # iterations run per phase (warm-up included), for the byte counts
    timed: int
    trace: Path | None = None  # every timed operation of every rank (a Chrome trace)


def trainer_workload(cfg: Config, out: Path) -> TestbedWorkload:
    """The ring trainer as the configuration trains it (``training`` epochs and steps,
    after its warm-up step), without its own pacing: the testbed's links are the limit."""
    from dataclasses import replace

    from workflows.endtoend import trainer_settings
    from workload.models import MODELS
    from workload.run_result import TrainerRun

    # Its pairwise bandwidth probe shrinks to one element per pair: the links carry
    # only the training's bytes and the model's figures are the ones compared.
    settings = replace(trainer_settings(cfg, out), bandwidth_limit=0.0, bandwidth_bytes=4)
    path = out / "measured.json"
    steps = cfg.training.num_epochs * cfg.training.steps_per_epoch

    def measured(result: Path) -> list[tuple[str, float]]:
        return [("step", TrainerRun.load(result).total_time_s / steps)]

    argv = ["-m", str(MODELS[cfg.workload.name].trainer_module), *settings.options()]
    return TestbedWorkload(argv, path, measured, None, [], [], steps + settings.warmup, 1)


def trainer_config(cfg: Config, iters: int, warmup: int | None) -> Config:
    """The configuration the testbed runs: the ring trainer's training as ``iters`` steps
    in one epoch (the configured 500 steps by default, on links of 100 Mbit/s, would take
    hours), so that the recorded configuration is what ran; others as they are."""
    from workload.models import MODELS

    model = MODELS.get(cfg.workload.name)
    if model is None or model.trainer_module is None:
        return cfg
    if warmup is not None:
        raise ConfigError("--warmup: the ring trainer runs its own warm-up step; leave it out")
    steps = cfg.training.model_copy(update={"num_epochs": 1, "steps_per_epoch": iters})
    return cfg.model_copy(update={"training": steps})


def proxy_workload(cfg: Config, iters: int, warmup: int, out: Path) -> TestbedWorkload:
    """The configured proxy (or the ring trainer) with ``iters`` timed iterations."""
    from workload.models import MODELS
    from workload.spec import CONFIG_NAMES, RunSpec, SpecError

    if cfg.workload.name not in MODELS:
        raise ConfigError(
            f"workload.name: unknown model {cfg.workload.name!r}; known: {', '.join(MODELS)}"
        )
    if MODELS[cfg.workload.name].trainer_module is not None:
        return trainer_workload(cfg, out)  # (as trainer_config sized it)
    spec = RunSpec(
        model=cfg.workload.name,
        args=tuple(cfg.workload.args),
        flags=dict(cfg.workload.flags),
        world_size=cfg.world_size,
        scale=cfg.workload.scale,
        iters=iters,
        warmup=warmup,
    )
    try:
        spec.workload()  # a layout the world size cannot take is refused before any work
    except SpecError as e:
        raise ConfigError(e.render(CONFIG_NAMES)) from None
    except ValueError as e:
        raise ConfigError(f"workload: {e}") from None
    path = out / "measured.json"

    def measured(result: Path) -> list[tuple[str, float]]:
        run = ProxyRun.load(result)
        return [(str(ph["phase"]), ProxyRun.slowest_s(ph)) for ph in run.phases]

    # One trace file per rank, written where the rank runs: a trace gathered to rank 0
    # would cross the links and count as the program's traffic.
    trace = out / "measured_trace.{rank}.json"
    argv = [*spec.proxy_argv(), "--json", str(path), "--trace", str(trace)]
    return TestbedWorkload(argv, path, measured, None, [], [], iters + warmup, iters, trace)


def microbench_workload(
    ops: Sequence[str],
    algorithm: str,
    sizes: Sequence[str],
    world: int,
    iters: int,
    warmup: int,
    out: Path,
) -> TestbedWorkload:
    from proxies import microbench as mb

    try:
        op_list = mb.parse_ops(",".join(ops))
    except (ValueError, mb.UsageError, argparse.ArgumentTypeError) as e:
        raise ConfigError(f"--microbench: {e}") from None
    try:
        first, last = mb.parse_size(sizes[0]), mb.parse_size(sizes[1])
    except (ValueError, argparse.ArgumentTypeError) as e:
        raise ConfigError(f"--sizes: {e}") from None
    factor = int(sizes[2]) if sizes[2].strip().isdigit() else 0
    if factor < 2 or first < 1:
        raise ConfigError(
            f"--sizes {','.join(sizes)}: FIRST must be at least 1 byte and FACTOR a whole "
            "number >= 2 (each size FACTOR times the last), e.g. 64K,16M,4"
        )
    try:
        visited = mb.message_sizes(first, last, factor, 1)
    except ValueError:
        raise ConfigError(f"--sizes {','.join(sizes)}: more than {mb.MAX_SIZES} sizes") from None
    cases, notes = mb.plan_cases(op_list, visited, world, algorithm,
                                 mb.DEFAULT_WINDOW)  # fmt: skip
    if not cases:
        why = "; ".join(n for ns in notes.values() for n in ns)
        why = why or f"no size from {sizes[0]} to {sizes[1]}: FIRST must be <= LAST"
        raise ConfigError(f"--microbench: nothing to run ({why})")
    path = out / "measured_microbench.json"
    argv = ["-m", "proxies.microbench", "--ops", ",".join(op_list), "--algorithm", algorithm,
            "-b", str(first), "-e", str(last), "-f", str(factor), "-n", str(iters),
            "-w", str(warmup), "--json", str(path)]  # fmt: skip

    def measured(result: Path) -> list[tuple[str, float]]:
        rows = json.loads(result.read_text())["results"]
        if len(rows) != len(cases):
            raise TestbedError(f"the micro-benchmark ran {len(rows)} of {len(cases)} cases")
        return [(c.phase, float(r["time_s"]["avg"])) for c, r in zip(cases, rows, strict=True)]

    wl = mb.build_workload(cases, world)
    names = [f"{c.spec.name} {c.algorithm} {c.size_bytes} B" for c in cases]
    # As the micro-benchmark reports them: pingpong half a round trip, stream and
    # exchange a message of the window.
    divisors = [2 if c.spec.name == "pingpong" else c.window for c in cases]
    return TestbedWorkload(argv, path, measured, wl, names, divisors, iters + warmup, iters)


class TestbedTimeout(TestbedError):
    """An MPI run on the testbed ran over --timeout: exit code 124 (as validate's, and
    timeout(1)'s), not the usage-error code."""


def _failed(what: str, r: Any, timeout_s: float) -> TestbedError:
    """The error of a failed MPI run on the testbed (a timeout's its own kind)."""
    kind = TestbedTimeout if r.returncode is None else TestbedError
    return kind(f"{what} failed: {_why(r, timeout_s)}")


def _why(r: Any, timeout_s: float) -> str:
    """Why an MPI run on the testbed failed, in one line."""
    if r.returncode is None:
        return f"it ran over {timeout_s:g} s and was stopped (raise --timeout)"
    tail = r.output.strip()[-300:].replace("\n", " | ")
    return f"exit code {r.returncode}: {tail}"


def run(
    cfg: Config,
    out: Path,
    work: TestbedWorkload,
    timeout_s: float,
    say: Callable[[str], None] = print,
    gso_max_segs: int | None = None,
    host_params: str | None = None,
) -> dict[str, Any]:
    """Make the cluster, calibrate, run, predict, compare; returns the document.
    ``host_params``: the host calibration file to use (None: this host's cached one,
    measured first if missing or stale)."""
    from workflows.machine import ThisMachine

    em = emulated(cfg)
    k = em.ranks_per_host
    py = sys.executable
    # Every emulated host runs on this machine's cores: the ranks decide on MPICH's
    # progress throttle and on polling as the ranks of one machine would.
    env = dict(os.environ, **MPI_OVER_TCP, **{SHARING_CORES_VAR: str(cfg.world_size)})
    out.mkdir(parents=True, exist_ok=True)
    check_available()
    try:
        stale, unknown = remove_stale()
    except (OSError, subprocess.SubprocessError) as e:
        stale, unknown = [], []
        say(f"note: could not look for namespaces a killed testbed left ({e})")
    if stale:
        say(
            f"removed {len(stale)} namespace(s) an earlier testbed left when it was killed: "
            + ", ".join(stale)
        )
    if unknown:
        say(
            f"note: namespaces {', '.join(unknown)} look like a testbed's but no lock says "
            "whose (an older version's?); if no testbed runs, remove them with "
            "`ip netns del NAME`"
        )
    machine = ThisMachine.calibrate(cfg.world_size, say, params_file=host_params)
    with (
        stop_on_signals(),
        Cluster(em.graph, gso_max_segs=gso_max_segs) as cluster,
        tempfile.TemporaryDirectory() as tmp,
    ):
        say(
            f"testbed: {cluster.hosts} hosts x {k} rank(s), {len(cluster.nodes) - cluster.hosts}"
            f" switch(es), {len(cluster.ports) // 2} links ({cluster.tag}*)"
        )
        script = launcher_script(cluster, Path(tmp) / "launch.sh")

        def pair(peer: int) -> dict[str, Any]:
            first, last, factor = CALIBRATION_SIZES
            path = Path(tmp) / f"pair{peer}.json"
            prog = [py, "-m", "proxies.microbench", "--ops", "pingpong,exchange", "-b", first, "-e",
                    last, "-f", factor, "-n", str(CALIBRATION_ITERS), "-w", "1", "--json",
                    str(path)]  # fmt: skip
            say(
                f"calibrating: pingpong and exchange, host 0 <-> host {peer} "
                f"({cluster.hops(0, peer)} hops)"
            )
            r = run_command(mpi_command(cluster, script, 1, prog, [0, peer]), timeout_s, env=env)
            if r.returncode != 0 or not path.exists():
                raise _failed("the testbed's calibration", r, timeout_s)
            return json.loads(path.read_text())

        links = calibrate_links(pair, cluster)
        warnings = list(links.warnings)
        for w in warnings:
            say(f"warning: {w}")
        low = {r: e for r, e in links.efficiency_by_rate.items() if e < LOW_EFFICIENCY}
        if low:
            warnings.append(
                f"the links carried {links.describe_efficiency()} of their rates: this "
                "machine cannot forward that fast, so the comparison tells about its "
                "forwarding more than about the links (slower links, or a quieter machine)"
            )
            say(f"warning: {warnings[-1]}")
        work.result_json.unlink(missing_ok=True)
        if work.trace is not None:
            for rank in range(cfg.world_size):
                Path(str(work.trace).format(rank=rank)).unlink(missing_ok=True)
        say(f"running: {shlex.join(['python', *work.argv])}")
        before = cluster.pair_counters()
        ctl_before = cluster.control_bytes()
        retrans_before = cluster.retransmitted_segments()
        r = run_command(mpi_command(cluster, script, k, [py, *work.argv]), timeout_s, env=env)
        after = cluster.pair_counters()
        control = cluster.control_bytes() - ctl_before
        retransmitted = [
            a - b for a, b in zip(cluster.retransmitted_segments(), retrans_before, strict=True)
        ]
        write_text(out / "workload_output.txt", r.output)
        if r.returncode != 0 or not work.result_json.exists():
            raise _failed("the workload", r, timeout_s)
        routes = {f"{s}->{d}": [list(map(str, e)) for e in p] for (s, d), p in
                  sorted((cluster.routes or {}).items())}  # fmt: skip
    measured = work.measured(work.result_json)
    say("predicting the same on the model of the testbed")
    res = predict(cfg, em, links, work.timed, machine.params, work.model)
    cases = []
    for i, ((name, m), ph) in enumerate(zip(measured, res.phases, strict=True)):
        label = work.names[i] if work.names else f"{cfg.workload.name} {name}"
        p = ph.iteration_time_s / (work.divisors[i] if work.divisors else 1)
        cases.append(
            {"name": label, "measured_s": m, "predicted_s": p, "error_pct": _error_pct(p, m)}
        )
    counted = {
        pair: (after[pair][0] - before[pair][0], after[pair][1] - before[pair][1]) for pair in after
    }
    # The counters saw every iteration run, warm-up included; the prediction the timed ones.
    pred = host_pair_bytes(res.traffic_bytes, k) * work.repeats // work.timed
    traffic = traffic_document(counted, pred, control)
    traffic["retransmitted_segments"] = sum(retransmitted)
    traffic["retransmitted_segments_by_host"] = retransmitted
    ops = []
    if work.trace is not None:
        per_op = measured_ops(work.trace, cfg.world_size)
        ops = op_rows(per_op, predicted_ops(res), eager_sends(res))
    errs = [abs(c["error_pct"]) for c in cases]
    cpu = machine.params
    return {
        "kind": "testbed",
        "config": cfg.model_dump(),
        "versions": versions(),
        "cluster": {
            "topology": cfg.topology.type,
            "hosts": em.hosts,
            "ranks_per_host": k,
            "switches": len(em.graph) - em.hosts,
            "links": [
                {"from": str(u), "to": str(v), "rate_bit_per_s": d["bandwidth"] * 8}
                for u, v, d in em.graph.edges(data=True)
            ],
            "routes": routes,
            "delays_emulated": False,
            "delays_note": "links are shaped in rate only (this kernel has no netem): the "
            "configuration's link latencies are not emulated, and the model takes the "
            "testbed's calibrated per-message and per-hop costs instead",
        },
        "calibration": {
            "alpha_us": links.alpha_s * 1e6,
            "efficiency_by_rate": [
                {"rate_bit_per_s": r * 8, "efficiency": e}
                for r, e in sorted(links.efficiency_by_rate.items())
            ],
            "efficiency_text": links.describe_efficiency(),
            "hop_frame_times": links.hop_scale,
            "pairs": links.fits,
            "source": "pingpong and exchange micro-benchmarks on the testbed (MPI over TCP)",
        },
        "parameters": {
            "network.alpha_us": {
                "value": links.alpha_s * 1e6,
                "from": "testbed pingpong (intercept)",
            },
            "link bandwidths": {
                "value": f"the configuration's x the payload share: {links.describe_efficiency()}",
                "from": "the configuration; the factor from the testbed exchange (slope)",
            },
            "link latencies": {
                "value": f"{links.hop_scale:.2f} frame times (1514 B at the link's rate)",
                "from": "testbed pingpongs at two hop counts"
                if len({f["hops"] for f in links.fits}) > 1
                else "none: in the per-message cost (one hop count on this topology)",
            },
            "topology and routes": {"value": cfg.topology.type, "from": "the configuration"},
            "processor and copies inside a host": {
                "value": machine.describe(),
                "from": machine.source,
            },
        },
        "cases": cases,
        "ops": ops,
        "geomean_abs_error_pct": float(np.exp(np.mean(np.log(np.maximum(errs, 0.01))))),
        "max_abs_error_pct": max(errs),
        "traffic": traffic,
        "workload_argv": ["python", *work.argv],
        "cpu_note": f"processor effects at {cpu.ranks_per_host} ranks on this machine",
        "warnings": warnings,
    }


def summary_text(doc: dict[str, Any]) -> str:
    c, cal, t = doc["cluster"], doc["calibration"], doc["traffic"]
    lines = [
        f"testbed: {c['topology']}, {c['hosts']} hosts x {c['ranks_per_host']} rank(s), "
        f"{c['switches']} switch(es), links of "
        + ", ".join(f"{r / 1e6:g}" for r in sorted({x["rate_bit_per_s"] for x in c["links"]}))
        + " Mbit/s (MPI over TCP)",
        f"calibrated on the testbed: {cal['alpha_us']:.1f} us per message, payload "
        f"{cal['efficiency_text']} of the link rate, {cal['hop_frame_times']:.2f} frame "
        "times per hop",
        "per case, time per iteration (slowest rank):",
    ]
    width = max(len(x["name"]) for x in doc["cases"])
    for x in doc["cases"]:
        lines.append(
            f"  {x['name']:<{width}}  measured {1e3 * x['measured_s']:10.3f} ms, predicted "
            f"{1e3 * x['predicted_s']:10.3f} ms, error {x['error_pct']:+.1f}%"
        )
    lines.append(
        f"geometric mean |error| {doc['geomean_abs_error_pct']:.1f}%, worst "
        f"{doc['max_abs_error_pct']:.1f}%"
    )
    if doc["ops"]:
        lines.append(
            f"the longest operations, mean per call (all {len(doc['ops'])} in testbed_ops.csv):"
        )
        shown = doc["ops"][:OPS_SHOWN]
        for r in shown:
            err = "-*" if r["error_pct"] is None else f"{r['error_pct']:+.1f}%"
            lines.append(
                f"  {r['phase'][:12]:<12} {r['op'][:28]:<28} measured "
                f"{1e3 * r['measured_s']:9.3f} ms, predicted {1e3 * r['predicted_s']:9.3f} ms, "
                f"error {err}"
            )
        if any(r["error_pct"] is None for r in shown):
            lines.append(f"  * {EAGER_SEND_NOTE}")
    lines.append(
        f"traffic: TCP payload on the links {t['total_payload_bytes']:,} B against "
        f"{t['total_predicted_bytes']:,} B predicted; worst pair {t['max_pair_error_pct']:.2f}%;"
        f" headers add {t['header_overhead_pct'] or 0:.1f}% on the wire; launcher traffic "
        f"{t['control_network_bytes']:,} B on the control network; "
        f"{t['retransmitted_segments']} TCP segments sent again"
    )
    if not c.get("delays_emulated", True) and c.get("delays_note"):
        lines.append(f"note: {c['delays_note']}")  # (the configured latency is not the run's)
    host = doc["parameters"]["processor and copies inside a host"]["value"]
    lines += [f"note: {n}" for n in host.get("notes", [])]  # (interpolated, from elsewhere)
    lines += [f"warning: {w}" for w in doc.get("warnings", [])]
    return "\n".join(lines) + "\n"


def write_outputs(doc: dict[str, Any], out: Path) -> None:
    from simnet import plots

    write_json(out / "testbed.json", doc)
    write_csv(
        out / "testbed_cases.csv",
        ["case", "measured_s", "predicted_s", "error_pct"],
        [[x["name"], x["measured_s"], x["predicted_s"], x["error_pct"]] for x in doc["cases"]],
    )
    write_csv(
        out / "testbed_ops.csv",
        ["phase", "op", "measured_s", "predicted_s", "error_pct"],
        [[r["phase"], r["op"], r["measured_s"], r["predicted_s"], r["error_pct"]]
         for r in doc["ops"]],
    )  # fmt: skip
    pairs = doc["traffic"]["pairs"]
    write_csv(
        out / "testbed_pairs.csv",
        ["src", "dst", "wire_bytes", "packets", "payload_bytes", "predicted_bytes", "error_pct"],
        [[p["src"], p["dst"], p["wire_bytes"], p["packets"], p["payload_bytes"],
          p["predicted_bytes"], "" if p["error_pct"] is None else p["error_pct"]]
         for p in pairs],
    )  # fmt: skip
    text = summary_text(doc)
    write_text(out / "testbed.txt", text)
    plots.measured_vs_predicted(
        list(range(len(doc["cases"]))),
        [x["measured_s"] for x in doc["cases"]],
        [x["predicted_s"] for x in doc["cases"]],
        out / "testbed_cases.png",
        title="testbed: time per iteration of each case, measured vs predicted",
        xlabel="case (testbed_cases.csv order)",
        ylabel="time (s)",
        integer_x=True,
    )
    plots.measured_vs_predicted(
        list(range(len(pairs))),
        [p["payload_bytes"] for p in pairs],
        [p["predicted_bytes"] for p in pairs],
        out / "testbed_pairs.png",
        title="testbed: bytes per host pair, TCP payload counted vs predicted",
        xlabel="host pair (testbed_pairs.csv order)",
        ylabel="bytes",
        integer_x=True,
    )
    from simnet.report import write_run_report

    write_run_report(out, "testbed: measured on emulated hosts vs predicted", text, doc["cases"],
                     files=[out / "testbed_cases.png", out / "testbed_pairs.png"],
                     config=doc.get("config"))  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    p = BriefParser(prog="python -m simnet testbed", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="configuration: topology, hosts, workload")
    p.add_argument(
        "--out", default=None, help="results directory (default: logging.log_dir/testbed)"
    )
    p.add_argument(
        "--iters",
        type=int,
        default=5,
        help="timed iterations; the ring trainer's training steps, in one epoch (default 5)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="warm-up iterations (default 1; not with the "
        "ring trainer, which runs its own warm-up step)",
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per MPI run")
    p.add_argument(
        "--microbench",
        default=None,
        metavar="OPS",
        help="run these micro-benchmarks (e.g. allreduce,alltoall) instead of the "
        "configured workload, on every rank of the testbed",
    )
    p.add_argument(
        "--algorithm",
        default=DEFAULTS["algorithm"],
        help="--microbench: mpi (the library's choice) or a schedule (ring, rabenseifner, ...)",
    )
    p.add_argument(
        "--sizes",
        default=DEFAULTS["sizes"],
        metavar="FIRST,LAST,FACTOR",
        help="--microbench sizes in nccl-tests' terms (default %(default)s)",
    )
    p.add_argument(
        "--host-params",
        default=None,
        metavar="FILE",
        help="the host model from this calibration (python -m simnet calibrate-host) "
        "instead of this host's cached one, which is measured when missing or stale",
    )
    p.add_argument(
        "--gso-max-segs",
        type=int,
        default=None,
        metavar="N",
        help="TCP segments a link takes at once (default: the kernel's)",
    )
    ns = p.parse_args(argv)
    try:
        for name in ("iters", "warmup"):
            v = getattr(ns, name)
            if v is not None and v < (1 if name == "iters" else 0):
                raise ConfigError(f"--{name} must be >= {1 if name == 'iters' else 0}")
        if not ns.timeout > 0:
            raise ConfigError(f"--timeout must be a number of seconds > 0 (got {ns.timeout:g})")
        g = ns.gso_max_segs
        if g is not None and not 1 <= g <= MAX_GSO_SEGS:
            raise ConfigError(f"--gso-max-segs must be 1..{MAX_GSO_SEGS} (got {g})")
        if ns.host_params:  # read now: a wrong file is refused before any work
            load_host_calibration(ns.host_params, "--host-params")
        cfg = load_config(ns.config)
        for note in ignored_settings(cfg):
            print(f"note: {note}", file=sys.stderr)
        out = Path(ns.out or Path(cfg.logging.log_dir) / "testbed")
        problem = output_dir_problem(out)
        if problem:
            raise ConfigError(problem)
        emulated(cfg)  # refuse a topology it cannot make before any work
        if not ns.microbench:
            given = [f"--{k}" for k in ("sizes", "algorithm") if getattr(ns, k) != DEFAULTS[k]]
            if given:
                raise ConfigError(
                    f"{' and '.join(given)}: for --microbench only (without it the "
                    "configured workload runs)"
                )
        if ns.microbench:
            sizes = ns.sizes.split(",")
            if len(sizes) != 3:
                raise ConfigError(f"--sizes: FIRST,LAST,FACTOR (got {ns.sizes!r})")
            work = microbench_workload(ns.microbench.split(","), ns.algorithm, sizes,
                                       cfg.world_size, ns.iters,
                                       1 if ns.warmup is None else ns.warmup, out)  # fmt: skip
        else:
            cfg = trainer_config(cfg, ns.iters, ns.warmup)
            work = proxy_workload(cfg, ns.iters, 1 if ns.warmup is None else ns.warmup, out)
        # Every check passed: held until its results are marked finished (or the process
        # ends), as another testbed writing into the folder would read this one's
        # measurements as its own (and this one its).
        problem = lock_output_dir(out)
        if problem:
            raise ConfigError(problem)
        mark_unfinished(out, "python -m simnet testbed")
        doc = run(
            cfg,
            out,
            work,
            ns.timeout,
            gso_max_segs=ns.gso_max_segs,
            host_params=ns.host_params,
        )
        write_outputs(doc, out)
    except (ConfigError, TestbedError, HostCalibrationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_TIMEOUT if isinstance(e, TestbedTimeout) else EXIT_USAGE
    except ResultsWriteError as e:  # a full disk: no partial file was left
        print(f"error: {e}; {UNFINISHED_MARKER} marks the folder as an unfinished run's",
              file=sys.stderr)  # fmt: skip
        return EXIT_FAILED
    except KeyboardInterrupt as e:
        print(
            f"\ninterrupted ({interrupt_cause(e)}): every process stopped, every namespace "
            "removed; "
            f"{UNFINISHED_MARKER} marks the folder as an unfinished run's",
            file=sys.stderr,
        )
        return 130
    mark_finished(out)
    print(summary_text(doc), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
