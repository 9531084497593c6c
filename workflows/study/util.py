"""Helpers shared by the study commands (scaling, sweep, slurm, aggregate).

Nothing here imports MPI: the sweep decides how to start its pool before
mpi4py is touched.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import hashlib
import itertools
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class StudyError(ValueError):
    """A problem with the user's request, worded for the user (what and the fix)."""


# -- process counts ---------------------------------------------------------------------
def parse_counts(text: str, what: str = "--np") -> list[int]:
    """``"1,2,4"`` or ``"8..1024"`` (doubling) or a mix, sorted and de-duplicated.

    An empty string gives an empty list.
    """
    out: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = re.fullmatch(r"(\d+)\.\.(\d+)", part)
        try:
            if m:
                lo, hi = int(m.group(1)), int(m.group(2))
                if lo < 1 or hi < lo:
                    raise ValueError
                v = lo
                while v <= hi:
                    out.add(v)
                    v *= 2
            else:
                v = int(part)
                if v < 1:
                    raise ValueError
                out.add(v)
        except ValueError:
            raise StudyError(
                f"{what}: {part!r} is not a process count; give positive integers "
                "separated by commas (e.g. 1,2,4) or a doubling range (e.g. 8..1024)"
            ) from None
    return sorted(out)


# -- model flags --------------------------------------------------------------------------
def add_model_options(p: argparse.ArgumentParser) -> None:
    """--model, --args and --flag: which proxy a study or script runs, with what."""
    p.add_argument("--model", required=True, help="a proxy model (python -m proxies --help)")
    p.add_argument(
        "--args",
        type=int,
        nargs="*",
        default=[],
        metavar="N",
        help="the proxy's positional arguments, e.g. --args 48 4",
    )
    p.add_argument(
        "--flag",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a model option, e.g. --flag compute_us=2000 or --flag preset=llama-3-8b (repeatable)",
    )


def parse_flags(items: Sequence[str] | None) -> dict[str, int | str]:
    """``["compute_us=2000", "preset=llama-3-8b"]`` -> ``{"compute_us": 2000, "preset":
    "llama-3-8b"}``: integers where the value is one, else the word (the model checks
    which its option takes)."""
    out: dict[str, int | str] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        name = name.strip().lstrip("-").replace("-", "_")
        value = value.strip()
        if not sep or not name or not value:
            raise StudyError(
                f"--flag {item!r}: give NAME=VALUE, e.g. --flag compute_us=2000"
            ) from None
        try:
            out[name] = int(value)
        except ValueError:
            out[name] = value
    return out


# -- grids of dotted keys -----------------------------------------------------------------
def parse_grid(text: str, what: str = "--grid") -> dict[str, list[Any]]:
    """A grid from JSON text, or from a file (``@path`` or an existing path).

    Every value must be a non-empty list; keys keep their order, which is the
    order of the cartesian product (last key varies fastest).
    """
    source = text
    path = text[1:] if text.startswith("@") else text
    if text.startswith("@") or (not text.lstrip().startswith("{") and Path(path).is_file()):
        try:
            source = Path(path).read_text()
        except OSError as e:
            raise StudyError(f"{what}: cannot read {path!r}: {e.strerror}") from None
    try:
        grid = json.loads(source)
    except json.JSONDecodeError as e:
        raise StudyError(
            f"{what}: not valid JSON ({e.msg} at column {e.colno}); give an object of lists, "
            """e.g. '{"workload.scale": [0.1, 1.0]}'"""
        ) from None
    if not isinstance(grid, dict) or not grid:
        raise StudyError(f"{what}: give a non-empty JSON object mapping keys to lists of values")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            # (a single value is the likelier slip: suggest it in a list; [] has none)
            example = f"; e.g. [{json.dumps(values)}]" if values != [] else ""
            raise StudyError(
                f"{what}: the value of {key!r} must be a non-empty list of values "
                f"(got {json.dumps(values)}){example}"
            )
    return grid


