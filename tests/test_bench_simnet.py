"""bench/bench_simnet.py: reading cachegrind's counts and fitting growth exponents."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench import bench_simnet

# The summary lines cachegrind writes to stderr (counts with thousands separators).
CACHEGRIND_STDERR = """\
==1== I   refs:      11,859,786,667
==1== I1  misses:         3,141,592
==1== D   refs:       5,000,000,000  (3,000,000,000 rd   + 2,000,000,000 wr)
==1== D1  misses:       120,300,000  (  100,000,000 rd   +    20,300,000 wr)
==1== LL refs:          130,000,000  (  110,000,000 rd   +    20,000,000 wr)
==1== LL misses:         10,800,000  (    9,000,000 rd   +     1,800,000 wr)
"""


def test_counts_are_read_and_cycles_estimated(monkeypatch):
    def fake_run(name, tree, pure=False, tool=()):
        assert tool[0] == "valgrind" and "--tool=cachegrind" in tool
        return {"messages": 204800, "simulated_s": 0.5}, CACHEGRIND_STDERR

    monkeypatch.setattr(bench_simnet, "_run_case", fake_run)
    row = bench_simnet.run_counted("fat1024", Path("."))
    assert row["instructions"] == 11_859_786_667
    assert row["d1_misses"] == 120_300_000
    assert row["ll_misses"] == 10_800_000
    # 11.86G + 10 x 120.3M + 100 x 10.8M
    assert row["est_cycles"] == 11_859_786_667 + 1_203_000_000 + 1_080_000_000


def test_missing_counts_are_an_error(monkeypatch):
    monkeypatch.setattr(
        bench_simnet, "_run_case", lambda *a, **k: ({"messages": 1}, "==1== I   refs: 5\n")
    )
    with pytest.raises(SystemExit, match="no 'D1"):
        bench_simnet.run_counted("ring64", Path("."))


def test_growth_exponent_of_a_power_law():
    rows = [{"messages": m, "wall_s": 3e-6 * m**1.25, "est_cycles": 5e4 * m} for m in (1e3, 1e5)]
    assert math.isclose(bench_simnet.fitted_exponent(rows), 1.25)
    assert math.isclose(bench_simnet.fitted_exponent(rows, "est_cycles"), 1.0)
    assert bench_simnet.fitted_exponent(rows[:1]) is None


def test_growth_is_fitted_within_each_family_of_fat_tree_cases(capsys):
    # fathostN and fatsyncN share fatN's message counts: one fit over all of them would
    # mix workloads; each family gets its own, fatN's is returned.
    rows = [
        {"case": "fat1024", "messages": 100, "est_cycles": 100.0},
        {"case": "fat4096", "messages": 400, "est_cycles": 800.0},
        {"case": "fathost1024", "messages": 100, "est_cycles": 50.0},
        {"case": "fathost4096", "messages": 400, "est_cycles": 200.0},
        {"case": "fatsync256", "messages": 20, "est_cycles": 9.0},
        {"case": "ring64", "messages": 10, "est_cycles": 1.0},
    ]
    families = bench_simnet.fat_families(rows)
    assert {k: [r["case"] for r in v] for k, v in families.items()} == {
        "fat": ["fat1024", "fat4096"],
        "fathost": ["fathost1024", "fathost4096"],
        "fatsync": ["fatsync256"],
    }
    assert math.isclose(bench_simnet.fat_tree_growth(rows, "est_cycles", "cycles"), 1.5)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("fat-tree cases: cycles grow as messages^1.50")
    assert out[1].startswith("fathostN cases: cycles grow as messages^1.00")
    assert len(out) == 2  # (one fatsync case: nothing to fit)


def test_summary_keeps_the_median_and_the_fastest_run():
    runs = [
        {"messages": 10, "simulated_s": 1.0, "wall_s": w, "cpu_s": w, "code": ".", "core": "c"}
        for w in (3.0, 1.0, 2.0)
    ]
    out = bench_simnet.summarise(runs)
    assert (out["wall_s"], out["wall_min_s"], out["cpu_s"]) == (2.0, 1.0, 2.0)
    assert out["messages_per_cpu_s"] == 5.0


def test_contention_lines_split_a_fat_tree_message_against_the_switch():
    rows = [
        {"case": "fat1024", "cpu_s": 2.0, "messages": 200_000},
        {"case": "switch1024", "cpu_s": 1.5, "messages": 200_000},
        {"case": "fat4096", "cpu_s": 9.0, "messages": 900_000},  # no switch4096: no line
    ]
    assert bench_simnet.contention_lines(rows) == [
        "fat1024: 10.00 CPU us per message, 7.50 of them on one switch "
        "(switch1024, no contention), 2.50 the max-min sharing adds"
    ]


def test_on_one_switch_no_flow_is_rated_twice():
    # The switch case's premise: every rank sends to one peer and receives from one at a
    # time, each on its own links, so each message's rate is computed once, when it starts.
    msgs, _, rated, changed = bench_simnet.fat_tree_case(64, bench_simnet.switch_config)
    assert msgs > 0 and rated == changed == msgs


def test_reference_loop_times_the_loop_it_is_given(monkeypatch):
    # One iteration against three million (tens of milliseconds at the least): the
    # figure is the loop's time, read back from the fresh interpreter.
    monkeypatch.setattr(bench_simnet, "REFERENCE_LOOP", 1)
    one = bench_simnet.reference_loop_s()
    monkeypatch.setattr(bench_simnet, "REFERENCE_LOOP", 3_000_000)
    many = bench_simnet.reference_loop_s()
    assert 0.0 <= one < 0.005 < many


def test_parts_add_up_the_cpu_time_of_their_calls(monkeypatch):
    import sys
    import time
    import types

    def busy() -> int:  # 20 ms of CPU
        t = time.process_time()
        while time.process_time() - t < 0.02:
            pass
        return 7

    mod = types.ModuleType("fake_parts_module")
    mod.busy = busy
    mod.outer = lambda: mod.busy() + 1  # calls the other part: counted once, in outer
    monkeypatch.setitem(sys.modules, "fake_parts_module", mod)
    monkeypatch.setattr(
        bench_simnet,
        "PARTS",
        {
            "busy": [("fake_parts_module", None, "busy")],
            "outer": [("fake_parts_module", None, "outer")],
        },
    )
    totals = bench_simnet._time_parts()
    assert totals == {"busy": 0.0, "outer": 0.0}
    assert mod.busy() == 7 and mod.busy() == 7
    assert 0.04 <= totals["busy"] < 1.0 and totals["outer"] == 0.0
    before = totals["busy"]
    assert mod.outer() == 8
    assert totals["busy"] == before and 0.02 <= totals["outer"] < 1.0


# Lines of `perf report --stdio --sort dso,sym` (the header and blank lines are skipped).
PERF_REPORT = """\
# Samples: 18K of event 'cpu-clock'
#
# Overhead  Shared Object                                      Symbol
# ........  .................................................  ......
#
    13.26%  network.cpython-311.so  [.] __pyx_f_6simnet_7network_11FlowNetwork__on_wake
    11.16%  network.cpython-311.so  [.] __pyx_f_6simnet_7network_11FlowNetwork__flush
     9.49%  executor.cpython-311.so  [.] __pyx_f_6simnet_8executor_5_Coll_advance
     9.29%  libpython3.11.so.1.0  [.] _Py_dict_lookup
     2.92%  libpython3.11.so.1.0  [.] PyObject_GC_UnTrack
     2.90%  [kernel.kallsyms]  [k] clear_page_erms
     3.58%  libpython3.11.so.1.0  [.] _PyEval_EvalFrameDefault
     0.90%  network.cpython-311.so  [.] __pyx_f_6simnet_7network_9_KeyQueue_pop
     0.63%  libscipy_openblas64_-32a4b2a6.so  [.] blas_thread_server
