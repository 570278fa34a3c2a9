"""Room in the next hop's queue, taken before spans are handed on.

The SDK's `BatchSpanProcessor` drops what does not fit its queue, after the gateway told the client the
spans had arrived. So every path that hands spans on (a request, the spool's replay, a resend) first takes
room for them here, against the queue's free slots less what is already bound for it (released spans
waiting in the scoring pipeline's sink, other reservations), and gives it back once they are handed on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ragtrace.gateway.next_hop import NextHop


class NextHopRoom:
    """`reserve(n)` takes room for n spans (False when there is none: the caller refuses or waits),
    `release(n)` gives it back."""

    def __init__(self, exporting: NextHop, waiting: Callable[[], int]) -> None:
        self._exporting = exporting
        self._waiting = waiting  # released spans not in the next hop's queue yet
        self._lock = threading.Lock()
        self._reserved = 0

    def _has_room(self, spans: int) -> bool:
        """A request larger than the whole queue waits for an empty one, so that none is refused for good."""
        room = self._exporting.room()
        if room is None:
            return True
        free, size = room
        return free - self._waiting() - self._reserved >= min(spans, size)

    def reserve(self, spans: int) -> bool:
        with self._lock:
            if not self._has_room(spans):
                return False
            self._reserved += spans
            return True

    def release(self, spans: int) -> None:
        with self._lock:
            self._reserved -= spans

    def wait_for(self, spans: int, stop: threading.Event, poll: float = 0.05) -> bool:
        """Reserve room for `spans`, waiting for it; False when `stop` is set first."""
        while not self.reserve(spans):
            if stop.wait(poll):
                return False
        return True


__all__ = ["NextHopRoom"]
