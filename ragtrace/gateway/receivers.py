"""The gateway's OTLP receivers: gRPC `TraceService/Export` and HTTP `POST /v1/traces` (protobuf or JSON).

A receiver only decodes: each request goes to a `TraceSink` (the gateway), which answers it. `GET /healthz`
answers with the sink's health on the OTLP HTTP port, and alone on an optional health port.

Both receivers assume hostile clients (`ReceiverLimits`): a body is limited on the wire and after
decompression (inflated as a stream, never past the limit), every read has a timeout and a body a deadline,
idle connections are closed, and open connections and requests in progress are capped, so memory and
threads stay bounded whatever a client sends. `ReceiverSecurity` adds TLS and a required header.
"""

from __future__ import annotations

import contextlib
import errno
import json
import socket
import ssl
import threading
import time
import zlib
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Protocol

import grpc
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ragtrace import _checks as checks
from ragtrace._logs import ragtrace_logger
from ragtrace.gateway.security import ReceiverSecurity
from ragtrace.otlp import parse_json_line

logger = ragtrace_logger("ragtrace.gateway.server")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
_CHUNK = 64 * 1024
_GRPC_CONNECTIONS_PER_SLOT = 4
# A refused request's body up to this size is read and dropped before the answer: closing on unread data
# makes the kernel reset the connection, and the client then sees the reset instead of the 401 or 404.
_DRAIN_BYTES = 1024 * 1024
# After an answer, what a client still sends is read and dropped for this long, up to this much, before the
# socket closes (a lingering close): closing with unread data makes the kernel reset the connection, and
# the client can lose the answer it was already sent.
_LINGER_SECONDS = 2.0
_LINGER_BYTES = 1024 * 1024
# Parsed JSON costs ~70 bytes per object or array: `[{},{},...]` turns 64 MiB into 1.5 GiB. OTLP/JSON has
# one `{` or `[` per ~35 bytes, so a body denser than one per 8 bytes is refused before it is parsed
# (small bodies cannot cost much and are not counted).
_JSON_BYTES_PER_CONTAINER = 8
_JSON_DENSITY_FLOOR = 64 * 1024


@dataclass(frozen=True)
class ReceiverLimits:
    """What one client, or many, can cost the gateway.

    max_request_bytes: a request body on the wire and after decompression (gRPC: a message).
    max_connections: open HTTP connections per port, one thread each; when all are taken the connection
        idle longest is closed, and only when none is idle is a new one answered 503. gRPC: 4 times as many.
    max_concurrent_requests: HTTP requests read, decoded and handed on at once; each holds at most twice
        `max_request_bytes` while it is decoded, so this bounds the memory of request bodies. gRPC: calls in
        progress or queued, twice this (or twice the workers), beyond that RESOURCE_EXHAUSTED.
    idle_timeout: seconds a connection may wait between requests before it is closed.
    read_timeout: seconds a request may send nothing (headers, body, TLS handshake) before it is dropped.
    body_timeout: seconds a whole request body may take to arrive.
    """

    max_request_bytes: int = MAX_MESSAGE_BYTES
    max_connections: int = 256
    max_concurrent_requests: int = 8
    idle_timeout: float = 60.0
    read_timeout: float = 10.0
    body_timeout: float = 60.0

    def __post_init__(self) -> None:
        checks.counts(self, "max_request_bytes", "max_connections", "max_concurrent_requests")
        checks.positive(self, "idle_timeout", "read_timeout", "body_timeout", unit=" seconds")


