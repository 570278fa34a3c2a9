"""The gateway's OTLP receivers: gRPC `TraceService/Export` and HTTP `POST /v1/traces` (protobuf or JSON).

A receiver only decodes: each request goes to a `TraceSink` (the gateway), which answers it. `GET /healthz`
answers with the sink's health on the OTLP HTTP port, and alone on an optional health port.
"""

from __future__ import annotations

import gzip
import json
import logging
import socket
import threading
import zlib
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

import grpc
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ragtrace.offline.replay import parse_json_line

logger = logging.getLogger("ragtrace.gateway.server")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"


class TraceSink(Protocol):
    """What the receivers hand requests to."""

    @property
    def closing(self) -> bool: ...

    def export(self, request: ExportTraceServiceRequest) -> ExportTraceServiceResponse: ...

    def health(self) -> dict[str, Any]: ...


def url_host(host: str) -> str:
    """`host` as it stands in a URL or a gRPC address: an IPv6 literal such as ::1 in brackets."""
    return f"[{host}]" if ":" in host else host


# ------------------------------------------------------------------------------------------------ gRPC


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self, sink: TraceSink) -> None:
        self._sink = sink

    def Export(self, request: ExportTraceServiceRequest, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        return self._sink.export(request)


class GrpcReceiver:
    """OTLP/gRPC on `host:port` (0 picks a free port); bound on construction, serving after `start`."""

    def __init__(self, sink: TraceSink, host: str, port: int, workers: int = 8) -> None:
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ragtrace-grpc"),
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(sink), self._server)  # type: ignore[no-untyped-call]
        address = f"{url_host(host)}:{port}"
        self.port: int = self._server.add_insecure_port(address)
        if not self.port:
            raise OSError(f"cannot bind OTLP gRPC to {address}")

    def start(self) -> None:
        self._server.start()

    def stop(self, grace: float) -> None:
        """In-flight requests finish within `grace` seconds."""
        self._server.stop(grace).wait(grace + 1)


# ------------------------------------------------------------------------------------------------ HTTP


def _decode(raw: bytes, content_type: str, encoding: str) -> ExportTraceServiceRequest:
    """An OTLP/HTTP body as a request; ValueError (or a decoder's own error) when it is not one."""
    if encoding == "gzip":
        raw = gzip.decompress(raw)
    elif encoding == "deflate":
        raw = zlib.decompress(raw)
    elif encoding not in ("", "identity"):
        raise ValueError(f"unsupported content encoding {encoding!r}")
    if content_type == _JSON:
        return parse_json_line(raw.decode("utf-8"))
    request = ExportTraceServiceRequest()
    request.ParseFromString(raw)
    return request


def _handler(sink: TraceSink, otlp: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "ragtrace-gateway"

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("http: " + format, *args)

        def _reply(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] in ("/healthz", "/health", "/"):
                health = sink.health()
                code = 200 if health["status"] == "ok" else 503
                self._reply(code, json.dumps(health).encode(), _JSON)
            else:
                self._reply(404, b"not found", "text/plain")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if not otlp or self.path.split("?", 1)[0] != "/v1/traces":
                self.rfile.read(length)
                self._reply(404, b"not found: this gateway accepts traces at /v1/traces", "text/plain")
                return
            if length > MAX_MESSAGE_BYTES:
                self._reply(413, b"request too large", "text/plain")
                self.close_connection = True
                return
            raw = self.rfile.read(length)
            content_type = (self.headers.get("Content-Type") or _PROTOBUF).split(";")[0].strip().lower()
            if content_type not in (_PROTOBUF, _JSON):
                self._reply(415, f"unsupported content type {content_type!r}".encode(), "text/plain")
                return
            encoding = (self.headers.get("Content-Encoding") or "").strip().lower()
            try:
                request = _decode(raw, content_type, encoding)
            except (OSError, EOFError, zlib.error, DecodeError, json_format.ParseError, ValueError) as exc:
                self._reply(400, f"bad OTLP request: {exc}".encode(), "text/plain")
                return
            if sink.closing:
                self._reply(503, b"shutting down", "text/plain")
                return
            response = sink.export(request)
            if content_type == _JSON:
                self._reply(200, json_format.MessageToJson(response).encode(), _JSON)
            else:
                self._reply(200, response.SerializeToString(), _PROTOBUF)

    return Handler


class _V6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class HttpReceiver:
    """OTLP/HTTP and `GET /healthz` on `host:port` (`otlp=False`: health only); bound on construction."""

    def __init__(self, sink: TraceSink, host: str, port: int, *, otlp: bool = True) -> None:
        server_class = _V6Server if ":" in host else ThreadingHTTPServer
        self._server = server_class((host, port), _handler(sink, otlp))
        self._server.daemon_threads = True
        self._name = "ragtrace-http" if otlp else "ragtrace-health"
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.1,), name=self._name, daemon=True)
        self._thread.start()

    def stop(self, grace: float) -> None:
        """Stop serving and close the socket; the serving thread gets `grace` seconds to end."""
        if self._thread is not None:  # shutdown() waits for serve_forever: it would hang on a server never started
            self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(grace)


__all__ = ["MAX_MESSAGE_BYTES", "GrpcReceiver", "HttpReceiver", "TraceSink", "url_host"]
