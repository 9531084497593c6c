"""Python's object arenas on huge pages (simnet/arenas.py, simnet/_arenas.pyx).

The allocator is process-wide and stays once installed, so everything that installs
it runs in a fresh interpreter (each with a timeout)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simnet import arenas

ROOT = Path(__file__).resolve().parent.parent


def _fresh(code: str, **env: str) -> dict:
    """Run ``code`` in a new interpreter of this checkout; its last stdout line as JSON."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _helper_built() -> bool:
    try:
        from simnet import _arenas  # noqa: F401
    except ImportError:
        return False
    return True


def test_thp_mode_reads_the_bracketed_choice(tmp_path: Path) -> None:
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    assert arenas.thp_mode(f) == "madvise"
    f.write_text("[always] madvise never\n")
    assert arenas.thp_mode(f) == "always"
    f.write_text("always madvise [never]\n")
    assert arenas.thp_mode(f) == "never"
    assert arenas.thp_mode(tmp_path / "missing") is None


def test_turned_off_by_the_environment_installs_nothing() -> None:
    got = _fresh(
        "import json, simnet.arenas as a; s = a.enable(); print(json.dumps([s, a.stats()]))",
        COMMSIM_HUGE_PAGES="0",
    )
    assert got == ["off (COMMSIM_HUGE_PAGES=0)", {}]


usable = pytest.mark.skipif(
    not _helper_built() or arenas.thp_mode() in (None, "never"),
    reason="needs the compiled helper and transparent huge pages",
)


@usable
def test_objects_live_in_the_region_and_freed_arenas_are_reused() -> None:
    code = """
import gc, json, simnet.arenas as a
status = a.enable()
assert a.enable() == status  # decided once
before = a.stats()
xs = [object() for _ in range(1_000_000)]  # 16 bytes each: about 16 MB of arenas
grown = a.stats()
start = grown["region_start"]
inside = sum(start <= id(x) < start + grown["reserved_bytes"] for x in xs[::1000])
del xs
gc.collect()
freed = a.stats()
xs = [object() for _ in range(1_000_000)]
again = a.stats()
print(json.dumps({"status": status, "before": before, "grown": grown, "inside": inside,
                  "freed": freed, "again": again}))
"""
    got = _fresh(code)
    assert got["status"].startswith("on (object arenas; transparent huge pages: ")
    grown, freed, again = got["grown"], got["freed"], got["again"]
    assert grown["arena_bytes"] == 1 << 20  # CPython 3.10+ on 64-bit
    # A million 16-byte objects (15.3 MiB) fill new arenas, all in the region, committed
    # 64 MiB at a time: at least 13 MiB of them (the rest goes into the room the arenas
    # made before the install still had, 1-2 MiB by what the imports allocated).
    assert grown["arenas_bytes"] - got["before"]["arenas_bytes"] >= 13 << 20
    assert grown["committed_bytes"] % (64 << 20) == 0
    assert grown["arenas_bytes"] <= grown["committed_bytes"]
    # (the first few fill the free room of arenas made before the install)
    assert got["inside"] >= 900
    assert grown["arenas_outside"] == 0
    # Freed arenas are kept, and the same objects made again take them, not new ones.
    new_arenas = grown["arenas_bytes"] - got["before"]["arenas_bytes"]
    assert freed["free_arenas_bytes"] >= new_arenas - (2 << 20)  # (but those others share)
    assert freed["arenas_bytes"] == grown["arenas_bytes"]
    # (within one arena: how much room the arenas made before the install have left
    # depends on what the imports allocated; not reused, it would be 15 MiB more)
    assert again["arenas_bytes"] - grown["arenas_bytes"] <= grown["arena_bytes"]
    assert again["free_arenas_bytes"] < freed["free_arenas_bytes"]


@usable
def test_a_simulation_turns_it_on_and_predicts_the_same_either_way() -> None:
    code = """
import hashlib, json, simnet
cfg = {"distributed": {"num_nodes": 16, "bandwidth_limit_gb_per_s": 25.0},
       "topology": {"type": "fat_tree", "k": 4, "link_latency_us": 1.0},
       "workload": {"name": "resnet152", "world_size": 16}}
res = simnet.simulate(cfg, record_series=False)
ph = res.phases[0]  # bytes and busy seconds per pair and per link: timing-sensitive
pairs = (sorted(ph.pair_bytes.items()), sorted(ph.pair_busy.items()),
         sorted(ph.link_busy_s.items(), key=repr))
print(json.dumps({"status": simnet.arenas.status(), "time": res.iteration_time_s,
                  "pairs": hashlib.sha256(repr(pairs).encode()).hexdigest()}))
"""
    on = _fresh(code)
    off = _fresh(code, COMMSIM_HUGE_PAGES="0")
    assert on["status"].startswith("on ")
    assert off["status"] == "off (COMMSIM_HUGE_PAGES=0)"
    assert on["time"] == off["time"] and on["pairs"] == off["pairs"]
