"""Chakra execution traces (MLCommons Chakra ET) in and out of rank programs.

A trace set is one file per rank, ``<prefix>.<rank>.et``: a ``GlobalMetadata``
message, then one ``Node`` message per operation, each length-prefixed as the
``mlc-chakra`` package writes them (its protobuf schema, imported as ``chakra``), plus
``comm_group.json``: process-group id -> ranks, the file ASTRA-sim's
``--comm-group-configuration`` reads.

Export (:func:`export_trace_set`): every operation of every phase becomes a node.
Compute -> COMP_NODE (``duration_micros``, rounded to whole microseconds as the field
holds them); send and receive -> COMM_SEND_NODE / COMM_RECV_NODE (``comm_src``,
``comm_dst``, ``comm_tag``, ``comm_size`` in bytes); a collective -> COMM_COLL_NODE
(``comm_type``, ``comm_size``: the bytes of the call's send buffer, i.e. the vector for
allreduce, bcast and reduce, the rank's contribution for allgather, the whole input for
reduce-scatter and all-to-all). ``pg_name`` is the id of the rank's group in
``comm_group.json``; ``is_cpu_op`` is false. Dependencies (``data_deps``, which
ASTRA-sim's feeder follows) keep the program's order: a blocking operation depends on
the one before it; a non-blocking one starts after the last blocking one and is only
waited for where the program waits (a zero-length COMP_NODE named after the wait). So
that the project reads its own traces back exactly, every node also carries
``commsim_*`` attributes (operation, label, request ids, element count, group kind,
exact duration, phase) that other tools ignore; each rank's metadata records the
message scale the workload was built at (``commsim_scale``, when known).

Import (:func:`read_trace_set`): a trace set written here comes back as the same
programs and groups. Any other trace is read by its schema fields alone: nodes in
dependency order, communication non-blocking and waited for where a later node depends
on it, compute blocking; METADATA_NODEs are skipped. Node kinds without a meaning
here (memory loads and stores, gather, scatter) are refused, naming the node. A set
with a rank file missing is refused naming the file: its ranks are 0..P-1, P the
largest of the highest rank file's, the metadata's ``commsim_world_size`` and the
ranks ``comm_group.json`` names. So is a file cut short: a record running past the
end of the file, or fewer nodes than the metadata's ``commsim_nodes`` (written since
a file cut between two records reads as a whole, shorter one).
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .ops import Collective, Compute, Op, Recv, Send, Testany, Wait
from .program import Workload
from .results import UNFINISHED_MARKER, atomic_write, counted, write_text
from .units import ELEM_BYTES

INSTALL_HINT = "pip install --no-deps mlc-chakra protobuf"
COMM_GROUP_FILE = "comm_group.json"
SCHEMA_VERSION = "1.0.0"
_COLLECTIVE_TYPES = {
    "allreduce": "ALL_REDUCE",
    "reduce": "REDUCE",
    "allgather": "ALL_GATHER",
    "bcast": "BROADCAST",
    "alltoall": "ALL_TO_ALL",
    "reduce_scatter": "REDUCE_SCATTER",
    "barrier": "BARRIER",
}


class ChakraError(ValueError):
    """A trace set that cannot be read or written, and why."""


def _chakra() -> tuple[Any, Callable]:
    """(the schema module, encodeMessage) of ``mlc-chakra`` (its decodeMessage takes a
    record cut short by the end of a file as whole: :func:`_read_records` reads)."""
    try:
        from chakra.schema.protobuf import et_def_pb2
        from chakra.src.third_party.utils.protolib import encodeMessage
    except ImportError as e:
        raise ChakraError(
            f"Chakra traces need the mlc-chakra package ({INSTALL_HINT}; ./install.sh "
            f"installs it): {e}"
        ) from None
    return et_def_pb2, encodeMessage


def trace_path(directory: Path, prefix: str, rank: int) -> Path:
    return Path(directory) / f"{prefix}.{rank}.et"


# -- export ----------------------------------------------------------------------------------
def _send_buffer_bytes(op: Collective, p: int) -> int:
    b = op.count_elems * ELEM_BYTES
    if op.op in ("reduce_scatter", "alltoall"):
        return b * p
    if op.op == "barrier":
        return 0
    return b


def _group_ids(workload: Workload) -> tuple[dict[tuple[str, int], int], dict[str, Any]]:
    """Process-group ids (from 1) for every group of every kind: (kind, first rank) ->
    id, and the comm_group.json document."""
    ids: dict[tuple[str, int], int] = {}
    doc: dict[str, Any] = {}
    for kind in sorted(workload.groups):
        for group in workload.groups[kind]:
            gid = len(doc) + 1
            ids[(kind, group[0])] = gid
            doc[str(gid)] = list(group)
    return ids, doc


def export_trace_set(
    workload: Workload,
    directory: Path,
    prefix: str = "trace",
    progress: Callable[[int], None] | None = None,
) -> list[Path]:
    """Write ``workload`` (one iteration of every phase, in order) as a Chakra trace
    set into ``directory``; returns the files written (ranks, then comm_group.json).

    Files are written through :func:`workload.results.atomic_write` (each under a
    temporary name, renamed when complete).
    """
    et, encode = _chakra()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ids, groups_doc = _group_ids(workload)
    kinds = {str(gid): kind for (kind, _), gid in ids.items()}
    written = []
    for rank in range(workload.world_size):
        path = trace_path(directory, prefix, rank)

        def write(f: Any, rank: int = rank) -> None:
            nodes = _rank_nodes(et, workload, rank, ids)
            meta = et.GlobalMetadata(version=SCHEMA_VERSION)
            meta.attr.extend(
                [
                    _attr(et, "commsim_model", workload.model),
                    _attr(et, "commsim_world_size", workload.world_size),
                    _attr(et, "commsim_phases", [ph.name for ph in workload.phases]),
                    _attr(et, "commsim_group_kinds", json.dumps(kinds)),
                    _attr(et, "commsim_rank", rank),
                    # A file cut between two records still parses: the count finds it.
                    _attr(et, "commsim_nodes", len(nodes)),
                ]
            )
            if workload.scale is not None:
                # A replay would otherwise take messages exported at 0.01 x their size
                # for the model's own.
                meta.attr.append(_attr(et, "commsim_scale", float(workload.scale)))
            encode(f, meta)
            for node in nodes:
                encode(f, node)

        # The project's writer: a link is followed, a device written into, not replaced.
        atomic_write(path, write, binary=True)
        written.append(path)
        if progress is not None:
            progress(rank)
    groups_path = directory / COMM_GROUP_FILE
    write_text(groups_path, json.dumps(groups_doc, indent=1) + "\n")
    written.append(groups_path)
    return written


def _attr(et: Any, name: str, value: Any) -> Any:
    a = et.AttributeProto(name=name)
    if isinstance(value, bool):
        a.bool_val = value
    elif isinstance(value, int):
        a.int64_val = value
    elif isinstance(value, float):
        a.double_val = value
    elif isinstance(value, str):
        a.string_val = value
    elif value and all(isinstance(v, str) for v in value):
        a.string_list.values.extend(value)
    else:
        a.int64_list.values.extend(int(v) for v in value)
    return a


def _rank_nodes(et: Any, workload: Workload, rank: int, ids: dict) -> list[Any]:
    nodes: list[Any] = []
    last_blocking: int | None = None
    for phase in workload.phases:
        req_node: dict[int, int] = {}
        for op in phase.program(rank):
            node = et.Node(id=len(nodes))
            deps = [] if last_blocking is None else [last_blocking]
            attrs: list[tuple[str, Any]] = [("commsim_phase", phase.name)]
            blocking = True
            if isinstance(op, Compute):
                node.type = et.COMP_NODE
                node.name = op.label
                node.duration_micros = max(0, round(op.duration_us))
                attrs += [("commsim_op", "compute"), ("commsim_duration_us", op.duration_us)]
            elif isinstance(op, (Wait, Testany)):
                node.type = et.COMP_NODE
                node.name = op.label
                kind = "wait" if isinstance(op, Wait) else "testany"
                if isinstance(op, Wait):
                    deps += [req_node[r] for r in op.reqs]
                attrs += [("commsim_op", kind), ("commsim_reqs", list(op.reqs))]
                blocking = isinstance(op, Wait)
            else:
                members = workload.group_of(op.group, rank)
                pg = ids[(op.group, members[0])]
                node.name = op.label
                attrs += [
                    ("pg_name", str(pg)),
                    ("commsim_group", op.group),
                    ("commsim_count", op.count_elems),
                    ("commsim_req", -1 if op.req is None else op.req),
                ]
                if isinstance(op, Collective):
                    node.type = et.COMM_COLL_NODE
                    attrs += [
                        ("comm_type", getattr(et, _COLLECTIVE_TYPES[op.op])),
                        ("comm_size", _send_buffer_bytes(op, len(members))),
                        ("commsim_op", "collective"),
                        ("commsim_collective", op.op),
                        ("commsim_root", op.root),
                    ]
                    if op.algorithm is not None:
                        attrs.append(("commsim_algorithm", op.algorithm))
                else:
                    send = isinstance(op, Send)
                    node.type = et.COMM_SEND_NODE if send else et.COMM_RECV_NODE
                    attrs += [
                        ("comm_src", rank if send else op.peer),
                        ("comm_dst", op.peer if send else rank),
                        ("comm_tag", op.tag),
                        ("comm_size", op.size_bytes),
                        ("commsim_op", "send" if send else "recv"),
                    ]
                if op.req is not None:
                    req_node[op.req] = node.id
                    blocking = False
            node.data_deps.extend(deps)
            node.attr.append(_attr(et, "is_cpu_op", False))
            node.attr.extend(_attr(et, k, v) for k, v in attrs)
            nodes.append(node)
            if blocking:
                last_blocking = node.id
    return nodes


# -- import ------------------------------------------------------------------------------------
@dataclass
class TraceSet:
    """Rank programs read from a trace set: per phase (in order), per rank, the ops;
    the groups by kind (each kind partitions the ranks); where it came from."""

    world_size: int
    phases: list[str]
    programs: dict[str, list[list[Op]]]
    groups: dict[str, list[tuple[int, ...]]]
    model: str
    source: str
    # The message scale the set was exported at (relative to the traced model's full
    # size); None when its files do not record one (a set from elsewhere, or exported
    # before sets recorded it).
    scale: float | None = None


def trace_dir_problem(directory: Path) -> str | None:
    """Why ``directory`` cannot be a trace set's folder (it is absent, or a file), or None."""
    directory = Path(directory)
    if directory.is_dir():
        return None
    if directory.exists():
        return (
            f"{directory} is a file, not a folder: a trace set is the folder holding its "
            f"<prefix>.<rank>.et files and {COMM_GROUP_FILE}"
        )
    return f"{directory}: no such directory"


