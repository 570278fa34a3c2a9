"""enrich: the copy of an SDK span (made from its fields) equals the copy of any other span (made through
the public constructor), in everything an exporter reads."""

from __future__ import annotations

from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from ragtrace._sdk import SDK_SPAN
from ragtrace.live.enrich import enrich


class Foreign(ReadableSpan):
    """A span type of someone else's: enrich must go through the public constructor for it."""


def exported_view(span: ReadableSpan) -> tuple[object, ...]:
    return (
        span.name, span.context, span.parent, span.resource, dict(span.attributes or {}),
        [(e.name, dict(e.attributes or {}), e.timestamp) for e in span.events],
        [(link.context, dict(link.attributes or {})) for link in span.links],
        span.kind, span.status.status_code, span.status.description, span.start_time, span.end_time,
        span.instrumentation_scope, span.dropped_attributes, span.dropped_events, span.dropped_links,
    )


def limited_span() -> ReadableSpan:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=2, max_events=1, max_links=1))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    other = provider.get_tracer("t").start_span("other")
    other.end()
    assert other.get_span_context() is not None
    links = [Link(other.get_span_context(), {"n": i}) for i in range(2)]
    span = provider.get_tracer("t", "1.2").start_span("retrieve", kind=SpanKind.CLIENT, links=links)
    for i in range(3):
        span.set_attribute(f"a{i}", i)
        span.add_event(f"e{i}", {"i": i})
    span.set_status(Status(StatusCode.ERROR, "broken"))
    span.end()
    (finished,) = [s for s in exporter.get_finished_spans() if s.name == "retrieve"]
    return finished


def test_the_field_copy_equals_the_constructor_copy_and_leaves_the_original_alone() -> None:
    span = limited_span()
    assert type(span) is SDK_SPAN and span.dropped_attributes and span.dropped_events and span.dropped_links
    foreign = Foreign(
        name=span.name, context=span.context, parent=span.parent, resource=span.resource,
        attributes=span._attributes, events=span._events, links=span._links, kind=span.kind,
        status=span.status, start_time=span.start_time, end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
    before = exported_view(span)
    assert exported_view(foreign) == before
    scores = {"ragtrace.context_precision.score": 0.5}
    events = [Event("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "context_precision"}, timestamp=9)]
    fast, slow = enrich(span, scores, events), enrich(foreign, scores, events)
    assert type(fast) is ReadableSpan and fast is not span
    assert exported_view(fast) == exported_view(slow)
    assert (fast.attributes or {})["ragtrace.context_precision.score"] == 0.5
    assert fast.events[-1].name == "gen_ai.evaluation.result"
    assert (fast.dropped_attributes, fast.dropped_events, fast.dropped_links) == (1, 2, 1)
    assert exported_view(span) == before  # the original is untouched (other processors hold it too)
