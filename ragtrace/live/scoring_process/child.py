"""`python -m ragtrace.live.scoring_process.child IN_FD OUT_FD`: the scoring process of `worker="process"`.

It receives whole closed traces (the app's process holds the spans and closes the traces), so it needs
no store: it plans each trace's samples, runs them as jobs on its own worker, and answers once per trace
with the trace's decision and capture counts and what to write on each evaluated span.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.util.types import AttributeValue

from ragtrace.capture import CaptureStats, extract_samples
from ragtrace.live.counts import decision_of
from ragtrace.live.enrich import Evaluation, Rollup, declined, sample_attributes, timed_out, writes_for
from ragtrace.live.metrics import RagtraceMetrics, ScoredSpan
from ragtrace.live.planning import Planner
from ragtrace.live.scoring_process.protocol import (
    Answers,
    ChildSettings,
    MetricCall,
    TraceAnswer,
    plain_events,
    read_frame,
    span_of,
    write_frame,
)
from ragtrace.live.store import SampleRef
from ragtrace.live.worker import ScoreJob, ScoringWorker
from ragtrace.scoring import JudgeUsage, ScoreResult

logger = logging.getLogger(__name__)


class RecordedMetrics(RagtraceMetrics):
    """Metrics calls of the judging, kept to be replayed on the app's real instruments."""

    def __init__(self) -> None:  # no instruments: nothing is exported from the scoring process
        self._lock = threading.Lock()
        self._calls: list[MetricCall] = []

    def decision(self, decision: str, n: int = 1) -> None:
        pass  # decisions travel per trace (`TraceAnswer`), counted once by the app's process

    # Plain values, replayed through the app's `record_*` methods: unpickling result objects there would
    # cost the app's process ten times as much.
    def score(self, result: ScoreResult, retriever: str, scored_span: ScoredSpan | None = None) -> None:
        call = (result.name, result.score, result.label, result.skipped, retriever, scored_span, result.usage.judge_id)
        with self._lock:
            self._calls.append(("record_score", call))

    def judge_call(self, usage: JudgeUsage, outcome: str, duration_s: float) -> None:
        call = (usage.model, usage.input_tokens, usage.output_tokens, usage.cost_usd, outcome, duration_s)
        with self._lock:
            self._calls.append(("record_judge_call", call))

    def observe(self, queue_depth: Callable[[], int], spans_held: Callable[[], int]) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def take(self) -> list[MetricCall]:
        with self._lock:
            calls, self._calls = self._calls, []
        return calls


@dataclass
class _Trace:
    """A trace with jobs out: what it still waits for, and what it has so far."""

    trace_id: int
    capture: dict[str, int]
    decisions: Counter[str] = field(default_factory=Counter)
    waiting: dict[int, SampleRef] = field(default_factory=dict)
    evaluations: dict[int, list[Evaluation]] = field(default_factory=dict)
    annotations: dict[int, dict[str, AttributeValue]] = field(default_factory=dict)
    rollups: dict[int, Rollup] = field(default_factory=dict)


