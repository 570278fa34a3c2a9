"""The gateway over real sockets: an app's own OTLP exporters -> `Gateway` -> the SDK's exporter -> a real
OTLP receiver. Scores arrive on the retrieval span, every span arrives exactly once, and a trace split into
batches sent out of order scores exactly as the same trace scored in process."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragtrace.gateway import Gateway, RootSettler, request_of
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from ragtrace.live.settings import RagtraceSettings
from tests.live.fakes import CountingProcessor, ScriptedJudge, plain_trace, rag_trace
from tests.live.test_e2e_otlp import assert_scored_trace
from tests.servers.otlp import OtlpReceiver, ReceivedSpan

SETTINGS = RagtraceSettings(sample_rate=1.0)
FAST = {"sampler": Sampler(rate=1.0), "tick_interval": 0.01}


def make_gateway(receiver: OtlpReceiver, trace_settle: float = 0.3, **options: Any) -> Gateway:
    """A started gateway on free ports forwarding to `receiver`; `options` go to `Gateway` (limits, security)."""
    exporting = BatchSpanProcessor(
        GrpcSpanExporter(endpoint=receiver.grpc_endpoint, insecure=True), schedule_delay_millis=50
    )
    return Gateway(
        SETTINGS, judge=ScriptedJudge(), exporting=exporting, grpc_port=0, http_port=0,
        trace_settle=trace_settle, **FAST, **options,
    ).start()


@pytest.fixture
def gateway(otlp_receiver: OtlpReceiver) -> Iterator[Gateway]:
    gw = make_gateway(otlp_receiver)
    yield gw
    gw.shutdown()


def app_provider(exporter: SpanExporter) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-app"}))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
    return provider


def send_rag_traffic(
    transport: str, grpc_endpoint: str, http_endpoint: str, receiver: OtlpReceiver, timeout: float = 10.0
) -> tuple[list[int], list[int], list[ReceivedSpan]]:
    """An app exporting one RAG trace and one plain trace over OTLP to the endpoint; once every span has
    reached `receiver`, the RAG trace must be scored. Returns (RAG span ids, plain span ids, spans)."""
    exporter: SpanExporter = (
        GrpcSpanExporter(endpoint=grpc_endpoint, insecure=True)
        if transport == "grpc"
        else HttpSpanExporter(endpoint=http_endpoint + "/v1/traces")
    )
    provider = app_provider(exporter)
    tracer = provider.get_tracer("rag-app")
    ids = rag_trace(tracer, docs=("good doc", "noise", "good again"), plain=3)
    other = plain_trace(tracer, 3)
    assert provider.force_flush(5000)
    provider.shutdown()
    spans = receiver.wait_for_spans(len(ids) + len(other), timeout=timeout)
    assert_scored_trace(spans, ids)
    return ids, other, spans


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_app_exporter_through_gateway(transport: str, gateway: Gateway, otlp_receiver: OtlpReceiver) -> None:
    ids, other, spans = send_rag_traffic(transport, gateway.grpc_endpoint, gateway.http_endpoint, otlp_receiver)
    assert Counter(s.span_id for s in spans) == Counter(ids + other), "every span exactly once"
    time.sleep(0.2)
    assert len(otlp_receiver.spans()) == len(ids) + len(other)
    health = gateway.health()
    assert health["received_spans"] == len(ids) + len(other)
    assert health["decisions"] == {"scored": 2, "not_rag": 1}


# ------------------------------------------------------------------ split batches, any order


def recorded_trace(n: int = 1) -> list[list[ReadableSpan]]:
    """`n` RAG traces (two retrievals each) as the SDK ended them: children first, root last."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-app"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("rag-app")
    traces = []
    for _ in range(n):
        ids = rag_trace(tracer, docs=("good doc", "noise", "good again", "bad"), retrievals=2, plain=2)
        traces.append([s for s in memory.get_finished_spans() if s.context.span_id in ids])
    return traces


