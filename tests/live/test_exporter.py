"""RagScoringSpanExporter behind the SDK's batching: what differs from the processor in front of it.

The shared behaviour (zero loss, hostile input, OTLP end to end) is tested with both placements in
test_zero_loss, test_bad_input and test_e2e_otlp; here: where the work runs, flush and shutdown order,
one export at a time, suppressed instrumentation, a failing exporter; and that a batch is admitted span
by span as the processor's on_end would admit it.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from ragtrace.live.exporter import MAX_EXPORT_BATCH, RagScoringSpanExporter, ScoringBatchSpanProcessor
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from tests.live.fakes import (
    CountingExporter,
    CountingProcessor,
    Rig,
    ScriptedJudge,
    child_verdict,
    documents,
    fork_running,
    plain_trace,
    provider_with,
    rag_trace,
)


def exporter_rig(rig: Callable[..., Rig], judge: ScriptedJudge | None = None, **options: object) -> Rig:
    return rig(judge, placement="exporter", **options)


def test_the_app_thread_runs_no_ragtrace_code(rig: Callable[..., Rig], monkeypatch: pytest.MonkeyPatch) -> None:
    r = exporter_rig(rig)
    admitted_on: set[int] = set()
    admission = r.scoring.scoring.admission
    admit = admission.admit

    def recording(spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
        admitted_on.add(threading.get_ident())
        return admit(spans)

    monkeypatch.setattr(admission, "admit", recording)
    monkeypatch.setattr(admission, "holds", lambda span: pytest.fail("span by span admission runs"))
    ids = rag_trace(r.tracer) + plain_trace(r.tracer)
    end = time.monotonic() + 10
    while len(r.out.spans) < len(ids) and time.monotonic() < end:  # no flush: the batching thread's own pace
        time.sleep(0.01)
    r.assert_exactly_once(ids)
    assert admitted_on and threading.get_ident() not in admitted_on
    (retrieval,) = r.out.by_name("retrieve")
    assert (retrieval.attributes or {})["ragtrace.eval.status"] == "scored"


def test_provider_flush_waits_for_scoring(rig: Callable[..., Rig]) -> None:
    r = exporter_rig(rig, ScriptedJudge(default="slow", slow_s=0.3))
    ids = rag_trace(r.tracer, query="what is good?")
    assert r.flush(5000)
    r.assert_exactly_once(ids)  # held spans included: flushed, not left behind
    (retrieval,) = r.out.by_name("retrieve")
    assert (retrieval.attributes or {})["ragtrace.eval.status"] == "scored"


def test_a_plain_batch_processor_flush_leaves_scoring_traces_held() -> None:
    """Why ScoringBatchSpanProcessor exists: the SDK's own force_flush never flushes its exporter."""
    out = CountingExporter()
    scoring = RagScoringSpanExporter(out, judge=ScriptedJudge(default="slow", slow_s=0.5),
                                     sampler=Sampler(rate=1.0), tick_interval=0.01)
    provider = provider_with(BatchSpanProcessor(scoring, schedule_delay_millis=10))
    try:
        ids = rag_trace(provider.get_tracer("t"), query="what is good?")
        assert provider.force_flush(5000)
        # The retrieval waits for its scores; the spans nothing is written on went on in their batch.
        assert scoring.held_spans == len(ids)
        assert [s.name for s in out.spans if s.attributes and "gen_ai.operation.name" in s.attributes] == ["chat"]
        assert len(out.spans) == len(ids) - 1
    finally:
        provider.shutdown()  # shutdown still exports them: the batching shuts its exporter down
    assert sorted(out.ids()) == sorted(ids)


class BareExporter(SpanExporter):
    """An exporter with only `export`, as many are: the SDK's `force_flush` stub returns None."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def test_flush_succeeds_with_an_exporter_that_has_no_force_flush() -> None:
    out = BareExporter()
    scoring = RagScoringSpanExporter(out, judge=ScriptedJudge(), sampler=Sampler(rate=1.0), tick_interval=0.01)
    provider = provider_with(ScoringBatchSpanProcessor(scoring))
    ids = rag_trace(provider.get_tracer("t"))
    assert provider.force_flush(5000)
    assert sorted(s.context.span_id for s in out.spans if s.context is not None) == sorted(ids)
    provider.shutdown()


def test_flush_timeout_bounds_the_wait_and_forwards_unscored(rig: Callable[..., Rig]) -> None:
    r = exporter_rig(rig, ScriptedJudge(default="hang"))
    ids = rag_trace(r.tracer, query="what is good?")
    started = time.monotonic()
    r.flush(300)
    assert time.monotonic() - started < 3.0
    r.assert_exactly_once(ids)
    (retrieval,) = r.out.by_name("retrieve")
    assert (retrieval.attributes or {})["ragtrace.eval.status"] == "timeout"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_exports_its_own_spans_only(rig: Callable[..., Rig]) -> None:
    """Gathered spans are the parent's to export; a lock the parent held at the fork would hang the child."""
    r = exporter_rig(rig)
    outlet = r.scoring.outlet
    in_flight = ReadableSpan(name="exported by the parent at the fork", context=SpanContext(1, 3, is_remote=False))
    gathered = ReadableSpan(name="gathered in the parent", context=SpanContext(1, 2, is_remote=False))
    holding, done = threading.Event(), threading.Event()
    parent, export = os.getpid(), r.out.export

    def slow_export(spans: Sequence[ReadableSpan]) -> SpanExportResult:  # the parent's export is under way
        if os.getpid() == parent and in_flight in spans:
            holding.set()
            done.wait(10)
        return export(spans)

    r.out.export = slow_export  # type: ignore[method-assign]
    exporting = threading.Thread(target=outlet.export, args=([in_flight],))
    exporting.start()
    holding.wait(10)
    outlet.send([gathered])

    def in_the_child() -> bool:
        ids = rag_trace(r.tracer)
        return r.flush(5000) and sorted(r.out.ids()) == sorted(ids)  # not the parent's gathered span

    child = fork_running(in_the_child)
    done.set()
    exporting.join()
    assert child_verdict(*child), "the child hung or exported the parent's spans"
    assert r.flush()
    assert r.out.spans == [in_flight, gathered]


