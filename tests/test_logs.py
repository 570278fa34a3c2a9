"""ragtrace's loggers rate-limit repeated lines (`ragtrace._logs.RepeatFilter`), as the OTel SDK does on its
export path: a failing exporter behind a real pipeline is logged once per window, not once per tick."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from ragtrace._logs import REPEAT_WINDOW_S, RepeatFilter, ragtrace_logger
from ragtrace.live.exporter import RagScoringSpanExporter, ScoringBatchSpanProcessor
from ragtrace.live.sampling import Sampler
from tests.live.fakes import CountingExporter, ScriptedJudge, provider_with, rag_trace


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _record(msg: str, *args: object, level: int = logging.WARNING, name: str = "ragtrace.x") -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_a_repeat_is_dropped_for_a_window_and_counted_when_the_next_one_goes_through() -> None:
    clock = Clock()
    repeats = RepeatFilter(window=20.0, clock=clock)
    assert repeats.filter(_record("export of %d spans failed", 5))
    assert [repeats.filter(_record("export of %d spans failed", n)) for n in range(4)] == [False] * 4
    assert repeats.filter(_record("export of %d spans failed", 5, level=logging.ERROR))  # another level
    assert repeats.filter(_record("another line"))
    assert repeats.filter(_record("export of %d spans failed", 5, name="ragtrace.y"))  # another logger
    clock.now += 20.0
    through = _record("export of %d spans failed", 7)
    assert repeats.filter(through)
    assert through.getMessage() == "export of 7 spans failed [4 more like this in the last 20 s not logged]"
    assert not repeats.filter(_record("export of %d spans failed", 8))


def test_each_ragtrace_logger_carries_the_filter_once() -> None:
    first = ragtrace_logger("ragtrace.test_logs")
    again = ragtrace_logger("ragtrace.test_logs")
    assert first is again and len(first.filters) == 1


class FailingExporter(CountingExporter):
    """The next hop is down: every export fails."""

    def __init__(self, raises: bool) -> None:
        super().__init__()
        self.raises = raises
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.failed += 1
        if self.raises:
            raise ConnectionError("collector gone")
        return SpanExportResult.FAILURE


@pytest.mark.parametrize("raises", [True, False])
def test_a_failing_exporter_under_a_real_pipeline_is_logged_once_per_window(
    raises: bool, caplog: pytest.LogCaptureFixture
) -> None:
    out = FailingExporter(raises)
    scoring = RagScoringSpanExporter(out, judge=ScriptedJudge(), sampler=Sampler(rate=1.0), tick_interval=0.01)
    provider = provider_with(ScoringBatchSpanProcessor(scoring, schedule_delay_millis=10))
    tracer = provider.get_tracer("t")
    with caplog.at_level(logging.WARNING, logger="ragtrace"):
        for _ in range(12):  # each flush is at least one more failed export
            rag_trace(tracer)
            provider.force_flush(5000)
    provider.shutdown()
    said = "the wrapped exporter raised" if raises else "failed to export"
    lines = [r for r in caplog.records if said in r.getMessage()]
    assert out.failed >= 12, out.failed
    assert len(lines) == 1, [r.getMessage() for r in lines]  # the test runs well within REPEAT_WINDOW_S
    assert REPEAT_WINDOW_S == 20.0
    assert scoring.decisions.get("scored") == 24  # scoring went on: 12 traces x precision and relevance