def trace_prefix(directory: Path) -> str:
    """The prefix of the one trace set in ``directory`` (``<prefix>.<rank>.et``)."""
    directory = Path(directory)
    problem = trace_dir_problem(directory)
    if problem:
        raise ChakraError(problem)
    prefixes = {p.name.rsplit(".", 2)[0] for p in directory.glob("*.*.et")}
    if not prefixes:
        raise ChakraError(f"{directory}: no Chakra traces (<prefix>.<rank>.et) in it")
    if len(prefixes) > 1:
        raise ChakraError(
            f"{directory}: several trace sets ({', '.join(sorted(prefixes))}); keep one"
        )
    return prefixes.pop()


def read_trace_set(directory: Path) -> TraceSet:
    """The trace set in ``directory`` as rank programs (ChakraError: what is wrong)."""
    et, _ = _chakra()
    directory = Path(directory)
    prefix = trace_prefix(directory)
    if (directory / UNFINISHED_MARKER).exists():
        raise ChakraError(
            f"{directory}: an export into it did not finish ({UNFINISHED_MARKER}), so its "
            "rank files may mix two sets: export it again"
        )
    ranks = sorted(int(p.name.rsplit(".", 2)[1]) for p in directory.glob(f"{prefix}.*.et"))
    pg_ranks: dict[str, tuple[int, ...]] = {}
    groups_file = directory / COMM_GROUP_FILE
    if groups_file.exists():
        try:
            pg_ranks = {
                str(k): tuple(int(r) for r in v)
                for k, v in json.loads(groups_file.read_text()).items()
            }
        except (ValueError, TypeError, AttributeError) as e:
            raise ChakraError(f"{groups_file}: not a process-group file ({e})") from None
    p = _rank_count(et, directory, prefix, ranks, pg_ranks)
    per_rank: list[list[tuple[str, Op]]] = []
    kinds: dict[str, str] = {}
    model, phase_names = "chakra", None
    scale: float | None = None
    for rank in ranks:
        path = trace_path(directory, prefix, rank)
        meta, nodes = _read_file(et, path)
        attrs = _attrs(meta)
        kinds.update(json.loads(attrs.get("commsim_group_kinds", "{}")))
        model = attrs.get("commsim_model", model)
        scale = attrs.get("commsim_scale", scale)
        phase_names = phase_names or list(attrs.get("commsim_phases", []))
        reader = _NodeReader(et, path, rank, p, pg_ranks, kinds)
        per_rank.append(reader.program(nodes))
    phase_names = phase_names or ["trace"]
    programs = {name: [[] for _ in range(p)] for name in phase_names}
    for rank, ops in enumerate(per_rank):
        for phase, op in ops:
            if phase not in programs:
                programs[phase] = [[] for _ in range(p)]
                phase_names.append(phase)
            programs[phase][rank].append(op)
    used = {op.group for ops in per_rank for _, op in ops if hasattr(op, "group")}
    groups = _groups(p, pg_ranks, kinds, used)
    return TraceSet(p, phase_names, programs, groups, model, str(directory / prefix), scale)


