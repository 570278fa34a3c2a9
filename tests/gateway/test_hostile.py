"""The gateway against hostile or broken clients, over real sockets: bombs, lying lengths, malformed OTLP,
invalid ids, idle connections. Each answer is quick and clear, memory and threads stay bounded, and the
valid spans of the same request or of other clients still reach the next hop."""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import socket
import threading
import time
import zlib
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ragtrace.gateway import Gateway, request_of
from ragtrace.gateway.convert import received_spans
from ragtrace.gateway.receivers import BadRequest, ReceiverLimits, decode_request
from tests.gateway.test_gateway import make_gateway, post, recorded_trace
from tests.servers.otlp import OtlpReceiver

LIMITS = ReceiverLimits(
    max_request_bytes=1 << 20, max_connections=8, max_concurrent_requests=4,
    idle_timeout=1.0, read_timeout=0.5, body_timeout=2.0,
)


def hardened_gateway(receiver: OtlpReceiver, limits: ReceiverLimits) -> Gateway:
    return make_gateway(receiver, trace_settle=0.1, limits=limits)


@pytest.fixture
def gateway(otlp_receiver: OtlpReceiver) -> Iterator[Gateway]:
    gw = hardened_gateway(otlp_receiver, LIMITS)
    yield gw
    gw.shutdown()


def traces_url(gateway: Gateway) -> str:
    return gateway.http_endpoint + "/v1/traces"


def raw_exchange(port: int, data: bytes, *, keep_sending: bytes = b"", timeout: float = 10.0) -> tuple[bytes, float]:
    """Send `data` (then `keep_sending` until the server answers or closes); the answer and how long it took."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
        connection.sendall(data)
        if keep_sending:
            connection.setblocking(False)
            answer = b""
            while time.monotonic() - started < timeout:
                with contextlib.suppress(OSError):  # the server may have closed its side already
                    connection.send(keep_sending)
                try:
                    answer = connection.recv(4096)
                    break
                except BlockingIOError:
                    time.sleep(0.01)
            connection.setblocking(True)
            connection.settimeout(max(0.1, timeout - (time.monotonic() - started)))
            return answer + _rest(connection), time.monotonic() - started
        return _rest(connection), time.monotonic() - started


def _rest(connection: socket.socket) -> bytes:
    """Everything until the server closes: headers and body may come in separate segments."""
    out = b""
    with contextlib.suppress(OSError):
        while chunk := connection.recv(4096):
            out += chunk
    return out


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0


def a_valid_request_still_works(gateway: Gateway, otlp_receiver: OtlpReceiver) -> None:
    (trace,) = recorded_trace(1)
    before = len(otlp_receiver.spans())
    status, _ = post(traces_url(gateway), request_of(trace).SerializeToString(),
                     {"Content-Type": "application/x-protobuf"})
    assert status == 200
    assert len(otlp_receiver.wait_for_spans(before + len(trace))) >= before + len(trace)


# ------------------------------------------------------------------ bodies


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compression_bomb_is_refused_before_it_inflates(
    encoding: str, gateway: Gateway, otlp_receiver: OtlpReceiver
) -> None:
    inflated = b"\0" * (64 << 20)  # 64 MiB of zeros: ~64 KiB compressed, far over the 1 MiB limit
    body = gzip.compress(inflated, 1) if encoding == "gzip" else zlib.compress(inflated, 1)
    del inflated
    assert len(body) < LIMITS.max_request_bytes
    status, message = post(traces_url(gateway), body,
                           {"Content-Type": "application/x-protobuf", "Content-Encoding": encoding})
    assert status == 413 and b"inflates to more than" in message
    a_valid_request_still_works(gateway, otlp_receiver)


def test_a_small_compressed_request_is_accepted(gateway: Gateway, otlp_receiver: OtlpReceiver) -> None:
    (trace,) = recorded_trace(1)
    body = gzip.compress(request_of(trace).SerializeToString())
    status, _ = post(traces_url(gateway), body, {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
    assert status == 200
    assert len(otlp_receiver.wait_for_spans(len(trace))) == len(trace)


HEAD = b"POST /v1/traces HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/x-protobuf\r\n"


def test_a_missing_content_length_is_refused(gateway: Gateway) -> None:
    answer, _ = raw_exchange(gateway.http_port or 0, HEAD + b"\r\n")
    assert status_of(answer) == 411


def test_a_chunked_body_is_refused(gateway: Gateway) -> None:
    answer, _ = raw_exchange(gateway.http_port or 0, HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
    assert status_of(answer) == 411


def test_a_negative_content_length_is_refused_without_reading_the_stream(gateway: Gateway) -> None:
    """The issue's probe: `Content-Length: -1`, then data streamed without end."""
    answer, took = raw_exchange(
        gateway.http_port or 0, HEAD + b"Content-Length: -1\r\n\r\n", keep_sending=b"x" * 65536, timeout=10
    )
    assert status_of(answer) == 400 and b"negative" in answer
    assert took < 5


