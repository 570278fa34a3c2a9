"""ragtrace's own network calls (the judge's, the exporter's) record no spans.

Traced, they would enter the pipeline they serve: an instrumented HTTP client under the judge or the
exporter would make spans of ragtrace's calls, and export them, for ever. opentelemetry-api exposes the
keys only as private names; the HTTP one is read by httpx/requests instrumentations, the general one by
everything else (the SDK's BatchSpanProcessor sets it around each export). Both are set.
"""

from __future__ import annotations

from opentelemetry import context as otel_context


def suppress_tracing() -> object:
    """Attach a context in which OTel instrumentations record nothing; `otel_context.detach` the token."""
    ctx = otel_context.set_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY, True)
    ctx = otel_context.set_value(otel_context._SUPPRESS_HTTP_INSTRUMENTATION_KEY, True, ctx)
    return otel_context.attach(ctx)
