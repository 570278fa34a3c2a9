"""`RagScoringSpanProcessor`: score RAG traces on live traffic and write the scores into the same traces.

It wraps the exporting processor (normally `BatchSpanProcessor(OTLPSpanExporter())`), like logfire's
processor wrappers. On the app's thread `on_end` does O(1) work and never raises: spans of traces that
cannot be sampled are forwarded at once; the others are held in a bounded store until their trace
closes (local root ended, or `max_trace_wait`). Closing, extraction, sampling, judging and enrichment
all happen on the background worker. Every span that enters leaves exactly once, scored or not.
"""

from __future__ import annotations

import dis
import itertools
import logging
import os
import threading
import time
import types
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanContext
from opentelemetry.util.types import AttributeValue

from ragtrace._sdk import IS_REMOTE, PUBLIC_IDS, SDK_IDS, SDK_SPAN, SPAN_ID, TRACE_ID, is_local_root
from ragtrace.capture import CapturedSample, CaptureStats, Extractor, capture_start, extract_samples
from ragtrace.judges.base import Judge
from ragtrace.live.enrich import Evaluation, enrich, evaluation_span, evaluation_writes
from ragtrace.live.metrics import RagtraceMetrics
from ragtrace.live.redaction import Redactor
from ragtrace.live.remote import Answers, ChildSettings, ScoringProcess, events_of
from ragtrace.live.sampling import TRACE_ID_MASK, Sampler
from ragtrace.live.store import OpenTrace, PendingTrace, SampleRef, SpanStore
from ragtrace.live.worker import DEFAULT_TICK_S, ScoreJob, ScoringWorker
from ragtrace.scoring import (
    ContextRecall,
    JudgeUsage,
    RagSample,
    Scorer,
    ScoreResult,
    default_scorers,
)

logger = logging.getLogger(__name__)

Mode = Literal["enrich", "link"]
Target = Literal["retrieval", "generation", "root"]
WorkerKind = Literal["thread", "process"]

# worker="process": the app's process gives the scoring process this long beyond `score_deadline` (after
# which the child answers with a timeout itself) before it forwards a trace unscored.
REMOTE_GRACE_S = 2.0
# A scoring process that exits is started again after 1 s, then after twice as long each time it fails
# again, up to this (a judge that cannot be imported should not cost a process start every tick).
REMOTE_RESTART_MAX_S = 60.0
# A pending trace of worker="process" waits for one answer, for the whole trace: its samples are not known
# in the app's process.
_REMOTE = SampleRef(target=0, names=(), retriever="")


def decision_of(result: ScoreResult) -> str:
    """The decision a result counts as (`ragtrace.evaluation.decisions`)."""
    if result.error is not None:
        return "timeout" if result.error == "judge_timeout" else "error"
    if result.skipped is not None:
        return f"skipped_{result.skipped}"
    return "scored"


def _does_nothing(method: object) -> bool:
    """True for a Python function or method whose body is `pass` (and a docstring at most)."""
    code = getattr(method, "__code__", None)
    if not isinstance(code, types.CodeType):
        return False
    ops = [(i.opname, i.argval) for i in dis.get_instructions(code) if i.opname not in ("RESUME", "NOP", "CACHE")]
    return ops in ([("LOAD_CONST", None), ("RETURN_VALUE", None)], [("RETURN_CONST", None)])


def _add_counts(counts: Counter[str], more: dict[str, int]) -> None:
    """`Counter.update` without its Mapping check, a third of the cost; it runs for every scored trace."""
    for key, n in more.items():
        counts[key] += n


