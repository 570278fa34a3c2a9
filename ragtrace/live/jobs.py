"""Judging in a thread of the app's process (`worker="thread"`): `TraceJudging` on the scoring worker."""

from __future__ import annotations

import time

from ragtrace.live.judging import TraceJudging
from ragtrace.live.modes import Verdict
from ragtrace.live.options import ScoringOptions
from ragtrace.live.planning import Planner
from ragtrace.live.store import PendingTrace
from ragtrace.live.worker import ScoringWorker


class ThreadJudging:
    """`Judging` with one job per sample on the scoring worker, whose loop also runs the pipeline's ticks."""

    def __init__(self, options: ScoringOptions, worker: ScoringWorker) -> None:
        self.worker = worker
        self.patience = options.score_deadline
        self.traces = TraceJudging(
            worker, Planner(options.scorers or (), options.sampler, options.redactor, options.target),
            extractor=options.extractor, rules=options.capture_rules, score_deadline=options.score_deadline,
            metrics=options.metrics, model=options.model, prompt_version=options.prompt_version,
        )

    @property
    def depth(self) -> int:
        return self.worker.depth

    def take(self, pending: PendingTrace) -> Verdict | None:
        return self.traces.take(pending.trace_id, pending.spans)

    def tick(self) -> bool:
        return False

    def ship(self) -> list[Verdict]:
        return []  # jobs are submitted as each trace closes

    def collect(self) -> list[Verdict]:
        return self.traces.take_finished()

    def time_out(self, pending: PendingTrace) -> Verdict | None:
        return self.traces.time_out(pending.trace_id)

    def wait(self, deadline: float) -> None:
        # Wait for the traces out for judging (not for jobs whose trace is gone); never on the worker's own
        # thread (a judge flushing the provider), which would deadlock it.
        if not self.worker.on_loop:
            self.traces.wait_idle(deadline - time.monotonic())

    def stop(self, timeout: float) -> None:
        self.worker.stop(timeout)
