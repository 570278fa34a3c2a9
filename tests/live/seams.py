"""Helpers for the unit tests at the live core's seams: real spans from a real tracer, read in memory."""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragtrace.live.enrich import Evaluation
from ragtrace.live.worker import ScoreJob
from ragtrace.scoring import JudgeUsage, ScoreResult
from tests.live.fakes import plain_trace, rag_trace


def ended_spans(build: str = "rag", **kwargs: object) -> list[ReadableSpan]:
    """The spans of one trace, as they ended (`rag`: root, retrieval, chat, a plain step; `plain`: no RAG)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("seams")
    if build == "rag":
        rag_trace(tracer, **kwargs)  # type: ignore[arg-type]
    else:
        plain_trace(tracer)
    provider.shutdown()
    return list(exporter.get_finished_spans())


def span_named(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    return next(s for s in spans if s.name == name)


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


class HandRun:
    """`Jobs` that only keep what they are given; the test reports each job when it chooses."""

    def __init__(self, room: int = 100) -> None:
        self.jobs: list[ScoreJob] = []
        self.room = room

    def submit(self, job: ScoreJob) -> bool:
        if len(self.jobs) >= self.room:
            return False
        self.jobs.append(job)
        return True

    def report_all(self, score: float = 1.0) -> None:
        for job in self.jobs:
            results = tuple(ScoreResult(name=s.name, score=score) for s in job.scorers)
            job.on_done(Evaluation(results, JudgeUsage(calls=1, input_tokens=10, output_tokens=2)), 0.01)
