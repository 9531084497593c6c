"""Emulated hosts on this machine: Linux network namespaces joined by shaped veth links.

A :class:`Cluster` turns a topology graph of the builders' data model
(:mod:`topologies.builders`, endpoints = hosts) into namespaces, under one unique
name prefix:

- one namespace per node, host or switch, every one an IP router;
- one veth pair per link, each direction shaped with ``tc`` to its edge's bandwidth
  (an HTB class at the link rate; netem under it for a delay, where the kernel has it);
- one address per node (``10.77.x.y/32`` on its first link interface ``e0``) and, in
  every namespace on a route, a static route per host pair that follows the model's own
  route (:class:`topologies.routing.Router`): the first hop in the source's main table,
  the later hops in a table per source, chosen by a ``from`` rule;
- a control network apart from the shaped one (a bridge in its own namespace, an
  interface ``c0`` in every host) for the MPI launcher, so only the program's traffic
  crosses the links;
- on every host interface, one HTB class per destination host, counting the bytes and
  packets that host sends to it (:meth:`Cluster.pair_counters`).

Nothing is created in the root namespace except the namespaces' names: every veth end
is made inside its namespace, and all traffic stays inside.

Safety: it refuses with one line when not root or when ``ip``/``tc`` are missing; it
touches only what it created (names with its prefix); it kills the processes left in
its namespaces and removes everything it made when the ``with`` block ends, on success,
error, Ctrl-C, SIGTERM and SIGHUP (:func:`workflows.launcher.stop_on_signals`), and
checks that nothing is left.

Units: edge bandwidths in bytes/s as the graph holds them, rates in bits per second as
``tc`` takes them, delays in microseconds per direction of each hop.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
import signal
import subprocess
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import networkx as nx

PREFIX = "cs"  # every name this module makes starts with it, then a random tag
MAX_HOSTS = 32  # each host is a few processes on this machine's cores
MAX_NODES = 96
# Ethernet (14) + IPv4 (20) + TCP with timestamps (32): what every TCP segment carries
# besides its payload, as the HTB counters see it (they count each GSO segment).
TCP_FRAME_HEADER_BYTES = 66
ETHERNET_MTU_FRAME_BYTES = 1514
SYSCTLS = (
    "net.ipv4.ip_forward=1",
    "net.ipv4.conf.all.rp_filter=0",
    "net.ipv4.conf.default.rp_filter=0",
    "net.ipv4.conf.all.send_redirects=0",
    "net.ipv4.conf.default.send_redirects=0",
    "net.ipv4.tcp_slow_start_after_idle=0",
)
# `tc -s class show`: this tc has no JSON for classes.
_CLASS_STATS = re.compile(r"class htb (\S+) .*?\n\s*Sent (\d+) bytes (\d+) pkt", re.S)


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


def _run(cmd: Sequence[str], timeout_s: float = 20.0, stdin: str | None = None) -> str:
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s, input=stdin)
    if r.returncode != 0:
        what = " ".join(cmd) if stdin is None else f"{' '.join(cmd)} <<{stdin.splitlines()[0]}..."
        raise TestbedError(f"`{what}` failed: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def namespaces() -> list[str]:
    """Names of every network namespace on this machine."""
    out = _run(["ip", "netns", "list"])
    return [line.split()[0] for line in out.splitlines() if line.strip()]


# A cluster's namespaces: its tag ("cs" and 6 hex digits), then h<i>, s<i> or c.
_OUR_NAME = re.compile(rf"^({PREFIX}[0-9a-f]{{6}})(?:[hs]\d+|c)$")
OWNERS_DIR = "/run/commsim-testbed"
"""Where a cluster keeps ``<tag>.lock``, locked (flock) by the process that made it for
as long as the cluster exists: namespaces whose lock nobody holds were left by a run that
was killed (the kernel drops a dead process's locks; no pid is compared, so neither a
reused pid nor another PID namespace misleads it)."""


def _owner_file(tag: str) -> str:
    return os.path.join(OWNERS_DIR, f"{tag}.lock")


def _take_lock(path: str) -> int | None:
    """An fd holding ``path``'s exclusive lock, or None if another process holds it."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def remove_stale() -> tuple[list[str], list[str]]:
    """Remove the namespaces of clusters whose maker has ended (a run killed with SIGKILL
    cannot remove its own): those of this module's names whose lock file nobody holds.
    Returns (the names removed, the names of this module's pattern left alone because no
    lock file says whose they are, e.g. made by an older version)."""
    tags: dict[str, list[str]] = {}
    for name in namespaces():
        m = _OUR_NAME.match(name)
        if m:
            tags.setdefault(m[1], []).append(name)
    removed: list[str] = []
    unknown: list[str] = []
    for tag, names in sorted(tags.items()):
        try:
            fd = _take_lock(_owner_file(tag))
        except OSError:  # no lock file: whose they are is not known
            unknown += sorted(names)
            continue
        if fd is None:
            continue  # a running testbed's
        try:
            for name in names:
                for pid in _netns_pids(name):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            for name in sorted(names, reverse=True):
                r = subprocess.run(["ip", "netns", "del", name], capture_output=True,
                                   timeout=20)  # fmt: skip
                if r.returncode == 0:
                    removed.append(name)
            if set(names) <= set(removed):
                os.unlink(_owner_file(tag))
        finally:
            os.close(fd)
    return sorted(removed), unknown


