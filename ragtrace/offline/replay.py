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

`ragtrace.live.OtlpJsonFileSpanExporter` writes the first kind from an app, without a collector. Decoding a
request (and a JSON document into one) is `ragtrace.otlp`'s, shared with the gateway; reading files is here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan

from ragtrace.capture import DEFAULT_RULES, CaptureRules, CaptureStats, extract_samples
from ragtrace.offline.dataset import MAX_LINE_BYTES, DatasetError, read_json_documents
from ragtrace.otlp import NotOtlpTraces, any_value, attributes, console_span, parse_json_line, spans_of
from ragtrace.scoring import RagSample


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


# ---------------------------------------------------------------- reading files


def read_json(path: Path, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[ExportTraceServiceRequest]:
    try:
        for number, text in read_json_documents(path, max_line_bytes):
            try:
                yield parse_json_line(text)
            except json.JSONDecodeError as exc:
                line = number + exc.lineno - 1
                raise ReplayError(f"{path}:{line}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            except NotOtlpTraces as exc:
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
    "parse_json_line",
    "read_json",
    "read_proto",
    "read_spans",
    "replay_file",
    "samples_from_spans",
    "spans_of",
]
