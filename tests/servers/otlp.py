"""A real OTLP receiver (gRPC and HTTP) on 127.0.0.1, built on opentelemetry-proto and grpcio; its fixture.

Tests point the SDK's own OTLP exporters at it and assert on what arrived, decoded into plain dataclasses,
so a test proves the bytes on the wire and not a mock's idea of them.

    def test_x(otlp_receiver):
        exporter = OTLPSpanExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True)
        ...
        spans = otlp_receiver.wait_for_spans(1)
        metric = otlp_receiver.wait_for_metric("ragtrace.evaluation.decisions")
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.trace import SpanKind, StatusCode

__all__ = [
    "OtlpReceiver",
    "ReceivedDataPoint",
    "ReceivedLog",
    "ReceivedMetric",
    "ReceivedSpan",
    "decode_any_value",
    "decode_attributes",
    "otlp_receiver",
]

Attributes = dict[str, Any]


# ----------------------------------------------------------------------------------------------------
# What a test sees: plain dataclasses, ids as ints (as the SDK holds them), attributes as python values.
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as it arrived. `kind` is the API's SpanKind (proto UNSPECIFIED becomes None)."""

    trace_id: int
    span_id: int
    parent_span_id: int | None
    name: str
    kind: SpanKind | None
    attributes: Attributes
    events: list[tuple[str, Attributes]]
    links: list[tuple[int, int, Attributes]]
    resource: Attributes
    scope_name: str
    status_code: StatusCode = StatusCode.UNSET
    status_message: str = ""
    start_time_unix_nano: int = 0
    end_time_unix_nano: int = 0
    trace_state: str = ""
    transport: str = ""  # "grpc" or "http"

    @property
    def service_name(self) -> str | None:
        value = self.resource.get("service.name")
        return value if isinstance(value, str) else None

    def event(self, name: str) -> list[Attributes]:
        """The attributes of every event called `name`, in order."""
        return [attrs for event_name, attrs in self.events if event_name == name]


class ReceivedExemplar(NamedTuple):
    """One exemplar: its value, the span it links to, and the measurement attributes a View kept off the series."""

    value: float
    trace_id: int | None
    span_id: int | None
    filtered_attributes: Attributes


@dataclass(frozen=True)
class ReceivedDataPoint:
    """A number point (`value`) or a histogram point (`count`, `sum`, `bucket_counts`, `explicit_bounds`)."""

    attributes: Attributes
    value: int | float | None = None
    count: int | None = None
    sum: float | None = None
    bucket_counts: tuple[int, ...] = ()
    explicit_bounds: tuple[float, ...] = ()
    min: float | None = None
    max: float | None = None
    start_time_unix_nano: int = 0
    time_unix_nano: int = 0
    exemplars: tuple[ReceivedExemplar, ...] = ()


def _exemplars(point: Any) -> tuple[ReceivedExemplar, ...]:
    return tuple(
        ReceivedExemplar(float(_number_value(e) or 0), _id(e.trace_id), _id(e.span_id),
                         decode_attributes(e.filtered_attributes))
        for e in point.exemplars
    )


@dataclass(frozen=True)
class ReceivedMetric:
    """One metric of one export. `kind` is the proto's data case: sum, gauge, histogram, ..."""

    name: str
    kind: str
    unit: str
    description: str
    data_points: list[ReceivedDataPoint]
    resource: Attributes
    scope_name: str
    is_monotonic: bool | None = None
    temporality: int | None = None  # proto AggregationTemporality: 1 delta, 2 cumulative
    transport: str = ""

    def points_where(self, attributes: Attributes) -> list[ReceivedDataPoint]:
        """The data points whose attributes include every key/value of `attributes`."""
        return [p for p in self.data_points if all(p.attributes.get(k) == v for k, v in attributes.items())]

    def point_where(self, attributes: Attributes) -> ReceivedDataPoint | None:
        """The first data point whose attributes include `attributes`, or None."""
        found = self.points_where(attributes)
        return found[0] if found else None