def expand_grid(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The cartesian product of a grid, as one dict per point (last key fastest)."""
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*grid.values())]


def refuse_twins(points: Iterable[tuple[int, dict[str, Any], Any]]) -> None:
    """Raise StudyError if two grid points (index, assignment, what the point runs, e.g.
    its configuration's hash) run the same thing: given one value twice (0.1 and 0.10)
    or two spellings of one. A sweep would run it twice, and its table list it twice."""
    seen: dict[Any, tuple[int, dict[str, Any]]] = {}
    for i, assign, what in points:
        if what in seen:
            j, first = seen[what]
            raise StudyError(
                f"--grid: points {j} {json.dumps(first)} and {i} {json.dumps(assign)} are "
                "the same configuration: give each value once"
            )
        seen[what] = (i, assign)


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """``set_dotted(d, "topology.num_nodes", 8)``: creates missing sections."""
    parts = key.split(".")
    node = data
    for p in parts[:-1]:
        nxt = node.get(p)
        if not isinstance(nxt, dict):
            nxt = {}
            node[p] = nxt
        node = nxt
    node[parts[-1]] = copy.deepcopy(value)


def check_dotted_key(model: type[BaseModel], key: str) -> None:
    """Raise StudyError unless ``key`` names a field of the (nested) pydantic model.

    Below a ``dict`` field any name is accepted (e.g. ``workload.flags.scaling_size``).
    """
    parts = key.split(".")
    cls: Any = model
    for i, p in enumerate(parts):
        fields = getattr(cls, "model_fields", None)
        if fields is None:
            origin = getattr(cls, "__origin__", cls)
            if origin is dict or cls is dict:
                return
            raise StudyError(f"grid key {key!r}: {'.'.join(parts[:i])} is a value, not a section")
        if p not in fields:
            near = difflib.get_close_matches(p, list(fields), n=1)
            where = ".".join(parts[:i]) or "the top level"
            hint = f"; did you mean {'.'.join([*parts[:i], near[0]])!r}?" if near else ""
            raise StudyError(
                f"grid key {key!r}: {where} has no field {p!r}{hint} "
                "(see `python -m simnet --schema`)"
            )
        ann = fields[p].annotation
        if i < len(parts) - 1:
            cls = _section_type(ann)


def _section_type(ann: Any) -> Any:
    """The pydantic model (or dict) inside an annotation like ``X | None``."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()) or ():
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
        if arg is dict or getattr(arg, "__origin__", None) is dict:
            return dict
    if ann is dict or getattr(ann, "__origin__", None) is dict:
        return dict
    return ann


def stable_hash(obj: Any, length: int = 16) -> str:
    """A short hex digest of a JSON-serialisable object (key order does not matter)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


# -- tables -------------------------------------------------------------------------------
def fmt(value: Any, digits: int = 6) -> str:
    """A cell: floats with ``digits`` significant digits, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.{digits}g}"
    return str(value)


def text_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """An aligned plain-text table: numbers right-aligned, text left-aligned."""
    raw = [list(r) for r in rows]
    cells = [[fmt(v) for v in r] for r in raw]
    numeric = [
        all(isinstance(r[i], (int, float)) or r[i] is None for r in raw) if raw else False
        for i in range(len(headers))
    ]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]

    def line(vals: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(vals, widths, numeric, strict=True)
        ).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(c) for c in cells]
    return "\n".join(out) + "\n"


def csv_cell(value: Any) -> str:
    """A CSV cell (quoted when needed; None as empty)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        s = value
    elif isinstance(value, (int, bool)):
        s = str(value)
    else:
        s = json.dumps(value)
    if any(ch in s for ch in ',"\n'):
        s = '"' + s.replace('"', '""') + '"'
    return s


# -- subprocesses -------------------------------------------------------------------------
def last_error_line(output: str) -> str:
    """The most telling line of a failed run's output (an ``error:`` line if any)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith("error:"):
            return ln[len("error:") :].strip()
    return lines[-1] if lines else "(no output)"


class Throttle:
    """Call ``fn`` at most once per ``interval_s`` (and always when forced)."""

    def __init__(self, fn: Callable[[str], None], interval_s: float = 1.0) -> None:
        self.fn = fn
        self.interval_s = interval_s
        self._last = -math.inf

    def __call__(self, msg: str, force: bool = False) -> None:
        now = time.perf_counter()
        if force or now - self._last >= self.interval_s:
            self._last = now
            self.fn(msg)
