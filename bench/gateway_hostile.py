"""Hostile clients beside valid traffic: does `ragtrace serve` lose valid spans, and how much memory does it take?

Runs `ragtrace serve` as a child process (sample rate 0: pure receive-and-forward, so the figures are the
receivers' own) forwarding over gRPC to a counting sink in this process, all on 127.0.0.1. Two phases,
each with a fresh gateway:

- `valid_only`: valid OTLP requests (100 spans each, unique ids) over gRPC and HTTP from several threads;
- `hostile`: the same valid traffic, while other threads send a bounded hostile mix: gzip bombs (a ~1 MiB
  body inflating to 1 GiB), `Content-Length: -1` followed by a stream, a Content-Length larger than the
  body, a Content-Length of 1 GiB, malformed OTLP/JSON (`"spans": 7`, 100 000-deep nesting), requests whose
  100 spans include one with a 17-byte trace id (its 99 valid spans count as valid traffic), and 300 idle
  connections on each port (slowloris).

Valid senders behave like OTLP exporters: they retry on 503 / RESOURCE_EXHAUSTED / UNAVAILABLE with a
backoff (at most 6 tries). Printed JSON per phase: valid spans sent, arrived at the sink and lost, hostile
requests by answer, the gateway's peak RSS (VmHWM) and its RSS at start; `peak_rss_ratio` compares the
hostile phase's peak with the valid-only phase's. Target: 0 valid spans lost, peak RSS under
`--rss-bound-mib` (default 1024, with the default 64 MiB body limit and 8 requests decoded at once).

    python bench/gateway_hostile.py            # ~1 minute
    python bench/gateway_hostile.py --quick    # fewer requests, 100 idle connections
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

ROOT = Path(__file__).resolve().parents[1]
SPANS_PER_REQUEST = 100
RETRYABLE_GRPC = (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE)


class Sink(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    """The next hop: remembers every (trace id, span id) that arrived."""

    def __init__(self) -> None:
        self.ids: set[bytes] = set()
        self.lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:
        arrived = {s.trace_id + s.span_id for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans}
        with self.lock:
            self.ids |= arrived
        return trace_service_pb2.ExportTraceServiceResponse()


def valid_request(broken: bool = False) -> tuple[ExportTraceServiceRequest, set[bytes]]:
    """100 spans with random ids; `broken`: the first gets a 17-byte trace id. Returns the valid ids too."""
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    request.resource_spans[0].resource.attributes.add(key="service.name").value.string_value = "bench"
    now = time.time_ns()
    valid = set()
    for i in range(SPANS_PER_REQUEST):
        span = scope.spans.add(
            trace_id=os.urandom(16), span_id=os.urandom(8), name=f"op-{i}", kind=1,
            start_time_unix_nano=now, end_time_unix_nano=now + 1000,
        )
        if broken and i == 0:
            span.trace_id = b"\x01" * 17
        else:
            valid.add(span.trace_id + span.span_id)
    return request, valid


# ------------------------------------------------------------------ gateway process


def start_gateway(sink_port: int) -> tuple[subprocess.Popen[str], int, int]:
    env = {**os.environ, "RAGTRACE_SAMPLE_RATE": "0", "RAGTRACE_DRIFT": "false", "OTEL_METRICS_EXPORTER": "none"}
    command = [
        sys.executable, "-m", "ragtrace", "serve", "--judge", "local", "--grpc-port", "0", "--http-port", "0",
        "--exporter-endpoint", f"http://127.0.0.1:{sink_port}", "--trace-settle", "0", "--log-level", "WARNING",
    ]
    process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("ragtrace serve: listening"):
        process.kill()
        raise RuntimeError(f"the gateway did not start: {line!r}")
    ports = dict(part.split("=", 1) for part in line.split()[3:6])
    return process, int(ports["grpc"]), int(ports["http"])


def rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


# ------------------------------------------------------------------ valid senders


def send_grpc(port: int, request: ExportTraceServiceRequest) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
        for attempt in range(6):
            try:
                stub.Export(request, timeout=15)
                return True
            except grpc.RpcError as error:
                if error.code() not in RETRYABLE_GRPC:
                    return False
                time.sleep(0.2 * 2**attempt)
    return False


def post(port: int, body: bytes, headers: dict[str, str], timeout: float = 15) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", "/v1/traces", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    except OSError:
        return 0
    finally:
        connection.close()


def send_http(port: int, request: ExportTraceServiceRequest) -> bool:
    body = request.SerializeToString()
    for attempt in range(6):
        status = post(port, body, {"Content-Type": "application/x-protobuf"})
        if status == 200:
            return True
        if status not in (0, 503):
            return False
        time.sleep(0.2 * 2**attempt)
    return False


def valid_traffic(grpc_port: int, http_port: int, requests: int, broken_every: int) -> tuple[set[bytes], int]:
    """Send `requests` valid requests (every `broken_every`-th with one broken span) from 4 threads."""
    sent: set[bytes] = set()
    failed = 0
    lock = threading.Lock()

    def one(i: int) -> None:
        nonlocal failed
        request, valid = valid_request(broken=broken_every > 0 and i % broken_every == 0)
        ok = send_grpc(grpc_port, request) if i % 2 else send_http(http_port, request)
        with lock:
            if ok:
                sent.update(valid)
            else:
                failed += 1

    with futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(requests)))
    return sent, failed


# ------------------------------------------------------------------ hostile senders


def gzip_bomb(inflated_mib: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b"\0" * (1 << 20)
    return b"".join([*(compressor.compress(zeros) for _ in range(inflated_mib)), compressor.flush()])


def raw(port: int, data: bytes, stream: bytes = b"", stream_bytes: int = 0, timeout: float = 30) -> int:
    """Send raw bytes (then up to `stream_bytes` more) and return the HTTP status answered, 0 for none."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
            connection.sendall(data)
            sent = 0
            connection.settimeout(0.05)
            answer = b""
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    answer = connection.recv(4096)
                    break
                except TimeoutError:
                    if stream and sent < stream_bytes:
                        try:
                            connection.sendall(stream)
                            sent += len(stream)
                        except OSError:
                            pass
            return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0
    except OSError:
        return 0


