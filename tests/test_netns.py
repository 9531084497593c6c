"""Emulated hosts (workflows.netns): namespaces on a shaped switch carry TCP at the
configured rate less the protocol headers, and nothing is left behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import topologies
from simnet.hostparams import HostCalibration, HostParams
from workflows.netns import (
    ETHERNET_MTU_FRAME_BYTES,
    TCP_FRAME_HEADER_BYTES,
    Cluster,
    TestbedError,
    namespaces,
    switch_graph,
)

MSS = ETHERNET_MTU_FRAME_BYTES - TCP_FRAME_HEADER_BYTES  # TCP payload of a full frame

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None,
    reason="needs root and iproute2 (network namespaces, tc)",
)

RECEIVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5001)); s.listen(1); print("ready", flush=True)
conn, _ = s.accept(); n = 0; t0 = None
while True:
    b = conn.recv(1 << 20)
    if not b: break
    t0 = t0 or time.perf_counter(); n += len(b)
print(n, n / (time.perf_counter() - t0))
"""
SENDER = """
import socket, sys
s = socket.create_connection((sys.argv[1], 5001)); data = b"x" * (1 << 20)
for _ in range(4): s.sendall(data)
s.close()
"""


def _send_4_mib(c: Cluster, src: int, dst: int) -> str:
    """4 MiB over TCP from host src to host dst; the receiver's line: bytes, bytes/s."""
    recv = subprocess.Popen(
        [*c.exec_prefix(dst), sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True
    )
    assert recv.stdout is not None and recv.stdout.readline().strip() == "ready"
    subprocess.run(
        [*c.exec_prefix(src), sys.executable, "-c", SENDER, c.address(dst)],
        check=True,
        timeout=30,
    )
    out, _ = recv.communicate(timeout=30)
    return out


@needs_root
def test_tcp_between_hosts_runs_at_the_link_rate_less_headers():
    rate = 100e6  # bit/s
    with Cluster(switch_graph(2, rate)) as c:
        assert sorted(n for n in namespaces() if n.startswith(c.tag)) == sorted(
            [c.ns_of("sw"), c.ns(0), c.ns(1), c.control]
        )
        # A 1514-byte Ethernet frame carries 1448 bytes of TCP payload (timestamps on).
        expect = rate / 8 * 1448 / 1514
        # The shaper caps every transfer; a loaded machine's CPU can slow one below the
        # cap (10.4 MB/s against 12.0 once in a full suite run; the best of three 10.9,
        # while other simulations ran beside it), so the best of up to three must come
        # near it: within 15% below (a wrong rate or unit is far further off), never 5%
        # above.
        rates = []
        for _ in range(3):
            n, bytes_per_s = _send_4_mib(c, 0, 1).split()
            assert int(n) == 4 << 20
            rates.append(float(bytes_per_s))
            if rates[-1] == pytest.approx(expect, rel=0.05):
                break
        assert max(rates) <= expect * 1.05, rates
        assert max(rates) >= expect * 0.85, rates
    assert not [n for n in namespaces() if n.startswith(c.tag)]


@needs_root
def test_everything_is_removed_when_the_block_fails():
    with pytest.raises(RuntimeError, match="boom"), Cluster(switch_graph(2, 1e8)) as c:
        tag = c.tag
        raise RuntimeError("boom")
    assert not [n for n in namespaces() if n.startswith(tag)]


@needs_root
def test_ctrl_c_in_the_block_leaves_nothing(tmp_path):
    # Ctrl-C in the block: the with statement still removes everything.
    with pytest.raises(KeyboardInterrupt), Cluster(switch_graph(3, 1e8)) as c:
        tag = c.tag
        time.sleep(0.01)
        raise KeyboardInterrupt
    assert not [n for n in namespaces() if n.startswith(tag)]


def test_bad_clusters_are_refused_in_one_line():
    with pytest.raises(TestbedError, match="at least 2 hosts"):
        Cluster(switch_graph(1, 1e8))
    with pytest.raises(TestbedError, match=r"the link 0 -> 1 has no way back"):
        Cluster(topologies.ring(3, 1e7, bidirectional=False))
    with pytest.raises(TestbedError, match="at most 32 hosts"):
        Cluster(topologies.fat_tree(6, 1e7))


@needs_root
def test_routes_follow_the_model_and_every_pair_is_counted():
    # On a 4-host ring the model routes 0 -> 2 through host 1 (node order breaks the tie).
    g = topologies.ring(4, bandwidth_bytes_per_s=100e6 / 8)
    with Cluster(g) as c:
        assert [tuple(e) for e in c.routes[(0, 2)]] == [(0, 1), (1, 2)]
        before = c.pair_counters()
        fwd = c.ports[(1, 2)].dev  # host 1's link to host 2 forwards the flow

        def tx(host: int, dev: str) -> int:
            path = f"/sys/class/net/{dev}/statistics/tx_bytes"
            return int(subprocess.run([*c.exec_prefix(host), "cat", path], capture_output=True,
                                      text=True, check=True).stdout)  # fmt: skip

        fwd_before = tx(1, fwd)
        assert int(_send_4_mib(c, 0, 2).split()[0]) == 4 << 20
        after = c.pair_counters()
        wire, packets = (a - b for a, b in zip(after[(0, 2)], before[(0, 2)], strict=True))
        # TCP payload: the frames less their headers; only the handshake's options remain.
        assert 0 <= wire - TCP_FRAME_HEADER_BYTES * packets - (4 << 20) < 100
        assert after[(0, 1)] == before[(0, 1)] and after[(0, 3)] == before[(0, 3)]
        assert tx(1, fwd) - fwd_before >= 4 << 20
    assert not [n for n in namespaces() if n.startswith(c.tag)]


def _host_params(tmp_path) -> str:
    """A host model of known parameters, for --host-params: no calibration is measured,
    and this host's cached one is neither read nor written."""
    host = tmp_path / "host.json"
    cal = HostCalibration(
        {"hostname": "test", "cores": 2},
        "2026-01-01T00:00:00+00:00",
        [HostParams(n, 10.0, 100.0, 5.0, 1e-10, 200.0) for n in (2, 4)],
    )
    host.write_text(json.dumps(cal.to_json()))
    return str(host)


def _testbed(tmp_path, config: dict, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(config))
    out = tmp_path / "tb"
    r = subprocess.run(
        [sys.executable, "-m", "simnet", "testbed", "--config", str(cfg), "--out", str(out),
         "--iters", "2", "--warmup", "1", "--host-params", _host_params(tmp_path), *extra],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    return r, json.loads((out / "testbed.json").read_text())


@needs_root
def test_testbed_runs_a_proxy_and_compares_it(tmp_path):
    _, doc = _testbed(
        tmp_path,
        {
            "distributed": {"num_nodes": 2, "bandwidth_limit_gb_per_s": 0.025},
            "topology": {"type": "switch", "num_nodes": 2},
            "workload": {"name": "dlrm", "scale": 0.02},
        },
    )
    c = doc["cluster"]
    assert (c["hosts"], c["ranks_per_host"], c["switches"]) == (2, 1, 1)
    assert {x["rate_bit_per_s"] for x in c["links"]} == {2e8}
    (case,) = doc["cases"]
    assert case["name"] == "dlrm iteration"
    assert case["error_pct"] == pytest.approx(
        (case["predicted_s"] - case["measured_s"]) / case["measured_s"] * 100
    )
    # One case: its |error|, floored at 0.01% as every error in the geometric mean (a
    # prediction can match a measurement closer than that: 0.0016% was seen).
    assert doc["geomean_abs_error_pct"] == pytest.approx(max(abs(case["error_pct"]), 0.01))
    t = doc["traffic"]
    assert {(p["src"], p["dst"]) for p in t["pairs"]} == {(0, 1), (1, 0)}
    for p in t["pairs"]:  # the program's bytes and the library's own few
        assert p["wire_bytes"] > p["payload_bytes"] >= p["predicted_bytes"] > 0
        assert p["payload_bytes"] == p["wire_bytes"] - 66 * p["packets"]
    assert t["max_pair_error_pct"] < 5
    assert 0 < t["control_network_bytes"] < 100_000
    assert doc["parameters"]["network.alpha_us"]["from"] == "testbed pingpong (intercept)"
    (pair,) = doc["calibration"]["pairs"]
    assert pair["hosts"] == [0, 1] and pair["hops"] == 2
    out = tmp_path / "tb"
    for name in ("testbed.txt", "testbed_cases.csv", "testbed_pairs.csv", "testbed_cases.png",
                 "testbed_pairs.png"):  # fmt: skip
        assert (out / name).stat().st_size > 0
    assert not [n for n in namespaces() if n.startswith("cs")]


@needs_root
def test_ranks_of_one_host_share_memory_and_only_other_hosts_use_the_links(tmp_path):
    # Two ranks per host: an allreduce's intra-host messages must not appear on the links.
    _, doc = _testbed(
        tmp_path,
        {
            "distributed": {"num_nodes": 4, "bandwidth_limit_gb_per_s": 0.025},
            "topology": {"type": "switch", "num_nodes": 2},
            "hosts": {"ranks_per_host": 2},
        },
        "--microbench", "allreduce", "--algorithm", "ring", "--sizes", "1M,1M,2",
    )  # fmt: skip
    (case,) = doc["cases"]
    assert case["name"] == "allreduce ring 1048576 B"
    # A ring over ranks 0-1-2-3: one message of 1 MiB / 4 each way per step crosses
    # between the hosts (1 -> 2 and 3 -> 0), 6 steps, 3 iterations.
    # The payload is the program's bytes and MPI's headers (under 1%), plus the segments
    # TCP sent again (a loaded machine's stalls make it retransmit, up to a window).
    again = doc["traffic"]["retransmitted_segments_by_host"]
    assert sum(again) == doc["traffic"]["retransmitted_segments"]
    for p in doc["traffic"]["pairs"]:
        assert p["predicted_bytes"] == 3 * 6 * (1 << 20) // 4
        extra = p["payload_bytes"] - p["predicted_bytes"]
        assert 0 <= extra <= 0.01 * p["predicted_bytes"] + MSS * again[p["src"]]
    assert not [n for n in namespaces() if n.startswith("cs")]


def test_testbed_refuses_what_it_cannot_emulate_in_one_line(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"topology": {"type": "switch", "num_nodes": 10, "ecmp": True}}))
    r = subprocess.run(
        [sys.executable, "-m", "simnet", "testbed", "--config", str(cfg)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "error: testbed: topology.ecmp spreads flows over routes per message, which static "
        "routes cannot follow; set it to false (a fat_tree has it on unless told)"
    )

    def refusal(config: dict) -> str:
        cfg.write_text(json.dumps(config))
        r = subprocess.run(
            [sys.executable, "-m", "simnet", "testbed", "--config", str(cfg), "--out",
             str(tmp_path / "o")],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert r.returncode == 2, r.stdout + r.stderr
        return r.stderr

    # The default 10 GB/s links: far beyond what this machine forwards.
    assert refusal({"topology": {"type": "switch", "num_nodes": 10}}).startswith(
        "error: testbed: links of 80,000 Mbit/s; this machine forwards at most about "
        "1,000 Mbit/s per emulated link"
    )
    # A layout the world size cannot take: refused before namespaces or a calibration.
    gpt2 = {
        "distributed": {"num_nodes": 2, "bandwidth_limit_gb_per_s": 0.0125},
        "topology": {"type": "switch", "num_nodes": 2},
        "workload": {"name": "gpt2", "args": [8, 3]},
    }
    assert refusal(gpt2).startswith("error: workload: gpt2: the world size must be a multiple of")
    assert not (tmp_path / "o").exists()


@needs_root
def test_namespaces_a_killed_run_left_are_removed_and_a_running_ones_kept(tmp_path):
    # SIGKILL leaves a cluster's namespaces behind; the next testbed removes those whose
    # lock nobody holds (their maker ended), never those of one still running (it holds
    # its lock), and leaves alone those no lock file speaks for.
    import fcntl

    from workflows import netns

    stale, live, unknown = "cs0f0f0fh0", "cs0e0e0eh0", "cs0d0d0dh0"
    made = []
    held = None
    try:
        for name in (stale, live, unknown):
            subprocess.run(["ip", "netns", "add", name], check=True, timeout=20)
            made.append(name)
        os.makedirs(netns.OWNERS_DIR, exist_ok=True)
        Path(netns.OWNERS_DIR, "cs0f0f0f.lock").write_text("")
        held = os.open(Path(netns.OWNERS_DIR, "cs0e0e0e.lock"), os.O_RDWR | os.O_CREAT)
        fcntl.flock(held, fcntl.LOCK_EX)
        removed, unknowns = netns.remove_stale()
        assert stale in removed and live not in removed and unknown not in removed
        assert unknown in unknowns and live not in unknowns
        assert stale not in namespaces() and {live, unknown} <= set(namespaces())
        assert not Path(netns.OWNERS_DIR, "cs0f0f0f.lock").exists()
    finally:
        if held is not None:
            os.close(held)
        for name in made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)
        for tag in ("cs0e0e0e", "cs0f0f0f"):
            Path(netns.OWNERS_DIR, f"{tag}.lock").unlink(missing_ok=True)


@needs_root
def test_a_topology_too_big_to_emulate_is_refused_before_any_work(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"distributed": {"num_nodes": 33},
                               "topology": {"type": "switch", "num_nodes": 33}}))  # fmt: skip
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "simnet", "testbed", "--config", str(cfg), "--out",
         str(tmp_path / "o")],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "error: testbed: the topology has 33 hosts and 34 nodes; this machine emulates at "
        "most 32 hosts and 96 nodes; use fewer (topology.num_nodes)"
    )
    assert time.monotonic() - t0 < 60  # (no host calibration of 33 ranks first)


