"""``python -m proxies.microbench`` on real MPI (mpiexec in a subprocess, 1-4 ranks).

Expected sizes, counts and bandwidths are derived here from the nccl-tests
rules (workflows.md section 3), not from the module's code.
"""

from __future__ import annotations

import json
import math

import psutil
import pytest

from proxies.microbench import message_sizes, parse_size

from .mpirun import mpirun, run_json

FAST = ("-n", "3", "-w", "1")
ELEM = 4  # float32
RESULT_KEYS = {
    "op",
    "algorithm",
    "size_bytes",
    "count_elems",
    "iterations",
    "time_s",
    "algbw_bytes_per_s",
    "busbw_bytes_per_s",
}
# S split into p blocks (count = elements per rank), or S is the whole count.
PER_RANK = {"allgather", "reduce_scatter", "alltoall"}


def bus_factor(op: str, n: int) -> float:
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in PER_RANK:
        return (n - 1) / n
    return 1.0  # bcast, reduce, pingpong, stream


def expected(op: str, sizes: list[int], p: int) -> list[tuple[int, int]]:
    """(size_bytes, count_elems) of every row nccl-tests would print for ``op``."""
    rows = []
    for s in sizes:
        if op in PER_RANK:
            count = s // ELEM // p
            size = count * p * ELEM
        else:
            count = s // ELEM
            size = count * ELEM
        if count >= 1:
            rows.append((size, count))
    return rows


def rows_of(doc: dict, op: str) -> list[dict]:
    return [r for r in doc["results"] if r["op"] == op]


def check_row(r: dict, n: int, iters: int) -> None:
    assert set(r) == RESULT_KEYS
    assert r["iterations"] == iters
    t = r["time_s"]
    assert set(t) == {"avg", "min", "max"}
    assert 0 < t["min"] <= t["avg"] <= t["max"]
    assert math.isclose(r["algbw_bytes_per_s"], r["size_bytes"] / t["avg"], rel_tol=1e-12)
    assert math.isclose(
        r["busbw_bytes_per_s"],
        r["algbw_bytes_per_s"] * bus_factor(r["op"], n),
        rel_tol=1e-12,
        abs_tol=1e-9,
    )


def test_sizes_parse_and_list_like_nccl_tests():
    assert [parse_size(s) for s in ("8", "64K", "128M", "1G", "2k")] == [
        8,
        65536,
        134217728,
        1073741824,
        2048,
    ]
    assert message_sizes(8, 128 * 2**20, 2, 1) == [8 * 2**k for k in range(25)]
    assert message_sizes(4, 400, 1, 100) == [4, 104, 204, 304]
    assert message_sizes(5, 5, 2, 1) == [5]


