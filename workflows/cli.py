"""The front end of ``python -m simnet``: a simulation, or one of the workflows.

``python -m simnet --config C`` simulates (:mod:`simnet.cli`); ``python -m
simnet SUBCOMMAND ...`` runs a workflow module's ``main(argv) -> int``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

# Subcommand -> module with main(argv) -> int.
SUBCOMMANDS = {
    "calibrate": "workflows.calibrate",
    "calibrate-host": "workflows.hostcal",
    "validate": "workflows.validate",
    "scaling": "workflows.scaling",
    "sweep": "workflows.sweep",
    "slurm": "workflows.slurm",
    "aggregate": "workflows.aggregate",
    "testbed": "workflows.testbed",
    "chakra": "workflows.chakra",
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["validate"] and "--suite" in args:
        # The suite runs many validations: it builds on workflows.validate, not in it.
        return int(importlib.import_module("workflows.suite").main(args[1:]) or 0)
    if args and args[0] in SUBCOMMANDS:
        return int(importlib.import_module(SUBCOMMANDS[args[0]]).main(args[1:]) or 0)
    from simnet.cli import main as simulate_main

    return simulate_main(args, subcommands=list(SUBCOMMANDS))
