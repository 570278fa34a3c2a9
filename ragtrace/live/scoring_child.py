"""`python -m ragtrace.live.scoring_child IN_FD OUT_FD`: the scoring process of `worker="process"`.

It runs the same pipeline as the thread worker (a `RagScoringSpanProcessor`), fed with the whole traces
the app's process sends, and answers with what it made of each trace instead of forwarding spans: the
app's process holds the spans and writes the scores onto them. A module of its own, so that running it
does not import `ragtrace.live.remote` a second time.
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
from typing import IO

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor

from ragtrace.live.metrics import RagtraceMetrics
from ragtrace.live.processor import RagScoringSpanProcessor, decision_of
from ragtrace.live.remote import (
    Answers,
    ChildSettings,
    MetricCall,
    TraceAnswer,
    plain_events,
    read_frame,
    span_of,
    write_frame,
)
from ragtrace.live.store import OpenTrace, PendingTrace
from ragtrace.scoring import JudgeUsage, ScoreResult


class RecordedMetrics(RagtraceMetrics):
    """Metrics calls of the pipeline, kept to be replayed on the app's real instruments."""

    def __init__(self) -> None:  # no instruments: nothing is exported from the scoring process
        self._lock = threading.Lock()
        self._calls: list[MetricCall] = []

    def decision(self, decision: str, n: int = 1) -> None:
        pass  # decisions travel per trace (`TraceAnswer`), counted once by the app's process

    def score(self, result: ScoreResult, retriever: str) -> None:
        with self._lock:
            self._calls.append(("score", (result, retriever)))

    def judge_call(self, usage: JudgeUsage, outcome: str, duration_s: float) -> None:
        with self._lock:
            self._calls.append(("judge_call", (usage, outcome, duration_s)))

    def observe(self, queue_depth: Callable[[], int], spans_held: Callable[[], int]) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def take(self) -> list[MetricCall]:
        with self._lock:
            calls, self._calls = self._calls, []
        return calls


class ScoringPipeline(RagScoringSpanProcessor):
    """The thread-worker pipeline, answering per trace instead of forwarding its spans."""

    def __init__(self, settings: ChildSettings, answer: Callable[[TraceAnswer], None]) -> None:
        self.recorded = RecordedMetrics() if settings.record_metrics else None
        super().__init__(
            SpanProcessor(),  # the spans are copies: the app's process forwards the real ones
            judge=settings.judge, scorers=settings.scorers, sampler=settings.sampler, target=settings.target,
            score_deadline=settings.score_deadline, max_queue=settings.max_queue,
            max_held_spans=settings.max_held_spans, max_open_traces=settings.max_open_traces,
            concurrency=settings.concurrency, redactor=settings.redactor, extractor=settings.extractor,
            metrics=self.recorded, reason_max_chars=settings.reason_max_chars,
        )
        self._answer = answer
        self._hold_every_span = True  # the app's process sends only what it held: all of it is read here
        self._closed_counts: dict[int, tuple[Counter[str], Counter[str]]] = {}
        self._closing: int | None = None  # the trace being closed (worker thread)
        self._released_while_closing: list[TraceAnswer] = []

    def _close(self, trace: OpenTrace) -> None:
        """Close as usual, keeping what closing counted for this trace's answer."""
        first = trace.spans[0].context
        assert first is not None
        trace_id = first.trace_id
        with self._counts_lock:
            decisions, capture = Counter(self._counts), Counter(self._capture_counts)
        self._closing = trace_id
        failed = False
        try:
            super()._close(trace)
        except Exception:
            failed = True  # `_tick` counts it and passes the trace through
            raise
        finally:
            self._closing = None
            with self._counts_lock:
                decisions, capture = self._counts - decisions, self._capture_counts - capture
            if failed:
                decisions["error"] += 1
            released = self._released_while_closing
            self._released_while_closing = []
            if failed or not self._store.is_pending(trace_id):  # passed through, or released already
                for answer in released:
                    decisions.update(answer.decisions)
                writes = [w for answer in released for w in answer.writes]
                self._answer(TraceAnswer(trace_id, dict(decisions), dict(capture), writes))
            else:
                self._closed_counts[trace_id] = (decisions, capture)

    def _release(self, pending: PendingTrace) -> None:
        """Answer with the trace's writes and decisions, closing's included (no span is forwarded)."""
        self._time_out_waiting(pending)
        decisions: Counter[str] = Counter(
            decision_of(result)
            for evaluations in pending.evaluations.values() for evaluation in evaluations
            for result in evaluation.results
        )
        writes = [
            (span_id, attrs, plain_events(events))
            for span_id, (attrs, events) in self._writes(pending.evaluations).items()
        ]
        if pending.trace_id == self._closing:  # a job could not be queued: answered when closing ends
            self._released_while_closing.append(TraceAnswer(pending.trace_id, dict(decisions), {}, writes))
            return
        closed, capture = self._closed_counts.pop(pending.trace_id, (Counter(), Counter()))
        self._answer(TraceAnswer(pending.trace_id, dict(closed + decisions), dict(capture), writes))


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
    """Build the pipeline from the settings, score what arrives, answer as traces finish."""
    sys.path[:] = read_frame(inbound)
    settings: ChildSettings = pickle.loads(read_frame(inbound))
    outbox = Outbox()
    pipeline = ScoringPipeline(settings, outbox.put)
    stopping = threading.Event()

    def write() -> None:
        while True:
            stop = stopping.is_set()
            traces = outbox.take(0.05)
            calls = pipeline.recorded.take() if pipeline.recorded is not None else []
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
                resources, traces = read_frame(inbound)
            except EOFError:
                break
            made = [Resource(attrs) for attrs in resources]
            for plain in traces:
                for span in [span_of(p, made) for p in plain]:
                    pipeline.on_end(span)
            pipeline._close_open_traces()
    finally:
        pipeline.shutdown()  # waits for what is being scored (up to its score_deadline) and answers it
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
        logging.getLogger("ragtrace.live.scoring_child").exception("the scoring process stopped")
        raise SystemExit(1) from None
    finally:
        for stream in (inbound, outbound):
            with contextlib.suppress(OSError):  # the app's process may be gone already
                stream.close()


if __name__ == "__main__":
    main()
