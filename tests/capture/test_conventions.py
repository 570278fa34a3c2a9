"""Each convention's span shapes, built with the real SDK, read into exact samples."""

from __future__ import annotations

import json

import pytest

from ragtrace.capture import CaptureStats, extract_samples, span_role
from tests.capture.conftest import Traces, genai_docs, genai_messages, sid


def test_genai_semconv_retrieval_and_chat(traces: Traces) -> None:
    root = traces.open("POST /ask", start=0)
    retrieval = traces.span(
        "retrieval products",
        {
            "gen_ai.operation.name": "retrieval",
            "gen_ai.data_source.id": "products",
            "gen_ai.retrieval.query.text": "How long is the warranty?",
            "gen_ai.retrieval.documents": genai_docs(
                ("d7", "The warranty lasts two years.", 0.91),
                ("d2", "Returns are accepted for 30 days.", 0.55),
                ("d9", "Shipping is free over 50 EUR.", 0.12),
            ),
        },
        parent=root, start=1, end=5,
    )
    chat = traces.span(
        "chat gpt-4o-mini",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([
                {"role": "system", "parts": [{"type": "text", "content": "Answer from the context."}]},
                {"role": "user", "parts": [{"type": "text", "content": "Context: ... Question: warranty?"}]},
            ]),
            "gen_ai.output.messages": json.dumps([
                {"role": "assistant", "finish_reason": "stop",
                 "parts": [{"type": "text", "content": "Two "}, {"type": "text", "content": "years."}]},
            ]),
        },
        parent=root, start=6, end=9,
    )
    traces.close(root, 10)
    spans = traces.finished()
    assert [span_role(s) for s in spans] == ["retrieval", "generation", None]

    stats = CaptureStats()
    [captured] = extract_samples(spans, stats=stats)
    sample = captured.sample
    assert sample.context_texts == [
        "The warranty lasts two years.", "Returns are accepted for 30 days.", "Shipping is free over 50 EUR.",
    ]
    assert [d.id for d in sample.contexts] == ["d7", "d2", "d9"]
    assert [d.score for d in sample.contexts] == [0.91, 0.55, 0.12]
    assert sample.query == "How long is the warranty?"
    assert sample.response == "Two years."
    assert sample.ground_truth is None
    assert sample.metadata["query_source"] == "retrieval"
    assert captured.convention == "genai"
    assert captured.retriever == "products"
    assert captured.retrieval_span_id == sid(retrieval)
    assert captured.generation_span_id == sid(chat)
    assert captured.root_span_id == sid(root)
    assert captured.trace_id == root.get_span_context().trace_id
    assert not stats.counts


def test_genai_older_prompt_completion_attributes(traces: Traces) -> None:
    root = traces.open("rag")
    traces.span(
        "retrieve", {"gen_ai.operation.name": "retrieval",
                     "gen_ai.retrieval.documents": genai_docs(("a", "alpha", 1.0))},
        parent=root, start=1, end=2,
    )
    traces.span(
        "openai.chat",
        {
            "llm.request.type": "chat",
            "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "be brief",
            "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "what is alpha?",
            "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "Alpha is the first letter.",
        },
        parent=root, start=3, end=4,
    )
    traces.close(root, 5)
    [captured] = extract_samples(traces.finished())
    assert captured.sample.query == "what is alpha?"  # no query on the retrieval: the generation's user message
    assert captured.sample.metadata["query_source"] == "generation"
    assert captured.sample.response == "Alpha is the first letter."
    assert captured.retriever == "retrieve"


def test_genai_older_completion_answering_through_a_tool_call(traces: Traces) -> None:
    """OpenLLMetry before `gen_ai.output.messages` flattened tool calls too: a structured answer is the
    call's answer argument."""
    root = traces.open("rag")
    traces.span(
        "retrieve", {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": "what is alpha?",
                     "gen_ai.retrieval.documents": genai_docs(("a", "alpha", 1.0))},
        parent=root, start=1, end=2,
    )
    traces.span(
        "openai.chat",
        {
            "llm.request.type": "chat",
            "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "",
            "gen_ai.completion.0.tool_calls.0.name": "Answer",
            "gen_ai.completion.0.tool_calls.0.arguments": json.dumps({"answer": "The first letter."}),
        },
        parent=root, start=3, end=4,
    )
    traces.close(root, 5)
    [captured] = extract_samples(traces.finished())
    assert captured.sample.response == "The first letter."


