"""RagScoringSpanProcessor unit tests: real TracerProvider and spans, a scripted in-process judge."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags, set_span_in_context

from ragtrace.capture import CapturedSample
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from ragtrace.scoring import ContextPrecision
from tests.live.fakes import (
    Counting,
    CountingExporter,
    CountingProcessor,
    Rig,
    ScriptedJudge,
    child_verdict,
    documents,
    fork_running,
    open_rag_trace,
    output_messages,
    plain_trace,
    provider_with,
    rag_trace,
)


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def retrieval(out: Counting) -> ReadableSpan:
    (span,) = out.by_name("retrieve")
    return span


def test_enrich_writes_scores_and_events_on_the_retrieval_span(rig: Callable[..., Rig]) -> None:
    r = rig()
    ids = rag_trace(r.tracer, docs=("good doc", "bad doc", "good too"))
    assert wait_until(lambda: len(r.out.spans) == len(ids))
    assert r.exported_once(ids)
    attrs = retrieval(r.out).attributes or {}
    assert attrs["ragtrace.context_precision.score"] == 0.83
    assert attrs["ragtrace.context_precision.label"] == "pass"
    assert attrs["ragtrace.eval.status"] == "scored"
    assert attrs["ragtrace.judge.model"] == "scripted/judge"
    assert attrs["ragtrace.judge.prompt_version"] == "test-v1"
    assert attrs["ragtrace.judge.input_tokens"] == 100
    assert "ragtrace.context_recall.score" not in attrs  # no ground truth: recall does not run
    events = [e for e in retrieval(r.out).events if e.name == "gen_ai.evaluation.result"]
    assert {e.attributes["gen_ai.evaluation.name"] for e in events} == {  # type: ignore[index]
        "context_precision", "context_relevance",
    }
    assert r.proc.decisions == {"scored": 2}
    for span in r.out.spans:  # other spans arrive unchanged
        if span.name != "retrieve":
            assert not any(k.startswith("ragtrace.") for k in span.attributes or {})
    assert r.proc.held_spans == 0
    assert all(r.judge.suppressed)  # the judge runs with instrumentation suppressed


def test_enriched_span_keeps_identity(rig: Callable[..., Rig]) -> None:
    r = rig()
    ids = rag_trace(r.tracer)
    assert wait_until(lambda: len(r.out.spans) == len(ids))
    span = retrieval(r.out)
    (root,) = r.out.by_name("rag request")
    assert span.parent is not None and root.context is not None
    assert span.parent.span_id == root.context.span_id
    assert span.context is not None and span.context.trace_id == root.context.trace_id
    assert span.start_time and span.end_time and span.start_time <= span.end_time
    assert span.instrumentation_scope is not None and span.instrumentation_scope.name == "test"


def test_ground_truth_enables_recall(rig: Callable[..., Rig]) -> None:
    r = rig()
    root = r.tracer.start_span("golden")
    from opentelemetry.trace import set_span_in_context

    root.set_attribute("ragtrace.ground_truth", "the good answer")
    ctx = set_span_in_context(root)
    from tests.live.fakes import documents, output_messages

    with r.tracer.start_as_current_span("retrieve", context=ctx) as s:
        s.set_attribute("gen_ai.operation.name", "retrieval")
        s.set_attribute("gen_ai.retrieval.query.text", "fast: q")
        s.set_attribute("gen_ai.retrieval.documents", documents(["good"]))
    with r.tracer.start_as_current_span("chat", context=ctx) as g:
        g.set_attribute("gen_ai.operation.name", "chat")
        g.set_attribute("gen_ai.output.messages", output_messages("good"))
    root.end()
    assert wait_until(lambda: len(r.out.spans) == 3)
    assert (retrieval(r.out).attributes or {})["ragtrace.context_recall.score"] == 1.0


def test_not_sampled_is_forwarded_at_once_and_counted_per_trace(rig: Callable[..., Rig]) -> None:
    r = rig(sampler=Sampler(rate=0.0))
    ids = rag_trace(r.tracer) + rag_trace(r.tracer)
    assert len(r.out.spans) == len(ids)  # synchronously, no worker involved
    assert r.exported_once(ids)
    assert r.proc.decisions == {"not_sampled": 2}
    assert r.judge.calls == 0


def test_unsampled_roots_are_counted_exactly_across_app_threads(rig: Callable[..., Rig]) -> None:
    """The app thread counts unsampled traces without a lock; reads from other threads lose none."""
    r = rig(sampler=Sampler(rate=0.0))
    threads, traces_each = 4, 300
    reads: list[int] = []
    start = threading.Barrier(threads + 1)

    def app() -> None:
        start.wait()
        for _ in range(traces_each):
            plain_trace(r.tracer, 2)

    workers = [threading.Thread(target=app) for _ in range(threads)]
    for thread in workers:
        thread.start()
    start.wait()
    while any(t.is_alive() for t in workers):  # read (and report) while the app threads count
        reads.append(r.proc.decisions.get("not_sampled", 0))
        r.proc.force_flush(1000)
    for thread in workers:
        thread.join()
    assert reads == sorted(reads)  # a count never goes back
    assert r.proc.decisions == {"not_sampled": threads * traces_each}
    assert len(r.out.spans) == threads * traces_each * 2


def test_non_rag_trace_is_counted(rig: Callable[..., Rig]) -> None:
    r = rig()
    ids = plain_trace(r.tracer, 4)
    assert wait_until(lambda: len(r.out.spans) == len(ids))
    assert r.exported_once(ids)
    assert r.proc.decisions == {"not_rag": 1}


@pytest.mark.parametrize(
    ("behaviour", "status", "error", "decision"),
    [
        ("error", "error", "rate_limited", "error"),
        ("invalid", "error", "judge_invalid_output", "error"),
        ("crash", "error", "judge_error", "error"),
        ("timeout", "timeout", "judge_timeout", "timeout"),
    ],
)
def test_judge_failures_cost_a_score_not_a_span(
    rig: Callable[..., Rig], behaviour: str, status: str, error: str, decision: str
) -> None:
    r = rig()
    ids = rag_trace(r.tracer, query=f"{behaviour}: q")
    assert wait_until(lambda: len(r.out.spans) == len(ids))
    assert r.exported_once(ids)
    attrs = retrieval(r.out).attributes or {}
    assert attrs["ragtrace.eval.status"] == status
    assert attrs["ragtrace.eval.error"] == error
    assert "ragtrace.context_precision.score" not in attrs
    events = [e for e in retrieval(r.out).events if e.name == "gen_ai.evaluation.result"]
    assert events and all(e.attributes["error.type"] == error for e in events)  # type: ignore[index]
    assert r.proc.decisions == {decision: 2}


def test_hanging_judge_is_cut_by_the_score_deadline(rig: Callable[..., Rig]) -> None:
    r = rig(score_deadline=0.2)
    ids = rag_trace(r.tracer, query="hang: q")
    time.sleep(0.05)
    assert [s.name for s in r.out.spans] == ["chat", "step 0", "rag request"]  # the retrieval waits for its scores
    assert wait_until(lambda: len(r.out.spans) == len(ids), timeout=3)
    assert r.exported_once(ids)
    attrs = retrieval(r.out).attributes or {}
    assert attrs["ragtrace.eval.status"] == "timeout"
    assert attrs["ragtrace.eval.error"] == "judge_timeout"
    assert r.proc.decisions == {"timeout": 2}
    assert r.proc.held_spans == 0


def test_hold_whole_trace_makes_every_kept_span_wait_for_the_scores(rig: Callable[..., Rig]) -> None:
    """What a gateway with a spool asks: a replayed trace is then whole, and closes on its root."""
    r = rig(score_deadline=0.2, hold_whole_trace=True)
    ids = rag_trace(r.tracer, query="hang: q")
    time.sleep(0.05)
    assert r.out.spans == []
    assert wait_until(lambda: len(r.out.spans) == len(ids), timeout=3)
    assert r.exported_once(ids)


@pytest.mark.parametrize("target", ["generation", "root"])
def test_target_span(rig: Callable[..., Rig], target: str) -> None:
    r = rig(target=target)
    ids = rag_trace(r.tracer)
    assert wait_until(lambda: len(r.out.spans) == len(ids))
    name = {"generation": "chat", "root": "rag request"}[target]
    (span,) = r.out.by_name(name)
    assert (span.attributes or {})["ragtrace.eval.status"] == "scored"
    assert "ragtrace.eval.status" not in (retrieval(r.out).attributes or {})


def test_several_retrievals_each_scored(rig: Callable[..., Rig]) -> None:
    r = rig()
    ids = rag_trace(r.tracer, retrievals=3)
    assert wait_until(lambda: len(r.out.spans) == len(ids))
    assert r.exported_once(ids)
    spans = r.out.by_name("retrieve")
    assert len(spans) == 3
    assert all((s.attributes or {})["ragtrace.eval.status"] == "scored" for s in spans)
    assert r.proc.decisions == {"scored": 6}


def test_link_mode_adds_evaluation_spans(rig: Callable[..., Rig]) -> None:
    r = rig(mode="link")
    ids = rag_trace(r.tracer)
    assert len(r.out.spans) == len(ids)  # forwarded at once, unchanged
    assert wait_until(lambda: len(r.out.spans) == len(ids) + 2)
    assert r.exported_once([s.context.span_id for s in r.out.spans])  # type: ignore[union-attr]
    target = retrieval(r.out)
    assert not any(k.startswith("ragtrace.") for k in target.attributes or {})
    evals = [s for s in r.out.spans if s.name.startswith("evaluation ")]
    assert {s.name for s in evals} == {"evaluation context_precision", "evaluation context_relevance"}
    for span in evals:
        assert span.kind == SpanKind.INTERNAL
        assert span.parent is not None and target.context is not None
        assert span.parent.span_id == target.context.span_id
        assert span.context is not None and span.context.trace_id == target.context.trace_id
        assert len(span.links) == 1 and span.links[0].context.span_id == target.context.span_id
        attrs = span.attributes or {}
        assert attrs["openinference.span.kind"] == "EVALUATOR"
        assert attrs["ragtrace.eval.status"] == "scored"
        assert span.instrumentation_scope is not None and span.instrumentation_scope.name == "ragtrace"
    (precision,) = [s for s in evals if s.name == "evaluation context_precision"]
    assert (precision.attributes or {})["ragtrace.context_precision.score"] == 1.0


def _linked(status: str, error: str | None, *, judged: bool = True) -> set[tuple[str, object, object]]:
    if not judged:  # no scorer looked at it
        return {("evaluation", status, error)}
    return {(f"evaluation {name}", status, error) for name in ("context_precision", "context_relevance")}


def test_link_mode_says_what_became_of_samples_that_were_not_judged(rig: Callable[..., Rig]) -> None:
    """Every sampled retrieval span gets evaluation spans, also when nothing judged it."""
    throttling = rig(mode="link", sampler=Sampler(rate=1.0, evaluations_per_minute=1))
    scored, throttled = rag_trace(throttling.tracer), rag_trace(throttling.tracer)
    assert wait_until(lambda: len(throttling.out.spans) == len(scored) + len(throttled) + 3)
    assert throttling.linked_status() == {scored[1]: _linked("scored", None),
                                          throttled[1]: _linked("skipped", "throttled", judged=False)}

    r = rig(mode="link", max_held_spans=3, score_deadline=60.0)
    overflowed = rag_trace(r.tracer)  # its fourth span does not fit: the trace loses its place
    root = r.tracer.start_span("request")
    late = r.tracer.start_span("retrieve", context=set_span_in_context(root))
    late.set_attribute("gen_ai.operation.name", "retrieval")
    late.set_attribute("gen_ai.retrieval.documents", documents(["good doc"]))
    root.end()
    late.end()  # after its root
    assert wait_until(lambda: r.proc.held_spans == 0)  # both went on at a tick
    hung = rag_trace(r.tracer, query="hang: q", plain=0)  # fits
    assert r.proc.force_flush(1000)
    assert r.linked_status() == {
        overflowed[1]: _linked("skipped", "queue_full", judged=False),
        late.get_span_context().span_id: _linked("skipped", "late_span", judged=False),
        hung[1]: _linked("timeout", "judge_timeout"),  # out for judging when the flush came
    }
    assert r.exported_once([s.context.span_id for s in r.out.spans])  # type: ignore[union-attr]


def test_force_flush_forwards_open_traces_and_unfinished_scoring(rig: Callable[..., Rig]) -> None:
    r = rig(score_deadline=60.0, max_trace_wait=60.0)
    open_ids = rag_trace(r.tracer, end_root=False)  # root never ends
    hang_ids = rag_trace(r.tracer, query="hang: q")
    time.sleep(0.05)
    assert not r.out.by_name("retrieve")  # held while scoring (or while their trace is open)
    started = time.monotonic()
    r.proc.force_flush(300)
    assert time.monotonic() - started < 2.0
    assert r.exported_once(open_ids[1:] + hang_ids)  # the open root itself has not ended
    assert r.proc.held_spans == 0
    assert r.out.flushes == 1
    hang_span = [s for s in r.out.by_name("retrieve") if "hang" in str((s.attributes or {}).get(
        "gen_ai.retrieval.query.text"))]
    assert (hang_span[0].attributes or {})["ragtrace.eval.status"] == "timeout"


def test_shutdown_is_idempotent_and_then_forwards_directly(rig: Callable[..., Rig]) -> None:
    r = rig(score_deadline=0.3)
    ids = rag_trace(r.tracer, query="hang: q")
    r.proc.shutdown()
    r.proc.shutdown()
    assert r.out.shutdowns == 1
    assert r.exported_once(ids)
    late = rag_trace(r.tracer)
    assert r.exported_once(ids + late)


def test_held_span_overflow_is_forwarded_and_counted(rig: Callable[..., Rig]) -> None:
    r = rig(ScriptedJudge(default="hang"), max_held_spans=8, score_deadline=60.0)
    ids: list[int] = []
    for _ in range(5):
        ids += rag_trace(r.tracer)  # 4 spans each: the third trace no longer fits
    assert r.proc.held_spans <= 8
    assert r.proc.decisions.get("queue_full", 0) >= 1
    assert r.proc.force_flush(1000)
    assert r.exported_once(ids)


def test_flush_while_the_worker_is_stuck_releases_everything_and_says_so(rig: Callable[..., Rig]) -> None:
    r = rig(max_held_spans=8, score_deadline=60.0)
    parked = rag_trace(r.tracer, query="hang: q") + rag_trace(r.tracer, query="hang: q")  # the judge hangs
    assert wait_until(lambda: r.judge.calls == 2)
    worker = r.proc.scoring.worker
    stuck = threading.Event()
    worker.call(lambda: stuck.wait(5), 0)  # the worker's loop is busy with something else
    closed_meanwhile = rag_trace(r.tracer, query="hang: q")
    refused = rag_trace(r.tracer, query="hang: q")  # over max_held_spans: its retrieval span waits for a tick
    assert not r.proc.force_flush(300)  # the worker did not answer
    assert r.exported_once(parked + closed_meanwhile + refused)
    stuck.set()
    assert worker.call(lambda: None, 5)  # the late answer finds nothing left to release
    assert r.exported_once(parked + closed_meanwhile + refused)
    statuses = {(s.attributes or {}).get("ragtrace.eval.status") for s in r.out.by_name("retrieve")}
    assert statuses == {"timeout", "skipped"}


def test_open_trace_overflow_and_job_queue_overflow(rig: Callable[..., Rig]) -> None:
    r = rig(ScriptedJudge(default="hang"), max_open_traces=2, max_queue=1, score_deadline=60.0)
    ids: list[int] = []
    for _ in range(3):
        ids += open_rag_trace(r.tracer)[1][1:]  # the roots stay open
    assert r.proc.open_traces == 2
    assert r.proc.decisions.get("queue_full") == 1  # the third trace bypassed the store
    assert r.proc.force_flush(1000)
    # two traces closed at flush, but only one job fits the queue
    assert r.proc.decisions.get("queue_full") == 2
    assert r.exported_once(ids)
    assert r.proc.held_spans == 0


def test_root_that_never_ends_is_closed_by_max_trace_wait(rig: Callable[..., Rig]) -> None:
    r = rig(max_trace_wait=0.1)
    ids = rag_trace(r.tracer, end_root=False)
    assert wait_until(lambda: len(r.out.spans) == len(ids) - 1, timeout=3)
    assert (retrieval(r.out).attributes or {})["ragtrace.eval.status"] == "scored"


@pytest.mark.parametrize("worker", ["thread", "process"])
def test_throttled_and_over_budget(rig: Callable[..., Rig], worker: str) -> None:
    """The limits turn a sample away: it is counted, and its retrieval span says so."""
    r = rig(sampler=Sampler(rate=1.0, evaluations_per_minute=1), worker=worker)
    rag_trace(r.tracer)
    rag_trace(r.tracer)
    assert wait_until(lambda: len(r.out.spans) == 8, timeout=15)
    assert r.proc.decisions == {"scored": 2, "throttled": 1}
    assert sorted(map(str, r.retrieval_status().values())) == ["('scored', None)", "('skipped', 'throttled')"]
    b = rig(sampler=Sampler(rate=1.0, daily_token_budget=0), worker=worker)
    rag_trace(b.tracer)
    assert wait_until(lambda: len(b.out.spans) == 4, timeout=15)
    assert b.proc.decisions == {"over_budget": 1}
    assert list(b.retrieval_status().values()) == [("skipped", "over_budget")]


def test_custom_scorers_and_reason_cap(rig: Callable[..., Rig]) -> None:
    r = rig(scorers=[ContextPrecision()], reason_max_chars=10)
    rag_trace(r.tracer)
    assert wait_until(lambda: len(r.out.spans) == 4)
    attrs = retrieval(r.out).attributes or {}
    assert len(str(attrs["ragtrace.context_precision.reason"])) <= 10
    assert "ragtrace.context_relevance.score" not in attrs


class Exploding(SpanProcessor):
    def on_start(self, span: object, parent_context: object = None) -> None:
        raise RuntimeError("boom")

    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("boom")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        raise RuntimeError("boom")

    def shutdown(self) -> None:
        raise RuntimeError("boom")


def test_nothing_raises_into_the_host() -> None:
    proc = RagScoringSpanProcessor(Exploding(), judge=ScriptedJudge(), sampler=Sampler(rate=1.0))
    provider = provider_with(proc)
    rag_trace(provider.get_tracer("t"))
    assert provider.force_flush(500) is False
    provider.shutdown()
    out = CountingProcessor()
    proc2 = RagScoringSpanProcessor(out, judge=ScriptedJudge(), sampler=Sampler(rate=1.0))

    def broken_add(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    proc2.scoring.store.add = broken_add  # type: ignore[method-assign,assignment]  # the app thread's path fails
    provider2 = provider_with(proc2)
    ids = rag_trace(provider2.get_tracer("t"))
    assert sorted(out.ids()) == sorted(ids)  # forwarded unscored
    provider2.shutdown()


class StartAndEnding(CountingProcessor):
    """A wrapped processor that does something on start and on ending."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[str] = []
        self.ending: list[str] = []

    def on_start(self, span: object, parent_context: object = None) -> None:
        self.started.append(getattr(span, "name", ""))

    def _on_ending(self, span: object) -> None:
        self.ending.append(getattr(span, "name", ""))


