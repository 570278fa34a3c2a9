"""Judging in a thread of the app's process: plan each sample of a closed trace, run it as a job on the
worker, write or link its evaluation, release the trace when its last job reports (or at its deadline)."""

from __future__ import annotations

import time
from collections.abc import Callable

from opentelemetry.trace import SpanContext
from opentelemetry.util.types import AttributeValue

from ragtrace._logs import ragtrace_logger
from ragtrace.capture import CaptureStats, extract_samples
from ragtrace.live.counts import decision_of
from ragtrace.live.enrich import Evaluation, Rollup, declined, not_judged, sample_attributes, timed_out
from ragtrace.live.pipeline import QUEUE_FULL, Pipeline
from ragtrace.live.planning import Planned, Planner
from ragtrace.live.store import OpenTrace, PendingTrace, SampleRef
from ragtrace.live.worker import ScoreJob, ScoringWorker

logger = ragtrace_logger(__name__)


class JobJudging:
    """`Judging` with one job per sample on the scoring worker (`worker="thread"`)."""

    def __init__(self, pipeline: Pipeline, worker: ScoringWorker) -> None:
        self._pipeline = pipeline
        self._options = options = pipeline.options
        self._store, self._counts = pipeline.store, pipeline.counts
        self._worker = worker
        self._planner = Planner(options.scorers or (), options.sampler, options.redactor, options.target)

    @property
    def depth(self) -> int:
        return self._worker.depth

    def tick(self) -> bool:
        return False

    def ship(self) -> None:
        pass  # jobs are submitted as each trace closes

    def wait(self, deadline: float) -> None:
        # Wait for the traces that are still waiting for scores (not for jobs whose trace is gone); never
        # on the worker's own thread (a judge flushing the provider), which would deadlock it.
        if not self._worker.on_loop:
            self._store.wait_drained(deadline - time.monotonic())

    def stop(self, timeout: float) -> None:
        self._worker.stop(timeout)

    def take(self, trace: OpenTrace) -> None:
        """Extract samples, decide which to judge, queue the jobs (or pass the trace through)."""
        spans = trace.spans
        stats = CaptureStats()
        samples = extract_samples(spans, extractor=self._options.extractor, stats=stats,
                                  rules=self._options.capture_rules)
        if stats.counts:  # why spans could not be read: reported on the decision counter too
            self._counts.add_all({}, stats.counts)
        if not samples:
            self._counts.add("not_rag")
            self._pipeline.pass_through(trace)
            return
        by_id = {s.context.span_id: s for s in spans if s.context is not None}
        first = spans[0]
        assert first.context is not None  # only spans with a context are ever held
        trace_id = first.context.trace_id
        jobs: dict[int, Planned] = {}
        refs: dict[int, SampleRef] = {}
        turned_away: dict[int, list[Evaluation]] = {}  # retrieval span id -> why its sample was not judged
        annotations: dict[int, dict[str, AttributeValue]] = {}
        rollups: dict[int, Rollup] = {}
        for key, captured in enumerate(samples):
            if captured.agent_span_id is not None:
                rollups.setdefault(captured.agent_span_id, Rollup()).retrievals += 1
            planned = self._planner.plan(trace_id, captured, by_id.get(captured.retrieval_span_id, first))
            if isinstance(planned, str):
                self._counts.add(planned)
                if (why := declined(planned, self._options.model, self._options.prompt_version)) is not None:
                    turned_away[captured.retrieval_span_id] = [why]
                    annotations.setdefault(captured.retrieval_span_id, {}).update(sample_attributes(captured))
                continue
            jobs[key] = planned
            target = self._planner.target_of(captured, by_id, spans)
            refs[key] = SampleRef(target, tuple(s.name for s in planned[1]), captured.retriever,
                                  captured.agent_span_id)
            annotations.setdefault(target, {}).update(sample_attributes(captured))
        if not jobs:
            self._pipeline.pass_through(trace, turned_away=turned_away)
            return
        link = not self._options.enrich  # link mode: spans went on already, only references are held
        pending = PendingTrace(
            trace_id=trace_id,
            spans=[] if link else spans,
            deadline=time.monotonic() + self._options.score_deadline,
            resource=first.resource,
            trace_flags=first.context.trace_flags,
            waiting=refs,
            evaluations={} if link else dict(turned_away),
            annotations=annotations,
            rollups=rollups,
        )
        if not self._store.put_pending(trace_id, pending):
            self._counts.add("queue_full", len(jobs))
            self._pipeline.pass_through(trace, QUEUE_FULL)
            return
        if link:
            self._pipeline.emit_evaluated(spans, turned_away)
            self._store.release(len(spans))
        # From here on the spans belong to the pending trace: nothing below may raise into the tick,
        # whose fallback would release them a second time.
        self._submit(trace_id, jobs, pending.deadline)

    def _submit(self, trace_id: int, jobs: dict[int, Planned], deadline: float) -> None:
        start_ns = time.time_ns()
        for key, (sample, scorers) in jobs.items():
            job = ScoreJob(sample=sample, scorers=scorers, deadline=deadline,
                           on_done=self._on_done(trace_id, key, start_ns))
            try:
                submitted = self._worker.submit(job)
            except Exception:
                logger.exception("ragtrace: submitting a job failed")
                submitted = False
            if not submitted:
                self._counts.add("queue_full")
                options = self._options
                full = not_judged(*QUEUE_FULL, options.model, options.prompt_version)
                recorded = self._store.record(trace_id, key, full if options.enrich else None)
                if recorded is None:
                    continue
                ref, pending, last = recorded
                if not options.enrich:
                    self._emit_links(pending, ref.target, full, start_ns)
                if last:
                    self._pipeline.release(pending)

    def _on_done(self, trace_id: int, key: int, start_ns: int) -> Callable[[Evaluation, float], None]:
        def done(evaluation: Evaluation, duration_s: float) -> None:
            self._job_done(trace_id, key, start_ns, evaluation, duration_s)

        return done

    def _job_done(self, trace_id: int, key: int, start_ns: int, evaluation: Evaluation, duration_s: float) -> None:
        """A job reported (worker thread): bill it, count it, write it or keep it for the release."""
        options = self._options
        try:
            options.sampler.charge(evaluation.usage)
        except Exception:
            logger.exception("ragtrace: sampler.charge failed")
        metrics = options.metrics
        if metrics is not None and (evaluation.usage.calls or evaluation.timed_out):
            try:
                metrics.judge_call(evaluation.usage, evaluation.status, duration_s)
            except Exception:
                logger.exception("ragtrace: metrics.judge_call failed")
        recorded = self._store.record(trace_id, key, evaluation if options.enrich else None)
        if recorded is None:  # released already (deadline, flush): counted as timeout then
            return
        ref, pending, last = recorded
        if ref.agent is not None and (rollup := pending.rollups.get(ref.agent)) is not None:
            rollup.evaluations.append(evaluation)
        for result in evaluation.results:
            self._counts.add(decision_of(result))
            # Results skipped for `no_context` reach metrics too: they make the empty-retrieval rate.
            if metrics is not None and (result.score is not None or result.skipped == "no_context"):
                try:
                    metrics.score(result, ref.retriever, (trace_id, ref.target))
                except Exception:
                    logger.exception("ragtrace: metrics.score failed")
        if not options.enrich:
            self._emit_links(pending, ref.target, evaluation, start_ns)
        if last:
            self._pipeline.release(pending)

    def _emit_links(self, pending: PendingTrace, target: int, evaluation: Evaluation, start_ns: int) -> None:
        ctx = SpanContext(pending.trace_id, target, is_remote=False, trace_flags=pending.trace_flags)
        self._pipeline.link(ctx, pending.resource, (evaluation,), start_ns)

    def time_out(self, pending: PendingTrace) -> None:
        """The samples still waiting get a timeout evaluation (enrich) or span (link), and are counted."""
        start_ns = time.time_ns()
        for ref in pending.waiting.values():
            evaluation = timed_out(ref.names, self._options.model, self._options.prompt_version)
            self._counts.add("timeout", len(ref.names))
            if self._options.enrich:
                pending.evaluations.setdefault(ref.target, []).append(evaluation)
            else:
                self._emit_links(pending, ref.target, evaluation, start_ns)
        pending.waiting = {}