def test_genai_documents_as_string_sequence_and_details_event(traces: Traces) -> None:
    root = traces.open("rag")
    traces.span(
        "retrieval", {"gen_ai.operation.name": "retrieval",
                      "gen_ai.retrieval.documents": (json.dumps({"id": "x", "score": 0.5, "content": "ex"}), "plain")},
        parent=root, start=1, end=2,
        events=[("gen_ai.client.inference.operation.details", {"gen_ai.retrieval.query.text": "what is x"})],
    )
    traces.span(
        "chat", {"gen_ai.operation.name": "chat"}, parent=root, start=3, end=4,
        events=[("gen_ai.client.inference.operation.details",
                 {"gen_ai.output.messages": genai_messages("assistant", "x is ex")})],
    )
    traces.close(root, 5)
    [captured] = extract_samples(traces.finished())
    assert captured.sample.context_texts == ["ex", "plain"]
    assert captured.sample.contexts[0].id == "x"
    assert captured.sample.query == "what is x"
    assert captured.sample.response == "x is ex"


def test_openinference_retriever_and_llm(traces: Traces) -> None:
    root = traces.open("RetrievalQA", {"openinference.span.kind": "CHAIN", "input.value": "unused root input"})
    retriever = traces.span(
        "VectorStoreRetriever",
        {
            "openinference.span.kind": "RETRIEVER",
            "input.value": "Who wrote Dune?",
            # indices out of order and with a gap: rank comes from the index, not attribute order
            "retrieval.documents.2.document.content": "Dune was published in 1965.",
            "retrieval.documents.2.document.id": "c",
            "retrieval.documents.0.document.content": "Frank Herbert wrote Dune.",
            "retrieval.documents.0.document.id": "a",
            "retrieval.documents.0.document.score": 0.9,
            "retrieval.documents.0.document.metadata": '{"source": "wiki"}',
        },
        parent=root, start=1, end=2,
    )
    llm = traces.span(
        "ChatOpenAI",
        {
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "system",
            "llm.input_messages.0.message.content": "Use the context.",
            "llm.input_messages.1.message.role": "user",
            "llm.input_messages.1.message.content": "Who wrote Dune?",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "Frank Herbert.",
            "output.value": "ignored when output messages exist",
        },
        parent=root, start=3, end=4,
    )
    traces.close(root, 5)
    [captured] = extract_samples(traces.finished())
    assert captured.sample.context_texts == ["Frank Herbert wrote Dune.", "Dune was published in 1965."]
    assert [d.id for d in captured.sample.contexts] == ["a", "c"]
    assert [d.score for d in captured.sample.contexts] == [0.9, None]
    assert captured.sample.query == "Who wrote Dune?"
    assert captured.sample.response == "Frank Herbert."
    assert captured.convention == "openinference"
    assert captured.retriever == "VectorStoreRetriever"
    assert (captured.retrieval_span_id, captured.generation_span_id) == (sid(retriever), sid(llm))


def test_openinference_json_input_and_output_value(traces: Traces) -> None:
    root = traces.open("chain")
    traces.span(
        "retrieve",
        {"openinference.span.kind": "RETRIEVER", "input.value": json.dumps({"query": "capital of France"}),
         "input.mime_type": "application/json", "retrieval.documents.0.document.content": "Paris is the capital."},
        parent=root, start=1, end=2,
    )
    traces.span(
        "llm",
        {"openinference.span.kind": "LLM", "output.mime_type": "application/json",
         "output.value": json.dumps({"choices": [{"message": {"role": "assistant", "content": "Paris."}}]})},
        parent=root, start=3, end=4,
    )
    traces.close(root, 5)
    [captured] = extract_samples(traces.finished())
    assert captured.sample.query == "capital of France"
    assert captured.sample.response == "Paris."


