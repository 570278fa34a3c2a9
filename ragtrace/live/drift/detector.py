"""The drift detector: is retrieval quality, per scorer and retriever, leaving its usual level?

Pure arithmetic, no OpenTelemetry and no threads of its own (`DriftMonitor` in `monitor.py` schedules it).
A single low score says little; a sustained shift of the score distribution says the retriever, the index
or the traffic changed. `DriftDetector` keeps, per (scorer, retriever) series:

- a **baseline**: mean and variance (Welford) of the first `baseline_size` scores, then **frozen**. A
  frozen baseline cannot be dragged along by a slow degradation, which is what a slowly updated one
  would do; after a deliberate change (a new index, a new model) call `reset()` to learn a new baseline.
  Nothing is judged before the baseline is complete, and a series that starts degraded takes that level
  as its normal: the alert rule against yesterday's mean (collector/alerts.yml) covers that case.
- a **window test**: the distance between the mean of the last `window` scores and the baseline mean, in
  standard errors of the baseline's spread (`sd * sqrt(1/m + 1/n)`, the in-control sigma of a control
  chart); flagged when `|t| >= threshold` and the means differ by at least `min_delta` (a practical size,
  so a huge series does not alarm on a shift nobody cares about). The window's own variance is not used:
  scores are bounded and skewed, and a run of perfect scores has almost none, which would make a lucky
  streak look like drift.
- a **two-sided CUSUM** on scores standardized by the baseline and clipped to `±cusum_clip`:
  `S+ = max(0, S+ + z - k)`, `S- = max(0, S- - z - k)`, flagged while either exceeds `h`. It reacts to a
  small, persistent shift sooner than a window mean does. The clip keeps a few extreme scores (a 0 among
  0.9s is 4-5 standard deviations) from adding up to `h` on their own; a shift adds up all the same.
  Capped at `2h` so that it also notices the end of a drift quickly.

Drift is *detected* while either flags. `observe()` runs on the scoring worker and only appends to a
bounded buffer under a lock; `check()` drains the buffer and does the arithmetic.

It also keeps, per retriever, whether each of the last `window` evaluated retrievals returned no
documents (`observe_retrieval`), the source of the empty-retrieval rate.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ragtrace import _checks as checks
from ragtrace._logs import ragtrace_logger

__all__ = ["DriftConfig", "DriftDetector", "DriftState", "Key"]

logger = ragtrace_logger("ragtrace.drift")

Key = tuple[str, str]


@dataclass(frozen=True)
class DriftConfig:
    """Windows, sensitivity and minimum counts. Defaults are what `bench/drift_hotpotqa.py` measures.

    baseline_size: scores that form the frozen baseline (no drift is judged before it is complete).
    window: recent scores compared with the baseline; also the empty-rate window, in retrievals.
    min_recent: the window test waits for this many recent scores.
    threshold: |t| (standard errors of the baseline) at which the window mean differs. min_delta: and
        by at least this much.
    cusum_k / cusum_h / cusum_clip: CUSUM allowance, decision threshold and the clip of each
        standardized score, in baseline standard deviations. Set so that stable samples of the local
        judge's context precision on HotpotQA raise under one false alarm per million (1 in 2,520,000),
        while a full degradation is still flagged within 10-40 samples (bench/drift_hotpotqa.py
        --seeds 120 measures both).
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
    cusum_h: float = 18.0
    cusum_clip: float = 3.0
    min_std: float = 0.02
    max_pending: int = 100_000
    max_series: int = 256

    def __post_init__(self) -> None:
        checks.counts(self, "baseline_size", "window", "min_recent", "max_pending", "max_series")
        checks.positive(self, "threshold", "cusum_h", "cusum_clip", "min_std")
        checks.non_negative(self, "min_delta", "cusum_k")

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
                self._buffer_score(str(scorer), str(retriever), value)
        except Exception:
            logger.debug("ragtrace drift: observe failed", exc_info=True)

    def observe_scored(self, scorer: str, retriever: str, score: float) -> None:
        """`observe` and `observe_retrieval(retriever, False)` under one lock: a scored retrieval was not empty."""
        try:
            self.observe_many([(scorer, retriever, float(score))])  # float(): a None score is an error here
        except Exception:
            logger.debug("ragtrace drift: observe failed", exc_info=True)

    def observe_many(self, observations: Iterable[tuple[str, str, float | None]]) -> None:
        """Buffer (scorer, retriever, score) observations under one lock, in order: a score is
        `observe_scored`, None an empty retrieval (`observe_retrieval(retriever, True)`). A scoring
        process's answer carries dozens at once, and a lock and three calls each cost more than the appends."""
        try:
            with self._lock:
                for scorer, retriever, score in observations:
                    retriever = str(retriever)
                    if score is None:
                        self._buffer_retrieval(retriever, True)
                        continue
                    value = float(score)
                    if math.isfinite(value):
                        self._buffer_score(str(scorer), retriever, value)
                    self._buffer_retrieval(retriever, False)
        except Exception:
            logger.debug("ragtrace drift: observe failed", exc_info=True)

    def observe_retrieval(self, retriever: str, empty: bool) -> None:
        """Buffer whether one evaluated retrieval returned no documents."""
        try:
            with self._lock:
                self._buffer_retrieval(str(retriever), bool(empty))
        except Exception:
            logger.debug("ragtrace drift: observe_retrieval failed", exc_info=True)

    # Both buffers keep the newest `max_pending` entries; the caller holds the lock.
    def _buffer_score(self, scorer: str, retriever: str, value: float) -> None:
        if len(self._pending) >= self.config.max_pending:
            self._pending.popleft()
            self.dropped += 1
        self._pending.append((scorer, retriever, value))

    def _buffer_retrieval(self, retriever: str, empty: bool) -> None:
        if len(self._pending_retrievals) >= self.config.max_pending:
            self._pending_retrievals.popleft()
        self._pending_retrievals.append((retriever, empty))

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
        if len(series.recent) > config.window:
            series.recent_sum -= series.recent.popleft()
        clip = config.cusum_clip
        z = min(clip, max(-clip, (value - series.mean) / series.std(config.min_std)))
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
            t = delta / (series.std(config.min_std) * math.sqrt(1.0 / m + 1.0 / series.n))
            window_flag = abs(t) >= config.threshold and abs(delta) >= config.min_delta
        cusum_flag = ready and max(series.up, series.down) > config.cusum_h
        by = "+".join(name for name, flag in (("window", window_flag), ("cusum", cusum_flag)) if flag)
        series.detected = bool(by)
        return DriftState(
            scorer=key[0], retriever=key[1], ready=ready, detected=series.detected,
            changed=series.detected != was, delta=delta, baseline_mean=series.mean, recent_mean=recent_mean,
            baseline_n=series.n, recent_n=m, t=t, cusum_up=series.up, cusum_down=series.down, by=by,
        )
