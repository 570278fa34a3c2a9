"""OTLP exporters configured the way the SDK's env vars say: one place for the protocol and endpoint rules.

Used where ragtrace itself must create an exporter: `install()` on a provider with no processor, the demo,
and the gateway's next hop (spans and ragtrace's own metrics).
"""

from __future__ import annotations

import os

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.trace.export import SpanExporter


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
    protocol, endpoint = otlp_target("metrics", endpoint, protocol)
    exporter: MetricExporter
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics

        exporter = GrpcMetrics(endpoint=endpoint)
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics

        exporter = HttpMetrics(endpoint=endpoint)
    return MeterProvider(metric_readers=[PeriodicExportingMetricReader(exporter)])
