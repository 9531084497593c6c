"""Stands in for the ``cython`` module where Cython is not installed: the simulator's
modules then run as the plain Python they are (see simnet/_compiled.py)."""

compiled = False
