"""``python -m simnet``: the tool's front door (a simulation or a workflow).

The one module of simnet that reaches the workflows: see workflows.cli.
"""

import gc
import os
import sys

from workflows.cli import SUBCOMMANDS, main


def _run() -> int:
    if sys.argv[1:2] and sys.argv[1] in SUBCOMMANDS:
        return main()  # (sweeps and suites run many simulations: the collector stays)
    # One simulation and its files: the cyclic collector stays off for the process's
    # life. Turned back on after a big simulation, its first collection would trace
    # every object the run left (1.3-1.6 s at 1,024 ranks with link series); the
    # interpreter frees what is left at exit.
    gc.disable()
    return main()


if __name__ == "__main__":
    try:
        code = _run()
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader left (`... --schema | head`): what it did not read is not an error
        # worth a traceback. Python would flush stdout again at exit and fail once more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 141  # as a shell reports a process ended by SIGPIPE
    sys.exit(code)
