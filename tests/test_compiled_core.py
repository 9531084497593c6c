"""The compiled simulator core (Cython build of simnet.network and simnet.executor):
in use where it was built, identical results to the Python source, and never stale."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import simnet
from simnet import _compiled

ROOT = Path(__file__).resolve().parent.parent
BUILT = all(_compiled._extension(name) is not None for name in _compiled.MODULES)
needs_build = pytest.mark.skipif(not BUILT, reason="the compiled core is not built here")

# Contended traffic on purpose (alltoall and allreduce through shared uplinks, with
# alpha and injection limits), so max-min sharing and rate changes are exercised.
CONFIG = {
    "distributed": {"num_nodes": 8, "bandwidth_limit_gb_per_s": 10.0},
    "topology": {
        "type": "hierarchical",
        "num_nodes": 8,
        "group_size": 4,
        "intra_bandwidth_gb_per_s": 50.0,
        "inter_bandwidth_gb_per_s": 5.0,
        "intra_latency_us": 0.5,
        "inter_latency_us": 3.0,
    },
    "network": {"alpha_us": 1.5, "injection_bandwidth_gb_per_s": 20.0},
    "workload": {"name": "dlrm", "args": [], "scale": 0.01, "iterations": 2},
    "logging": {"log_dir": "unused"},
}


def _env(pure: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "COMMSIM_PURE_PYTHON"}
    if pure:
        env["COMMSIM_PURE_PYTHON"] = "1"
    return env


# A fat-tree's ECMP routes: max-min components of a few links (the compiled core fills
# those from a small array) and of many (from its key queue), both against the Python
# core's heap.
FAT_TREE = {
    "distributed": {"num_nodes": 16, "bandwidth_limit_gb_per_s": 10.0},
    "topology": {"type": "fat_tree", "k": 4, "link_latency_us": 1.0},
}


def _run_simnet(
    tmp_path: Path, out: str, pure: bool, workload: str, alpha_us: float, fabric: dict | None = None
) -> Path:
    cfg = tmp_path / "config.json"
    config = {
        **CONFIG,
        **(fabric or {}),
        "network": {**CONFIG["network"], "alpha_us": alpha_us},
        "workload": {**CONFIG["workload"], "name": workload},
    }
    cfg.write_text(json.dumps(config))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "simnet",
            "--config",
            str(cfg),
            "--out",
            str(tmp_path / out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(pure),
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    return tmp_path / out


def _strip_volatile(doc: object) -> object:
    """Drop what depends on the run, not the model: wall times and software versions."""
    if isinstance(doc, dict):
        return {
            k: _strip_volatile(v) for k, v in doc.items() if k != "versions" and "wall" not in k
        }
    if isinstance(doc, list):
        return [_strip_volatile(v) for v in doc]
    return doc


def test_status_names_every_module():
    st = _compiled.status()
    assert set(st) == {"network", "executor"}
    for name, how in st.items():
        module = sys.modules[f"simnet.{name}"]
        assert (how == "compiled") == (not module.__file__.endswith(".py")), (name, how)


@pytest.mark.skipif(_compiled.pure_python_requested(), reason="COMMSIM_PURE_PYTHON is set")
def test_core_is_compiled_where_it_can_be():
    # Where Cython and a C compiler exist the install must have built the core: a silent
    # fallback to Python would make every simulation 2-10x slower.
    if importlib.util.find_spec("Cython") is None or shutil.which("cc") is None:
        pytest.skip("no Cython or no C compiler: the pure-Python core is expected")
    assert _compiled.status() == {"network": "compiled", "executor": "compiled"}
    assert _compiled.summary() == "compiled (Cython)"


@needs_build
@pytest.mark.parametrize(
    ("workload", "alpha_us", "fabric"),
    [("dlrm", 1.5, None), ("resnet50", 0.0, None), ("dlrm", 0.0, FAT_TREE)],
)
def test_compiled_and_python_cores_give_identical_results(tmp_path, workload, alpha_us, fabric):
    # alpha 0 starts flows at simpy's initial clock, where an int 0 could leak into
    # the Python core's outputs and a float 0.0 into the compiled one's.
    compiled = _run_simnet(tmp_path, "compiled", False, workload, alpha_us, fabric)
    python = _run_simnet(tmp_path, "python", True, workload, alpha_us, fabric)
    docs = [json.loads((d / "sim_results.json").read_text()) for d in (compiled, python)]
    assert docs[0]["versions"]["simnet_core"] == "compiled (Cython)"
    assert "COMMSIM_PURE_PYTHON" in docs[1]["versions"]["simnet_core"]
    assert _strip_volatile(docs[0]) == _strip_volatile(docs[1])
    assert docs[0]["phases"][0]["messages"] > 100
    texts = sorted(p.name for p in compiled.iterdir() if p.suffix in (".csv", ".json"))
    assert "sim_traffic_bytes.csv" in texts and "sim_links.csv" in texts
    for name in texts:
        if name != "sim_results.json":
            assert (compiled / name).read_bytes() == (python / name).read_bytes(), name


def _python(code: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (so its imports are its own); it must succeed."""
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=cwd, env=env
    )
    assert r.returncode == 0, r.stderr
    return r


