"""One OTLP/JSON document -> an `ExportTraceServiceRequest`: a trace export request (ids as OTLP/JSON's hex
or protobuf's base64, as the Collector's file exporter, an OTLP/HTTP JSON body or the spec's examples write
it), or one span as the SDK's `ConsoleSpanExporter` prints it (`ReadableSpan.to_json`), turned into a
request by the SDK's own OTLP encoder so that it takes the same road as the rest. JSON of another kind
(metrics, logs, a dataset) is a `NotOtlpTraces` that says what the document holds.
"""

from __future__ import annotations

import base64
import calendar
import json
import time
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import Link, SpanContext, SpanKind, StatusCode

from ragtrace.otlp.spans import SPAN_ID_BYTES, TRACE_ID_BYTES, status_of

_ID_BYTES = {
    "traceId": 16, "trace_id": 16, "spanId": 8, "span_id": 8, "parentSpanId": 8, "parent_span_id": 8,
}


def _id_as_base64(value: Any, size: int) -> str | None:
    """A JSON id as protobuf's JSON mapping wants it (base64), or None when it is not an id of `size` bytes.

    OTLP/JSON writes ids as hex, protobuf's own mapping as base64; anything else (another length, not hex,
    not a string) is not an id.
    """
    if not isinstance(value, str):
        return None
    if value == "":
        return value
    if len(value) == 2 * size:
        try:
            return base64.b64encode(bytes.fromhex(value)).decode()
        except ValueError:
            pass
    try:
        decoded = base64.b64decode(value, validate=True)
    except ValueError:
        return None
    return value if len(decoded) == size else None