def test_start_and_ending_reach_the_wrapped_processor_unless_it_does_nothing_there() -> None:
    wrapped = StartAndEnding()
    proc = RagScoringSpanProcessor(wrapped, judge=ScriptedJudge(), sampler=Sampler(rate=0.0))
    provider = provider_with(proc)
    ids = rag_trace(provider.get_tracer("t"))
    assert len(wrapped.started) == len(wrapped.ending) == len(ids)
    provider.shutdown()
    # The SDK's own exporting processors do nothing there, so the per-span call is skipped.
    exporter = InMemorySpanExporter()
    for sdk in (SpanProcessor(), BatchSpanProcessor(exporter), SimpleSpanProcessor(exporter)):
        skipping = RagScoringSpanProcessor(sdk, judge=ScriptedJudge())
        assert not skipping.forwards_start and not skipping.forwards_ending
        skipping.shutdown()
    assert proc.forwards_start and proc.forwards_ending


def test_bad_options_are_rejected() -> None:
    for bad in ({"mode": "both"}, {"target": "leaf"}, {"max_queue": 0}, {"score_deadline": 0}):
        with pytest.raises(ValueError):
            RagScoringSpanProcessor(CountingProcessor(), judge=ScriptedJudge(), **bad)  # type: ignore[arg-type]


