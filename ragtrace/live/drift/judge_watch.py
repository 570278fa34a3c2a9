"""Which judge's scores the drift series hold: a judge change is logged once (old id -> new id), and a drift
can be told apart as the judge's doing when the judge behind a series changed since its baseline.

Fed with every score's `ragtrace.judge.id` on the scoring worker, so the usual case (the same judge) is one
comparison and no lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ragtrace.live.drift.detector import DriftState, Key

if TYPE_CHECKING:
    from ragtrace.live.drift.canary import Canary

__all__ = ["JudgeWatch", "attribute"]

logger = logging.getLogger("ragtrace.drift")


class JudgeWatch:
    """The judge id in use, and the one each series' baseline was made with (at most `max_series`).

    `on_change(old, new)` runs once per change, on the thread that saw it (keep it short: the canary is
    scheduled, not run, from there).
    """

    def __init__(self, max_series: int = 256, on_change: Callable[[str, str], None] | None = None) -> None:
        self.current = ""
        self._max_series = max_series
        self._baseline: dict[Key, str] = {}
        self._lock = threading.Lock()
        self.on_change = on_change
        self.changes: list[tuple[str, str]] = []  # every change seen, in order (old, new)

    def note(self, key: Key, judge_id: str) -> None:
        """One score of series `key` by judge `judge_id` ("" when the score names no judge: ignored)."""
        if not judge_id:
            return
        if key not in self._baseline and len(self._baseline) < self._max_series:
            with self._lock:
                self._baseline.setdefault(key, judge_id)
        if judge_id != self.current:
            self.use(judge_id)

    def use(self, judge_id: str) -> None:
        """The judge in use is now `judge_id`: logged and reported once if it is another than before."""
        with self._lock:
            old = self.current
            if not judge_id or judge_id == old:
                return
            self.current = judge_id
            if old:
                self.changes.append((old, judge_id))
        if not old:
            return
        logger.warning(
            "ragtrace judge changed: %s -> %s; scores from here on are not comparable with earlier ones",
            old, judge_id, extra={"ragtrace_judge_change": {"old": old, "new": judge_id}},
        )
        if self.on_change is not None:
            try:
                self.on_change(old, judge_id)
            except Exception:
                logger.exception("ragtrace: reacting to a judge change failed")

    def baseline_judge(self, key: Key) -> str:
        """The judge id of the first score of series `key` ("" if unknown)."""
        return self._baseline.get(key, "")

    def reset(self, key: Key | None = None) -> None:
        """Forget the baseline judge of one series (or all), as the detector's `reset` forgets its baseline."""
        with self._lock:
            if key is None:
                self._baseline.clear()
            else:
                self._baseline.pop(key, None)


def attribute(state: DriftState, judges: JudgeWatch, canary: Canary | None) -> tuple[str, str]:
    """Who moved the scores of a drifting series: ("judge" | "retrieval" | "unknown", why).

    The judge, when the judge behind the series changed since its baseline, or when the canary (judged
    again as the drift started) moved from its reference run; retrieval, when the same judge's canary
    held; unknown without a canary to ask.
    """
    before, now = judges.baseline_judge((state.scorer, state.retriever)), judges.current
    if before and now and before != now:
        return "judge", f"the judge changed: id {before} -> {now}"
    if canary is None or canary.reference is None or canary.latest is None:
        return "unknown", "no canary run to tell a changed judge from changed retrieval"
    if canary.latest.judge_id != canary.reference.judge_id:
        return "judge", f"the judge changed: id {canary.reference.judge_id} -> {canary.latest.judge_id}"
    moved = canary.moved()
    if moved is not None:
        return "judge", f"the canary moved with the scores: {moved}"
    return "retrieval", f"the canary held: {canary.latest.describe()}"
