"""bench/cython_python_calls.py: generic Python C-API calls per source line of Cython's C."""

from __future__ import annotations

from pathlib import Path

from bench import cython_python_calls as cpc

# A cut-down piece of what Cython writes: a function's definition, the source-line markers
# it puts before each line's code, and the calls that code makes.
GENERATED_C = """\
static PyObject *__pyx_f_6simnet_7network_11FlowNetwork__flush(struct __pyx_obj *, double);
static PyObject *__pyx_f_6simnet_7network_11FlowNetwork__flush(struct __pyx_obj *s, double t) {
  /* "simnet/network.py":1260
 *         keep = self._keep_below
 */
  __pyx_v_keep = __pyx_v_self->_keep_below;
  /* "simnet/network.py":1261
 *         rate = math.inf
 */
  __Pyx_GetModuleGlobalName(__pyx_t_1, __pyx_n_s_math);
  __pyx_t_2 = __Pyx_PyObject_GetAttrStr(__pyx_t_1, __pyx_n_s_inf);
  /* "simnet/network.py":1262
 *         if f.phase == _DRAINING:
 */
  __pyx_t_3 = PyLong_From_int(__pyx_v_f->phase);
  __pyx_t_4 = __Pyx_PyObject_CompareBoolEq_object_object(__pyx_t_3, __pyx_t_5);
}
static PyObject *__pyx_f_6simnet_7network__sum_load(struct __pyx_obj_Link *l, double t) {
  /* "simnet/network.py":1390
 *     for f in link.flows:
 */
  if (!(likely(__Pyx_TypeTest(__pyx_t_1, __pyx_ptype_Flow)))) __PYX_ERR(0, 1390, __pyx_L1_error)
}
static PyObject *__pyx_pf_6simnet_7network_11FlowNetwork_16_flush(PyObject *s, double t) {
  __pyx_t_1 = __pyx_f_6simnet_7network_11FlowNetwork__flush(s, t, 1);
  __pyx_t_2 = PyFloat_FromDouble(t);
}
"""


def test_calls_are_listed_by_function_and_source_line():
    found = cpc.python_calls(GENERATED_C.splitlines(), "simnet/network.py", ["_flush"])
    flush = "__pyx_f_6simnet_7network_11FlowNetwork__flush"
    assert found == {
        (flush, 1261): {"__Pyx_GetModuleGlobalName", "__Pyx_PyObject_GetAttrStr"},
        (flush, 1262): {"PyLong_From_int", "__Pyx_PyObject_CompareBoolEq_object_object"},
    }  # 1260 is a typed field read: nothing; not asked for: _sum_load; left out: the wrapper


def test_every_named_function_is_read():
    found = cpc.python_calls(GENERATED_C.splitlines(), "simnet/network.py", ["_flush", "_sum_load"])
    assert ("__pyx_f_6simnet_7network__sum_load", 1390) in found
    assert found[("__pyx_f_6simnet_7network__sum_load", 1390)] == {"__Pyx_TypeTest"}


def test_markers_of_another_source_are_not_lines_of_this_one():
    found = cpc.python_calls(GENERATED_C.splitlines(), "simnet/executor.py", ["_flush"])
    assert {line for _, line in found} == {0}  # calls found before any marker of it


def test_readable_names():
    assert cpc.readable("__pyx_f_6simnet_7network_11FlowNetwork__on_wake") == (
        "FlowNetwork._on_wake"
    )
    assert cpc.readable("__pyx_f_6simnet_7network__water_fill") == "_water_fill"
    assert cpc.readable("__pyx_f_6simnet_8executor_5_Coll_advance") == "_Coll.advance"


def test_the_listing_of_the_built_core(capsys):
    c_file = Path(cpc.ROOT, "build", "cython", "simnet", "network.c")
    code = cpc.main(["--module", "network", "_flush"])
    out = capsys.readouterr().out
    if not c_file.is_file():
        assert code == 1 and "build the compiled core first" in out
        return
    assert code == 0
    # Every entry names the function, the line and what the line says.
    entries = out.splitlines()
    assert entries and all(e.startswith("FlowNetwork._flush line ") for e in entries[::2])
    assert all(e.startswith("    | ") for e in entries[1::2])