def test_dropped_counts_survive_enrichment(rig: Callable[..., Rig]) -> None:
    from opentelemetry.sdk.trace import SpanLimits

    out = CountingProcessor()
    proc = RagScoringSpanProcessor(out, judge=ScriptedJudge(), sampler=Sampler(rate=1.0), tick_interval=0.01)
    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=3))
    provider.add_span_processor(proc)
    tracer = provider.get_tracer("limits")
    root = tracer.start_span("root")
    from opentelemetry.trace import set_span_in_context

    from tests.live.fakes import documents

    with tracer.start_as_current_span("retrieve", context=set_span_in_context(root)) as s:
        s.set_attribute("extra.one", 1)  # the SDK drops the oldest attributes past the limit
        s.set_attribute("extra.two", 2)
        s.set_attribute("gen_ai.operation.name", "retrieval")
        s.set_attribute("gen_ai.retrieval.query.text", "fast: q")
        s.set_attribute("gen_ai.retrieval.documents", documents(["good"]))
    root.end()
    assert wait_until(lambda: len(out.spans) == 2)
    span = retrieval(out)
    assert span.dropped_attributes == 2
    assert (span.attributes or {})["ragtrace.eval.status"] == "scored"
    provider.shutdown()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("worker", ["thread", "process"])
def test_a_forked_child_scores_with_its_own_worker(rig: Callable[..., Rig], worker: str) -> None:
    r = rig(worker=worker)
    parent_ids = rag_trace(r.tracer, end_root=False)  # held in the parent when it forks
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: parent's held spans are not ours to export; new traces are scored
        ok = False
        try:
            r.out.spans.clear()
            ids = rag_trace(r.tracer)
            ok = wait_until(lambda: len(r.out.spans) == len(ids), timeout=5) and r.proc.held_spans == 0 and (
                retrieval(r.out).attributes or {}
            ).get("ragtrace.eval.status") == "scored"
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    r.proc.force_flush(500)
    assert r.exported_once(parent_ids[1:])