def test_an_oversized_content_length_is_refused_at_once(gateway: Gateway) -> None:
    answer, took = raw_exchange(gateway.http_port or 0, HEAD + b"Content-Length: 1073741824\r\n\r\n")
    assert status_of(answer) == 413 and took < 5


def test_a_content_length_longer_than_the_body_times_out(gateway: Gateway, otlp_receiver: OtlpReceiver) -> None:
    """The issue's probe waited forever: the read timeout answers 408 and frees the connection."""
    answer, took = raw_exchange(gateway.http_port or 0, HEAD + b"Content-Length: 1000\r\n\r\nonly this")
    assert status_of(answer) == 408
    assert took < 5
    a_valid_request_still_works(gateway, otlp_receiver)


# ------------------------------------------------------------------ malformed OTLP/JSON


@pytest.mark.parametrize(
    "body",
    [
        b'{"resourceSpans": [{"scopeSpans": [{"spans": 7}]}]}',
        b'{"resourceSpans": 7}',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 5}]}]}]}',
        b"[1, 2]",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
        b"not json at all",
        b"\xff\xfe",
        b"[" + b"{}," * 300_000 + b"{}]",  # 0.9 MB that json.loads would turn into ~20 MB of dicts
    ],
    ids=[
        "spans-int", "resource-spans-int", "name-int", "list", "deep-array", "deep-object", "text", "not-utf8",
        "dense",
    ],
)
def test_malformed_json_is_a_400_with_a_message(body: bytes, gateway: Gateway) -> None:
    status, message = post(traces_url(gateway), body, {"Content-Type": "application/json"})
    assert status == 400, message
    assert message.startswith(b"bad OTLP request: ") and len(message) > len(b"bad OTLP request: ")


def test_a_large_realistic_json_request_passes_the_density_check(gateway: Gateway, otlp_receiver: OtlpReceiver) -> None:
    traces = recorded_trace(30)
    spans = [span for trace in traces for span in trace]
    body = json_format.MessageToJson(request_of(spans)).encode()
    assert len(body) > 64 * 1024, "over the size below which density is not checked"
    status, message = post(traces_url(gateway), body, {"Content-Type": "application/json"})
    assert status == 200, message
    assert len(otlp_receiver.wait_for_spans(len(spans), timeout=10)) == len(spans)


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["resourceSpans", "scopeSpans", "spans", "traceId", "spanId", "parentSpanId", "links",
                         "name", "attributes", "key", "value", "stringValue", "x"]),
        children, max_size=4,
    ),
    max_leaves=30,
))
@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_json_document_decodes_or_is_a_bad_request(document: object) -> None:
    body = json.dumps(document).encode()
    try:
        decode_request(body, "application/json", "", 1 << 20)
    except BadRequest as refused:
        assert refused.status == 400 and str(refused)