class TraceScoring:
    """Whole traces in, one `TraceAnswer` each out. `take` and the jobs' reports run on the worker's loop."""

    def __init__(self, settings: ChildSettings, answer: Callable[[TraceAnswer], None]) -> None:
        self.settings = settings
        self.metrics = RecordedMetrics() if settings.record_metrics else None
        # Its ticks have nothing to do: an idle worker then wakes once a second.
        self.worker = ScoringWorker(
            settings.judge, concurrency=settings.concurrency, max_queue=settings.max_queue, on_tick=lambda: False
        )
        self._planner = Planner(settings.scorers, settings.sampler, settings.redactor, settings.target)
        self._answer = answer
        self._traces: dict[int, _Trace] = {}  # by arrival number: a trace id may come again
        self._arrivals = 0
        self._model = str(getattr(settings.judge, "model", ""))
        self._prompt_version = str(getattr(settings.judge, "prompt_version", ""))

    @property
    def waiting(self) -> int:
        return len(self._traces)

    def take(self, traces: Sequence[Sequence[ReadableSpan]]) -> None:
        for spans in traces:
            self._arrivals += 1
            trace_id = int(spans[0].context.trace_id) if spans and spans[0].context is not None else 0
            trace = _Trace(trace_id, {})
            try:
                self._plan(self._arrivals, trace, spans)
            except Exception:
                logger.exception("ragtrace: closing a trace failed; answered unscored")
                self._traces.pop(self._arrivals, None)
                trace.decisions["error"] += 1
                trace.waiting = {}
            if not trace.waiting:
                self._finish(trace)

    def _plan(self, arrival: int, trace: _Trace, spans: Sequence[ReadableSpan]) -> None:
        stats = CaptureStats()
        samples = extract_samples(spans, extractor=self.settings.extractor, stats=stats, rules=self.settings.rules)
        trace.capture = dict(stats.counts)
        if not samples:
            trace.decisions["not_rag"] += 1
            return
        by_id = {s.context.span_id: s for s in spans if s.context is not None}
        deadline = time.monotonic() + self.settings.score_deadline
        self._traces[arrival] = trace
        for key, captured in enumerate(samples):
            if captured.agent_span_id is not None:
                trace.rollups.setdefault(captured.agent_span_id, Rollup()).retrievals += 1
            planned = self._planner.plan(trace.trace_id, captured, by_id.get(captured.retrieval_span_id, spans[0]))
            if isinstance(planned, str):
                trace.decisions[planned] += 1
                if (why := declined(planned, self._model, self._prompt_version)) is not None:
                    trace.evaluations.setdefault(captured.retrieval_span_id, []).append(why)
                    trace.annotations.setdefault(captured.retrieval_span_id, {}).update(sample_attributes(captured))
                continue
            sample, scorers = planned
            ref = SampleRef(self._planner.target_of(captured, by_id, spans), tuple(s.name for s in scorers),
                            captured.retriever, captured.agent_span_id)
            trace.annotations.setdefault(ref.target, {}).update(sample_attributes(captured))
            trace.waiting[key] = ref
            job = ScoreJob(sample, scorers, deadline, self._on_done(arrival, key))
            if not self.worker.submit(job):
                del trace.waiting[key]
                trace.decisions["queue_full"] += 1
        if not trace.waiting:
            del self._traces[arrival]

    def _on_done(self, arrival: int, key: int) -> Callable[[Evaluation, float], None]:
        def done(evaluation: Evaluation, duration_s: float) -> None:
            self._job_done(arrival, key, evaluation, duration_s)

        return done

    def _job_done(self, arrival: int, key: int, evaluation: Evaluation, duration_s: float) -> None:
        try:
            self.settings.sampler.charge(evaluation.usage)
        except Exception:
            logger.exception("ragtrace: sampler.charge failed")
        if self.metrics is not None and (evaluation.usage.calls or evaluation.timed_out):
            self.metrics.judge_call(evaluation.usage, evaluation.status, duration_s)
        trace = self._traces.get(arrival)
        ref = trace.waiting.pop(key, None) if trace is not None else None
        if trace is None or ref is None:
            return
        for result in evaluation.results:
            trace.decisions[decision_of(result)] += 1
            # Results skipped for `no_context` reach metrics too: they make the empty-retrieval rate.
            if self.metrics is not None and (result.score is not None or result.skipped == "no_context"):
                self.metrics.score(result, ref.retriever, (trace.trace_id, ref.target))
        trace.evaluations.setdefault(ref.target, []).append(evaluation)
        if ref.agent is not None and (rollup := trace.rollups.get(ref.agent)) is not None:
            rollup.evaluations.append(evaluation)
        if not trace.waiting:
            del self._traces[arrival]
            self._finish(trace)

    def _finish(self, trace: _Trace) -> None:
        for ref in trace.waiting.values():  # still waiting at shutdown: a timeout each
            trace.decisions["timeout"] += len(ref.names)
            evaluation = timed_out(ref.names, self._model, self._prompt_version)
            trace.evaluations.setdefault(ref.target, []).append(evaluation)
        trace.waiting = {}
        writes = [
            (span_id, attrs, plain_events(events))
            for span_id, (attrs, events) in writes_for(
                trace.evaluations, self.settings.reason_max_chars, trace.annotations, trace.rollups
            ).items()
        ]
        self._answer(TraceAnswer(trace.trace_id, dict(trace.decisions), trace.capture, writes))

    def stop(self) -> None:
        """Wait up to `score_deadline` for the jobs out, stop the worker, answer what is still waiting."""
        deadline = time.monotonic() + self.settings.score_deadline
        while self._traces and time.monotonic() < deadline:
            time.sleep(0.01)
        self.worker.stop()
        for arrival in list(self._traces):
            trace = self._traces.pop(arrival, None)
            if trace is not None:
                self._finish(trace)


class Outbox:
    """Answers waiting to be written; the writer thread sends what finishes together as one message."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._traces: list[TraceAnswer] = []

    def put(self, answer: TraceAnswer) -> None:
        with self._ready:
            self._traces.append(answer)
            self._ready.notify()

    def take(self, timeout: float) -> list[TraceAnswer]:
        with self._ready:
            if not self._traces:
                self._ready.wait(timeout)
            traces, self._traces = self._traces, []
        return traces

    def wake(self) -> None:
        with self._ready:
            self._ready.notify()


def serve(inbound: IO[bytes], outbound: IO[bytes]) -> None:
    """Build the scoring from the settings, score what arrives, answer as traces finish."""
    sys.path[:] = read_frame(inbound)
    settings: ChildSettings = pickle.loads(read_frame(inbound))
    outbox = Outbox()
    scoring = TraceScoring(settings, outbox.put)
    scoring.worker.start()
    stopping = threading.Event()

    def write() -> None:
        while True:
            stop = stopping.is_set()
            traces = outbox.take(0.05)
            calls = scoring.metrics.take() if scoring.metrics is not None else []
            if traces or calls:
                time.sleep(0.002)  # gather what finishes together into one message
                traces += outbox.take(0)
                try:
                    write_frame(outbound, Answers(traces, calls))
                except (OSError, ValueError):  # the app's process is gone
                    return
            if stop:
                return

    writer = threading.Thread(target=write, name="ragtrace-answers", daemon=True)
    writer.start()
    try:
        while True:
            try:
                resources, plain_traces = read_frame(inbound)
            except EOFError:
                break
            made = [Resource(attrs) for attrs in resources]
            traces = [[span_of(p, made) for p in plain] for plain in plain_traces]
            scoring.worker.call(lambda traces=traces: scoring.take(traces), 30.0)  # type: ignore[misc]
    finally:
        scoring.stop()  # waits for what is being scored (up to its score_deadline) and answers it
        stopping.set()
        outbox.wake()
        writer.join(10)


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="ragtrace scoring process: %(levelname)s %(name)s: %(message)s")
    inbound, outbound = os.fdopen(int(args[0]), "rb"), os.fdopen(int(args[1]), "wb")
    try:
        serve(inbound, outbound)
    except Exception:
        logger.exception("the scoring process stopped")
        raise SystemExit(1) from None
    finally:
        for stream in (inbound, outbound):
            with contextlib.suppress(OSError):  # the app's process may be gone already
                stream.close()


if __name__ == "__main__":
    main()
