"""Which simulator modules run compiled, and falling back to their Python source.

``simnet.network`` and ``simnet.executor`` may be compiled by Cython at install
time (see ``setup.py``); the extension module then sits beside its ``.py`` and
Python would import it first. ``select()`` runs before either is imported and
imports the ``.py`` of both instead (the compiled executor uses the compiled network's
types) when, for either of them:

* ``COMMSIM_PURE_PYTHON`` is set to anything but ``0`` (to compare or debug), or
* in a source checkout, the extension is older than its ``.py`` or ``.pxd``
  (the source was edited or checked out since the last install): running stale
  compiled code would silently simulate the old model, so this warns and uses
  the source; or
* the extension does not load (built for another C library, say): this warns
  and uses the source.

``status()`` says what is in use, for result files and the terminal summary.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import warnings
from pathlib import Path

MODULES = ("network", "executor")
_HERE = Path(__file__).resolve().parent
_status: dict[str, str] = {}


def pure_python_requested() -> bool:
    """Whether ``COMMSIM_PURE_PYTHON`` asks for the pure-Python modules."""
    return os.environ.get("COMMSIM_PURE_PYTHON", "") not in ("", "0")


def _extension(name: str) -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = _HERE / f"{name}{suffix}"
        if path.is_file():
            return path
    return None


def _stale(ext: Path, name: str) -> bool:
    # Only a source checkout (an editable install) can have its sources edited after the
    # build; an installed wheel's files are written together, in no particular order.
    if not (_HERE.parent / "setup.py").is_file():
        return False
    built = ext.stat().st_mtime
    sources = (_HERE / f"{name}.py", _HERE / f"{name}.pxd")
    return any(src.is_file() and src.stat().st_mtime > built for src in sources)


def _load_source(name: str) -> None:
    fullname = f"simnet.{name}"
    spec = importlib.util.spec_from_file_location(fullname, _HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[fullname] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[fullname]
        raise
    setattr(sys.modules["simnet"], name, module)


def select() -> None:
    """Decide, once per process, compiled or source for the modules (see module doc).

    All or none: the compiled executor uses the compiled network's types (its channel
    tables), so when one module cannot run compiled, the others run as source too."""
    if _status:
        return
    why: dict[str, str] = {}  # module -> why it cannot run compiled
    for name in MODULES:
        ext = _extension(name)
        if ext is None:
            why[name] = "python"
        elif pure_python_requested():
            why[name] = "python (COMMSIM_PURE_PYTHON is set)"
        elif _stale(ext, name):
            why[name] = "python (compiled module is stale)"
            warnings.warn(
                f"simnet: {ext.name} is older than simnet/{name}.py or .pxd; using the Python "
                "source (2-10x slower). Rebuild with ./install.sh (or pip install -e .).",
                RuntimeWarning,
                stacklevel=3,
            )
    if not why:
        for name in MODULES:  # (in order: the executor imports the network's types)
            try:
                importlib.import_module(f"simnet.{name}")
            except (ImportError, TypeError, ValueError) as exc:  # e.g. another C library
                ext = _extension(name)
                why[name] = f"python (compiled module does not load: {exc})"
                warnings.warn(
                    f"simnet: {ext.name if ext else name} does not load ({exc}); using the "
                    "Python source (2-10x slower). Rebuild with ./install.sh on this machine.",
                    RuntimeWarning,
                    stacklevel=3,
                )
                break
    if not why:
        _status.update(dict.fromkeys(MODULES, "compiled"))
        return
    for name in MODULES:
        _status[name] = why.get(name, "python (another core module runs as source)")
        _load_source(name)


def status() -> dict[str, str]:
    """Module -> "compiled" or "python" (with the reason when a build exists)."""
    select()
    out = {}
    for name in MODULES:
        module = sys.modules.get(f"simnet.{name}")
        compiled = module is not None and not str(module.__file__).endswith(".py")
        out[name] = "compiled" if compiled else _status.get(name, "python")
    return out


def summary() -> str:
    """One line for people: how the simulator core runs."""
    st = status()
    if all(v == "compiled" for v in st.values()):
        return "compiled (Cython)"
    return "; ".join(f"{k}: {v}" for k, v in st.items())