def _rank_count(
    et: Any, directory: Path, prefix: str, ranks: list[int], pg_ranks: dict[str, tuple[int, ...]]
) -> int:
    """The set's rank count: its rank files must be 0..P-1, P being the most that any
    source names (the highest rank file, the project's metadata, comm_group.json), so
    that a deleted file is named as missing rather than found later as a group naming an
    unknown rank or a send to one."""
    claims = [(ranks[-1] + 1, f"{prefix}.{ranks[-1]}.et is there")]
    first = trace_path(directory, prefix, ranks[0])
    said = _attrs(_read_records(et, first, metadata_only=True)[0]).get("commsim_world_size")
    if isinstance(said, int):
        claims.append((said, f"{first.name}'s metadata says so"))
    named = max((max(g) for g in pg_ranks.values() if g), default=-1)
    if named >= 0:
        claims.append((named + 1, f"{COMM_GROUP_FILE} names rank {named}"))
    p, why = max(claims, key=lambda c: c[0])
    if len(ranks) < p:
        # (the first few, without a set of P ranks: a corrupt count may be huge)
        have = set(ranks)
        first_missing = list(itertools.islice((r for r in range(p) if r not in have), 8))
        files = ", ".join(f"{prefix}.{r}.et" for r in first_missing)
        n = p - len(ranks)
        files += f" and {n - 8} more" if n > 8 else ""
        if n == 1:
            what = f"rank {first_missing[0]}'s trace file {files} is missing"
        else:
            what = f"the trace files of {n} ranks are missing: {files}"
        raise ChakraError(
            f"{directory}: {what} (the set has {p} ranks: {why}); copy or export the whole "
            "set again"
        )
    return p