@given(st.binary(max_size=300), st.sampled_from(["", "gzip", "deflate"]))
@hypothesis_settings(max_examples=300, deadline=None)
def test_any_protobuf_body_decodes_or_is_a_bad_request(body: bytes, encoding: str) -> None:
    """And what decodes converts to spans the SDK's encoder can write (a span it cannot write would fail
    the whole export batch)."""
    try:
        request = decode_request(body, "application/x-protobuf", encoding, 1 << 20)
    except BadRequest as refused:
        assert refused.status in (400, 413) and str(refused)
        return
    encode_spans(list(received_spans(request))).SerializeToString()


# ------------------------------------------------------------------ invalid ids reject only their spans


def test_invalid_ids_reject_only_their_spans(gateway: Gateway, otlp_receiver: OtlpReceiver) -> None:
    """A 17-byte trace id, a 9-byte span id and a 9-byte parent id among valid spans: those three are
    rejected through partial success; every other span of the request arrives (counted at the receiver),
    and so do another client's spans sent just after."""
    traces = recorded_trace(20)
    request = request_of([span for trace in traces for span in trace])
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].trace_id = b"\x01" * 17
    spans[1].span_id = b"\x02" * 9
    spans[2].parent_span_id = b"\x03" * 9
    total = len(spans)
    with grpc.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel:
        answer = trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=10)  # type: ignore[no-untyped-call]
    assert answer.partial_success.rejected_spans == 3
    assert "valid" in answer.partial_success.error_message
    (other,) = recorded_trace(1)
    status, _ = post(traces_url(gateway), request_of(other).SerializeToString(),
                     {"Content-Type": "application/x-protobuf"})
    assert status == 200
    arrived = otlp_receiver.wait_for_spans(total - 3 + len(other), timeout=10)
    time.sleep(0.3)
    assert len(otlp_receiver.spans()) == len(arrived) == total - 3 + len(other)
    assert gateway.health()["rejected_spans"] == 3


def test_a_non_hex_json_id_rejects_only_its_span(gateway: Gateway, otlp_receiver: OtlpReceiver) -> None:
    (trace,) = recorded_trace(1)
    document = json.loads(json_format.MessageToJson(request_of(trace)))
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    for span in spans:  # OTLP/JSON writes ids as hex
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in span:
                span[key] = base64.b64decode(span[key]).hex()
    spans[0]["traceId"] = "z" * 32
    spans[1]["spanId"] = 12345
    status, body = post(traces_url(gateway), json.dumps(document).encode(), {"Content-Type": "application/json"})
    assert status == 200
    assert json.loads(body)["partialSuccess"]["rejectedSpans"] == "2"
    assert len(otlp_receiver.wait_for_spans(len(trace) - 2, timeout=10)) == len(trace) - 2


# ------------------------------------------------------------------ connections


def test_idle_connections_are_closed_after_the_idle_timeout(gateway: Gateway) -> None:
    idle = [socket.create_connection(("127.0.0.1", gateway.http_port or 0), timeout=5) for _ in range(3)]
    try:
        started = time.monotonic()
        assert all(connection.recv(4096) == b"" for connection in idle)
        assert LIMITS.idle_timeout - 0.2 < time.monotonic() - started < LIMITS.idle_timeout + 3
    finally:
        for connection in idle:
            connection.close()


def still_open(connection: socket.socket) -> bool:
    connection.settimeout(0.2)
    try:
        return connection.recv(4096) != b""
    except TimeoutError:
        return True
    except ConnectionError:
        return False


def connection_threads() -> int:
    """Threads serving a connection (socketserver names each after `process_request_thread`)."""
    return sum("process_request_thread" in thread.name for thread in threading.enumerate())