class AppCount:
    """A count the app thread keeps without a lock: `next(count)` on an itertools.count is atomic under
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


class RagScoringSpanProcessor(SpanProcessor):
    """Holds sampled traces, scores their RAG samples on a worker, forwards every span exactly once.

    `mode="enrich"` writes scores onto the evaluated span before it is exported (spans of a sampled
    trace wait up to `score_deadline`); `mode="link"` exports at once and adds `evaluation <scorer>`
    spans. Limits (`max_queue` jobs, `max_held_spans`, `max_open_traces`) bound memory; overflow
    forwards spans unscored and is counted (`queue_full`).

    exporting: the processor spans go to (normally a BatchSpanProcessor with an OTLP exporter).
    judge / scorers: who gives verdicts and what is scored (default precision, relevance, and recall
        for samples that carry a ground truth). sampler: which traces and scorers (default 10 %).
    target: the span that receives the scores (retrieval, its generation, or the trace's root).
    max_trace_wait: a trace whose local root never ends is closed after this many seconds.
    score_deadline: held spans are forwarded with status `timeout` if scoring takes longer.
    concurrency: judge calls at once. redactor: applied to every sample before the judge sees it.
    extractor: your own span shapes -> samples (see ragtrace.capture). metrics: RagtraceMetrics.
    tick_interval: how often a busy worker closes, ships and releases traces (seconds; see
        `worker.DEFAULT_TICK_S` for why 0.2).
    """

    def __init__(
        self,
        exporting: SpanProcessor,
        *,
        judge: Judge,
        scorers: Sequence[Scorer] | None = None,
        sampler: Sampler | None = None,
        mode: Mode = "enrich",
        target: Target = "retrieval",
        max_trace_wait: float = 30.0,
        score_deadline: float = 30.0,
        max_queue: int = 1000,
        max_held_spans: int = 50_000,
        max_open_traces: int = 10_000,
        concurrency: int = 8,
        redactor: Redactor | None = None,
        extractor: Extractor | None = None,
        metrics: RagtraceMetrics | None = None,
        reason_max_chars: int = 500,
        tick_interval: float = DEFAULT_TICK_S,
        worker: WorkerKind = "thread",
    ) -> None:
        if mode not in ("enrich", "link"):
            raise ValueError(f"mode must be 'enrich' or 'link', got {mode!r}")
        if worker not in ("thread", "process"):
            raise ValueError(f"worker must be 'thread' or 'process', got {worker!r}")
        if worker == "process" and mode != "enrich":
            raise ValueError("worker='process' writes scores in enrich mode only; use worker='thread' for link mode")
        if target not in ("retrieval", "generation", "root"):
            raise ValueError(f"target must be 'retrieval', 'generation' or 'root', got {target!r}")
        for name, value in (
            ("max_trace_wait", max_trace_wait), ("score_deadline", score_deadline),
            ("tick_interval", tick_interval),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {value!r}")
        for name, count in (
            ("max_queue", max_queue), ("max_held_spans", max_held_spans),
            ("max_open_traces", max_open_traces), ("concurrency", concurrency),
            ("reason_max_chars", reason_max_chars),
        ):
            if not isinstance(count, int) or count < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {count!r}")
        self._exporting = exporting
        # The SDK's exporting processors do nothing on start and on ending: skip a call per span then.
        self._forward_start = not _does_nothing(getattr(exporting, "on_start", None))
        self._forward_ending = not _does_nothing(getattr(exporting, "_on_ending", None))
        self._judge = judge
        self._scorers: tuple[Scorer, ...] = (
            tuple(scorers) if scorers is not None else tuple(default_scorers())
        )
        self._by_name = {s.name: s for s in self._scorers}
        self._sampler = sampler if sampler is not None else Sampler()
        self._sample_bound = self._sampler.trace_id_bound  # on_end's pre-filter, read once
        self._mode = mode
        self._target = target
        self._max_trace_wait = max_trace_wait
        self._score_deadline = score_deadline
        self._redactor = redactor
        self._extractor = extractor
        self._hold_every_span = extractor is not None  # an extractor may read any span of a sampled trace
        self._metrics = metrics
        self._reason_max_chars = reason_max_chars
        self._store = SpanStore(max_held_spans=max_held_spans, max_open_traces=max_open_traces)
        self._counts_lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._capture_counts: Counter[str] = Counter()
        self._reported: Counter[str] = Counter()  # decisions and capture counts the metrics have seen
        # Roots the app thread counts (unsampled traces; sampled ones that ended with nothing held)
        self._unsampled_roots, self._rag_free_roots = AppCount(), AppCount()
        self._shutdown = False
        self._shutdown_lock = threading.Lock()
        self._concurrency, self._max_queue, self._tick_interval = concurrency, max_queue, tick_interval
        self._remote: ScoringProcess | None = None
        self._outbox: list[PendingTrace] = []  # closed traces for the scoring process (worker thread only)
        self._remote_restart_at, self._remote_backoff = 0.0, 1.0
        self._worker = self._start_worker()
        if worker == "process":
            self._remote = self._start_remote()
        if hasattr(os, "register_at_fork"):  # like the SDK's BatchSpanProcessor: a fresh worker per child
            after_fork = weakref.WeakMethod(self._after_fork_in_child)
            os.register_at_fork(after_in_child=lambda: (method := after_fork()) and method())
        if metrics is not None:
            try:
                metrics.observe(lambda: self.queue_depth, lambda: self._store.held)
            except Exception:
                logger.exception("ragtrace: metrics.observe failed")

    def _start_worker(self) -> ScoringWorker:
        worker = ScoringWorker(
            self._judge, concurrency=self._concurrency, max_queue=self._max_queue, on_tick=self._tick,
            tick_interval=self._tick_interval,
        )
        worker.start()
        return worker

    def _start_remote(self) -> ScoringProcess:
        settings = ChildSettings(
            judge=self._judge, scorers=self._scorers, sampler=self._sampler, target=self._target,
            score_deadline=self._score_deadline, max_queue=self._max_queue,
            max_held_spans=self._store.max_held_spans, max_open_traces=self._store.max_open_traces,
            concurrency=self._concurrency, redactor=self._redactor,
            extractor=self._extractor, reason_max_chars=self._reason_max_chars,
            record_metrics=self._metrics is not None,
        )
        try:
            remote = ScoringProcess(settings)
        except Exception as exc:
            self._worker.stop()
            raise ValueError(
                "worker='process' sends the judge, scorers, sampler, redactor and extractor to the scoring "
                f"process, and they must pickle: {type(exc).__name__}: {exc}"
            ) from exc
        try:
            remote.start()
        except BaseException:
            self._worker.stop()
            raise
        return remote

    def _after_fork_in_child(self) -> None:
        """The worker thread does not survive fork, and the parent exports what it held: start empty."""
        self._store = SpanStore(
            max_held_spans=self._store.max_held_spans, max_open_traces=self._store.max_open_traces
        )
        self._counts_lock = threading.Lock()
        self._shutdown_lock = threading.Lock()
        self._outbox = []
        if self._remote is not None:  # the parent's scoring process answers the parent only
            self._remote.abandon()
        if not self._shutdown:
            self._worker = self._start_worker()
            if self._remote is not None:
                self._remote = self._start_remote()

    # --- introspection (tests, health) ------------------------------------------------------------

    @property
    def decisions(self) -> dict[str, int]:
        """Decision counts so far (the same numbers as the `ragtrace.evaluation.decisions` counter)."""
        with self._counts_lock:
            self._move_unsampled_roots()
            return dict(self._counts)

    @property
    def capture_counts(self) -> dict[str, int]:
        """Why spans could not be read (`invalid_documents_json`, ...), as counted by capture."""
        with self._counts_lock:
            return dict(self._capture_counts)

    @property
    def held_spans(self) -> int:
        return self._store.held

    @property
    def open_traces(self) -> int:
        return self._store.open_traces

    @property
    def queue_depth(self) -> int:
        """Jobs queued or running; with worker="process", traces out at the scoring process."""
        return self._worker.depth if self._remote is None else self._store.pending_traces

    # --- the app thread ---------------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self._forward_start:
            try:
                self._exporting.on_start(span, parent_context=parent_context)
            except Exception:
                logger.exception("ragtrace: wrapped on_start failed")

    def _on_ending(self, span: Span) -> None:
        if self._forward_ending:
            try:
                self._exporting._on_ending(span)
            except Exception:
                logger.exception("ragtrace: wrapped _on_ending failed")

    def on_end(self, span: ReadableSpan) -> None:
        """O(1) and exception-safe: forward, or hold for scoring (a dict insert under a lock)."""
        if self._holds(span):
            return
        try:
            self._exporting.on_end(span)
        except Exception:
            logger.exception("ragtrace: wrapped on_end failed")

    def _admit(self, spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
        """`on_end` for a batch (`RagScoringSpanExporter`): holds what it holds, returns what goes on now.

        It is `_holds` unrolled over the batch (a call per span is a third of the loop's cost), and it
        works the sampling test out once per run of spans of one trace (a batch holds a trace's spans
        side by side, and they share the trace id's int). A test checks it decides as `_holds` does."""
        passing: list[ReadableSpan] = []
        bound = self._sample_bound
        last_trace_id, sampled = None, False
        for span in spans:
            try:
                ctx, parent = (SDK_IDS if type(span) is SDK_SPAN else PUBLIC_IDS)(span)
                if ctx is not None:
                    trace_id = ctx[TRACE_ID]
                    if trace_id is not last_trace_id:
                        last_trace_id = trace_id
                        sampled = type(trace_id) is int and (trace_id & TRACE_ID_MASK) < bound
                    if sampled:
                        if self._hold(span, trace_id, parent is None or parent[IS_REMOTE]):
                            continue
                    elif parent is None or parent[IS_REMOTE]:  # one unsampled trace
                        next(self._unsampled_roots.count)
            except Exception:
                logger.exception("ragtrace: admitting a span failed; span forwarded unscored")
            passing.append(span)
        return passing

    def _holds(self, span: ReadableSpan) -> bool:
        """True when the span is held for scoring; False: it goes on now (never raises).

        It runs on every span: it calls as few Python functions as it can (no property, no method of
        the sampler), since each costs the app more than the work inside it."""
        try:
            ctx, parent = (SDK_IDS if type(span) is SDK_SPAN else PUBLIC_IDS)(span)
            if ctx is not None:
                trace_id = ctx[TRACE_ID]
                is_root = parent is None or parent[IS_REMOTE]  # a local root (is_local_root, inlined)
                if type(trace_id) is int and (trace_id & TRACE_ID_MASK) < self._sample_bound:
                    return self._hold(span, trace_id, is_root)
                if is_root:  # one unsampled trace
                    next(self._unsampled_roots.count)
        except Exception:
            logger.exception("ragtrace: on_end failed; span forwarded unscored")
        return False

    def _hold(self, span: ReadableSpan, trace_id: int, is_root: bool) -> bool:
        """True when the store keeps the span for the worker to forward; False: the caller forwards it.

        A sampled trace is held from the first span the readers need on (`capture_start`): the spans
        that end before it carry no score and inform none, so they go straight to the exporter, and a
        trace with no RAG span is never held at all."""
        if self._shutdown:
            return False
        held = self._store.open_trace(trace_id)
        if held is not None and held.has_retrieval:  # held anyway, and nothing more to learn from it
            start: str | None = "held"
        else:
            start = capture_start(span)
            if start is None:
                if self._hold_every_span:
                    start = "every_span"
                elif held is None and not is_root:
                    return False
        result = self._store.add(span, trace_id, is_root, start == "retrieval", start is not None)
        if result == "held":
            # link mode exports at once: the store keeps a reference to read, never to forward
            return self._mode == "enrich"
        if result == "passed":
            if is_root:  # a sampled trace that ended with nothing to read
                next(self._rag_free_roots.count)
        elif result == "overflow":
            self._count("queue_full")
        return False

    def _forward_all(self, spans: Iterable[ReadableSpan]) -> None:
        forward = self._exporting.on_end
        for span in spans:
            try:
                forward(span)
            except Exception:
                logger.exception("ragtrace: wrapped on_end failed")

    def _count(self, decision: str, n: int = 1) -> None:
        with self._counts_lock:
            self._counts[decision] += n

    def _move_unsampled_roots(self) -> None:
        """Add the app thread's lock-free counts of roots to `_counts` (under `_counts_lock`)."""
        for decision, count in (("not_sampled", self._unsampled_roots), ("not_rag", self._rag_free_roots)):
            if new := count.take():
                self._counts[decision] += new

    def _report(self) -> None:
        """Push decision counts to metrics (batched so the app thread never touches the meter)."""
        if self._metrics is None:  # `decisions` reads the counts themselves
            return
        with self._counts_lock:
            self._move_unsampled_roots()
            counted = self._counts + self._capture_counts
            pending, self._reported = counted - self._reported, counted
        for decision, n in pending.items():
            try:
                self._metrics.decision(decision, n)
            except Exception:
                logger.exception("ragtrace: metrics.decision failed")

    # --- the worker thread ------------------------------------------------------------------------

    def _tick(self, *, everything: bool = False) -> bool:
        """Close traces whose root ended (or that waited too long), release expired ones, report.
        True while anything is held or a lost scoring process is to be started again."""
        if self._remote is not None:
            self._remote_tick()
        for trace in self._store.take_closing(self._max_trace_wait, everything=everything):
            try:
                self._close(trace)
            except Exception:
                logger.exception("ragtrace: closing a trace failed; spans forwarded unscored")
                self._count("error")
                self._pass_through(trace)
        if self._outbox:
            self._ship()
        for pending in self._store.pop_expired(time.monotonic()):
            self._release(pending)
        self._report()
        return self._store.held > 0 or (self._remote is not None and not self._remote.alive)

    def _close_open_traces(self, timeout: float = 5.0) -> None:
        """Close every open trace now rather than at its root or `max_trace_wait` (the scoring process
        receives whole traces, so it need not wait for anything)."""
        self._worker.call(lambda: self._tick(everything=True), timeout)

    def _pass_through(self, trace: OpenTrace) -> None:
        if self._mode == "enrich":
            self._forward_all(trace.spans)
        self._store.release(len(trace.spans))

    def _close(self, trace: OpenTrace) -> None:
        """Extract samples, decide which to judge, queue the jobs (or pass the trace through)."""
        if trace.overflowed:  # counted as queue_full when it overflowed
            self._pass_through(trace)
            return
        if not trace.has_retrieval and self._extractor is None:  # held for its ground truth only: nothing to read
            self._count("not_rag")
            self._pass_through(trace)
            return
        if self._remote is not None:
            self._queue_remote(trace)
            return
        spans = trace.spans
        stats = CaptureStats()
        samples = extract_samples(spans, extractor=self._extractor, stats=stats)
        if stats.counts:  # why spans could not be read: reported on the decision counter too
            with self._counts_lock:
                self._capture_counts.update(stats.counts)
        if not samples:
            self._count("not_rag")
            self._pass_through(trace)
            return
        by_id = {s.context.span_id: s for s in spans if s.context is not None}
        first = spans[0]
        assert first.context is not None  # only spans with a context are ever held
        trace_id = first.context.trace_id
        jobs: dict[int, tuple[RagSample, tuple[Scorer, ...]]] = {}
        refs: dict[int, SampleRef] = {}
        for key, captured in enumerate(samples):
            planned = self._plan(trace_id, captured, by_id.get(captured.retrieval_span_id, first))
            if planned is not None:
                jobs[key] = planned
                target = self._target_of(captured, by_id, spans)
                refs[key] = SampleRef(target, tuple(s.name for s in planned[1]), captured.retriever)
        if not jobs:
            self._pass_through(trace)
            return
        link = self._mode == "link"  # link mode: spans are exported already, only references are held
        pending = PendingTrace(
            trace_id=trace_id,
            spans=[] if link else spans,
            deadline=time.monotonic() + self._score_deadline,
            resource=first.resource,
            trace_flags=first.context.trace_flags,
            waiting=refs,
        )
        if not self._store.put_pending(trace_id, pending):
            self._count("queue_full", len(jobs))
            self._pass_through(trace)
            return
        if link:
            self._store.release(len(spans))
        # From here on the spans belong to the pending trace: nothing below may raise into _tick,
        # whose fallback would forward them a second time.
        start_ns = time.time_ns()
        for key, (sample, scorers) in jobs.items():
            job = ScoreJob(
                sample=sample,
                scorers=scorers,
                deadline=pending.deadline,
                on_done=self._on_done(trace_id, key, start_ns),
            )
            try:
                submitted = self._worker.submit(job)
            except Exception:
                logger.exception("ragtrace: submitting a job failed")
                submitted = False
            if not submitted:
                self._count("queue_full")
                recorded = self._store.record(trace_id, key, None)
                if recorded is not None and recorded[2]:
                    self._release(recorded[1])

    # --- worker="process" ------------------------------------------------------------------------------

    def _queue_remote(self, trace: OpenTrace) -> None:
        """Park a closed trace and put it in this tick's message to the scoring process."""
        spans = trace.spans
        first = spans[0]
        assert first.context is not None  # only spans with a context are ever held
        if self._store.pending_traces >= self._max_queue:
            self._count("queue_full")
            self._pass_through(trace)
            return
        pending = PendingTrace(
            trace_id=first.context.trace_id,
            spans=spans,
            deadline=time.monotonic() + self._score_deadline + REMOTE_GRACE_S,
            resource=first.resource,
            trace_flags=first.context.trace_flags,
            waiting={0: _REMOTE},
        )
        if not self._store.put_pending(pending.trace_id, pending):
            self._count("queue_full")
            self._pass_through(trace)
            return
        self._outbox.append(pending)

    def _ship(self) -> None:
        """Send this tick's closed traces in one message; if the scoring process is gone, forward them."""
        outbox, self._outbox = self._outbox, []
        remote = self._remote
        assert remote is not None
        try:
            unsent = [] if remote.send([pending.spans for pending in outbox]) else outbox
        except Exception:  # a trace that does not encode (a foreign span, say): find it, send the others
            unsent = []
            for pending in outbox:
                try:
                    if not remote.send([pending.spans]):
                        unsent.append(pending)
                except Exception as exc:
                    logger.warning("ragtrace: a trace could not be sent for scoring (%s: %s); forwarded unscored",
                                   type(exc).__name__, exc)
                    unsent.append(pending)
        for pending in unsent:
            recorded = self._store.record(pending.trace_id, 0, None)
            if recorded is not None:
                self._count("error")
                self._forward_all(recorded[1].spans)

    def _remote_tick(self) -> None:
        """Take the scoring process's answers. If it is gone, forward what it had unscored (counted as
        errors) and start a new one, backing off while starts keep failing."""
        remote = self._remote
        assert remote is not None
        for answers in remote.receive():
            self._remote_answers(answers)
        if remote.alive:
            return
        for pending in self._store.pop_expired(time.monotonic(), everything=True):
            self._count("error")
            self._forward_all(pending.spans)
        now = time.monotonic()
        if self._shutdown or now < self._remote_restart_at:
            return
        self._remote_restart_at = now + self._remote_backoff
        self._remote_backoff = min(self._remote_backoff * 2, REMOTE_RESTART_MAX_S)
        try:
            remote.restart()
            logger.warning("ragtrace: started a new scoring process")
        except Exception:
            logger.exception("ragtrace: starting a new scoring process failed")

    def _remote_drain(self, deadline: float) -> None:
        """Flush (worker thread): take the scoring process's answers until nothing waits or `deadline`."""
        assert self._remote is not None
        while self._store.pending_traces and self._remote.alive and (left := deadline - time.monotonic()) > 0:
            for answers in self._remote.receive(min(left, 0.05)):
                self._remote_answers(answers)

    def _remote_answers(self, answers: Answers) -> None:
        """The scoring process answered (worker thread): replay metrics; count, write and forward traces."""
        self._remote_backoff = 1.0  # it works: a later loss restarts it soon again
        if self._metrics is not None:
            for name, args in answers.metric_calls:
                try:
                    getattr(self._metrics, name)(*args)
                except Exception:
                    logger.exception("ragtrace: metrics.%s failed", name)
        for answer in answers.traces:
            recorded = self._store.record(answer.trace_id, 0, None)
            if recorded is None:  # released already (deadline, flush) and counted as a timeout then
                continue
            with self._counts_lock:
                _add_counts(self._counts, answer.decisions)
                _add_counts(self._capture_counts, answer.capture)
            writes = {span_id: (attrs, events_of(events)) for span_id, attrs, events in answer.writes}
            self._forward_with_writes(recorded[1].spans, writes)

    def _plan(
        self, trace_id: int, captured: CapturedSample, span: ReadableSpan
    ) -> tuple[RagSample, tuple[Scorer, ...]] | None:
        """Sampling, admission and redaction for one sample; None when it is not to be judged."""
        names = [
            s.name for s in self._scorers
            if not (isinstance(s, ContextRecall) and captured.sample.ground_truth is None)
        ]
        chosen = self._sampler.scorers_for(trace_id, span, names) if names else ()
        if not chosen:
            self._count("not_sampled")
            return None
        admission = self._sampler.admit()
        if admission != "ok":
            self._count(admission)
            return None
        sample = captured.sample
        if self._redactor is not None:
            try:
                sample = self._redactor.redact_sample(sample)
            except Exception:  # never send an unredacted sample to the judge
                logger.exception("ragtrace: redaction failed; sample not judged")
                self._count("error")
                return None
        return sample, tuple(self._by_name[n] for n in chosen if n in self._by_name)

    def _target_of(
        self, captured: CapturedSample, by_id: dict[int, ReadableSpan], spans: Sequence[ReadableSpan]
    ) -> int:
        """The span id the scores are written to; falls back to the retrieval span."""
        if self._target == "generation" and captured.generation_span_id in by_id:
            return captured.generation_span_id  # type: ignore[return-value]
        if self._target == "root":
            if captured.root_span_id in by_id:
                return captured.root_span_id  # type: ignore[return-value]
            root = next((s for s in spans if is_local_root(s) and s.context is not None), None)
            if root is not None and root.context is not None:
                return int(root.context.span_id)
        return captured.retrieval_span_id

    def _on_done(self, trace_id: int, key: int, start_ns: int) -> Callable[[Evaluation, float], None]:
        def done(evaluation: Evaluation, duration_s: float) -> None:
            self._job_done(trace_id, key, start_ns, evaluation, duration_s)

        return done

    def _job_done(
        self, trace_id: int, key: int, start_ns: int, evaluation: Evaluation, duration_s: float
    ) -> None:
        """A job reported (worker thread): bill it, count it, write it or keep it for the release."""
        try:
            self._sampler.charge(evaluation.usage)
        except Exception:
            logger.exception("ragtrace: sampler.charge failed")
        if self._metrics is not None and (evaluation.usage.calls or evaluation.timed_out):
            try:
                self._metrics.judge_call(evaluation.usage, evaluation.status, duration_s)
            except Exception:
                logger.exception("ragtrace: metrics.judge_call failed")
        recorded = self._store.record(trace_id, key, evaluation if self._mode == "enrich" else None)
        if recorded is None:  # released already (deadline, flush): counted as timeout then
            return
        ref, pending, last = recorded
        for result in evaluation.results:
            self._count(decision_of(result))
            # Results skipped for `no_context` reach metrics too: they make the empty-retrieval rate.
            if self._metrics is not None and (result.score is not None or result.skipped == "no_context"):
                try:
                    self._metrics.score(result, ref.retriever)
                except Exception:
                    logger.exception("ragtrace: metrics.score failed")
        if self._mode == "link":
            self._emit_links(pending, ref.target, evaluation, start_ns)
        if last:
            self._release(pending)

    def _emit_links(self, pending: PendingTrace, target: int, evaluation: Evaluation, start_ns: int) -> None:
        ctx = SpanContext(pending.trace_id, target, is_remote=False, trace_flags=pending.trace_flags)
        for result in evaluation.results:
            try:
                span = evaluation_span(
                    ctx, result, evaluation, resource=pending.resource, start_time=start_ns,
                    reason_max_chars=self._reason_max_chars,
                )
            except Exception:
                logger.exception("ragtrace: building an evaluation span failed")
                continue
            self._forward_all((span,))

    def _timed_out(self, ref: SampleRef) -> Evaluation:
        return Evaluation(
            results=tuple(
                ScoreResult(name=n, error="judge_timeout", reason="not scored: no score before the deadline")
                for n in ref.names
            ),
            usage=JudgeUsage(),
            timed_out=True,
            model=str(getattr(self._judge, "model", "")),
            prompt_version=str(getattr(self._judge, "prompt_version", "")),
        )

    def _release(self, pending: PendingTrace) -> None:
        """Forward a pending trace once (it was taken out of the store): unfinished samples time out."""
        self._time_out_waiting(pending)
        self._forward_with_writes(pending.spans, self._writes(pending.evaluations))

    def _time_out_waiting(self, pending: PendingTrace) -> None:
        """The samples still waiting get a timeout evaluation (enrich) or span (link), and are counted."""
        start_ns = time.time_ns()
        for ref in pending.waiting.values():
            if ref is _REMOTE:  # a trace out at the scoring process: its samples are not known here
                self._count("timeout")
                continue
            evaluation = self._timed_out(ref)
            self._count("timeout", len(ref.names))
            if self._mode == "link":
                self._emit_links(pending, ref.target, evaluation, start_ns)
            else:
                pending.evaluations.setdefault(ref.target, []).append(evaluation)
        pending.waiting = {}

    def _writes(
        self, evaluations_by_span: dict[int, list[Evaluation]]
    ) -> dict[int, tuple[dict[str, AttributeValue], list[Event]]]:
        """The attributes and events each evaluated span gets."""
        writes: dict[int, tuple[dict[str, AttributeValue], list[Event]]] = {}
        for span_id, evaluations in evaluations_by_span.items():
            try:
                attrs: dict[str, AttributeValue] = {}
                events: list[Event] = []
                for evaluation in evaluations:
                    more_attrs, more_events = evaluation_writes(evaluation, self._reason_max_chars)
                    attrs.update(more_attrs)
                    events.extend(more_events)
                writes[span_id] = (attrs, events)
            except Exception:
                logger.exception("ragtrace: writing an evaluation failed; its span is forwarded unscored")
        return writes

    def _forward_with_writes(
        self, spans: Iterable[ReadableSpan], writes: dict[int, tuple[dict[str, AttributeValue], list[Event]]]
    ) -> None:
        """Forward each span once, with the attributes and events written for it (if any)."""
        if writes:
            spans = [self._written(span, writes) for span in spans]
        self._forward_all(spans)

    @staticmethod
    def _written(span: ReadableSpan, writes: dict[int, tuple[dict[str, AttributeValue], list[Event]]]) -> ReadableSpan:
        ctx = (SDK_IDS if type(span) is SDK_SPAN else PUBLIC_IDS)(span)[0]
        found = writes.get(ctx[SPAN_ID]) if ctx is not None else None
        if found is None:
            return span
        try:
            return enrich(span, *found)
        except Exception:
            logger.exception("ragtrace: enriching a span failed; forwarded unscored")
            return span

    # --- flush and shutdown -----------------------------------------------------------------------

    def _settle(self, deadline: float) -> None:
        """Close every open trace, wait for scoring until `deadline`, forward whatever is still held."""
        if not self._worker.call(lambda: self._tick(everything=True), deadline - time.monotonic()):
            for trace in self._store.take_closing(self._max_trace_wait, everything=True):
                self._count("timeout")
                self._pass_through(trace)
        # Wait for the traces that are still waiting for scores (not for jobs whose trace is gone);
        # never on the worker's own thread (a judge flushing the provider), which would deadlock it.
        if self._remote is not None:
            self._worker.call(lambda: self._remote_drain(deadline), deadline - time.monotonic())
        elif not self._worker.on_loop:
            self._store.wait_drained(deadline - time.monotonic())
        for pending in self._store.pop_expired(time.monotonic(), everything=True):
            self._release(pending)
        self._report()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Score what can be scored within the timeout, forward everything held, flush the exporter."""
        deadline = time.monotonic() + timeout_millis / 1000
        try:
            if not self._shutdown:
                self._settle(deadline)
        except Exception:
            logger.exception("ragtrace: force_flush failed")
        remaining = max(int((deadline - time.monotonic()) * 1000), 0)
        try:
            return bool(self._exporting.force_flush(remaining))
        except Exception:
            logger.exception("ragtrace: wrapped force_flush failed")
            return False

    def shutdown(self) -> None:
        """Settle (waiting at most `score_deadline`), stop the worker, shut the wrapped processor down."""
        with self._shutdown_lock:
            if self._shutdown:
                return
            self._shutdown = True
        try:
            self._settle(time.monotonic() + self._score_deadline)
            self._worker.stop()
            open_traces, pending = self._store.close()
            for trace in open_traces:
                self._count("timeout")
                self._forward_all(trace.spans if self._mode == "enrich" else ())
            for item in pending:
                self._release(item)
            if self._remote is not None:
                self._remote.stop()
            self._report()
            if self._metrics is not None:
                self._metrics.shutdown()
        except Exception:
            logger.exception("ragtrace: shutdown failed")
        try:
            self._exporting.shutdown()
        except Exception:
            logger.exception("ragtrace: wrapped shutdown failed")
