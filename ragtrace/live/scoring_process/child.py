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
from collections.abc import Callable, Sequence
from typing import IO

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan

from ragtrace._logs import ragtrace_logger
from ragtrace.live.enrich import writes_for
from ragtrace.live.heap import freeze_startup_heap
from ragtrace.live.judging import TraceJudging
from ragtrace.live.metrics import MetricCall, RagtraceMetrics, ScoredSpan
from ragtrace.live.modes import Verdict
from ragtrace.live.planning import Planner
from ragtrace.live.scoring_process.protocol import (
    APP_SDK_SWITCH,
    ChildSettings,
    TraceAnswer,
    plain_answers,
    plain_events,
    read_frame,
    span_of,
    write_frame,
)
from ragtrace.live.worker import ScoringWorker
from ragtrace.scoring import JudgeUsage, ScoreResult

logger = ragtrace_logger(__name__)
# A frame may hold hundreds of traces. Taken a few at a time, the first are out to the judge while the rest
# are planned, and answers that arrive meanwhile are not held behind the planning of the whole frame.
TAKE_SLICE = 8


class RecordedMetrics(RagtraceMetrics):
    """Metrics calls of the judging, kept to be replayed on the app's real instruments."""

    def __init__(self) -> None:  # no instruments: nothing is exported from the scoring process
        self._lock = threading.Lock()
        self._calls: list[MetricCall] = []

    def decision(self, decision: str, n: int = 1) -> None:
        pass  # decisions travel per trace (`TraceAnswer`), counted once by the app's process

    # Plain values, replayed through the app's `record_*` methods: unpickling result objects there would
    # cost the app's process ten times as much.
    def score(
        self, result: ScoreResult, retriever: str, scored_span: ScoredSpan | None = None, session: str | None = None
    ) -> None:
        call = (result.name, result.score, result.label, result.skipped, retriever, scored_span,
                result.usage.judge_id, session)
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


class ChildJudging:
    """Whole traces in, one `TraceAnswer` each out: `TraceJudging` on the child's own worker."""

    def __init__(self, settings: ChildSettings) -> None:
        self.settings = settings
        self.metrics = RecordedMetrics() if settings.record_metrics else None
        # Its ticks have nothing to do: an idle worker then wakes once a second.
        self.worker = ScoringWorker(
            settings.judge, concurrency=settings.concurrency, max_queue=settings.max_queue, on_tick=lambda: False
        )
        self.traces = TraceJudging(
            self.worker, Planner(settings.scorers or (), settings.sampler, settings.redactor, settings.target),
            extractor=settings.extractor, rules=settings.capture_rules, score_deadline=settings.score_deadline,
            metrics=self.metrics, model=str(getattr(settings.judge, "model", "")),
            prompt_version=str(getattr(settings.judge, "prompt_version", "")),
        )
        self._ready: list[TraceAnswer] = []  # answered at once (worker thread), for the writer to take
        self._ready_lock = threading.Lock()
        self._arrivals = 0

    def take(self, traces: Sequence[Sequence[ReadableSpan]]) -> None:
        """Judge what arrived (worker thread); a trace with nothing to judge is answered at once."""
        for spans in traces:
            self._arrivals += 1  # the key of a trace while it is out: a trace id may come again
            verdict = self.traces.take(self._arrivals, spans)
            if verdict is not None:
                answer = self.answer(verdict)
                with self._ready_lock:
                    self._ready.append(answer)

    def answers(self, timeout: float) -> list[TraceAnswer]:
        """The answers ready, waiting up to `timeout` for a job's trace to finish when there are none."""
        with self._ready_lock:
            ready, self._ready = self._ready, []
        finished = self.traces.take_finished(0.0 if ready else timeout)
        return ready + [self.answer(v) for v in finished]

    def answer(self, verdict: Verdict) -> TraceAnswer:
        writes = [
            (span_id, attrs, plain_events(events))
            for span_id, (attrs, events) in writes_for(
                verdict.evaluations, self.settings.reason_max_chars, verdict.annotations, verdict.rollups
            ).items()
        ]
        return TraceAnswer(verdict.trace_id, verdict.decisions, verdict.capture, writes)

    def stop(self) -> list[TraceAnswer]:
        """Wait up to `score_deadline` for the jobs out, stop the worker; what is still out times out."""
        self.traces.wait_idle(self.settings.score_deadline)
        self.worker.stop()
        return [self.answer(v) for v in self.traces.time_out_all()]


def serve(inbound: IO[bytes], outbound: IO[bytes]) -> None:
    """Build the scoring from the settings, score what arrives, answer as traces finish."""
    sys.path[:] = read_frame(inbound)
    settings: ChildSettings = pickle.loads(read_frame(inbound))
    scoring = ChildJudging(settings)
    freeze_startup_heap(settings.judge)
    scoring.worker.start()
    stopping = threading.Event()
    last: list[TraceAnswer] = []  # what `stop` timed out, for the writer's last message

    def write() -> None:
        while True:
            stop = stopping.is_set()
            traces = scoring.answers(0.05)
            calls = scoring.metrics.take() if scoring.metrics is not None else []
            if stop:
                traces += last
            if traces or calls:
                time.sleep(0.002)  # gather what finishes together into one message
                traces += scoring.answers(0)
                try:
                    write_frame(outbound, plain_answers(traces, calls))
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
            for start in range(0, len(plain_traces), TAKE_SLICE):
                traces = [[span_of(p, made) for p in plain] for plain in plain_traces[start : start + TAKE_SLICE]]
                scoring.worker.call(lambda traces=traces: scoring.take(traces), 30.0)  # type: ignore[misc]
    finally:
        last += scoring.stop()  # waits for what is being scored (up to its score_deadline) and answers it
        stopping.set()
        writer.join(10)


def _restore_app_sdk_switch() -> None:
    """The SDK was off for this interpreter's start only: from here on it follows the app's setting."""
    app = os.environ.pop(APP_SDK_SWITCH, None)
    if app is None:
        return
    if app:
        os.environ["OTEL_SDK_DISABLED"] = app
    else:
        os.environ.pop("OTEL_SDK_DISABLED", None)


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    _restore_app_sdk_switch()
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
