"""`Gateway`: OTLP receivers in front of `RagScoringSpanProcessor`, exporting OTLP onwards.

The app needs no ragtrace: its collector sends traces here, each span of each request becomes an SDK
`ReadableSpan` (the conversion `ragtrace replay` uses, so the gateway scores what replay would), passes
the root settling (settling.py), enters the same processor the in-process mode runs, and leaves through
the SDK's own `BatchSpanProcessor(OTLPSpanExporter())` to the next hop (next_hop.py), configured by the
usual `OTEL_EXPORTER_OTLP_*` variables. Like a collector, the gateway keeps nothing but bounded in-flight
state.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from opentelemetry.metrics import MeterProvider
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from ragtrace.gateway.convert import received_spans, span_count
from ragtrace.gateway.next_hop import otlp_exporting
from ragtrace.gateway.receivers import GrpcReceiver, HttpReceiver, url_host
from ragtrace.gateway.settling import RootSettler
from ragtrace.judges.base import Judge
from ragtrace.judges.resolve import resolve_judge
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from ragtrace.live.setup import RagtraceSettings

logger = logging.getLogger(__name__)


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
        resolved = (
            resolve_judge(settings.judge, **settings.llm_judge_options()) if judge is None else resolve_judge(judge)
        )
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
        self._grpc: GrpcReceiver | None = None
        self._http: HttpReceiver | None = None
        self._health: HttpReceiver | None = None
        try:
            if grpc_port is not None:
                self._grpc = GrpcReceiver(self, host, grpc_port, grpc_workers)
            if http_port is not None:
                self._http = HttpReceiver(self, host, http_port)
            if health_port is not None:
                self._health = HttpReceiver(self, host, health_port, otlp=False)
        except BaseException:
            self._close_servers()
            self._settler.close()
            self.processor.shutdown()
            raise

    # --- endpoints -----------------------------------------------------------------------------------

    def _url(self, port: int | None) -> str:
        if port is None:
            raise RuntimeError("that transport is disabled")
        return f"http://{url_host(self._host)}:{port}"

    @property
    def grpc_port(self) -> int | None:
        return self._grpc.port if self._grpc is not None else None

    @property
    def http_port(self) -> int | None:
        return self._http.port if self._http is not None else None

    @property
    def health_port(self) -> int | None:
        return self._health.port if self._health is not None else self.http_port

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
        for receiver in self._receivers():
            receiver.start()
        logger.info("ragtrace gateway: OTLP gRPC on %s, HTTP on %s", self.grpc_port or "-", self.http_port or "-")
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

    def _receivers(self) -> list[GrpcReceiver | HttpReceiver]:
        return [r for r in (self._grpc, self._http, self._health) if r is not None]

    def _close_servers(self, grace: float = 5.0) -> None:
        for receiver in self._receivers():
            receiver.stop(grace)

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


__all__ = ["Gateway", "request_of"]
