"""`RagScoringSpanProcessor`: live scoring in front of the exporting processor.

It wraps the exporting processor (normally `BatchSpanProcessor(OTLPSpanExporter())`), like logfire's
processor wrappers, and sees every span on the app's thread as it ends: `on_end` does O(1) work and never
raises. Spans of traces that cannot be sampled go on at once; the others are held until their trace
closes, then scored and released to the wrapped processor (`LiveScoring`). Every span that enters
leaves exactly once, scored or not. Behind the batching (`RagScoringSpanExporter`) the app's thread
runs none of this.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

from ragtrace._logs import ragtrace_logger
from ragtrace._sdk import batch_queue_room
from ragtrace.judges.base import Judge
from ragtrace.live.core import LiveScoring, ScoringFace
from ragtrace.live.options import ScoringOptions

logger = ragtrace_logger(__name__)

# At shutdown, released spans still waiting for room in the exporting processor's queue get this long.
SHUTDOWN_FLUSH_MS = 30_000

# The SDK's hooks that do nothing: a processor that has them is not called for every span start and end.
_DOES_NOTHING = frozenset({
    SpanProcessor.on_start, SpanProcessor._on_ending,
    BatchSpanProcessor.on_start, BatchSpanProcessor._on_ending,
    SimpleSpanProcessor.on_start, SimpleSpanProcessor._on_ending,
})


class ProcessorSink:
    """The sink of the processor face: the wrapped processor's `on_end`, at a pace its queue can take.

    A BatchSpanProcessor drops what does not fit in its queue (2,048 spans by default), and a released
    burst (a lost scoring process's traces, a flush, a deadline) can be larger. So released spans wait
    here and go on as the queue has room for them, keeping one export batch free for the app's own
    spans; the rest go at the next tick, or at a flush, which exports the queue to make room. At most
    `max_waiting` spans wait (the held spans' bound): beyond it they go on anyway, as they would
    without ragtrace."""

    def __init__(self, processor: SpanProcessor, max_waiting: int) -> None:
        self.processor = processor
        self.max_waiting = max_waiting
        self._waiting: deque[ReadableSpan] = deque()

    def send(self, spans: Iterable[ReadableSpan]) -> None:
        self._waiting.extend(spans)
        self._forward()

    def end_tick(self) -> bool:
        self._forward()
        return bool(self._waiting)

    def after_fork(self) -> None:
        """The parent hands on what waits here (the SDK's BatchSpanProcessor empties its queue in a
        forked child, for the same reason)."""
        self._waiting = deque()

    @property
    def waiting(self) -> int:
        """Released spans waiting for room in the wrapped processor's queue (they go on first)."""
        return len(self._waiting)

    def _forward(self) -> None:
        waiting = self._waiting
        room = batch_queue_room(self.processor)
        if room is None:
            n = len(waiting)
        else:
            free, size, batch = room
            n = max(free - min(batch, size // 2), 0)
        n = min(max(n, len(waiting) - self.max_waiting), len(waiting))
        forward = self.processor.on_end
        for _ in range(n):
            try:
                span = waiting.popleft()
            except IndexError:  # a flush on another thread took the rest
                return
            try:
                forward(span)
            except Exception:
                logger.exception("ragtrace: wrapped on_end failed")

    def flush(self, timeout_millis: int) -> bool:
        """Hand on everything waiting, exporting the wrapped processor's queue whenever it is full."""
        deadline = time.monotonic() + timeout_millis / 1000
        self._forward()
        while self._waiting and (left := deadline - time.monotonic()) > 0:
            if not _within(lambda: self.processor.force_flush(int(left * 1000)), left):
                break
            self._forward()
        left = max(deadline - time.monotonic(), 0.0)
        return not self._waiting and bool(_within(lambda: self.processor.force_flush(int(left * 1000)), left))

    def shutdown(self) -> None:
        # Only spans waiting here need a flush first: the wrapped processor's shutdown exports its queue
        # itself, within its own bound.
        if self._waiting:
            self.flush(SHUTDOWN_FLUSH_MS)
        if self._waiting:
            logger.warning("ragtrace: %d released spans did not fit the exporting processor's queue in time",
                           len(self._waiting))
            self.max_waiting = 0
            self._forward()
        self.processor.shutdown()


def _within(call: Callable[[], object], timeout_s: float) -> object:
    """What `call()` returns, or None when it has not returned within `timeout_s` (it goes on, on a daemon
    thread). The SDK's `BatchSpanProcessor.force_flush` ignores its timeout and exports on the caller's
    thread: an exporter that hangs would hold the app's flush, or its shutdown, for good."""
    returned: list[object] = []

    def run() -> None:
        try:
            returned.append(call())
        except Exception:
            logger.exception("ragtrace: flushing the wrapped processor failed")
            returned.append(False)

    thread = threading.Thread(target=run, name="ragtrace-flush", daemon=True)
    thread.start()
    thread.join(max(timeout_s, 0.0))
    return returned[0] if returned else None


class RagScoringSpanProcessor(ScoringFace, SpanProcessor):
    """Holds sampled RAG traces, scores them, forwards every span to `exporting` exactly once.

    `judge` and `options` are the `ScoringOptions` (scorers, sampler, mode, target, limits, worker, ...).
    """

    def __init__(self, exporting: SpanProcessor, *, judge: Judge, **options: Any) -> None:
        self.exporting = exporting
        scoring_options = ScoringOptions(judge=judge, **options)
        self.sink = ProcessorSink(exporting, scoring_options.max_held_spans)
        self.scoring = LiveScoring(scoring_options, self.sink)
        self._holds = self.scoring.admission.holds
        self.forwards_start = getattr(type(exporting), "on_start", None) not in _DOES_NOTHING
        self.forwards_ending = getattr(type(exporting), "_on_ending", None) not in _DOES_NOTHING

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self.forwards_start:
            try:
                self.exporting.on_start(span, parent_context=parent_context)
            except Exception:
                logger.exception("ragtrace: wrapped on_start failed")

    def _on_ending(self, span: Span) -> None:
        if self.forwards_ending:
            try:
                self.exporting._on_ending(span)
            except Exception:
                logger.exception("ragtrace: wrapped _on_ending failed")

    def on_end(self, span: ReadableSpan) -> None:
        """O(1) and exception-safe: forward, or hold for scoring (a dict insert under a lock)."""
        if self._holds(span):
            return
        try:
            self.exporting.on_end(span)
        except Exception:
            logger.exception("ragtrace: wrapped on_end failed")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Score what can be scored within the timeout, forward everything held, flush the wrapped processor."""
        return self.scoring.flush(timeout_millis)

    def shutdown(self) -> None:
        """Settle (waiting at most `score_deadline`), stop the worker, shut the wrapped processor down."""
        self.scoring.shutdown()
