"""Python work left in the compiled simulator: generic Python C-API calls per source line.

    python bench/cython_python_calls.py [--module network|executor] [FUNCTION ...]

Reads the C that Cython generated for ``simnet/<module>.py`` (``build/cython/simnet/
<module>.c``, left by ``./install.sh``) and lists, for each source line of the named
functions (substrings of their C names; default: the per-message ones), the generic
Python C-API calls its C code makes: attribute lookups by name, boxing of C numbers,
generic arithmetic and comparisons, calls through Python's call protocol, type tests.
In a typed hot loop each of them costs tens to hundreds of instructions where a typed
access costs a few, and nothing in the Python source shows them (a module constant, a
property, a method called on an untyped variable). A listed call may sit on a branch
that never runs (an error path, a fallback, or on a cpdef method's ``def`` line the check
for a Python subclass's override), so read the line before changing it.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The functions that run per message (substrings of their C names), by module.
HOT = {
    "network": (
        "_on_wake",
        "_flush",
        "_begin",
        "_deliver",
        "_launch",
        "_apply_rate",
        "start_rendezvous",
        "start_transfer",
        "_message",
        "_add_timer",
        "_water_fill",
        "_sum_load",
        "_set_load",
    ),
    "executor": ("_Coll_advance", "_delivered", "_tick", "_Rank_run", "_add_bytes"),
}

# Generic C-API calls: what a typed access would not need.
_GENERIC = re.compile(
    r"\b(PyObject_GetAttr\w*|__Pyx_PyObject_GetAttrStr\w*|__Pyx_GetModuleGlobalName"
    r"|PyNumber_\w+|PyObject_RichCompare\w*|__Pyx_PyObject_Compare\w*"
    r"|__Pyx_PyObject_Call\w*|__Pyx_PyObject_FastCall\w*|PyObject_Vectorcall\w*"
    r"|PyFloat_FromDouble|PyLong_From\w+|__Pyx_PyFloat_As\w+|__Pyx_PyInt_As\w+"
    r"|__Pyx_PyObject_GetItem|__Pyx_TypeTest|__Pyx_PyObject_IsTrue|PyObject_Hash)\("
)
# The C bodies of cdef and cpdef functions and methods (a cpdef's Python wrapper, which
# only converts its arguments, is left out).
_FUNC = re.compile(r"^static [^;]*?\b(__pyx_f_\w+)\(")


def python_calls(
    c_lines: Iterable[str], source_name: str, functions: Iterable[str]
) -> dict[tuple[str, int], set[str]]:
    """(C function, source line) -> the generic C-API calls made there, for the C
    functions whose names contain one of ``functions``. ``source_name`` is the path
    Cython names in its ``/* "path":line`` markers (e.g. ``simnet/network.py``)."""
    wanted = tuple(functions)
    marker = re.compile(r'\s*/\* "' + re.escape(source_name) + r'":(\d+)')
    out: dict[tuple[str, int], set[str]] = {}
    func: str | None = None
    line = 0
    for text in c_lines:
        m = _FUNC.match(text)
        if text.startswith("static ") and not text.rstrip().endswith(";"):
            func = m.group(1) if m else None  # (None: a function of no interest)
        m = marker.match(text)
        if m:
            line = int(m.group(1))
        if func is not None and any(w in func for w in wanted):
            for call in _GENERIC.findall(text):
                out.setdefault((func, line), set()).add(call)
    return out


def readable(c_name: str) -> str:
    """``__pyx_f_6simnet_7network_11FlowNetwork__on_wake`` -> ``FlowNetwork._on_wake``
    (Cython's length-prefixed module and class names, then the function's)."""
    rest = c_name.removeprefix("__pyx_f_")
    if rest == c_name:
        return c_name
    parts = []
    while m := re.match(r"(\d+)", rest):
        n, k = int(m.group(1)), len(m.group(1))
        parts.append(rest[k : k + n])
        rest = rest[k + n + 1 :]
    return ".".join([*parts[2:], rest])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--module", choices=sorted(HOT), default="network")
    ap.add_argument("functions", nargs="*", help="substrings of C function names")
    args = ap.parse_args(argv)
    c_file = ROOT / "build" / "cython" / "simnet" / f"{args.module}.c"
    source = ROOT / "simnet" / f"{args.module}.py"
    if not c_file.is_file():
        print(f"no {c_file.relative_to(ROOT)}: build the compiled core first (./install.sh)")
        return 1
    found = python_calls(
        c_file.read_text().splitlines(),
        f"simnet/{args.module}.py",
        args.functions or HOT[args.module],
    )
    src = source.read_text().splitlines()
    for (func, line), calls in sorted(found.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        text = src[line - 1].strip() if 0 < line <= len(src) else ""
        print(f"{readable(func)} line {line}: {', '.join(sorted(calls))}\n    | {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