def _as_list(value: Any) -> list[Any]:
    """The dicts of a JSON array; a value of another type is left for the protobuf parser to reject."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _normalise_ids(document: Any) -> Any:
    """Ids as protobuf's JSON mapping wants them (base64). A span with an id that is no id of the right
    length gets an empty trace id, so that it is rejected as a span without ids while the rest of the
    request stands; a link with one is dropped, as spans_of drops links without ids."""
    if not isinstance(document, dict):
        return document
    for resource_spans in _as_list(document.get("resourceSpans", document.get("resource_spans"))):
        for scope_spans in _as_list(resource_spans.get("scopeSpans", resource_spans.get("scope_spans"))):
            for span in _as_list(scope_spans.get("spans")):
                if isinstance(span.get("links"), list):
                    span["links"] = [link for link in _as_list(span["links"]) if _normalise_item(link)]
                if not _normalise_item(span):
                    span["traceId" if "traceId" in span else "trace_id"] = ""
    return document


#: Top-level keys of the other OTLP signals' export requests, as a file exporter writes them.
_OTHER_SIGNALS = {"resourceMetrics": "metrics", "resource_metrics": "metrics", "resourceLogs": "logs",
                  "resource_logs": "logs", "resourceProfiles": "profiles", "resource_profiles": "profiles"}
_SAMPLE_KEYS = {"query", "question", "contexts", "context", "response", "answer", "ground_truth"}


class NotOtlpTraces(ValueError):
    """A JSON line that is valid JSON but not a trace export request."""


def _not_otlp_traces(document: Any) -> str | None:
    """What a JSON line holds when it is not an OTLP trace export, said so that the user knows what to run;
    None when it is one (an empty object is an empty request)."""
    if not isinstance(document, dict):
        return f"a JSON {type(document).__name__}, not an OTLP ExportTraceServiceRequest object"
    if not document or "resourceSpans" in document or "resource_spans" in document:
        return None
    keys = ", ".join(repr(k) for k in list(document)[:8]) + (", ..." if len(document) > 8 else "")
    signal = next((name for key, name in _OTHER_SIGNALS.items() if key in document), None)
    if signal is not None:
        return f"an OTLP {signal} export (keys {keys}), not traces: replay reads the collector's traces file"
    found = f"a JSON object with keys {keys} and no 'resourceSpans': not an OTLP trace export"
    if _SAMPLE_KEYS & document.keys():
        return found + "; it looks like a dataset of samples: score it with `ragtrace eval FILE`"
    return found


# ---------------------------------------------------------------- the SDK's ConsoleSpanExporter


def _is_console_span(document: Any) -> bool:
    """`ReadableSpan.to_json()`: a name, and a context with a trace id (no OTLP request has either at its top)."""
    context = document.get("context") if isinstance(document, dict) else None
    return isinstance(context, dict) and "trace_id" in context and "name" in document


def _console_id(value: Any, size: int, what: str) -> int:
    """`0x`-prefixed hex, as `to_json` writes ids."""
    if isinstance(value, str) and value.startswith("0x") and len(value) == 2 + 2 * size:
        try:
            return int(value, 16)
        except ValueError:
            pass
    raise ValueError(f"{what} {value!r} is not a {size}-byte 0x-hex id")


def _console_time(value: Any) -> int | None:
    """`2024-05-01T12:00:00.123456Z` (the SDK's format: UTC, microseconds) as nanoseconds since the epoch."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"time {value!r} is not a string")
    parsed = time.strptime(value[:19], "%Y-%m-%dT%H:%M:%S")
    fraction = value[19:].rstrip("Z").lstrip(".")
    if fraction and not fraction.isdigit():
        raise ValueError(f"time {value!r} is not YYYY-MM-DDTHH:MM:SS.ffffffZ")
    return calendar.timegm(parsed) * 1_000_000_000 + int((fraction or "0").ljust(9, "0")[:9])


def _console_attributes(value: Any) -> dict[str, Any]:
    """JSON arrays back to the tuples the SDK held."""
    if not isinstance(value, dict):
        return {}
    return {str(k): tuple(v) if isinstance(v, list) else v for k, v in value.items()}


def _console_context(value: Any, what: str) -> SpanContext:
    if not isinstance(value, dict):
        raise ValueError(f"{what} context is not an object")
    return SpanContext(
        _console_id(value.get("trace_id"), TRACE_ID_BYTES, f"{what} trace_id"),
        _console_id(value.get("span_id"), SPAN_ID_BYTES, f"{what} span_id"), is_remote=False,
    )


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def console_span(document: dict[str, Any]) -> ReadableSpan:
    """One span as the SDK's ConsoleSpanExporter printed it, back as a ReadableSpan; ValueError naming the
    field that cannot be read."""
    context = _console_context(document.get("context"), "span")
    parent_id = document.get("parent_id")
    parent = (
        SpanContext(context.trace_id, _console_id(parent_id, SPAN_ID_BYTES, "parent_id"), is_remote=False)
        if parent_id is not None else None
    )
    kind_name = str(document.get("kind", "SpanKind.INTERNAL")).rpartition(".")[2]
    status = _object(document.get("status"))
    code = StatusCode.__members__.get(str(status.get("status_code", "UNSET")), StatusCode.UNSET)
    resource = _object(document.get("resource"))
    return ReadableSpan(
        name=str(document.get("name")),
        context=context,
        parent=parent,
        resource=Resource(_console_attributes(resource.get("attributes")), resource.get("schema_url") or None),
        attributes=_console_attributes(document.get("attributes")),
        events=[
            Event(str(e.get("name")), _console_attributes(e.get("attributes")), _console_time(e.get("timestamp")))
            for e in _as_list(document.get("events"))
        ],
        links=[
            Link(_console_context(link.get("context"), "link"), _console_attributes(link.get("attributes")))
            for link in _as_list(document.get("links"))
        ],
        kind=SpanKind.__members__.get(kind_name, SpanKind.INTERNAL),
        status=status_of(code.value, str(status.get("description") or "")),
        start_time=_console_time(document.get("start_time")),
        end_time=_console_time(document.get("end_time")),
    )


def _normalise_item(item: dict[str, Any]) -> bool:
    """Rewrite the ids of a span or link in place; False when one of them is not a valid id."""
    valid = True
    for key, size in _ID_BYTES.items():
        if key in item:
            converted = _id_as_base64(item[key], size)
            if converted is None:
                valid = False
                item.pop(key)
            else:
                item[key] = converted
    return valid


def parse_json_line(text: str) -> ExportTraceServiceRequest:
    """One OTLP/JSON request; ValueError (json's or ours) or protobuf's ParseError when it is not one, and
    `NotOtlpTraces` (a ValueError) naming what the line holds when it is JSON of another kind."""
    request = ExportTraceServiceRequest()
    try:
        document = json.loads(text)
        if _is_console_span(document):
            encoded: ExportTraceServiceRequest = encode_spans([console_span(document)])
            return encoded
        problem = _not_otlp_traces(document)
        if problem is not None:
            raise NotOtlpTraces(problem)
        json_format.ParseDict(_normalise_ids(document), request, ignore_unknown_fields=True)
    except RecursionError:
        raise ValueError("the JSON document is nested too deeply") from None
    return request


__all__ = ["NotOtlpTraces", "console_span", "parse_json_line"]
