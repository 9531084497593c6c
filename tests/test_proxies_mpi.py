"""Every proxy on real MPI (mpiexec in a subprocess, small scale, few ranks).

Expected call counts and bytes per group come from proxies.md via
tests/reference_counts.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest

from . import reference_counts as ref
from .mpirun import MPIEXEC, mpirun, run_json

FAST = ("--iters", "1", "--warmup", "0")


def per_rank(doc: dict, phase: int = 0) -> list[dict]:
    return doc["phases"][phase]["per_rank"]


def check_ranks(doc: dict, expect, phase: int = 0) -> None:
    ranks = per_rank(doc, phase)
    assert [r["rank"] for r in ranks] == list(range(doc["world_size"]))
    for r in ranks:
        calls, nbytes = expect(r["rank"])
        assert Counter(r["program"]["calls_by_group"]) == calls, r["rank"]
        assert Counter(r["program"]["call_bytes_by_group"]) == nbytes, r["rank"]


def test_gpt2_json_and_summary(tmp_path):
    doc = run_json(tmp_path, 8, "proxies.gpt2", "16", "4", "2", "--scale", "0.001", *FAST)
    assert doc["world_size"] == 8
    assert doc["mpi"]["thread_level"] == "single"
    assert doc["mpi"]["library"].startswith(("MPICH", "Open MPI"))
    assert doc["options"]["scale"] == 0.001
    check_ranks(doc, lambda r: ref.gpt2_like(r, 8, 16, 4, 2, 0.001, ref.GPT2_PIPE, *ref.GPT2_AGG))
    ph = doc["phases"][0]
    assert ph["iterations"] == 1
    assert ph["iteration_s"]["min"] <= ph["iteration_s"]["mean"] <= ph["iteration_s"]["max"]
    assert ph["exposed_comm_s"]["mean"] <= ph["iteration_s"]["max"]


def test_gpt2_prints_reference_line_and_table(tmp_path):
    r = mpirun(4, "proxies.gpt2", "8", "4", "2", "--scale", "0.001", *FAST, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    summary = [ln for ln in lines if ln.startswith("Rank = ")]
    # As the reference, every rank prints its line.
    assert len(summary) == 4
    for rank, line in enumerate(summary):
        assert line.startswith(
            f"Rank = {rank}, world_size = 4, layers = 8, stages = 4, "
            f"total_params = {85317120 + 84008960 + 19677440 * 6}, runtime per iteration = "
        )
    assert any(ln.split()[:1] == ["pp"] for ln in lines)
    assert "exposed communication" in r.stdout


def test_bert(tmp_path):
    doc = run_json(tmp_path, 4, "proxies.bert", "8", "2", "2", "--scale", "0.001", *FAST)
    check_ranks(doc, lambda r: ref.gpt2_like(r, 4, 8, 2, 2, 0.001, ref.BERT_PIPE, *ref.BERT_AGG))


def test_resnet50_both_phases(tmp_path):
    doc = run_json(tmp_path, 3, "proxies.resnet50", "--scale", "0.001", *FAST)
    assert [p["phase"] for p in doc["phases"]] == ["allreduce", "ring"]
    total = sum(ref.sc(m, 0.001) for m in ref.RESNET50) * 4
    check_ranks(doc, lambda r: (Counter(world=6), Counter(world=total)), 0)
    check_ranks(doc, lambda r: (Counter(world=12), Counter(world=2 * total)), 1)


def test_resnet152_overlap(tmp_path):
    doc = run_json(tmp_path, 2, "proxies.resnet152", "--scale", "0.001", "--compute", "none", *FAST)
    total = sum(ref.sc(m, 0.001) for m in ref.RESNET152) * 4
    check_ranks(doc, lambda r: (Counter(world=10), Counter(world=total)))
    ops = per_rank(doc)[0]["program"]["op_counts"]
    assert ops == {"compute": 11, "iallreduce": 10, "testany": 8, "wait": 1}


def test_resnet152_strong_scaling_emulated(tmp_path):
    doc = run_json(
        tmp_path,
        2,
        "proxies.resnet152_scal",
        "--scaling-size",
        "2048",
        "--scale",
        "0.001",
        "--compute",
        "none",
        *FAST,
    )
    assert per_rank(doc)[0]["program"]["compute_us"] == 27667 + 10 * 5533
    assert doc["info"]["global_batch"] == 16 * 2


def test_resnet152_scal_names_the_row_it_emulates(tmp_path):
    # Only the global batch (16 x 2) was printed: which row ran was nowhere to be read.
    out = tmp_path / "r.json"
    r = mpirun(2, "proxies.resnet152_scal", "--scaling-size", "1024", "--scale", "0.001",
               "--compute", "none", *FAST, "--json", str(out), timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    start = r.stdout.splitlines()[0]
    assert start.split("] ", 1)[1].startswith(
        "resnet152_scal: 2 ranks, emulating the strong-scaling row --scaling-size 1024 "
        "(local batch 32, global batch 64), thread level "
    )
    info = json.loads(out.read_text())["info"]
    assert info["scaling_size"] == 1024 and info["global_batch"] == 64


def test_cosmoflow(tmp_path):
    doc = run_json(tmp_path, 8, "proxies.cosmoflow", "--scale", "0.001", "--compute", "none", *FAST)
    check_ranks(doc, lambda r: ref.cosmoflow(0.001))


def test_dlrm(tmp_path):
    doc = run_json(tmp_path, 4, "proxies.dlrm", *FAST)
    check_ranks(doc, lambda r: ref.dlrm(4, 1.0))
    # Every rank's peak resident memory: at least an interpreter with MPI loaded, and
    # well below what a rank would hold with its buffers touched (DLRM's are ~40 MB).
    peaks = doc["peak_rss_bytes_per_rank"]
    assert len(peaks) == 4
    assert all(15e6 < b < 200e6 for b in peaks), peaks


def test_a_proxy_rank_loads_no_array_library_or_statistics():
    """What a rank imports is memory every rank pays: only what the proxies use."""
    code = (
        "import sys, proxies.run, proxies.microbench, proxies.gpt3;"
        "print(sorted(m for m in ('numpy', 'psutil', 'statistics', 'importlib.metadata',"
        " 'workload.chakra_et') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


def test_gpt3(tmp_path):
    doc = run_json(
        tmp_path, 8, "proxies.gpt3", "2", "2", "--scale", "0.0001", "--compute", "none", *FAST
    )
    check_ranks(doc, lambda r: ref.gpt3(r % 2, 2, 4, 0.0001))
    assert doc["info"]["micro_batches"] == 4


def test_gpt3_one_pipe_step(tmp_path):
    doc = run_json(
        tmp_path,
        8,
        "proxies.gpt3_one_pipe_step",
        "2",
        "2",
        "--scale",
        "0.0001",
        "--compute",
        "none",
        *FAST,
    )
    check_ranks(
        doc,
        lambda r: (
            Counter(pp=2, tp=2),
            Counter(pp=8 * ref.sc(25165824, 1e-4), tp=8 * ref.sc(25165824, 1e-4)),
        ),
    )


@pytest.mark.parametrize("module", ["proxies.gpt3_moe", "proxies.gpt3_moe_one_pipe_step"])
def test_gpt3_moe(tmp_path, module):
    doc = run_json(
        tmp_path, 32, module, "2", "2", "--scale", "0.0001", "--compute", "none", *FAST, timeout=300
    )
    if module.endswith("step"):
        a2a = 2 * ref.sc(25165824 // 16, 1e-4) * 4 * 15
        check_ranks(
            doc, lambda r: (Counter(pp=2, moe=2), Counter(pp=8 * ref.sc(25165824, 1e-4), moe=a2a))
        )
    else:
        check_ranks(doc, lambda r: ref.gpt3_moe(r % 2, 2, 4, 0.0001))


def test_trace_has_every_operation(tmp_path):
    trace = tmp_path / "t.json"
    r = mpirun(
        2, "proxies.dlrm", "--iters", "2", "--warmup", "0", "--trace", str(trace), timeout=120
    )
    assert r.returncode == 0, r.stderr
    events = json.loads(trace.read_text())["traceEvents"]
    ops = [e for e in events if e["ph"] == "X"]
    assert len(ops) == 2 * 2 * 13  # ranks x iterations x operations
    assert {e["pid"] for e in ops} == {0, 1}
    assert all(e["dur"] >= 0 for e in ops)
    compute = [e for e in ops if e["name"] == "top_mlp_bwd"]
    assert all(e["dur"] >= 910 for e in compute)  # microseconds, sleep-based


def test_a_trace_path_with_rank_gives_each_rank_its_own_file(tmp_path):
    # Other braces are kept as they are (the check before the run and the run agree).
    pattern = str(tmp_path / "t.{rank}.{x}.json")
    r = mpirun(2, "proxies.dlrm", "--iters", "2", "--warmup", "0", "--trace", pattern, timeout=120)
    assert r.returncode == 0, r.stderr
    for rank in (0, 1):
        events = json.loads((tmp_path / f"t.{rank}.{{x}}.json").read_text())["traceEvents"]
        ops = [e for e in events if e["ph"] == "X"]
        assert len(ops) == 2 * 13 and {e["pid"] for e in ops} == {rank}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.0.{x}.json", "t.1.{x}.json"]


@pytest.mark.parametrize(
    ("n", "args", "message"),
    [
        (
            6,
            ["proxies.gpt2"],
            "error: gpt2: the world size must be a multiple of stages=4 "
            "(world size 6); nearest valid world sizes: 4, 8",
        ),
        (4, ["proxies.resnet152_scal"], "nearest valid world size: 256"),
        (2, ["proxies.gpt2", "abc"], "invalid int value: 'abc'"),
        (2, ["proxies.gpt2", "--scale", "0"], "--scale must be a positive number"),
        (2, ["proxies.dlrm", "--algorithm", "bogus"], "--algorithm must be one of"),
        (
            2,
            ["proxies.dlrm", "--algorithm", "ring"],
            "dlrm: --algorithm ring cannot run its alltoall on 2 ranks",
        ),
        (2, ["proxies.resnet152", "--per-tensor"], "--per-tensor is not available"),
        # (a ValueError traceback on every rank, exit 1)
        (
            4,
            ["proxies.alexnet_ring", "--hierarchical", "-1", *FAST],
            "error: alexnet_ring: --hierarchical: must be >= 0 (got -1)",
        ),
        # ("the hierarchical group size 3 must ...": the option to fix was not named)
        (
            4,
            ["proxies.alexnet_ring", "--hierarchical", "3", *FAST],
            "error: alexnet_ring: --hierarchical 3 must divide the world size 4 (groups of 3 "
            "ranks for the two-level algorithm); sizes that do: 1, 2, 4\n",
        ),
    ],
)
def test_bad_input_one_line_exit_2(n, args, message):
    r = mpirun(n, *args, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr
    errors = [ln for ln in r.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1, r.stderr  # rank 0 only
    assert "Traceback" not in r.stderr


def test_memory_refusal_names_a_scale():
    r = mpirun(32, "proxies.gpt3_moe", "2", "2", *FAST, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "GiB available); try --scale" in r.stderr
    assert r.stderr.count("error:") == 1


def test_emulated_compute_longer_than_the_timeout_is_not_blocking():
    # ResNet-152's layers compute 119 ms each (sleep): --timeout 0.05 watches what blocks.
    r = mpirun(2, "proxies.resnet152", "--scale", "0.001", "--timeout", "0.05", *FAST, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "timed out" not in r.stderr


WATCHDOG = """
import sys, time
from proxies.mpi_executor import Watchdog
wd = Watchdog(3, 0.05)
wd.operation("a compute", time.perf_counter(), 0.3)
time.sleep(0.25)  # within its plan
wd.operation("operation #7 of phase 'x': recv 1024 B from rank 2", time.perf_counter())
time.sleep(1.0)
print("not stopped")
"""


def test_timeout_names_rank_and_operation():
    r = subprocess.run(
        [sys.executable, "-c", WATCHDOG], capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 124, r.stdout + r.stderr
    assert r.stdout == ""
    assert r.stderr.startswith("error: rank 3 timed out after 0.0")
    assert r.stderr.endswith(
        " s (--timeout 0.05) in operation #7 of phase 'x': recv 1024 B from rank 2; "
        "aborting the job\n"
    )


def test_per_tensor_bert_and_resnet50_over_mpi(tmp_path):
    # The reference's per-tensor lists at --scale 0.001: exact bytes of every rank.
    doc = run_json(tmp_path, 2, "proxies.resnet50", "--per-tensor", "--scale", "0.001", *FAST)
    total = sum(ref.sc(m, 0.001) for m in ref.RESNET50_TENSORS) * 4
    check_ranks(doc, lambda r: (Counter(world=161), Counter(world=total)), 0)
    check_ranks(doc, lambda r: (Counter(world=2 * 161), Counter(world=2 * total)), 1)
    doc = run_json(
        tmp_path, 4, "proxies.bert", "4", "2", "1", "--per-tensor", "--scale", "0.001", *FAST
    )
    tensors = [list(t) for t in ref.BERT_TENSORS]
    check_ranks(doc, lambda r: ref.gpt2_like(r, 4, 4, 2, 1, 0.001, ref.BERT_PIPE, *tensors))


def test_every_ranks_trace_file_is_checked_before_the_run(tmp_path):
    # Rank 2's file is a folder: refused before any work (rank 2 checks it once MPI has
    # started and rank 0 says so), not found by rank 2 after the run (it crashed there,
    # with partial traces and no summary).
    (tmp_path / "t.2.json").mkdir()
    r = mpirun(4, "proxies.resnet50", "--scale", "0.001", "--trace", f"{tmp_path}/t.{{rank}}.json",
               *FAST, timeout=120)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.splitlines() == [
        f"error: resnet50: --trace (rank 2's file) {tmp_path}/t.2.json: a folder; name a file "
        f"(e.g. {tmp_path}/t.2.json/results.json)"
    ]
    assert r.stdout == "" and sorted(p.name for p in tmp_path.iterdir()) == ["t.2.json"]


def test_a_timeout_ends_the_job_with_124_and_one_line():
    # Every rank times out at once (--timeout 1 ms, 16 ms computes): the launcher used
    # to kill the ranks still running and exit 9 in about one run of four.
    for _ in range(5):
        r = mpirun(
            4, "proxies.gpt3", "1", "1", "--scale", "0.1", "--timeout", "0.001", *FAST,
            timeout=120,
        )  # fmt: skip
        assert r.returncode == 124, r.stdout + r.stderr
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: rank "), r.stderr
        assert lines[0].endswith("; aborting the job")


def test_schedule_algorithm_runs_over_mpi(tmp_path):
    doc = run_json(
        tmp_path, 4, "proxies.resnet50", "--scale", "0.001", "--algorithm", "ring", *FAST
    )
    assert doc["options"]["algorithm"] == "ring"
    total = sum(ref.sc(m, 0.001) for m in ref.RESNET50) * 4
    check_ranks(doc, lambda r: (Counter(world=6), Counter(world=total)), 0)


def test_the_start_line_names_the_algorithm_and_whose_counts_run():
    # --algorithm was only in the JSON; both files to /dev/null were refused as one file.
    r = mpirun(2, "proxies.alexnet_ring", "--algorithm", "ring", "--reference-counts",
               "--scale", "0.0001", "--compute", "none", "--json", "/dev/null", "--trace",
               "/dev/null", timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    start = r.stdout.splitlines()[0]
    assert ", compute none, algorithm ring, 0 warm-up + 100 timed iterations " in start
    assert "(--reference-counts); " in start


def test_nonblocking_schedule_collectives_overlap_compute(tmp_path):
    # ResNet-152's bucket allreduces run on the project's ring schedule: they
    # advance at each Testany and at the final wait, so most of their time in
    # flight is hidden behind the backward compute.
    doc = run_json(
        tmp_path, 2, "proxies.resnet152", "--scale", "0.01", "--algorithm", "ring", *FAST
    )
    ph = doc["phases"][0]
    assert ph["comm_s"]["mean"] > 0.1  # in flight across the backward pass
    assert ph["exposed_comm_s"]["mean"] < 0.5 * ph["comm_s"]["mean"]


@pytest.mark.parametrize(
    ("module", "args", "ranks"),
    [
        ("proxies.dlrm", (), 2),
        ("proxies.ring_trainer", (), 2),
        # 4 ranks on 2 cores: rank 0 used to leave at once and mpiexec killed the others
        # (a "BAD TERMINATION" banner, exit code 9).
        ("proxies.gpt2", ("8", "2"), 4),
    ],
)
def test_ctrl_c_on_a_proxy_is_one_line_and_exit_130(tmp_path, module, args, ranks):
    import os
    import signal
    import subprocess
    import sys
    import threading

    from .mpirun import MPIEXEC

    extra = (
        ("--out", str(tmp_path), "--epochs", "1000") if "ring" in module else ("--iters", "100000")
    )
    cmd = [MPIEXEC, "-n", str(ranks), sys.executable, "-m", module, *args, "--scale", "0.01",
           *extra]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    # Interrupt once the job reports its loop running (its first progress line after
    # the header), not after a fixed time: start-up on a loaded machine can take long.
    lines: dict[str, list[str]] = {"out": [], "err": []}
    running = threading.Event()

    def drain(name: str, stream) -> None:
        for line in stream:
            lines[name].append(line)
            if name == "out" and len(lines["out"]) >= 2:
                running.set()

    readers = [
        threading.Thread(target=drain, args=(k, f), daemon=True)
        for k, f in (("out", proc.stdout), ("err", proc.stderr))
    ]
    for t in readers:
        t.start()
    try:
        assert running.wait(timeout=120), "the job never reported progress"
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    for t in readers:
        t.join(timeout=10)
    out, err = "".join(lines["out"]), "".join(lines["err"])
    assert proc.returncode == 130, out + err
    assert (out + err).count("interrupted (SIGINT: Ctrl-C") == 1
    assert "Traceback" not in out + err and "unhandled error" not in out + err


SCALE_WORDS = """
from proxies.run import memory_message, scale_note
from workload.models import get_model
from workload.units import GIB
print(scale_note(2))
print(scale_note(0.5))
print(memory_message(get_model("resnet50"), 1000, 100 * GIB, 2, 30 * GIB, 100 * GIB))
print(memory_message(get_model("resnet50"), 1, 100 * GIB, 2, 30 * GIB, 100 * GIB))
"""


def test_a_scale_above_1_is_called_larger():
    r = subprocess.run(
        [sys.executable, "-c", SCALE_WORDS], capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].endswith("the times above are those of that larger workload, not of the "
                             "full-size job")  # fmt: skip
    assert lines[1].endswith("that smaller workload, not of the full-size job")
    # 30 GiB x 0.9 x 0.9 of 100 GiB of buffers at --scale 1000: 243 fits, 200 is named.
    assert "try --scale 200 (every message 200 x its size: a larger workload than the " in lines[2]
    assert "try --scale 0.2 (every message 0.2 x its size: a smaller workload than the " in lines[3]


def test_a_singleton_run_says_1_rank_and_a_short_wall_time_in_milliseconds():
    r = mpirun(1, "proxies.resnet50", "--scale", "0.001", "--compute", "none", *FAST, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "resnet50: 1 rank, thread level" in r.stdout
    assert "1 ranks" not in r.stdout
    # A run of well under 10 s: three decimals (it said "wall time 0.0 s").
    assert re.search(r"^wall time \d\.\d{3} s$", r.stdout, re.M), r.stdout


def test_a_proxy_whose_output_reader_has_gone_finishes_and_writes_its_json(tmp_path):
    # `python -m proxies.dlrm ... | head -1`: the first print found the pipe closed and
    # the rank aborted (exit 1, a traceback) before writing --json.
    import os

    out = tmp_path / "r.json"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first line
    try:
        r = subprocess.run(
            [sys.executable, "-m", "proxies.dlrm", "--scale", "0.01", *FAST, "--json", str(out)],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert json.loads(out.read_text())["world_size"] == 1


def test_mpiexec_piped_into_head_still_writes_the_json(tmp_path):
    # MPICH's mpiexec passes the ranks' lines on and stops the whole job at the first
    # one it cannot write; rank 0 writes its files before the summary line, so only
    # the start line precedes them.
    import os
    import signal

    from .mpirun import MPIEXEC

    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [MPIEXEC, "-n", "2", sys.executable, "-m", "proxies.dlrm", "--scale", "0.01", *FAST,
         "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("[")  # `head -1`
        proc.stdout.close()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert json.loads(out.read_text())["world_size"] == 2


PACED_RECEIVER = """
import sys, time
from mpi4py import MPI
from proxies.mpi_executor import Pacer
from proxies.buffers import zeros
comm = MPI.COMM_WORLD
buf = zeros(4 << 20)  # 16 MB: a rendezvous message, copied as the receiver progresses
comm.Barrier()
if comm.Get_rank() == 1:
    req = comm.Irecv(buf, 0, 5)
    pending = [req] if sys.argv[1] == "test" else None
    Pacer(1e9, 1 << 20, 1e-4).sleep_until(time.perf_counter() + 0.5, pending)
    req.Wait()
else:
    t0 = time.perf_counter()
    comm.Isend(buf, 1, 5).Wait()
    print(time.perf_counter() - t0)
"""


def test_a_rank_waiting_for_its_pacer_keeps_its_posted_transfers_moving():
    # Rank 1 waits half a second for a pacing release with a 16 MB receive posted. Asleep,
    # it stalls rank 0's send until it wakes (MPICH moves the bytes inside the
    # receiver's calls); testing its posted requests meanwhile, the send completes first.
    from proxies.launch import THROTTLE_VARS

    def send_s(mode: str) -> float:
        r = subprocess.run(
            [MPIEXEC, "-n", "2", sys.executable, "-c", PACED_RECEIVER, mode],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
            env={**os.environ, **THROTTLE_VARS},
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        return float(r.stdout)

    assert send_s("sleep") >= 0.5
    assert send_s("test") < 0.4
