"""Emulated hosts (workflows.netns): namespaces on a shaped switch carry TCP at the
configured rate less the protocol headers, and nothing is left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from workflows.netns import Cluster, TestbedError, namespaces

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


@needs_root
def test_tcp_between_hosts_runs_at_the_link_rate_less_headers():
    rate = 100e6  # bit/s
    with Cluster(2, rate) as c:
        assert sorted(n for n in namespaces() if n.startswith(c.tag)) == sorted(
            [c.switch, c.ns(0), c.ns(1)]
        )
        recv = subprocess.Popen(
            [*c.exec_prefix(1), sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True
        )
        assert recv.stdout is not None and recv.stdout.readline().strip() == "ready"
        subprocess.run(
            [*c.exec_prefix(0), sys.executable, "-c", SENDER, c.address(1)],
            check=True,
            timeout=30,
        )
        out, _ = recv.communicate(timeout=30)
        n, bytes_per_s = out.split()
        assert int(n) == 4 << 20
        # A 1514-byte Ethernet frame carries 1448 bytes of TCP payload (timestamps on).
        expect = rate / 8 * 1448 / 1514
        assert float(bytes_per_s) == pytest.approx(expect, rel=0.05)
    assert not [n for n in namespaces() if n.startswith(c.tag)]


@needs_root
def test_everything_is_removed_when_the_block_fails():
    with pytest.raises(RuntimeError, match="boom"), Cluster(2, 1e8) as c:
        tag = c.tag
        raise RuntimeError("boom")
    assert not [n for n in namespaces() if n.startswith(tag)]


@needs_root
def test_ctrl_c_in_the_block_leaves_nothing(tmp_path):
    # Ctrl-C in the block: the with statement still removes everything.
    with pytest.raises(KeyboardInterrupt), Cluster(3, 1e8) as c:
        tag = c.tag
        time.sleep(0.01)
        raise KeyboardInterrupt
    assert not [n for n in namespaces() if n.startswith(tag)]


def test_bad_clusters_are_refused_in_one_line():
    with pytest.raises(TestbedError, match="at least 2 hosts"):
        Cluster(1, 1e8)
    with pytest.raises(TestbedError, match="rate must be > 0"):
        Cluster(2, 0)


@needs_root
def test_testbed_runs_a_proxy_and_compares_it(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(
        json.dumps(
            {
                "distributed": {"num_nodes": 2, "bandwidth_limit_gb_per_s": 0.025},
                "topology": {"type": "switch", "num_nodes": 2},
                "workload": {"name": "dlrm", "scale": 0.02},
            }
        )
    )
    out = tmp_path / "tb"
    r = subprocess.run(
        [sys.executable, "-m", "simnet", "testbed", "--config", str(cfg), "--out", str(out),
         "--iters", "2", "--warmup", "1"],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "testbed.json").read_text())
    assert doc["cluster"] == {"hosts": 2, "ranks_per_host": 1, "link_rate_bit_per_s": 2e8}
    (ph,) = doc["phases"]
    assert ph["error_pct"] == pytest.approx(
        (ph["predicted_s"] - ph["measured_s"]) / ph["measured_s"] * 100
    )
    for h in doc["hosts"]:  # the wire carries the payload and its headers, never less
        assert h["wire_tx_bytes"] >= h["predicted_payload_tx_bytes"] > 0
    assert doc["parameters"]["network.alpha_us"]["from"] == "testbed pingpong"
    for name in ("testbed.txt", "testbed_phases.csv", "testbed_hosts.csv", "testbed_phases.png"):
        assert (out / name).stat().st_size > 0
    assert not [n for n in namespaces() if n.startswith("cs")]


def test_testbed_refuses_other_topologies_in_one_line(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"topology": {"type": "ring", "num_nodes": 10}}))
    r = subprocess.run(
        [sys.executable, "-m", "simnet", "testbed", "--config", str(cfg)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if os.geteuid() == 0:
        assert r.returncode == 2
        assert r.stderr.strip() == (
            "error: testbed: topology.type 'ring' is not supported yet; use switch"
        )
