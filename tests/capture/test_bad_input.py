"""Hostile spans: wrong types, broken JSON, huge lists and texts, broken unicode. Never raises; counts why."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from ragtrace.capture import CaptureLimits, CaptureStats, extract_samples, span_role
from tests.capture.conftest import Traces


def _one(traces: Traces, retrieval: dict[str, Any], generation: dict[str, Any] | None = None,
         root: dict[str, Any] | None = None, limits: CaptureLimits | None = None) -> tuple[list[Any], CaptureStats]:
    top = traces.open("root", root)
    traces.span("retrieval", retrieval, parent=top, start=1, end=2)
    if generation is not None:
        traces.span("generation", generation, parent=top, start=3, end=4)
    traces.close(top, 5)
    stats = CaptureStats()
    return extract_samples(traces.finished(), stats=stats, limits=limits or CaptureLimits()), stats


@pytest.mark.parametrize(
    ("documents", "reason"),
    [
        ("[{'id': 1}", "invalid_documents_json"),
        ('{"not": "a list"}', "invalid_documents_json"),
        ("[" * 100_000 + "]" * 100_000, "invalid_documents_json"),  # too deep for the parser
        (12, "wrong_attribute_type"),
        (True, "wrong_attribute_type"),
    ],
    ids=["broken", "object", "too_deep", "int", "bool"],
)
def test_unreadable_documents_pass_the_span_over(traces: Traces, documents: Any, reason: str) -> None:
    samples, stats = _one(traces, {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": documents,
                                   "gen_ai.retrieval.query.text": "q"})
    assert samples == []
    assert stats.counts == {reason: 1}


def test_wrong_types_elsewhere_are_counted_but_keep_the_sample(traces: Traces) -> None:
    samples, stats = _one(
        traces,
        {"openinference.span.kind": "RETRIEVER", "input.value": 3,
         "retrieval.documents.0.document.content": "ok", "retrieval.documents.1.document.content": 5,
         "retrieval.documents.0.document.score": "0.5", "retrieval.documents.0.document.id": True},
        {"openinference.span.kind": "LLM", "output.value": 7,
         "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": "the question"},
    )
    [captured] = samples
    assert captured.sample.query == "the question"
    assert captured.sample.context_texts == ["ok"]
    assert captured.sample.contexts[0].score == 0.5
    assert captured.sample.contexts[0].id is None
    assert captured.sample.response == ""
    assert stats.counts == {"wrong_attribute_type": 1}


def test_documents_without_content_and_odd_items(traces: Traces) -> None:
    docs = json.dumps([{"id": "a", "score": 0.4}, 17, {"id": "b", "content": "kept", "score": "nan"}, None])
    samples, stats = _one(traces, {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": docs,
                                   "gen_ai.retrieval.query.text": "q"})
    [captured] = samples
    assert captured.sample.context_texts == ["kept"]
    assert captured.sample.contexts[0].score is None  # NaN is not a score
    assert stats.counts == {"document_without_content": 1, "invalid_document": 1}


def test_retrieval_with_no_documents_attribute_is_an_empty_sample(traces: Traces) -> None:
    samples, stats = _one(traces, {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": "q"})
    [captured] = samples
    assert captured.sample.contexts == ()
    assert stats.counts == {"no_documents": 1}


def test_ten_thousand_documents_are_capped_and_counted(traces: Traces) -> None:
    docs = json.dumps([{"id": str(i), "score": 1 / (i + 1), "content": f"doc {i}"} for i in range(10_000)])
    samples, stats = _one(traces, {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": docs,
                                   "gen_ai.retrieval.query.text": "q"})
    [captured] = samples
    assert len(captured.sample.contexts) == 100
    assert captured.sample.contexts[-1].content == "doc 99"
    assert stats.counts == {"too_many_documents": 1}


def test_many_events_and_flattened_documents_are_capped(traces: Traces) -> None:
    limits = CaptureLimits(max_documents=3)
    events = [("db.query.result", {"db.query.result.document": f"hit {i}"}) for i in range(50)]
    root = traces.open("root", {"input.value": "q"})
    traces.span("chroma.query", {"db.system": "chroma", "db.operation": "query"}, parent=root, start=1, end=2,
                events=events)
    traces.span("retriever", {"openinference.span.kind": "RETRIEVER", "input.value": "q",
                              **{f"retrieval.documents.{i}.document.content": f"d{i}" for i in range(50)}},
                parent=root, start=1, end=2)
    traces.close(root, 3)
    stats = CaptureStats()
    samples = extract_samples(traces.finished(), stats=stats, limits=limits)
    assert sorted(s.sample.context_texts[-1] for s in samples) == ["d2", "hit 2"]
    assert stats.counts == {"too_many_documents": 2}


def test_one_megabyte_context_and_long_texts_are_cut_and_counted(traces: Traces) -> None:
    big = "x" * 1_000_000
    docs = json.dumps([{"id": "big", "content": big}, {"id": "small", "content": "small"}])
    samples, stats = _one(
        traces,
        {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": docs,
         "gen_ai.retrieval.query.text": "q" * 10_000},
        {"gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "r" * 50_000}]}])},
    )
    [captured] = samples
    assert [len(c) for c in captured.sample.context_texts] == [8_000, 5]
    assert len(captured.sample.query) == 4_000
    assert len(captured.sample.response) == 16_000
    assert stats.counts == {"context_truncated": 1, "query_truncated": 1, "response_truncated": 1}


def test_json_too_large_to_parse_is_passed_over(traces: Traces) -> None:
    docs = json.dumps([{"content": "y" * 5_000}])
    samples, stats = _one(traces, {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": docs,
                                   "gen_ai.retrieval.query.text": "q"}, limits=CaptureLimits(max_json_chars=1_000))
    assert samples == []
    assert stats.counts == {"attribute_too_large": 1}


def test_unicode_garbage_and_lone_surrogates(traces: Traces) -> None:
    garbage = "\ud800 broken \udfff \x00 \u202e \U0001f600 \ufffe"
    docs = '[{"id": "\\ud83d", "content": "escaped lone \\udc00 surrogate"}, {"content": "' + "\u00e9" * 3 + '"}]'
    samples, stats = _one(
        traces,
        {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": docs,
         "gen_ai.retrieval.query.text": garbage},
        {"gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": garbage}]}])},
        root={"ragtrace.ground_truth": garbage},
    )
    [captured] = samples
    sample = captured.sample
    for text in (sample.query, sample.response, sample.ground_truth or "", *sample.context_texts):
        text.encode("utf-8")  # strict: no lone surrogate survived
    assert "broken" in sample.query and "\U0001f600" in sample.query
    assert sample.context_texts[1] == "\u00e9\u00e9\u00e9"
    json.loads(sample.model_dump_json())
    assert not stats.counts


class _Exploding(ReadableSpan):
    @property
    def attributes(self) -> Any:
        raise RuntimeError("boom")


def test_span_role_never_raises_and_is_none_for_junk() -> None:
    context = SpanContext(trace_id=1, span_id=2, is_remote=False, trace_flags=TraceFlags(1))
    assert span_role(_Exploding(name="x", context=context)) is None
    assert span_role(ReadableSpan(name="plain")) is None
    assert span_role(ReadableSpan(name="x", attributes={"gen_ai.operation.name": 5})) is None
    assert span_role(ReadableSpan(name="x", attributes={"openinference.span.kind": "retriever"})) == "retrieval"
    stats = CaptureStats()
    assert extract_samples([_Exploding(name="x", context=context)], stats=stats) == []
    assert extract_samples(None, stats=stats) == []  # type: ignore[arg-type]
    assert stats.counts["capture_error"] == 1


def test_limits_reject_nonsense_at_construction() -> None:
    with pytest.raises(ValueError, match="max_documents"):
        CaptureLimits(max_documents=-1)
    assert CaptureLimits(max_documents=0).max_documents == 0


def test_attribute_reads_see_the_same_values_on_sdk_and_foreign_spans(traces: Traces) -> None:
    """attrs_of reads the SDK's own attribute dict directly; any other object goes through `.attributes`."""
    from types import SimpleNamespace

    from ragtrace.capture.values import attrs_of

    span = traces.span("s", {"a": 1, "b": ("x", "y")})
    fast = attrs_of(span)
    assert dict(fast) == dict(span.attributes or {}) == {"a": 1, "b": ("x", "y")}
    assert fast.get("missing") is None
    assert attrs_of(SimpleNamespace(attributes={"c": 2})) == {"c": 2}
    assert attrs_of(SimpleNamespace(attributes="not a mapping")) == {}
    assert attrs_of(SimpleNamespace(_attributes={"stale": 1}, attributes={"c": 2})) == {"c": 2}


def test_a_generation_input_is_read_only_when_the_retrieval_has_no_query(traces: Traces) -> None:
    """The paired generation's user message is a fallback: with the retrieval's own query it is not parsed,
    so its broken JSON costs nothing and is not counted; without one, it is read (and counted when broken)."""
    documents = json.dumps([{"content": "c"}])
    broken_input = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": "[{broken",
                    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text",
                                                                                           "content": "a"}]}])}
    samples, stats = _one(traces, {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": documents,
                                   "gen_ai.retrieval.query.text": "own query"}, broken_input)
    assert [s.sample.query for s in samples] == ["own query"]
    assert stats.counts == {}
    traces.exporter.clear()
    samples, stats = _one(traces, {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": documents},
                          broken_input, root={"input.value": "root question"})
    assert [(s.sample.query, s.sample.metadata["query_source"]) for s in samples] == [("root question", "root")]
    assert stats.counts == {"invalid_messages_json": 1}
