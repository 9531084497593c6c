"""``chakra``: a Chakra execution-trace set replayed as rank programs (see
:mod:`workload.chakra_et`): predicted by simnet, run for real by the MPI executor."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..layout import LayoutError
from ..ops import Collective, Op, Recv, Send
from ..program import Phase, Workload, scale_count
from .base import Arg, BuildRequest, Counts, Model

if TYPE_CHECKING:
    from ..chakra_et import TraceSet

# (workload.chakra_et is imported when a trace is read: every proxy rank imports this
# registry, and none but a trace's replay needs the reader.)
_CACHE: dict[tuple[str, float], TraceSet] = {}


def load(trace_dir: str) -> TraceSet:
    """The trace set in ``trace_dir``, read once per modification of the directory."""
    from ..chakra_et import read_trace_set

    path = Path(trace_dir).expanduser().resolve()
    try:
        # (an empty folder: read_trace_set says it holds no traces)
        stamp = max((p.stat().st_mtime for p in path.iterdir()), default=0.0)
    except (FileNotFoundError, NotADirectoryError):
        stamp = 0.0
    key = (str(path), stamp)
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = read_trace_set(path)
    return _CACHE[key]


def _scaled(ops: list[Op], scale: float) -> list[Op]:
    if scale == 1.0:
        return ops
    return [
        replace(op, count_elems=scale_count(op.count_elems, scale))
        if isinstance(op, (Send, Recv, Collective))
        else op
        for op in ops
    ]


class ChakraTrace(Model):
    name = "chakra"
    has_reference = False
    no_per_tensor_reason = "a trace's messages are replayed as the trace gives them"
    no_quirks_reason = "it has no reference proxy, hence no quirk to repair"
    description = "a Chakra execution-trace set (one <prefix>.<rank>.et per rank) replayed"
    order = 130
    no_batch_reason = "a trace has no batch definition"
    counts = Counts(0, 1, 1, 3)
    flags = (Arg("trace_dir", "", "directory of the trace set", text=True, path=True),)

    def _build(self, req: BuildRequest) -> Workload:
        world_size, params, options, _ = req
        if not params["trace_dir"]:
            raise LayoutError("chakra: give the trace set's directory (--trace-dir DIR)")
        from ..chakra_et import ChakraError, trace_dir_problem
        from ..spec import SpecError  # (spec imports this registry: not at import time)

        problem = trace_dir_problem(Path(params["trace_dir"]).expanduser())
        if problem:
            # The option is what to fix (a file given for the folder): each front end
            # names it its way.
            raise SpecError("flags", f"{{field:flags.trace_dir}} {problem}")
        try:
            traces = load(params["trace_dir"])
        except ChakraError as e:
            raise LayoutError(f"chakra: {e}") from None
        if world_size != traces.world_size:
            raise LayoutError(
                f"chakra: the world size must be the trace set's rank count, "
                f"{traces.world_size} (world size {world_size})"
            )
        scale = options.scale

        def program_of(name: str):
            return lambda rank: _scaled(traces.programs[name][rank], scale)

        phases = [Phase(name, program_of(name)) for name in traces.phases]
        wl = self.workload(
            world_size,
            params,
            traces.groups,
            phases,
            # (exported_scale None: unknown, not 1: a set from elsewhere says nothing)
            info={
                "trace": traces.source,
                "traced_model": traces.model,
                "exported_scale": traces.scale,
            },
            summary=[("world_size", world_size), ("trace", traces.source)],
            per="phase",
        )
        wl.scale = traces.scale  # (Model.build multiplies it by the replay's --scale)
        wl.start_note = trace_set_said(traces)
        return wl


def trace_set_said(traces: TraceSet) -> str:
    """The trace set and the scale it was exported at, as a replay's start line and
    ``chakra show`` name it."""
    which = "a trace set" if traces.model == "chakra" else f"a {traces.model} trace set"
    if traces.scale is None:
        return f"{which} of unknown message scale (its files do not record one)"
    return f"{which} exported at message scale {traces.scale:g}"