@pytest.mark.parametrize("worker", ["thread", "process"])
def test_a_sampled_trace_is_held_from_its_first_retrieval_on(rig: Callable[..., Rig], worker: str) -> None:
    """What ends before a trace's first retrieval (auth, a query-rewriting LLM call) carries no score and
    is read by no built-in reader: it is forwarded at once, and the rest waits for the scores."""
    r = rig(worker=worker)
    root = r.tracer.start_span("rag request")
    ctx = set_span_in_context(root)
    with r.tracer.start_as_current_span("auth", context=ctx):
        pass
    with r.tracer.start_as_current_span("rewrite", context=ctx) as rewrite:
        rewrite.set_attribute("gen_ai.operation.name", "chat")
        rewrite.set_attribute("gen_ai.output.messages", output_messages("fast: what is good, rewritten"))
    assert sorted(s.name for s in r.out.spans) == ["auth", "rewrite"]  # on the app thread, at once
    assert r.proc.held_spans == 0 and r.proc.open_traces == 0
    with r.tracer.start_as_current_span("retrieve", context=ctx) as s:
        s.set_attribute("gen_ai.operation.name", "retrieval")
        s.set_attribute("gen_ai.retrieval.query.text", "fast: what is good?")
        s.set_attribute("gen_ai.retrieval.documents", documents(["good doc", "bad doc"]))
    with r.tracer.start_as_current_span("chat", context=ctx) as g:
        g.set_attribute("gen_ai.operation.name", "chat")
        g.set_attribute("gen_ai.output.messages", output_messages("a good answer"))
    root.end()
    assert wait_until(lambda: len(r.out.spans) == 5)
    assert (retrieval(r.out).attributes or {})["ragtrace.eval.status"] == "scored"
    assert r.proc.decisions == {"scored": 2} and r.proc.held_spans == 0
    names = [s.name for s in r.out.spans]
    assert sorted(names) == ["auth", "chat", "rag request", "retrieve", "rewrite"]  # each exactly once


