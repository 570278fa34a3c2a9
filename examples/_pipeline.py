"""The OpenTelemetry wiring every example shares, so each example file shows only its producer.

A TracerProvider exports to memory (so the example can print what it scored) and, given an endpoint,
over OTLP/gRPC as a real app would. ragtrace scores every trace (sample_rate=1.0) before either exporter
sees it: `install` puts the scoring processor in front of both processors (placement="processor"), or
`scoring_batch_processor` scores behind the SDK's batching, in front of both exporters
(placement="exporter").
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm must not fetch its price list

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragtrace.capture import extract_samples
from ragtrace.judges.base import Judge
from ragtrace.live import install, scoring_batch_processor

SCORE_SUFFIX = ".score"


Placement = Literal["processor", "exporter"]


class _Both(SpanExporter):
    """One exporter for two: the example's memory and OTLP."""

    def __init__(self, *exporters: SpanExporter) -> None:
        self.exporters = exporters

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        results = [exporter.export(spans) for exporter in self.exporters]
        ok = all(result is SpanExportResult.SUCCESS for result in results)
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all([exporter.force_flush(timeout_millis) for exporter in self.exporters])

    def shutdown(self) -> None:
        for exporter in self.exporters:
            exporter.shutdown()


def scored_provider(
    service: str, *, endpoint: str | None = None, judge: str | Judge = "local", placement: Placement = "processor"
) -> tuple[TracerProvider, InMemorySpanExporter]:
    """A provider whose every trace is scored by `judge` before it is exported (to memory, and to OTLP)."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    memory = InMemorySpanExporter()
    otlp = OTLPSpanExporter(endpoint=endpoint, insecure=True) if endpoint else None
    if placement == "exporter":
        exporter = _Both(memory, otlp) if otlp is not None else memory
        provider.add_span_processor(scoring_batch_processor(
            exporter, judge=judge, sample_rate=1.0, batch_options={"schedule_delay_millis": 50}
        ))
        return provider, memory
    provider.add_span_processor(SimpleSpanProcessor(memory))
    if otlp is not None:
        provider.add_span_processor(BatchSpanProcessor(otlp, schedule_delay_millis=50))
    install(provider, judge=judge, sample_rate=1.0)
    return provider, memory


def report(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """What ragtrace read from the trace and the scores it wrote onto the exported retrieval span."""
    [result] = report_all(spans)
    return result


def report_all(spans: Sequence[ReadableSpan]) -> list[dict[str, Any]]:
    """`report` for a trace with several retrievals: one result per sample, in retrieval order."""
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    results = []
    for captured in extract_samples(spans):
        scored = by_id[captured.retrieval_span_id]
        generation = by_id.get(captured.generation_span_id or 0)
        attrs = dict(scored.attributes or {})
        result = {
            "convention": captured.convention,
            "retrieval_span": scored.name,
            "retrieval_span_id": captured.retrieval_span_id,
            "generation_span": generation.name if generation is not None else None,
            "pairing": captured.pairing,
            "query": captured.sample.query,
            "contexts": captured.sample.context_texts,
            "response": captured.sample.response,
            "status": attrs.get("ragtrace.eval.status"),
            "scores": {
                key.removeprefix("ragtrace.").removesuffix(SCORE_SUFFIX): value
                for key, value in attrs.items()
                if key.startswith("ragtrace.") and key.endswith(SCORE_SUFFIX)
            },
        }
        print(f"[{result['convention']}] {result['retrieval_span']!r}: {result['status']}")
        print(f"  query:    {result['query']}")
        for rank, text in enumerate(result["contexts"], 1):
            print(f"  context {rank}: {text}")
        print(f"  response: {result['response']}  (from {result['generation_span']!r}, paired by {result['pairing']})")
        for name, score in result["scores"].items():
            print(f"  {name:18} {score:.2f}  {attrs.get(f'ragtrace.{name}.label')}")
        results.append(result)
    return results


def finish(provider: TracerProvider, memory: InMemorySpanExporter) -> dict[str, Any]:
    """Flush (scoring what is held), report, shut down."""
    [result] = finish_all(provider, memory)
    return result


def finish_all(provider: TracerProvider, memory: InMemorySpanExporter) -> list[dict[str, Any]]:
    """`finish` for a trace with several retrievals."""
    try:
        provider.force_flush(30_000)
        return report_all(memory.get_finished_spans())
    finally:
        provider.shutdown()