def _lc_doc(text: str, source: str) -> dict[str, object]:
    """A LangChain Document as `Serializable.to_json()` writes it, which OpenLLMetry's encoder uses."""
    return {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "document", "Document"],
            "kwargs": {"page_content": text, "metadata": {"source": source}, "type": "Document"}}


def test_openllmetry_langchain_task_and_chat(traces: Traces) -> None:
    workflow = traces.open(
        "RunnableSequence.workflow",
        {"traceloop.span.kind": "workflow", "traceloop.entity.name": "RunnableSequence",
         "traceloop.entity.input": json.dumps({"inputs": "What is RAG?", "tags": [], "metadata": {}, "kwargs": {}})},
    )
    parallel = traces.span(
        "RunnableParallel<context,question>.task",
        {
            "traceloop.span.kind": "task",
            "traceloop.entity.name": "RunnableParallel<context,question>",
            "traceloop.entity.input": json.dumps({"inputs": "What is RAG?", "tags": [], "metadata": {}, "kwargs": {}}),
            "traceloop.entity.output": json.dumps({
                "outputs": {"context": [_lc_doc("RAG adds retrieved text to a prompt.", "a.md"),
                                        _lc_doc("Vectors index text.", "b.md")],
                            "question": "What is RAG?"},
                "kwargs": {"tags": []},
            }),
        },
        parent=workflow, start=1, end=3,
    )
    chat = traces.span(
        "ChatOpenAI.chat",
        {"llm.request.type": "chat", "gen_ai.system": "openai",
         "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "Context... Question: What is RAG?",
         "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "Retrieval-augmented generation."},
        parent=workflow, start=4, end=6,
    )
    traces.close(workflow, 7)
    spans = traces.finished()
    assert span_role(spans[0]) == "retrieval"
    [captured] = extract_samples(spans)
    assert captured.sample.context_texts == ["RAG adds retrieved text to a prompt.", "Vectors index text."]
    assert captured.sample.query == "What is RAG?"
    assert captured.sample.response == "Retrieval-augmented generation."
    assert captured.convention == "openllmetry"
    assert captured.retriever == "RunnableParallel<context,question>"
    assert (captured.retrieval_span_id, captured.generation_span_id) == (sid(parallel), sid(chat))


def test_openllmetry_decorated_retriever_task_returning_strings(traces: Traces) -> None:
    root = traces.open("answer.workflow", {"traceloop.span.kind": "workflow"})
    traces.span(
        "retrieve_docs.task",
        {"traceloop.span.kind": "task", "traceloop.entity.name": "retrieve_docs",
         "traceloop.entity.input": json.dumps({"args": ["how do I reset?"], "kwargs": {"k": 2}}),
         "traceloop.entity.output": json.dumps(["Hold the button 5 s.", "Unplug it."])},
        parent=root, start=1, end=2,
    )
    traces.close(root, 3)
    [captured] = extract_samples(traces.finished())
    assert captured.sample.query == "how do I reset?"
    assert captured.sample.context_texts == ["Hold the button 5 s.", "Unplug it."]
    assert captured.sample.response == ""
    assert captured.generation_span_id is None


def test_openllmetry_chroma_query_events(traces: Traces) -> None:
    root = traces.open("ask", {"traceloop.span.kind": "workflow",
                               "traceloop.entity.input": json.dumps({"args": ["Which port?"], "kwargs": {}})})
    chroma = traces.span(
        "chroma.query",
        {"db.system": "chroma", "db.operation": "query", "db.chroma.query.n_results": 2},
        parent=root, start=1, end=2,
        events=[
            ("db.query.result", {"db.query.result.id": "7", "db.query.result.distance": 0.12,
                                 "db.query.result.document": "Use port 8080.",
                                 "db.query.result.metadata": '{"source": "ops.md"}'}),
            ("db.query.result", {"db.query.result.id": "3", "db.query.result.distance": 0.48,
                                 "db.query.result.document": "TLS is on 443."}),
        ],
    )
    traces.close(root, 3)
    stats = CaptureStats()
    [captured] = extract_samples(traces.finished(), stats=stats)
    assert captured.sample.context_texts == ["Use port 8080.", "TLS is on 443."]
    assert [d.id for d in captured.sample.contexts] == ["7", "3"]
    assert captured.sample.metadata["distances"] == [0.12, 0.48]
    assert captured.sample.query == "Which port?"  # chroma records no query text: the root's input
    assert captured.sample.metadata["query_source"] == "root"
    assert captured.retriever == "chroma"
    assert captured.retrieval_span_id == sid(chroma)
    assert not stats.counts


def test_vector_db_hits_with_text_in_metadata(traces: Traces) -> None:
    root = traces.open("root", {"input.value": "q?"})
    traces.span(
        "pinecone.query", {"db.system": "pinecone", "db.operation": "query"}, parent=root, start=1, end=2,
        events=[("db.query.result", {"db.query.result.id": "p1", "db.query.result.score": 0.8,
                                     "db.query.result.metadata": '{"text": "pine text"}'})],
    )
    traces.close(root, 3)
    [captured] = extract_samples(traces.finished())
    assert captured.sample.contexts[0].content == "pine text"
    assert captured.sample.contexts[0].score == 0.8


def test_heuristic_spans_without_documents_are_passed_over(traces: Traces) -> None:
    root = traces.open("root", {"input.value": "q"})
    traces.span("search_tool.tool", {"traceloop.span.kind": "tool", "traceloop.entity.name": "vectorstore_search",
                                     "traceloop.entity.output": json.dumps({"output": 42})},
                parent=root, start=1, end=2)
    traces.span("chroma.query.segment._query", {"db.system": "chroma", "db.operation": "_query"},
                parent=root, start=1, end=2)
    traces.close(root, 3)
    stats = CaptureStats()
    assert extract_samples(traces.finished(), stats=stats) == []
    assert stats.counts == {"no_documents": 1}  # the `_query` span is not a retrieval at all


def _sdk_keeps_structured_attributes() -> bool:
    """opentelemetry-sdk 1.45 keeps a list of mappings as an attribute; older ones drop it (with a warning),
    so no app on them can send one."""
    from opentelemetry.sdk.trace import TracerProvider

    with TracerProvider().get_tracer("probe").start_as_current_span("probe", attributes={"a": [{"k": "v"}]}) as s:
        return bool(s.attributes) and "a" in (s.attributes or {})  # type: ignore[attr-defined]


def test_genai_structured_anyvalue_attributes(traces: Traces) -> None:
    """The SDK accepts structured (AnyValue) attributes; the semconv prefers them to JSON strings."""
    if not _sdk_keeps_structured_attributes():
        pytest.skip("this opentelemetry-sdk drops structured attributes (kept from 1.45 on)")
    root = traces.open("rag")
    traces.span(
        "retrieval", {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": "q",
                      "gen_ai.retrieval.documents": [{"id": "s1", "score": 0.7, "content": "structured doc"}]},
        parent=root, start=1, end=2,
    )
    traces.span(
        "chat", {"gen_ai.operation.name": "chat",
                 "gen_ai.output.messages": [{"role": "assistant", "parts": [{"type": "text", "content": "ok"}]}]},
        parent=root, start=3, end=4,
    )
    traces.close(root, 5)
    stats = CaptureStats()
    [captured] = extract_samples(traces.finished(), stats=stats)
    assert captured.sample.contexts[0].model_dump() == {"content": "structured doc", "id": "s1", "score": 0.7}
    assert captured.sample.response == "ok"
    assert not stats.counts


def test_genai_pre_release_query_attribute_and_retrieve_operation(traces: Traces) -> None:
    root = traces.open("rag")
    traces.span("retrieve", {"gen_ai.operation.name": "retrieve", "gen_ai.retrieval.query": "older q",
                             "gen_ai.retrieval.documents": genai_docs(("a", "alpha", 1.0))},
                parent=root, start=1, end=2)
    traces.close(root, 3)
    [captured] = extract_samples(traces.finished())
    assert captured.sample.query == "older q"