def _probe(root: Path) -> tuple[str, str, str]:
    """Import simnet from ``root``; its network module's file, the status, stderr."""
    probe = (
        "import warnings; warnings.simplefilter('always');"
        "import simnet, simnet.network as n, simnet._compiled as c;"
        "print(n.__file__); print(c.status())"
    )
    r = _python(probe, root, {**_env(False), "PYTHONPATH": str(root)})
    file, status = r.stdout.splitlines()
    return file, status, r.stderr


def _copy_package(root: Path, checkout: bool) -> Path:
    copy = root / "simnet"
    shutil.copytree(Path(simnet.__file__).parent, copy)
    if checkout:
        shutil.copy2(ROOT / "setup.py", root / "setup.py")
    return copy


@needs_build
def test_stale_compiled_module_is_not_used(tmp_path):
    # A checkout whose network.py is newer than its compiled module, as after an edit
    # or a checkout without reinstalling: the source must run, with a warning, and the
    # executor's too (its compiled form uses the compiled network's types).
    copy = _copy_package(tmp_path, checkout=True)
    source = copy / "network.py"
    newer = _compiled._extension("network").stat().st_mtime + 10
    os.utime(source, (newer, newer))
    file, status, stderr = _probe(tmp_path)
    assert file == str(source)
    assert "'network': 'python (compiled module is stale)'" in status
    assert "'executor': 'python (another core module runs as source)'" in status
    assert "is older than simnet/network.py or .pxd; using the Python source" in stderr


@needs_build
def test_installed_package_ignores_file_times(tmp_path):
    # An installed wheel (no setup.py beside the package) writes its files in any order:
    # a .py newer than its .so there says nothing, and the compiled module runs.
    copy = _copy_package(tmp_path, checkout=False)
    newer = _compiled._extension("network").stat().st_mtime + 10
    os.utime(copy / "network.py", (newer, newer))
    file, status, stderr = _probe(tmp_path)
    assert not file.endswith(".py")
    assert status == "{'network': 'compiled', 'executor': 'compiled'}"
    assert "RuntimeWarning" not in stderr


@needs_build
def test_compiled_module_that_does_not_load_falls_back(tmp_path):
    copy = _copy_package(tmp_path, checkout=False)
    (copy / _compiled._extension("network").name).write_bytes(b"not a shared object")
    file, status, stderr = _probe(tmp_path)
    assert file == str(copy / "network.py")
    assert "'network': 'python (compiled module does not load: " in status
    assert "'executor': 'python (another core module runs as source)'" in status
    assert "does not load" in stderr and "using the Python source" in stderr


def test_the_python_core_runs_without_cython_installed():
    """Cython is a build tool: an install without it (or without a C compiler) runs the
    Python source, which must not need Cython to import (its timer queue asks
    ``cython.compiled``)."""
    code = (
        "import sys; sys.modules['cython'] = None\n"  # as if not installed
        "import simnet, topologies\n"
        "from simnet import _compiled\n"
        "g = topologies.ring(4, bandwidth_bytes_per_s=1e9, latency_s=1e-6)\n"
        "t = simnet.collective_time(g, 'allreduce', 'ring', 1 << 20)\n"
        "print(_compiled.status()['network'], repr(t))\n"
    )
    how, t = _python(code, ROOT, _env(pure=True)).stdout.rsplit(maxsplit=1)
    assert how.startswith("python")
    # Ring allreduce on a 4-ring: 2 (p - 1) steps of S / p bytes, each a hop's latency
    # and S / (p B) seconds.
    steps = 2 * 3
    assert float(t) == pytest.approx(steps * (1e-6 + (1 << 20) / 4 / 1e9), rel=1e-9)


@pytest.mark.skipif(
    _compiled.status().get("network") != "compiled", reason="the network core is not compiled"
)
def test_compiled_flows_are_not_tracked_by_the_cyclic_collector():
    # A message's flow is made and freed once per message; its class decorators (free
    # list, no GC) are read from network.py, and were once ignored where they sat in
    # network.pxd. The links it crosses stay tracked: they hold lists of flows.
    import gc

    from simnet import network

    flow = network._Flow.__new__(network._Flow)
    assert not gc.is_tracked(flow)
    assert gc.is_tracked(network._Link(("a", "b"), 1e9, 1e-6))