class BadRequest(ValueError):
    """A request refused with an HTTP status and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class RetryLater(Exception):
    """A request the gateway cannot take now without dropping spans (its next hop's queue is full):
    HTTP 503 with Retry-After, gRPC UNAVAILABLE, both of which OTLP exporters retry."""


class TraceSink(Protocol):
    """What the receivers hand requests to; `export` raises `RetryLater` for a request to send again."""

    @property
    def closing(self) -> bool: ...

    def export(self, request: ExportTraceServiceRequest) -> ExportTraceServiceResponse: ...

    def health(self) -> dict[str, Any]: ...


def url_host(host: str) -> str:
    """`host` as it stands in a URL or a gRPC address: an IPv6 literal such as ::1 in brackets."""
    return f"[{host}]" if ":" in host else host


class CannotListen(OSError):
    """A port the gateway cannot bind; `what` names the transport ("OTLP gRPC", "OTLP HTTP", "health checks")."""

    def __init__(self, what: str, host: str, port: int, cause: OSError) -> None:
        taken = cause.errno == errno.EADDRINUSE
        reason = f"port {port} is already in use" if taken else cause.strerror or str(cause)
        super().__init__(cause.errno, f"cannot listen for {what} on {url_host(host)}:{port}: {reason}")
        self.what = what
        self.port = port
        self.taken = taken


def _cannot_bind(what: str, host: str, port: int, cause: OSError) -> CannotListen:
    return CannotListen(what, host, port, cause)


def _bind_error(host: str, port: int) -> OSError | None:
    """Why `host:port` cannot be bound, found by binding it as a server would (SO_REUSEADDR: a port whose
    last connections are in TIME_WAIT is free); None when it can be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        return exc
    return None


# ------------------------------------------------------------------------------------------------ gRPC


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self, sink: TraceSink) -> None:
        self._sink = sink

    def Export(self, request: ExportTraceServiceRequest, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        try:
            return self._sink.export(request)
        except RetryLater as busy:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(busy))
            raise  # not reached: abort raises


class GrpcReceiver:
    """OTLP/gRPC on `host:port` (0 picks a free port); bound on construction, serving after `start`."""

    def __init__(
        self,
        sink: TraceSink,
        host: str,
        port: int,
        workers: int = 8,
        *,
        limits: ReceiverLimits | None = None,
        security: ReceiverSecurity | None = None,
    ) -> None:
        limits = limits or ReceiverLimits()
        security = security or ReceiverSecurity()
        options = [
            ("grpc.max_receive_message_length", limits.max_request_bytes),  # also bounds what gzip inflates to
            # gRPC sets SO_REUSEPORT by default, so a second server on a taken port starts silently and the
            # kernel splits the traffic between them: off, a taken port is an error.
            ("grpc.so_reuseport", 0),
            # A gRPC connection costs no thread, and gRPC cannot close idle ones to make room: a higher cap.
            ("grpc.max_allowed_incoming_connections", _GRPC_CONNECTIONS_PER_SLOT * limits.max_connections),
            ("grpc.max_concurrent_streams", limits.max_concurrent_requests),
            ("grpc.max_connection_idle_ms", int(limits.idle_timeout * 1000)),
            ("grpc.server_handshake_timeout_ms", int(limits.read_timeout * 1000)),
        ]
        # gRPC serves connections on its own pollers (no thread each); calls beyond the cap are refused
        # with RESOURCE_EXHAUSTED, which OTLP exporters retry.
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ragtrace-grpc"),
            options=options,
            interceptors=security.grpc_interceptors(),
            # Queued calls hold their decoded message too; twice the workers lets a collector's usual
            # 10 parallel exports through without a retry.
            maximum_concurrent_rpcs=2 * max(workers, limits.max_concurrent_requests),
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(sink), self._server)  # type: ignore[no-untyped-call]
        address = f"{url_host(host)}:{port}"
        # A taken port is found before gRPC tries it: gRPC would print its own raw error line to stderr.
        if port and (taken := _bind_error(host, port)) is not None:
            raise _cannot_bind("OTLP gRPC", host, port, taken)
        credentials = security.grpc_credentials()
        try:
            if credentials is None:
                self.port: int = self._server.add_insecure_port(address)
            else:
                self.port = self._server.add_secure_port(address, credentials)
        except RuntimeError:  # grpcio >= 1.50 raises; older versions return 0
            self.port = 0
        if not self.port:
            cause = _bind_error(host, port) or OSError(errno.EADDRNOTAVAIL, "gRPC could not bind it")
            raise _cannot_bind("OTLP gRPC", host, port, cause)

    def start(self) -> None:
        self._server.start()

    def stop(self, grace: float) -> None:
        """In-flight requests finish within `grace` seconds."""
        self._server.stop(grace).wait(grace + 1)


# ------------------------------------------------------------------------------------------------ HTTP


