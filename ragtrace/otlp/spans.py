"""OTLP trace export request -> SDK `ReadableSpan`s: the one conversion `ragtrace replay`, `ragtrace explain`
and the gateway share, so that what arrives over the wire meets exactly the capture code the live processor
runs (a replay scores what production would have scored).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

KINDS = {
    1: SpanKind.INTERNAL, 2: SpanKind.SERVER, 3: SpanKind.CLIENT, 4: SpanKind.PRODUCER, 5: SpanKind.CONSUMER,
}
_STATUS = {0: StatusCode.UNSET, 1: StatusCode.OK, 2: StatusCode.ERROR}
_REMOTE_KNOWN, _REMOTE = 0x100, 0x200


def any_value(value: AnyValue) -> Any:
    """An OTLP AnyValue as the Python value the SDK would have held."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return tuple(any_value(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return getattr(value, kind)


def attributes(values: Sequence[KeyValue]) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in values}


TRACE_ID_BYTES, SPAN_ID_BYTES = 16, 8


def _int_id(raw: bytes, size: int) -> int | None:
    """The id as an int; None when it is empty, all zero or not `size` bytes long (no SDK can export it:
    the encoder writes ids as fixed-width integers, and a longer one fails the whole export batch)."""
    return int.from_bytes(raw, "big") if len(raw) == size and any(raw) else None


def status_of(code: int, message: str) -> Status:
    """The SDK only keeps a description on an ERROR status (and warns otherwise)."""
    status_code = _STATUS.get(code, StatusCode.UNSET)
    return Status(status_code, message or None) if status_code is StatusCode.ERROR else Status(status_code)


def spans_of(request: ExportTraceServiceRequest) -> Iterator[ReadableSpan]:
    """Every span of a request as an SDK ReadableSpan (attributes, events, links, parent, times, resource).

    Spans whose trace, span or parent id is not an id (missing, all zero, of another length) are left out,
    as are links with such ids: the caller counts what is missing (the gateway's partial success).
    """
    for resource_spans in request.resource_spans:
        resource = Resource(attributes(resource_spans.resource.attributes), resource_spans.schema_url)
        for scope_spans in resource_spans.scope_spans:
            scope = InstrumentationScope(
                scope_spans.scope.name, scope_spans.scope.version or None, scope_spans.schema_url or None,
                attributes(scope_spans.scope.attributes) or None,
            )
            for span in scope_spans.spans:
                trace_id, span_id = _int_id(span.trace_id, TRACE_ID_BYTES), _int_id(span.span_id, SPAN_ID_BYTES)
                parent_id = _int_id(span.parent_span_id, SPAN_ID_BYTES)
                broken_parent = parent_id is None and len(span.parent_span_id) not in (0, SPAN_ID_BYTES)
                if trace_id is None or span_id is None or broken_parent:
                    continue  # a parent id of another length is as broken as the span's own: no guessing a root
                flags = TraceFlags(span.flags & 0xFF)
                state = TraceState.from_header([span.trace_state]) if span.trace_state else None
                context = SpanContext(trace_id, span_id, is_remote=False, trace_flags=flags, trace_state=state)
                remote = bool(span.flags & _REMOTE_KNOWN and span.flags & _REMOTE)
                parent = SpanContext(trace_id, parent_id, is_remote=remote) if parent_id is not None else None
                links = [
                    Link(SpanContext(t, s, is_remote=True), attributes(link.attributes))
                    for link in span.links
                    if (t := _int_id(link.trace_id, TRACE_ID_BYTES)) is not None
                    and (s := _int_id(link.span_id, SPAN_ID_BYTES)) is not None
                ]
                yield ReadableSpan(
                    name=span.name,
                    context=context,
                    parent=parent,
                    resource=resource,
                    attributes=attributes(span.attributes),
                    events=[
                        Event(e.name, attributes(e.attributes), e.time_unix_nano or None) for e in span.events
                    ],
                    links=links,
                    kind=KINDS.get(span.kind, SpanKind.INTERNAL),
                    status=status_of(span.status.code, span.status.message),
                    start_time=span.start_time_unix_nano or None,
                    end_time=span.end_time_unix_nano or None,
                    instrumentation_scope=scope,
                )


# ---------------------------------------------------------------- reading files


__all__ = ["KINDS", "SPAN_ID_BYTES", "TRACE_ID_BYTES", "any_value", "attributes", "spans_of", "status_of"]