def _varint(data: bytes, pos: int) -> tuple[int, int] | None:
    """(value, position after it) of the varint at ``pos``; None if ``data`` ends in it."""
    value = shift = 0
    while pos < len(data):
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    return None


def _read_records(et: Any, path: Path, metadata_only: bool = False) -> list[Any]:
    """The messages of one rank file: its GlobalMetadata, then its Nodes (only the
    former with ``metadata_only``). Each is a varint byte length then that many bytes,
    as mlc-chakra's ``encodeMessage`` writes them; a zero length ends the file, as its
    ``decodeMessage`` reads. Its reader takes a record cut short by the end of the file
    as whole, which can parse as a node missing its last fields: a short read is a
    truncated file here, and so is a metadata node count (``commsim_nodes``) that the
    nodes fall short of."""
    data = path.read_bytes()
    messages: list[Any] = []
    pos = 0
    while pos < len(data):
        start = pos
        head = _varint(data, pos)
        if head is None:
            raise ChakraError(
                _truncated(path, len(data), f"in the length of the record at byte {start}")
            )
        size, pos = head
        if size == 0:
            break
        if pos + size > len(data):
            raise ChakraError(
                _truncated(
                    path,
                    len(data),
                    f"{len(data) - pos} bytes into the record of {size} bytes at byte {start}",
                )
            )
        msg = et.Node() if messages else et.GlobalMetadata()
        try:
            msg.ParseFromString(data[pos : pos + size])
        except Exception as e:  # protobuf's DecodeError, whichever implementation
            raise ChakraError(
                f"{path}: not a Chakra trace (record at byte {start}: {type(e).__name__}: {e})"
            ) from None
        messages.append(msg)
        pos += size
        if metadata_only:
            break
    if not messages:
        raise ChakraError(f"{path}: not a Chakra trace (no GlobalMetadata message at its start)")
    want = _attrs(messages[0]).get("commsim_nodes")
    if not metadata_only and isinstance(want, int) and len(messages) - 1 < want:
        raise ChakraError(
            _truncated(
                path,
                len(data),
                f"after {len(messages) - 1} of the {want} nodes its metadata counts",
            )
        )
    return messages