def written(span: ReadableSpan | ReceivedSpan) -> tuple[dict[str, Any], list[Any]]:
    """What scoring wrote on a span: its ragtrace.* attributes and evaluation events."""
    attrs = dict(span.attributes or {})
    ours = {k: v for k, v in attrs.items() if k.startswith("ragtrace.")}
    if isinstance(span, ReceivedSpan):
        events = [(name, dict(a)) for name, a in span.events]
    else:
        events = [(e.name, dict(e.attributes or {})) for e in span.events]
    return ours, events


def in_process(traces: list[list[ReadableSpan]]) -> dict[int, tuple[dict[str, Any], list[Any]]]:
    """The reference: the same spans through RagScoringSpanProcessor in the order the app ended them."""
    counting = CountingProcessor()
    processor = RagScoringSpanProcessor(counting, judge=ScriptedJudge(), **{**SETTINGS.processor_options(), **FAST})
    for trace in traces:
        for span in trace:
            processor.on_end(span)
    processor.shutdown()
    assert len(counting.spans) == sum(map(len, traces))
    return {s.context.span_id: written(s) for s in counting.spans if s.context is not None}


def send_grpc(gateway: Gateway, spans: list[ReadableSpan]) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel:
        trace_service_pb2_grpc.TraceServiceStub(channel).Export(request_of(spans), timeout=5)  # type: ignore[no-untyped-call]


def send_http(gateway: Gateway, spans: list[ReadableSpan], as_json: bool = False) -> None:
    request = request_of(spans)
    body, content_type = (
        (json_format.MessageToJson(request).encode(), "application/json")
        if as_json
        else (request.SerializeToString(), "application/x-protobuf")
    )
    post = urllib.request.Request(
        gateway.http_endpoint + "/v1/traces", data=body, headers={"Content-Type": content_type}, method="POST"
    )
    with urllib.request.urlopen(post, timeout=5) as answer:
        assert answer.status == 200


def test_split_out_of_order_batches_score_as_in_process(gateway: Gateway, otlp_receiver: OtlpReceiver) -> None:
    children_first, root_first, shuffled = recorded_trace(3)
    reference = in_process([children_first, root_first, shuffled])

    # 1. children first (two batches over two transports), the root last in a third batch.
    *children, root = children_first
    send_grpc(gateway, children[:3])
    send_http(gateway, children[3:], as_json=True)
    send_grpc(gateway, [root])
    # 2. the root first, its children after it in two batches, within trace_settle.
    *children, root = root_first
    send_http(gateway, [root])
    send_grpc(gateway, children[::2])
    send_http(gateway, children[1::2])
    # 3. one retrieval, then the root with some children, then the rest.
    send_http(gateway, shuffled[2:3])
    send_grpc(gateway, [shuffled[-1], *shuffled[:2]])
    send_http(gateway, shuffled[3:-1], as_json=True)

    total = sum(map(len, (children_first, root_first, shuffled)))
    spans = otlp_receiver.wait_for_spans(total)
    time.sleep(0.2)
    spans = otlp_receiver.spans()
    assert Counter(s.span_id for s in spans) == Counter(set(reference)), "every span exactly once"
    scored = 0
    for span in spans:
        assert written(span) == reference[span.span_id], span.name
        scored += written(span)[0].get("ragtrace.eval.status") == "scored"
    assert scored == 6, "both retrievals of each of the three traces carry scores"


# ------------------------------------------------------------------ health, SIGTERM, the command


