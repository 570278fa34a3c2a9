"""`Gateway`: OTLP receivers in front of `RagScoringSpanProcessor`, exporting OTLP onwards.

The app needs no ragtrace: its collector sends traces here, each span of each request becomes an SDK
`ReadableSpan` (the conversion `ragtrace replay` uses, so the gateway scores what replay would), passes
the root settling (settling.py), enters the same processor the in-process mode runs, and leaves through
the SDK's own `BatchSpanProcessor(OTLPSpanExporter())` to the next hop (next_hop.py), configured by the
usual `OTEL_EXPORTER_OTLP_*` variables. Like a collector, the gateway keeps nothing but bounded in-flight
state; with a `Spool`, that state is also on disk until the next hop accepted it (spool.py, and recovery.py
for its replay and resends). The sockets are listening.py's; room in the next hop's queue, which every path
takes before it hands spans on, is room.py's.
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry.metrics import MeterProvider
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from ragtrace._logs import ragtrace_logger
from ragtrace.gateway.convert import received_spans, span_count
from ragtrace.gateway.listening import Listeners
from ragtrace.gateway.next_hop import NextHop, next_hop_url, otlp_exporting, refuse_self_forwarding
from ragtrace.gateway.receivers import ReceiverLimits, RetryLater
from ragtrace.gateway.recovery import REPLAYED_LATE, RESEND_DELAY, SpoolRecovery, received_key
from ragtrace.gateway.room import NextHopRoom
from ragtrace.gateway.security import ReceiverSecurity
from ragtrace.gateway.settling import RootSettler
from ragtrace.gateway.spool import Spool, SpoolFull
from ragtrace.judges.base import Judge
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from ragtrace.live.settings import RagtraceSettings, scoring_options

logger = ragtrace_logger(__name__)


class Gateway:
    """OTLP in (gRPC `TraceService/Export`, HTTP `POST /v1/traces` protobuf or JSON) -> score -> OTLP out.

    settings: `RagtraceSettings` (default: from `RAGTRACE_*`); `judge` overrides its judge.
    exporting: the processor scored spans go to (default `otlp_exporting(exporter_endpoint, exporter_protocol)`).
    grpc_port / http_port: 0 picks a free port, None disables that transport. health_port: an extra
    port serving only `GET /healthz` (it is always served on the HTTP port too).
    trace_settle: seconds a root is held so that late children join its trace (0 disables).
    limits: what a client may cost (body size, timeouts, connections; `ReceiverLimits`).
    security: TLS and a required header on both transports (`ReceiverSecurity`); none by default.
    spool: a `Spool` that keeps every acknowledged span on disk until the next hop has it, replayed at
    `start` (the gateway closes it at shutdown); the exporting processor must be the SDK's batch or simple one.
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
        limits: ReceiverLimits | None = None,
        security: ReceiverSecurity | None = None,
        meter_provider: MeterProvider | None = None,
        spool: Spool | None = None,
        **processor_options: Any,
    ) -> None:
        settings, kwargs = scoring_options(settings, judge, meter_provider, processor_options, built_by="gateway")
        self.settings = settings
        self._sampler: Sampler = kwargs["sampler"]
        self._exporting = NextHop(
            exporting if exporting is not None else otlp_exporting(exporter_endpoint, exporter_protocol)
        )
        if spool is not None and not self._exporting.observed:
            raise ValueError(
                "a spool needs to know which spans the next hop accepted: give the gateway the SDK's "
                "BatchSpanProcessor (or SimpleSpanProcessor) as its exporting processor"
            )
        self._spool = spool
        self._room = NextHopRoom(self._exporting, lambda: self.processor.sink.waiting)
        self._lock = threading.Lock()
        self._received = self._rejected = self._refused = self._requests = 0
        self._closing = False
        self._stopped = threading.Event()
        try:
            self._listeners, self._next_hop = self._listen(
                Listeners(self, host, security or ReceiverSecurity(), grpc_port=grpc_port, http_port=http_port,
                          health_port=health_port, grpc_workers=grpc_workers, limits=limits),
                None if exporting is not None else (exporter_endpoint, exporter_protocol),
            )
        except BaseException:
            # Nothing ran yet: the scoring processor is built only once the ports are bound, so a gateway that
            # cannot start has no processor to stop (nor a 'scored nothing' to report).
            self._exporting.shutdown()
            if spool is not None:
                spool.close()
            raise
        # With a spool, a sampled trace's spans leave it together: a replay after a crash then holds whole
        # traces, which close on their root (a trace whose other spans had gone on would wait max_trace_wait).
        self.processor = RagScoringSpanProcessor(self._exporting, **{"hold_whole_trace": spool is not None, **kwargs})
        self._settler = RootSettler(self.processor, self._sampler, trace_settle, max_settling_roots)
        self._recovery = (
            SpoolRecovery(spool, self._exporting, self._room, self._settler, self.processor, self._sampler,
                          closing=lambda: self._closing)
            if spool is not None else None
        )

    @staticmethod
    def _listen(listeners: Listeners, next_hop: tuple[str | None, str | None] | None) -> tuple[Listeners, str]:
        """The bound listeners and where spans go, said for the log; a gateway that would forward to its own
        ports is refused (its listeners closed)."""
        if next_hop is None:
            return listeners, "a caller-supplied span processor"
        try:
            refuse_self_forwarding(*next_hop, listeners.host, listeners.ports)
            return listeners, next_hop_url(*next_hop)
        except BaseException:
            listeners.stop()
            raise

    @property
    def grpc_port(self) -> int | None:
        grpc = self._listeners.grpc
        return grpc.port if grpc is not None else None

    @property
    def http_port(self) -> int | None:
        http = self._listeners.http
        return http.port if http is not None else None

    @property
    def health_port(self) -> int | None:
        health = self._listeners.health
        return health.port if health is not None else self.http_port

    @property
    def grpc_endpoint(self) -> str:
        return self._listeners.url(self.grpc_port)

    @property
    def http_endpoint(self) -> str:
        return self._listeners.url(self.http_port)

    @property
    def closing(self) -> bool:
        return self._closing

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> Gateway:
        """Start serving (returns self, so `with Gateway(...).start() as gw:` works). With a spool, its replay
        starts first, so that spans stored before a crash reach the processor before their retried peers."""
        if self._recovery is not None:
            self._recovery.start()
        self._listeners.start()
        security = self._listeners.security
        logger.info(
            "ragtrace gateway: listening for OTLP gRPC on %s, HTTP on %s (%s, %s); forwarding to %s",
            self.grpc_port or "-", self.http_port or "-", "TLS" if security.tls else "plaintext",
            f"{security.required_header[0]} header required" if security.required_header else "no authentication",
            self._next_hop,
        )
        return self

    def export(self, request: ExportTraceServiceRequest) -> ExportTraceServiceResponse:
        """One OTLP request, from either transport: every span to the processor (spans without valid ids
        are rejected, as OTLP's partial success says). `RetryLater` when the next hop's queue has no room
        for the request: its exporter would drop spans the client was told had arrived, so the client
        keeps them and sends them again instead, as it does for a collector whose queue is full."""
        total = span_count(request)
        with self._lock:
            self._requests += 1
        if not self._room.reserve(total):
            with self._lock:
                self._refused += total
            raise RetryLater(f"the next hop's queue has no room for {total} more spans; retry")
        accepted = 0
        refused = False
        try:
            spans = list(received_spans(request))
            valid = len(spans)
            if self._spool is not None and spans:
                # Durable before the answer; a span still stored from an earlier request is not handed on
                # twice (its stored copy is on its way already).
                fresh = self._spool.add(request.SerializeToString(), [received_key(span) for span in spans])
                spans = [span for span, new in zip(spans, fresh, strict=True) if new]
            for span in spans:
                self._settler.on_end(span)
            accepted = valid
        except SpoolFull:
            refused = True
            raise
        finally:
            self._room.release(total)
            with self._lock:
                if refused:
                    self._refused += total
                else:
                    self._received += accepted
                    self._rejected += total - accepted
        if accepted == total:
            return ExportTraceServiceResponse()
        return ExportTraceServiceResponse(
            partial_success=ExportTracePartialSuccess(
                rejected_spans=total - accepted,
                error_message="spans without a valid trace, span or parent id (missing, zero or wrong length)",
            )
        )

    def health(self) -> dict[str, Any]:
        """What `GET /healthz` answers: liveness plus the in-flight state an operator sizes by."""
        with self._lock:
            received, rejected, refused, requests = self._received, self._rejected, self._refused, self._requests
        next_hop = self._exporting.counts()
        health: dict[str, Any] = {
            "status": "shutting_down" if self._closing else "ok",
            "requests": requests,
            "received_spans": received,
            "rejected_spans": rejected,
            "refused_spans": refused,
            "forwarded_spans": next_hop["forwarded"],
            "failed_spans": next_hop["failed"],
            "exporting_spans": next_hop["exporting"],
            "settling_roots": self._settler.waiting,
            "held_spans": self.processor.held_spans,
            "open_traces": self.processor.open_traces,
            "queue_depth": self.processor.queue_depth,
            "decisions": self.processor.decisions,
        }
        if self._recovery is not None:
            health["spool"] = self._recovery.health()
        return health

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Hand on settling roots, score what can be scored in time, flush the exporter."""
        self._settler.drain()
        return self.processor.force_flush(timeout_millis)

    def shutdown(self, grace: float = 5.0) -> None:
        """Stop receiving (in-flight requests finish within `grace`), hand on settling roots, then shut the
        processor down: it scores within `score_deadline`, forwards everything and flushes the exporter."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        try:
            self._listeners.stop(grace)
        except Exception:
            logger.exception("ragtrace gateway: stopping the servers failed")
        if self._recovery is not None:
            self._recovery.stop(5.0)
        self._settler.close()
        self.processor.shutdown()
        if self._spool is not None:
            self._spool.close()  # what it still holds (not forwarded) is replayed at the next start
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


__all__ = ["REPLAYED_LATE", "RESEND_DELAY", "Gateway", "request_of"]
