"""Micro benchmark of simnet.network.FlowNetwork: simulated transfers per CPU second.

Patterns (each step, every endpoint sends and waits for its messages):

* ring: N endpoints on a directed ring, i -> i+1, one message each (all flows
  disjoint: every recomputation is a single-flow component);
* star: N endpoints around one switch, i -> i+1..i+K (K messages per endpoint
  sharing its up link and K per down link: one component of N*K flows), equal
  sizes (all finish together) and random sizes (every finish re-rates the rest).

Two drivers: one simpy process per endpoint (how an executor would drive it),
and a single callback-driven driver (the cost of the network model alone).
Throughput is per second of process CPU time (time.process_time), so that a
busy shared machine does not distort it; sim (ms) is the simulated makespan.
Usage: python bench/bench_network.py [--steps 50] [--ring 1024] [--star 64] [--fanout 8]
"""

from __future__ import annotations

import argparse
import itertools
import random
import time

import networkx as nx
import simpy

from simnet.network import FlowNetwork
from workload.units import GB  # bytes/s figures below use GB = 1e9 bytes


def ring_graph(n: int) -> nx.DiGraph:
    g = nx.DiGraph()
    for i in range(n):
        g.add_edge(i, (i + 1) % n, bandwidth=25 * GB, latency=1e-6)
    return g


def star_graph(n: int) -> nx.DiGraph:
    g = nx.DiGraph()
    hub = n
    for i in range(n):
        g.add_edge(i, hub, bandwidth=25 * GB, latency=5e-7)
        g.add_edge(hub, i, bandwidth=25 * GB, latency=5e-7)
    return g


def cached_route(g: nx.DiGraph):
    cache: dict[tuple[int, int], tuple] = {}

    def route(src: int, dst: int) -> tuple:
        edges = cache.get((src, dst))
        if edges is None:
            path = nx.shortest_path(g, src, dst)
            edges = cache[(src, dst)] = tuple(itertools.pairwise(path))
        return edges

    return route


def run_processes(g, sends_per_step, steps, sizes) -> tuple[int, float, float, FlowNetwork]:
    """One process per endpoint; sends_per_step[i] = peers of i. Returns (n, cpu_s, sim_s, net)."""
    env = simpy.Environment()
    net = FlowNetwork(env, g, cached_route(g), alpha_s=1e-6)

    def endpoint(i, peers):
        transfer = net.transfer
        for s in range(steps):
            evs = [transfer(i, p, sizes(i, p, s)) for p in peers]
            if len(evs) == 1:
                yield evs[0]
            else:
                yield env.all_of(evs)

    for i, peers in enumerate(sends_per_step):
        env.process(endpoint(i, peers))
    c0 = time.process_time()
    env.run()
    cpu = time.process_time() - c0
    return net.transfers_completed, cpu, env.now, net


def run_callbacks(g, sends_per_step, steps, sizes) -> tuple[int, float, float, FlowNetwork]:
    """Bulk-synchronous driver without processes: next step when all messages are done."""
    env = simpy.Environment()
    net = FlowNetwork(env, g, cached_route(g), alpha_s=1e-6)
    total = sum(len(p) for p in sends_per_step)
    state = {"step": 0, "left": 0}

    def on_done(_ev):
        state["left"] -= 1
        if state["left"] == 0:
            state["step"] += 1
            if state["step"] < steps:
                launch()

    def launch():
        s = state["step"]
        state["left"] = total
        transfer = net.transfer
        for i, peers in enumerate(sends_per_step):
            for p in peers:
                transfer(i, p, sizes(i, p, s)).callbacks.append(on_done)

    launch()
    c0 = time.process_time()
    env.run()
    cpu = time.process_time() - c0
    return net.transfers_completed, cpu, env.now, net


def simpy_floor(n: int, steps: int) -> float:
    """Reference: process resumptions per CPU second of bare simpy (one timeout each)."""
    env = simpy.Environment()

    def proc():
        for _ in range(steps):
            yield env.timeout(1e-6)

    for _ in range(n):
        env.process(proc())
    c0 = time.process_time()
    env.run()
    return n * steps / (time.process_time() - c0)


def best_of(repeat: int, runner, *args):
    """Run `repeat` times; keep the run with the least CPU time (results are identical)."""
    results = [runner(*args) for _ in range(repeat)]
    assert len({(r[0], r[2]) for r in results}) == 1, "runs differ: the model is not deterministic"
    return min(results, key=lambda r: r[1])


def report(name: str, result) -> None:
    n, cpu, sim_s, net = result
    print(
        f"{name:<40} {n:>8d} {cpu:>9.3f} {n / cpu:>12,.0f} {sim_s * 1e3:>10.4f} "
        f"{net.recomputations:>8d} {net.flows_rerated:>10d}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--ring", type=int, default=1024, help="ring endpoints")
    ap.add_argument("--star", type=int, default=64, help="star endpoints")
    ap.add_argument("--fanout", type=int, default=8, help="messages per endpoint per star step")
    ap.add_argument("--size", type=int, default=1 << 20, help="message size (bytes)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure; the fastest is shown")
    args = ap.parse_args()

    size = args.size
    n = args.ring
    ring = ring_graph(n)
    ring_sends = [[(i + 1) % n] for i in range(n)]
    m = args.star
    star = star_graph(m)
    star_sends = [[(i + k) % m for k in range(1, args.fanout + 1)] for i in range(m)]
    rng = random.Random(0)
    table = {
        (i, p, s): rng.randrange(size // 2, size * 3 // 2)
        for s in range(args.steps)
        for i, peers in enumerate(star_sends)
        for p in peers
    }

    def equal(i, p, s):
        return size

    def rand(i, p, s):
        return table[(i, p, s)]

    print(
        f"message size {size} B (random: uniform in [{size // 2}, {size * 3 // 2}) B); "
        f"links 25 GB/s (GB = 1e9 B), alpha 1 us; best of {args.repeat} runs"
    )
    print(
        f"{'pattern (driver)':<40} {'flows':>8} {'cpu (s)':>9} {'flows/cpu-s':>12} "
        f"{'sim (ms)':>10} {'recomp':>8} {'rerated':>10}"
    )
    r = args.repeat
    st = args.steps
    for label, runner in (("processes", run_processes), ("callbacks", run_callbacks)):
        report(
            f"ring {n} x1 x{st} steps ({label})", best_of(r, runner, ring, ring_sends, st, equal)
        )
        report(
            f"star {m} x{args.fanout} equal x{st} ({label})",
            best_of(r, runner, star, star_sends, st, equal),
        )
        report(
            f"star {m} x{args.fanout} random x{st} ({label})",
            best_of(1, runner, star, star_sends, st, rand),
        )
    print(
        f"reference: bare simpy, {n} processes x {st} timeouts: "
        f"{simpy_floor(n, st):,.0f} resumptions/cpu-s"
    )


if __name__ == "__main__":
    main()