def _slow_two_hosts(tmp_path) -> Path:
    """A configuration of 2 hosts on 8 Mbit/s links: its runs take long."""
    cfg = tmp_path / "c.json"
    cfg.write_text(
        json.dumps(
            {
                "distributed": {"num_nodes": 2, "bandwidth_limit_gb_per_s": 0.001},
                "topology": {"type": "switch", "num_nodes": 2},
            }
        )
    )
    return cfg


@needs_root
def _remove_left(before: set[str]) -> list[str]:
    """Namespaces a failed run left (its processes killed, the namespaces deleted), so
    that one failure does not leave them to the next runs; returns their names."""
    left = [n for n in set(namespaces()) - before if n.startswith("cs")]
    for n in left:
        pids = subprocess.run(["ip", "netns", "pids", n], capture_output=True, text=True)
        for pid in pids.stdout.split():
            os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=20)
    return left


@pytest.mark.parametrize("presses", [1, 3])
def test_ctrl_c_during_a_testbed_run_stops_it_and_leaves_nothing(tmp_path, presses):
    # Three Ctrl-Cs 0.1 s apart used to cut the stop short: MPICH's launcher, killed
    # with the namespaces, left its /tmp/hydra_hwloc_xmlfile_* (one per host).
    from workflows.launcher import _descendants, _hydra_temp_files

    cfg = _slow_two_hosts(tmp_path)
    before = set(namespaces())
    p = subprocess.Popen(
        [sys.executable, "-m", "simnet", "testbed", "--config", str(cfg), "--out",
         str(tmp_path / "tb"), "--microbench", "stream", "--sizes", "4M,4M,2",
         "--host-params", _host_params(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        # Wait for MPI to run on the testbed (its launcher in the control namespace).
        while time.monotonic() < deadline and p.poll() is None:
            made = [n for n in set(namespaces()) - before if n.startswith("cs")]
            pids = [
                subprocess.run(["ip", "netns", "pids", n], capture_output=True, text=True).stdout
                for n in made
            ]
            held = _hydra_temp_files(_descendants(p.pid))
            if any(x.strip() for x in pids) and held:
                break
            time.sleep(0.2)
        assert p.poll() is None, p.communicate()
        assert held
        for _ in range(presses):
            p.send_signal(signal.SIGINT)
            time.sleep(0.1)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
            _remove_left(before)
    assert p.returncode == 130, err
    assert "every namespace removed" in err
    assert not _remove_left(before)
    assert [f for f in held if os.path.exists(f)] == []


@needs_root
def test_a_run_over_its_time_limit_is_stopped_and_leaves_nothing(tmp_path):
    cfg = _slow_two_hosts(tmp_path)
    before = set(namespaces())
    r = subprocess.run(
        [sys.executable, "-m", "simnet", "testbed", "--config", str(cfg), "--out",
         str(tmp_path / "tb"), "--timeout", "3", "--host-params", _host_params(tmp_path)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 124, r.stdout + r.stderr  # (a timeout, as validate and timeout(1))
    assert r.stderr.strip() == (
        "error: the testbed's calibration failed: it ran over 3 s and was stopped (raise --timeout)"
    )
    assert not [n for n in set(namespaces()) - before if n.startswith("cs")]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--sizes", "64K,64K,2"], "--sizes: for --microbench only (without it the configured"),
        (["--microbench", "bogus"], "--microbench: unknown operation 'bogus'; choose from "),
        (
            ["--microbench", "allreduce", "--sizes", "4M,64K,2"],
            "--microbench: nothing to run (no size from 4M to 64K: FIRST must be <= LAST)",
        ),
        (
            ["--microbench", "allreduce", "--sizes", "64K,1M,0.5"],
            "--sizes 64K,1M,0.5: FIRST must be at least 1 byte and FACTOR a whole number >= 2",
        ),
        (["--microbench", "allreduce", "--sizes", "64K,1M,x2"], "--sizes 64K,1M,x2: FIRST"),
        (["--host-params", "nonexist.json"], "--host-params: no such file 'nonexist.json'"),
        (["--timeout", "-1"], "--timeout must be a number of seconds > 0 (got -1)"),
        (["--gso-max-segs", "-1"], "--gso-max-segs must be 1..65535 (got -1)"),
    ],
)
def test_testbed_refuses_options_it_would_not_use_in_one_line(tmp_path, extra, message):
    cfg = tmp_path / "c.json"
    two = {"distributed": {"num_nodes": 2, "bandwidth_limit_gb_per_s": 0.0125},
           "topology": {"type": "switch", "num_nodes": 2}}  # fmt: skip
    cfg.write_text(json.dumps(two))
    r = subprocess.run(
        [sys.executable, "-m", "simnet", "testbed", "--config", str(cfg), "--out",
         str(tmp_path / "tb"), *extra],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith(f"error: {message}") and len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "tb" / "RUN_INCOMPLETE.txt").exists()  # refused: nothing ran
