"""``python -m simnet``: the tool's front door (a simulation or a workflow).

The one module of simnet that reaches the workflows: see workflows.cli.
"""

import gc
import sys

from workflows.cli import SUBCOMMANDS, main

if __name__ == "__main__":
    if sys.argv[1:2] and sys.argv[1] in SUBCOMMANDS:
        sys.exit(main())  # (sweeps and suites run many simulations: the collector stays)
    # One simulation and its files: the cyclic collector stays off for the process's
    # life. Turned back on after a big simulation, its first collection would trace
    # every object the run left (1.3-1.6 s at 1,024 ranks with link series); the
    # interpreter frees what is left at exit.
    gc.disable()
    sys.exit(main())
