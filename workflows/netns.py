"""Emulated hosts on this machine: Linux network namespaces joined by shaped veth links.

A :class:`Cluster` makes, under one unique name prefix, a namespace per host and one
switch namespace holding a Linux bridge; every host is linked to the switch by a veth
pair whose two ends are shaped with ``tc`` (a token bucket for the rate, netem for the
delay), so traffic between hosts crosses two shaped hops, as on a switched network.
Nothing is created in the root namespace except the namespaces' names: the veth pairs
are moved into their namespaces at once, and all traffic stays inside.

Safety: it refuses with one line when not root or when ``ip``/``tc`` are missing; it
touches only what it created (names with its prefix); it removes everything it made
when the ``with`` block ends, on success, error, Ctrl-C, SIGTERM and SIGHUP
(:func:`workflows.launcher.stop_on_signals`), and checks that nothing is left.

Units: rates in bits per second as ``tc`` takes them (``rate_bit_per_s``), delays in
microseconds per direction of each hop.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

PREFIX = "cs"  # every name this module makes starts with it, then a random tag


class TestbedError(RuntimeError):
    """The testbed cannot be made here; worded for the user in one line."""

    __test__ = False  # not a test class, whatever pytest makes of its name


def check_available() -> None:
    """Refuse, in one line, where namespaces cannot be made."""
    if os.geteuid() != 0:
        raise TestbedError("the testbed needs root (network namespaces and tc); run as root")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise TestbedError(f"the testbed needs `{tool}` (iproute2); install it")


def _run(cmd: Sequence[str], timeout_s: float = 20.0) -> str:
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s)
    if r.returncode != 0:
        raise TestbedError(f"`{' '.join(cmd)}` failed: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def namespaces() -> list[str]:
    """Names of every network namespace on this machine."""
    out = _run(["ip", "netns", "list"])
    return [line.split()[0] for line in out.splitlines() if line.strip()]


@dataclass
class Cluster:
    """``hosts`` namespaces on one switch; each host-switch hop shaped to
    ``rate_bit_per_s`` and ``delay_us`` in each direction."""

    hosts: int
    rate_bit_per_s: float
    delay_us: float = 0.0
    tag: str = field(default_factory=lambda: PREFIX + secrets.token_hex(3))
    made: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.hosts < 2:
            raise TestbedError(f"a testbed needs at least 2 hosts (got {self.hosts})")
        if not self.rate_bit_per_s > 0:
            raise TestbedError(f"the link rate must be > 0 bit/s (got {self.rate_bit_per_s})")

    def ns(self, host: int) -> str:
        return f"{self.tag}h{host}"

    @property
    def switch(self) -> str:
        return f"{self.tag}sw"

    def address(self, host: int) -> str:
        """The host's IPv4 address (one /24 per cluster, inside its namespaces only)."""
        return f"10.77.0.{host + 1}"

    def __enter__(self) -> Cluster:
        check_available()
        try:
            self._make()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def _add_ns(self, name: str) -> None:
        _run(["ip", "netns", "add", name])
        self.made.append(name)
        _run(["ip", "-n", name, "link", "set", "lo", "up"])

    def _shape(self, ns: str, dev: str) -> None:
        # A token bucket one MTU deep carries the rate, so bursts do not exceed it; a
        # delay needs netem above it, which some kernels lack (this VM's does).
        rate = ["tbf", "rate", f"{self.rate_bit_per_s:.0f}bit", "burst", "3028", "latency", "1s"]
        tc = ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev]
        if not self.delay_us:
            _run([*tc, "root", *rate])
            return
        try:
            _run([*tc, "root", "handle", "1:", "netem", "delay", f"{self.delay_us:.0f}us"])
        except TestbedError:
            raise TestbedError(
                "this kernel has no netem qdisc, so link delays cannot be emulated; use "
                "delay 0 (links shaped in rate only)"
            ) from None
        _run([*tc, "parent", "1:1", "handle", "10:", *rate])

    def _make(self) -> None:
        self._add_ns(self.switch)
        sw = self.switch
        _run(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", sw, "link", "set", "br0", "up"])
        for h in range(self.hosts):
            ns = self.ns(h)
            self._add_ns(ns)
            # Created inside the host's namespace, the peer moved to the switch: neither
            # end ever appears in the root namespace.
            _run(["ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name",
                  f"p{h}", "netns", sw])  # fmt: skip
            _run(["ip", "-n", ns, "addr", "add", f"{self.address(h)}/24", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", sw, "link", "set", f"p{h}", "master", "br0"])
            _run(["ip", "-n", sw, "link", "set", f"p{h}", "up"])
            self._shape(ns, "eth0")
            self._shape(sw, f"p{h}")

    def exec_prefix(self, host: int) -> list[str]:
        """The command prefix that runs a program inside the host's namespace."""
        return ["ip", "netns", "exec", self.ns(host)]

    def remove(self) -> None:
        """Delete every namespace this cluster made (their links go with them), then
        check that none is left; raises TestbedError naming any that is."""
        for name in reversed(self.made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)
        left = [n for n in namespaces() if n.startswith(self.tag)]
        self.made = left
        if left:
            raise TestbedError(f"could not remove namespaces {', '.join(left)}")