@pytest.mark.parametrize("worker", ["thread", "process"])
def test_a_sampled_trace_with_no_rag_span_is_never_held(rig: Callable[..., Rig], worker: str) -> None:
    r = rig(worker=worker)
    ids = plain_trace(r.tracer) + plain_trace(r.tracer)
    assert len(r.out.spans) == len(ids)  # synchronously, as if unsampled
    assert r.exported_once(ids)
    assert r.proc.held_spans == 0 and r.proc.open_traces == 0
    assert r.proc.decisions == {"not_rag": 2}


def test_a_late_retrieval_of_a_trace_that_ended_with_nothing_held_says_so(rig: Callable[..., Rig]) -> None:
    r = rig()
    root = r.tracer.start_span("request")
    late = r.tracer.start_span("retrieve", context=set_span_in_context(root))
    late.set_attribute("gen_ai.operation.name", "retrieval")
    late.set_attribute("gen_ai.retrieval.documents", documents(["good doc"]))
    root.end()
    late.end()  # after its root: the trace was closed then
    r.settle(2)
    assert [s.name for s in r.out.spans] == ["request", "retrieve"]
    attrs = r.out.spans[1].attributes or {}
    assert (attrs["ragtrace.eval.status"], attrs["ragtrace.eval.error"]) == ("skipped", "late_span")
    assert r.proc.held_spans == 0 and r.proc.decisions == {"not_rag": 1, "late_span": 1}


