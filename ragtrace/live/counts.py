"""Decision counts: what became of each sample and trace (`ragtrace.evaluation.decisions`).

The app's thread counts roots without a lock (`AppCount`); everything else is counted under one lock on
the worker thread, and pushed to the metrics in batches, so that the app's thread never touches a meter.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Mapping, Sequence

from ragtrace._logs import ragtrace_logger
from ragtrace.live.metrics import RagtraceMetrics
from ragtrace.scoring import JUDGE_TIMEOUT, ScoreResult

logger = ragtrace_logger(__name__)


def decision_of(result: ScoreResult) -> str:
    """The decision a result counts as."""
    if result.error is not None:
        return "timeout" if result.error == JUDGE_TIMEOUT else "error"
    if result.skipped is not None:
        return f"skipped_{result.skipped}"
    return "scored"


class AppCount:
    """A count the app's thread keeps without a lock: `next(count)` on an itertools.count is atomic under
    the GIL. `take` (one caller at a time) returns what was counted since it last ran; the offset
    covers the counts taken and the next() calls of `take` itself."""

    __slots__ = ("_offset", "count")

    def __init__(self) -> None:
        self.count = itertools.count()
        self._offset = 0

    def take(self) -> int:
        new = next(self.count) - self._offset
        self._offset += new + 1
        return new


class Counts:
    """Decision and capture counts, and what of them the metrics have seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._decisions: Counter[str] = Counter()
        self._capture: Counter[str] = Counter()
        self._reported: Counter[str] = Counter()
        # Roots the app's thread counts: unsampled traces, and sampled ones that ended with nothing held.
        self.unsampled_roots, self.rag_free_roots = AppCount(), AppCount()

    def after_fork(self) -> None:
        """A lock another thread held at the fork stays held in the child."""
        self._lock = threading.Lock()

    def add(self, decision: str, n: int = 1) -> None:
        with self._lock:
            self._decisions[decision] += n

    def add_many(self, counted: Sequence[tuple[Mapping[str, int], Mapping[str, int]]]) -> None:
        """Add counts made elsewhere (scoring, capture), (decisions, capture) pairs under one lock; a plain
        loop, not `Counter.update`, whose Mapping check costs a third more and runs for every scored trace."""
        with self._lock:
            for decisions, capture in counted:
                for key, n in decisions.items():
                    self._decisions[key] += n
                for key, n in capture.items():
                    self._capture[key] += n

    def decisions(self) -> dict[str, int]:
        with self._lock:
            self._take_roots()
            return dict(self._decisions)

    def capture(self) -> dict[str, int]:
        with self._lock:
            return dict(self._capture)

    def report(self, metrics: RagtraceMetrics | None) -> None:
        """Push what the metrics have not seen yet (decisions and capture counts) to `metrics`."""
        if metrics is None:  # `decisions()` reads the counts themselves
            return
        with self._lock:
            self._take_roots()
            counted = self._decisions + self._capture
            pending, self._reported = counted - self._reported, counted
        for decision, n in pending.items():
            try:
                metrics.decision(decision, n)
            except Exception:
                logger.exception("ragtrace: metrics.decision failed")

    def _take_roots(self) -> None:
        for decision, count in (("not_sampled", self.unsampled_roots), ("not_rag", self.rag_free_roots)):
            if new := count.take():
                self._decisions[decision] += new
