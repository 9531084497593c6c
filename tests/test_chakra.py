"""Chakra execution traces in and out, and the GOAL export."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from simnet.simulate import simulate
from tests.mpirun import run_json
from workload.chakra_et import ChakraError, export_trace_set, read_trace_set
from workload.goal import iter_goal_ops, write_goal
from workload.models.chakra import load
from workload.ops import Collective, Compute, Recv, Send, Wait
from workload.spec import RunSpec

et = pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
protolib = pytest.importorskip("chakra.src.third_party.utils.protolib")

ROOT = Path(__file__).resolve().parent.parent
SPECS = [
    RunSpec(
        "llm",
        flags={"preset": "mixtral-8x7b", "tp": 2, "sp": 1, "ep": 2, "layers": 2, "zero": 3},
        world_size=8,
    ),
    RunSpec(
        "llm", flags={"preset": "gpt3-175b", "pp": 2, "layers": 2, "sp": 1, "tp": 2}, world_size=4
    ),
    RunSpec("resnet50", world_size=4),  # two phases, non-blocking allreduces and waits
    RunSpec("gpt3_moe", args=(2, 1), world_size=32),
    RunSpec("alexnet_ring", world_size=4),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.model)
def test_round_trip_gives_identical_programs_and_groups(spec, tmp_path):
    w = spec.workload()
    files = export_trace_set(w, tmp_path, "job")
    assert [f.name for f in files] == [f"job.{r}.et" for r in range(w.world_size)] + [
        "comm_group.json"
    ]
    back = read_trace_set(tmp_path)
    assert back.world_size == w.world_size and back.model == w.model
    assert back.phases == [ph.name for ph in w.phases]
    for ph in w.phases:
        for r in range(w.world_size):
            assert back.programs[ph.name][r] == ph.program(r), (ph.name, r)
    assert back.groups == {k: sorted(v, key=min) for k, v in w.groups.items()}


def _nodes(path: Path) -> list:
    out = []
    with open(path, "rb") as f:
        meta = et.GlobalMetadata()
        assert protolib.decodeMessage(f, meta)
        while True:
            n = et.Node()
            if not protolib.decodeMessage(f, n):
                return out
            out.append(n)


def _attr(node, name):
    a = next(a for a in node.attr if a.name == name)
    return getattr(a, a.WhichOneof("value"))


def test_exported_nodes_carry_the_schema_fields_astra_sim_reads(tmp_path):
    spec = RunSpec(
        "llm", flags={"preset": "llama-3-8b", "tp": 2, "pp": 2, "layers": 2}, world_size=4
    )
    w = spec.workload()
    export_trace_set(w, tmp_path)
    nodes = _nodes(tmp_path / "trace.0.et")
    ops = w.phases[0].program(0)
    assert len(nodes) == len(ops)
    groups = json.loads((tmp_path / "comm_group.json").read_text())
    for node, op in zip(nodes, ops, strict=True):
        assert _attr(node, "is_cpu_op") is False
        if isinstance(op, Compute):
            assert node.type == et.COMP_NODE
            assert node.duration_micros == round(op.duration_us)
        elif isinstance(op, Collective):
            assert node.type == et.COMM_COLL_NODE
            assert _attr(node, "comm_type") == et.ALL_REDUCE
            assert _attr(node, "comm_size") == op.count_elems * 4
            assert groups[_attr(node, "pg_name")] == [0, 1]  # rank 0's tp group
        elif isinstance(op, Send):
            assert node.type == et.COMM_SEND_NODE
            assert (_attr(node, "comm_src"), _attr(node, "comm_dst")) == (0, 2)
            assert _attr(node, "comm_size") == op.count_elems * 4
            assert groups[_attr(node, "pg_name")] == [0, 2]  # its pp group
        elif isinstance(op, Recv):
            assert (_attr(node, "comm_src"), _attr(node, "comm_dst")) == (2, 0)
    # Program order: each blocking operation depends on the one before it; a non-blocking
    # send is waited for by the wait node that names it.
    by_id = {n.id: n for n in nodes}
    for i, (node, op) in enumerate(zip(nodes, ops, strict=True)):
        before = ops[i - 1] if i else None
        if isinstance(before, Compute | Wait) or getattr(before, "req", 0) is None:
            assert i - 1 in node.data_deps
        if isinstance(op, Wait) and op.reqs:
            waited = {n for n in node.data_deps if by_id[n].type == et.COMM_SEND_NODE}
            assert len(waited) == len(op.reqs)


def _write(path: Path, nodes: list) -> None:
    with open(path, "wb") as f:
        protolib.encodeMessage(f, et.GlobalMetadata(version="0.0.4"))
        for n in nodes:
            protolib.encodeMessage(f, n)


def _node(i, name, kind, deps=(), duration=0, **attrs):
    n = et.Node(id=i, name=name, type=kind, duration_micros=duration)
    n.data_deps.extend(deps)
    for k, v in attrs.items():
        a = et.AttributeProto(name=k)
        if isinstance(v, str):
            a.string_val = v
        else:
            a.int64_val = v
        n.attr.append(a)
    return n


def _hand_trace(d: Path, extra: list | None = None) -> None:
    """Rank 0 computes 100 us, sends 1 MiB to rank 1, then joins a 4 MiB allreduce;
    rank 1 receives, computes 50 us, joins the allreduce. A metadata node on rank 1."""
    mib = 1 << 20
    _write(
        d / "hand.0.et",
        [
            _node(0, "fwd", et.COMP_NODE, duration=100),
            _node(
                1,
                "send_act",
                et.COMM_SEND_NODE,
                [0],
                comm_src=0,
                comm_dst=1,
                comm_size=mib,
                comm_tag=7,
            ),
            _node(
                2,
                "grad_ar",
                et.COMM_COLL_NODE,
                [1],
                comm_type=et.ALL_REDUCE,
                comm_size=4 * mib,
                pg_name="1",
            ),
            *(extra or []),
        ],
    )
    _write(
        d / "hand.1.et",
        [
            _node(0, "pg_meta", et.METADATA_NODE),
            _node(
                1,
                "recv_act",
                et.COMM_RECV_NODE,
                [0],
                comm_src=0,
                comm_dst=1,
                comm_size=mib,
                comm_tag=7,
            ),
            _node(2, "fwd", et.COMP_NODE, [1], duration=50),
            _node(
                3,
                "grad_ar",
                et.COMM_COLL_NODE,
                [2],
                comm_type=et.ALL_REDUCE,
                comm_size=4 * mib,
                pg_name="1",
            ),
        ],
    )
    (d / "comm_group.json").write_text('{"1": [0, 1]}')


def test_a_hand_written_trace_is_imported_and_simulated(tmp_path):
    _hand_trace(tmp_path)
    ts = read_trace_set(tmp_path)
    assert ts.programs["trace"][0] == [
        Compute(100.0, "fwd"),
        Send(1, 262144, 7, "world", 0, "send_act"),  # no pg_name: the whole world
        Wait((0,), "dependency_wait"),
        Collective("allreduce", "pg1", 1048576, 1, None, 0, "grad_ar"),
        Wait((1,), "end_wait"),
    ]
    assert ts.programs["trace"][1][0] == Recv(0, 262144, 7, "world", 0, "recv_act")
    cfg = {
        "distributed": {"num_nodes": 2, "bandwidth_limit_gb_per_s": 10},
        "topology": {"type": "ring", "link_latency_us": 0},
        "collectives": {"algorithm": "ring"},
        "workload": {"name": "chakra", "world_size": 2, "flags": {"trace_dir": str(tmp_path)}},
    }
    res = simulate(cfg, record_series=False)
    # Rank 1 gets the 1 MiB at 100 us + 1 MiB / 10 GB/s, computes 50 us; the ring
    # allreduce of 4 MiB on 2 ranks then moves 2 MiB each way in each of 2 steps.
    mib_s = (1 << 20) / 10e9
    assert res.iteration_time_s == pytest.approx(150e-6 + mib_s + 4 * mib_s, rel=1e-9)
    # 0 -> 1: the 1 MiB message, then 2 MiB in each of the ring's 2 steps.
    assert res.traffic_bytes[0, 1] == (1 << 20) + 2 * (2 << 20)


def test_a_trace_set_is_found_from_the_configuration_files_folder(tmp_path, monkeypatch):
    """A relative ``trace_dir`` in a configuration file is taken from the file's folder,
    for the workload and for every job, wherever the command runs from."""
    (tmp_path / "study" / "traces").mkdir(parents=True)
    _hand_trace(tmp_path / "study" / "traces")
    workload = {"name": "chakra", "world_size": 2, "flags": {"trace_dir": "traces"}}
    cfg = {
        "distributed": {"num_nodes": 4, "bandwidth_limit_gb_per_s": 10},
        "topology": {"type": "ring", "link_latency_us": 0},
        "collectives": {"algorithm": "ring"},
        "workload": workload,
        "jobs": [{"name": "a", "workload": workload}, {"name": "b", "workload": workload}],
    }
    (tmp_path / "study" / "config.json").write_text(json.dumps(cfg))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    from simnet.config import load_config

    loaded = load_config(Path("..") / "study" / "config.json")
    where = str((tmp_path / "study" / "traces").resolve())
    assert loaded.workload.flags["trace_dir"] == where
    assert [j.workload.flags["trace_dir"] for j in loaded.jobs] == [where, where]
    # Given as a dict, a relative path stays as it is (the current folder's).
    assert load_config(cfg).workload.flags["trace_dir"] == "traces"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            [_node(3, "load", et.MEM_LOAD_NODE)],
            "hand.0.et: node 3 'load' (MEM_LOAD_NODE): this node kind is not supported",
        ),
        (
            [_node(3, "g", et.COMM_COLL_NODE, comm_type=et.GATHER, comm_size=8, pg_name="1")],
            "node 3 'g' (COMM_COLL_NODE): collective GATHER is not supported",
        ),
        (
            [_node(3, "x", et.COMP_NODE, [9])],
            "node 3 'x' (COMP_NODE) depends on node 9, which is absent",
        ),
        (
            [_node(3, "s", et.COMM_SEND_NODE, comm_dst=5, comm_size=4)],
            "node 3 's' (COMM_SEND_NODE): comm_dst 5 is not a rank of 0..1",
        ),
        (
            [_node(3, "c", et.COMM_COLL_NODE, comm_type=et.ALL_REDUCE, comm_size=8, pg_name="4")],
            "process group '4' is not in comm_group.json",
        ),
        (
            [_node(3, "c", et.COMM_COLL_NODE, comm_type=et.ALL_REDUCE, pg_name="1")],
            "node 3 'c' (COMM_COLL_NODE) has no comm_size attribute",
        ),
        (
            [_node(3, "s", et.COMM_SEND_NODE, comm_dst=1, comm_size=-5)],
            "node 3 's' (COMM_SEND_NODE): comm_size -5 is negative",
        ),
        ([_node(1, "again", et.COMP_NODE, duration=5)], "node id 1 is given twice"),
    ],
)
def test_unsupported_or_broken_nodes_are_named(tmp_path, extra, message):
    _hand_trace(tmp_path, extra)
    with pytest.raises(ChakraError, match=re.escape(message)):
        read_trace_set(tmp_path)


def test_a_trace_whose_ranks_cannot_finish_is_one_error_line(tmp_path, capsys):
    # Rank 0 also waits for a message from rank 1 that rank 1 never sends.
    from simnet.cli import main

    waits = _node(3, "never", et.COMM_RECV_NODE, [2], comm_src=1, comm_size=8, comm_tag=9)
    (tmp_path / "t").mkdir()
    _hand_trace(tmp_path / "t", [waits])
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({
        "distributed": {"num_nodes": 2}, "topology": {"type": "ring"},
        "workload": {"name": "chakra", "world_size": 2, "flags": {"trace_dir": "t"}},
    }))  # fmt: skip
    assert main(["--config", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: phase 'trace': ranks [0] never finished (deadlock: they wait for messages "
        "nobody sends)"
    ]
    assert not (tmp_path / "out").exists()


def test_missing_ranks_and_bad_directories(tmp_path):
    with pytest.raises(ChakraError, match="no Chakra traces"):
        read_trace_set(tmp_path)
    _hand_trace(tmp_path)
    (tmp_path / "hand.0.et").rename(tmp_path / "hand.2.et")
    with pytest.raises(ChakraError) as e:
        read_trace_set(tmp_path)
    assert str(e.value) == (
        f"{tmp_path}: rank 0's trace file hand.0.et is missing (the set has 3 ranks: "
        "hand.2.et is there); copy or export the whole set again"
    )
    (tmp_path / "hand.2.et").write_bytes(b"\x05garbage")
    (tmp_path / "hand.0.et").write_bytes(b"\x04\xff\xff\xff\xff")
    with pytest.raises(ChakraError, match=r"hand\.0\.et: not a Chakra trace \(record at byte 0"):
        read_trace_set(tmp_path)
    # A length cut short by the end of the file.
    (tmp_path / "hand.0.et").write_bytes(b"\xff\xff")
    with pytest.raises(ChakraError) as e:
        read_trace_set(tmp_path)
    assert str(e.value) == (
        f"{tmp_path / 'hand.0.et'}: truncated or corrupt: the file (2 bytes) ends in the "
        "length of the record at byte 0; copy or export the set again"
    )
    # A file given for the folder is said to be one (it was "no such directory").
    with pytest.raises(ChakraError) as e:
        read_trace_set(tmp_path / "comm_group.json")
    assert str(e.value) == (
        f"{tmp_path / 'comm_group.json'} is a file, not a folder: a trace set is the folder "
        "holding its <prefix>.<rank>.et files and comm_group.json"
    )


def _exported(tmp_path: Path) -> Path:
    """A 4-rank trace set of GPT-2 (8 layers on 2 stages: groups dp and pp) in tmp_path/et."""
    out = tmp_path / "et"
    export_trace_set(RunSpec("gpt2", args=(8, 2), world_size=4, scale=0.001).workload(), out)
    return out


def _records(data: bytes) -> list[tuple[int, int, int]]:
    """(start, start of the message, end) of each length-delimited record of a rank
    file, in bytes."""
    out, pos = [], 0
    while pos < len(data):
        start, size, shift = pos, 0, 0
        while True:
            b = data[pos]
            pos += 1
            size |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        out.append((start, pos, pos + size))
        pos += size
    return out


def test_a_deleted_rank_file_is_named_as_missing(tmp_path):
    # The last rank's file deleted: the set read as 3 ranks, and comm_group.json's groups
    # were blamed ("process groups of kind 'dp' overlap or name ranks outside 0..2").
    out = _exported(tmp_path)
    (out / "trace.3.et").unlink()
    with pytest.raises(ChakraError) as e:
        read_trace_set(out)
    assert str(e.value) == (
        f"{out}: rank 3's trace file trace.3.et is missing (the set has 4 ranks: "
        "trace.0.et's metadata says so); copy or export the whole set again"
    )
    (out / "trace.1.et").unlink()
    with pytest.raises(
        ChakraError, match=r"the trace files of 2 ranks are missing: trace\.1\.et, "
    ):
        read_trace_set(out)
    # A set from elsewhere (no metadata of ours): comm_group.json names the ranks.
    hand = tmp_path / "hand"
    hand.mkdir()
    _hand_trace(hand)
    (hand / "comm_group.json").write_text('{"1": [0, 1], "2": [2]}')
    with pytest.raises(ChakraError) as e:
        read_trace_set(hand)
    assert str(e.value) == (
        f"{hand}: rank 2's trace file hand.2.et is missing (the set has 3 ranks: "
        "comm_group.json names rank 2); copy or export the whole set again"
    )


def test_a_truncated_rank_file_is_named_wherever_it_is_cut(tmp_path):
    # Cut inside a record, the record's start parsed as a node without its last fields
    # (e.g. "has no comm_dst attribute"); cut between two records, it parsed whole.
    out = _exported(tmp_path)
    whole = (out / "trace.3.et").read_bytes()
    records = _records(whole)
    ends = [end for _, _, end in records]
    assert ends[-1] == len(whole)
    cuts = sorted({*ends[:-1], *range(1, len(whole), 37), 1000})
    for cut in cuts:
        (out / "trace.3.et").write_bytes(whole[:cut])
        with pytest.raises(ChakraError) as e:
            read_trace_set(out)
        message = str(e.value)
        assert message.startswith(f"{out / 'trace.3.et'}: truncated or corrupt: the file "), cut
        assert message.endswith("; copy or export the set again"), cut
    (out / "trace.3.et").write_bytes(whole[:1000])
    with pytest.raises(ChakraError) as e:
        read_trace_set(out)
    start, body, end = next(r for r in records if r[0] < 1000 < r[2])
    assert str(e.value) == (
        f"{out / 'trace.3.et'}: truncated or corrupt: the file (1000 bytes) ends "
        f"{1000 - body} bytes into the record of {end - body} bytes at byte {start}; copy or "
        "export the set again"
    )
    (out / "trace.3.et").write_bytes(whole[: ends[-2]])  # the last node gone, nothing cut
    with pytest.raises(ChakraError) as e:
        read_trace_set(out)
    nodes = len(ends) - 1
    assert str(e.value).endswith(
        f"ends after {nodes - 1} of the {nodes} nodes its metadata counts; copy or export the "
        "set again"
    )
    (out / "trace.3.et").write_bytes(whole)
    assert read_trace_set(out).world_size == 4


def test_a_broken_set_is_one_line_naming_the_file_in_every_front_end(tmp_path, capsys):
    from simnet.cli import main as simnet_main

    out = _exported(tmp_path)
    (out / "trace.3.et").write_bytes((out / "trace.3.et").read_bytes()[:1000])
    a_file = tmp_path / "some_file.json"
    a_file.write_text("{}")
    cases = [
        (
            out,
            f"{out / 'trace.3.et'}: truncated or corrupt: the file (1000 bytes) ends ",
            f"{out / 'trace.3.et'}: truncated or corrupt: the file (1000 bytes) ends ",
            f"workload: chakra: {out / 'trace.3.et'}: truncated or corrupt: the file (1000 ",
        ),
        (
            a_file,
            f"{a_file} is a file, not a folder: a trace set is the folder holding its "
            "<prefix>.<rank>.et files and comm_group.json",
            f"--trace-dir {a_file} is a file, not a folder: a trace set is the folder ",
            f"workload.flags.trace_dir {a_file} is a file, not a folder: a trace set ",
        ),
    ]
    for where, shown, replayed, simulated in cases:
        r = _simnet("chakra", "show", str(where))
        assert r.returncode == 2 and r.stderr.startswith(f"error: {shown}"), r.stderr
        assert len(r.stderr.splitlines()) == 1
        # (one process, no mpiexec: the set is read before MPI starts)
        r = subprocess.run(
            [sys.executable, "-m", "proxies.chakra", "--trace-dir", str(where), "--iters", "1"],
            capture_output=True, text=True, timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert r.returncode == 2 and r.stderr.startswith(f"error: chakra: {replayed}"), r.stderr
        assert len(r.stderr.splitlines()) == 1 and r.stdout == ""
        cfg = tmp_path / "c.json"
        cfg.write_text(json.dumps({
            "topology": {"type": "switch"},
            "workload": {"name": "chakra", "world_size": 4, "flags": {"trace_dir": str(where)}},
        }))  # fmt: skip
        load.__globals__["_CACHE"].clear()
        assert simnet_main(["--config", str(cfg), "--out", str(tmp_path / "o"), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {simulated}") and len(err.splitlines()) == 1, err


def test_world_size_must_match_the_trace_set(tmp_path):
    _hand_trace(tmp_path)
    with pytest.raises(ValueError, match="the world size must be the trace set's rank count, 2"):
        RunSpec("chakra", flags={"trace_dir": str(tmp_path)}, world_size=4).workload()


def test_simulating_the_export_predicts_the_same_as_the_workload(tmp_path):
    flags = {"preset": "llama-3-8b", "tp": 2, "pp": 2, "layers": 4, "zero": 1}
    base = {
        "topology": {"type": "hierarchical", "num_nodes": 8, "group_size": 4},
        "workload": {"name": "llm", "world_size": 8, "scale": 0.001, "flags": flags},
    }
    direct = simulate(base, record_series=False)
    export_trace_set(RunSpec("llm", flags=flags, world_size=8, scale=0.001).workload(), tmp_path)
    load.__globals__["_CACHE"].clear()
    replay = simulate(
        {
            **base,
            "workload": {"name": "chakra", "world_size": 8, "flags": {"trace_dir": str(tmp_path)}},
        },
        record_series=False,
    )
    assert replay.iteration_time_s == direct.iteration_time_s
    assert (replay.traffic_bytes == direct.traffic_bytes).all()


def test_a_trace_set_replays_over_mpi(tmp_path):
    (tmp_path / "t").mkdir()
    _hand_trace(tmp_path / "t")
    doc = run_json(
        tmp_path,
        2,
        "proxies.chakra",
        "--trace-dir",
        str(tmp_path / "t"),
        "--compute",
        "none",
        "--iters",
        "1",
        "--warmup",
        "0",
    )
    ranks = doc["phases"][0]["per_rank"]
    # Rank 0: the 1 MiB send and the 4 MiB allreduce; rank 1: the receive and the same.
    assert ranks[0]["program"]["call_bytes_by_group"] == {"world": 1 << 20, "pg1": 4 << 20}
    assert ranks[1]["program"]["calls_by_group"] == {"world": 1, "pg1": 1}


def test_a_replay_whose_ranks_cannot_finish_is_refused_before_mpi_work(tmp_path):
    # It hung until --timeout (300 s by default); its programs say at once what is wrong.
    from tests.mpirun import mpirun

    waits = _node(3, "never", et.COMM_RECV_NODE, [2], comm_src=1, comm_size=8, comm_tag=9)
    (tmp_path / "t").mkdir()
    _hand_trace(tmp_path / "t", [waits])
    r = mpirun(2, "proxies.chakra", "--trace-dir", str(tmp_path / "t"),
               "--iters", "1", "--warmup", "0", "--timeout", "60", timeout=50)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.splitlines() == [
        "error: chakra: phase 'trace': rank 0 receives 1 message(s) from rank 1 (tag 9, on its "
        "'world' group) and rank 1 sends it 0; the replay would wait for it until --timeout"
    ]
    assert r.stdout == ""


# -- GOAL ----------------------------------------------------------------------------------
def _goal(spec: RunSpec, tmp_path: Path) -> tuple[str, dict]:
    path = tmp_path / "w.goal"
    counts = write_goal(spec.workload(), path)
    return path.read_text(), counts


def test_goal_sends_and_receives_match(tmp_path):
    text, counts = _goal(SPECS[0], tmp_path)
    sends: Counter = Counter()
    recvs: Counter = Counter()
    for rank, op in iter_goal_ops(text):
        w = op.split()
        if w[0] == "send":
            sends[(rank, int(w[3]), int(w[5]), w[1])] += 1
        elif w[0] == "recv":
            recvs[(int(w[3]), rank, int(w[5]), w[1])] += 1
    assert sends == recvs
    assert sum(sends.values()) == counts["sends"] == counts["recvs"]
    assert text.startswith("num_ranks 8\n\nrank 0 {\n")


def test_goal_dependencies_point_backwards_and_bytes_match_simnet(tmp_path):
    spec = RunSpec(
        "llm",
        flags={"preset": "llama-3-8b", "tp": 2, "pp": 2, "layers": 2},
        world_size=8,
        scale=0.001,
    )
    text, counts = _goal(spec, tmp_path)
    defined: set[int] = set()
    for line in text.splitlines():
        if line.startswith("rank "):
            defined = set()
        elif " requires " in line:
            a, _, b = line.split()
            assert int(b[1:]) in defined and int(a[1:]) in defined
        elif line.startswith("l"):
            defined.add(int(line.split(":")[0][1:]))
    res = simulate(
        {
            "topology": {"type": "hierarchical", "num_nodes": 8, "group_size": 4},
            "workload": {
                "name": "llm",
                "world_size": 8,
                "scale": 0.001,
                "flags": {"preset": "llama-3-8b", "tp": 2, "pp": 2, "layers": 2},
            },
        },
        record_series=False,
    )
    assert counts["bytes"] == int(res.traffic_bytes.sum())


def test_goal_keeps_stream_order_as_simnet_runs_it(tmp_path):
    # Two non-blocking allreduces on one group: in stream order the second's first
    # transfers require the first's last ones; otherwise they require only what came
    # before both.
    from workload.ops import Collective, Wait
    from workload.program import Phase, Workload

    def program(rank: int) -> list:
        return [
            Collective("allreduce", "world", 1024, req=1, algorithm="ring"),
            Collective("allreduce", "world", 1024, req=2, algorithm="ring"),
            Wait((1, 2)),
        ]

    wl = Workload("t", 4, {}, {"world": [(0, 1, 2, 3)]}, [Phase("x", program)])

    def second_requires_first(**order) -> bool:
        path = tmp_path / "s.goal"
        write_goal(wl, path, **order)
        block = path.read_text().split("rank 1 {")[0]
        labels = {}
        for line in block.splitlines():
            if ": " in line and line.startswith("l"):
                label, op = line.split(": ")
                labels[label] = int(op.split()[-1])  # its tag: the collective's number
        first, second = sorted(set(labels.values()))
        needs = [ln.split(" requires ") for ln in block.splitlines() if " requires " in ln]
        return any(labels[a] == second and labels[b] == first for a, b in needs)

    assert second_requires_first(stream_order=True)
    assert not second_requires_first(stream_order=False)
    assert not second_requires_first()  # named algorithms: MPI's way, not NCCL's


def test_goal_compute_in_nanoseconds(tmp_path):
    text, counts = _goal(RunSpec("alexnet_ring", world_size=2), tmp_path)
    calcs = [op for _, op in iter_goal_ops(text) if op.startswith("calc")]
    assert len(calcs) == counts["calcs"] and calcs
    assert all(int(c.split()[1]) % 1000 == 0 for c in calcs)  # whole microseconds here


# -- the command line ----------------------------------------------------------------------
def _simnet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "simnet", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


def test_cli_export_show_and_goal(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(
        json.dumps(
            {
                "topology": {"type": "hierarchical", "num_nodes": 4, "group_size": 2},
                "workload": {
                    "name": "llm",
                    "world_size": 4,
                    "scale": 0.001,
                    "flags": {"preset": "llama-3-8b", "tp": 2, "layers": 2},
                },
            }
        )
    )
    out = tmp_path / "et"
    out.mkdir()
    # An earlier export of 8 ranks left its files: those of ranks 4..7 go.
    for rank in range(8):
        (out / f"trace.{rank}.et").write_bytes(b"old")
    # Another set in the folder: refused (its comm_group.json would be replaced, and a
    # folder is read as one set), and it is left as it was.
    (out / "other.5.et").write_bytes(b"another prefix's")
    r = _simnet("chakra", "export", "--config", str(cfg), "--out", str(out), "--goal")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"error: {out} holds the trace set 'other' (its other.<rank>.et and comm_group.json); "
        "a folder holds one set: export 'trace' into another folder, or remove that set first"
    )
    assert (out / "other.5.et").read_bytes() == b"another prefix's"
    (out / "other.5.et").unlink()
    r = _simnet("chakra", "export", "--config", str(cfg), "--out", str(out), "--goal")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "comm_group.json",
        "trace.0.et",
        "trace.1.et",
        "trace.2.et",
        "trace.3.et",
        "trace.export.json",
        "trace.goal",
    ]
    doc = json.loads((out / "trace.export.json").read_text())
    assert doc["world_size"] == 4 and doc["goal"]["sends"] > 0
    assert "wrote 4 Chakra traces of llm" in r.stdout
    r = _simnet("chakra", "show", str(out))
    assert r.returncode == 0 and "4 ranks, phases iteration" in r.stdout
    assert "process groups dp: 2 of 2 ranks" in r.stdout
    # Exported again without --goal: the earlier GOAL file goes too.
    r = _simnet("chakra", "export", "--config", str(cfg), "--out", str(out))
    assert r.returncode == 0 and not (out / "trace.goal").exists()
    r = _simnet("chakra", "show", str(tmp_path / "nothing"))
    assert (
        r.returncode == 2
        and r.stderr.strip() == f"error: {tmp_path / 'nothing'}: no such directory"
    )


def test_a_set_without_its_process_group_file_says_so(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({
        "topology": {"type": "hierarchical", "num_nodes": 4, "group_size": 2},
        "workload": {"name": "llm", "world_size": 4, "scale": 0.001,
                     "flags": {"preset": "llama-3-8b", "tp": 2, "layers": 2}},
    }))  # fmt: skip
    out = tmp_path / "et"
    assert _simnet("chakra", "export", "--config", str(cfg), "--out", str(out)).returncode == 0
    (out / "comm_group.json").unlink()
    r = _simnet("chakra", "show", str(out))
    assert r.returncode == 2
    assert "(the set's folder has no comm_group.json)" in r.stderr


def _small_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "small.json"
    cfg.write_text(json.dumps({
        "topology": {"type": "switch", "num_nodes": 4},
        "workload": {"name": "gpt2", "args": [8, 2], "world_size": 4},
    }))  # fmt: skip
    return cfg


def test_goal_and_export_write_through_links_and_into_special_files(tmp_path, capsys):
    from workflows.chakra import main

    cfg = _small_config(tmp_path)
    assert main(["goal", "--config", str(cfg), "--out", str(tmp_path / "direct.goal")]) == 0
    expected = (tmp_path / "direct.goal").read_bytes()
    # A link is followed: the file it names gets the schedule, the link stays a link.
    (tmp_path / "real.goal").write_text("old")
    (tmp_path / "link.goal").symlink_to("real.goal")
    assert main(["goal", "--config", str(cfg), "--out", str(tmp_path / "link.goal")]) == 0
    assert (tmp_path / "link.goal").is_symlink()
    assert (tmp_path / "real.goal").read_bytes() == expected
    # A special file (as /dev/null) is written into, never replaced by a regular file.
    fifo = tmp_path / "fifo.goal"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert main(["goal", "--config", str(cfg), "--out", str(fifo)]) == 0
    reader.join(timeout=60)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and got == [expected]
    # A node of /dev/null's device stands in for it (as root, a rename replaced it).
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    assert main(["goal", "--config", str(cfg), "--out", str(null)]) == 0
    assert stat.S_ISCHR(os.lstat(null).st_mode) and null.stat().st_rdev == os.makedev(1, 3)
    # The trace set's files too: a rank file that is a link stays one.
    out = tmp_path / "et"
    out.mkdir()
    (tmp_path / "rank1.et").write_text("old")
    (out / "trace.1.et").symlink_to(tmp_path / "rank1.et")
    assert main(["export", "--config", str(cfg), "--out", str(out), "--goal"]) == 0
    assert (out / "trace.1.et").is_symlink()
    assert (tmp_path / "rank1.et").read_bytes()[:1] != b"o"
    assert read_trace_set(out).world_size == 4
    assert not list(tmp_path.rglob("*.tmp"))
    # The printed size names the GOAL file apart from the traces.
    printed = capsys.readouterr().out
    goal_mb = (out / "trace.goal").stat().st_size / 1e6
    assert f", and the GOAL schedule trace.goal ({goal_mb:.1f} MB)" in printed


def test_goal_and_export_refuse_bad_outputs_before_writing(tmp_path, capsys):
    from workflows.chakra import main

    cfg = _small_config(tmp_path)

    def refused(*args: str) -> str:
        assert main([*args, "--config", str(cfg)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1
        return err[0]

    (tmp_path / "folder").mkdir()
    assert refused("goal", "--out", str(tmp_path / "folder")) == (
        f"error: --out {tmp_path / 'folder'}: a folder; name a file "
        f"(e.g. {tmp_path / 'folder' / 'results.json'})"
    )
    (tmp_path / "file").write_text("x")
    assert refused("export", "--out", str(tmp_path / "file")) == (
        f"error: {tmp_path / 'file'} is a file, not a folder: choose another --out"
    )
    for prefix in ("../escape", "", ".hidden", "a/b"):
        assert refused("export", "--out", str(tmp_path / "et"), "--prefix", prefix) == (
            f"error: --prefix {prefix!r}: name the files with a plain word (no '/' or '\\', "
            "not empty, not starting with '.'), e.g. --prefix trace"
        )
    # A rank's file is a folder: refused before any file of the set is written.
    (tmp_path / "et" / "trace.2.et").mkdir(parents=True)
    assert refused("export", "--out", str(tmp_path / "et")) == (
        f"error: {tmp_path / 'et' / 'trace.2.et'} is a folder: remove it or choose another --out"
    )
    assert sorted(p.name for p in (tmp_path / "et").iterdir()) == ["trace.2.et"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["et", "file", "folder", "small.json"]
    assert not list(tmp_path.rglob("RUN_INCOMPLETE.txt"))
    # An export that stops part-way (here: a rank's program cannot be built) leaves the
    # folder marked, and the mixed set is refused rather than read.
    import workflows.chakra as wc

    good = tmp_path / "good"
    assert main(["export", "--config", str(cfg), "--out", str(good)]) == 0
    assert read_trace_set(good).world_size == 4
    real = wc.export_trace_set

    def stops_after_two(workload, out, prefix, progress):
        def tick(rank: int) -> None:
            if rank == 1:
                raise OSError(28, "No space left on device")

        return real(workload, out, prefix, tick)

    wc.export_trace_set = stops_after_two
    try:
        assert main(["export", "--config", str(cfg), "--out", str(good)]) == 2
    finally:
        wc.export_trace_set = real
    capsys.readouterr()
    with pytest.raises(ChakraError, match="an export into it did not finish"):
        read_trace_set(good)
    assert main(["export", "--config", str(cfg), "--out", str(good)]) == 0
    assert read_trace_set(good).world_size == 4
    assert "RUN_INCOMPLETE.txt" not in [p.name for p in good.iterdir()]
    # Missing folders are made, as for the proxies' --json.
    assert main(["goal", "--config", str(cfg), "--out", str(tmp_path / "a" / "b" / "x.goal")]) == 0
    assert (tmp_path / "a" / "b" / "x.goal").read_text().startswith("num_ranks 4\n")


def test_shown_alltoall_bytes_say_they_are_not_the_nodes_comm_size(tmp_path, capsys):
    from workflows.chakra import main

    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({
        "topology": {"type": "switch", "num_nodes": 8},
        "workload": {"name": "dlrm", "world_size": 8, "scale": 0.001},
    }))  # fmt: skip
    out = tmp_path / "et"
    assert main(["export", "--config", str(cfg), "--out", str(out)]) == 0
    comm_size = sum(
        _attr(n, "comm_size")
        for rank in range(8)
        for n in _nodes(out / f"trace.{rank}.et")
        if n.type == et.COMM_COLL_NODE and _attr(n, "comm_type") == et.ALL_TO_ALL
    )
    doc = json.loads((out / "trace.export.json").read_text())
    # The whole input in the nodes; the bytes to the 7 other ranks in the totals, said so.
    assert doc["call_bytes"]["alltoall"] * 8 == comm_size * 7
    assert "of an alltoall the bytes to the other ranks ((p - 1) / p of its nodes' " \
        "comm_size, which is the whole input)" in doc["call_bytes_definition"]  # fmt: skip
    capsys.readouterr()
    assert main(["show", str(out)]) == 0
    assert f"  (GB: {doc['call_bytes_definition']})" in capsys.readouterr().out.splitlines()


def test_an_export_records_its_scale_and_a_replay_reports_it(tmp_path):
    # A set exported at 0.01 was replayed as "scale 1", as if its messages were the
    # model's own.
    from tests.mpirun import mpirun

    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"workload": {"name": "dlrm", "world_size": 2, "scale": 0.01}}))
    out = tmp_path / "et"
    r = _simnet("chakra", "export", "--config", str(cfg), "--out", str(out))
    assert r.returncode == 0, r.stderr
    wrote = f"wrote 2 Chakra traces of dlrm (message scale 0.01) and comm_group.json to {out} "
    assert wrote in r.stdout
    assert json.loads((out / "trace.export.json").read_text())["scale"] == 0.01
    r = _simnet("chakra", "show", str(out))
    assert r.stdout.startswith(
        f"{out / 'trace'}: a dlrm trace set exported at message scale 0.01, 2 ranks, "
    )
    load.__globals__["_CACHE"].clear()
    # Replayed at --scale 0.5: the set's scale is reported, and the workload's messages
    # are 0.01 x 0.5 of the model's.
    replay = RunSpec("chakra", flags={"trace_dir": str(out)}, world_size=2, scale=0.5).workload()
    assert replay.scale == 0.005 and replay.info["exported_scale"] == 0.01
    result = tmp_path / "r.json"
    r = mpirun(2, "proxies.chakra", "--trace-dir", str(out), "--iters", "1", "--warmup", "0",
               "--compute", "none", "--json", str(result), timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    start = r.stdout.splitlines()[0].split("] ", 1)[1]
    assert start.startswith(
        "chakra: 2 ranks, a dlrm trace set exported at message scale 0.01, thread level "
    )
    assert json.loads(result.read_text())["info"]["exported_scale"] == 0.01


def test_a_set_that_records_no_scale_is_of_unknown_scale_not_1(tmp_path):
    (tmp_path / "t").mkdir()
    _hand_trace(tmp_path / "t")
    assert read_trace_set(tmp_path / "t").scale is None
    load.__globals__["_CACHE"].clear()
    w = RunSpec("chakra", flags={"trace_dir": str(tmp_path / "t")}, world_size=2).workload()
    assert w.scale is None and w.info["exported_scale"] is None
    assert w.start_note == "a trace set of unknown message scale (its files do not record one)"
    # Exported again, the set's scale stays unknown: recorded as null, not as 1.
    doc_dir = tmp_path / "again"
    export_trace_set(w, doc_dir)
    load.__globals__["_CACHE"].clear()
    assert read_trace_set(doc_dir).scale is None


def test_progress_into_a_log_is_whole_lines(capsys, monkeypatch):
    import itertools

    from simnet import progress
    from workflows import chakra

    # stderr no terminal (capsys): a whole line at most every 10 s (here 4 s a reading,
    # the first at 0 s) and the last rank's, no carriage returns; the run's progress
    # lines, with the seconds since the start.
    ticks = itertools.count()
    monkeypatch.setattr(progress.time, "perf_counter", lambda: 4.0 * next(ticks))
    tick = chakra._progress("exporting", 5)
    for rank in range(5):
        tick(rank)
    assert capsys.readouterr().err == (
        "[  12.0 s] exporting: rank 3/5\n[  20.0 s] exporting: rank 5/5\n"
    )


@pytest.mark.parametrize(("algorithm", "kind"), [("nccl_ring", "rings"), ("nccl_tree", "trees")])
def test_goal_writes_streamed_rings_and_trees_step_by_step(tmp_path, algorithm, kind):
    # A trace holds each message and no delay after it: a configuration that streams
    # NCCL rings or trees (fewer messages when simulated) exports every step.
    from workflows.chakra import main

    def config(streamed: bool) -> dict:
        return {
            "topology": {"type": "switch", "num_nodes": 4},
            "workload": {"name": "resnet50", "world_size": 4},  # (full size: trees of chunks)
            "collectives": {"algorithm": algorithm, f"streamed_{kind}": streamed},
        }

    goals = []
    for streamed in (False, True):
        cfg = tmp_path / f"{streamed}.json"
        cfg.write_text(json.dumps(config(streamed)))
        goal = tmp_path / f"{streamed}.goal"
        assert main(["goal", "--config", str(cfg), "--out", str(goal)]) == 0
        goals.append(goal.read_bytes())
    assert goals[0] == goals[1]
    messages = [
        sum(ph.messages for ph in simulate(config(s), record_series=False).phases)
        for s in (False, True)
    ]
    assert messages[1] < messages[0]
