"""`Gateway`: an OTLP receiver (gRPC and HTTP) in front of `RagScoringSpanProcessor`, exporting OTLP onwards.

The app needs no ragtrace: its collector sends traces here, each span of each request becomes an SDK
`ReadableSpan` (the conversion `ragtrace replay` uses, so the gateway scores what replay would), enters
the same processor the in-process mode runs, and leaves through the SDK's own
`BatchSpanProcessor(OTLPSpanExporter())` to the next hop, configured by the usual `OTEL_EXPORTER_OTLP_*`
variables. Like a collector, the gateway keeps nothing but bounded in-flight state.

A gateway sees whole ended spans in any order and in separate batches, so "the local root ended" means
"the root span was received", and children exported after it would miss their trace. The gateway therefore
holds each root of a trace that may be sampled for `trace_settle` seconds before handing it on: children
go to the processor at once and wait there for their root as they would in process.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import socket
import threading
import time
import zlib
from collections import deque
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.metrics import MeterProvider
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from ragtrace.gateway.convert import received_spans, span_count
from ragtrace.judges.base import Judge
from ragtrace.judges.resolve import resolve_judge
from ragtrace.live.fields import is_local_root
from ragtrace.live.otlp import otlp_span_exporter
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from ragtrace.live.setup import RagtraceSettings
from ragtrace.offline.replay import parse_json_line

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"


# ------------------------------------------------------------------------------------------------ export


def _env_int(name: str, default: int) -> int | None:
    """None when the SDK's own OTEL_BSP_* variable is set (the SDK then reads it), else the gateway default."""
    return None if os.environ.get(name) else default


def otlp_exporting(endpoint: str | None = None, protocol: str | None = None) -> BatchSpanProcessor:
    """The next hop: the SDK's OTLP exporter (gRPC or http/protobuf) behind a BatchSpanProcessor.

    Unset arguments fall back to `OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT` / `_PROTOCOL`, read by the SDK.
    The batch queue is larger and the delay shorter than an app's defaults (a gateway carries many apps'
    traffic); `OTEL_BSP_*` variables override both.
    """
    exporter = otlp_span_exporter(endpoint, protocol)
    return BatchSpanProcessor(
        exporter,
        max_queue_size=_env_int("OTEL_BSP_MAX_QUEUE_SIZE", 65_536),
        schedule_delay_millis=_env_int("OTEL_BSP_SCHEDULE_DELAY", 200),
        max_export_batch_size=_env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 2048),
    )


# ------------------------------------------------------------------------------------------------ settle


