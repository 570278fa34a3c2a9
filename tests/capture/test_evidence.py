"""Generations are model calls, pairing follows the evidence in a generation's input, framework-native
document and query shapes are read as text."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ragtrace.capture import CaptureStats, extract_samples
from tests.capture.conftest import Traces, genai_messages, sid

KETTLE = ["The X200 kettle has a two-year warranty.", "The X200 kettle boils one litre in three minutes."]
RETURNS = ["Returns are accepted within 30 days of purchase.", "Refunds reach your card within a week."]


def _oi_retriever(query: str, docs: list[str]) -> dict[str, Any]:
    attrs: dict[str, Any] = {"openinference.span.kind": "RETRIEVER", "input.value": query}
    for i, doc in enumerate(docs):
        attrs[f"retrieval.documents.{i}.document.content"] = doc
    return attrs


def _prompt(question: str, docs: list[str]) -> str:
    return "Context:\n" + "\n".join(docs) + f"\nQuestion: {question}\nAnswer:"


def _oi_llm(question: str, docs: list[str], answer: str) -> dict[str, Any]:
    return {"openinference.span.kind": "LLM", "llm.model_name": "m",
            "llm.input_messages.0.message.role": "ChatRole.USER",
            "llm.input_messages.0.message.content": _prompt(question, docs),
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": answer}


def _chat(question: str, docs: list[str], answer: str) -> dict[str, Any]:
    return {"gen_ai.operation.name": "chat",
            "gen_ai.input.messages": genai_messages("user", _prompt(question, docs)),
            "gen_ai.output.messages": genai_messages("assistant", answer)}


def test_a_prompt_builder_tagged_llm_is_no_generation(traces: Traces) -> None:
    """Haystack under OpenInference: PromptBuilder is an LLM span whose output is the rendered prompt."""
    root = traces.open("Pipeline.run")
    traces.span("retriever", _oi_retriever("Warranty?", KETTLE), parent=root, start=1, end=2)
    builder = traces.span("PromptBuilder.run", {
        "openinference.span.kind": "LLM", "llm.prompt_template.template": "{{documents}} {{question}}",
        "output.value": _prompt("Warranty?", KETTLE)}, parent=root, start=3, end=4)
    generator = traces.span("OpenAIGenerator.run", _oi_llm("Warranty?", KETTLE, "Two years."), parent=root,
                            start=5, end=6)
    traces.close(root, 7)
    [captured] = extract_samples(traces.finished())
    assert captured.generation_span_id == sid(generator) != sid(builder)
    assert captured.sample.response == "Two years."
    assert captured.pairing == "contexts"
    assert captured.sample.metadata["pairing_evidence"] == "its input quotes 2 of 2 retrieved texts"


def test_a_generation_wrapping_a_model_call_stands_aside(traces: Traces) -> None:
    """LlamaIndex: `LLM.predict` (template variables, output.value) around `LLM.chat` (the model call)."""
    root = traces.open("query")
    traces.span("retrieve", _oi_retriever("Warranty?", KETTLE), parent=root, start=1, end=2)
    predict = traces.open("LiteLLM.predict", {
        "openinference.span.kind": "LLM", "llm.model_name": "m", "llm.prompt_template.template": "{context_str}",
        "llm.prompt_template.variables": json.dumps({"context_str": "\n".join(KETTLE)}),
        "output.value": "Two years."}, parent=root, start=3)
    chat = traces.span("LiteLLM.chat", _oi_llm("Warranty?", KETTLE, "Two years."), parent=predict, start=3, end=4)
    traces.close(predict, 5)
    traces.close(root, 6)
    [captured] = extract_samples(traces.finished())
    assert captured.generation_span_id == sid(chat)


def test_two_questions_retrieved_first_then_answered_in_reverse_pair_by_evidence(traces: Traces) -> None:
    root = traces.open("agent")
    r1 = traces.span("r1", _oi_retriever("Warranty?", KETTLE), parent=root, start=1, end=2)
    r2 = traces.span("r2", _oi_retriever("Returns?", RETURNS), parent=root, start=3, end=4)
    g2 = traces.span("g2", _chat("Returns?", RETURNS, "30 days."), parent=root, start=5, end=6)
    g1 = traces.span("g1", _chat("Warranty?", KETTLE, "Two years."), parent=root, start=7, end=8)
    traces.close(root, 9)
    samples = extract_samples(traces.finished())
    assert [(s.retrieval_span_id, s.generation_span_id) for s in samples] == [(sid(r1), sid(g1)), (sid(r2), sid(g2))]
    assert [s.sample.response for s in samples] == ["Two years.", "30 days."]
    assert {s.pairing for s in samples} == {"contexts"}


def test_the_query_is_evidence_when_the_texts_are_not_quoted(traces: Traces) -> None:
    root = traces.open("agent")
    traces.span("r", _oi_retriever("How long is the kettle warranty?", KETTLE), parent=root, start=1, end=2)
    traces.span("other", _chat("What is the capital of France?", [], "Paris."), parent=root, start=3, end=4)
    mine = traces.span("mine", _chat("How long is the kettle warranty?", ["(summarised)"], "Two years."),
                       parent=root, start=5, end=6)
    traces.close(root, 7)
    [captured] = extract_samples(traces.finished())
    assert (captured.generation_span_id, captured.pairing) == (sid(mine), "query")


def test_without_evidence_time_order_decides_and_says_so(traces: Traces) -> None:
    root = traces.open("rag")
    traces.span("r", _oi_retriever("Warranty?", KETTLE), parent=root, start=1, end=2)
    first = traces.span("g", {"gen_ai.operation.name": "chat",
                              "gen_ai.output.messages": genai_messages("assistant", "Two years.")},
                        parent=root, start=3, end=4)
    traces.close(root, 5)
    [captured] = extract_samples(traces.finished())
    assert (captured.generation_span_id, captured.pairing) == (sid(first), "time")
    assert captured.sample.metadata["pairing"] == "time"


def _task(name: str, inputs: Any, output: Any) -> dict[str, Any]:
    return {"traceloop.span.kind": "task", "traceloop.entity.name": name,
            "traceloop.entity.input": json.dumps(inputs), "traceloop.entity.output": json.dumps(output)}


def test_llamaindex_nodes_with_score_and_query_bundle_under_openllmetry(traces: Traces) -> None:
    nodes = [json.dumps({"node": {"id_": f"n{i}", "text": text, "metadata": {"file": "a.md"}}, "score": 0.9 - i / 10})
             for i, text in enumerate(KETTLE)]
    bundle = {"query_str": "Warranty?", "image_path": None, "embedding": None}
    root = traces.open("RetrieverQueryEngine.workflow", {"traceloop.span.kind": "workflow"})
    outer = traces.open("VectorIndexRetriever.task", _task("VectorIndexRetriever.task",
                                                           {"str_or_query_bundle": bundle}, nodes), parent=root,
                        start=1)
    traces.span("VectorIndexRetriever.task", _task("VectorIndexRetriever.task", {"query_bundle": bundle}, nodes),
                parent=outer, start=1, end=2)
    traces.close(outer, 2)
    traces.close(root, 3)
    stats = CaptureStats()
    [captured] = extract_samples(traces.finished(), stats=stats)
    assert captured.retrieval_span_id == sid(outer)
    assert captured.sample.query == "Warranty?"
    assert captured.sample.context_texts == KETTLE
    assert [(d.id, d.score) for d in captured.sample.contexts] == [("n0", 0.9), ("n1", 0.8)]
    assert stats.counts == {"nested_retrieval": 1}


def test_bare_text_nodes_and_haystack_documents(traces: Traces) -> None:
    text_nodes = [{"id_": "t0", "text": KETTLE[0]}, {"id_": "t1", "text_resource": {"text": KETTLE[1]}}]
    haystack = {"documents": [{"id": "h0", "content": RETURNS[0], "meta": {}, "score": 5.6},
                              {"id": "h1", "content": RETURNS[1], "meta": {}, "score": 5.1}]}
    root = traces.open("root")
    traces.span("my_retriever", _task("my_retriever", {"query": "Warranty?"}, text_nodes), parent=root, end=1)
    traces.span("bm25_retriever", _task("bm25_retriever", {"query": "Returns?"}, haystack), parent=root, start=2, end=3)
    traces.close(root, 4)
    first, second = extract_samples(traces.finished())
    assert ([d.id for d in first.sample.contexts], first.sample.context_texts) == (["t0", "t1"], KETTLE)
    assert [(d.id, d.content, d.score) for d in second.sample.contexts] == [
        ("h0", RETURNS[0], 5.6), ("h1", RETURNS[1], 5.1)]


_WORDS = st.lists(st.sampled_from(["alpha", "bravo", "delta", "kettle", "ferry", "quartz", "tundra", "violet"]),
                  min_size=3, max_size=6)


@st.composite
def _interleavings(draw: st.DrawFn) -> tuple[int, list[tuple[str, int]], list[list[str]], bool]:
    """k retrievals and k generations in a random order where generation i comes after retrieval i; the
    retrievals may share a document (then the share of quoted texts ties and the question decides)."""
    k = draw(st.integers(1, 5))
    order: list[tuple[str, int]] = []
    pending = list(range(k))
    retrieved: list[int] = []
    while pending or retrieved:
        choices = ([("r", pending[0])] if pending else []) + [("g", i) for i in retrieved]
        step = draw(st.sampled_from(choices))
        order.append(step)
        if step[0] == "r":
            retrieved.append(pending.pop(0))
        else:
            retrieved.remove(step[1])
    contexts = [[f"doc {i}.{j}: " + " ".join(draw(_WORDS)) for j in range(draw(st.integers(1, 3)))] for i in range(k)]
    if draw(st.booleans()):
        shared = "a document every retrieval returns: " + " ".join(draw(_WORDS))
        for texts in contexts:
            texts.insert(draw(st.integers(0, len(texts))), shared)
    return k, order, contexts, draw(st.booleans())


@settings(max_examples=60, deadline=None)
@given(_interleavings())
def test_k_retrievals_and_k_generations_in_any_interleaving_pair_one_to_one(
    case: tuple[int, list[tuple[str, int]], list[list[str]], bool],
) -> None:
    k, order, contexts, openinference = case
    traces = _fresh_traces()
    root = traces.open("agent")
    ids: dict[tuple[str, int], int] = {}
    for t, (what, i) in enumerate(order):
        question = f"Question number {i} about " + " ".join(contexts[i][-1].split()[2:])
        if what == "r":
            attrs = _oi_retriever(question, contexts[i])
        else:
            make = _oi_llm if openinference else _chat
            attrs = make(question, contexts[i], f"answer {i}")
        ids[(what, i)] = sid(traces.span(f"{what}{i}", attrs, parent=root, start=2 * t + 1, end=2 * t + 2))
    traces.close(root, 2 * len(order) + 1)
    samples = extract_samples(traces.finished())
    pairs = {s.retrieval_span_id: s.generation_span_id for s in samples}
    assert pairs == {ids[("r", i)]: ids[("g", i)] for i in range(k)}
    assert {s.pairing for s in samples} == {"contexts"}


def _fresh_traces() -> Traces:
    """A Traces of its own per hypothesis example (function-scoped fixtures are not reset between examples)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Traces(provider, exporter)