class OrderedExporter(CountingExporter):
    """Records the order of export calls and shutdown, and any two exports running at once."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self.delay = delay
        self.calls: list[str] = []
        self.running = 0
        self.overlapped = False
        self.suppressed: list[bool] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.running += 1
        self.overlapped |= self.running > 1
        self.suppressed.append(bool(otel_context.get_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY)))
        try:
            time.sleep(self.delay)
            self.calls.append("export")
            return super().export(spans)
        finally:
            self.running -= 1

    def shutdown(self) -> None:
        self.calls.append("shutdown")
        super().shutdown()


def test_shutdown_exports_what_is_held_then_shuts_the_exporter_down_once() -> None:
    out = OrderedExporter()
    scoring = RagScoringSpanExporter(out, judge=ScriptedJudge(default="hang"), sampler=Sampler(rate=1.0),
                                     score_deadline=0.2, tick_interval=0.01)
    provider = provider_with(ScoringBatchSpanProcessor(scoring, schedule_delay_millis=10))
    ids = rag_trace(provider.get_tracer("t"), query="what is good?")
    provider.shutdown()
    assert sorted(out.ids()) == sorted(ids)
    assert out.calls[-1] == "shutdown" and out.calls.count("shutdown") == 1
    scoring.shutdown()  # again: nothing more happens
    assert out.calls.count("shutdown") == 1


def test_one_export_at_a_time_and_none_traced() -> None:
    """The batching thread and the worker both export: never at once, and never with instrumentation on
    (the SDK sets suppression around its own exports; ragtrace's worker and flush do the same)."""
    out = OrderedExporter(delay=0.002)
    scoring = RagScoringSpanExporter(out, judge=ScriptedJudge(), sampler=Sampler(rate=0.5), tick_interval=0.005)
    provider = provider_with(ScoringBatchSpanProcessor(scoring, schedule_delay_millis=5, max_export_batch_size=8))
    tracer = provider.get_tracer("t")
    ids: list[int] = []
    for n in range(150):
        ids += rag_trace(tracer, query=f"q{n}") if n % 2 else plain_trace(tracer)
        if n % 25 == 0:
            provider.force_flush(50)  # a flush from the app's thread as well
    provider.shutdown()
    assert sorted(out.ids()) == sorted(ids)
    assert not out.overlapped
    assert out.suppressed and all(out.suppressed)


class SizedExporter(CountingExporter):
    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.sizes.append(len(spans))
        return super().export(spans)


def test_scored_traces_go_out_together_in_calls_of_at_most_512_spans() -> None:
    """Released traces are gathered for the next export (the batching thread's, or the worker's at its
    tick): an OTLP request per scored trace would cost the collector and the app far more."""
    out = SizedExporter()
    scoring = RagScoringSpanExporter(out, judge=ScriptedJudge(), sampler=Sampler(rate=1.0), tick_interval=0.05)
    provider = provider_with(ScoringBatchSpanProcessor(scoring))
    tracer = provider.get_tracer("t")
    ids = [span_id for _ in range(400) for span_id in rag_trace(tracer)]
    assert provider.force_flush(10_000)
    assert sorted(out.ids()) == sorted(ids)
    assert scoring.decisions == {"scored": 800}
    assert max(out.sizes) <= MAX_EXPORT_BATCH == 512
    assert len(out.sizes) < 40, out.sizes  # 400 traces, 1,600 spans: a few ticks' worth of calls
    provider.shutdown()


class FailingExporter(CountingExporter):
    """Fails every export that carries a scored span: raising, or returning FAILURE."""

    def __init__(self, raises: bool) -> None:
        super().__init__()
        self.raises = raises

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if any("ragtrace.eval.status" in (s.attributes or {}) for s in spans):
            if self.raises:
                raise ConnectionError("collector gone")
            return SpanExportResult.FAILURE
        return super().export(spans)


@pytest.mark.parametrize("raises", [True, False])
def test_a_failing_exporter_is_logged_and_scoring_goes_on(raises: bool, caplog: pytest.LogCaptureFixture) -> None:
    out = FailingExporter(raises)
    scoring = RagScoringSpanExporter(out, judge=ScriptedJudge(), sampler=Sampler(rate=1.0), tick_interval=0.01)
    provider = provider_with(ScoringBatchSpanProcessor(scoring, schedule_delay_millis=10))
    tracer = provider.get_tracer("t")
    with caplog.at_level(logging.WARNING, logger="ragtrace"):
        # Of each RAG trace (root, retrieve, chat, step 0) only the retrieval waits for its scores.
        unscored = [span_id for _ in range(3) for i, span_id in enumerate(rag_trace(tracer)) if i != 1]
        provider.force_flush(5000)  # False if this flush's export carried the scored spans, not the worker's
        plain = plain_trace(tracer)
        assert provider.force_flush(5000)
    provider.shutdown()
    assert sorted(out.ids()) == sorted(unscored + plain)  # what carries no score still went out
    assert scoring.decisions.get("scored") == 6  # 3 traces x precision and relevance
    assert scoring.held_spans == 0
    expected = "the wrapped exporter raised" if raises else "failed to export"
    assert any(expected in record.getMessage() for record in caplog.records)


def test_invalid_options_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="mode must be"):
        RagScoringSpanExporter(CountingExporter(), judge=ScriptedJudge(), mode="sideways")


