"""Root settling: a gateway holds the root of a trace a little while, so that late children join the trace.

A gateway sees whole ended spans in any order and in separate batches, so "the local root ended" means
"the root span was received", and children exported after it would miss their trace. `RootSettler`
holds each root of a trace that may be sampled for `trace_settle` seconds before handing it on: children
go to the processor at once and wait there for their root as they would in process.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from ragtrace._sdk import is_local_root
from ragtrace.live.sampling import Sampler


class RootSettler:
    """Hands spans to the processor, holding local roots of possibly sampled traces for `settle` seconds.

    Children pass at once and wait in the processor's store for their root; a root that arrives first
    waits here, so children exported later in other batches are still part of the trace when it closes.
    At most `max_roots` roots wait (one deque, due times in arrival order); beyond that a root passes at
    once and its trace may close early. A span is popped under the lock before it is handed on, so each
    span is handed on exactly once, also across `drain` and `close`.
    """

    def __init__(self, processor: SpanProcessor, sampler: Sampler, settle: float, max_roots: int = 10_000) -> None:
        if settle < 0:
            raise ValueError(f"trace_settle must be >= 0 seconds, got {settle!r}")
        if max_roots < 1:
            raise ValueError(f"max_settling_roots must be >= 1, got {max_roots!r}")
        self._processor = processor
        self._sampler = sampler
        self._settle = settle
        self._max_roots = max_roots
        self._due: deque[tuple[float, ReadableSpan]] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self.overflowed = 0
        self._thread = threading.Thread(target=self._run, name="ragtrace-settle", daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        return len(self._due)

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.context
        if self._settle > 0 and ctx is not None and is_local_root(span) and self._sampler.might_sample(ctx.trace_id):
            with self._cond:
                if not self._closed:
                    if len(self._due) < self._max_roots:
                        self._due.append((time.monotonic() + self._settle, span))
                        if len(self._due) == 1:
                            self._cond.notify()
                        return
                    self.overflowed += 1
        self._processor.on_end(span)

    def _take(self, everything: bool) -> list[ReadableSpan]:
        now = time.monotonic()
        out = []
        while self._due and (everything or self._due[0][0] <= now):
            out.append(self._due.popleft()[1])
        return out

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._due or self._due[0][0] > time.monotonic()):
                    timeout = self._due[0][0] - time.monotonic() if self._due else None
                    self._cond.wait(timeout)
                if self._closed:
                    return
                ready = self._take(everything=False)
            for span in ready:
                self._processor.on_end(span)

    def drain(self) -> None:
        """Hand every waiting root on now (flush)."""
        with self._cond:
            ready = self._take(everything=True)
        for span in ready:
            self._processor.on_end(span)

    def close(self) -> None:
        """From now on roots pass at once; the waiting ones are handed on."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(5.0)
        self.drain()


__all__ = ["RootSettler"]