def _inflate(raw: bytes | bytearray, wbits: int, limit: int) -> bytes:
    """Decompress as a stream that stops one byte past `limit` (413), so a small bomb never inflates."""
    out = bytearray()
    data: bytes | bytearray = raw
    while data:
        inflater = zlib.decompressobj(wbits)
        out += inflater.decompress(data, limit + 1 - len(out))
        if len(out) > limit or inflater.unconsumed_tail:
            raise BadRequest(413, f"request body inflates to more than {limit} bytes")
        if not inflater.eof:
            raise BadRequest(400, "bad OTLP request: the compressed body is truncated")
        data = inflater.unused_data  # gzip allows several members one after the other
    return bytes(out)


def _check_json_density(raw: bytes | bytearray) -> None:
    if len(raw) < _JSON_DENSITY_FLOOR:
        return
    containers = raw.count(b"{") + raw.count(b"[")
    if containers * _JSON_BYTES_PER_CONTAINER > len(raw):
        raise BadRequest(
            400,
            f"bad OTLP request: {containers} JSON objects and arrays in {len(raw)} bytes, more than one per "
            f"{_JSON_BYTES_PER_CONTAINER} bytes (OTLP/JSON has about one per 35); refused unparsed",
        )


def decode_request(raw: bytes | bytearray, content_type: str, encoding: str, limit: int) -> ExportTraceServiceRequest:
    """An OTLP/HTTP body as a request; BadRequest (400, 413, 415) with a message when it is not one."""
    if content_type not in (_PROTOBUF, _JSON):
        raise BadRequest(415, f"unsupported content type {content_type!r}; OTLP/HTTP is {_PROTOBUF} or {_JSON}")
    try:
        if encoding == "gzip":
            raw = _inflate(raw, 16 + zlib.MAX_WBITS, limit)
        elif encoding == "deflate":
            raw = _inflate(raw, zlib.MAX_WBITS, limit)
        elif encoding not in ("", "identity"):
            raise BadRequest(415, f"unsupported content encoding {encoding!r}; use gzip, deflate or none")
        if content_type == _JSON:
            _check_json_density(raw)
            return parse_json_line(bytes(raw).decode("utf-8"))
        request = ExportTraceServiceRequest()
        request.ParseFromString(bytes(raw))
        return request
    except BadRequest:
        raise
    except zlib.error as exc:
        raise BadRequest(400, f"bad OTLP request: the body is not valid {encoding} ({exc})") from None
    except UnicodeDecodeError as exc:
        raise BadRequest(400, f"bad OTLP request: JSON body is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise BadRequest(400, f"bad OTLP request: not valid JSON ({exc.msg} at {where})") from None
    except (DecodeError, json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise BadRequest(400, f"bad OTLP request: {exc}") from None


class _Waiting:
    """Connections waiting for a request (idle keep-alive, or still sending the request line and headers),
    oldest first: when every slot is taken, the oldest of them is closed to make room, so idle or slow
    connections cannot lock valid clients out (slowloris)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: dict[socket.socket, float] = {}

    def add(self, connection: socket.socket) -> None:
        with self._lock:
            self._since[connection] = time.monotonic()

    def discard(self, connection: socket.socket) -> None:
        with self._lock:
            self._since.pop(connection, None)

    def close_oldest(self) -> bool:
        with self._lock:
            if not self._since:
                return False
            oldest = next(iter(self._since))
            del self._since[oldest]
        with contextlib.suppress(OSError):  # already closed by its own thread
            oldest.shutdown(socket.SHUT_RDWR)  # its thread's read returns at once and the thread ends
        return True


class _ConnectionHandler(BaseHTTPRequestHandler):
    """One connection's life: the idle and read timeouts, its place among the connections waiting for a
    request (the oldest is closed for room), and the answers."""

    protocol_version = "HTTP/1.1"
    server_version = "ragtrace-gateway"
    limits: ClassVar[ReceiverLimits]
    waiting: ClassVar[_Waiting]

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("http: " + format, *args)

    def handle_one_request(self) -> None:
        # Between requests a keep-alive connection may idle longer than a request may stall.
        self.connection.settimeout(self.limits.idle_timeout)
        self.waiting.add(self.connection)
        try:
            super().handle_one_request()
        finally:
            self.waiting.discard(self.connection)

    def parse_request(self) -> bool:
        self.connection.settimeout(self.limits.read_timeout)  # the request line arrived: it is a request now
        parsed = super().parse_request()
        self.waiting.discard(self.connection)  # headers complete: no longer a candidate to close for room
        return parsed

    def _reply(self, code: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _refuse(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        """Answer and close: the rest of the body, if any, is not read."""
        self.close_connection = True
        self._reply(status, message.encode(), "text/plain; charset=utf-8", headers)


class _BodyReader(_ConnectionHandler):
    """A request body within the limits: a declared length, read within the body timeout."""

    def _content_length(self) -> int:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            raise BadRequest(411, "chunked bodies are not accepted: send a Content-Length")
        declared = self.headers.get("Content-Length")
        if declared is None:
            raise BadRequest(411, "a Content-Length header is required")
        try:
            length = int(declared.strip())
        except ValueError:
            raise BadRequest(400, f"Content-Length is not a number: {declared[:40]!r}") from None
        if length < 0:
            raise BadRequest(400, f"Content-Length is negative: {length}")
        limit = self.limits.max_request_bytes
        if length > limit:
            raise BadRequest(413, f"request body of {length} bytes is over the limit of {limit}")
        return length

    def _read_body(self, length: int) -> bytearray:
        """Exactly `length` bytes within `body_timeout`; each read also has the read timeout."""
        deadline = time.monotonic() + self.limits.body_timeout
        body = bytearray()
        while len(body) < length:
            try:
                chunk = self.rfile.read1(min(_CHUNK, length - len(body)))
            except TimeoutError:
                raise BadRequest(408, f"no body data for {self.limits.read_timeout:g} s") from None
            if not chunk:
                raise BadRequest(400, f"the body ended after {len(body)} of {length} bytes")
            body += chunk
            if time.monotonic() > deadline:
                raise BadRequest(408, f"the body took longer than {self.limits.body_timeout:g} s")
        return body

    def _drain(self) -> None:
        """Read and drop a small body of a request refused before its body was read."""
        try:
            length = self._content_length()
            if length <= _DRAIN_BYTES:
                self._read_body(length)
        except (BadRequest, OSError):
            pass  # the connection closes after the answer anyway


class _OtlpHandler(_BodyReader):
    """The endpoints: `GET /healthz`, and `POST /v1/traces` (authorized, within the requests in progress)."""

    sink: ClassVar[TraceSink]
    otlp: ClassVar[bool]
    security: ClassVar[ReceiverSecurity]
    in_progress: ClassVar[threading.Semaphore]

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] in ("/healthz", "/health", "/"):
            health = self.sink.health()
            code = 200 if health["status"] == "ok" else 503
            self._reply(code, json.dumps(health).encode(), _JSON)
        else:
            self._reply(404, b"not found", "text/plain")

    def do_POST(self) -> None:
        if not self.otlp or self.path.split("?", 1)[0] != "/v1/traces":
            self._drain()
            self._refuse(404, "not found: this gateway accepts traces at /v1/traces")
            return
        if not self.security.authorized(self.headers.get):
            self._drain()
            self._refuse(401, "missing or wrong credentials for this gateway", {"WWW-Authenticate": "Bearer"})
            return
        if not self.in_progress.acquire(timeout=self.limits.read_timeout):
            self._drain()
            self._refuse(503, "too many requests in progress; retry", {"Retry-After": "1"})
            return
        try:
            self._receive()
        finally:
            self.in_progress.release()

    def _receive(self) -> None:
        content_type = (self.headers.get("Content-Type") or _PROTOBUF).split(";")[0].strip().lower()
        encoding = (self.headers.get("Content-Encoding") or "").strip().lower()
        try:
            raw = self._read_body(self._content_length())
            request = decode_request(raw, content_type, encoding, self.limits.max_request_bytes)
        except BadRequest as refused:
            self._refuse(refused.status, str(refused))
            return
        del raw
        if self.sink.closing:
            self._reply(503, b"shutting down", "text/plain")
            return
        try:
            response = self.sink.export(request)
        except RetryLater as busy:
            self._reply(503, str(busy).encode(), "text/plain; charset=utf-8", {"Retry-After": "1"})
            return
        except Exception:
            logger.exception("ragtrace gateway: handling an OTLP/HTTP request failed")
            self._reply(500, b"internal error while handling the request", "text/plain")
            return
        if content_type == _JSON:
            self._reply(200, json_format.MessageToJson(response).encode(), _JSON)
        else:
            self._reply(200, response.SerializeToString(), _PROTOBUF)


def _handler(
    sink: TraceSink, otlp: bool, limits: ReceiverLimits, security: ReceiverSecurity, requests: threading.Semaphore,
    waiting: _Waiting,
) -> type[BaseHTTPRequestHandler]:
    """The handler class of one server, its settings as class attributes (the server makes one handler per
    request)."""
    settings = {"sink": sink, "otlp": otlp, "limits": limits, "security": security, "in_progress": requests,
                "waiting": waiting, "timeout": limits.read_timeout}  # timeout: TLS handshakes included
    return type("Handler", (_OtlpHandler,), settings)


_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"


class _BoundedServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` of them; TLS is set up in that thread, so a slow
    handshake holds only its own connection."""

    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 drops SYNs under a burst: clients stall a second per retry

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], max_connections: int,
        tls: ssl.SSLContext | None, waiting: _Waiting,
    ) -> None:
        self._slots = threading.BoundedSemaphore(max_connections)
        self._tls = tls
        self._waiting = waiting
        self.refused_connections = 0
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        # Full: close the connection that has waited longest without sending a request and take its slot
        # (its thread ends within milliseconds); only when every connection is busy with a request is the
        # new one turned away.
        if not self._slots.acquire(blocking=False) and not (
            self._waiting.close_oldest() and self._slots.acquire(timeout=1.0)
        ):
            self.refused_connections += 1
            self._turn_away(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def _turn_away(self, request: socket.socket) -> None:
        """Full: a plain-text 503 when the client speaks plain HTTP (sent without blocking), then close.

        This runs on the accepting thread, so it does not linger."""
        if self._tls is None:
            try:
                request.setblocking(False)
                request.send(_BUSY)
            except OSError:
                pass
        super().shutdown_request(request)

    def shutdown_request(self, request: Any) -> None:
        """Half-close, drop what the client still sends (bounded in time and bytes), then close."""
        try:
            request.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        else:
            _linger(request)
        self.close_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that vanished mid-request is routine for a server: logged, not printed to stderr."""
        logger.debug("http: connection from %s failed", client_address, exc_info=True)

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self._tls is not None:
            request.settimeout(self.RequestHandlerClass.timeout)  # type: ignore[attr-defined]
            plain = request
            self._waiting.add(plain)
            try:
                request = self._tls.wrap_socket(plain, server_side=True)
            except (OSError, ssl.SSLError) as exc:
                logger.debug("http: TLS handshake with %s failed: %s", client_address, exc)
                return
            finally:
                self._waiting.discard(plain)
        super().finish_request(request, client_address)


def _linger(connection: socket.socket) -> None:
    deadline = time.monotonic() + _LINGER_SECONDS
    dropped = 0
    with contextlib.suppress(OSError):
        while dropped < _LINGER_BYTES and (left := deadline - time.monotonic()) > 0:
            connection.settimeout(left)
            chunk = connection.recv(_CHUNK)
            if not chunk:  # the client read the answer and closed
                return
            dropped += len(chunk)


class _V6BoundedServer(_BoundedServer):
    address_family = socket.AF_INET6


class HttpReceiver:
    """OTLP/HTTP and `GET /healthz` on `host:port` (`otlp=False`: health only); bound on construction."""

    def __init__(
        self,
        sink: TraceSink,
        host: str,
        port: int,
        *,
        otlp: bool = True,
        limits: ReceiverLimits | None = None,
        security: ReceiverSecurity | None = None,
    ) -> None:
        limits = limits or ReceiverLimits()
        security = security or ReceiverSecurity()
        server_class = _V6BoundedServer if ":" in host else _BoundedServer
        waiting = _Waiting()
        requests = threading.Semaphore(limits.max_concurrent_requests)
        handler = _handler(sink, otlp, limits, security, requests, waiting)
        try:
            self._server = server_class((host, port), handler, limits.max_connections, security.ssl_context(), waiting)
        except OSError as exc:
            raise _cannot_bind("OTLP HTTP" if otlp else "health checks", host, port, exc) from exc
        self._name = "ragtrace-http" if otlp else "ragtrace-health"
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def refused_connections(self) -> int:
        return self._server.refused_connections

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


__all__ = [
    "MAX_MESSAGE_BYTES",
    "BadRequest",
    "CannotListen",
    "GrpcReceiver",
    "HttpReceiver",
    "ReceiverLimits",
    "TraceSink",
    "decode_request",
    "url_host",
]
