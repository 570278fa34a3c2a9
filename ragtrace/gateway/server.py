"""`Gateway`: OTLP receivers in front of `RagScoringSpanProcessor`, exporting OTLP onwards.

The app needs no ragtrace: its collector sends traces here, each span of each request becomes an SDK
`ReadableSpan` (the conversion `ragtrace replay` uses, so the gateway scores what replay would), passes
the root settling (settling.py), enters the same processor the in-process mode runs, and leaves through
the SDK's own `BatchSpanProcessor(OTLPSpanExporter())` to the next hop (next_hop.py), configured by the
usual `OTEL_EXPORTER_OTLP_*` variables. Like a collector, the gateway keeps nothing but bounded in-flight
state; with a `Spool`, that state is also on disk until the next hop accepted it (spool.py).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
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
from ragtrace.gateway.next_hop import NextHop, next_hop_url, otlp_exporting, refuse_self_forwarding
from ragtrace.gateway.receivers import GrpcReceiver, HttpReceiver, ReceiverLimits, RetryLater, url_host
from ragtrace.gateway.security import ReceiverSecurity
from ragtrace.gateway.settling import RootSettler
from ragtrace.gateway.spool import Spool, SpoolFull, span_key
from ragtrace.judges.base import Judge
from ragtrace.live.enrich import EvalStatus
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from ragtrace.live.settings import RagtraceSettings, scoring_options

logger = ragtrace_logger(__name__)

# A batch the next hop's exporter gave up on (after its own retries) is handed to it again this much later.
RESEND_DELAY = 1.0
# What a replayed sample whose score deadline passed while the gateway was down says on its retrieval span.
REPLAYED_LATE: tuple[EvalStatus, str] = ("timeout", "gateway_restarted")


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
        if spool is not None:
            if not self._exporting.observed:
                raise ValueError(
                    "a spool needs to know which spans the next hop accepted: give the gateway the SDK's "
                    "BatchSpanProcessor (or SimpleSpanProcessor) as its exporting processor"
                )
            self._exporting.listen(self._exported)
        self._spool = spool
        self._resend: deque[tuple[float, Sequence[ReadableSpan]]] = deque()
        self._replayed = 0
        self._replayed_late = 0
        self._maybe_delivered = 0
        self._pump_stop = threading.Event()
        self._pump: threading.Thread | None = None
        self._lock = threading.Lock()
        self._received = 0
        self._rejected = 0
        self._refused = 0
        self._reserved = 0  # spans of requests being handed on now, not in the next hop's queue yet
        self._requests = 0
        self._closing = False
        self._stopped = threading.Event()
        self._host = host
        self._security = security or ReceiverSecurity()
        self._next_hop = "a caller-supplied span processor"
        self._grpc: GrpcReceiver | None = None
        self._http: HttpReceiver | None = None
        self._health: HttpReceiver | None = None
        try:
            if grpc_port is not None:
                self._grpc = GrpcReceiver(self, host, grpc_port, grpc_workers, limits=limits, security=self._security)
            if http_port is not None:
                self._http = HttpReceiver(self, host, http_port, limits=limits, security=self._security)
            if health_port is not None:
                # Health stays unauthenticated (probes carry no credentials) but speaks TLS like the rest.
                health_security = ReceiverSecurity(self._security.tls_cert, self._security.tls_key)
                self._health = HttpReceiver(
                    self, host, health_port, otlp=False, limits=limits, security=health_security
                )
            if exporting is None:
                ports = [r.port for r in self._receivers()]
                refuse_self_forwarding(exporter_endpoint, exporter_protocol, host, ports)
                self._next_hop = next_hop_url(exporter_endpoint, exporter_protocol)
        except BaseException:
            # Nothing ran yet: the scoring processor is built only once the ports are bound, so a gateway that
            # cannot start has no processor to stop (nor a 'scored nothing' to report).
            self._close_servers()
            self._exporting.shutdown()
            if spool is not None:
                spool.close()
            raise
        self.processor = RagScoringSpanProcessor(self._exporting, **kwargs)
        self._settler = RootSettler(self.processor, self._sampler, trace_settle, max_settling_roots)

    # --- endpoints -----------------------------------------------------------------------------------

    def _url(self, port: int | None) -> str:
        if port is None:
            raise RuntimeError("that transport is disabled")
        return f"{self._security.scheme}://{url_host(self._host)}:{port}"

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
        """Start serving (returns self, so `with Gateway(...).start() as gw:` works). With a spool, its replay
        starts first, so that spans stored before a crash reach the processor before their retried peers."""
        if self._spool is not None and self._pump is None:
            found = self._spool.stats()
            if found["spans"]:
                logger.info(
                    "ragtrace gateway: replaying %d spans (%d requests) from the spool %s",
                    found["spans"], found["requests"], self._spool.path,
                )
            self._pump = threading.Thread(target=self._run_spool, name="ragtrace-spool", daemon=True)
            self._pump.start()
        for receiver in self._receivers():
            receiver.start()
        security = self._security
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
            if not self._has_room(total):
                self._refused += total
                raise RetryLater(f"the next hop's queue has no room for {total} more spans; retry")
            self._reserved += total
        accepted = 0
        refused = False
        try:
            spans = list(received_spans(request))
            valid = len(spans)
            if self._spool is not None and spans:
                # Durable before the answer; a span still stored from an earlier request is not handed on
                # twice (its stored copy is on its way already).
                fresh = self._spool.add(request.SerializeToString(), [_key(span) for span in spans])
                spans = [span for span, new in zip(spans, fresh, strict=True) if new]
            for span in spans:
                self._settler.on_end(span)
            accepted = valid
        except SpoolFull:
            refused = True
            raise
        finally:
            with self._lock:
                self._reserved -= total
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

    def _has_room(self, spans: int) -> bool:
        """Whether the next hop's queue can take `spans` more after the spans already bound for it (released
        spans waiting for room, requests being handed on). A request larger than the whole queue waits for
        an empty one, so that no request is refused for good."""
        room = self._exporting.room()
        if room is None:
            return True
        free, size = room
        return free - self.processor.sink.waiting - self._reserved >= min(spans, size)

    def _reserve(self, spans: int) -> bool:
        """Room in the next hop's queue for `spans` more, taken (release with `_unreserve`)."""
        with self._lock:
            if not self._has_room(spans):
                return False
            self._reserved += spans
            return True

    def _unreserve(self, spans: int) -> None:
        with self._lock:
            self._reserved -= spans

    # --- the spool ---------------------------------------------------------------------------------------

    def _exported(self, spans: Sequence[ReadableSpan], ok: bool | None) -> None:
        """A batch going out is marked in the spool; the next hop's answer for it: forwarded spans leave the
        spool; a batch its exporter gave up on is handed to it again after `RESEND_DELAY` (the spans are
        still stored, so a crash meanwhile loses nothing either)."""
        assert self._spool is not None
        if ok is None:
            self._spool.sending(_key(span) for span in spans)
        elif ok:
            self._spool.forwarded(_key(span) for span in spans)
        else:
            self._spool.sending((_key(span) for span in spans), False)
            if not self._closing:
                self._resend.append((time.monotonic() + RESEND_DELAY, spans))

    def _run_spool(self) -> None:
        try:
            self._replay()
        except Exception:
            logger.exception("ragtrace gateway: replaying the spool failed; the rest is replayed at the next start")
        while not self._pump_stop.wait(0.1):
            try:
                self._resend_due()
            except Exception:
                logger.exception("ragtrace gateway: sending spans again failed")

    def _wait_for_room(self, spans: int) -> bool:
        while not self._reserve(spans):
            if self._pump_stop.wait(0.05):
                return False
        return True

    def _replay(self) -> None:
        """Hand the spool's spans on as they arrived: to scoring while their trace is within `score_deadline`
        of its arrival, else forwarded with `ragtrace.eval.status = timeout`, `ragtrace.eval.error =
        gateway_restarted` on the retrieval spans of sampled traces."""
        assert self._spool is not None
        deadline = self.processor.scoring.options.score_deadline
        for stored in self._spool.stored():
            request = ExportTraceServiceRequest.FromString(stored.body)
            spans = [span for span in received_spans(request) if _key(span) in stored.pending]
            if not self._wait_for_room(len(spans)):
                return
            late = time.time() - stored.received >= deadline
            try:
                if late:
                    self._forward_late(spans)
                else:
                    for span in spans:
                        self._settler.on_end(span)
            finally:
                self._unreserve(len(spans))
            with self._lock:
                self._replayed += len(spans)
                self._maybe_delivered += len(stored.sending)
                if late:
                    self._replayed_late += len(spans)
        if self._replayed:
            logger.info(
                "ragtrace gateway: replayed %d spans from the spool (%d past the score deadline, forwarded "
                "with status timeout / gateway_restarted; %d were being exported when the gateway stopped, "
                "so the next hop may get them twice)", self._replayed, self._replayed_late, self._maybe_delivered,
            )

    def _forward_late(self, spans: list[ReadableSpan]) -> None:
        """Spans whose score deadline passed while the gateway was down: forwarded now, each retrieval span
        of a trace that may be sampled saying why it has no score (on the worker, like every release)."""
        scoring = self.processor.scoring
        pipeline = scoring.pipeline
        sampled = [s for s in spans if s.context is not None and self._sampler.might_sample(s.context.trace_id)]
        others = [s for s in spans if s.context is None or not self._sampler.might_sample(s.context.trace_id)]

        def release() -> None:
            pipeline.emit(others if scoring.options.enrich else spans)  # link mode: the evaluation spans only
            pipeline.emit_not_judged(sampled, REPLAYED_LATE)

        if not scoring.worker.call(release, timeout=30.0):
            logger.warning("ragtrace gateway: the scoring worker did not take %d replayed spans in 30 s", len(spans))

    def _resend_due(self) -> None:
        while self._resend and self._resend[0][0] <= time.monotonic():
            spans = self._resend[0][1]
            if not self._reserve(len(spans)):
                return
            self._resend.popleft()
            try:
                for span in spans:
                    self._exporting.on_end(span)
            finally:
                self._unreserve(len(spans))

    def health(self) -> dict[str, Any]:
        """What `GET /healthz` answers: liveness plus the in-flight state an operator sizes by."""
        with self._lock:
            received, rejected, refused, requests = self._received, self._rejected, self._refused, self._requests
            replayed, replayed_late, maybe_delivered = self._replayed, self._replayed_late, self._maybe_delivered
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
        if self._spool is not None:
            health["spool"] = {
                **self._spool.stats(),
                "replayed_spans": replayed,
                "replayed_late_spans": replayed_late,
                # Replayed spans whose export batch was out when the gateway stopped: duplicates if the
                # next hop had taken it (at least once), counted here since the gateway cannot know.
                "replayed_maybe_delivered_spans": maybe_delivered,
                "resending_spans": sum(len(spans) for _, spans in list(self._resend)),
            }
        return health

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
        self._pump_stop.set()
        if self._pump is not None:
            self._pump.join(5.0)
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


def _key(span: ReadableSpan) -> bytes:
    ctx = span.context
    assert ctx is not None  # received spans all have valid ids
    return span_key(ctx.trace_id, ctx.span_id)


def request_of(spans: list[ReadableSpan]) -> ExportTraceServiceRequest:
    """SDK spans as one OTLP request, encoded by the SDK's own exporter encoder (tests and the bench)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    request: ExportTraceServiceRequest = encode_spans(spans)
    return request


__all__ = ["Gateway", "request_of"]
