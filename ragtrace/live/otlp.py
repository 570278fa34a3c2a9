"""OTLP exporters configured the way the SDK's env vars say: one place for the protocol and endpoint rules.

Used where ragtrace itself must create an exporter: `install()` on a provider with no processor, the demo,
and the gateway's next hop (spans and ragtrace's own metrics).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace.export import SpanExporter

from ragtrace._logs import ragtrace_logger
from ragtrace._sdk import metric_exporter_preferences

if TYPE_CHECKING:
    import requests

logger = ragtrace_logger(__name__)


def otlp_target(signal: str, endpoint: str | None, protocol: str | None) -> tuple[str, str | None]:
    """Protocol and endpoint for one signal (`traces`, `metrics`), with the OTLP env vars as fallback.

    An http/protobuf endpoint given as a base URL (as OTEL_EXPORTER_OTLP_ENDPOINT is) gets the signal's
    path; None leaves the endpoint to the exporter, which reads the env vars itself.
    """
    resolved = (
        protocol
        or os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    ).strip()
    if resolved not in ("grpc", "http/protobuf"):
        raise ValueError(f"exporter protocol must be 'grpc' or 'http/protobuf', got {resolved!r}")
    if resolved == "http/protobuf" and endpoint is not None and "/v1/" not in endpoint:
        endpoint = endpoint.rstrip("/") + f"/v1/{signal}"
    return resolved, endpoint


def otlp_span_exporter(endpoint: str | None = None, protocol: str | None = None) -> SpanExporter:
    protocol, endpoint = otlp_target("traces", endpoint, protocol)
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter(endpoint=endpoint)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter(endpoint=endpoint)


def otlp_meter_provider(endpoint: str | None = None, protocol: str | None = None) -> MeterProvider:
    """ragtrace's own metrics (scores, decisions, judge cost, drift) exported over OTLP."""
    return MeterProvider(metric_readers=[PeriodicExportingMetricReader(otlp_metrics_outlet(endpoint, protocol))])


def otlp_metrics_outlet(endpoint: str | None = None, protocol: str | None = None) -> MetricsOutlet:
    """The OTLP metric exporter for ragtrace's own metrics. An endpoint that does not take metrics (a
    traces-only backend such as Phoenix) is said once, then no longer sent to."""
    protocol, endpoint = otlp_target("metrics", endpoint, protocol)
    watch = _RefusalWatch()
    exporter: MetricExporter
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics

        exporter = GrpcMetrics(endpoint=endpoint)
        logging.getLogger("opentelemetry.exporter.otlp.proto.grpc.exporter").addFilter(watch)
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics

        exporter = HttpMetrics(endpoint=endpoint, session=watch.session())
    where = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT") or "the SDK's default endpoint"
    return MetricsOutlet(exporter, watch, where)


class _RefusalWatch(logging.Filter):
    """Notices that the metrics endpoint refused the metrics service itself (HTTP 404 / 405 / 501, gRPC
    UNIMPLEMENTED): a backend that takes traces only. HTTP: from the response status, through the
    exporter's `session`. gRPC: from the status the SDK's exporter logs (its only report of the code);
    after the first refusal its repeated error lines are dropped."""

    REFUSING_HTTP = frozenset({404, 405, 501})

    def __init__(self) -> None:
        super().__init__()
        self.refusal: str | None = None

    def session(self) -> requests.Session:
        """A requests session for the HTTP exporter that notes a refusing status (a response hook)."""
        import requests

        session = requests.Session()
        session.hooks["response"].append(self._response)
        return session

    def _response(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        if response.status_code in self.REFUSING_HTTP:
            self.refusal = f"HTTP {response.status_code} {response.reason}"

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if "metrics" not in args:
            return True
        if any(getattr(arg, "name", None) == "UNIMPLEMENTED" for arg in args):
            first = self.refusal is None
            self.refusal = "gRPC UNIMPLEMENTED"
            return first
        return True


class MetricsOutlet(MetricExporter):
    """The metric exporter behind ragtrace's own metrics: once the endpoint has refused the metrics service,
    one clear warning and no more exports (every batch would fail the same way)."""

    def __init__(self, exporter: MetricExporter, watch: _RefusalWatch, where: str) -> None:
        temporality, aggregation = metric_exporter_preferences(exporter)
        super().__init__(preferred_temporality=temporality, preferred_aggregation=aggregation)
        self.exporter = exporter
        self._watch = watch
        self._where = where
        self.off = False

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        if self.off:
            return MetricExportResult.SUCCESS
        result = self.exporter.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        if result is MetricExportResult.FAILURE and self._watch.refusal is not None:
            self.off = True
            logger.warning(
                "ragtrace: %s does not take OTLP metrics (%s): probably a traces-only backend such as Phoenix. "
                "ragtrace's own metrics are off from now on; send them to a metrics receiver with "
                "--metrics-endpoint URL (RAGTRACE_GATEWAY_METRICS_ENDPOINT), or turn them off with "
                "--metrics-endpoint none (or OTEL_METRICS_EXPORTER=none)",
                self._where, self._watch.refusal,
            )
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.off or self.exporter.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.exporter.shutdown(timeout_millis=timeout_millis, **kwargs)
