"""The pipeline: closed traces in, released spans out to a sink, each span exactly once.

    store.take_closing (root ended, max_trace_wait, flush) -> judging.take (a `Verdict` now, or later
    from judging.collect, or judging.time_out at the deadline) -> store.take_pending_many -> mode.send -> sink

Everything here runs on the worker thread, at its ticks (and, at a flush or shutdown, on the caller's
thread once the worker has had its chance). The pipeline calls the `Judging` and the `Sink`; neither
calls back: judging returns verdicts, the mode (`Enrich` or `Link`) turns a trace and its verdict into
the spans to send on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace._logs import ragtrace_logger
from ragtrace.live.counts import Counts
from ragtrace.live.modes import INTERNAL_ERROR, JUDGE_TIMED_OUT, LATE, QUEUE_FULL, Mode, Outcome, Verdict
from ragtrace.live.options import ScoringOptions
from ragtrace.live.store import ClosedTrace, PendingTrace, Refusal, SpanStore

logger = ragtrace_logger(__name__)

# The least time the last release of a settle waits for the worker, even past the deadline: one tick's work.
_LAST_CALL_S = 0.05
_REFUSED: dict[Refusal, Outcome] = {"overflow": QUEUE_FULL, "turned_away": QUEUE_FULL, "late": LATE}


class Sink(Protocol):
    """Where released spans go. `send` never raises into the pipeline; `end_tick` ends a tick (a sink
    that gathers or paces spans sends them then, and says whether some still wait for the next tick);
    `flush` and `shutdown` follow the pipeline's own; `after_fork` starts a forked child's copy afresh."""

    def send(self, spans: Iterable[ReadableSpan]) -> None: ...

    def end_tick(self) -> bool: ...

    def flush(self, timeout_millis: int) -> bool: ...

    def shutdown(self) -> None: ...

    def after_fork(self) -> None: ...


class Judging(Protocol):
    """Turns parked RAG traces into verdicts: in a thread of the app (`ThreadJudging`) or in a scoring
    process (`ProcessJudging`). It never sends spans on: it returns verdicts, and the pipeline does."""

    patience: float  # how long a parked trace waits for its verdict (seconds)

    def take(self, pending: PendingTrace) -> Verdict | None:
        """A parked trace with a retrieval: its verdict now, or None (`collect` returns it later)."""

    def tick(self) -> bool:
        """First thing at each tick; True while it needs ticks of its own (a process to restart)."""

    def ship(self) -> list[Verdict]:
        """After taking, at each tick: send what `take` gathered; the verdicts of what it could not send."""

    def collect(self) -> list[Verdict]:
        """The verdicts that arrived since the last call (any thread)."""

    def time_out(self, pending: PendingTrace) -> Verdict | None:
        """A parked trace reached its deadline: its verdict with what is still out timed out."""

    def wait(self, deadline: float) -> None:
        """Flush: wait for the traces out for judging, until `deadline` (time.monotonic)."""

    @property
    def depth(self) -> int:
        """Jobs queued or running, or traces out for judging."""

    def stop(self, timeout: float) -> None:
        """Stop judging, within `timeout` seconds."""


class WorkerCall(Protocol):
    def __call__(self, fn: Callable[[], object], timeout: float) -> bool: ...


class Pipeline:
    """Closes held traces, hands RAG traces to the judging, sends each trace on once with its verdict."""

    def __init__(
        self, options: ScoringOptions, store: SpanStore, counts: Counts, sink: Sink, judging: Judging, mode: Mode
    ) -> None:
        self.options = options
        self.store = store
        self.counts = counts
        self.sink = sink
        self.judging = judging
        self.mode = mode

    def tick(self, *, everything: bool = False) -> bool:
        """Close traces whose root ended (or that waited too long, or all of them), judge them, send on
        what has its verdict or is past its deadline, report. True while anything is held or out."""
        needs_ticks = self.judging.tick()
        self._release_many(self.judging.collect())
        self._send_refused()
        for trace in self.store.take_closing(self.options.max_trace_wait, everything=everything):
            try:
                self._judge(trace)
            except Exception:
                logger.exception("ragtrace: judging a trace failed; spans forwarded unscored")
                self._send(trace.targets, Verdict.unjudged(trace.trace_id, INTERNAL_ERROR, "error"))
        self._release_many(self.judging.ship())
        for pending in self.store.pop_expired(time.monotonic()):
            self.time_out(pending)
        self.counts.report(self.options.metrics)
        waiting = self.sink.end_tick()
        return self.store.held > 0 or self.store.pending_traces > 0 or needs_ticks or waiting

    def _judge(self, trace: ClosedTrace) -> None:
        """Send on what cannot be judged; park the rest and hand it to the judging."""
        if trace.overflowed:  # counted as queue_full when it overflowed
            self._send(trace.targets, Verdict.unjudged(trace.trace_id, QUEUE_FULL))
            return
        if self.options.decision_log is not None:
            self.options.decision_log.record(trace.spans)
        if not trace.has_retrieval and self.options.extractor is None:  # held for its ground truth only
            self._send(trace.targets, Verdict(trace.trace_id, {"not_rag": 1}))
            return
        pending = PendingTrace(trace.trace_id, trace.spans, trace.targets, time.monotonic() + self.judging.patience,
                               self.mode.counted_while_judged(trace.spans))
        if not self.store.put_pending(pending):
            self._send(trace.targets, Verdict.unjudged(trace.trace_id, QUEUE_FULL, "queue_full"))
            return
        try:
            verdict = self.judging.take(pending)
        except Exception:  # the trace is parked: it goes on once, from here
            logger.exception("ragtrace: judging a trace failed; spans forwarded unscored")
            verdict = Verdict.unjudged(trace.trace_id, INTERNAL_ERROR, "error")
        if verdict is not None:
            self._release(verdict)

    def _release(self, verdict: Verdict) -> None:
        """Send a pending trace on with its verdict, if it is still parked (else it went on already)."""
        self._release_many([verdict])

    def _release_many(self, verdicts: Sequence[Verdict]) -> None:
        """`_release` for the verdicts of a tick, sent on together: one store lock, one count, one hand-over
        to the sink (a busy tick brings dozens; each trace's own lock, count and hand-over cost more than its
        writes)."""
        if verdicts:
            released = self.store.take_pending_many([verdict.trace_id for verdict in verdicts])
            self._send_many([(pending.targets, verdict) for pending, verdict in zip(released, verdicts, strict=True)
                             if pending is not None])

    def time_out(self, pending: PendingTrace) -> None:
        """Send on a trace taken out of the store before its verdict arrived (its deadline, a flush)."""
        verdict = self.judging.time_out(pending)
        self._send(pending.targets, verdict if verdict is not None else Verdict(pending.trace_id))

    def _send_refused(self) -> None:
        """Send the retrieval spans that have no sample (turned away, or late), each saying why."""
        by_outcome: dict[Outcome, list[ReadableSpan]] = {}
        for span, why in self.store.take_refused():
            by_outcome.setdefault(_REFUSED[why], []).append(span)
        for outcome, spans in by_outcome.items():
            self._send(spans, Verdict.unjudged(0, outcome, "late_span" if outcome == LATE else None, len(spans)))

    def _send(self, spans: Sequence[ReadableSpan], verdict: Verdict) -> None:
        """Count a verdict and send its spans on, the way the mode says (never raises, never loses a span)."""
        self._send_many([(spans, verdict)])

    def _send_many(self, traces: Sequence[tuple[Sequence[ReadableSpan], Verdict]]) -> None:
        """`_send` for several traces: counted at once, sent on in one hand-over, each written as its verdict says."""
        self.counts.add_many([(verdict.decisions, verdict.capture) for _, verdict in traces])
        out: list[ReadableSpan] = []
        for spans, verdict in traces:
            try:
                out += self.mode.send(spans, verdict)
            except Exception:
                logger.exception("ragtrace: writing a trace's evaluations failed; forwarded unscored")
                out += self.mode.unwritten(spans)
        self.sink.send(out)

    def forward(self, spans: Sequence[ReadableSpan], outcome: Outcome | None = None) -> None:
        """Send on spans that never entered the store (a replayed spool), the retrieval ones saying
        `outcome` (worker thread)."""
        try:
            out = self.mode.send_unheld(spans, Verdict(outcome=outcome))
        except Exception:
            logger.exception("ragtrace: writing why spans were not judged failed; forwarded unscored")
            out = list(spans)
        self.sink.send(out)

    def settle(self, deadline: float, call_on_worker: WorkerCall) -> bool:
        """Close every open trace, wait for judging until `deadline`, send on whatever is still held.

        False when the worker did not answer in time: traces it had in hand then are not sent yet.
        Its answer, however late, sends them (the caller has given up waiting by then)."""

        def close_everything() -> None:
            self.tick(everything=True)
            if time.monotonic() >= deadline:
                self._time_out_all()

        answered = call_on_worker(close_everything, deadline - time.monotonic())
        if not answered:
            self._send_refused()
            for trace in self.store.take_closing(self.options.max_trace_wait, everything=True):
                self._send(trace.targets, Verdict.unjudged(trace.trace_id, JUDGE_TIMED_OUT, "timeout"))
        self.judging.wait(deadline)

        def send_the_rest() -> None:
            self._release_many(self.judging.collect())
            self._time_out_all()

        # On the worker, after the tick it may be running: a verdict that tick took is in the sink before this
        # returns, so the flush that follows exports it. A worker that does not answer: here, as it is.
        if not answered or not call_on_worker(send_the_rest, max(deadline - time.monotonic(), _LAST_CALL_S)):
            send_the_rest()
        self.counts.report(self.options.metrics)
        return answered

    def _time_out_all(self) -> None:
        for pending in self.store.pop_expired(time.monotonic(), everything=True):
            self.time_out(pending)

    def shut_down(self) -> None:
        """Shutdown: send on everything the store still holds (open traces time out)."""
        open_traces, pending = self.store.shut_down()
        self._send_refused()
        for trace in open_traces:
            if trace.overflowed:  # refused by the limits, and counted as queue_full then
                self._send(trace.targets, Verdict.unjudged(trace.trace_id, QUEUE_FULL))
            else:
                self._send(trace.targets, Verdict.unjudged(trace.trace_id, JUDGE_TIMED_OUT, "timeout"))
        for item in pending:
            self.time_out(item)
        self.counts.report(self.options.metrics)