"""


def test_perf_report_lines_are_read_in_order():
    lines = bench_simnet.parse_perf_report(PERF_REPORT)
    assert len(lines) == 9
    assert lines[0] == (
        13.26,
        "network.cpython-311.so",
        "__pyx_f_6simnet_7network_11FlowNetwork__on_wake",
    )
    assert lines[5] == (2.90, "[kernel.kallsyms]", "clear_page_erms")


def test_sampled_functions_are_sorted_into_kinds_of_work():
    kind = {
        sym: bench_simnet.perf_kind(dso, sym)
        for _, dso, sym in bench_simnet.parse_perf_report(PERF_REPORT)
    }
    assert kind["__pyx_f_6simnet_7network_11FlowNetwork__flush"] == "max-min sharing"
    assert kind["__pyx_f_6simnet_7network_11FlowNetwork__on_wake"] == "timers and flow phases"
    assert kind["__pyx_f_6simnet_7network_9_KeyQueue_pop"] == "timers and flow phases"
    assert kind["__pyx_f_6simnet_8executor_5_Coll_advance"] == "executor"
    assert kind["_Py_dict_lookup"] == "dictionaries"
    assert kind["PyObject_GC_UnTrack"] == "allocation and collector"
    assert kind["_PyEval_EvalFrameDefault"] == "interpreter"
    assert kind["clear_page_erms"] == "kernel"
    assert kind["blas_thread_server"] == "other"


def test_cython_symbols_are_shown_by_their_python_names():
    short = bench_simnet._short_symbol
    assert short("__pyx_f_6simnet_7network_11FlowNetwork__flush") == "network.FlowNetwork._flush"
    assert short("__pyx_f_6simnet_7network_9_KeyQueue_pop") == "network._KeyQueue.pop"
    assert short("__pyx_f_6simnet_8executor_5_Coll_advance") == "executor._Coll.advance"
    assert short("__pyx_f_6simnet_7network__sum_load") == "network._sum_load"
    assert short("_Py_dict_lookup") == "_Py_dict_lookup"


def _fake_tool_run(monkeypatch, row: dict, report: str) -> dict:
    """A case that returns ``row`` under whatever tool (its arguments kept in the dict
    returned), and a tool's report (``subprocess.run``'s stdout) that is ``report``."""
    seen: dict = {}

    def fake_case(name, tree, pure=False, tool=(), env=None):
        seen["tool"], seen["env"] = tool, env
        return dict(row), ""

    class Done:
        stdout, stderr, returncode = report, "", 0

    monkeypatch.setattr(bench_simnet, "_run_case", fake_case)
    monkeypatch.setattr(bench_simnet.subprocess, "run", lambda *a, **k: Done())
    return seen


def test_a_sampled_case_sums_its_samples_by_kind(monkeypatch):
    seen = _fake_tool_run(monkeypatch, {"messages": 10, "cpu_s": 1.0}, PERF_REPORT)
    row = bench_simnet.run_sampled("switch16384", Path("."))
    assert seen["tool"][:4] == ("perf", "record", "-q", "-e") and "cpu-clock" in seen["tool"]
    kinds = row["perf_kinds_pct"]
    assert kinds["timers and flow phases"] == pytest.approx(13.26 + 0.90)
    assert kinds["max-min sharing"] == pytest.approx(11.16)
    assert kinds["other"] == pytest.approx(0.63)
    assert sum(kinds.values()) == pytest.approx(54.13)
    assert [t["pct"] for t in row["perf_top"]][:2] == [13.26, 11.16]


def test_a_perf_report_without_samples_is_an_error(monkeypatch):
    class Empty:
        stdout, stderr = "# no samples\n", "perf: no data"

    monkeypatch.setattr(bench_simnet, "_run_case", lambda *a, **k: ({"cpu_s": 1.0}, ""))
    monkeypatch.setattr(bench_simnet.subprocess, "run", lambda *a, **k: Empty())
    with pytest.raises(SystemExit, match="no samples"):
        bench_simnet.run_sampled("ring64", Path("."))


# The head and table of `callgrind_annotate` (a function inlined from a header is listed
# under that file too; f'2 is f called within f).
CALLGRIND_ANNOTATE = """\
--------------------------------------------------------------------------------
Profile data file 'callgrind.out' (creator: callgrind-3.19.0)
--------------------------------------------------------------------------------
Ir
--------------------------------------------------------------------------------
2,451,820,145 (100.0%)  PROGRAM TOTALS

