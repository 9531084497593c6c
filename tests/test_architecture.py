"""The dependency directions of ARCHITECTURE (README): each package imports only
the ones below it, read from the import statements of every module."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("workload", "topologies", "proxies", "simnet", "workflows")

# What each package may import from the project (besides itself).
ALLOWED = {
    "workload": set(),
    "topologies": set(),
    "proxies": {"workload"},
    "simnet": {"workload", "topologies"},
    "workflows": {"workload", "topologies", "proxies", "simnet"},
}
# The tool's front door: `python -m simnet SUBCOMMAND` dispatches to the workflows.
FRONT_DOORS = {"simnet/__main__.py": {"workflows"}}


def project_imports(path: Path) -> set[str]:
    """Top-level project packages that ``path`` imports (absolute imports only:
    relative ones stay inside the package)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        out.update(n.split(".")[0] for n in names if n.split(".")[0] in PACKAGES)
    return out


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_what_is_below_it(package):
    bad = []
    for path in modules(package):
        rel = path.relative_to(ROOT).as_posix()
        allowed = ALLOWED[package] | {package} | FRONT_DOORS.get(rel, set())
        extra = project_imports(path) - allowed
        if extra:
            bad.append(f"{rel} imports {sorted(extra)}")
    assert not bad, "; ".join(bad)


def test_relative_imports_stay_inside_their_package():
    bad = []
    for package in PACKAGES:
        for path in modules(package):
            depth = len(path.relative_to(ROOT / package).parts) - 1  # 0: package root
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level > depth + 1:
                    bad.append(f"{path.relative_to(ROOT)}: from {'.' * node.level}{node.module}")
    assert not bad, bad


def test_checker_sees_a_forbidden_import(tmp_path):
    # The checker itself must catch the kind of import it guards against.
    f = tmp_path / "m.py"
    f.write_text(
        "import os\nfrom simnet.config import Config\nif True:\n    import workflows.cli\n"
    )
    assert project_imports(f) == {"simnet", "workflows"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> nx.DiGraph:
    """Module -> project module it imports, anywhere in the file (function-level
    imports included: a deferred import is still a dependency)."""
    g = nx.DiGraph()
    known = {_module_name(p): p for pkg in PACKAGES for p in modules(pkg)}
    for name, path in known.items():
        is_pkg = path.name == "__init__.py"
        g.add_node(name)
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".")
                    base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                # `from pkg import sub` names a module when pkg.sub is one.
                targets = [
                    f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names
                ]
            for t in targets:
                while t and t not in known:
                    t = t.rpartition(".")[0]
                if t and t != name and not name.startswith(t + "."):
                    g.add_edge(name, t)
    return g


def test_no_import_cycles():
    cycles = list(nx.simple_cycles(import_graph()))
    assert not cycles, cycles


def test_a_proxy_rank_imports_nothing_it_does_not_use():
    # Every MPI rank pays for what it imports (numpy and mpi4py alone are 42 MB here):
    # no simulator, plotting, configuration or trace-format package, and no package
    # metadata reader (only the rank that writes results needs it, and loads it then).
    import subprocess
    import sys

    unused = ("importlib.metadata", "simnet", "matplotlib", "networkx", "pydantic", "simpy")
    code = f"import sys, proxies.run; print([m for m in {unused!r} if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"
