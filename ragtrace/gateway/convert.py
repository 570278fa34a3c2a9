"""OTLP request -> SDK ReadableSpans for the gateway: replay's conversion, plus the sampled flag.

The conversion itself is `ragtrace.otlp.spans_of` (one implementation, so the gateway scores
what replay scores). One thing differs for a receiver: every span that arrives over OTLP was recorded and
exported by its SDK, yet the Python SDK's OTLP encoder does not write W3C trace flags, so the sampled bit
usually arrives as 0, and the SDK's BatchSpanProcessor silently drops unsampled spans. A received span is
therefore marked sampled before it enters the pipeline (the encoder does not write the flag back either,
so the bytes sent onwards are unchanged).
"""

from __future__ import annotations

from collections.abc import Iterator

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from ragtrace._sdk import set_context
from ragtrace.otlp import spans_of


def received_spans(request: ExportTraceServiceRequest) -> Iterator[ReadableSpan]:
    """Every span of a request with valid ids, as a ReadableSpan the SDK's exporting processors accept."""
    for span in spans_of(request):
        ctx = span.context
        if ctx is not None and not ctx.trace_flags.sampled:
            set_context(span, SpanContext(
                ctx.trace_id, ctx.span_id, is_remote=False,
                trace_flags=TraceFlags(ctx.trace_flags | TraceFlags.SAMPLED), trace_state=ctx.trace_state,
            ))
        yield span


def span_count(request: ExportTraceServiceRequest) -> int:
    return sum(len(scope_spans.spans) for rs in request.resource_spans for scope_spans in rs.scope_spans)


__all__ = ["received_spans", "span_count"]