_kept = CountingProcessor()
_fuzz_provider = TracerProvider()
_fuzz_provider.add_span_processor(_kept)
_fuzz_tracer = _fuzz_provider.get_tracer("fuzz")

trace_shapes = st.lists(
    st.tuples(
        st.lists(st.sampled_from(["retrieval", "chat", "plain", "db", "ground_truth"]), max_size=4),  # children
        st.booleans(),  # the root's parent is remote (propagated from another service)
        st.booleans(),  # the root ends (or the trace stays open)
    ),
    min_size=1, max_size=6,
)
CHILD_ATTRS: dict[str, dict[str, str]] = {
    "retrieval": {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": documents(["good"])},
    "chat": {"gen_ai.operation.name": "chat"},
    "plain": {},
    "db": {"db.system": "postgresql"},
    "ground_truth": {"ragtrace.ground_truth": "the truth"},
}


def fuzz_spans(shapes: list[tuple[list[str], bool, bool]]) -> list[ReadableSpan]:
    _kept.spans.clear()
    for children, remote_parent, root_ends in shapes:
        parent = None
        if remote_parent:
            remote = SpanContext(random.getrandbits(128) or 1, random.getrandbits(64) or 1, is_remote=True,
                                 trace_flags=TraceFlags(TraceFlags.SAMPLED))
            parent = set_span_in_context(NonRecordingSpan(remote))
        root = _fuzz_tracer.start_span("root", context=parent)
        for kind in children:
            with _fuzz_tracer.start_as_current_span(kind, context=set_span_in_context(root)) as child:
                child.set_attributes(CHILD_ATTRS[kind])
        if root_ends:
            root.end()
    return [*_kept.spans, ReadableSpan(name="no context")]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(shapes=trace_shapes, rate=st.sampled_from([0.0, 0.3, 1.0]), order=st.randoms(use_true_random=False),
       cuts=st.lists(st.integers(1, 8), max_size=6))
def test_a_batch_is_admitted_as_on_end_would_admit_each_span(
    shapes: list[tuple[list[str], bool, bool]], rate: float, order: random.Random, cuts: list[int]
) -> None:
    """`admit` unrolls `holds` over a batch: the same spans go on, the same are held, the same counted,
    whatever the traces, the interleaving of their spans and the cut into batches."""
    spans = fuzz_spans(shapes)
    if order.random() < 0.5:  # spans of several traces interleaved, as concurrent requests end them
        order.shuffle(spans)
    one_by_one, batched = (
        RagScoringSpanProcessor(CountingProcessor(), judge=ScriptedJudge(), sampler=Sampler(rate), tick_interval=3600)
        for _ in range(2)
    )
    try:
        passed_one_by_one = [span for span in spans if not one_by_one.scoring.admission.holds(span)]
        passed_batched: list[ReadableSpan] = []
        start = 0
        for size in [*cuts, len(spans)]:
            passed_batched += batched.scoring.admission.admit(spans[start:start + size])
            start += size
        assert passed_batched == passed_one_by_one
        assert batched.held_spans == one_by_one.held_spans and batched.open_traces == one_by_one.open_traces
        assert batched.decisions == one_by_one.decisions
    finally:
        one_by_one.shutdown()
        batched.shutdown()