def test_collectives_three_ranks_json_shape_counts_and_bandwidth(tmp_path):
    ops = ["allreduce", "allgather", "reduce_scatter", "alltoall", "bcast", "reduce"]
    out = tmp_path / "mb.json"
    r = mpirun(
        3, "proxies.microbench", "-b", "8", "-e", "256", "-f", "2", "--ops", ",".join(ops),
        *FAST, "--json", str(out), timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert set(doc) == {"kind", "world_size", "mpi", "options", "versions", "results"}
    assert doc["kind"] == "microbench" and doc["world_size"] == 3
    assert set(doc["mpi"]) == {"library", "thread_level", "progress", "poll_pause_s"}
    # The micro-benchmark blocks by default (polling would add its pauses to latency).
    assert (doc["mpi"]["progress"], doc["mpi"]["poll_pause_s"]) == ("blocking", None)
    assert doc["mpi"]["library"].startswith(("MPICH", "Open MPI"))
    assert doc["mpi"]["thread_level"] == "single"
    assert doc["mpi"]["progress"] in ("blocking", "poll")
    assert doc["options"]["minbytes"] == 8 and doc["options"]["maxbytes"] == 256
    sizes = [8, 16, 32, 64, 128, 256]
    assert [row["op"] for row in doc["results"]] == [
        op for op in ops for _ in expected(op, sizes, 3)
    ]
    for op in ops:
        got = rows_of(doc, op)
        assert [(g["size_bytes"], g["count_elems"]) for g in got] == expected(op, sizes, 3), op
        for g in got:
            assert g["algorithm"] == "mpi"
            check_row(g, 3, 3)
    # Spot checks by hand: 64 B over 3 ranks is 5 whole elements per rank, 60 B.
    assert (
        rows_of(doc, "allgather")[2]["size_bytes"],
        rows_of(doc, "allgather")[2]["count_elems"],
    ) == (60, 5)
    assert rows_of(doc, "allreduce")[0]["count_elems"] == 2  # 8 B
    # The table: units in the header, GB stated, the skipped 8 B noted, one row per result.
    assert "size (B)" in r.stdout and "busbw (GB/s)" in r.stdout and "GB = 1e9" in r.stdout
    assert "collectives out of place (a send and a receive buffer" in r.stdout
    assert "time avg (us)" in r.stdout and "count (elems)" in r.stdout
    assert "allgather: 1 size(s) below 12 B skipped" in r.stdout
    table = [ln for ln in r.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(table) == len(doc["results"])
    assert "MPICH" in r.stdout.splitlines()[0] or "Open MPI" in r.stdout.splitlines()[0]


def test_point_to_point_and_multiplicative_sizes(tmp_path):
    doc = run_json(
        tmp_path, 2, "proxies.microbench", "-b", "1K", "-e", "40K", "-f", "3",
        "--ops", "pingpong,stream,allreduce", "--window", "8", *FAST, timeout=60,
    )  # fmt: skip
    sizes = [1024, 3072, 9216, 27648]  # x3 from 1K while <= 40K
    for op in ("pingpong", "stream", "allreduce"):
        got = rows_of(doc, op)
        assert [g["size_bytes"] for g in got] == sizes, op
        assert [g["count_elems"] for g in got] == [s // 4 for s in sizes]
        for g in got:
            assert g["algorithm"] == "mpi"
            check_row(g, 2, 3)


def test_additive_step(tmp_path):
    doc = run_json(
        tmp_path, 2, "proxies.microbench", "-b", "4", "-e", "400", "-f", "1", "-i", "100",
        "--ops", "bcast", *FAST, timeout=60,
    )  # fmt: skip
    assert [g["size_bytes"] for g in rows_of(doc, "bcast")] == [4, 104, 204, 304]


def test_our_ring_schedule_runs_and_unsupported_ops_are_skipped(tmp_path):
    out = tmp_path / "ring.json"
    r = mpirun(
        4, "proxies.microbench", "--algorithm", "ring", "-b", "64", "-e", "1K", "-f", "4",
        "--ops", "allreduce,allgather,reduce_scatter,alltoall", *FAST, "--json", str(out),
        timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    sizes = [64, 256, 1024]
    for op in ("allreduce", "allgather", "reduce_scatter"):
        got = rows_of(doc, op)
        assert [(g["size_bytes"], g["count_elems"]) for g in got] == expected(op, sizes, 4)
        assert {g["algorithm"] for g in got} == {"ring"}
        for g in got:
            check_row(g, 4, 3)
    assert rows_of(doc, "alltoall") == []
    assert "alltoall skipped" in r.stdout


def test_schedule_moves_the_whole_message(tmp_path):
    """A 16 MiB ring allreduce cannot beat 50 GB/s of bus bandwidth on any host.

    Guards against sending slices of a too-short send buffer (one element
    instead of the transfer), which measured thousands of GB/s.
    """
    doc = run_json(
        tmp_path, 2, "proxies.microbench", "--algorithm", "ring", "--ops", "allreduce",
        "-b", "16M", "-e", "16M", "-n", "2", "-w", "1", timeout=60,
    )  # fmt: skip
    (r,) = doc["results"]
    assert r["algorithm"] == "ring" and r["count_elems"] == 4 * 2**20
    assert r["busbw_bytes_per_s"] < 50e9


def test_power_of_two_schedule_skipped_on_three_ranks():
    r = mpirun(
        3, "proxies.microbench", "--algorithm", "recursive_doubling", "-b", "64", "-e", "64",
        "--ops", "allreduce,allgather", *FAST, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "allgather skipped" in r.stdout and "power of two" in r.stdout
    rows = [ln.split() for ln in r.stdout.splitlines() if ln and not ln.startswith("#")]
    assert [(x[0], x[1], x[2]) for x in rows] == [("allreduce", "64", "16")]


def test_single_rank_skips_point_to_point(tmp_path):
    doc = run_json(
        tmp_path, 1, "proxies.microbench", "-b", "64", "-e", "64", "--ops",
        "allreduce,pingpong", *FAST, timeout=60,
    )  # fmt: skip
    assert [g["op"] for g in doc["results"]] == ["allreduce"]
    assert doc["results"][0]["busbw_bytes_per_s"] == 0.0  # 2(n-1)/n = 0 at n = 1


@pytest.mark.parametrize(
    "args",
    [
        ("-b", "8X"),
        ("-b", "64", "-e", "8"),
        ("--ops", "allreduce,nope"),
        ("--algorithm", "nope"),
        ("-n", "0"),
        ("--bogus",),
    ],
)
def test_bad_argument_one_error_line_exit_2(args):
    r = mpirun(2, "proxies.microbench", *args, timeout=30)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: microbench: "), r.stderr
    assert r.stdout == ""


@pytest.mark.skipif(
    psutil.virtual_memory().available > 100 * 2**30, reason="host could hold the buffers"
)
def test_memory_refusal():
    r = mpirun(2, "proxies.microbench", "-b", "64G", "-e", "64G", "--ops", "allreduce", timeout=30)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "refused" in r.stdout and "GiB they may take (90% of the " in r.stdout
    assert r.stderr.startswith("error: microbench: nothing to run")


def test_exchange_time_is_the_slowest_ranks_own_iterations():
    """Neighbours do not wait for the whole ring: each rank's iterations follow one
    another, so the row gives the slowest rank's mean (its throughput), not the mean of
    each iteration's slowest rank, which adds up every rank's stalls."""
    from proxies.microbench import SPECS, Case, row

    case = Case(SPECS["exchange"], "library", 1024, 256, 1024, window=2)
    per_rank = [[10e-6, 90e-6, 10e-6], [90e-6, 10e-6, 10e-6], [20e-6, 20e-6, 20e-6]]
    r = row(case, 3, per_rank, 3)
    # Rank 0 and 1 both average 110/3 us; rank 0 (the first such) is taken, per message.
    assert r["time_s"]["avg"] == pytest.approx(110e-6 / 3 / 2)
    assert (r["time_s"]["min"], r["time_s"]["max"]) == (5e-6, 45e-6)
    # The mean of the slowest rank per iteration would be (90 + 90 + 20) / 3 / 2 us.
    assert r["time_s"]["avg"] < 200e-6 / 3 / 2


def test_send_buffer_left_on_the_zero_page_as_the_proxies_have_it(tmp_path):
    # The host calibration measures what the proxies send from: a never-written buffer.
    from workflows.hostcal import microbench_command

    cmd = microbench_command(2, ["exchange"], (1 << 17, 1 << 20, 4), 3, tmp_path / "x.json")
    assert cmd[cmd.index("--send-buffer") + 1] == "zero"
    out = tmp_path / "zero.json"
    r = mpirun(
        2, "proxies.microbench", "-b", "1K", "-e", "4K", "-f", "4", "--ops", "exchange",
        "--send-buffer", "zero", *FAST, "--json", str(out), timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "send buffer zero" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["options"]["send_buffer"] == "zero"
    assert [g["size_bytes"] for g in rows_of(doc, "exchange")] == [1024, 4096]


def test_a_skipped_algorithm_suggests_only_those_the_tool_runs():
    from proxies.microbench import plan_cases

    _, notes = plan_cases(["allgather"], [1 << 20], 3, "recursive_doubling", 1)
    # (the schedules' own message also names multiring, which needs rings it has not)
    assert notes["allgather"] == [
        "allgather skipped: group_size must be a power of two for allgather "
        "'recursive_doubling' (got 3); use one of ring, bruck, nccl_ring"
    ]


def test_sizes_that_round_to_one_array_are_measured_once_and_said():
    # 12..15 B over 3 ranks: one float32 element per rank each, a 12 B array: one row
    # (four identical rows had left calibrate with "one message size"), and a note.
    from proxies.microbench import plan_cases

    cases, notes = plan_cases(["allgather", "pingpong"], [12, 13, 14, 15, 16], 3, "mpi", 1)
    assert [(c.spec.name, c.size_bytes) for c in cases] == [
        ("allgather", 12),
        ("pingpong", 12),
        ("pingpong", 16),
    ]
    assert notes["allgather"] == [
        "allgather: sizes 12, 13, 14, 15, 16 B are all 12 B in whole float32 elements "
        "per rank: measured once"
    ]
    assert notes["pingpong"] == [
        "pingpong: sizes 12, 13, 14, 15 B are all 12 B in whole float32 elements: measured once"
    ]
