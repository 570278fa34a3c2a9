"""The test OTLP receiver decodes what the SDK's real exporters send, over both transports."""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request

import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.metrics import Observation
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from tests.servers.otlp import OtlpReceiver

RESOURCE = Resource.create({"service.name": "rag-app", "deployment.environment": "test"})


def _emit_trace(exporter: SpanExporter) -> tuple[int, int, int]:
    """A root and a child with every attribute type, an event, a link and an error status."""
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("ragtrace.test", "1.0")
    with tracer.start_as_current_span("root", kind=SpanKind.SERVER) as root:
        root_ctx = root.get_span_context()
        with tracer.start_as_current_span(
            "retrieve",
            kind=SpanKind.CLIENT,
            links=[Link(root_ctx, {"link.kind": "source"})],
            attributes={
                "s": "text",
                "i": 7,
                "f": 0.5,
                "b": True,
                "ls": ["a", "b"],
                "li": [1, 2],
            },
        ) as child:
            child.add_event("gen_ai.evaluation.result", {"gen_ai.evaluation.score.value": 0.83})
            child.set_status(Status(StatusCode.ERROR, "boom"))
            child_id = child.get_span_context().span_id
    provider.shutdown()
    return root_ctx.trace_id, root_ctx.span_id, child_id


def _check_trace(receiver: OtlpReceiver, transport: str, ids: tuple[int, int, int]) -> None:
    trace_id, root_id, child_id = ids
    spans = receiver.wait_for_spans(2)
    by_name = {s.name: s for s in spans}
    root, child = by_name["root"], by_name["retrieve"]
    assert root.trace_id == child.trace_id == trace_id
    assert root.span_id == root_id and root.parent_span_id is None and root.kind is SpanKind.SERVER
    assert child.span_id == child_id and child.parent_span_id == root_id and child.kind is SpanKind.CLIENT
    assert child.attributes == {"s": "text", "i": 7, "f": 0.5, "b": True, "ls": ["a", "b"], "li": [1, 2]}
    assert child.events == [("gen_ai.evaluation.result", {"gen_ai.evaluation.score.value": 0.83})]
    assert child.event("gen_ai.evaluation.result") == [{"gen_ai.evaluation.score.value": 0.83}]
    assert child.links == [(trace_id, root_id, {"link.kind": "source"})]
    assert child.status_code is StatusCode.ERROR and child.status_message == "boom"
    assert child.resource["service.name"] == "rag-app" and child.service_name == "rag-app"
    assert child.scope_name == "ragtrace.test"
    assert child.end_time_unix_nano >= child.start_time_unix_nano > 0
    assert {s.transport for s in spans} == {transport}
    assert receiver.bad_requests() == []


def test_grpc_span_exporter(otlp_receiver: OtlpReceiver) -> None:
    assert otlp_receiver.grpc_endpoint.startswith("http://127.0.0.1:")
    ids = _emit_trace(GrpcSpanExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True))
    _check_trace(otlp_receiver, "grpc", ids)


def test_http_span_exporter_gzip(otlp_receiver: OtlpReceiver) -> None:
    exporter = HttpSpanExporter(endpoint=otlp_receiver.http_endpoint + "/v1/traces", compression=Compression.Gzip)
    ids = _emit_trace(exporter)
    _check_trace(otlp_receiver, "http", ids)


def test_http_span_exporter_plain(otlp_receiver: OtlpReceiver) -> None:
    ids = _emit_trace(HttpSpanExporter(endpoint=otlp_receiver.http_endpoint + "/v1/traces"))
    _check_trace(otlp_receiver, "http", ids)


def _emit_metrics(exporter: MetricExporter) -> None:
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader], resource=RESOURCE)
    meter = provider.get_meter("ragtrace")
    counter = meter.create_counter("ragtrace.evaluation.decisions")
    counter.add(2, {"decision": "scored"})
    counter.add(1, {"decision": "not_sampled"})
    hist = meter.create_histogram("ragtrace.evaluation.score", explicit_bucket_boundaries_advisory=[0.25, 0.5, 0.75])
    for v in (0.1, 0.6, 0.9, 0.95):
        hist.record(v, {"gen_ai.evaluation.name": "context_precision"})
    meter.create_observable_gauge("ragtrace.queue.depth", callbacks=[lambda _o: [Observation(3)]])
    assert provider.force_flush()
    provider.shutdown()


def _check_metrics(receiver: OtlpReceiver, transport: str) -> None:
    decisions = receiver.wait_for_metric("ragtrace.evaluation.decisions")
    assert decisions.kind == "sum" and decisions.is_monotonic is True
    assert decisions.point_where({"decision": "scored"}).value == 2  # type: ignore[union-attr]
    assert decisions.point_where({"decision": "not_sampled"}).value == 1  # type: ignore[union-attr]
    assert decisions.resource["service.name"] == "rag-app" and decisions.scope_name == "ragtrace"
    score = receiver.wait_for_metric("ragtrace.evaluation.score")
    assert score.kind == "histogram"
    (point,) = score.points_where({"gen_ai.evaluation.name": "context_precision"})
    assert point.count == 4 and point.sum == pytest.approx(2.55)
    assert point.explicit_bounds == (0.25, 0.5, 0.75)
    assert point.bucket_counts == (1, 0, 1, 2)
    assert point.min == pytest.approx(0.1) and point.max == pytest.approx(0.95)
    gauge = receiver.wait_for_metric("ragtrace.queue.depth")
    assert gauge.kind == "gauge" and gauge.data_points[0].value == 3
    assert {m.transport for m in receiver.metrics()} == {transport}