def _netns_pids(name: str) -> list[int]:
    r = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=20)
    return [int(p) for p in r.stdout.split() if p.isdigit()]


def size_problem(graph: nx.DiGraph) -> str | None:
    """Why this machine cannot emulate ``graph`` (too many hosts or nodes), or None."""
    from topologies.routing import endpoints

    hosts = len(endpoints(graph))
    nodes = graph.number_of_nodes()
    if hosts > MAX_HOSTS or nodes > MAX_NODES:
        return (
            f"the topology has {hosts} hosts and {nodes} nodes; this machine emulates at "
            f"most {MAX_HOSTS} hosts and {MAX_NODES} nodes; use fewer (topology.num_nodes)"
        )
    return None


def graph_problem(graph: nx.DiGraph) -> str | None:
    """Why ``graph`` cannot be made into a cluster (too few or too many hosts, a one-way
    link, a link without bandwidth), or None: a command checks it before its long work
    (a host calibration, MPI), not only when the namespaces are made."""
    from topologies.routing import endpoints

    hosts = len(endpoints(graph))
    if hosts < 2:
        return f"a testbed needs at least 2 hosts (got {hosts})"
    too_big = size_problem(graph)
    if too_big:
        return too_big
    for u, v, d in graph.edges(data=True):
        if not graph.has_edge(v, u):
            return (
                f"the link {u} -> {v} has no way back; a veth link carries both "
                "directions (topology.bidirectional = true)"
            )
        if not d["bandwidth"] > 0:
            return f"the link {u} -> {v} needs a bandwidth > 0 (got {d})"
    return None


COUNTING = 3  # handle of the counting HTB of every link


def _class_id(dst_host: int) -> str:
    return f"{COUNTING}:{0x10 + dst_host:x}"


def _address(index: int, net: int = 77) -> str:
    return f"10.{net}.{index // 200}.{index % 200 + 1}"


@dataclass(frozen=True)
class Port:
    """One end of a link: the interface ``dev`` of node ``node`` in namespace ``ns``."""

    node: Hashable
    ns: str
    dev: str


