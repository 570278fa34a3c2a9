"""`TraceJudging`: closed traces in, one `Verdict` each out, in the app's process or in the scoring process.

It extracts a trace's samples, plans them (`Planner`), runs each planned sample as a job on a
`ScoringWorker`, charges the sampler, records the metrics, counts the decisions and keeps the agents'
roll-ups. A trace with nothing to judge gets its verdict at once; the others when their last job reports
(`take_finished`) or when they are timed out (`time_out`). It never calls back into what feeds it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace._logs import ragtrace_logger
from ragtrace.capture import CaptureRules, CaptureStats, Extractor, extract_samples
from ragtrace.live.counts import decision_of
from ragtrace.live.enrich import (
    Evaluation,
    Rollup,
    declined,
    not_judged,
    sample_attributes,
    timeout_evaluation,
)
from ragtrace.live.metrics import RagtraceMetrics
from ragtrace.live.modes import INTERNAL_ERROR, QUEUE_FULL, Verdict
from ragtrace.live.planning import Planned, Planner
from ragtrace.live.worker import ScoreJob

logger = ragtrace_logger(__name__)


class Jobs(Protocol):
    """Where the jobs go: the `ScoringWorker` (a unit test runs them by hand)."""

    def submit(self, job: ScoreJob) -> bool:
        """Queue a job; False when it cannot take it (full, stopped)."""


@dataclass(frozen=True, slots=True)
class SampleRef:
    """A sample out for judging: the span its scores go to, its scorers, its retriever's name, its session."""

    target: int
    names: tuple[str, ...]
    retriever: str
    agent: int | None = None  # the agent span whose roll-up counts this sample's evaluation
    session: str | None = None  # for the score metrics' exemplars


@dataclass(eq=False)
class _Trace:
    """A trace with jobs out: the samples it still waits for, and its verdict so far."""

    key: Hashable
    verdict: Verdict
    waiting: dict[int, SampleRef] = field(default_factory=dict)