@pytest.mark.parametrize("placement", ["processor", "exporter"])
@pytest.mark.parametrize("worker", ["thread", "process"])
def test_a_retrieval_that_ends_after_its_scored_trace_closed_says_so(
    rig: Callable[..., Rig], placement: str, worker: str
) -> None:
    r = rig(placement=placement, worker=worker)
    root, ids = open_rag_trace(r.tracer)
    late = r.tracer.start_span("retrieve", context=set_span_in_context(root))
    late.set_attribute("gen_ai.operation.name", "retrieval")
    late.set_attribute("gen_ai.retrieval.query.text", "fast: what is good?")
    late.set_attribute("gen_ai.retrieval.documents", documents(["good doc"]))
    root.end()
    r.settle(len(ids), timeout=20)
    late.end()  # its trace was scored and exported already
    r.settle(len(ids) + 1)
    assert r.exported_once([*ids, late.get_span_context().span_id])
    statuses = [((s.attributes or {}).get("ragtrace.eval.status"), (s.attributes or {}).get("ragtrace.eval.error"))
                for s in r.out.by_name("retrieve")]
    assert statuses == [("scored", None), ("skipped", "late_span")]
    assert r.proc.decisions.get("late_span") == 1


def test_ground_truth_that_ends_before_the_retrieval_is_held_and_read(rig: Callable[..., Rig]) -> None:
    r = rig()
    root = r.tracer.start_span("golden")
    ctx = set_span_in_context(root)
    with r.tracer.start_as_current_span("load case", context=ctx) as case:
        case.set_attribute("ragtrace.ground_truth", "the good answer")
    assert r.proc.held_spans == 1  # the trace is held from here
    with r.tracer.start_as_current_span("retrieve", context=ctx) as s:
        s.set_attribute("gen_ai.operation.name", "retrieval")
        s.set_attribute("gen_ai.retrieval.query.text", "fast: q")
        s.set_attribute("gen_ai.retrieval.documents", documents(["good"]))
    root.end()
    assert wait_until(lambda: len(r.out.spans) == 3)
    assert (retrieval(r.out).attributes or {})["ragtrace.context_recall.score"] == 1.0


