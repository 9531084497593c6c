"""Progress lines on stderr for long work (a simulation, a trace export): drawn over in
place on a terminal, whole lines at a slower pace in a log."""

from __future__ import annotations

import sys
import time

PROGRESS_LOG_INTERVAL_S = 10.0
"""Seconds between progress lines where stderr is no terminal (a Slurm log, a file):
each a whole line there, not one line drawn over in place."""


def live_progress() -> bool:
    """Whether progress is drawn over in place: stderr is a terminal."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # (replaced or closed)
        return False


class Progress:
    """The run's progress on stderr, ``[  12.3 s] what``: on a terminal one line drawn
    over in place, at most once a second; elsewhere (a Slurm log, a file) whole lines, at
    most one every :data:`PROGRESS_LOG_INTERVAL_S`; either way a line announcing a long
    step (ending " ...") at once, so that it stays up while the step runs."""

    def __init__(self, live: bool) -> None:
        self.live = live
        self.interval = 1.0 if live else PROGRESS_LOG_INTERVAL_S
        self.started = time.perf_counter()
        self.last = 0.0  # when a line was last shown (0: never)
        self.latest = ""  # the newest line, shown or not
        self.latest_shown = False
        self.widest = 0  # of the lines drawn, so that the last one covers them

    def __call__(self, msg: str) -> None:
        now = time.perf_counter()
        self.latest = f"[{now - self.started:6.1f} s] {msg}"
        self.latest_shown = False
        if now - self.last >= self.interval or msg.endswith(" ..."):
            self.last = now
            self._show()

    def _show(self, end: str = "") -> None:
        if self.live:
            line = "\r" + self.latest
            self.widest = max(self.widest, len(line))
            print(line.ljust(self.widest) if end else line, end=end, file=sys.stderr, flush=True)
        else:
            print(self.latest, file=sys.stderr, flush=True)
        self.latest_shown = True

    def end(self) -> None:
        """End the progress shown on the newest state: a terminal's line drawn with it
        and ended, a log given it unless it was the last line written."""
        if self.last and (self.live or not self.latest_shown):
            self._show(end="\n")

    def break_line(self) -> None:
        """End a terminal's progress line before a message of another kind."""
        if self.last and self.live:
            print(file=sys.stderr)