@dataclass(frozen=True)
class ReceivedLog:
    """One log record. `trace_id`/`span_id` are None when the record is not tied to a span."""

    body: Any
    attributes: Attributes
    severity_number: int
    severity_text: str
    event_name: str
    trace_id: int | None
    span_id: int | None
    resource: Attributes
    scope_name: str
    time_unix_nano: int = 0
    transport: str = ""


# ----------------------------------------------------------------------------------------------------
# Decoding
# ----------------------------------------------------------------------------------------------------


def decode_any_value(value: AnyValue) -> Any:
    """AnyValue -> str / bool / int / float / bytes / list / dict / None (the empty AnyValue)."""
    case = value.WhichOneof("value")
    if case is None:
        return None
    if case == "array_value":
        return [decode_any_value(v) for v in value.array_value.values]
    if case == "kvlist_value":
        return decode_attributes(value.kvlist_value.values)
    return getattr(value, case)


def decode_attributes(pairs: Sequence[KeyValue]) -> Attributes:
    return {kv.key: decode_any_value(kv.value) for kv in pairs}


def _id(raw: bytes) -> int | None:
    return int.from_bytes(raw, "big") if raw else None


def _kind(proto_kind: int) -> SpanKind | None:
    # proto: 0 UNSPECIFIED, 1 INTERNAL, 2 SERVER, 3 CLIENT, 4 PRODUCER, 5 CONSUMER;
    # the API enum starts at INTERNAL=0.
    return SpanKind(proto_kind - 1) if proto_kind > 0 else None


def _status(proto_code: int) -> StatusCode:
    # proto: 0 UNSET, 1 OK, 2 ERROR, same order as the API's StatusCode values.
    return StatusCode(proto_code) if proto_code in (0, 1, 2) else StatusCode.UNSET


def _decode_spans(request: trace_service_pb2.ExportTraceServiceRequest, transport: str) -> list[ReceivedSpan]:
    out: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = decode_attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    ReceivedSpan(
                        trace_id=_id(span.trace_id) or 0,
                        span_id=_id(span.span_id) or 0,
                        parent_span_id=_id(span.parent_span_id),
                        name=span.name,
                        kind=_kind(span.kind),
                        attributes=decode_attributes(span.attributes),
                        events=[(e.name, decode_attributes(e.attributes)) for e in span.events],
                        links=[
                            (_id(ln.trace_id) or 0, _id(ln.span_id) or 0, decode_attributes(ln.attributes))
                            for ln in span.links
                        ],
                        resource=resource,
                        scope_name=scope_spans.scope.name,
                        status_code=_status(span.status.code),
                        status_message=span.status.message,
                        start_time_unix_nano=span.start_time_unix_nano,
                        end_time_unix_nano=span.end_time_unix_nano,
                        trace_state=span.trace_state,
                        transport=transport,
                    )
                )
    return out


def _number_value(point: Any) -> int | float | None:
    case = point.WhichOneof("value")
    return None if case is None else getattr(point, case)  # type: ignore[no-any-return]


