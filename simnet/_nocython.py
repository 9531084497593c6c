"""Stands in for the ``cython`` module where Cython is not installed: the simulator's
modules then run as the plain Python they are (see simnet/_compiled.py)."""

from typing import Any

compiled = False


def _same(cls: Any) -> Any:
    return cls


# The class decorators the modules use: nothing to do in plain Python.
cclass = no_gc = _same


def freelist(_n: int) -> Any:
    return _same


def boundscheck(_flag: bool) -> Any:
    return _same


wraparound = boundscheck


# (cython.locals: a function's typed locals when compiled)
def locals(**_types: Any) -> Any:
    return _same
