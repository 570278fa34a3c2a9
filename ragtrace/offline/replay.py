"""Replay exported traces: OTLP (JSON lines or protobuf) -> SDK ReadableSpans -> the live capture code.

The point of going through `ReadableSpan` rather than reading OTLP directly is that replayed traffic meets
exactly the capture code the live processor runs, so a replay scores what production would have scored.

Accepted inputs:
- the OpenTelemetry Collector `file` exporter's JSON: one `ExportTraceServiceRequest` per line, protobuf
  JSON mapping; trace and span ids may be hex (the OTLP/JSON rule) or base64 (protobuf's own mapping).
  A request may also be pretty-printed over several lines (a saved OTLP/HTTP body, the spec's examples);
- the OpenTelemetry SDK's `ConsoleSpanExporter` output: one pretty-printed JSON object per span
  (`ReadableSpan.to_json`), which a newcomer has before any collector; such a span is turned into an
  export request by the SDK's own OTLP encoder, so it takes the same road as the rest;
- protobuf: one message, or several each prefixed by a varint length or by a 4-byte big-endian length
  (the collector's `proto` format).

`ragtrace.live.OtlpJsonFileSpanExporter` writes the first kind from an app, without a collector.
"""

from __future__ import annotations

import base64
import calendar
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from ragtrace.capture import DEFAULT_RULES, CaptureRules, CaptureStats, extract_samples
from ragtrace.offline.dataset import MAX_LINE_BYTES, DatasetError, read_json_documents
from ragtrace.scoring import RagSample

_KINDS = {
    1: SpanKind.INTERNAL, 2: SpanKind.SERVER, 3: SpanKind.CLIENT, 4: SpanKind.PRODUCER, 5: SpanKind.CONSUMER,
}
_STATUS = {0: StatusCode.UNSET, 1: StatusCode.OK, 2: StatusCode.ERROR}
_REMOTE_KNOWN, _REMOTE = 0x100, 0x200


class ReplayError(ValueError):
    """An export file that cannot be read; the message names the file and line or byte offset."""


@dataclass(frozen=True)
class ReplayedSample:
    """A captured sample with the trace it came from; `key` pairs it across runs (resume, compare)."""

    sample: RagSample
    trace_id: int
    span_id: int
    generation_span_id: int | None
    start_time_unix_nano: int | None
    convention: str

    @property
    def key(self) -> str:
        return f"{self.trace_id:032x}/{self.span_id:016x}"

    def record_fields(self) -> dict[str, Any]:
        return {
            "trace_id": f"{self.trace_id:032x}",
            "span_id": f"{self.span_id:016x}",
            "start_time_unix_nano": self.start_time_unix_nano,
            "convention": self.convention,
            "session_id": self.sample.metadata.get("session_id"),
        }


@dataclass
class Replay:
    samples: list[ReplayedSample]
    spans: int
    traces: int
    skipped: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------- OTLP -> ReadableSpan


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


_TRACE_ID_BYTES, _SPAN_ID_BYTES = 16, 8


def _int_id(raw: bytes, size: int) -> int | None:
    """The id as an int; None when it is empty, all zero or not `size` bytes long (no SDK can export it:
    the encoder writes ids as fixed-width integers, and a longer one fails the whole export batch)."""
    return int.from_bytes(raw, "big") if len(raw) == size and any(raw) else None


def _status(code: int, message: str) -> Status:
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
                trace_id, span_id = _int_id(span.trace_id, _TRACE_ID_BYTES), _int_id(span.span_id, _SPAN_ID_BYTES)
                parent_id = _int_id(span.parent_span_id, _SPAN_ID_BYTES)
                broken_parent = parent_id is None and len(span.parent_span_id) not in (0, _SPAN_ID_BYTES)
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
                    if (t := _int_id(link.trace_id, _TRACE_ID_BYTES)) is not None
                    and (s := _int_id(link.span_id, _SPAN_ID_BYTES)) is not None
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
                    kind=_KINDS.get(span.kind, SpanKind.INTERNAL),
                    status=_status(span.status.code, span.status.message),
                    start_time=span.start_time_unix_nano or None,
                    end_time=span.end_time_unix_nano or None,
                    instrumentation_scope=scope,
                )


