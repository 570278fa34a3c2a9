"""Scoring behind the exporter's batching, where the app's thread pays nothing.

`RagScoringSpanProcessor` sits in front of the exporting processor, so it looks at every span on the
app's thread as the span ends: 14-18 µs a 5-span trace in a running app, 5-7 % of a small traced request
(bench/overhead.py). `RagScoringSpanExporter` puts the same scoring (`LiveScoring`) between a
`BatchSpanProcessor` and its exporter instead.
The app's thread then runs the SDK's own `on_end` and nothing else; ragtrace sees the spans a batch at a
time on the batching thread. Spans of sampled traces are held, scored, and exported later with the
batching thread's next batch or at the worker's next tick; every other span goes on in the batch it
came in.

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

import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from ragtrace._logs import ragtrace_logger
from ragtrace._sdk import set_batch_exporter
from ragtrace._untraced import suppress_tracing
from ragtrace.judges.base import Judge
from ragtrace.live.core import LiveScoring, ScoringFace
from ragtrace.live.options import ScoringOptions

logger = ragtrace_logger(__name__)


# At most this many spans an export call, as the SDK's BatchSpanProcessor sends by default (an OTLP
# request has a size limit).
MAX_EXPORT_BATCH = 512


class BatchOutlet:
    """The sink of the exporter face: the wrapped exporter.

    The spans the pipeline releases are gathered, not exported one trace at a time: they go out with the
    batching thread's next batch, or at the end of the worker's tick, whichever comes first, in calls of at
    most MAX_EXPORT_BATCH spans. One export call at a time (the batching thread and the worker both
    export), with instrumentation suppressed, as the SDK does around its own exports."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self._exporting = threading.Lock()
        self._gathered: list[ReadableSpan] = []
        self._gathering = threading.Lock()

    def after_fork(self) -> None:
        """The parent exports what it gathered; a lock another thread held at the fork stays held in the child."""
        self._gathered = []
        self._gathering, self._exporting = threading.Lock(), threading.Lock()

    def send(self, spans: Iterable[ReadableSpan]) -> None:
        with self._gathering:
            self._gathered.extend(spans)

    def end_tick(self) -> bool:
        self.export()
        return False

    def export(self, spans: Sequence[ReadableSpan] = ()) -> SpanExportResult:
        """Export `spans` and everything gathered; never raises (a failure is logged and returned)."""
        with self._gathering:
            gathered, self._gathered = self._gathered, []
        batch = [*spans, *gathered] if gathered else spans
        if not batch:
            return SpanExportResult.SUCCESS
        result = SpanExportResult.SUCCESS
        token = suppress_tracing()
        try:
            with self._exporting:
                for start in range(0, len(batch), MAX_EXPORT_BATCH):
                    chunk = batch[start:start + MAX_EXPORT_BATCH]
                    try:
                        if self.exporter.export(chunk) is not SpanExportResult.SUCCESS:
                            logger.warning("ragtrace: the exporter failed to export %d spans", len(chunk))
                            result = SpanExportResult.FAILURE
                    except Exception:
                        logger.exception("ragtrace: the wrapped exporter raised; %d spans lost", len(chunk))
                        result = SpanExportResult.FAILURE
        finally:
            otel_context.detach(token)  # type: ignore[arg-type]
        return result

    def flush(self, timeout_millis: int = 30000) -> bool:
        exported = self.export() is SpanExportResult.SUCCESS
        flushed = self.exporter.force_flush(timeout_millis)
        # SpanExporter.force_flush is a stub returning None: an exporter without one has nothing to flush
        return exported and (flushed is None or bool(flushed))

    def shutdown(self) -> None:
        self.export()
        self.exporter.shutdown()


class RagScoringSpanExporter(ScoringFace, SpanExporter):
    """Scores RAG traces on their way from a `BatchSpanProcessor` to `exporter`; exports every span once.

    `judge` and `options` are the `ScoringOptions` (scorers, sampler, mode, target, limits, worker, ...).
    """

    def __init__(self, exporter: SpanExporter, *, judge: Judge, **options: Any) -> None:
        self.outlet = BatchOutlet(exporter)
        self.scoring = LiveScoring(ScoringOptions(judge=judge, **options), self.outlet)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.outlet.export(self.scoring.admission.admit(spans))

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Score what can be scored within the timeout, export everything held, flush the exporter."""
        return self.scoring.flush(timeout_millis)

    def shutdown(self) -> None:
        """Score what can be scored within `score_deadline`, export everything held, shut the exporter down."""
        self.scoring.shutdown()


class BatchedScoring(ScoringFace, SpanProcessor):
    """What `install()` puts in the provider's place of a BatchSpanProcessor it scores behind.

    Its per-span hooks are the batching processor's own bound methods, so the app's thread makes exactly
    the calls it made before. A flush flushes the batching, then waits for the scoring within the same
    timeout (the SDK's own never flushes its exporter); shutdown shuts the batching down, which shuts the
    scoring exporter down after its last batch."""

    def __init__(self, batching: BatchSpanProcessor, exporter: RagScoringSpanExporter) -> None:
        self.batching, self.exporter, self.scoring = batching, exporter, exporter.scoring
        self.on_start = batching.on_start  # type: ignore[method-assign]
        self._on_ending = batching._on_ending  # type: ignore[method-assign]
        self.on_end = batching.on_end  # type: ignore[method-assign]

    @classmethod
    def behind(cls, batching: BatchSpanProcessor, exporter: RagScoringSpanExporter) -> BatchedScoring:
        """Make `batching` export through `exporter` (which wraps its own exporter) from its next batch on."""
        set_batch_exporter(batching, exporter)
        return cls(batching, exporter)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return _flush_then_score(self.batching, self.exporter, timeout_millis)

    def shutdown(self) -> None:
        self.batching.shutdown()  # type: ignore[no-untyped-call]


def _flush_then_score(batching: BatchSpanProcessor, scoring: RagScoringSpanExporter, timeout_millis: int) -> bool:
    deadline = time.monotonic() + timeout_millis / 1000
    batched = BatchSpanProcessor.force_flush(batching, timeout_millis)
    remaining = max(int((deadline - time.monotonic()) * 1000), 0)
    return scoring.force_flush(remaining) and batched


class ScoringBatchSpanProcessor(ScoringFace, BatchSpanProcessor):
    """The SDK's `BatchSpanProcessor` in front of a `RagScoringSpanExporter`: `force_flush` exports the
    batches, then waits for their scoring within the same timeout (the SDK's own never flushes its
    exporter). Takes the `BatchSpanProcessor` arguments."""

    def __init__(self, span_exporter: RagScoringSpanExporter, *args: Any, **kwargs: Any) -> None:
        super().__init__(span_exporter, *args, **kwargs)
        self.exporter, self.scoring = span_exporter, span_exporter.scoring

    def force_flush(self, timeout_millis: int | None = None) -> bool:
        return _flush_then_score(self, self.exporter, 30000 if timeout_millis is None else timeout_millis)
