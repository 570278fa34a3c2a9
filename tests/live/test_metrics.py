"""The metrics table, read back from the SDK's InMemoryMetricReader and from a real OTLP export."""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.metrics.view import DropAggregation, View

from ragtrace.live.metrics import DURATION_BUCKETS, SCORE_BUCKETS, SCORE_SERIES_KEYS, RagtraceMetrics, views
from ragtrace.scoring import JudgeUsage, ScoreResult
from tests.servers.otlp import OtlpReceiver

MODEL = "openai/gpt-4o-mini"


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def rt(reader: InMemoryMetricReader) -> RagtraceMetrics:
    return RagtraceMetrics(MeterProvider(metric_readers=[reader]))


def collect(reader: InMemoryMetricReader) -> dict[str, tuple[Any, list[Any]]]:
    """name -> (metric, data points), from one collection."""
    out: dict[str, tuple[Any, list[Any]]] = {}
    data = reader.get_metrics_data()
    if data is None:
        return out
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            assert sm.scope.name == "ragtrace"
            for metric in sm.metrics:
                out[metric.name] = (metric, list(metric.data.data_points))
    return out


def by_attrs(points: list[Any]) -> dict[frozenset[tuple[str, Any]], Any]:
    return {frozenset(p.attributes.items()): p for p in points}


def test_decisions_counter(rt: RagtraceMetrics, reader: InMemoryMetricReader) -> None:
    rt.decision("scored")
    rt.decision("scored", 2)
    rt.decision("not_sampled")
    metric, points = collect(reader)["ragtrace.evaluation.decisions"]
    assert metric.data.is_monotonic
    values = {p.attributes["decision"]: p.value for p in points}
    assert values == {"scored": 3, "not_sampled": 1}


def test_score_histogram(rt: RagtraceMetrics, reader: InMemoryMetricReader) -> None:
    rt.score(ScoreResult(name="context_precision", score=0.83, label="pass"), "docs")
    rt.score(ScoreResult(name="context_precision", score=0.95, label="pass"), "docs")
    rt.score(ScoreResult(name="context_precision", score=0.05, label="fail"), "docs")
    rt.score(ScoreResult(name="context_recall", skipped="no_ground_truth"), "docs")  # not recorded
    rt.score(ScoreResult(name="context_relevance", error="judge_timeout"), "docs")  # not recorded
    metric, points = collect(reader)["ragtrace.evaluation.score"]
    assert metric.unit == "1"
    pts = by_attrs(points)
    key = {
        ("gen_ai.evaluation.name", "context_precision"),
        ("ragtrace.label", "pass"),
        ("ragtrace.retriever", "docs"),
    }
    passed = pts[frozenset(key)]
    assert isinstance(passed, HistogramDataPoint)
    assert tuple(passed.explicit_bounds) == SCORE_BUCKETS
    assert passed.count == 2 and passed.sum == pytest.approx(1.78)
    # 0.83 falls in (0.8, 0.9], 0.95 in (0.9, 1.0]
    assert list(passed.bucket_counts) == [0] * 8 + [1, 1, 0]
    failed = [p for p in points if p.attributes["ragtrace.label"] == "fail"]
    assert len(failed) == 1 and failed[0].bucket_counts[0] == 1
    assert len(points) == 2  # the skipped and errored results recorded nothing
    for p in points:  # never a raw score as an attribute value
        assert not any(isinstance(v, float) for v in p.attributes.values())


