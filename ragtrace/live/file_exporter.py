"""`OtlpJsonFileSpanExporter`: spans to a file as OTLP/JSON lines, to capture a trace without a Collector.

Each export call becomes one line: an `ExportTraceServiceRequest` built by the SDK's own OTLP encoder and
written in the OTLP/JSON mapping (ids as hex, enums as integers), the format of the Collector's file
exporter. `ragtrace explain FILE` and `ragtrace replay FILE` read it.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(item: dict[str, Any]) -> None:
    """protobuf's JSON mapping writes bytes as base64; OTLP/JSON writes trace and span ids as hex."""
    for key in _ID_KEYS:
        if isinstance(value := item.get(key), str):
            item[key] = base64.b64decode(value).hex()


def otlp_json_line(spans: Sequence[ReadableSpan]) -> str:
    """One OTLP/JSON `ExportTraceServiceRequest` holding `spans`, on one line."""
    document = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                _hex_ids(span)
                for link in span.get("links", []):
                    _hex_ids(link)
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


class OtlpJsonFileSpanExporter(SpanExporter):
    """Append spans to `path` as OTLP/JSON lines (one request per export call); `mode="w"` starts the file
    afresh. Put it behind a `BatchSpanProcessor` or a `SimpleSpanProcessor` like any exporter:

        provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileSpanExporter("traces.jsonl")))

    then `ragtrace explain traces.jsonl` says what ragtrace makes of each trace.
    """

    def __init__(self, path: str | os.PathLike[str], *, mode: str = "a") -> None:
        if mode not in ("a", "w"):
            raise ValueError(f"mode must be 'a' (append) or 'w' (start afresh), got {mode!r}")
        self.path = Path(path)
        self._lock = threading.Lock()
        self._file = self.path.open(mode, encoding="utf-8")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        line = otlp_json_line(spans) + "\n"
        with self._lock:
            if self._file.closed:
                return SpanExportResult.FAILURE
            self._file.write(line)
            self._file.flush()
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        with self._lock:
            if not self._file.closed:
                self._file.flush()
        return True

    def shutdown(self) -> None:
        with self._lock:
            self._file.close()


__all__ = ["OtlpJsonFileSpanExporter", "otlp_json_line"]