def test_slowloris_costs_bounded_threads_and_never_locks_valid_clients_out(otlp_receiver: OtlpReceiver) -> None:
    """40 idle connections against 8 slots: at most 8 threads; each newcomer closes the connection idle
    longest, so a valid client gets in at once (long before the idle timeout) and its spans arrive."""
    limits = ReceiverLimits(max_connections=8, idle_timeout=60.0, read_timeout=5.0)
    gateway = hardened_gateway(otlp_receiver, limits)
    idle = []
    try:
        for _ in range(40):
            idle.append(socket.create_connection(("127.0.0.1", gateway.http_port or 0), timeout=5))
            time.sleep(0.01)  # arrival order is age order
        time.sleep(0.3)
        # The receiver's own connection threads, not the process's: another test's thread may still be
        # ending. A closed connection's thread gives its slot back just before it exits, so one may
        # linger a moment beside its successor; a leak would stay.
        settled = time.monotonic() + 2.0
        while connection_threads() > limits.max_connections and time.monotonic() < settled:
            time.sleep(0.05)
        assert 0 < connection_threads() <= limits.max_connections  # 0: the threads are named otherwise
        assert [still_open(connection) for connection in idle] == [False] * 32 + [True] * 8
        started = time.monotonic()
        a_valid_request_still_works(gateway, otlp_receiver)
        assert time.monotonic() - started < 10, "no wait for the idle timeout"
    finally:
        for connection in idle:
            connection.close()
        gateway.shutdown()


def test_when_every_slot_is_busy_with_a_request_a_newcomer_gets_503(otlp_receiver: OtlpReceiver) -> None:
    limits = ReceiverLimits(max_connections=4, idle_timeout=60.0, read_timeout=10.0)
    gateway = hardened_gateway(otlp_receiver, limits)
    busy = []
    try:
        for _ in range(4):  # headers complete, body still coming: busy, not idle
            connection = socket.create_connection(("127.0.0.1", gateway.http_port or 0), timeout=5)
            connection.sendall(HEAD + b"Content-Length: 1000\r\n\r\npartial")
            busy.append(connection)
        time.sleep(0.3)
        answer, took = raw_exchange(gateway.http_port or 0, HEAD + b"Content-Length: 0\r\n\r\n")
        assert status_of(answer) == 503 and took < 5
        assert all(still_open(connection) for connection in busy)
    finally:
        for connection in busy:
            connection.close()
        gateway.shutdown()


def test_grpc_drops_a_connection_that_never_speaks_http2(gateway: Gateway) -> None:
    with socket.create_connection(("127.0.0.1", gateway.grpc_port or 0), timeout=10) as connection:
        started = time.monotonic()
        try:
            data = connection.recv(4096)
            while data:  # the server's HTTP/2 settings frame, then the close
                data = connection.recv(4096)
        except ConnectionResetError:
            pass
        assert time.monotonic() - started < LIMITS.read_timeout + 5


def test_grpc_refuses_a_message_over_the_limit(gateway: Gateway) -> None:
    traces = recorded_trace(1)
    request = request_of(traces[0])
    request.resource_spans[0].scope_spans[0].spans[0].name = "x" * (2 << 20)
    address = f"127.0.0.1:{gateway.grpc_port}"
    with grpc.insecure_channel(address, compression=grpc.Compression.Gzip) as channel, pytest.raises(
        grpc.RpcError
    ) as refused:
        trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=10)  # type: ignore[no-untyped-call]
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


ids = st.one_of(st.binary(max_size=20), st.sampled_from([b"", b"\0" * 16, b"\0" * 8]))


@given(st.lists(st.tuples(ids, ids, ids, ids), min_size=1, max_size=8))
@hypothesis_settings(max_examples=200, deadline=None)
def test_spans_with_any_ids_convert_to_spans_the_encoder_writes(spans: list[tuple[bytes, ...]]) -> None:
    """Any trace, span, parent and link id bytes: a span either converts to one the SDK's encoder writes,
    or is left out (and counted by the gateway as rejected)."""
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for trace_id, span_id, parent_id, link_id in spans:
        span = scope.spans.add(trace_id=trace_id, span_id=span_id, parent_span_id=parent_id, name="s")
        span.links.add(trace_id=trace_id, span_id=link_id)
    converted = list(received_spans(request))
    assert len(converted) <= len(spans)
    encode_spans(converted).SerializeToString()
