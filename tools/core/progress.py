"""StepCounter of a long step (reading a batch of wheels, reading the registry), on stderr.

On a terminal it is one live line, rewritten in place (``\\r``) at most :data:`REDRAW` times a
second and cleared when the step ends, so the command's own summary follows on a clean line.
Anywhere else (a CI log, a pipe, a file) a rewritten line would pile up as noise, so it prints a
plain line every ``every`` items or every ``interval`` seconds, whichever comes first, and nothing
at all for a step too short to reach either: a small run's output stays what it was.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

#: The most redraws of the live line per second.
REDRAW = 10
#: A plain line every this many items (not on a terminal)...
EVERY = 100
#: ...or every this many seconds, whichever comes first.
INTERVAL = 10.0


class StepCounter:
    """Counts a step's items and shows the count (see the module docstring). Safe to advance
    from several threads; use as a context manager, or call :meth:`close`."""

    def __init__(self, what: str, total: int | None = None, *, stream: TextIO | None = None,
                 every: int = EVERY, interval: float = INTERVAL,
                 clock: Callable[[], float] = time.monotonic):
        self.what, self.total, self.done = what, total, 0
        self.stream = stream if stream is not None else sys.stderr
        self.live = _isatty(self.stream)
        self.every, self.interval, self.clock = every, interval, clock
        self.started = self.shown_at = clock()
        self.shown_count = 0
        self._width, self._drawn_at = 0, -float("inf")
        self._lock = threading.Lock()

    def advance(self, item: str = "", n: int = 1) -> None:
        """Count ``n`` more items (``item``: the last one's name, shown on the live line)."""
        with self._lock:
            self.done += n
            now = self.clock()
            if self.live:
                if now - self._drawn_at >= 1 / REDRAW or self.done == self.total:
                    self._draw(f"{self._count()} {item}".rstrip(), now)
            elif self.done - self.shown_count >= self.every or now - self.shown_at >= self.interval:
                self.stream.write(f"{self._count()} ({now - self.started:.0f} s)\n")
                self.stream.flush()
                self.shown_at, self.shown_count = now, self.done

    def close(self) -> None:
        """The step is over: clear the live line; a plain log gets a last line when it had any."""
        with self._lock:
            if self.live and self._width:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
            elif not self.live and self.shown_count and self.shown_count != self.done:
                self.stream.write(f"{self._count()} ({self.clock() - self.started:.0f} s)\n")
                self.stream.flush()

    def __enter__(self) -> StepCounter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _count(self) -> str:
        of = f"/{self.total}" if self.total is not None else ""
        return f"{self.what}: {self.done}{of}"

    def _draw(self, text: str, now: float) -> None:
        # A terminal line is at most 79 characters here: a longer one would wrap and the next
        # "\r" would rewrite only its last row.
        text = text[:79]
        self.stream.write("\r" + text + " " * max(0, self._width - len(text)))
        self.stream.flush()
        self._width, self._drawn_at = len(text), now


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or stand-in stream is no terminal
        return False