--------------------------------------------------------------------------------
Ir                   file:function
--------------------------------------------------------------------------------
163,607,434 ( 6.67%)  network.c:__pyx_f_6simnet_7network_9_KeyQueue_pop [/x/network.so]
111,042,076 ( 4.53%)  network.c:__pyx_f_6simnet_7network_11FlowNetwork__flush [/x/network.so]
 58,142,016 ( 2.37%)  ceval.c:_PyEval_EvalFrameDefault'2 [/x/libpython3.11.so.1.0]
 39,206,627 ( 1.60%)  object.h:__pyx_f_6simnet_7network_11FlowNetwork__flush
  1,000,000 ( 0.04%)  ceval.c:_PyEval_EvalFrameDefault [/x/libpython3.11.so.1.0]
 12,902,404 ( 0.53%)  ???:0x0000000004936718 [???]
"""


def test_callgrind_annotate_tables_are_summed_by_function():
    by_fn = bench_simnet.parse_callgrind_annotate(CALLGRIND_ANNOTATE)
    assert by_fn == {
        "__pyx_f_6simnet_7network_9_KeyQueue_pop": 163_607_434,
        "__pyx_f_6simnet_7network_11FlowNetwork__flush": 111_042_076 + 39_206_627,
        "_PyEval_EvalFrameDefault": 58_142_016 + 1_000_000,
        "0x0000000004936718": 12_902_404,
    }


def test_the_loop_count_reads_its_total_and_ranks_functions(monkeypatch):
    row = {"messages": 1000, "simulated_s": 0.5}
    seen = _fake_tool_run(monkeypatch, row, CALLGRIND_ANNOTATE)
    row = bench_simnet.run_loop_counted("fat1024", Path("."))
    assert seen["tool"][:2] == ("valgrind", "--tool=callgrind")
    toggles = [t for t in seen["tool"] if t.startswith("--toggle-collect=")]
    assert [t.split("=", 1)[1] for t in toggles] == list(bench_simnet.LOOP_ENTRIES)
    assert seen["env"] == {"PYTHONHASHSEED": "0"}
    assert row["loop_instructions"] == 2_451_820_145  # the total, not the listed sum
    assert [t["function"] for t in row["loop_top"][:3]] == [
        "network._KeyQueue.pop",
        "network.FlowNetwork._flush",
        "_PyEval_EvalFrameDefault",
    ]
    assert row["loop_top"][1]["instructions"] == 150_248_703


def test_a_loop_count_of_nothing_is_an_error(monkeypatch):
    _fake_tool_run(monkeypatch, {"messages": 5}, "Ir\n----\n0 (100.0%)  PROGRAM TOTALS\n")
    with pytest.raises(SystemExit, match="counted nothing in the loop"):
        bench_simnet.run_loop_counted("ring64", Path("."))


def test_the_loop_entries_are_the_compiled_networks_functions():
    """--loop counts between these symbols: a rename of the network's wake-up or max-min
    pass must not leave it counting nothing."""
    import fnmatch
    import shutil
    import subprocess

    from simnet import _compiled, network

    if _compiled.status()["network"] != "compiled" or shutil.which("nm") is None:
        pytest.skip("the compiled core and nm are needed")
    out = subprocess.run(
        ["nm", network.__file__], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    symbols = [line.split()[-1] for line in out.splitlines() if line.strip()]
    for pattern in bench_simnet.LOOP_ENTRIES:
        assert len(fnmatch.filter(symbols, pattern)) == 1, pattern


def test_the_loop_table_prints_both_checkouts_and_writes_its_results(monkeypatch, tmp_path, capsys):
    def fake_count(name, tree):
        mine = tree == bench_simnet.ROOT
        messages = {"fat1024": 1000, "fat4096": 4000}[name]
        per = 100 if name == "fat1024" else (200 if mine else 150)
        return {
            "messages": messages,
            "simulated_s": 0.5 if mine or name == "fat1024" else 0.25,
            "loop_instructions": per * messages,
            "loop_top": [{"function": "network._search", "instructions": 10 * messages}],
        }

    monkeypatch.setattr(bench_simnet.shutil, "which", lambda tool: "/usr/bin/" + tool)
    monkeypatch.setattr(bench_simnet, "run_loop_counted", fake_count)
    out = tmp_path / "loop.json"
    bench_simnet.loop_table(["fat1024", "fat4096"], tmp_path, str(out))
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[1].split() == ["fat1024", "1000", "0.000", "100", "100", "1.000"]
    assert lines[2].split()[:6] == ["fat4096", "4000", "0.001", "200", "150", "1.333"]
    assert "(simulated 0.25 there)" in lines[2]
    assert "      10  network._search" in text
    # 100 and 200 instructions a message at 1,000 and 4,000 messages: work grows as m^1.5.
    assert "loop instructions grow as messages^1.50" in text
    doc = json.loads(out.read_text())
    assert doc["fat_tree_loop_instructions_exponent"] == pytest.approx(1.5)
    assert [r["against"]["loop_instructions"] for r in doc["rows"]] == [100_000, 600_000]


def test_a_failed_annotation_is_named_as_such(monkeypatch):
    class Failed:
        stdout, stderr, returncode = "", "callgrind_annotate: no such file", 2

    monkeypatch.setattr(bench_simnet, "_run_case", lambda *a, **k: ({"messages": 5}, ""))
    monkeypatch.setattr(bench_simnet.subprocess, "run", lambda *a, **k: Failed())
    with pytest.raises(SystemExit, match=r"callgrind_annotate failed \(2\): .*no such file"):
        bench_simnet.run_loop_counted("ring64", Path("."))
