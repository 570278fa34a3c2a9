"""`RagScoringSpanProcessor`: live scoring in front of the exporting processor.

It wraps the exporting processor (normally `BatchSpanProcessor(OTLPSpanExporter())`), like logfire's
processor wrappers, and sees every span on the app's thread as it ends: `on_end` does O(1) work and never
raises. Spans of traces that cannot be sampled go on at once; the others are held until their trace
closes, then scored and released to the wrapped processor (`LiveScoring`). Every span that enters
leaves exactly once, scored or not. Behind the batching (`RagScoringSpanExporter`) the app's thread
runs none of this.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

from ragtrace.judges.base import Judge
from ragtrace.live.core import LiveScoring, ScoringFace
from ragtrace.live.options import ScoringOptions

logger = logging.getLogger(__name__)

# The SDK's hooks that do nothing: a processor that has them is not called for every span start and end.
_DOES_NOTHING = frozenset({
    SpanProcessor.on_start, SpanProcessor._on_ending,
    BatchSpanProcessor.on_start, BatchSpanProcessor._on_ending,
    SimpleSpanProcessor.on_start, SimpleSpanProcessor._on_ending,
})


class ProcessorSink:
    """The sink of the processor face: the wrapped processor's `on_end`, one span at a time."""

    def __init__(self, processor: SpanProcessor) -> None:
        self.processor = processor

    def emit(self, spans: Iterable[ReadableSpan]) -> None:
        forward = self.processor.on_end
        for span in spans:
            try:
                forward(span)
            except Exception:
                logger.exception("ragtrace: wrapped on_end failed")

    def emitted(self) -> None:
        pass  # each span went on as it was emitted

    def flush(self, timeout_millis: int) -> bool:
        return bool(self.processor.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self.processor.shutdown()


class RagScoringSpanProcessor(ScoringFace, SpanProcessor):
    """Holds sampled RAG traces, scores them, forwards every span to `exporting` exactly once.

    `judge` and `options` are the `ScoringOptions` (scorers, sampler, mode, target, limits, worker, ...).
    """

    def __init__(self, exporting: SpanProcessor, *, judge: Judge, **options: Any) -> None:
        self.exporting = exporting
        self.scoring = LiveScoring(ScoringOptions(judge=judge, **options), ProcessorSink(exporting))
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
