"""The pipeline: closed traces in, released spans out to a sink, each span exactly once.

    close (root ended, max_trace_wait, flush) -> judging.take: plan, jobs, evaluations (jobs.py), or
    the scoring process (scoring_process/parent.py) -> release: timeouts, writes -> sink.emit

Everything here runs on the worker thread, at its ticks. Two things plug in: the `Sink` the released
spans go to (the next processor, or an exporter's outlet) and the `Judging` that turns a closed RAG
trace into evaluations. Both see the pipeline through its public methods only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext

from ragtrace._logs import ragtrace_logger
from ragtrace._sdk import SPAN_ID, ids_of
from ragtrace.capture.readers import span_role
from ragtrace.live.counts import Counts
from ragtrace.live.enrich import EvalStatus, Evaluation, Writes, enrich, link_spans, not_judged, writes_for
from ragtrace.live.options import ScoringOptions
from ragtrace.live.store import OpenTrace, PendingTrace, Refusal, SpanStore
from ragtrace.scoring import JUDGE_TIMEOUT

logger = ragtrace_logger(__name__)

# Why a trace's retrieval spans were not judged: (ragtrace.eval.status, ragtrace.eval.error).
Outcome = tuple[EvalStatus, str]
QUEUE_FULL: Outcome = ("skipped", "queue_full")
TIMED_OUT: Outcome = ("timeout", JUDGE_TIMEOUT)
# A retrieval span that ended after its trace was closed for scoring (after its root, or after
# max_trace_wait): it is in no sample.
LATE: Outcome = ("skipped", "late_span")
_REFUSED: dict[Refusal, Outcome] = {"overflow": QUEUE_FULL, "turned_away": QUEUE_FULL, "late": LATE}


class Sink(Protocol):
    """Where released spans go. `emit` never raises into the pipeline; `emitted` ends a tick (a sink
    that gathers or paces spans sends them then, and says whether some still wait for the next tick);
    `flush` and `shutdown` follow the pipeline's own; `after_fork` starts a forked child's copy afresh."""

    def emit(self, spans: Iterable[ReadableSpan]) -> None: ...

    def emitted(self) -> bool: ...

    def flush(self, timeout_millis: int) -> bool: ...

    def shutdown(self) -> None: ...

    def after_fork(self) -> None: ...


class Judging(Protocol):
    """Turns closed RAG traces into evaluations, and hands each trace back to the pipeline to release."""

    def take(self, trace: OpenTrace) -> None:
        """A closed trace with a retrieval: judge it (parking it in the store), or pass it through."""

    def tick(self) -> bool:
        """Before closing, at each tick; True while it needs ticks of its own (a process to restart)."""

    def ship(self) -> None:
        """After closing, at each tick: send what `take` gathered."""

    def time_out(self, pending: PendingTrace) -> None:
        """A trace is released with samples still waiting: they time out."""

    def wait(self, deadline: float) -> None:
        """Flush: wait for the traces out for judging, until `deadline` (time.monotonic)."""

    @property
    def depth(self) -> int:
        """Jobs queued or running, or traces out for judging."""

    def stop(self, timeout: float) -> None:
        """Stop judging, within `timeout` seconds."""


class Pipeline:
    """Closes held traces, hands RAG traces to the judging, releases them to the sink with their writes."""

    def __init__(self, options: ScoringOptions, store: SpanStore, counts: Counts, sink: Sink) -> None:
        self.options = options
        self.store = store
        self.counts = counts
        self.sink = sink
        self.judging: Judging | None = None

    def use(self, judging: Judging) -> None:
        self.judging = judging

    def _judging(self) -> Judging:
        assert self.judging is not None, "Pipeline.use(judging) first"
        return self.judging

    def tick(self, *, everything: bool = False) -> bool:
        """Close traces whose root ended (or that waited too long, or all of them), ship them, release
        expired ones, report. True while anything is held or the judging needs ticks of its own."""
        judging = self._judging()
        needs_ticks = judging.tick()
        self.emit_refused()
        for trace in self.store.take_closing(self.options.max_trace_wait, everything=everything):
            try:
                self.close(trace)
            except Exception:
                logger.exception("ragtrace: closing a trace failed; spans forwarded unscored")
                self.counts.add("error")
                self.pass_through(trace, ("error", "internal_error"))
        judging.ship()
        for pending in self.store.pop_expired(time.monotonic()):
            self.release(pending)
        self.counts.report(self.options.metrics)
        waiting = self.sink.emitted()
        return self.store.held > 0 or needs_ticks or waiting

    def emit_refused(self) -> None:
        """Send the retrieval spans that have no sample (turned away, or late), each saying why."""
        by_outcome: dict[Outcome, list[ReadableSpan]] = {}
        for span, why in self.store.take_refused():
            by_outcome.setdefault(_REFUSED[why], []).append(span)
        if late := by_outcome.get(LATE):
            self.counts.add("late_span", len(late))
        for outcome, spans in by_outcome.items():
            self.emit_not_judged(spans, outcome)

    def close(self, trace: OpenTrace) -> None:
        """Pass through what cannot be judged; hand the rest to the judging."""
        if trace.overflowed:  # counted as queue_full when it overflowed
            self.pass_through(trace, QUEUE_FULL)
            return
        if self.options.decision_log is not None:
            self.options.decision_log.record(trace.spans)
        if not trace.has_retrieval and self.options.extractor is None:  # held for its ground truth only
            self.counts.add("not_rag")
            self.pass_through(trace)
            return
        self._judging().take(trace)

    def pass_through(
        self,
        trace: OpenTrace,
        outcome: Outcome | None = None,
        *,
        turned_away: Mapping[int, Sequence[Evaluation]] | None = None,
    ) -> None:
        """Release a closed trace unscored (in link mode its spans went on when they ended); with an
        `outcome`, its retrieval spans say why they were not judged; `turned_away` says it for some."""
        if outcome is not None:
            self.emit_not_judged(trace.spans, outcome)
        elif turned_away:
            self.emit_evaluated(trace.spans, turned_away)
        elif self.options.enrich:
            self.sink.emit(trace.spans)
        self.store.release(len(trace.spans))

    def emit_not_judged(self, spans: Sequence[ReadableSpan], outcome: Outcome) -> None:
        """Emit a trace none of whose samples was judged: each retrieval span gets `ragtrace.eval.status`
        and `ragtrace.eval.error` (a sampled retrieval span always says what became of it)."""
        self.emit_evaluated(spans, self.not_judged(spans, outcome))

    def emit_evaluated(self, spans: Sequence[ReadableSpan], evaluations: Mapping[int, Sequence[Evaluation]]) -> None:
        """Enrich mode: emit each span once, the evaluated ones with their writes. Link mode: the spans
        went on when they ended; emit the evaluations' own spans, linked to the evaluated ones."""
        if self.options.enrich:
            self.emit_with_writes(spans, writes_for(evaluations, self.options.reason_max_chars))
            return
        for span in spans:
            target = span.context
            if target is not None and (found := evaluations.get(target.span_id)):
                self.link(target, span.resource, found)

    def link(
        self, target: SpanContext, resource: Resource, evaluations: Iterable[Evaluation], start_ns: int | None = None
    ) -> None:
        """Link mode: emit the `evaluation <scorer>` spans of `evaluations` of the span `target`."""
        start = time.time_ns() if start_ns is None else start_ns
        try:
            spans = [
                linked
                for evaluation in evaluations
                for linked in link_spans(target, evaluation, resource=resource,
                                         start_time=start, reason_max_chars=self.options.reason_max_chars)
            ]
        except Exception:
            logger.exception("ragtrace: building an evaluation span failed")
            return
        self.sink.emit(spans)

    def not_judged(self, spans: Iterable[ReadableSpan], outcome: Outcome) -> dict[int, list[Evaluation]]:
        """The `outcome` as an evaluation for each retrieval span of `spans`, by span id."""
        evaluation = not_judged(*outcome, self.options.model, self.options.prompt_version)
        targets: dict[int, list[Evaluation]] = {}
        for span in spans:
            ctx = ids_of(span)[0]
            if ctx is not None and span_role(span, self.options.capture_rules) == "retrieval":
                targets[ctx[SPAN_ID]] = [evaluation]
        return targets

    def release(self, pending: PendingTrace) -> None:
        """Release a trace taken out of the store, once: samples still waiting time out (in link mode
        their spans are emitted then, and the trace holds no span)."""
        self._judging().time_out(pending)
        if self.options.enrich:
            writes = writes_for(pending.evaluations, self.options.reason_max_chars, pending.annotations,
                                pending.rollups)
            self.emit_with_writes(pending.spans, writes)

    def emit(self, spans: Iterable[ReadableSpan]) -> None:
        self.sink.emit(spans)

    def emit_with_writes(self, spans: Iterable[ReadableSpan], writes: Writes) -> None:
        """Emit each span once, with the attributes and events written for it (if any)."""
        if writes:
            spans = [_written(span, writes) for span in spans]
        self.sink.emit(spans)

    def settle(self, deadline: float, call_on_worker: WorkerCall) -> bool:
        """Close every open trace, wait for judging until `deadline`, release whatever is still held.

        False when the worker did not answer in time: traces it had in hand then are not released yet.
        Its answer, however late, releases them (the caller has given up waiting by then)."""

        def close_everything() -> None:
            self.tick(everything=True)
            if time.monotonic() >= deadline:
                for pending in self.store.pop_expired(time.monotonic(), everything=True):
                    self.release(pending)

        answered = call_on_worker(close_everything, deadline - time.monotonic())
        if not answered:
            self.emit_refused()
            for trace in self.store.take_closing(self.options.max_trace_wait, everything=True):
                self.counts.add("timeout")
                self.pass_through(trace, TIMED_OUT)
        self._judging().wait(deadline)
        for pending in self.store.pop_expired(time.monotonic(), everything=True):
            self.release(pending)
        self.counts.report(self.options.metrics)
        return answered

    def close_store(self) -> None:
        """Shutdown: release everything the store still holds (open traces time out)."""
        open_traces, pending = self.store.close()
        self.emit_refused()
        for trace in open_traces:
            if trace.overflowed:  # refused by the limits, and counted as queue_full then
                self.emit_not_judged(trace.spans, QUEUE_FULL)
                continue
            self.counts.add("timeout")
            self.emit_not_judged(trace.spans, TIMED_OUT)
        for item in pending:
            self.release(item)
        self.counts.report(self.options.metrics)


class WorkerCall(Protocol):
    def __call__(self, fn: Callable[[], object], timeout: float) -> bool: ...


def _written(span: ReadableSpan, writes: Writes) -> ReadableSpan:
    ctx = ids_of(span)[0]
    found = writes.get(ctx[SPAN_ID]) if ctx is not None else None
    if found is None:
        return span
    try:
        return enrich(span, *found)
    except Exception:
        logger.exception("ragtrace: enriching a span failed; forwarded unscored")
        return span
