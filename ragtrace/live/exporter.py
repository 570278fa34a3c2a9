"""Scoring behind the exporter's batching, where the app's thread pays nothing.

`RagScoringSpanProcessor` sits in front of the exporting processor, so it looks at every span on the
app's thread as the span ends: about 1 µs a span in a running app, 3-5 % of a small traced request.
`RagScoringSpanExporter` puts the same scoring between a `BatchSpanProcessor` and its exporter instead.
The app's thread then runs the SDK's own `on_end` and nothing else; ragtrace sees the spans a batch at a
time on the batching thread. Spans of sampled traces are held, scored and exported later in export
calls of their own; every other span goes on in the batch it came in.

    scoring = RagScoringSpanExporter(OTLPSpanExporter(), judge=resolve_judge("local"), worker="process")
    provider.add_span_processor(ScoringBatchSpanProcessor(scoring))

`ScoringBatchSpanProcessor` is the SDK's `BatchSpanProcessor` whose `force_flush` also waits for the
scoring (the SDK's own calls no exporter's `force_flush`): a plain `BatchSpanProcessor(scoring)` works
too, but a flush then leaves the spans of traces being scored held.

A sampled trace reaches the worker one batching delay later than with the processor (`schedule_delay_millis`,
5 s by default), which only delays its export; nothing else changes: the same sampling, limits, counts,
enrich and link modes, and both workers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from ragtrace._untraced import suppress_tracing
from ragtrace.judges.base import Judge
from ragtrace.live.processor import RagScoringSpanProcessor

logger = logging.getLogger(__name__)


class _ExportingTo(SpanProcessor):
    """The scoring processor's way out: the wrapped exporter, one batch per call and one call at a time
    (the batching thread's batches and the worker's scored traces would otherwise export concurrently)."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        token = suppress_tracing()  # as the BatchSpanProcessor does around its exports
        try:
            with self._lock:
                return self.exporter.export(spans)
        finally:
            otel_context.detach(token)  # type: ignore[arg-type]

    def on_end(self, span: ReadableSpan) -> None:
        self.export((span,))

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.exporter.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self.exporter.shutdown()


class _ScoringBehindBatching(RagScoringSpanProcessor):
    """The processor, forwarding what it releases in one export call per batch rather than span by span."""

    _exporting: _ExportingTo

    def _forward_all(self, spans: Iterable[ReadableSpan]) -> None:
        batch = list(spans)
        if not batch:
            return
        try:
            if self._exporting.export(batch) is not SpanExportResult.SUCCESS:
                logger.warning("ragtrace: the exporter failed to export %d scored spans", len(batch))
        except Exception:
            logger.exception("ragtrace: the wrapped exporter raised")


class RagScoringSpanExporter(SpanExporter):
    """Scores RAG traces on their way from a `BatchSpanProcessor` to `exporter`; exports every span once.

    `judge` and `options` are those of `RagScoringSpanProcessor` (sampler, mode, worker, limits, ...).
    `processor` is the scoring processor inside, for its counts (`decisions`, `held_spans`, ...).
    """

    def __init__(self, exporter: SpanExporter, *, judge: Judge, **options: Any) -> None:
        self._out = _ExportingTo(exporter)
        self.processor: RagScoringSpanProcessor = _ScoringBehindBatching(self._out, judge=judge, **options)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        passing = self.processor._admit(spans)
        if not passing:
            return SpanExportResult.SUCCESS
        return self._out.export(passing)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Score what can be scored within the timeout, export everything held, flush the exporter."""
        return self.processor.force_flush(timeout_millis)

    def shutdown(self) -> None:
        """Score what can be scored within `score_deadline`, export everything held, shut the exporter down."""
        self.processor.shutdown()


class ScoringBatchSpanProcessor(BatchSpanProcessor):
    """The SDK's `BatchSpanProcessor` in front of a `RagScoringSpanExporter`: `force_flush` exports the
    batches, then waits for their scoring within the same timeout (the SDK's own never flushes its
    exporter). Takes the `BatchSpanProcessor` arguments."""

    def __init__(self, span_exporter: RagScoringSpanExporter, *args: Any, **kwargs: Any) -> None:
        super().__init__(span_exporter, *args, **kwargs)
        self._scoring = span_exporter

    def force_flush(self, timeout_millis: int | None = None) -> bool:
        timeout = 30000 if timeout_millis is None else timeout_millis
        deadline = time.monotonic() + timeout / 1000
        batched = super().force_flush(timeout)
        remaining = max(int((deadline - time.monotonic()) * 1000), 0)
        return self._scoring.force_flush(remaining) and batched