def _decode_metrics(request: metrics_service_pb2.ExportMetricsServiceRequest, transport: str) -> list[ReceivedMetric]:
    out: list[ReceivedMetric] = []
    for resource_metrics in request.resource_metrics:
        resource = decode_attributes(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data") or ""
                points: list[ReceivedDataPoint] = []
                is_monotonic: bool | None = None
                temporality: int | None = None
                if kind in ("sum", "gauge"):
                    data = getattr(metric, kind)
                    for p in data.data_points:
                        points.append(
                            ReceivedDataPoint(
                                attributes=decode_attributes(p.attributes),
                                value=_number_value(p),
                                start_time_unix_nano=p.start_time_unix_nano,
                                time_unix_nano=p.time_unix_nano,
                            )
                        )
                    if kind == "sum":
                        is_monotonic = metric.sum.is_monotonic
                        temporality = metric.sum.aggregation_temporality
                elif kind == "histogram":
                    temporality = metric.histogram.aggregation_temporality
                    for h in metric.histogram.data_points:
                        points.append(
                            ReceivedDataPoint(
                                attributes=decode_attributes(h.attributes),
                                count=h.count,
                                sum=h.sum if h.HasField("sum") else None,
                                bucket_counts=tuple(h.bucket_counts),
                                explicit_bounds=tuple(h.explicit_bounds),
                                min=h.min if h.HasField("min") else None,
                                max=h.max if h.HasField("max") else None,
                                start_time_unix_nano=h.start_time_unix_nano,
                                time_unix_nano=h.time_unix_nano,
                                exemplars=_exemplars(h),
                            )
                        )
                elif kind == "exponential_histogram":
                    temporality = metric.exponential_histogram.aggregation_temporality
                    for e in metric.exponential_histogram.data_points:
                        points.append(
                            ReceivedDataPoint(
                                attributes=decode_attributes(e.attributes),
                                count=e.count,
                                sum=e.sum if e.HasField("sum") else None,
                                time_unix_nano=e.time_unix_nano,
                            )
                        )
                elif kind == "summary":
                    for s in metric.summary.data_points:
                        points.append(
                            ReceivedDataPoint(
                                attributes=decode_attributes(s.attributes),
                                count=s.count,
                                sum=s.sum,
                                time_unix_nano=s.time_unix_nano,
                            )
                        )
                out.append(
                    ReceivedMetric(
                        name=metric.name,
                        kind=kind,
                        unit=metric.unit,
                        description=metric.description,
                        data_points=points,
                        resource=resource,
                        scope_name=scope_metrics.scope.name,
                        is_monotonic=is_monotonic,
                        temporality=temporality,
                        transport=transport,
                    )
                )
    return out


def _decode_logs(request: logs_service_pb2.ExportLogsServiceRequest, transport: str) -> list[ReceivedLog]:
    out: list[ReceivedLog] = []
    for resource_logs in request.resource_logs:
        resource = decode_attributes(resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                out.append(
                    ReceivedLog(
                        body=decode_any_value(record.body),
                        attributes=decode_attributes(record.attributes),
                        severity_number=record.severity_number,
                        severity_text=record.severity_text,
                        event_name=record.event_name,
                        trace_id=_id(record.trace_id),
                        span_id=_id(record.span_id),
                        resource=resource,
                        scope_name=scope_logs.scope.name,
                        time_unix_nano=record.time_unix_nano,
                        transport=transport,
                    )
                )
    return out


# ----------------------------------------------------------------------------------------------------
# gRPC servicers
# ----------------------------------------------------------------------------------------------------


class _TraceServicer(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(self, request: Any, context: Any) -> trace_service_pb2.ExportTraceServiceResponse:
        failure = self._receiver._take_failure()
        if failure is not None:
            context.abort(grpc.StatusCode.UNAVAILABLE, "scripted failure")
        self._receiver._add_spans(_decode_spans(request, "grpc"))
        return trace_service_pb2.ExportTraceServiceResponse()


class _MetricsServicer(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(self, request: Any, context: Any) -> metrics_service_pb2.ExportMetricsServiceResponse:
        self._receiver._add_metrics(_decode_metrics(request, "grpc"))
        return metrics_service_pb2.ExportMetricsServiceResponse()


class _LogsServicer(logs_service_pb2_grpc.LogsServiceServicer):  # type: ignore[misc]
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(self, request: Any, context: Any) -> logs_service_pb2.ExportLogsServiceResponse:
        self._receiver._add_logs(_decode_logs(request, "grpc"))
        return logs_service_pb2.ExportLogsServiceResponse()


# ----------------------------------------------------------------------------------------------------
# HTTP (OTLP/HTTP: protobuf or JSON body, optionally gzip / deflate)
# ----------------------------------------------------------------------------------------------------

_HTTP_ROUTES: dict[str, tuple[type[Message], type[Message]]] = {
    "/v1/traces": (
        trace_service_pb2.ExportTraceServiceRequest,
        trace_service_pb2.ExportTraceServiceResponse,
    ),
    "/v1/metrics": (
        metrics_service_pb2.ExportMetricsServiceRequest,
        metrics_service_pb2.ExportMetricsServiceResponse,
    ),
    "/v1/logs": (
        logs_service_pb2.ExportLogsServiceRequest,
        logs_service_pb2.ExportLogsServiceResponse,
    ),
}


_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})
_HEX_ID = re.compile(r"[0-9a-fA-F]{16}|[0-9a-fA-F]{32}")


def _hex_ids_to_base64(node: Any) -> Any:
    """OTLP/JSON spells ids in hex, protobuf's JSON mapping wants base64 for bytes: translate."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str) and _HEX_ID.fullmatch(value):
                value = base64.b64encode(bytes.fromhex(value)).decode()
            out[key] = _hex_ids_to_base64(value)
        return out
    if isinstance(node, list):
        return [_hex_ids_to_base64(v) for v in node]
    return node


def _make_handler(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: pytest output is for test failures."""

        def _reply(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            route = _HTTP_ROUTES.get(path)
            if route is None:
                self._reply(404, b"not found", "text/plain")
                return
            request_type, response_type = route
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            content_type = self.headers.get("Content-Type") or "application/x-protobuf"
            content_type = content_type.split(";")[0].strip()
            try:
                if encoding == "gzip":
                    raw = gzip.decompress(raw)
                elif encoding == "deflate":
                    raw = zlib.decompress(raw)
                message = request_type()
                if content_type == "application/json":
                    json_format.ParseDict(_hex_ids_to_base64(json.loads(raw)), message)
                else:
                    message.ParseFromString(raw)
            except (OSError, EOFError, zlib.error, DecodeError, json_format.ParseError, ValueError) as exc:
                receiver._record_bad_request(f"{path}: {exc!r}")
                self._reply(400, str(exc).encode(), "text/plain")
                return
            if path == "/v1/traces" and receiver._take_failure() is not None:
                self._reply(503, b"scripted failure", "text/plain")
                return
            if path == "/v1/traces":
                receiver._add_spans(_decode_spans(message, "http"))  # type: ignore[arg-type]
            elif path == "/v1/metrics":
                receiver._add_metrics(_decode_metrics(message, "http"))  # type: ignore[arg-type]
            else:
                receiver._add_logs(_decode_logs(message, "http"))  # type: ignore[arg-type]
            if content_type == "application/json":
                self._reply(200, json_format.MessageToJson(response_type()).encode(), "application/json")
            else:
                self._reply(200, response_type().SerializeToString(), "application/x-protobuf")

    return Handler


# ----------------------------------------------------------------------------------------------------
# The receiver
# ----------------------------------------------------------------------------------------------------


class OtlpReceiver:
    """Both OTLP transports on ephemeral 127.0.0.1 ports; everything received is kept until `clear()`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._spans: list[ReceivedSpan] = []
        self._metrics: list[ReceivedMetric] = []
        self._logs: list[ReceivedLog] = []
        self._bad_requests: list[str] = []
        self._failures_left = 0
        self._closed = False

        self._grpc = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="otlp-grpc"),
            options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)],  # big batches in load tests
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceServicer(self), self._grpc)  # type: ignore[no-untyped-call]
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_MetricsServicer(self), self._grpc)  # type: ignore[no-untyped-call]
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_LogsServicer(self), self._grpc)  # type: ignore[no-untyped-call]
        self._grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._grpc.start()

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._http.daemon_threads = True
        self._http_thread = threading.Thread(
            target=self._http.serve_forever, args=(0.05,), name="otlp-http", daemon=True
        )
        self._http_thread.start()

    # -- endpoints -------------------------------------------------------------------------------------------

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self._grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    # -- what arrived ----------------------------------------------------------------------------------------

    def spans(self) -> list[ReceivedSpan]:
        with self._cond:
            return list(self._spans)

    def metrics(self) -> list[ReceivedMetric]:
        """Every metric of every export, in arrival order (cumulative metrics repeat per export)."""
        with self._cond:
            return list(self._metrics)

    def logs(self) -> list[ReceivedLog]:
        with self._cond:
            return list(self._logs)

    def bad_requests(self) -> list[str]:
        """HTTP bodies that could not be decoded; a test of an exporter wants this empty."""
        with self._cond:
            return list(self._bad_requests)

    def latest_metric(self, name: str) -> ReceivedMetric | None:
        with self._cond:
            for metric in reversed(self._metrics):
                if metric.name == name:
                    return metric
        return None

    def wait_for_spans(
        self,
        predicate_or_count: int | Callable[[list[ReceivedSpan]], bool],
        timeout: float = 10.0,
    ) -> list[ReceivedSpan]:
        """Block until at least N spans arrived, or until `predicate(all spans so far)` is true.

        The predicate gets the whole list (so `lambda spans: any(s.name == "x" for s in spans)` works).
        Returns every span received so far; raises TimeoutError naming what did arrive.
        """
        ready: Callable[[list[ReceivedSpan]], bool]
        if isinstance(predicate_or_count, int):
            count = predicate_or_count
            ready = lambda spans: len(spans) >= count  # noqa: E731
        else:
            ready = predicate_or_count
        with self._cond:
            if self._cond.wait_for(lambda: ready(list(self._spans)), timeout=timeout):
                return list(self._spans)
            names = [s.name for s in self._spans]
        raise TimeoutError(f"spans not received within {timeout}s; got {len(names)}: {names}")

    def wait_for_metric(
        self,
        name: str,
        timeout: float = 10.0,
        *,
        predicate: Callable[[ReceivedMetric], bool] | None = None,
    ) -> ReceivedMetric:
        """Block until a metric called `name` (and satisfying `predicate`, if given) arrived; the latest wins.

        With periodic cumulative export, `predicate` waits for a value, e.g.
        `predicate=lambda m: m.point_where({"decision": "scored"}) is not None`.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for metric in reversed(self._metrics):
                    if metric.name == name and (predicate is None or predicate(metric)):
                        return metric
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    seen = sorted({m.name for m in self._metrics})
                    raise TimeoutError(f"metric {name!r} not received within {timeout}s; got {seen}")
                self._cond.wait(remaining)

    def wait_for_logs(
        self, predicate_or_count: int | Callable[[list[ReceivedLog]], bool], timeout: float = 10.0
    ) -> list[ReceivedLog]:
        """Like wait_for_spans, for log records."""
        ready: Callable[[list[ReceivedLog]], bool]
        if isinstance(predicate_or_count, int):
            count = predicate_or_count
            ready = lambda logs: len(logs) >= count  # noqa: E731
        else:
            ready = predicate_or_count
        with self._cond:
            if self._cond.wait_for(lambda: ready(list(self._logs)), timeout=timeout):
                return list(self._logs)
            got = len(self._logs)
        raise TimeoutError(f"logs not received within {timeout}s; got {got}")

    def fail_next_trace_exports(self, n: int) -> None:
        """Make the next `n` trace exports fail (gRPC UNAVAILABLE / HTTP 503), to test retry paths."""
        with self._cond:
            self._failures_left = n

    def clear(self) -> None:
        with self._cond:
            self._spans.clear()
            self._metrics.clear()
            self._logs.clear()
            self._bad_requests.clear()

    def close(self) -> None:
        """Stop both servers; idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
        self._grpc.stop(grace=None).wait(5.0)
        self._http.shutdown()
        self._http.server_close()
        self._http_thread.join(5.0)

    def __enter__(self) -> OtlpReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- called by the transports ----------------------------------------------------------------------------

    def _add_spans(self, spans: list[ReceivedSpan]) -> None:
        with self._cond:
            self._spans.extend(spans)
            self._cond.notify_all()

    def _add_metrics(self, metrics: list[ReceivedMetric]) -> None:
        with self._cond:
            self._metrics.extend(metrics)
            self._cond.notify_all()

    def _add_logs(self, logs: list[ReceivedLog]) -> None:
        with self._cond:
            self._logs.extend(logs)
            self._cond.notify_all()

    def _record_bad_request(self, what: str) -> None:
        with self._cond:
            self._bad_requests.append(what)

    def _take_failure(self) -> bool | None:
        with self._cond:
            if self._failures_left > 0:
                self._failures_left -= 1
                return True
        return None


@pytest.fixture
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A fresh receiver per test, closed at teardown."""
    receiver = OtlpReceiver()
    try:
        yield receiver
    finally:
        receiver.close()