def test_judge_call(rt: RagtraceMetrics, reader: InMemoryMetricReader) -> None:
    rt.judge_call(JudgeUsage(calls=1, input_tokens=100, output_tokens=20, cost_usd=0.001, model=MODEL), "ok", 0.5)
    rt.judge_call(JudgeUsage(calls=1, input_tokens=50, output_tokens=5, cost_usd=None, model=MODEL), "ok", 1.5)
    rt.judge_call(JudgeUsage(calls=1, model=MODEL), "timeout", 30.0)
    got = collect(reader)
    tokens = {p.attributes["type"]: p.value for p in got["ragtrace.judge.tokens"][1]}
    assert tokens == {"input": 150, "output": 25}
    assert {p.attributes["gen_ai.request.model"] for p in got["ragtrace.judge.tokens"][1]} == {MODEL}
    cost_metric, cost_points = got["ragtrace.judge.cost"]
    assert cost_metric.unit == "USD"
    (cost,) = cost_points
    assert cost.value == pytest.approx(0.001) and cost.attributes == {"gen_ai.request.model": MODEL}
    duration_metric, duration_points = got["ragtrace.judge.duration"]
    assert duration_metric.unit == "s"
    durations = {p.attributes["outcome"]: p for p in duration_points}
    assert durations["ok"].count == 2 and durations["ok"].sum == pytest.approx(2.0)
    assert durations["timeout"].count == 1
    assert tuple(durations["ok"].explicit_bounds) == DURATION_BUCKETS


def test_gauges(rt: RagtraceMetrics, reader: InMemoryMetricReader) -> None:
    got = collect(reader)
    assert not got.get("ragtrace.queue.depth", (None, []))[1]  # nothing registered yet: no points
    depth = [5]
    rt.observe(lambda: depth[0], lambda: 7)
    got = collect(reader)
    (q,) = got["ragtrace.queue.depth"][1]
    (h,) = got["ragtrace.spans.held"][1]
    assert isinstance(q, NumberDataPoint) and q.value == 5 and h.value == 7
    depth[0] = 2
    (q,) = collect(reader)["ragtrace.queue.depth"][1]
    assert q.value == 2


