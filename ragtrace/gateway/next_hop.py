"""The gateway's next hop: the SDK's OTLP exporter behind a BatchSpanProcessor sized for a gateway."""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from urllib.parse import urlsplit

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult

from ragtrace._logs import ragtrace_logger
from ragtrace._sdk import batch_queue_room, set_batch_exporter
from ragtrace.live.otlp import otlp_span_exporter, otlp_target

logger = ragtrace_logger("ragtrace.gateway.next_hop")

# Told, after each export, which spans the next hop accepted (True) or did not (False); and, before it,
# which spans are about to go (None).
ExportListener = Callable[[Sequence[ReadableSpan], bool | None], None]

_WILDCARDS = ("", "0.0.0.0", "::")


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


class ObservedExporter(SpanExporter):
    """An exporter that tells `listener` what became of each batch: the next hop's answer, not the handing on."""

    def __init__(self, exporter: SpanExporter, listener: ExportListener) -> None:
        self.exporter = exporter
        self._listener = listener

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._tell(spans, None)
        try:
            result = self.exporter.export(spans)
        except Exception:
            logger.exception("ragtrace gateway: the next hop's exporter failed")
            result = SpanExportResult.FAILURE
        self._tell(spans, result is SpanExportResult.SUCCESS)
        return result

    def _tell(self, spans: Sequence[ReadableSpan], outcome: bool | None) -> None:
        try:
            self._listener(spans, outcome)
        except Exception:
            logger.exception("ragtrace gateway: recording an export's outcome failed")

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.exporter.force_flush(timeout_millis)


class NextHop(SpanProcessor):
    """The next hop with its outcomes counted: spans handed on, forwarded (the next hop answered success)
    and failed (its exporter gave up on them: lost, unless the spool sends them again).

    `observed` is False when the exporting processor keeps its exporter where this cannot see it (a
    processor other than the SDK's batch or simple one): then `forwarded` counts the spans handed on.
    """

    def __init__(self, processor: SpanProcessor) -> None:
        self.processor = processor
        self._lock = threading.Lock()
        self._listeners: list[ExportListener] = []
        self.handed = 0
        self.forwarded = 0
        self.failed = 0
        self._failure_said = False
        self.observed = _observe(processor, self._exported)

    def listen(self, listener: ExportListener) -> None:
        """Also tell `listener` each export's outcome (the spool deletes what was forwarded)."""
        self._listeners.append(listener)

    def _exported(self, spans: Sequence[ReadableSpan], ok: bool | None) -> None:
        if ok is None:  # about to be sent
            for listener in self._listeners:
                listener(spans, None)
            return
        with self._lock:
            if ok:
                self.forwarded += len(spans)
            else:
                self.failed += len(spans)
                first, self._failure_said = not self._failure_said, True
        if not ok:
            (logger.warning if first else logger.debug)(
                "ragtrace gateway: the next hop did not take %d spans (its exporter gave up); /healthz "
                "counts them as failed_spans", len(spans),
            )
        for listener in self._listeners:
            listener(spans, ok)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.processor.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        self.processor.on_end(span)
        with self._lock:
            self.handed += 1
            if not self.observed:
                self.forwarded += 1

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.processor.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.processor.shutdown()

    def room(self) -> tuple[int, int] | None:
        """(free places, size) of the next hop's span queue; None when it has none we know of."""
        room = batch_queue_room(self.processor)
        return None if room is None else room[:2]

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {
                "handed": self.handed, "forwarded": self.forwarded, "failed": self.failed,
                "exporting": max(self.handed - self.forwarded - self.failed, 0),
            }


def _observe(processor: SpanProcessor, listener: ExportListener) -> bool:
    """Put an `ObservedExporter` in front of the exporter of the SDK's batch or simple span processor."""
    if isinstance(processor, BatchSpanProcessor):
        try:
            set_batch_exporter(processor, ObservedExporter(processor.span_exporter, listener))
        except (AttributeError, TypeError):
            return False
        return True
    if isinstance(processor, SimpleSpanProcessor):
        processor.span_exporter = ObservedExporter(processor.span_exporter, listener)
        return True
    return False


def next_hop_url(endpoint: str | None = None, protocol: str | None = None) -> str:
    """The traces endpoint the SDK's exporter will send to, resolved as the exporter resolves it."""
    protocol, endpoint = otlp_target("traces", endpoint, protocol)
    if endpoint:
        return endpoint
    if protocol == "grpc":
        return (
            os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or "http://localhost:4317"
        )
    if traces := os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return traces
    if base := os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return base.rstrip("/") + "/v1/traces"
    return "http://localhost:4318/v1/traces"


def _host_port(url: str, protocol: str) -> tuple[str, int]:
    """Host and port of an endpoint; a gRPC endpoint may come without a scheme (`localhost:4317`)."""
    parts = urlsplit(url if "//" in url else "//" + url)
    default = 4317 if protocol == "grpc" else (443 if parts.scheme == "https" else 80)
    return parts.hostname or "localhost", parts.port or default


def _addresses(host: str, port: int) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return set()
    found: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        found.add(address)
    return found


def _reaches(listen_host: str, target: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> bool:
    """Whether a connection to `target` lands on a socket listening on `listen_host`."""
    if listen_host in _WILDCARDS:
        # Bound to every interface: any address of this machine reaches it, 0.0.0.0 included.
        local = _addresses(socket.gethostname(), port)
        return target.is_loopback or target.is_unspecified or target in local
    listening = _addresses(listen_host, port)
    if target.is_unspecified:  # connecting to 0.0.0.0 / :: means this host's loopback
        return any(address.is_loopback for address in listening)
    return target in listening


def refuse_self_forwarding(
    endpoint: str | None, protocol: str | None, listen_host: str, listen_ports: Iterable[int]
) -> None:
    """ValueError when the next hop is one of the gateway's own listening addresses.

    Forwarding to itself loops: every request comes back, is forwarded again and multiplies. The check
    compares resolved addresses, so `localhost`, `127.0.0.1`, `::1` and `0.0.0.0` count as the same host.
    """
    resolved_protocol, _ = otlp_target("traces", endpoint, protocol)
    url = next_hop_url(endpoint, protocol)
    host, port = _host_port(url, resolved_protocol)
    if port not in set(listen_ports):
        return
    if any(_reaches(listen_host, target, port) for target in _addresses(host, port)):
        raise ValueError(
            f"the next hop {url} is this gateway's own listening address ({listen_host}:{port}): it would "
            "forward every span to itself. Point --exporter-endpoint (or OTEL_EXPORTER_OTLP_ENDPOINT) at the "
            "collector or backend that receives the scored traces, or listen on other ports."
        )


__all__ = [
    "ExportListener", "NextHop", "ObservedExporter", "next_hop_url", "otlp_exporting", "refuse_self_forwarding",
]