def test_an_extractor_sees_every_span_of_a_sampled_trace(rig: Callable[..., Rig]) -> None:
    seen: list[list[str]] = []

    def names_only(spans: Sequence[ReadableSpan]) -> list[CapturedSample]:
        seen.append(sorted(s.name for s in spans))
        return []  # the built-in readers take over

    r = rig(extractor=names_only)
    ids = rag_trace(r.tracer, plain=0)  # root, retrieve, chat
    with r.tracer.start_as_current_span("warm-up") as warm:  # a trace of its own, with no RAG span
        ids.append(warm.get_span_context().span_id)
    assert wait_until(lambda: len(r.out.spans) == len(ids))
    assert sorted(seen) == [["chat", "rag request", "retrieve"], ["warm-up"]]


def test_an_idle_worker_ticks_ever_less_often_and_still_scores_the_next_trace(rig: Callable[..., Rig]) -> None:
    """Each tick wakes a thread of the app's process: with nothing held, the interval doubles up to 1 s."""
    r = rig()  # tick_interval=0.01: 150 ticks in 1.5 s if it never backed off
    worker = r.proc.scoring.worker
    start = worker.ticks
    time.sleep(1.5)
    assert 3 <= worker.ticks - start <= 12
    ids = rag_trace(r.tracer)
    assert wait_until(lambda: len(r.out.spans) == len(ids), timeout=3.0)  # the next tick is at most 1 s away
    assert r.proc.decisions == {"scored": 2}
    busy_from = worker.ticks
    rag_trace(r.tracer, end_root=False)  # held: the worker ticks at its own pace again
    time.sleep(0.3)
    assert worker.ticks - busy_from >= 10