class TraceJudging:
    """Plans and judges whole traces on `jobs`; `take` runs on the worker's loop, as do the jobs' reports.

    `key` names a trace while it is out (its trace id in the app's process, an arrival number in the
    scoring process, where an id may come again)."""

    def __init__(
        self,
        jobs: Jobs,
        planner: Planner,
        *,
        extractor: Extractor | None,
        rules: CaptureRules,
        score_deadline: float,
        metrics: RagtraceMetrics | None,
        model: str,
        prompt_version: str,
    ) -> None:
        self.jobs = jobs
        self.metrics = metrics
        self._planner = planner
        self._extractor = extractor
        self._rules = rules
        self._score_deadline = score_deadline
        self._model = model
        self._prompt_version = prompt_version
        # The jobs report on the worker's loop; `time_out` and `take_finished` may come from another thread.
        self._changed = threading.Condition(threading.Lock())
        self._out: dict[Hashable, _Trace] = {}
        self._finished: dict[Hashable, Verdict] = {}

    @property
    def waiting(self) -> int:
        """Traces with jobs out."""
        return len(self._out)

    def take(self, key: Hashable, spans: Sequence[ReadableSpan]) -> Verdict | None:
        """Judge a closed trace: its verdict now when nothing of it goes out for judging, else None."""
        first = spans[0].context if spans else None
        trace = _Trace(key, Verdict(int(first.trace_id) if first is not None else 0))
        try:
            jobs = self._plan(trace, spans)
        except Exception:
            logger.exception("ragtrace: planning a trace failed; its spans go on unscored")
            return Verdict(trace.verdict.trace_id, {"error": 1}, trace.verdict.capture, outcome=INTERNAL_ERROR)
        if not jobs:
            return trace.verdict
        with self._changed:
            self._out[key] = trace
        self._submit(trace, jobs)
        with self._changed:
            if trace.waiting or self._out.get(key) is not trace:
                return None
            del self._out[key]  # no job went out (the queue is full)
            self._changed.notify_all()
        return trace.verdict

    def _plan(self, trace: _Trace, spans: Sequence[ReadableSpan]) -> dict[int, Planned]:
        """The jobs of a trace, by sample; what is not judged is counted and said on the trace's verdict."""
        verdict = trace.verdict
        stats = CaptureStats()
        samples = extract_samples(spans, extractor=self._extractor, stats=stats, rules=self._rules)
        verdict.capture = dict(stats.counts)  # why spans could not be read
        if not samples:
            verdict.add("not_rag")
            return {}
        by_id = {s.context.span_id: s for s in spans if s.context is not None}
        jobs: dict[int, Planned] = {}
        for key, captured in enumerate(samples):
            if captured.agent_span_id is not None:
                verdict.rollups.setdefault(captured.agent_span_id, Rollup()).retrievals += 1
            planned = self._planner.plan(verdict.trace_id, captured, by_id.get(captured.retrieval_span_id, spans[0]))
            if isinstance(planned, str):
                verdict.add(planned)
                if (why := declined(planned, self._model, self._prompt_version)) is not None:
                    verdict.evaluated(captured.retrieval_span_id, why)
                    verdict.annotations.setdefault(captured.retrieval_span_id, {}).update(sample_attributes(captured))
                continue
            jobs[key] = planned
            target = self._planner.target_of(captured, by_id, spans)
            trace.waiting[key] = SampleRef(target, tuple(s.name for s in planned[1]), captured.retriever,
                                           captured.agent_span_id, captured.session_id)
            verdict.annotations.setdefault(target, {}).update(sample_attributes(captured))
        return jobs

    def _submit(self, trace: _Trace, jobs: dict[int, Planned]) -> None:
        trace.verdict.start_ns = time.time_ns()
        deadline = time.monotonic() + self._score_deadline
        for key, (sample, scorers) in jobs.items():
            job = ScoreJob(sample=sample, scorers=scorers, deadline=deadline, on_done=self._on_done(trace, key))
            try:
                submitted = self.jobs.submit(job)
            except Exception:
                logger.exception("ragtrace: submitting a job failed")
                submitted = False
            if not submitted:
                with self._changed:
                    ref = trace.waiting.pop(key, None)
                    if ref is not None:
                        trace.verdict.add("queue_full")
                        trace.verdict.evaluated(ref.target, not_judged(*QUEUE_FULL, self._model, self._prompt_version))

    def _on_done(self, trace: _Trace, key: int) -> Callable[[Evaluation, float], None]:
        def done(evaluation: Evaluation, duration_s: float) -> None:
            self._reported(trace, key, evaluation, duration_s)

        return done

    def _reported(self, trace: _Trace, key: int, evaluation: Evaluation, duration_s: float) -> None:
        """A job reported (worker thread): bill it, count it, keep it; the trace's last finishes it."""
        try:
            self._planner.charge(evaluation.usage)
        except Exception:
            logger.exception("ragtrace: sampler.charge failed")
        if self.metrics is not None and (evaluation.usage.calls or evaluation.expired):
            _call(self.metrics.judge_call, evaluation.usage, evaluation.status, duration_s)
        with self._changed:
            ref = trace.waiting.pop(key, None) if self._out.get(trace.key) is trace else None
            if ref is None:  # timed out already (a deadline, a flush), and counted then
                return
            verdict = trace.verdict
            for result in evaluation.results:
                verdict.add(decision_of(result))
            verdict.evaluated(ref.target, evaluation)
            if ref.agent is not None and (rollup := verdict.rollups.get(ref.agent)) is not None:
                rollup.evaluations.append(evaluation)
            if not trace.waiting:
                del self._out[trace.key]
                self._finished[trace.key] = verdict
                self._changed.notify_all()
        if self.metrics is not None:
            for result in evaluation.results:
                # Results skipped for `no_context` reach metrics too: they make the empty-retrieval rate.
                if result.score is not None or result.skipped == "no_context":
                    _call(self.metrics.score, result, ref.retriever, (verdict.trace_id, ref.target), ref.session)

    def take_finished(self, timeout: float = 0.0) -> list[Verdict]:
        """The verdicts of the traces whose last job reported, waiting up to `timeout` for the first."""
        with self._changed:
            if not self._finished and timeout > 0:
                self._changed.wait(timeout)
            finished, self._finished = self._finished, {}
        return list(finished.values())

    def time_out(self, key: Hashable) -> Verdict | None:
        """The trace goes on before its jobs all reported: the samples still out time out. Its verdict
        (the finished one if it has just finished), or None when it has been handed out already."""
        with self._changed:
            trace = self._out.pop(key, None)
            if trace is None:
                return self._finished.pop(key, None)
            waiting, trace.waiting = trace.waiting, {}
            self._changed.notify_all()
        for ref in waiting.values():
            trace.verdict.add("timeout", len(ref.names))
            trace.verdict.evaluated(ref.target, timeout_evaluation(ref.names, self._model, self._prompt_version))
        return trace.verdict

    def time_out_all(self) -> list[Verdict]:
        """Every trace out times out (the scoring process stops)."""
        with self._changed:
            keys = list(self._out)
        return [v for key in keys if (v := self.time_out(key)) is not None]

    def wait_idle(self, timeout: float) -> bool:
        """Block until no trace has jobs out, or `timeout` seconds; True if none has."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._out, max(timeout, 0.0))


def _call(method: Callable[..., None], *args: object) -> None:
    try:
        method(*args)
    except Exception:
        logger.exception("ragtrace: metrics.%s failed", getattr(method, "__name__", "call"))