def health(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/healthz", timeout=5) as answer:
        assert answer.status == 200
        data: dict[str, Any] = json.loads(answer.read())
        return data


def test_health_endpoint(gateway: Gateway) -> None:
    data = health(gateway.http_endpoint)
    assert data["status"] == "ok"
    assert {"held_spans", "queue_depth", "open_traces", "settling_roots", "decisions"} <= set(data)


# ------------------------------------------------------------------ edges


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_http_rejects_what_is_not_otlp_traces(gateway: Gateway) -> None:
    url = gateway.http_endpoint
    assert post(url + "/v1/traces", b"\xff\xff not protobuf", {"Content-Type": "application/x-protobuf"})[0] == 400
    assert post(url + "/v1/traces", b"{}", {"Content-Type": "text/plain"})[0] == 415
    assert post(url + "/v1/metrics", b"", {"Content-Type": "application/x-protobuf"})[0] == 404
    status, body = post(url + "/v1/traces", b"{}", {"Content-Type": "application/json"})
    assert (status, json.loads(body)) == (200, {})


def test_spans_without_ids_are_reported_as_rejected(gateway: Gateway, otlp_receiver: OtlpReceiver) -> None:
    (trace,) = recorded_trace(1)
    request = request_of(trace)
    request.resource_spans[0].scope_spans[0].spans[0].trace_id = b"\x00" * 16
    with grpc.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel:
        answer = trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=5)  # type: ignore[no-untyped-call]
    assert answer.partial_success.rejected_spans == 1
    assert len(otlp_receiver.wait_for_spans(len(trace) - 1)) == len(trace) - 1
    assert gateway.health()["rejected_spans"] == 1


def test_settler_is_bounded_and_hands_each_root_on_once() -> None:
    counting = CountingProcessor()
    settler = RootSettler(counting, Sampler(1.0), settle=60.0, max_roots=1)
    (trace,) = recorded_trace(1)
    (other,) = recorded_trace(1)
    *children, root = trace
    settler.on_end(root)
    for span in children:
        settler.on_end(span)
    assert counting.ids() == [s.context.span_id for s in children], "the root waits, children pass"
    settler.on_end(other[-1])  # no room: this root passes at once
    assert settler.overflowed == 1 and settler.waiting == 1
    settler.close()
    settler.close()
    settler.on_end(other[0])  # after close nothing waits
    ids = counting.ids()
    assert Counter(ids) == Counter([s.context.span_id for s in (*trace, other[-1], other[0])])


def post_answer(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    """The status and headers of a POST."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers)


def test_a_next_hop_that_cannot_keep_up_makes_clients_retry_instead_of_losing_spans(
    otlp_receiver: OtlpReceiver,
) -> None:
    # The next hop fails every export until told otherwise: its exporter retries one batch while its queue
    # (200 spans) fills. The gateway must not answer 200 for spans that queue then drops.
    otlp_receiver.fail_next_trace_exports(1_000_000)
    exporting = BatchSpanProcessor(
        GrpcSpanExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True, timeout=60),
        max_queue_size=200, max_export_batch_size=50, schedule_delay_millis=50,
    )
    gw = Gateway(SETTINGS, judge=ScriptedJudge(), exporting=exporting, grpc_port=0, http_port=0, trace_settle=0.1,
                 sampler=Sampler(rate=0.0), tick_interval=0.01).start()
    try:
        accepted: list[int] = []
        refused: list[dict[str, str]] = []
        for (trace,) in (recorded_trace(1) for _ in range(100)):  # 700 spans, 3.5 queues' worth
            status, headers = post_answer(gw.http_endpoint + "/v1/traces", request_of(trace).SerializeToString(),
                                          {"Content-Type": "application/x-protobuf"})
            assert status in (200, 503)
            if status == 503:
                refused.append(headers)
                break
            accepted += [s.context.span_id for s in trace if s.context is not None]
        assert refused and refused[0].get("Retry-After") == "1"
        (trace,) = recorded_trace(1)
        with grpc.insecure_channel(f"127.0.0.1:{gw.grpc_port}") as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.RpcError) as grpc_refusal:
                stub.Export(request_of(trace), timeout=10)
        assert grpc_refusal.value.code() == grpc.StatusCode.UNAVAILABLE
        assert gw.health()["refused_spans"] == 2 * len(trace)

        otlp_receiver.fail_next_trace_exports(0)  # the next hop is back
        otlp_receiver.wait_for_spans(len(accepted), timeout=60)
        assert gw.force_flush(10_000)
        assert Counter(s.span_id for s in otlp_receiver.spans()) == Counter(accepted)  # each accepted span once
    finally:
        gw.shutdown()
