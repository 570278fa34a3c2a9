"""The drift monitor: a `DriftDetector` checked on an APScheduler schedule, reported through OpenTelemetry.

Scores reach it through `DriftMetrics`, the `RagtraceMetrics` whose `record_score()` also feeds the monitor, so
the processor needs nothing of its own to be watched. The processor hands `metrics.score` every scored
result and every result skipped for `no_context`: scores feed the drift series, and both feed the
empty-retrieval rate, a gauge `ragtrace.retrieval.empty_rate` per retriever (share of the last `window`
evaluated retrievals that returned no documents). It counts one observation per result: with the same
scorers on every retrieval that is the share of retrievals.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.trace import Link, TracerProvider

from ragtrace._logs import ragtrace_logger
from ragtrace._version import __version__
from ragtrace.live.drift.canary import Canary
from ragtrace.live.drift.detector import DriftConfig, DriftDetector, DriftState, Key
from ragtrace.live.drift.judge_watch import JudgeWatch, attribute
from ragtrace.live.failures import FailureLog
from ragtrace.live.metrics import MetricCall, RagtraceMetrics, ScoredSpan, scored_span_context
from ragtrace.scoring.result import ScoreResult

__all__ = ["DRIFT_INSTRUMENTS", "DRIFT_LINKS", "DriftMetrics", "DriftMonitor"]

logger = ragtrace_logger("ragtrace.drift")

#: The instruments `DriftMonitor` registers (observable gauges on the `ragtrace` meter).
DRIFT_INSTRUMENTS: tuple[str, ...] = (
    "ragtrace.drift.score_delta",
    "ragtrace.drift.detected",
    "ragtrace.retrieval.empty_rate",
)


# One result as the monitor takes it: (scorer, score, skipped, retriever, scored span, judge id).
FedScore = tuple[str, float | None, str | None, str, ScoredSpan | None, str]

#: How many scored spans a drift report links to: the recent ones furthest in the direction of the change.
DRIFT_LINKS = 5


class _RecentSpans:
    """The latest scored spans of each series (as many as the detector's recent window), so that a drift
    report can link to traces that show it. Bounded like the detector: at most `max_series` series."""

    def __init__(self, size: int, max_series: int) -> None:
        self._size, self._max_series = size, max_series
        self._by_series: dict[Key, deque[tuple[float, ScoredSpan]]] = {}
        self._lock = threading.Lock()

    def add_many(self, items: Iterable[tuple[Key, float, ScoredSpan]]) -> None:
        with self._lock:
            by_series = self._by_series
            for key, score, span in items:
                recent = by_series.get(key)
                if recent is None:
                    if len(by_series) >= self._max_series:
                        continue
                    recent = by_series[key] = deque(maxlen=self._size)
                recent.append((score, span))

    def showing(self, key: Key, fell: bool, n: int) -> list[tuple[float, ScoredSpan]]:
        """The `n` recent spans with the lowest scores when the scores fell, the highest when they rose."""
        with self._lock:
            recent = list(self._by_series.get(key, ()))
        return sorted(recent, key=lambda item: item[0], reverse=not fell)[:n]


class DriftMonitor:
    """A DriftDetector checked every `interval` seconds by an APScheduler BackgroundScheduler.

    Each check refreshes the gauges `ragtrace.drift.score_delta`, `ragtrace.drift.detected` and
    `ragtrace.retrieval.empty_rate` (read at the metric reader's pace), and when drift starts or ends
    logs on `ragtrace.drift` and emits a short root span `ragtrace.drift` with an event of the same
    name. When drift starts, the span links to (and the log names) the traces of the recent scores furthest
    in the direction of the change (`DRIFT_LINKS` of them): the alert leads to traces that show it.
    Nothing here raises into the caller: failures are logged once and cost a check.
    """

    def __init__(
        self,
        config: DriftConfig | None = None,
        *,
        interval: float = 30.0,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
        canary: Canary | None = None,
        canary_interval: float = 3600.0,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        if not canary_interval > 0:
            raise ValueError(f"canary_interval must be > 0 seconds, got {canary_interval!r}")
        self.detector = DriftDetector(config)
        self.canary, self.canary_interval = canary, canary_interval
        self._canary_due = canary is not None  # judged at the first check, then on schedule and on changes
        self._closing = False
        self.judges = JudgeWatch(self.detector.config.max_series, on_change=self._judge_changed)
        self._recent = _RecentSpans(self.detector.config.window, self.detector.config.max_series)
        self.interval = interval
        self._states: dict[Key, DriftState] = {}
        self._empty_rates: dict[str, float] = {}
        self._check_lock = threading.Lock()
        self._scheduler: Any = None
        self._causes: dict[tuple[str, str], str] = {}  # (scorer, retriever) -> cause, while drifted
        self._failures = FailureLog(logger, "ragtrace drift", "drift detection may be incomplete")
        self._tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer("ragtrace.drift")
        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        try:
            self._create_instruments(provider)
        except Exception:
            self._failures.failed("setup")

    def _create_instruments(self, provider: MeterProvider) -> None:
        """No unit on the gauges: exporters append "_ratio" for unit "1" to gauges in some paths and not
        in others, and the shipped alert rules must name them the same way whichever path is taken."""
        meter = provider.get_meter("ragtrace", __version__)  # the same meter (scope) as RagtraceMetrics
        meter.create_observable_gauge(
            "ragtrace.drift.score_delta", callbacks=[self._observe_delta], unit="",
            description="Recent mean score minus the frozen baseline mean, per scorer and retriever.",
        )
        meter.create_observable_gauge(
            "ragtrace.drift.detected", callbacks=[self._observe_detected], unit="",
            description="1 while the scores of a scorer and retriever have drifted from their baseline.",
        )
        meter.create_observable_gauge(
            "ragtrace.retrieval.empty_rate", callbacks=[self._observe_empty], unit="",
            description="Share of recent evaluated retrievals that returned no documents, per retriever.",
        )
        if self.canary is not None:
            self.canary.register(meter)

    # -- feeding (scoring worker) --------------------------------------------------------------------

    def observe(self, scorer: str, retriever: str, score: float) -> None:
        self.detector.observe(scorer, retriever, score)

    def observe_retrieval(self, retriever: str, empty: bool) -> None:
        self.detector.observe_retrieval(retriever, empty)

    def feed(self, result: ScoreResult, retriever: str) -> None:
        """One scorer result: a score feeds drift; a score or a `no_context` skip feeds the empty rate."""
        self.feed_value(result.name, result.score, result.skipped, retriever)

    def feed_value(
        self, scorer: str, score: float | None, skipped: str | None, retriever: str,
        scored_span: ScoredSpan | None = None, judge_id: str = "",
    ) -> None:
        """`feed` in plain values; `scored_span` is the span the score was written on, `judge_id` the
        `ragtrace.judge.id` of the judge that gave it (a change is logged once and re-judges the canary)."""
        self.feed_many([(scorer, score, skipped, retriever, scored_span, judge_id)])

    def feed_many(self, fed: Iterable[FedScore]) -> None:
        """`feed_value` for many results at once (a scoring process's answer): one lock for the detector's
        buffers and one for the recent spans, whatever their number."""
        try:
            observations: list[tuple[str, str, float | None]] = []
            recent: list[tuple[Key, float, ScoredSpan]] = []
            for scorer, score, skipped, retriever, scored_span, judge_id in fed:
                if score is not None:
                    self.judges.note((scorer, retriever), judge_id)
                    observations.append((scorer, retriever, score))
                    if scored_span is not None:
                        recent.append(((scorer, retriever), score, scored_span))
                elif skipped == "no_context":
                    observations.append((scorer, retriever, None))
            self.detector.observe_many(observations)
            self._recent.add_many(recent)
        except Exception:
            self._failures.failed("feed")

    # -- checking (scheduler thread) -----------------------------------------------------------------

    def check(self) -> dict[Key, DriftState]:
        """Update every series, the gauges' values, and report drift that started or ended. The canary is
        judged first when it is due, and when drift starts: the report then says whether it moved."""
        with self._check_lock:
            try:
                states = self.detector.check()
                self._states = states
                self._empty_rates = self.detector.empty_rates()
            except Exception:
                self._failures.failed("check")
                return dict(self._states)
        if self._canary_due or any(s.changed and s.detected for s in states.values()):
            self.run_canary()
        for state in states.values():
            if state.changed:
                self._report(state)
        return states

    def run_canary(self) -> None:
        """Judge the canary now (no-op without one); a failure costs this run only."""
        self._canary_due = False
        if self.canary is None or self._closing:
            return
        try:
            self.canary.run()
        except Exception:
            self._failures.failed("canary")

    def _canary_on_schedule(self) -> None:
        self._canary_due = True
        self.check()

    def _judge_changed(self, old: str, new: str) -> None:
        """A new judge id among the scores: the canary is judged again at the next check."""
        self._canary_due = self.canary is not None

    def _report(self, state: DriftState) -> None:
        what = "started" if state.detected else "ended"
        attributes: dict[str, str | float | int] = {
            "gen_ai.evaluation.name": state.scorer,
            "ragtrace.retriever": state.retriever,
            "ragtrace.drift.state": what,
            "ragtrace.drift.detector": state.by or "none",
            "ragtrace.drift.score_delta": round(state.delta, 6),
            "ragtrace.drift.baseline_mean": round(state.baseline_mean, 6),
            "ragtrace.drift.recent_mean": round(state.recent_mean, 6),
            "ragtrace.drift.recent_n": state.recent_n,
        }
        key = (state.scorer, state.retriever)
        self._causes.pop(key, None)
        if state.detected:
            cause, why = attribute(state, self.judges, self.canary)
            attributes["ragtrace.drift.cause"] = cause
            attributes["ragtrace.drift.cause_reason"] = why
            self._causes[key] = cause  # on the detected gauge while it lasts: the alert names it
        showing = self._recent.showing((state.scorer, state.retriever), state.delta < 0, DRIFT_LINKS) if (
            state.detected
        ) else []
        try:
            level = logging.WARNING if state.detected else logging.INFO
            traces = "; traces to open: " + ", ".join(
                f"{trace_id:032x} ({score:.2f})" for score, (trace_id, _) in showing
            ) if showing else ""
            cause = f"; cause: {attributes['ragtrace.drift.cause']} ({attributes['ragtrace.drift.cause_reason']})" if (
                "ragtrace.drift.cause" in attributes
            ) else ""
            logger.log(
                level, "ragtrace drift %s: %s on retriever %s, mean %.3f vs baseline %.3f (delta %+.3f, by %s)%s%s",
                what, state.scorer, state.retriever, state.recent_mean, state.baseline_mean, state.delta,
                state.by or "none", cause, traces, extra={"ragtrace_drift": attributes},
            )
        except Exception:
            self._failures.failed("log")
        try:
            links = [
                Link(scored_span_context(scored), {"gen_ai.evaluation.score.value": score}) for score, scored in showing
            ]
            span = self._tracer.start_span("ragtrace.drift", context=Context(), attributes=attributes, links=links)
            span.add_event("ragtrace.drift", attributes)
            span.end()
        except Exception:
            self._failures.failed("span")

    def start(self) -> DriftMonitor:
        """Run `check` every `interval` seconds on a daemon BackgroundScheduler (idempotent)."""
        if self._scheduler is not None:
            return self
        try:
            from apscheduler.schedulers.background import BackgroundScheduler

            scheduler = BackgroundScheduler(daemon=True)
            scheduler.add_job(
                self.check, "interval", seconds=self.interval, id="ragtrace-drift-check",
                max_instances=1, coalesce=True, misfire_grace_time=max(1, int(self.interval)),
            )
            if self.canary is not None:  # judged at start, then on its own, longer schedule
                scheduler.add_job(
                    self._canary_on_schedule, "interval", seconds=self.canary_interval, id="ragtrace-judge-canary",
                    max_instances=1, coalesce=True, misfire_grace_time=max(1, int(self.canary_interval)),
                    next_run_time=datetime.now(UTC),
                )
            scheduler.start()
            self._scheduler = scheduler
        except Exception:
            self._failures.failed("start")
        return self

    def shutdown(self, wait: bool = True) -> None:
        """Stop the scheduler; a last check reports what arrived since the previous one (without judging
        the canary: shutting down must not wait for judge calls)."""
        self._closing = True
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            try:
                scheduler.shutdown(wait=wait)
            except Exception:
                self._failures.failed("shutdown")
        self.check()

    # -- gauge callbacks (metric reader's thread) ----------------------------------------------------

    def _observe_delta(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(s.delta, {"gen_ai.evaluation.name": s.scorer, "ragtrace.retriever": s.retriever})
            for s in list(self._states.values()) if s.ready
        ]

    def _observe_detected(self, _options: CallbackOptions) -> Iterable[Observation]:
        """1 while drifted, with its cause (`judge`, `retrieval`, `unknown`: three values at most)."""
        causes = dict(self._causes)
        observed = []
        for s in list(self._states.values()):
            if not s.ready:
                continue
            attributes = {"gen_ai.evaluation.name": s.scorer, "ragtrace.retriever": s.retriever}
            if s.detected and (cause := causes.get((s.scorer, s.retriever))) is not None:
                attributes["ragtrace.drift.cause"] = cause
            observed.append(Observation(int(s.detected), attributes))
        return observed

    def _observe_empty(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(rate, {"ragtrace.retriever": r}) for r, rate in list(self._empty_rates.items())]


class DriftMetrics(RagtraceMetrics):
    """RagtraceMetrics that also feed a DriftMonitor: pass it as the processor's `metrics`.

    The pipeline calls `metrics.score(result, retriever)` for every scored result and every result
    skipped for `no_context` (a scoring process's are replayed through `record_score`, which `score`
    calls too): the histogram records the scores (skips have none), the monitor feeds both to the detector.
    """

    def __init__(
        self, meter_provider: MeterProvider | None = None, *, monitor: DriftMonitor, session_exemplars: bool = False
    ) -> None:
        super().__init__(meter_provider, session_exemplars=session_exemplars)
        self.monitor = monitor

    def record_score(
        self, scorer: str, score: float | None, label: str | None, skipped: str | None, retriever: str,
        scored_span: ScoredSpan | None = None, judge_id: str = "", session: str | None = None,
    ) -> None:
        super().record_score(scorer, score, label, skipped, retriever, scored_span, judge_id, session)
        self.monitor.feed_value(scorer, score, skipped, retriever, scored_span, judge_id)

    def replay(self, calls: Sequence[MetricCall]) -> None:
        """A scoring process's calls: each score on the instruments, then all of them to the monitor at once
        (unless a subclass watches `record_score` itself: then one call each, as it expects)."""
        if type(self).record_score is not DriftMetrics.record_score:
            super().replay(calls)
            return
        fed: list[FedScore] = []
        for name, args in calls:
            try:
                if name == "record_score":
                    RagtraceMetrics.record_score(self, *args)
                    scorer, score, _label, skipped, retriever, scored_span, judge_id = args[:7]
                    fed.append((scorer, score, skipped, retriever, scored_span, judge_id))
                else:
                    getattr(self, name)(*args)
            except Exception:
                self._failures.failed(name)
        self.monitor.feed_many(fed)

    def shutdown(self) -> None:
        self.monitor.shutdown(wait=False)
