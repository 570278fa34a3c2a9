"""The gateway's next hop: the SDK's OTLP exporter behind a BatchSpanProcessor sized for a gateway."""

from __future__ import annotations

import os

from opentelemetry.sdk.trace.export import BatchSpanProcessor

from ragtrace.live.otlp import otlp_span_exporter


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


__all__ = ["otlp_exporting"]