def _truncated(path: Path, size: int, where: str) -> str:
    return (
        f"{path}: truncated or corrupt: the file ({counted(size, 'byte')}) ends {where}; "
        "copy or export the set again"
    )


def _read_file(et: Any, path: Path) -> tuple[Any, list[Any]]:
    messages = _read_records(et, path)
    return messages[0], messages[1:]


def _attrs(msg: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in msg.attr:
        which = a.WhichOneof("value")
        if which is None:
            continue
        v = getattr(a, which)
        out[a.name] = list(v.values) if which.endswith("_list") else v
    return out


def _groups(
    p: int, pg_ranks: dict[str, tuple[int, ...]], kinds: dict[str, str], used: set[str]
) -> dict[str, list[tuple[int, ...]]]:
    """Every kind's groups, completed with one-rank groups so that each kind partitions
    the ranks."""
    by_kind: dict[str, list[tuple[int, ...]]] = {}
    for pg, members in pg_ranks.items():
        by_kind.setdefault(kinds.get(pg, f"pg{pg}"), []).append(members)
    if "world" in used and "world" not in by_kind:
        by_kind["world"] = [tuple(range(p))]
    out = {}
    for kind, groups in by_kind.items():
        seen: set[int] = set()
        for g in groups:
            bad = [r for r in g if not 0 <= r < p or r in seen]
            if bad:
                raise ChakraError(
                    f"{COMM_GROUP_FILE}: process groups of kind {kind!r} overlap or name "
                    f"ranks outside 0..{p - 1} (rank {bad[0]})"
                )
            seen.update(g)
        out[kind] = sorted(groups, key=min) + [(r,) for r in range(p) if r not in seen]
    for kind in used - set(out):
        raise ChakraError(
            f"a node names process group {kind!r}, which {COMM_GROUP_FILE} lacks"
            + ("" if pg_ranks else f" (the set's folder has no {COMM_GROUP_FILE})")
        )
    return out


class _NodeReader:
    """One rank's nodes -> its ops (exactly, from ``commsim_*`` attributes; otherwise
    by the schema's fields)."""

    def __init__(self, et: Any, path: Path, rank: int, p: int, pg_ranks: dict, kinds: dict) -> None:
        self.et, self.path, self.rank, self.p = et, path, rank, p
        self.pg_ranks, self.kinds = pg_ranks, kinds

    def _where(self, node: Any) -> str:
        kind = self.et.NodeType.Name(node.type)
        return f"{self.path.name}: node {node.id} {node.name!r} ({kind})"

    def program(self, nodes: list[Any]) -> list[tuple[str, Op]]:
        if nodes and all(any(a.name == "commsim_op" for a in n.attr) for n in nodes):
            return [self._exact(n) for n in nodes]
        return self._generic(nodes)

    # -- a trace written by this project ---------------------------------------------------
    def _exact(self, node: Any) -> tuple[str, Op]:
        a = _attrs(node)
        kind, label, phase = a["commsim_op"], node.name, a.get("commsim_phase", "trace")
        if kind == "compute":
            return phase, Compute(float(a["commsim_duration_us"]), label)
        if kind in ("wait", "testany"):
            cls = Wait if kind == "wait" else Testany
            return phase, cls(tuple(int(r) for r in a["commsim_reqs"]), label)
        req = None if a["commsim_req"] < 0 else int(a["commsim_req"])
        group, count = a["commsim_group"], int(a["commsim_count"])
        if kind == "collective":
            op = Collective(
                a["commsim_collective"],
                group,
                count,
                req,
                a.get("commsim_algorithm"),
                int(a.get("commsim_root", 0)),
                label,
            )
            return phase, op
        cls = Send if kind == "send" else Recv
        peer = int(a["comm_dst"] if kind == "send" else a["comm_src"])
        return phase, cls(peer, count, int(a["comm_tag"]), group, req, label)

    # -- any other trace ---------------------------------------------------------------------
    def _generic(self, nodes: list[Any]) -> list[tuple[str, Op]]:
        et = self.et
        by_id = {n.id: n for n in nodes}
        if len(by_id) != len(nodes):
            seen: set[int] = set()
            twice = next(n for n in nodes if n.id in seen or seen.add(n.id))
            raise ChakraError(f"{self._where(twice)}: node id {twice.id} is given twice")
        order = self._topological(nodes, by_id)
        ops: list[tuple[str, Op]] = []
        req_of: dict[int, int] = {}  # node id -> request id, until waited for
        waited: set[int] = set()
        for node in order:
            deps = set(node.data_deps) | set(node.ctrl_deps)
            pending = tuple(sorted(req_of[d] for d in deps if d in req_of and d not in waited))
            if pending:
                ops.append(("trace", Wait(pending, "dependency_wait")))
                waited.update(d for d in deps if d in req_of)
            if node.type == et.METADATA_NODE:
                continue
            if node.type == et.COMP_NODE:
                # Compute is what the rank is busy with: it waits for everything it
                # depends on (done above) and holds the rank.
                ops.append(("trace", Compute(float(node.duration_micros), node.name or "compute")))
                continue
            op = self._comm(node, len(req_of))
            req_of[node.id] = op.req  # type: ignore[assignment]
            ops.append(("trace", op))
        rest = tuple(sorted(r for n, r in req_of.items() if n not in waited))
        if rest:
            ops.append(("trace", Wait(rest, "end_wait")))
        return ops

    def _topological(self, nodes: list[Any], by_id: dict) -> list[Any]:
        pos = {n.id: i for i, n in enumerate(nodes)}
        indeg = {n.id: 0 for n in nodes}
        children: dict[int, list[int]] = {n.id: [] for n in nodes}
        for n in nodes:
            for d in set(n.data_deps) | set(n.ctrl_deps):
                if d not in by_id:
                    raise ChakraError(f"{self._where(n)} depends on node {d}, which is absent")
                indeg[n.id] += 1
                children[d].append(n.id)
        ready = [(pos[i], i) for i, k in indeg.items() if k == 0]
        heapq.heapify(ready)
        out = []
        while ready:
            _, i = heapq.heappop(ready)
            out.append(by_id[i])
            for c in children[i]:
                indeg[c] -= 1
                if indeg[c] == 0:
                    heapq.heappush(ready, (pos[c], c))
        if len(out) != len(nodes):
            stuck = next((n for n in nodes if indeg[n.id] > 0), nodes[0])
            raise ChakraError(f"{self._where(stuck)} is in a dependency cycle")
        return out

    def _comm(self, node: Any, req: int) -> Op:
        et, a = self.et, _attrs(node)
        group = self._group(node, a)

        def size_of() -> int:
            """The node's comm_size in bytes: required (a barrier's is 0), never negative."""
            if "comm_size" not in a:
                raise ChakraError(f"{self._where(node)} has no comm_size attribute")
            size = int(a["comm_size"])
            if size < 0:
                raise ChakraError(f"{self._where(node)}: comm_size {size} is negative")
            return size

        if node.type in (et.COMM_SEND_NODE, et.COMM_RECV_NODE):
            send = node.type == et.COMM_SEND_NODE
            key = "comm_dst" if send else "comm_src"
            if key not in a:
                raise ChakraError(f"{self._where(node)} has no {key} attribute")
            peer = int(a[key])
            if not 0 <= peer < self.p:
                raise ChakraError(
                    f"{self._where(node)}: {key} {peer} is not a rank of 0..{self.p - 1}"
                )
            cls = Send if send else Recv
            return cls(
                peer,
                math.ceil(size_of() / ELEM_BYTES),
                int(a.get("comm_tag", 0)),
                group,
                req,
                node.name or cls.__name__.lower(),
            )
        if node.type != et.COMM_COLL_NODE:
            raise ChakraError(
                f"{self._where(node)}: this node kind is not supported (compute, send, "
                "receive, collective and metadata nodes are)"
            )
        if "comm_type" not in a:
            raise ChakraError(f"{self._where(node)} has no comm_type attribute")
        name = et.CollectiveCommType.Name(int(a["comm_type"]))
        ops = {v: k for k, v in _COLLECTIVE_TYPES.items()} | {
            "REDUCE_SCATTER_BLOCK": "reduce_scatter"
        }
        if name not in ops:
            raise ChakraError(
                f"{self._where(node)}: collective {name} is not supported (supported: "
                f"{', '.join(sorted(ops))})"
            )
        op = ops[name]
        p = len(self._members(group))
        if op == "barrier":
            count = 0
        elif op in ("reduce_scatter", "alltoall"):
            count = math.ceil(size_of() / ELEM_BYTES / p)
        else:
            count = math.ceil(size_of() / ELEM_BYTES)
        return Collective(op, group, count, req, None, 0, node.name or op)

    def _group(self, node: Any, a: dict) -> str:
        pg = a.get("pg_name")
        if pg is None or pg == "":
            return "world"
        pg = str(pg)
        if pg not in self.pg_ranks:
            raise ChakraError(
                f"{self._where(node)}: process group {pg!r} is not in {COMM_GROUP_FILE}"
                + ("" if self.pg_ranks else f" (the set's folder has no {COMM_GROUP_FILE})")
            )
        if self.rank not in self.pg_ranks[pg]:
            raise ChakraError(
                f"{self._where(node)}: rank {self.rank} is not in process group {pg!r}"
            )
        return self.kinds.get(pg, f"pg{pg}")

    def _members(self, kind: str) -> tuple[int, ...]:
        if kind == "world":
            return tuple(range(self.p))
        for pg, members in self.pg_ranks.items():
            if self.kinds.get(pg, f"pg{pg}") == kind and self.rank in members:
                return members
        return (self.rank,)