class StalledOtlpEndpoint:
    """An OTLP/HTTP traces endpoint that holds every request until `answer()`, then takes them all: a
    backend that hangs, seen by an exporter with no useful timeout."""

    def __init__(self) -> None:
        self.answering = threading.Event()
        self.span_ids: list[int] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                endpoint.answering.wait()
                request = ExportTraceServiceRequest.FromString(body)
                endpoint.span_ids += [
                    int.from_bytes(span.span_id, "big")
                    for resource in request.resource_spans for scope in resource.scope_spans for span in scope.spans
                ]
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def answer(self) -> None:
        self.answering.set()

    def close(self) -> None:
        self.answer()
        self.server.shutdown()
        self.server.server_close()


def test_a_flush_returns_in_time_while_the_exporter_hangs_and_loses_nothing() -> None:
    # The SDK's BatchSpanProcessor.force_flush exports on the caller's thread whatever its timeout says,
    # so a backend that hangs holds it for as long as the exporter waits (an hour here).
    endpoint = StalledOtlpEndpoint()
    batching = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint.url, timeout=3600), schedule_delay_millis=10)
    proc = RagScoringSpanProcessor(batching, judge=ScriptedJudge(), sampler=Sampler(rate=1.0), tick_interval=0.01)
    provider = provider_with(proc)
    try:
        ids = [i for _ in range(5) for i in rag_trace(provider.get_tracer("test"))]
        flushed: list[bool] = []
        flushing = threading.Thread(target=lambda: flushed.append(provider.force_flush(500)), daemon=True)
        flushing.start()
        flushing.join(30)
        assert flushed == [False]  # returned, and says the spans are not out yet
        endpoint.answer()  # the backend recovers: every span arrives, once
        assert wait_until(lambda: sorted(endpoint.span_ids) == sorted(ids), timeout=30)
    finally:
        endpoint.answer()
        provider.shutdown()
        endpoint.close()
    assert sorted(endpoint.span_ids) == sorted(ids)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_released_spans_waiting_for_room_at_a_fork_are_the_parents_to_export() -> None:
    # A queue that nothing drains (no full batch, no schedule): of a released trace of 10 spans, 4 fit (half
    # the queue stays free for the app) and 6 wait in the sink for room. The SDK's BatchSpanProcessor
    # empties its queue in a forked child; what waits in front of it is the parent's to hand on, too.
    out = CountingExporter()
    batching = BatchSpanProcessor(out, max_queue_size=8, max_export_batch_size=8, schedule_delay_millis=60_000)
    proc = RagScoringSpanProcessor(batching, judge=ScriptedJudge(), sampler=Sampler(rate=0.0))
    released = [ReadableSpan(name=f"released {i}", context=SpanContext(7, 100 + i, False, TraceFlags(1)))
                for i in range(10)]
    proc.sink.send(released)
    assert proc.sink.waiting == 6

    def in_the_child() -> bool:
        ids = plain_trace(provider_with(proc).get_tracer("child"))
        return proc.force_flush(5000) and sorted(out.ids()) == sorted(ids)  # none of the parent's

    assert child_verdict(*fork_running(in_the_child)), "the child hung or exported the parent's released spans"
    assert proc.force_flush(5000)
    assert sorted(out.ids()) == sorted(s.context.span_id for s in released if s.context is not None)
    proc.shutdown()