class RootSettler:
    """Hands spans to the processor, holding local roots of possibly sampled traces for `settle` seconds.

    Children pass at once and wait in the processor's store for their root; a root that arrives first
    waits here, so children exported later in other batches are still part of the trace when it closes.
    At most `max_roots` roots wait (one deque, due times in arrival order); beyond that a root passes at
    once and its trace may close early. A span is popped under the lock before it is handed on, so each
    span is handed on exactly once, also across `drain` and `close`.
    """

    def __init__(self, processor: SpanProcessor, sampler: Sampler, settle: float, max_roots: int = 10_000) -> None:
        if settle < 0:
            raise ValueError(f"trace_settle must be >= 0 seconds, got {settle!r}")
        if max_roots < 1:
            raise ValueError(f"max_settling_roots must be >= 1, got {max_roots!r}")
        self._processor = processor
        self._sampler = sampler
        self._settle = settle
        self._max_roots = max_roots
        self._due: deque[tuple[float, ReadableSpan]] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self.overflowed = 0
        self._thread = threading.Thread(target=self._run, name="ragtrace-settle", daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        return len(self._due)

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.context
        if self._settle > 0 and ctx is not None and is_local_root(span) and self._sampler.might_sample(ctx.trace_id):
            with self._cond:
                if not self._closed:
                    if len(self._due) < self._max_roots:
                        self._due.append((time.monotonic() + self._settle, span))
                        if len(self._due) == 1:
                            self._cond.notify()
                        return
                    self.overflowed += 1
        self._processor.on_end(span)

    def _take(self, everything: bool) -> list[ReadableSpan]:
        now = time.monotonic()
        out = []
        while self._due and (everything or self._due[0][0] <= now):
            out.append(self._due.popleft()[1])
        return out

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._due or self._due[0][0] > time.monotonic()):
                    timeout = self._due[0][0] - time.monotonic() if self._due else None
                    self._cond.wait(timeout)
                if self._closed:
                    return
                ready = self._take(everything=False)
            for span in ready:
                self._processor.on_end(span)

    def drain(self) -> None:
        """Hand every waiting root on now (flush)."""
        with self._cond:
            ready = self._take(everything=True)
        for span in ready:
            self._processor.on_end(span)

    def close(self) -> None:
        """From now on roots pass at once; the waiting ones are handed on."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(5.0)
        self.drain()


# ------------------------------------------------------------------------------------------------ transports


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    def Export(self, request: ExportTraceServiceRequest, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        return self._gateway.export(request)


def _handler(gateway: Gateway, otlp: bool) -> type[BaseHTTPRequestHandler]:
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
                health = gateway.health()
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
                if encoding == "gzip":
                    raw = gzip.decompress(raw)
                elif encoding == "deflate":
                    raw = zlib.decompress(raw)
                elif encoding not in ("", "identity"):
                    raise ValueError(f"unsupported content encoding {encoding!r}")
                if content_type == _JSON:
                    request = parse_json_line(raw.decode("utf-8"))
                else:
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(raw)
            except (OSError, EOFError, zlib.error, DecodeError, json_format.ParseError, ValueError) as exc:
                self._reply(400, f"bad OTLP request: {exc}".encode(), "text/plain")
                return
            if gateway.closing:
                self._reply(503, b"shutting down", "text/plain")
                return
            response = gateway.export(request)
            if content_type == _JSON:
                self._reply(200, json_format.MessageToJson(response).encode(), _JSON)
            else:
                self._reply(200, response.SerializeToString(), _PROTOBUF)

    return Handler


def _http_server(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server_class = ThreadingHTTPServer
    if ":" in host:  # an IPv6 literal such as ::1

        class V6(ThreadingHTTPServer):
            address_family = socket.AF_INET6

        server_class = V6
    server = server_class((host, port), handler)
    server.daemon_threads = True
    return server


# ------------------------------------------------------------------------------------------------ gateway


class Gateway:
    """OTLP in (gRPC `TraceService/Export`, HTTP `POST /v1/traces` protobuf or JSON) -> score -> OTLP out.

    settings: `RagtraceSettings` (default: from `RAGTRACE_*`); `judge` overrides its judge.
    exporting: the processor scored spans go to (default `otlp_exporting(exporter_endpoint, exporter_protocol)`).
    grpc_port / http_port: 0 picks a free port, None disables that transport. health_port: an extra
    port serving only `GET /healthz` (it is always served on the HTTP port too).
    trace_settle: seconds a root is held so that late children join its trace (0 disables).
    processor_options: any further `RagScoringSpanProcessor` argument (e.g. `sampler`, `tick_interval`).
    """

    def __init__(
        self,
        settings: RagtraceSettings | None = None,
        *,
        judge: str | Judge | None = None,
        exporting: SpanProcessor | None = None,
        exporter_endpoint: str | None = None,
        exporter_protocol: str | None = None,
        host: str = "127.0.0.1",
        grpc_port: int | None = 4317,
        http_port: int | None = 4318,
        health_port: int | None = None,
        trace_settle: float = 1.0,
        max_settling_roots: int = 10_000,
        grpc_workers: int = 8,
        meter_provider: MeterProvider | None = None,
        **processor_options: Any,
    ) -> None:
        settings = settings if settings is not None else RagtraceSettings.from_env()
        self.settings = settings
        if judge is None:
            is_llm = not (settings.judge == "local" or settings.judge.startswith("local/"))
            resolved = resolve_judge(settings.judge, **(settings.llm_judge_options() if is_llm else {}))
        else:
            resolved = resolve_judge(judge)
        kwargs = settings.processor_options()
        if not settings.enabled:  # a disabled gateway still forwards everything
            kwargs["sampler"] = Sampler(0.0)
        if meter_provider is not None:
            kwargs["metrics"] = settings.build_metrics(meter_provider)
        kwargs.update(processor_options)
        self._sampler: Sampler = kwargs["sampler"]
        self._exporting = exporting if exporting is not None else otlp_exporting(exporter_endpoint, exporter_protocol)
        self.processor = RagScoringSpanProcessor(self._exporting, judge=resolved, **kwargs)
        self._settler = RootSettler(self.processor, self._sampler, trace_settle, max_settling_roots)
        self._lock = threading.Lock()
        self._received = 0
        self._rejected = 0
        self._requests = 0
        self._closing = False
        self._stopped = threading.Event()
        self._host = host
        self._grpc: grpc.Server | None = None
        self._grpc_port: int | None = None
        self._http: ThreadingHTTPServer | None = None
        self._health: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        try:
            if grpc_port is not None:
                self._grpc = grpc.server(
                    futures.ThreadPoolExecutor(max_workers=grpc_workers, thread_name_prefix="ragtrace-grpc"),
                    options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
                )
                trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(self), self._grpc)  # type: ignore[no-untyped-call]
                address = f"[{host}]:{grpc_port}" if ":" in host else f"{host}:{grpc_port}"
                self._grpc_port = self._grpc.add_insecure_port(address)
                if not self._grpc_port:
                    raise OSError(f"cannot bind OTLP gRPC to {address}")
            if http_port is not None:
                self._http = _http_server(host, http_port, _handler(self, otlp=True))
            if health_port is not None:
                self._health = _http_server(host, health_port, _handler(self, otlp=False))
        except BaseException:
            self._close_servers()
            self._settler.close()
            self.processor.shutdown()
            raise

    # --- endpoints -----------------------------------------------------------------------------------

    def _url(self, port: int | None) -> str:
        if port is None:
            raise RuntimeError("that transport is disabled")
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{port}"

    @property
    def grpc_port(self) -> int | None:
        return self._grpc_port

    @property
    def http_port(self) -> int | None:
        return self._http.server_address[1] if self._http is not None else None

    @property
    def health_port(self) -> int | None:
        return self._health.server_address[1] if self._health is not None else self.http_port

    @property
    def grpc_endpoint(self) -> str:
        return self._url(self.grpc_port)

    @property
    def http_endpoint(self) -> str:
        return self._url(self.http_port)

    @property
    def closing(self) -> bool:
        return self._closing

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> Gateway:
        """Start serving (returns self, so `with Gateway(...).start() as gw:` works)."""
        if self._grpc is not None:
            self._grpc.start()
        for server, name in ((self._http, "ragtrace-http"), (self._health, "ragtrace-health")):
            if server is not None:
                thread = threading.Thread(target=server.serve_forever, args=(0.1,), name=name, daemon=True)
                thread.start()
                self._threads.append(thread)
        logger.info(
            "ragtrace gateway: OTLP gRPC on %s, HTTP on %s", self._grpc_port or "-", self.http_port or "-"
        )
        return self

    def export(self, request: ExportTraceServiceRequest) -> ExportTraceServiceResponse:
        """One OTLP request, from either transport: every span to the processor (spans without valid ids
        are rejected, as OTLP's partial success says)."""
        total = span_count(request)
        accepted = 0
        for span in received_spans(request):
            self._settler.on_end(span)
            accepted += 1
        with self._lock:
            self._requests += 1
            self._received += accepted
            self._rejected += total - accepted
        if accepted == total:
            return ExportTraceServiceResponse()
        return ExportTraceServiceResponse(
            partial_success=ExportTracePartialSuccess(
                rejected_spans=total - accepted, error_message="spans without a valid trace id or span id"
            )
        )

    def health(self) -> dict[str, Any]:
        """What `GET /healthz` answers: liveness plus the in-flight state an operator sizes by."""
        with self._lock:
            received, rejected, requests = self._received, self._rejected, self._requests
        return {
            "status": "shutting_down" if self._closing else "ok",
            "requests": requests,
            "received_spans": received,
            "rejected_spans": rejected,
            "settling_roots": self._settler.waiting,
            "held_spans": self.processor.held_spans,
            "open_traces": self.processor.open_traces,
            "queue_depth": self.processor.queue_depth,
            "decisions": self.processor.decisions,
        }

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Hand on settling roots, score what can be scored in time, flush the exporter."""
        self._settler.drain()
        return self.processor.force_flush(timeout_millis)

    def _close_servers(self, grace: float = 5.0) -> None:
        if self._grpc is not None:
            self._grpc.stop(grace).wait(grace + 1)
        for server in (self._http, self._health):
            if server is not None:
                server.shutdown()
                server.server_close()
        for thread in self._threads:
            thread.join(grace)

    def shutdown(self, grace: float = 5.0) -> None:
        """Stop receiving (in-flight requests finish within `grace`), hand on settling roots, then shut the
        processor down: it scores within `score_deadline`, forwards everything and flushes the exporter."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        try:
            self._close_servers(grace)
        except Exception:
            logger.exception("ragtrace gateway: stopping the servers failed")
        self._settler.close()
        self.processor.shutdown()
        self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until `shutdown` has finished."""
        return self._stopped.wait(timeout)

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def request_of(spans: list[ReadableSpan]) -> ExportTraceServiceRequest:
    """SDK spans as one OTLP request, encoded by the SDK's own exporter encoder (tests and the bench)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    request: ExportTraceServiceRequest = encode_spans(spans)
    return request


__all__ = ["Gateway", "RootSettler", "otlp_exporting", "request_of"]