HEAD = b"POST /v1/traces HTTP/1.1\r\nHost: gw\r\nContent-Type: application/x-protobuf\r\n"


def slowloris(ports: tuple[int, ...], count: int) -> list[socket.socket]:
    """`count` connections per port that stay open: half silent, half stuck in the middle of their headers."""
    held = []
    for port in ports:
        for i in range(count):
            try:
                connection = socket.create_connection(("127.0.0.1", port), timeout=5)
                if i % 2:
                    connection.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: gw\r\nX-Slow: ")
                held.append(connection)
            except OSError:
                pass
    return held


def hostile_traffic(http_port: int, grpc_port: int, rounds: int, bomb: bytes) -> Counter[str]:
    answers: Counter[str] = Counter()
    lock = threading.Lock()

    def note(kind: str, status: int | str) -> None:
        with lock:
            answers[f"{kind}:{status}"] += 1

    def bomb_once(_: int) -> None:
        note("gzip_bomb", post(http_port, bomb, {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}))

    def negative_length(_: int) -> None:
        note("content_length_-1", raw(http_port, HEAD + b"Content-Length: -1\r\n\r\n", b"x" * 65536, 64 << 20))

    def lying_length(_: int) -> None:
        note("content_length_lies", raw(http_port, HEAD + b"Content-Length: 100000\r\n\r\nshort"))

    def huge_length(_: int) -> None:
        note("content_length_1GiB", raw(http_port, HEAD + b"Content-Length: 1073741824\r\n\r\n"))

    def malformed(i: int) -> None:
        body = b'{"resourceSpans": [{"scopeSpans": [{"spans": 7}]}]}' if i % 2 else b"[" * 100_000 + b"]" * 100_000
        note("malformed_json", post(http_port, body, {"Content-Type": "application/json"}))

    def grpc_bomb(_: int) -> None:
        request, _ = valid_request()
        request.resource_spans[0].scope_spans[0].spans[0].name = "x" * (80 << 20)  # over the 64 MiB limit
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}", compression=grpc.Compression.Gzip) as channel:
            try:
                trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=30)  # type: ignore[no-untyped-call]
                note("grpc_oversized", "OK")
            except grpc.RpcError as error:
                note("grpc_oversized", error.code().name)

    jobs = [bomb_once, negative_length, lying_length, huge_length, malformed, malformed, grpc_bomb]
    with futures.ThreadPoolExecutor(6) as pool:
        runs = [pool.submit(job, i) for i in range(rounds) for job in jobs]
        for run in runs:
            run.result()
    return answers