@dataclass
class Cluster:
    """The namespaces, links, routes and counters of one emulated topology.

    Args:
        graph: a topology (directed edges with ``bandwidth`` in bytes/s); every link must
            exist in both directions. Its endpoints ``0..H-1`` are the hosts.
        routes: the route of every ordered host pair as a list of directed edges
            (default: :class:`topologies.routing.Router` on ``graph``).
        delay_us: added delay of every hop and direction (netem), microseconds.
        gso_max_segs: the most TCP segments the kernel may hand a link at once (None:
            the kernel's default); 1 makes every hop forward frame by frame.
    """

    graph: nx.DiGraph
    routes: dict[tuple[int, int], Sequence[tuple[Hashable, Hashable]]] | None = None
    delay_us: float = 0.0
    gso_max_segs: int | None = None
    tag: str = field(default_factory=lambda: PREFIX + secrets.token_hex(3))
    made: list[str] = field(default_factory=list)
    # The fd holding the cluster's lock while its namespaces exist (see remove_stale).
    owner_fd: int | None = field(default=None, init=False, repr=False)
    delay_emulated: bool = True

    def __post_init__(self) -> None:
        from topologies.routing import Router, endpoints

        hosts = endpoints(self.graph)
        problem = graph_problem(self.graph)
        if problem:
            raise TestbedError(problem)
        self.hosts = len(hosts)
        switches = sorted((n for n in self.graph.nodes if n not in set(hosts)), key=str)
        self.nodes: list[Hashable] = [*hosts, *switches]
        self.index = {n: i for i, n in enumerate(self.nodes)}
        if self.routes is None:
            router = Router(self.graph)
            self.routes = {(s, d): router.path(s, d) for s in hosts for d in hosts if s != d}
        # Interface j of a node leads to its j-th neighbour, in node order.
        self.ports: dict[tuple[Hashable, Hashable], Port] = {}
        for n in self.nodes:
            peers = sorted(set(self.graph.successors(n)), key=self.index.__getitem__)
            for j, p in enumerate(peers):
                self.ports[(n, p)] = Port(n, self.ns_of(n), f"e{j}")

    # -- names and addresses -------------------------------------------------------------

    def ns_of(self, node: Hashable) -> str:
        i = self.index[node]
        return f"{self.tag}h{i}" if i < self.hosts else f"{self.tag}s{i - self.hosts}"

    def ns(self, host: int) -> str:
        """The namespace of host ``host``."""
        return self.ns_of(self.nodes[host])

    @property
    def control(self) -> str:
        """The namespace of the control network (the launcher runs there)."""
        return f"{self.tag}c"

    def address(self, host: int) -> str:
        """The host's IPv4 address on the shaped network (inside its namespaces only)."""
        return _address(host)

    def node_address(self, node: Hashable) -> str:
        return _address(self.index[node])

    def control_address(self, host: int | None = None) -> str:
        """A host's address on the control network; None: the control namespace's."""
        return "10.78.255.254" if host is None else _address(host, 78)

    def exec_prefix(self, host: int) -> list[str]:
        """The command prefix that runs a program inside the host's namespace."""
        return ["ip", "netns", "exec", self.ns(host)]

    def control_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.control]

    def hops(self, src: int, dst: int) -> int:
        assert self.routes is not None
        return len(self.routes[(src, dst)])

    # -- making and removing -------------------------------------------------------------

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
        if not self.made:  # the first: hold the cluster's lock (see remove_stale)
            try:
                os.makedirs(OWNERS_DIR, exist_ok=True)
                fd = os.open(_owner_file(self.tag), os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX)
                self.owner_fd = fd
            except OSError:
                pass  # (an unwritable /run: a killed run's namespaces stay as unknown)
        _run(["ip", "netns", "add", name])
        self.made.append(name)
        # Every node routes; the model's routes may come back asymmetric, so no reverse
        # path filter; and no redirects, which would steer hosts off the model's routes.
        _run(["ip", "netns", "exec", name, "sysctl", "-q", "-w", *SYSCTLS])

    def _batch(self, tool: str, ns: str, lines: list[str]) -> None:
        if lines:
            _run([tool, "-n", ns, "-batch", "-"], timeout_s=60, stdin="\n".join(lines) + "\n")

    def _counted(self) -> dict[tuple[Hashable, Hashable], list[int]]:
        """Per host port: the destination hosts whose traffic leaves through it."""
        assert self.routes is not None
        out: dict[tuple[Hashable, Hashable], list[int]] = {}
        for (_s, d), path in sorted(self.routes.items()):
            out.setdefault(tuple(path[0]), []).append(d)
        return out

    def _shaping(self, port: Port, bw_bytes_per_s: float, dests: list[int]) -> list[str]:
        """`tc` lines of one link direction: netem (a delay, when asked), then a token
        bucket at the link's rate, then an HTB that only counts: a class per destination
        host of the traffic this host sends there, and one for the rest."""
        dev = port.dev
        lines = []
        parent = "root"
        if self.delay_us > 0:
            lines.append(f"qdisc add dev {dev} root handle 1: netem delay {self.delay_us:.0f}us")
            parent = "parent 1:1"
        # A bucket two frames deep: the link sends no faster than its rate, and the token
        # bucket cuts a larger GSO chunk into frames, each paying for itself. Its queue
        # holds a second of traffic: a shorter one (50 ms) dropped segments under incast
        # (DLRM's alltoall), and their retransmissions put bytes on the links the program
        # did not send.
        lines.append(
            f"qdisc add dev {dev} {parent} handle 2: tbf rate {bw_bytes_per_s * 8:.0f}bit "
            "burst 3028 latency 1s"
        )
        fast = "htb rate 100gbit ceil 100gbit quantum 3028"
        lines += [
            f"qdisc add dev {dev} parent 2:1 handle {COUNTING}: htb default 2",
            f"class add dev {dev} parent {COUNTING}: classid {COUNTING}:2 {fast}",
        ]
        src = self.address(self.index[port.node]) if self.index[port.node] < self.hosts else None
        for d in dests:
            cid = _class_id(d)
            lines.append(f"class add dev {dev} parent {COUNTING}: classid {cid} {fast}")
            lines.append(
                f"filter add dev {dev} parent {COUNTING}: protocol ip prio 1 u32 match ip src "
                f"{src}/32 match ip dst {self.address(d)}/32 flowid {cid}"
            )
        return lines

    def _make(self) -> None:
        for n in self.nodes:
            self._add_ns(self.ns_of(n))
        self._add_ns(self.control)
        ip: dict[str, list[str]] = {self.ns_of(n): [] for n in self.nodes}
        ip[self.control] = []
        # Links: each made once, from its lower-indexed end, peer moved at once.
        for (u, v), port in self.ports.items():
            if self.index[u] < self.index[v]:
                peer = self.ports[(v, u)]
                ip[port.ns].append(
                    f"link add {port.dev} type veth peer name {peer.dev} netns {peer.ns}"
                )
        for ns, lines in ip.items():
            self._batch("ip", ns, lines)
            lines.clear()
        c = self.control
        ip[c] += ["link add br0 type bridge", "link set br0 up",
                  f"addr add {self.control_address()}/16 dev br0"]  # fmt: skip
        for h in range(self.hosts):
            ip[c].append(f"link add h{h} type veth peer name c0 netns {self.ns(h)}")
        self._batch("ip", c, ip[c])
        ip[c] = [
            f"link set h{h} {what}" for h in range(self.hosts) for what in ("master br0", "up")
        ]
        for h in range(self.hosts):
            ip[self.ns(h)] += [f"addr add {self.control_address(h)}/16 dev c0", "link set c0 up"]
        for n in self.nodes:
            ns = self.ns_of(n)
            ip[ns] += ["link set lo up", f"addr add {self.node_address(n)}/32 dev e0"]
            for (a, _b), port in self.ports.items():
                if a == n:
                    ip[ns].append(f"link set {port.dev} up")
                    if self.gso_max_segs:
                        ip[ns].append(f"link set {port.dev} gso_max_segs {self.gso_max_segs}")
        ip_rules = self._route_lines()
        for ns in ip:
            self._batch("ip", ns, ip[ns] + ip_rules.get(ns, []))
        counted = self._counted()
        for (u, v), port in self.ports.items():
            bw = self.graph.edges[u, v]["bandwidth"]
            lines = self._shaping(port, bw, counted.get((u, v), []))
            try:
                self._batch("tc", port.ns, lines)
            except TestbedError as e:
                if self.delay_us > 0 and "netem" in str(e):
                    raise TestbedError(
                        "this kernel has no netem qdisc, so link delays cannot be emulated; "
                        "use a delay of 0 (links shaped in rate only)"
                    ) from None
                raise

    def _route_lines(self) -> dict[str, list[str]]:
        """`ip` lines per namespace: the model's route of every host pair, hop by hop."""
        assert self.routes is not None
        out: dict[str, list[str]] = {}
        rules: set[tuple[str, int]] = set()
        for (s, d), path in sorted(self.routes.items()):
            dst = self.address(d)
            for hop, (u, v) in enumerate(path):
                port = self.ports[(u, v)]
                via = f"via {self.node_address(v)} dev {port.dev} onlink"
                if hop == 0:
                    line = f"route add {dst}/32 {via} src {self.address(s)}"
                else:
                    table = 100 + s
                    line = f"route add {dst}/32 {via} table {table}"
                    if (port.ns, s) not in rules:
                        rules.add((port.ns, s))
                        out.setdefault(port.ns, []).append(
                            f"rule add from {self.address(s)}/32 lookup {table} pref {1000 + s}"
                        )
                out.setdefault(port.ns, []).append(line)
        return out

    def remove(self) -> None:
        """Kill what still runs in the namespaces this cluster made, delete them (their
        links go with them), then check that none is left; raises TestbedError naming
        any that is."""
        for name in self.made:
            for pid in _netns_pids(name):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for name in reversed(self.made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)
        left = [n for n in namespaces() if n.startswith(self.tag)]
        self.made = left
        if left:
            raise TestbedError(f"could not remove namespaces {', '.join(left)}")
        if self.owner_fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(_owner_file(self.tag))
            os.close(self.owner_fd)
            self.owner_fd = None

    # -- counters -------------------------------------------------------------------------

    def pair_counters(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(bytes, packets) every host has sent to every other host, as its first link's
        HTB classes counted them: whole frames (Ethernet, IP and TCP headers included),
        one packet per TCP segment."""
        out: dict[tuple[int, int], tuple[int, int]] = {}
        for (u, _v), dests in self._counted().items():
            port = self.ports[(u, _v)]
            text = _run(["tc", "-n", port.ns, "-s", "class", "show", "dev", port.dev])
            stats = {m[1]: (int(m[2]), int(m[3])) for m in _CLASS_STATS.finditer(text)}
            for d in dests:
                out[(int(u), d)] = stats[_class_id(d)]  # type: ignore[call-overload]
        return out

    def retransmitted_segments(self) -> list[int]:
        """TCP segments each host has sent again (``RetransSegs``), by host index: a
        host's retransmissions are bytes on its links that the program did not send."""
        counts = []
        for h in range(self.hosts):
            text = _run([*self.exec_prefix(h), "cat", "/proc/net/snmp"])
            head, values = [ln.split() for ln in text.splitlines() if ln.startswith("Tcp:")][:2]
            counts.append(int(values[head.index("RetransSegs")]))
        return counts

    def control_bytes(self) -> int:
        """Bytes every host sent on the control network (the launcher's, not the
        program's)."""
        total = 0
        for h in range(self.hosts):
            r = _run([*self.exec_prefix(h), "cat", "/sys/class/net/c0/statistics/tx_bytes"])
            total += int(r.strip())
        return total


def switch_graph(hosts: int, rate_bit_per_s: float) -> nx.DiGraph:
    """``hosts`` hosts on one switch, every link at ``rate_bit_per_s``."""
    import topologies

    return topologies.switch(hosts, bandwidth_bytes_per_s=rate_bit_per_s / 8)
