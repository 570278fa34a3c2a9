"""Drift detection on live scores: is retrieval quality, per scorer and retriever, leaving its usual level?

A single low score says little; a sustained shift of the score distribution says the retriever, the index
or the traffic changed. `DriftDetector` keeps, per (scorer, retriever) series:

- a **baseline**: mean and variance (Welford) of the first `baseline_size` scores, then **frozen**. A
  frozen baseline cannot be dragged along by a slow degradation, which is what a slowly updated one
  would do; after a deliberate change (a new index, a new model) call `reset()` to learn a new baseline.
  Nothing is judged before the baseline is complete, and a series that starts degraded takes that level
  as its normal: the alert rule against yesterday's mean (collector/alerts.yml) covers that case.
- a **window test**: Welch's t between the mean of the last `window` scores and the baseline mean;
  flagged when `|t| >= threshold` and the means differ by at least `min_delta` (a practical size, so a
  huge series does not alarm on a shift nobody cares about).
- a **two-sided CUSUM** on scores standardized by the baseline: `S+ = max(0, S+ + z - k)`,
  `S- = max(0, S- - z - k)`, flagged while either exceeds `h`. It reacts to a small, persistent shift
  sooner than a window mean does; capped at `2h` so that it also notices the end of a drift quickly.

Drift is *detected* while either flags. `observe()` is called on the scoring worker and only appends to a
bounded buffer under a lock; `check()` (an APScheduler job in `DriftMonitor`) drains the buffer and does
the arithmetic. Scores reach the detector through `DriftMetrics`, a `RagtraceMetrics` whose `score()`
also feeds the monitor, so the processor needs no change to be watched.

The empty-retrieval rate (share of the last `window` evaluated retrievals that returned no documents) is a
gauge, `ragtrace.retrieval.empty_rate`, per retriever. It is fed by results skipped for `no_context`
(or by `observe_retrieval()`), and counts one observation per result: with the same scorers on every
retrieval that is the share of retrievals. (The processor hands `metrics.score` only scored results
today; skipped ones need it to pass `no_context` skips too, see `DriftMetrics`.)
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.trace import TracerProvider

from ragtrace.live.metrics import RagtraceMetrics
from ragtrace.scoring.result import ScoreResult

__all__ = [
    "DRIFT_INSTRUMENTS",
    "DriftConfig",
    "DriftDetector",
    "DriftMetrics",
    "DriftMonitor",
    "DriftState",
]

logger = logging.getLogger("ragtrace.drift")

#: The instruments `DriftMonitor` registers (observable gauges on the `ragtrace` meter).
DRIFT_INSTRUMENTS: tuple[str, ...] = (
    "ragtrace.drift.score_delta",
    "ragtrace.drift.detected",
    "ragtrace.retrieval.empty_rate",
)

Key = tuple[str, str]


@dataclass(frozen=True)
class DriftConfig:
    """Windows, sensitivity and minimum counts. Defaults are what `bench/drift_hotpotqa.py` measures.

    baseline_size: scores that form the frozen baseline (no drift is judged before it is complete).
    window: recent scores compared with the baseline; also the empty-rate window, in retrievals.
    min_recent: the window test waits for this many recent scores.
    threshold: |Welch t| at which the window mean differs. min_delta: and by at least this much.
    cusum_k / cusum_h: CUSUM allowance and decision threshold, in baseline standard deviations.
    min_std: floor of the baseline standard deviation (a constant baseline would make any change infinite).
    max_pending: scores buffered between checks, per detector; older ones are dropped (counted).
    max_series: (scorer, retriever) series tracked; scores of further series are ignored (counted).
    """

    baseline_size: int = 300
    window: int = 100
    min_recent: int = 30
    threshold: float = 5.0
    min_delta: float = 0.05
    cusum_k: float = 0.5
    cusum_h: float = 15.0
    min_std: float = 0.02
    max_pending: int = 100_000
    max_series: int = 256

    def __post_init__(self) -> None:
        for name in ("baseline_size", "window", "min_recent", "max_pending", "max_series"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        for name in ("threshold", "cusum_h", "min_std"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("min_delta", "cusum_k"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DriftState:
    """One series after a check. `delta` is recent mean minus baseline mean (negative: scores fell)."""

    scorer: str
    retriever: str
    ready: bool  # the baseline is complete
    detected: bool
    changed: bool  # detected flipped at this check (drift started or ended)
    delta: float
    baseline_mean: float
    recent_mean: float
    baseline_n: int
    recent_n: int
    t: float
    cusum_up: float
    cusum_down: float
    by: str  # what flagged it: "window", "cusum", "window+cusum" or ""


@dataclass
class _Series:
    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    recent: deque[float] = field(default_factory=deque)
    recent_sum: float = 0.0
    recent_sq: float = 0.0
    up: float = 0.0
    down: float = 0.0
    detected: bool = False

    def std(self, floor: float) -> float:
        return max(math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else 0.0, floor)


class DriftDetector:
    """Baseline, window test and CUSUM per (scorer, retriever); pure arithmetic, no OpenTelemetry.

    `observe` and `observe_retrieval` are O(1) and thread-safe; `check` must not run concurrently with
    itself (DriftMonitor's job has max_instances=1).
    """

    def __init__(self, config: DriftConfig | None = None) -> None:
        self.config = config if config is not None else DriftConfig()
        self._lock = threading.Lock()
        self._pending: deque[tuple[str, str, float]] = deque()
        self._pending_retrievals: deque[tuple[str, bool]] = deque()
        self._series: dict[Key, _Series] = {}
        self._empty: dict[str, deque[bool]] = {}
        self._resets: set[Key] = set()
        self.dropped = 0  # scores dropped: buffer full between checks, or too many series

    def observe(self, scorer: str, retriever: str, score: float) -> None:
        """Buffer one score (called on the scoring worker): an append under a lock, never raises."""
        try:
            value = float(score)
            if not math.isfinite(value):
                return
            with self._lock:
                if len(self._pending) >= self.config.max_pending:
                    self._pending.popleft()
                    self.dropped += 1
                self._pending.append((str(scorer), str(retriever), value))
        except Exception:
            logger.debug("ragtrace drift: observe failed", exc_info=True)

    def observe_retrieval(self, retriever: str, empty: bool) -> None:
        """Buffer whether one evaluated retrieval returned no documents."""
        try:
            with self._lock:
                if len(self._pending_retrievals) >= self.config.max_pending:
                    self._pending_retrievals.popleft()
                self._pending_retrievals.append((str(retriever), bool(empty)))
        except Exception:
            logger.debug("ragtrace drift: observe_retrieval failed", exc_info=True)

    def reset(self, scorer: str, retriever: str) -> None:
        """Forget a series' baseline at the next check, e.g. after a deliberate change of retriever."""
        with self._lock:
            self._resets.add((scorer, retriever))

    def check(self) -> dict[Key, DriftState]:
        """Take the buffered scores in order, update every series, and return its state."""
        with self._lock:
            pending, self._pending = self._pending, deque()
            retrievals, self._pending_retrievals = self._pending_retrievals, deque()
            resets, self._resets = self._resets, set()
        for key in resets:
            self._series.pop(key, None)
        before = {key: s.detected for key, s in self._series.items()}
        for scorer, retriever, value in pending:
            series = self._series.get((scorer, retriever))
            if series is None:
                if len(self._series) >= self.config.max_series:
                    self.dropped += 1
                    continue
                series = self._series[(scorer, retriever)] = _Series(recent=deque())
            self._add(series, value)
        window = self.config.window
        for retriever, empty in retrievals:
            flags = self._empty.get(retriever)
            if flags is None:
                if len(self._empty) >= self.config.max_series:
                    continue
                flags = self._empty[retriever] = deque(maxlen=window)
            flags.append(empty)
        return {key: self._state(key, series, before.get(key, False)) for key, series in self._series.items()}

    def empty_rates(self) -> dict[str, float]:
        """Share of the last `window` evaluated retrievals that returned no documents, per retriever."""
        return {r: sum(flags) / len(flags) for r, flags in list(self._empty.items()) if flags}

    def _add(self, series: _Series, value: float) -> None:
        config = self.config
        if series.n < config.baseline_size:  # Welford, until the baseline is complete, then frozen
            series.n += 1
            delta = value - series.mean
            series.mean += delta / series.n
            series.m2 += delta * (value - series.mean)
            return
        series.recent.append(value)
        series.recent_sum += value
        series.recent_sq += value * value
        if len(series.recent) > config.window:
            old = series.recent.popleft()
            series.recent_sum -= old
            series.recent_sq -= old * old
        z = (value - series.mean) / series.std(config.min_std)
        cap = 2 * config.cusum_h
        series.up = min(cap, max(0.0, series.up + z - config.cusum_k))
        series.down = min(cap, max(0.0, series.down - z - config.cusum_k))

    def _state(self, key: Key, series: _Series, was: bool) -> DriftState:
        config = self.config
        ready = series.n >= config.baseline_size
        m = len(series.recent)
        recent_mean = series.recent_sum / m if m else series.mean
        delta = recent_mean - series.mean if m else 0.0
        t = 0.0
        window_flag = False
        if ready and m >= config.min_recent:
            recent_var = max(series.recent_sq - m * recent_mean * recent_mean, 0.0) / max(m - 1, 1)
            base_var = series.std(config.min_std) ** 2
            se = math.sqrt(recent_var / m + base_var / series.n) or config.min_std
            t = delta / se
            window_flag = abs(t) >= config.threshold and abs(delta) >= config.min_delta
        cusum_flag = ready and max(series.up, series.down) > config.cusum_h
        by = "+".join(name for name, flag in (("window", window_flag), ("cusum", cusum_flag)) if flag)
        series.detected = bool(by)
        return DriftState(
            scorer=key[0], retriever=key[1], ready=ready, detected=series.detected,
            changed=series.detected != was, delta=delta, baseline_mean=series.mean, recent_mean=recent_mean,
            baseline_n=series.n, recent_n=m, t=t, cusum_up=series.up, cusum_down=series.down, by=by,
        )


class DriftMonitor:
    """A DriftDetector checked every `interval` seconds by an APScheduler BackgroundScheduler.

    Each check refreshes the gauges `ragtrace.drift.score_delta`, `ragtrace.drift.detected` and
    `ragtrace.retrieval.empty_rate` (read at the metric reader's pace), and when drift starts or ends
    logs on `ragtrace.drift` and emits a short root span `ragtrace.drift` with an event of the same
    name. Nothing here raises into the caller: failures are logged once and cost a check.
    """

    def __init__(
        self,
        config: DriftConfig | None = None,
        *,
        interval: float = 30.0,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        self.detector = DriftDetector(config)
        self.interval = interval
        self._states: dict[Key, DriftState] = {}
        self._empty_rates: dict[str, float] = {}
        self._check_lock = threading.Lock()
        self._scheduler: Any = None
        self._warned: set[str] = set()
        self._tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer("ragtrace.drift")
        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        try:
            self._create_instruments(provider)
        except Exception:
            self._warn("setup")

    def _create_instruments(self, provider: MeterProvider) -> None:
        """No unit on the gauges: exporters append "_ratio" for unit "1" to gauges in some paths and not
        in others, and the shipped alert rules must name them the same way whichever path is taken."""
        from ragtrace import __version__

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

    # -- feeding (scoring worker) --------------------------------------------------------------------

    def observe(self, scorer: str, retriever: str, score: float) -> None:
        self.detector.observe(scorer, retriever, score)

    def observe_retrieval(self, retriever: str, empty: bool) -> None:
        self.detector.observe_retrieval(retriever, empty)

    def feed(self, result: ScoreResult, retriever: str) -> None:
        """One scorer result: a score feeds drift; a score or a `no_context` skip feeds the empty rate."""
        try:
            if result.score is not None:
                self.detector.observe(result.name, retriever, result.score)
                self.detector.observe_retrieval(retriever, False)
            elif result.skipped == "no_context":
                self.detector.observe_retrieval(retriever, True)
        except Exception:
            self._warn("feed")

    # -- checking (scheduler thread) -----------------------------------------------------------------

    def check(self) -> dict[Key, DriftState]:
        """Update every series, the gauges' values, and report drift that started or ended."""
        with self._check_lock:
            try:
                states = self.detector.check()
                self._states = states
                self._empty_rates = self.detector.empty_rates()
            except Exception:
                self._warn("check")
                return dict(self._states)
        for state in states.values():
            if state.changed:
                self._report(state)
        return states

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
        try:
            level = logging.WARNING if state.detected else logging.INFO
            logger.log(
                level, "ragtrace drift %s: %s on retriever %s, mean %.3f vs baseline %.3f (delta %+.3f, by %s)",
                what, state.scorer, state.retriever, state.recent_mean, state.baseline_mean, state.delta,
                state.by or "none", extra={"ragtrace_drift": attributes},
            )
        except Exception:
            self._warn("log")
        try:
            span = self._tracer.start_span("ragtrace.drift", context=Context(), attributes=attributes)
            span.add_event("ragtrace.drift", attributes)
            span.end()
        except Exception:
            self._warn("span")

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
            scheduler.start()
            self._scheduler = scheduler
        except Exception:
            self._warn("start")
        return self

    def shutdown(self, wait: bool = True) -> None:
        """Stop the scheduler; a last check reports what arrived since the previous one."""
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            try:
                scheduler.shutdown(wait=wait)
            except Exception:
                self._warn("shutdown")
        self.check()

    # -- gauge callbacks (metric reader's thread) ----------------------------------------------------

    def _observe_delta(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(s.delta, {"gen_ai.evaluation.name": s.scorer, "ragtrace.retriever": s.retriever})
            for s in list(self._states.values()) if s.ready
        ]

    def _observe_detected(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(int(s.detected), {"gen_ai.evaluation.name": s.scorer, "ragtrace.retriever": s.retriever})
            for s in list(self._states.values()) if s.ready
        ]

    def _observe_empty(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(rate, {"ragtrace.retriever": r}) for r, rate in list(self._empty_rates.items())]

    def _warn(self, what: str) -> None:
        if what in self._warned:
            logger.debug("ragtrace drift: %s failed again", what, exc_info=True)
            return
        self._warned.add(what)
        logger.warning("ragtrace drift: %s failed; drift detection may be incomplete", what, exc_info=True)


class DriftMetrics(RagtraceMetrics):
    """RagtraceMetrics that also feed a DriftMonitor: pass it as the processor's `metrics`.

    The processor already calls `metrics.score(result, retriever)` for every scored result, so drift
    needs no change to the processor. Results skipped for `no_context` reach the empty-rate gauge only
    if the processor passes skipped results too (RagtraceMetrics.score ignores them).
    """

    def __init__(self, meter_provider: MeterProvider | None = None, *, monitor: DriftMonitor) -> None:
        super().__init__(meter_provider)
        self.monitor = monitor

    def score(self, result: ScoreResult, retriever: str) -> None:
        super().score(result, retriever)
        self.monitor.feed(result, retriever)

    def shutdown(self) -> None:
        self.monitor.shutdown(wait=False)
