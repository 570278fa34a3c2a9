"""Real OTel SDK spans for capture tests: a tracer exporting to memory, with explicit timestamps."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

MS = 1_000_000  # nanoseconds


class Traces:
    """Builds spans with the real SDK; times are given in milliseconds for readable tests."""

    def __init__(self, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
        self.tracer = provider.get_tracer("ragtrace-tests")
        self.exporter = exporter

    def span(
        self,
        name: str,
        attrs: Mapping[str, Any] | None = None,
        *,
        parent: trace.Span | None = None,
        start: int = 0,
        end: int = 1,
        events: Sequence[tuple[str, Mapping[str, Any]]] = (),
    ) -> trace.Span:
        """Start and end a span; `parent=None` makes a new trace's root."""
        context = trace.set_span_in_context(parent) if parent is not None else Context()
        span = self.tracer.start_span(name, context=context, attributes=dict(attrs or {}), start_time=start * MS)
        for event_name, event_attrs in events:
            span.add_event(event_name, dict(event_attrs), timestamp=start * MS)
        span.end(end_time=end * MS)
        return span

    def open(self, name: str, attrs: Mapping[str, Any] | None = None, *, parent: trace.Span | None = None,
             start: int = 0) -> trace.Span:
        """Start a span to be ended later with `close` (for parents of the spans under test)."""
        context = trace.set_span_in_context(parent) if parent is not None else Context()
        return self.tracer.start_span(name, context=context, attributes=dict(attrs or {}), start_time=start * MS)

    @staticmethod
    def close(span: trace.Span, end: int) -> None:
        span.end(end_time=end * MS)

    def finished(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())


@pytest.fixture
def traces() -> Iterator[Traces]:
    exporter = InMemorySpanExporter()
    limits = SpanLimits(max_span_attributes=100_000, max_events=100_000, max_event_attributes=1_000)
    provider = TracerProvider(span_limits=limits)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Traces(provider, exporter)
    provider.shutdown()


def sid(span: trace.Span) -> int:
    return span.get_span_context().span_id


def genai_docs(*docs: tuple[str, str, float]) -> str:
    return json.dumps([{"id": i, "score": s, "content": c} for i, c, s in docs])


def genai_messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])