# ------------------------------------------------------------------ phases


def phase(name: str, args: argparse.Namespace, bomb: bytes | None) -> dict[str, Any]:
    sink = Sink()
    server = grpc.server(futures.ThreadPoolExecutor(4), options=[("grpc.max_receive_message_length", 256 << 20)])
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)  # type: ignore[no-untyped-call]
    sink_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    gateway, grpc_port, http_port = start_gateway(sink_port)
    try:
        time.sleep(1.0)
        rss_start = rss_kib(gateway.pid, "VmRSS")
        started = time.monotonic()
        hostile: Counter[str] = Counter()
        held: list[socket.socket] = []
        if bomb is not None:
            # The idle connections are open before valid traffic starts and stay open until it is done.
            held = slowloris((http_port, grpc_port), args.idle)
            hostile["slowloris_connections_held"] = len(held)
            attack = futures.ThreadPoolExecutor(1)
            attacked = attack.submit(hostile_traffic, http_port, grpc_port, args.rounds, bomb)
        sent, failed = valid_traffic(grpc_port, http_port, args.requests, broken_every=5 if bomb is not None else 0)
        if bomb is not None:
            hostile.update(attacked.result())
            attack.shutdown()
            for connection in held:
                connection.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not sent <= sink.ids:
            time.sleep(0.1)
        elapsed = time.monotonic() - started
        peak = rss_kib(gateway.pid, "VmHWM")
        alive = gateway.poll() is None
    finally:
        gateway.terminate()
        try:
            gateway.wait(30)
        except subprocess.TimeoutExpired:
            gateway.kill()
        server.stop(1)
    lost = len(sent - sink.ids)
    return {
        "phase": name,
        "valid_requests": args.requests,
        "valid_requests_failed": failed,
        "valid_spans_sent": len(sent),
        "valid_spans_arrived": len(sent & sink.ids),
        "valid_spans_lost": lost,
        "hostile_answers": dict(sorted(hostile.items())),
        "gateway_alive": alive,
        "rss_start_mib": round(rss_start / 1024, 1),
        "peak_rss_mib": round(peak / 1024, 1),
        "seconds": round(elapsed, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rss-bound-mib", type=float, default=1024.0)
    args = parser.parse_args()
    args.requests = 100 if args.quick else 300
    args.rounds = 2 if args.quick else 4
    args.idle = 100 if args.quick else 300
    bomb = gzip_bomb(1024)  # 1 GiB of zeros
    baseline = phase("valid_only", args, None)
    hostile = phase("hostile", args, bomb)
    result = {
        "bench": "gateway_hostile",
        "gzip_bomb_bytes": len(bomb),
        "phases": [baseline, hostile],
        "peak_rss_ratio": round(hostile["peak_rss_mib"] / max(baseline["peak_rss_mib"], 1e-9), 2),
        "rss_bound_mib": args.rss_bound_mib,
        "target_met": hostile["valid_spans_lost"] == 0 and baseline["valid_spans_lost"] == 0
        and hostile["peak_rss_mib"] < args.rss_bound_mib and hostile["gateway_alive"],
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
