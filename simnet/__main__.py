"""``python -m simnet``: the tool's front door (a simulation or a workflow).

The one module of simnet that reaches the workflows: see workflows.cli.
"""

import gc
import os
import select
import sys

from workflows.cli import SUBCOMMANDS, main


def _reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end is closed (poll says POLLERR)."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _fd, ev in poll.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


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
        # If stdout's reader left (`... --schema | head`), what it did not read is not an
        # error worth a traceback; another pipe's (a child's, a socket's) is.
        if not _reader_gone():
            raise
        # Python would flush stdout again at exit and fail once more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 141  # as a shell reports a process ended by SIGPIPE
    sys.exit(code)