# ---------------------------------------------------------------- reading files


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


class _NotOtlpTraces(ValueError):
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
        _console_id(value.get("trace_id"), _TRACE_ID_BYTES, f"{what} trace_id"),
        _console_id(value.get("span_id"), _SPAN_ID_BYTES, f"{what} span_id"), is_remote=False,
    )


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def console_span(document: dict[str, Any]) -> ReadableSpan:
    """One span as the SDK's ConsoleSpanExporter printed it, back as a ReadableSpan; ValueError naming the
    field that cannot be read."""
    context = _console_context(document.get("context"), "span")
    parent_id = document.get("parent_id")
    parent = (
        SpanContext(context.trace_id, _console_id(parent_id, _SPAN_ID_BYTES, "parent_id"), is_remote=False)
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
        status=_status(code.value, str(status.get("description") or "")),
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
    `_NotOtlpTraces` (a ValueError) naming what the line holds when it is JSON of another kind."""
    request = ExportTraceServiceRequest()
    try:
        document = json.loads(text)
        if _is_console_span(document):
            encoded: ExportTraceServiceRequest = encode_spans([console_span(document)])
            return encoded
        problem = _not_otlp_traces(document)
        if problem is not None:
            raise _NotOtlpTraces(problem)
        json_format.ParseDict(_normalise_ids(document), request, ignore_unknown_fields=True)
    except RecursionError:
        raise ValueError("the JSON document is nested too deeply") from None
    return request


def read_json(path: Path, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[ExportTraceServiceRequest]:
    try:
        for number, text in read_json_documents(path, max_line_bytes):
            try:
                yield parse_json_line(text)
            except json.JSONDecodeError as exc:
                line = number + exc.lineno - 1
                raise ReplayError(f"{path}:{line}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            except _NotOtlpTraces as exc:
                raise ReplayError(f"{path}:{number}: {exc}") from None
            except (json_format.ParseError, ValueError, TypeError) as exc:
                raise ReplayError(f"{path}:{number}: not an OTLP ExportTraceServiceRequest ({exc})") from None
    except DatasetError as exc:
        raise ReplayError(str(exc)) from None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated length prefix")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _framed(data: bytes, big_endian: bool, max_message: int) -> list[ExportTraceServiceRequest]:
    pos, requests = 0, []
    while pos < len(data):
        if big_endian:
            if pos + 4 > len(data):
                raise ValueError(f"truncated length prefix at byte {pos}")
            size, start = int.from_bytes(data[pos : pos + 4], "big"), pos + 4
        else:
            size, start = _varint(data, pos)
        if size > max_message or start + size > len(data):
            raise ValueError(f"message at byte {pos} claims {size} bytes; the file has {len(data) - start} left")
        request = ExportTraceServiceRequest()
        request.ParseFromString(data[start : start + size])
        requests.append(request)
        pos = start + size
    return requests


def _plausible(request: ExportTraceServiceRequest) -> bool:
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    return bool(spans) and all(len(s.trace_id) == 16 and len(s.span_id) == 8 for s in spans)


def read_proto(path: Path, max_message_bytes: int = MAX_LINE_BYTES * 10) -> list[ExportTraceServiceRequest]:
    data = path.read_bytes()
    if not data:
        return []
    errors = []
    if data[0] == 0:  # a message never starts with tag 0: this is a 4-byte big-endian length prefix
        try:
            return _framed(data, True, max_message_bytes)
        except (ValueError, DecodeError) as exc:
            raise ReplayError(f"{path}: not length-prefixed OTLP protobuf ({exc})") from None
    single = ExportTraceServiceRequest()
    try:
        single.ParseFromString(data)
        if _plausible(single):
            return [single]
    except DecodeError as exc:
        errors.append(f"as one message: {exc}")
    try:
        return _framed(data, False, max_message_bytes)
    except (ValueError, DecodeError) as exc:
        errors.append(f"as varint-delimited messages: {exc}")
    raise ReplayError(f"{path}: not OTLP protobuf ({'; '.join(errors) or 'no spans'})")


def _sniff(path: Path) -> str:
    with path.open("rb") as handle:
        head = handle.read(64).lstrip()
    return "json" if head.startswith((b"{", b"[")) or not head else "proto"


# ---------------------------------------------------------------- spans -> samples


def samples_from_spans(
    spans: Sequence[ReadableSpan], stats: CaptureStats | None = None, rules: CaptureRules = DEFAULT_RULES
) -> list[ReplayedSample]:
    """Group by trace id and run the live capture code on each trace, in order of first appearance."""
    stats = stats if stats is not None else CaptureStats()
    traces: dict[int, list[ReadableSpan]] = {}
    by_id: dict[tuple[int, int], ReadableSpan] = {}
    for span in spans:
        context = span.context
        if context is None:
            continue
        traces.setdefault(context.trace_id, []).append(span)
        by_id.setdefault((context.trace_id, context.span_id), span)
    samples = []
    for trace_spans in traces.values():
        for captured in extract_samples(trace_spans, stats=stats, rules=rules):
            retrieval = by_id.get((captured.trace_id, captured.retrieval_span_id))
            samples.append(
                ReplayedSample(
                    sample=captured.sample,
                    trace_id=captured.trace_id,
                    span_id=captured.retrieval_span_id,
                    generation_span_id=captured.generation_span_id,
                    start_time_unix_nano=retrieval.start_time if retrieval is not None else None,
                    convention=captured.convention,
                )
            )
    samples.sort(key=lambda s: (s.start_time_unix_nano or 0, s.trace_id, s.span_id))
    return samples


def read_spans(path: str | Path, *, format: str = "auto", max_line_bytes: int = MAX_LINE_BYTES) -> list[ReadableSpan]:
    """Every span of an export file (`replay` and `explain` read the same formats); ReplayError when empty."""
    path = Path(path)
    if not path.is_file():
        raise ReplayError(f"{path}: no such file")
    kind = _sniff(path) if format == "auto" else format
    if kind == "json":
        requests: Sequence[ExportTraceServiceRequest] | Iterator[ExportTraceServiceRequest] = read_json(
            path, max_line_bytes
        )
    elif kind == "proto":
        requests = read_proto(path)
    else:
        raise ReplayError(f"unknown format {format!r}; use json or proto")
    requests = list(requests)
    spans = [span for request in requests for span in spans_of(request)]
    if not spans:
        if not requests:
            raise ReplayError(f"{path}: file is empty: no spans")
        raise ReplayError(f"{path}: {len(requests)} OTLP export request(s), none with a span")
    return spans


def replay_file(
    path: str | Path, *, format: str = "auto", max_line_bytes: int = MAX_LINE_BYTES, rules: CaptureRules = DEFAULT_RULES
) -> Replay:
    """Read an export file and capture its samples, ordered by retrieval start time."""
    spans = read_spans(path, format=format, max_line_bytes=max_line_bytes)
    stats = CaptureStats()
    samples = samples_from_spans(spans, stats, rules)
    traces = len({s.context.trace_id for s in spans if s.context is not None})
    return Replay(samples=samples, spans=len(spans), traces=traces, skipped=dict(stats.counts))


__all__ = [
    "Replay",
    "ReplayError",
    "ReplayedSample",
    "any_value",
    "attributes",
    "console_span",
    "read_json",
    "read_proto",
    "read_spans",
    "replay_file",
    "samples_from_spans",
    "spans_of",
]
