"""Hostile input on the live path: nothing raises into the app, every span is exported once, memory
stays bounded, and each case is counted."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Tracer, set_span_in_context

from tests.live.fakes import Rig, ScriptedJudge, documents, output_messages, rag_trace


@pytest.fixture(params=[("processor", "thread"), ("processor", "process"), ("exporter", "thread"),
                        ("exporter", "process")], ids="-".join)
def rig(rig: Callable[..., Rig], request: pytest.FixtureRequest) -> Callable[..., Rig]:
    """Every hostile case with both workers (a thread, a scoring process of its own), in front of the
    exporting processor and behind the batching."""

    def make(judge: ScriptedJudge | None = None, **options: object) -> Rig:
        placement, worker = request.param
        options.setdefault("worker", worker)
        return rig(judge, placement=placement, **options)

    return make


def retrieval_trace(tracer: Tracer, **attrs: object) -> list[int]:
    """A root, one retrieval span carrying `attrs` as given, one chat span."""
    root = tracer.start_span("request")
    ctx = set_span_in_context(root)
    ids = [root.get_span_context().span_id]
    with tracer.start_as_current_span("retrieve", context=ctx) as span:
        span.set_attribute("gen_ai.operation.name", "retrieval")
        for key, value in attrs.items():
            span.set_attribute(key.replace("__", "."), value)  # type: ignore[arg-type]
        ids.append(span.get_span_context().span_id)
    with tracer.start_as_current_span("chat", context=ctx) as chat:
        chat.set_attribute("gen_ai.operation.name", "chat")
        chat.set_attribute("gen_ai.output.messages", output_messages("good answer"))
        ids.append(chat.get_span_context().span_id)
    root.end()
    return ids


@pytest.mark.parametrize(
    ("attrs", "counted"),
    [
        ({"gen_ai__retrieval__query__text": 42, "gen_ai__retrieval__documents": [1, 2, 3]},
         {"wrong_attribute_type", "no_query"}),
        ({"gen_ai__retrieval__query__text": "q", "gen_ai__retrieval__documents": "{not json"},
         {"invalid_documents_json"}),
        ({"gen_ai__retrieval__query__text": "q", "gen_ai__retrieval__documents": json.dumps({"not": "a list"})},
         {"invalid_documents_json"}),
        ({"gen_ai__retrieval__query__text": "q", "gen_ai__retrieval__documents": json.dumps([{"id": 1}, None])},
         {"document_without_content", "invalid_document"}),
    ],
)
def test_wrong_types_and_invalid_json_are_counted_not_raised(
    rig: Callable[..., Rig], attrs: dict[str, object], counted: set[str]
) -> None:
    r = rig()
    ids = retrieval_trace(r.tracer, **attrs)
    r.settle(len(ids))
    r.assert_exactly_once(ids)
    assert counted <= set(r.proc.capture_counts), r.proc.capture_counts
    # the trace still gets exactly one outcome: not a RAG sample, or a sample with nothing to score
    assert r.proc.decisions in ({"not_rag": 1}, {"skipped_no_context": 2}), r.proc.decisions


def test_ten_thousand_documents_and_a_megabyte_context(rig: Callable[..., Rig]) -> None:
    r = rig()
    many = documents([f"good doc {i}" for i in range(10_000)])
    huge = documents(["good " + "x" * 1_000_000, "bad"])
    ids = retrieval_trace(r.tracer, gen_ai__retrieval__query__text="fast: q", gen_ai__retrieval__documents=many)
    ids += retrieval_trace(r.tracer, gen_ai__retrieval__query__text="fast: q", gen_ai__retrieval__documents=huge)
    r.settle(len(ids))
    r.assert_exactly_once(ids)
    assert r.proc.capture_counts.get("too_many_documents", 0) >= 1
    statuses = [(s.attributes or {}).get("ragtrace.eval.status") for s in r.out.by_name("retrieve")]
    assert statuses == ["scored", "scored"]


def test_unicode_garbage(rig: Callable[..., Rig]) -> None:
    r = rig()
    garbage = "\udcff\x00\u202e\ufffd🦄" * 50
    ids = retrieval_trace(r.tracer, gen_ai__retrieval__query__text=garbage,
                          gen_ai__retrieval__documents=documents([garbage, "good " + garbage]))
    ids += rag_trace(r.tracer, query="fast: " + garbage, answer=garbage)
    r.settle(len(ids))
    r.assert_exactly_once(ids)


def test_spans_without_context_or_parent_info(rig: Callable[..., Rig]) -> None:
    r = rig()
    bare = ReadableSpan(name="no context")  # no context at all
    r.end(bare)
    r.end(None)  # type: ignore[arg-type]  # not even a span: must not raise
    assert r.out.spans == [bare, None]  # both handed on as they came
    r.out.spans.clear()
    ids = []
    for _ in range(5):  # every span its own root (no parent): each a one-span trace
        with r.tracer.start_as_current_span("orphan retrieval", context=set_span_in_context(None)) as s:  # type: ignore[arg-type]
            s.set_attribute("gen_ai.operation.name", "retrieval")
            s.set_attribute("gen_ai.retrieval.query.text", "fast: q")
            s.set_attribute("gen_ai.retrieval.documents", documents(["good"]))
            ids.append(s.get_span_context().span_id)
    r.settle(len(ids))
    r.assert_exactly_once(ids)


def test_root_that_never_ends_is_closed_by_max_trace_wait(rig: Callable[..., Rig]) -> None:
    r = rig(max_trace_wait=0.1)
    root = r.tracer.start_span("never ends")
    ctx = set_span_in_context(root)
    with r.tracer.start_as_current_span("retrieve", context=ctx) as s:
        s.set_attribute("gen_ai.operation.name", "retrieval")
        s.set_attribute("gen_ai.retrieval.query.text", "fast: q")
        s.set_attribute("gen_ai.retrieval.documents", documents(["good"]))
    end = time.monotonic() + 5
    while not r.out.spans and time.monotonic() < end:
        time.sleep(0.01)
    assert [x.name for x in r.out.spans] == ["retrieve"]
    assert (r.out.spans[0].attributes or {})["ragtrace.eval.status"] == "scored"
    assert r.proc.open_traces == 0


def test_a_raising_judge_under_load_keeps_memory_bounded(rig: Callable[..., Rig]) -> None:
    r = rig(ScriptedJudge(default="crash"), max_held_spans=40, max_open_traces=10, max_queue=5)
    slow = rig(ScriptedJudge(default="hang"), max_held_spans=40, max_open_traces=10, max_queue=5,
               score_deadline=30.0)
    ids: list[int] = []
    slow_ids: list[int] = []
    peak = 0
    for i in range(300):
        ids += rag_trace(r.tracer, query=f"q{i}")
        slow_ids += rag_trace(slow.tracer, query=f"q{i}")
        peak = max(peak, slow.proc.held_spans)
        assert slow.proc.queue_depth <= 5 and slow.proc.open_traces <= 10
    assert peak <= 40
    r.settle(len(ids))
    r.assert_exactly_once(ids)
    assert r.proc.decisions.get("error", 0) >= 2
    slow.flush(200)
    slow.assert_exactly_once(slow_ids)
    assert slow.proc.decisions.get("queue_full", 0) > 0
