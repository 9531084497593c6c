"""An argument parser whose usage errors are two lines: the error, and where help is.

argparse's default prints the whole usage (up to a dozen lines for the workflows)
before the error, which then scrolls out of sight; the commands of this project print
``PROG: error: MESSAGE`` and ``(see PROG --help)``, and exit with code 2.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

EXIT_USAGE = 2


class BriefParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` with two-line usage errors (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n(see {self.prog} --help)\n")
