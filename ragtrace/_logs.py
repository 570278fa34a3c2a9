"""ragtrace's loggers, each with one filter that rate-limits repeated lines, the way the OTel SDK guards its
own export loggers (`opentelemetry.sdk._shared_internal.DuplicateFilter`).

A failure on a path that runs every tick (an exporter that is down, a judge that keeps refusing) would
otherwise write the same line five times a second into the host's log. Warnings and errors only: an INFO
line that repeats on purpose (the gateway's periodic counts) always goes through. The first record of a kind
(same logger, level and message template) goes through; its repeats within `REPEAT_WINDOW_S` are dropped and
counted; the first one after the window goes through saying how many were dropped. So an `except` block
just logs, with its traceback, and never needs its own "log once" bookkeeping.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

# As the SDK's filter: longer than an OTLP exporter's 10 s timeout, short enough to show a failure goes on.
REPEAT_WINDOW_S = 20.0
_KINDS_KEPT = 512  # the kinds remembered (least recently logged forgotten first)

_Kind = tuple[str, int, str]


class RepeatFilter(logging.Filter):
    """Drops a warning or error that repeats one let through less than `window` seconds ago, and counts it."""

    def __init__(self, window: float = REPEAT_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._kinds: OrderedDict[_Kind, list[float]] = OrderedDict()  # kind -> [let through at, dropped since]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        kind = (record.name, record.levelno, str(record.msg))
        now = self._clock()
        with self._lock:
            seen = self._kinds.get(kind)
            if seen is not None and now - seen[0] < self.window:
                seen[1] += 1
                return False
            dropped = int(seen[1]) if seen is not None else 0
            self._kinds[kind] = [now, 0]
            self._kinds.move_to_end(kind)
            if len(self._kinds) > _KINDS_KEPT:
                self._kinds.popitem(last=False)
        if dropped:  # (no % in the words added: they survive the record's own formatting)
            record.msg = f"{record.msg} [{dropped} more like this in the last {self.window:g} s not logged]"
        return True

    def forget(self) -> None:
        """Start afresh (a test that expects a line another test already logged)."""
        with self._lock:
            self._kinds.clear()


REPEATS = RepeatFilter()


def ragtrace_logger(name: str) -> logging.Logger:
    """`logging.getLogger(name)` with the repeat filter, added once (a filter on a logger applies to the
    records logged through it, so each of ragtrace's loggers carries it)."""
    logger = logging.getLogger(name)
    if REPEATS not in logger.filters:
        logger.addFilter(REPEATS)
    return logger


__all__ = ["REPEATS", "REPEAT_WINDOW_S", "RepeatFilter", "ragtrace_logger"]