def test_genai_documents_in_a_frameworks_own_shape(traces: Traces) -> None:
    documents = [{"node": {"id_": "n0", "text": KETTLE[0]}, "score": 0.7}, {"id_": "n1", "text": KETTLE[1]}]
    traces.span("retrieve", {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": "Warranty?",
                             "gen_ai.retrieval.documents": json.dumps(documents)})
    [captured] = extract_samples(traces.finished())
    assert [(d.id, d.content, d.score) for d in captured.sample.contexts] == [("n0", KETTLE[0], 0.7),
                                                                              ("n1", KETTLE[1], None)]


def test_the_answer_comes_from_a_wrapper_when_the_model_call_recorded_none(traces: Traces) -> None:
    root = traces.open("query")
    traces.span("retrieve", _oi_retriever("Warranty?", KETTLE), parent=root, start=1, end=2)
    wrapper = traces.open("LiteLLM.task", {"traceloop.span.kind": "task",
                                           "gen_ai.output.messages": genai_messages("assistant", "Two years.")},
                          parent=root, start=3)
    call = traces.span("chat", {"gen_ai.operation.name": "chat"}, parent=wrapper, start=3, end=4)
    traces.close(wrapper, 5)
    traces.close(root, 6)
    [captured] = extract_samples(traces.finished())
    assert captured.generation_span_id == sid(call)
    assert captured.sample.response == "Two years."
