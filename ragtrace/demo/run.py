"""`ragtrace demo`: the demo app under live scoring, with a terminal table of scored traces."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult

from ragtrace.demo.app import DemoApp, load_questions

if TYPE_CHECKING:  # the live pipeline is imported when the demo runs, as before
    from ragtrace.live.options import WorkerKind

SCORERS = ("context_precision", "context_relevance", "context_recall")
SHORT = {"context_precision": "precision", "context_relevance": "relevance", "context_recall": "recall"}


class ScoreTable(SpanExporter):
    """Prints one row per scored retrieval span as it is exported: the live view of the demo."""

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self.out = out
        self.rows: list[dict[str, float | None]] = []
        self._lock = threading.Lock()
        self._print("trace     query                                     precision relevance recall  worst reason")

    def _print(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            attrs = span.attributes or {}
            if "ragtrace.eval.status" not in attrs or span.context is None:
                continue
            scores = {name: attrs.get(f"ragtrace.{name}.score") for name in SCORERS}
            numeric = {k: float(v) for k, v in scores.items() if isinstance(v, int | float)}
            worst = min(numeric, key=lambda k: numeric[k]) if numeric else None
            reason = str(attrs.get(f"ragtrace.{worst}.reason", "")) if worst else str(attrs["ragtrace.eval.status"])
            query = str(attrs.get("gen_ai.retrieval.query.text", ""))[:40]
            cells = " ".join(f"{numeric[n]:>9.2f}" if n in numeric else f"{'-':>9}" for n in SCORERS)
            with self._lock:
                self.rows.append({k: numeric.get(k) for k in SCORERS})
                self._print(f"{span.context.trace_id:032x}"[:8] + f"  {query:<40} {cells}  {reason[:70]}")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def summary(self) -> str:
        parts = []
        for name in SCORERS:
            values = [v for row in self.rows if (v := row.get(name)) is not None]
            if values:
                parts.append(f"{SHORT[name]} mean {sum(values) / len(values):.2f} (n={len(values)})")
        return f"{len(self.rows)} traces scored: " + "; ".join(parts)


def _otlp_processor() -> BatchSpanProcessor | None:
    """Export over OTLP only when the standard OTel variables ask for it (protocol from them too)."""
    if not (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return None
    from ragtrace.live.otlp import otlp_span_exporter

    return BatchSpanProcessor(otlp_span_exporter())


def run_demo(
    requests: int = 18,
    judge: str = "local",
    sample_rate: float = 1.0,
    out: TextIO = sys.stdout,
    worker: WorkerKind = "thread",
) -> int:
    from ragtrace.live import install

    provider = TracerProvider(resource=Resource.create({"service.name": "ragtrace-demo"}))
    otlp = _otlp_processor()
    if otlp is not None:
        provider.add_span_processor(otlp)
    table = ScoreTable(out)
    provider.add_span_processor(SimpleSpanProcessor(table))
    install(provider, judge=judge, sample_rate=sample_rate, worker=worker)

    app = DemoApp(provider.get_tracer("ragtrace.demo"))
    questions = load_questions()
    started = time.perf_counter()
    for i in range(requests):
        app.answer(questions[i % len(questions)])
    provider.force_flush(timeout_millis=120_000)
    provider.shutdown()
    print(f"{table.summary()} in {time.perf_counter() - started:.1f} s", file=out)
    if otlp is not None:
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        print(f"spans were also sent over OTLP to {endpoint} (export errors, if any, are logged above)", file=out)
    return 0