def test_grpc_metric_exporter(otlp_receiver: OtlpReceiver) -> None:
    _emit_metrics(GrpcMetricExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True))
    _check_metrics(otlp_receiver, "grpc")


def test_http_metric_exporter(otlp_receiver: OtlpReceiver) -> None:
    _emit_metrics(
        HttpMetricExporter(endpoint=otlp_receiver.http_endpoint + "/v1/metrics", compression=Compression.Gzip)
    )
    _check_metrics(otlp_receiver, "http")


def test_http_log_exporter(otlp_receiver: OtlpReceiver) -> None:
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(
        SimpleLogRecordProcessor(HttpLogExporter(endpoint=otlp_receiver.http_endpoint + "/v1/logs"))
    )
    provider.get_logger("ragtrace").emit(
        body="scored", attributes={"gen_ai.evaluation.name": "context_recall"}, event_name="gen_ai.evaluation.result"
    )
    provider.shutdown()
    (log,) = otlp_receiver.wait_for_logs(1)
    assert log.body == "scored" and log.event_name == "gen_ai.evaluation.result"
    assert log.attributes == {"gen_ai.evaluation.name": "context_recall"}
    assert log.resource["service.name"] == "rag-app"


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_http_json_body_and_errors(otlp_receiver: OtlpReceiver) -> None:
    trace_id = "5b8efff798038103d269b633813fc60c"
    body = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-app"}}]},
                "scopeSpans": [
                    {
                        "scope": {"name": "manual"},
                        "spans": [
                            {
                                "traceId": trace_id,
                                "spanId": "eee19b7ec3c1b174",
                                "name": "json-span",
                                "kind": 3,
                                "attributes": [{"key": "n", "value": {"intValue": "5"}}],
                            }
                        ],
                    }
                ],
            }
        ]
    }
    url = otlp_receiver.http_endpoint + "/v1/traces"
    status, _ = _post(
        url, gzip.compress(json.dumps(body).encode()), {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    )
    assert status == 200
    (received,) = otlp_receiver.wait_for_spans(1)
    assert received.trace_id == int(trace_id, 16) and received.span_id == 0xEEE19B7EC3C1B174
    assert received.kind is SpanKind.CLIENT and received.attributes == {"n": 5}
    assert received.service_name == "json-app"

    assert _post(url, b"\xff\x00garbage", {"Content-Type": "application/x-protobuf"})[0] == 400
    assert len(otlp_receiver.bad_requests()) == 1
    assert _post(otlp_receiver.http_endpoint + "/v1/nothing", b"", {})[0] == 404

    otlp_receiver.fail_next_trace_exports(1)
    assert _post(url, b"", {"Content-Type": "application/x-protobuf"})[0] == 503
    assert _post(url, b"", {"Content-Type": "application/x-protobuf"})[0] == 200

    otlp_receiver.clear()
    assert otlp_receiver.spans() == [] and otlp_receiver.bad_requests() == []


def test_wait_for_predicate_and_timeouts(otlp_receiver: OtlpReceiver) -> None:
    with pytest.raises(TimeoutError, match="got 0"):
        otlp_receiver.wait_for_spans(1, timeout=0.05)
    with pytest.raises(TimeoutError, match="nothing"):
        otlp_receiver.wait_for_metric("nothing", timeout=0.05)
    _emit_metrics(GrpcMetricExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True))
    found = otlp_receiver.wait_for_metric(
        "ragtrace.evaluation.decisions", predicate=lambda m: m.point_where({"decision": "scored"}) is not None
    )
    assert found.point_where({"decision": "scored"}).value == 2  # type: ignore[union-attr]
    with pytest.raises(TimeoutError, match=r"ragtrace\.evaluation\.decisions"):
        otlp_receiver.wait_for_metric(
            "ragtrace.evaluation.decisions",
            timeout=0.05,
            predicate=lambda m: m.point_where({"decision": "x"}) is not None,
        )
    _emit_trace(GrpcSpanExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True))
    spans = otlp_receiver.wait_for_spans(lambda got: any(s.name == "retrieve" for s in got))
    assert "retrieve" in {s.name for s in spans}
    with pytest.raises(TimeoutError, match="retrieve"):
        otlp_receiver.wait_for_spans(lambda got: any(s.name == "never" for s in got), timeout=0.05)


def test_close_is_idempotent_and_frees_ports() -> None:
    receiver = OtlpReceiver()
    endpoint = receiver.http_endpoint
    receiver.close()
    receiver.close()
    with pytest.raises(OSError):
        _post(endpoint + "/v1/traces", b"", {})