def test_a_failing_gauge_source_costs_only_its_point(
    rt: RagtraceMetrics, reader: InMemoryMetricReader, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> int:
        raise RuntimeError("queue gone")

    rt.observe(broken, lambda: 4)
    rt.decision("scored")
    with caplog.at_level(logging.WARNING, logger="ragtrace.live.metrics"):
        got = collect(reader)
        collect(reader)
    assert got["ragtrace.spans.held"][1][0].value == 4
    assert not got.get("ragtrace.queue.depth", (None, []))[1]
    assert got["ragtrace.evaluation.decisions"][1][0].value == 1
    assert len([r for r in caplog.records if "queue_depth" in r.getMessage()]) == 1  # logged once


def test_sdk_errors_are_swallowed_and_logged_once(
    rt: RagtraceMetrics, reader: InMemoryMetricReader, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ragtrace.live.metrics"):
        rt.decision("scored", n="three")  # type: ignore[arg-type]  # the SDK raises TypeError comparing it
        rt.decision("scored", n="three")  # type: ignore[arg-type]
        rt.judge_call(None, "ok", 1.0)  # type: ignore[arg-type]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("decision failed" in m for m in messages) == 1
    assert sum("judge_call failed" in m for m in messages) == 1
    rt.decision("scored")
    assert collect(reader)["ragtrace.evaluation.decisions"][1][0].value == 1


def test_broken_provider_falls_back_to_noop(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(MeterProvider):
        def get_meter(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("no meters today")

    with caplog.at_level(logging.WARNING, logger="ragtrace.live.metrics"):
        rt = RagtraceMetrics(Broken())
    rt.decision("scored")
    rt.score(ScoreResult(name="context_precision", score=0.5, label="pass"), "docs")
    assert any("setup failed" in r.getMessage() for r in caplog.records)


SESSION_KEY = "ragtrace.session.id"


def _scored_with_session(provider_views: list[View], session_exemplars: bool) -> tuple[RagtraceMetrics, list[Any]]:
    reader = InMemoryMetricReader()
    rt = RagtraceMetrics(MeterProvider(metric_readers=[reader], views=provider_views),
                         session_exemplars=session_exemplars)
    for session in ("chat-1", "chat-2", "chat-3"):
        rt.score(ScoreResult(name="context_precision", score=0.8, label="pass"), "docs", (7, 9), session)
    return rt, collect(reader)["ragtrace.evaluation.score"][1]


def test_views_put_the_session_on_exemplars_and_keep_the_series() -> None:
    rt, points = _scored_with_session(views(), session_exemplars=True)
    assert rt.session_exemplars
    (point,) = points  # one series for three sessions
    assert set(point.attributes) == {"gen_ai.evaluation.name", "ragtrace.retriever", "ragtrace.label"}
    assert tuple(point.explicit_bounds) == SCORE_BUCKETS  # the view keeps the instrument's buckets
    assert {e.filtered_attributes[SESSION_KEY] for e in point.exemplars} <= {"chat-1", "chat-2", "chat-3"}
    assert point.exemplars and all((e.trace_id, e.span_id) == (7, 9) for e in point.exemplars)


def test_each_score_is_the_exemplar_of_its_own_span_when_spans_alternate() -> None:
    """Scores of one span in a row share an exemplar context; a score of another span never reuses it."""
    reader = InMemoryMetricReader()
    rt = RagtraceMetrics(MeterProvider(metric_readers=[reader]))
    spans = [(7, 9), (7, 9), (8, 10), (7, 9), (8, 11)]
    for n, span in enumerate(spans):
        rt.record_score(f"scorer_{n}", 0.5, None, None, "docs", span)
    rt.record_score("unlinked", 0.5, None, None, "docs", None)
    points = collect(reader)["ragtrace.evaluation.score"][1]
    by_scorer = {p.attributes["gen_ai.evaluation.name"]: p for p in points}
    for n, span in enumerate(spans):
        assert [(e.trace_id, e.span_id) for e in by_scorer[f"scorer_{n}"].exemplars] == [span]
    assert not by_scorer["unlinked"].exemplars  # no span: the trace-based filter keeps no exemplar


# Each way a provider could end up with a series per session: the option then records no session at all.
UNSAFE_VIEWS = {
    "no view": [],
    "a view keeping every attribute": [View(instrument_name="ragtrace.evaluation.score", description="mine")],
    "a view naming the session": [
        View(instrument_name="ragtrace.*", attribute_keys={*SCORE_SERIES_KEYS, SESSION_KEY})
    ],
    "ragtrace's view and another keeping all": [*views(), View(meter_name="ragtrace")],
}


@pytest.mark.parametrize("provider_views", UNSAFE_VIEWS.values(), ids=UNSAFE_VIEWS.keys())
def test_session_exemplars_without_safe_views_record_no_session(
    provider_views: list[View], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ragtrace.live.metrics"):
        rt, points = _scored_with_session(provider_views, session_exemplars=True)
    assert not rt.session_exemplars
    assert any("views=ragtrace.metric_views()" in r.getMessage() for r in caplog.records)
    assert points and all(SESSION_KEY not in p.attributes for p in points)
    assert all(not e.filtered_attributes for p in points for e in p.exemplars)


def test_a_dropped_score_stream_is_safe_and_the_option_is_off_by_default() -> None:
    rt = RagtraceMetrics(MeterProvider(views=[*views(), View(instrument_name="ragtrace.evaluation.score",
                                                              aggregation=DropAggregation())]),
                         session_exemplars=True)
    assert rt.session_exemplars
    off, points = _scored_with_session(views(), session_exemplars=False)
    assert not off.session_exemplars
    assert all(not e.filtered_attributes for p in points for e in p.exemplars)


def test_a_provider_that_is_not_the_sdks_records_no_session(caplog: pytest.LogCaptureFixture) -> None:
    from opentelemetry.metrics import NoOpMeterProvider

    with caplog.at_level(logging.WARNING, logger="ragtrace.live.metrics"):
        rt = RagtraceMetrics(NoOpMeterProvider(), session_exemplars=True)
    assert not rt.session_exemplars
    assert any("cannot read this MeterProvider's views" in r.getMessage() for r in caplog.records)


def test_attribute_cardinality_is_capped(rt: RagtraceMetrics, reader: InMemoryMetricReader) -> None:
    for i in range(200):
        rt.score(ScoreResult(name="context_precision", score=0.5, label="pass"), f"retriever-{i}")
    rt.score(ScoreResult(name="context_precision", score=0.5, label="pass"), "")
    rt.decision("x" * 500)
    got = collect(reader)
    retrievers = {p.attributes["ragtrace.retriever"] for p in got["ragtrace.evaluation.score"][1]}
    assert len(retrievers) == 65 and "other" in retrievers and "retriever-0" in retrievers
    assert {len(p.attributes["decision"]) for p in got["ragtrace.evaluation.decisions"][1]} == {64}


def test_default_is_the_global_provider() -> None:
    code = """
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from ragtrace.live.metrics import RagtraceMetrics
rt = RagtraceMetrics()           # created before the global provider is set: the proxy forwards later
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
rt.decision("throttled", 4)
data = reader.get_metrics_data()
print([p.value for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
       for p in m.data.data_points if m.name == "ragtrace.evaluation.decisions"])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.strip() == "[4]"


def test_exported_over_otlp(otlp_receiver: OtlpReceiver) -> None:
    exporter = OTLPMetricExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True)
    provider = MeterProvider(metric_readers=[PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)])
    rt = RagtraceMetrics(provider)
    rt.observe(lambda: 3, lambda: 9)
    rt.decision("scored", 2)
    rt.score(ScoreResult(name="context_relevance", score=0.26, label="fail"), "kb")
    rt.judge_call(JudgeUsage(calls=1, input_tokens=10, output_tokens=2, cost_usd=0.5, model=MODEL), "ok", 0.3)
    assert provider.force_flush()
    provider.shutdown()
    score = otlp_receiver.wait_for_metric("ragtrace.evaluation.score")
    (point,) = score.data_points
    assert point.attributes == {
        "gen_ai.evaluation.name": "context_relevance",
        "ragtrace.label": "fail",
        "ragtrace.retriever": "kb",
    }
    assert point.explicit_bounds == SCORE_BUCKETS and point.count == 1
    assert point.bucket_counts[2] == 1  # (0.2, 0.3]
    decisions = otlp_receiver.wait_for_metric("ragtrace.evaluation.decisions")
    assert decisions.point_where({"decision": "scored"}).value == 2  # type: ignore[union-attr]
    assert otlp_receiver.wait_for_metric("ragtrace.judge.cost").unit == "USD"
    tokens = otlp_receiver.wait_for_metric("ragtrace.judge.tokens")
    assert tokens.point_where({"type": "output", "gen_ai.request.model": MODEL}).value == 2  # type: ignore[union-attr]
    assert otlp_receiver.wait_for_metric("ragtrace.queue.depth").data_points[0].value == 3
    assert otlp_receiver.wait_for_metric("ragtrace.spans.held").data_points[0].value == 9
    assert otlp_receiver.wait_for_metric("ragtrace.judge.duration").scope_name == "ragtrace"


def test_scores_wait_for_a_provider_set_later_and_then_carry_their_exemplar() -> None:
    """Without a MeterProvider a score builds nothing (no attributes, no exemplar context); once the app sets
    one, the same metrics object records scores with the scored span as exemplar."""
    code = """
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from ragtrace.live.metrics import RagtraceMetrics
rt = RagtraceMetrics()
rt.record_score("context_precision", 0.25, "fail", None, "docs", (7, 9))
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
rt.record_score("context_precision", 0.75, "pass", None, "docs", (7, 9))
points = [p for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics
          for p in m.data.data_points if m.name == "ragtrace.evaluation.score"]
print([(p.count, p.sum, [(e.trace_id, e.span_id) for e in p.exemplars]) for p in points])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[(1, 0.75, [(7, 9)])]"
