"""Which generation consumed which retrieval, where the query comes from, ground truth, extractors."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from ragtrace.capture import CapturedSample, CaptureStats, extract_samples
from ragtrace.scoring import RagSample
from tests.capture.conftest import MS, Traces, genai_docs, genai_messages, sid


def _retrieval(query: str | None, *docs: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "retrieval",
        "gen_ai.retrieval.documents": genai_docs(*((f"id{i}", d, 1.0) for i, d in enumerate(docs))),
    }
    if query is not None:
        attrs["gen_ai.retrieval.query.text"] = query
    return attrs


def _chat(answer: str, user: str | None = None) -> dict[str, Any]:
    attrs: dict[str, Any] = {"gen_ai.operation.name": "chat",
                                "gen_ai.output.messages": genai_messages("assistant", answer)}
    if user is not None:
        attrs["gen_ai.input.messages"] = genai_messages("user", user)
    return attrs


def test_two_retrievals_two_generations_pair_in_sequence(traces: Traces) -> None:
    root = traces.open("agent")
    r1 = traces.span("r1", _retrieval("first?", "one"), parent=root, start=1, end=2)
    g1 = traces.span("g1", _chat("answer one"), parent=root, start=3, end=4)
    r2 = traces.span("r2", _retrieval("second?", "two"), parent=root, start=5, end=6)
    g2 = traces.span("g2", _chat("answer two"), parent=root, start=7, end=8)
    traces.close(root, 9)
    spans = traces.finished()
    random.Random(4).shuffle(spans)  # any order in
    samples = extract_samples(spans)
    assert [(s.retrieval_span_id, s.generation_span_id) for s in samples] == [(sid(r1), sid(g1)), (sid(r2), sid(g2))]
    assert [s.sample.response for s in samples] == ["answer one", "answer two"]
    assert [s.sample.query for s in samples] == ["first?", "second?"]


def test_a_step_that_only_called_a_tool_gives_way_to_the_answer_quoting_the_same_texts(traces: Traces) -> None:
    """An agent searches, reads, searches again, answers: the second step's input quotes the first
    search's texts as fully as the answer's does, but it only called a tool; the answer used them."""
    first, second = "The warranty lasts two years.", "Claims need the original receipt."
    history = [{"role": "user", "parts": [{"type": "text", "content": "warranty and claims?"}]},
               {"role": "tool", "parts": [{"type": "text", "content": first}]}]
    search_again = {"role": "assistant", "parts": [
        {"type": "tool_call", "name": "search", "arguments": {"query": "warranty claims"}}]}
    root = traces.open("agent")
    r1 = traces.span("r1", _retrieval("warranty length", first), parent=root, start=1, end=2)
    step = traces.span("step", {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(history),
                                "gen_ai.output.messages": json.dumps([search_again])}, parent=root, start=3, end=4)
    r2 = traces.span("r2", _retrieval("warranty claims", second), parent=root, start=5, end=6)
    answer_input = [*history, search_again, {"role": "tool", "parts": [{"type": "text", "content": second}]}]
    answer = traces.span("answer", {**_chat("Two years; keep the receipt."),
                                    "gen_ai.input.messages": json.dumps(answer_input)}, parent=root, start=7, end=8)
    traces.close(root, 9)
    samples = extract_samples(traces.finished())
    assert [(c.retrieval_span_id, c.generation_span_id) for c in samples] == [(sid(r1), sid(answer)),
                                                                             (sid(r2), sid(answer))]
    assert sid(step) not in {c.generation_span_id for c in samples}
    assert [c.pairing for c in samples] == ["contexts", "contexts"]


def test_two_retrievals_before_one_generation_share_it(traces: Traces) -> None:
    root = traces.open("rag")
    traces.span("r1", _retrieval("q", "a"), parent=root, start=1, end=2)
    traces.span("r2", _retrieval("q", "b"), parent=root, start=1, end=3)
    g = traces.span("g", _chat("ab"), parent=root, start=4, end=5)
    traces.close(root, 6)
    assert [s.generation_span_id for s in extract_samples(traces.finished())] == [sid(g), sid(g)]


def test_sibling_generation_is_preferred_over_an_earlier_cousin(traces: Traces) -> None:
    root = traces.open("batch")
    chain_a = traces.open("chain a", parent=root, start=1)
    chain_b = traces.open("chain b", parent=root, start=1)
    traces.span("retrieve a", _retrieval("qa", "doc a"), parent=chain_a, start=1, end=2)
    traces.span("llm b", _chat("answer b"), parent=chain_b, start=3, end=4)  # first after, but other chain
    sibling = traces.span("llm a", _chat("answer a"), parent=chain_a, start=5, end=6)
    traces.close(chain_a, 7)
    traces.close(chain_b, 7)
    traces.close(root, 8)
    [captured] = extract_samples(traces.finished())
    assert captured.generation_span_id == sid(sibling)
    assert captured.sample.response == "answer a"


def test_nested_generation_under_same_chain_beats_other_chain(traces: Traces) -> None:
    """LangChain shape: retriever under RunnableParallel, LLM under the RunnableSequence above it."""
    root = traces.open("batch")
    seq_a = traces.open("sequence a", parent=root, start=1)
    seq_b = traces.open("sequence b", parent=root, start=1)
    parallel_a = traces.open("parallel a", parent=seq_a, start=1)
    traces.span("retriever a", _retrieval("qa", "doc a"), parent=parallel_a, start=1, end=2)
    traces.close(parallel_a, 2)
    traces.span("llm b", _chat("answer b"), parent=seq_b, start=3, end=4)
    mine = traces.span("llm a", _chat("answer a"), parent=seq_a, start=5, end=6)
    for span in (seq_a, seq_b, root):
        traces.close(span, 7)
    [captured] = extract_samples(traces.finished())
    assert captured.generation_span_id == sid(mine)


def test_first_generation_wins_without_a_sibling(traces: Traces) -> None:
    root = traces.open("rag")
    chain = traces.open("chain", parent=root, start=0)
    traces.span("r", _retrieval("q", "a"), parent=chain, start=1, end=2)
    traces.close(chain, 2)
    first = traces.span("g early", _chat("early"), parent=root, start=3, end=4)
    traces.span("g late", _chat("late"), parent=root, start=5, end=6)
    traces.close(root, 7)
    [captured] = extract_samples(traces.finished())
    assert captured.generation_span_id == sid(first)


def test_generation_before_retrieval_is_ignored(traces: Traces) -> None:
    root = traces.open("rag")
    traces.span("rewrite query", _chat("rewritten"), parent=root, start=0, end=1)
    traces.span("r", _retrieval("q", "a"), parent=root, start=2, end=4)
    traces.span("overlapping", _chat("overlap"), parent=root, start=3, end=5)  # started before r ended
    after = traces.span("answer", _chat("final"), parent=root, start=4, end=6)  # starts exactly at r's end
    traces.close(root, 7)
    [captured] = extract_samples(traces.finished())
    assert captured.generation_span_id == sid(after)
    assert captured.sample.response == "final"


def test_retrieval_without_generation_is_still_a_sample(traces: Traces) -> None:
    root = traces.open("rag")
    traces.span("g before", _chat("before"), parent=root, start=0, end=1)
    traces.span("r", _retrieval("q", "a", "b"), parent=root, start=2, end=3)
    traces.close(root, 4)
    [captured] = extract_samples(traces.finished())
    assert captured.generation_span_id is None
    assert captured.sample.response == ""
    assert captured.sample.context_texts == ["a", "b"]


def test_query_falls_back_to_generation_then_root(traces: Traces) -> None:
    root = traces.open("rag", {"input.value": "root question"})
    traces.span("r1", _retrieval(None, "a"), parent=root, start=1, end=2)
    traces.span("g1", _chat("x", user="generation question"), parent=root, start=3, end=4)
    traces.span("r2", _retrieval(None, "b"), parent=root, start=5, end=6)
    traces.span("g2", _chat("y"), parent=root, start=7, end=8)  # no user message
    traces.close(root, 9)
    samples = extract_samples(traces.finished())
    assert [(s.sample.query, s.sample.metadata["query_source"]) for s in samples] == [
        ("generation question", "generation"), ("root question", "root"),
    ]


def test_root_input_in_each_convention(traces: Traces) -> None:
    roots = {
        "traceloop": {"traceloop.entity.input": json.dumps({"inputs": {"question": "tl q"}, "kwargs": {}})},
        "genai": {"gen_ai.input.messages": genai_messages("user", "genai q")},
        "json input.value": {"input.value": json.dumps({"input": "oi q"})},
    }
    for attrs in roots.values():
        root = traces.open("root", attrs)
        traces.span("r", _retrieval(None, "a"), parent=root, start=1, end=2)
        traces.close(root, 3)
    queries = sorted(s.sample.query for s in extract_samples(traces.finished()))
    assert queries == ["genai q", "oi q", "tl q"]


def test_no_query_anywhere_is_counted(traces: Traces) -> None:
    root = traces.open("rag")
    traces.span("r", _retrieval(None, "a"), parent=root, start=1, end=2)
    traces.span("g", _chat("answer"), parent=root, start=3, end=4)
    traces.close(root, 5)
    stats = CaptureStats()
    assert extract_samples(traces.finished(), stats=stats) == []
    assert stats.counts == {"no_query": 1}


def test_ground_truth_from_another_span(traces: Traces) -> None:
    root = traces.open("golden replay", {"ragtrace.ground_truth": "The warranty is two years."})
    traces.span("r", _retrieval("warranty?", "2y"), parent=root, start=1, end=2)
    traces.close(root, 3)
    [captured] = extract_samples(traces.finished())
    assert captured.sample.ground_truth == "The warranty is two years."


def test_ground_truth_on_the_retrieval_wins_and_bad_types_are_counted(traces: Traces) -> None:
    root = traces.open("rag", {"ragtrace.ground_truth": 42})
    traces.span("helper", {"ragtrace.ground_truth": "from elsewhere"}, parent=root, start=0, end=1)
    traces.span("r", {**_retrieval("q", "a"), "ragtrace.ground_truth": "own"}, parent=root, start=1, end=2)
    traces.span("r2", _retrieval("q", "a"), parent=root, start=3, end=4)
    traces.close(root, 5)
    stats = CaptureStats()
    first, second = extract_samples(traces.finished(), stats=stats)
    assert first.sample.ground_truth == "own"
    assert second.sample.ground_truth == "from elsewhere"
    assert stats.counts == {"wrong_attribute_type": 1}


def test_several_traces_in_one_call_are_kept_apart(traces: Traces) -> None:
    for n in range(2):
        root = traces.open(f"t{n}")
        traces.span("r", _retrieval(f"q{n}", f"doc{n}"), parent=root, start=1, end=2)
        traces.span("g", _chat(f"a{n}"), parent=root, start=3, end=4)
        traces.close(root, 5)
    samples = extract_samples(traces.finished())
    assert sorted((s.sample.query, s.sample.response) for s in samples) == [("q0", "a0"), ("q1", "a1")]
    assert len({s.trace_id for s in samples}) == 2


def test_custom_extractor_wins(traces: Traces) -> None:
    root = traces.open("rag")
    traces.span("r", _retrieval("q", "a"), parent=root, start=1, end=2)
    traces.close(root, 3)
    spans = traces.finished()

    def mine(batch: Sequence[ReadableSpan]) -> list[CapturedSample]:
        first = batch[0]
        assert first.context is not None
        return [CapturedSample(sample=RagSample(query="custom", contexts=["c" * 20_000]),
                               trace_id=first.context.trace_id, retrieval_span_id=first.context.span_id)]

    stats = CaptureStats()
    [captured] = extract_samples(spans, extractor=mine, stats=stats)
    assert captured.sample.query == "custom"
    assert captured.convention == "custom"
    assert len(captured.sample.contexts[0].content) == 8_000  # the same caps apply to custom samples
    assert stats.counts == {"context_truncated": 1}


def test_failing_or_empty_extractor_falls_back_to_readers(traces: Traces) -> None:
    root = traces.open("rag")
    traces.span("r", _retrieval("q", "a"), parent=root, start=1, end=2)
    traces.close(root, 3)
    spans = traces.finished()

    def broken(batch: Sequence[ReadableSpan]) -> list[CapturedSample]:
        raise RuntimeError("user bug")

    def garbage(batch: Sequence[ReadableSpan]) -> list[CapturedSample]:
        return ["not a sample"]  # type: ignore[list-item]

    stats = CaptureStats()
    assert [s.sample.query for s in extract_samples(spans, extractor=broken, stats=stats)] == ["q"]
    assert [s.convention for s in extract_samples(spans, extractor=lambda b: [], stats=stats)] == ["genai"]
    assert len(extract_samples(spans, extractor=garbage, stats=stats)) == 1
    assert stats.counts == {"extractor_error": 1, "extractor_invalid_output": 1}


def _bare_span(span_id: int, attrs: dict[str, Any], parent: int | None = None,
               start: int | None = None, end: int | None = None) -> ReadableSpan:
    def ctx(s: int) -> SpanContext:
        return SpanContext(trace_id=77, span_id=s, is_remote=False, trace_flags=TraceFlags(1))

    return ReadableSpan(name=f"s{span_id}", context=ctx(span_id), parent=ctx(parent) if parent else None,
                        attributes=attrs, start_time=start, end_time=end)


def test_missing_parents_times_and_duplicate_ids_never_raise() -> None:
    spans = [
        _bare_span(1, _retrieval("q", "a")),  # no parent, no times
        _bare_span(2, _chat("answer")),  # no times: cannot be paired
        _bare_span(1, _retrieval("dup", "a")),  # duplicate id
        _bare_span(3, _retrieval("q3", "b"), parent=999, start=5 * MS, end=6 * MS),  # parent not in the trace
        _bare_span(4, _chat("after"), parent=999, start=7 * MS, end=8 * MS),
        ReadableSpan(name="no context"),
    ]
    stats = CaptureStats()
    samples = extract_samples(spans, stats=stats)
    assert [(s.sample.query, s.sample.response) for s in samples] == [("q", ""), ("q3", "after")]
    assert {s.root_span_id for s in samples} == {1}
    assert stats.counts == {"duplicate_span_id": 1, "invalid_span": 1}


def _lc_task(name: str, inputs: object, outputs: object) -> dict[str, object]:
    docs: dict[str, object] = {"traceloop.span.kind": "task", "traceloop.entity.name": name,
            "traceloop.entity.input": json.dumps({"inputs": inputs, "tags": [], "metadata": {}, "kwargs": {}}),
            "traceloop.entity.output": json.dumps({"outputs": outputs, "kwargs": {}})}
    return docs


def test_nested_layers_showing_the_same_documents_give_one_sample(traces: Traces) -> None:
    """create_retrieval_chain under OpenLLMetry: RunnableAssign > retrieve_documents > chroma.query."""
    docs = [{"page_content": "Port 8080.", "metadata": {}}, {"page_content": "TLS on 443.", "metadata": {}}]
    root = traces.open("retrieval_chain.workflow", {"traceloop.span.kind": "workflow"})
    assign = traces.open("RunnableAssign<context>.task",
                         _lc_task("RunnableAssign<context>", {"input": "Which port?"},
                                  {"input": "Which port?", "context": docs}), parent=root, start=1)
    inner = traces.open("retrieve_documents.task", _lc_task("retrieve_documents", "Which port?", docs),
                        parent=assign, start=1)
    chroma = traces.span("chroma.query", {"db.system": "chroma", "db.operation": "query"}, parent=inner,
                         start=1, end=2, events=[("db.query.result", {"db.query.result.document": d["page_content"]})
                                                 for d in docs])
    traces.close(inner, 3)
    traces.close(assign, 3)
    llm = traces.span("ChatOpenAI.chat", {"llm.request.type": "chat", "gen_ai.completion.0.content": "8080"},
                      parent=root, start=4, end=5)
    traces.close(root, 6)
    stats = CaptureStats()
    [captured] = extract_samples(traces.finished(), stats=stats)
    assert captured.retrieval_span_id == sid(chroma)
    assert captured.generation_span_id == sid(llm)
    assert captured.sample.query == "Which port?"  # inherited from the nearest dropped layer
    assert captured.sample.context_texts == ["Port 8080.", "TLS on 443."]
    assert stats.counts == {"nested_retrieval": 2}


def _oi_retriever(query: str, *docs: str) -> dict[str, object]:
    attrs: dict[str, object] = {"openinference.span.kind": "RETRIEVER", "input.value": query}
    for i, doc in enumerate(docs):
        attrs[f"retrieval.documents.{i}.document.content"] = doc
    return attrs


def test_explicit_retrieval_wins_over_a_wrapping_task_and_a_fusion_retrievers_parts_are_kept(traces: Traces) -> None:
    root = traces.open("root")
    task = traces.open("retriever.task", _lc_task("retriever", "q", [{"page_content": "a"}]), parent=root, start=1)
    fusion = traces.open("fusion", _oi_retriever("q", "a", "b"), parent=task, start=1)
    part_a = traces.span("part a", _oi_retriever("q rewritten one way", "a"), parent=fusion, start=1, end=2)
    part_b = traces.span("part b", _oi_retriever("q rewritten another way", "b"), parent=fusion, start=1, end=2)
    traces.close(fusion, 3)
    traces.close(task, 3)
    traces.close(root, 4)
    stats = CaptureStats()
    samples = extract_samples(traces.finished(), stats=stats)
    assert sorted(s.retrieval_span_id for s in samples) == sorted([sid(fusion), sid(part_a), sid(part_b)])
    assert stats.counts == {"nested_retrieval": 1}


def test_named_retriever_tasks_with_their_own_queries_are_distinct_retrievals(traces: Traces) -> None:
    """A multi-query retriever under OpenLLMetry: its parts are retriever tasks too, asked other queries, so
    they are kept as under OpenInference; a task that only passes the documents on is still a layer."""
    doc_a, doc_b = {"page_content": "Port 8080."}, {"page_content": "TLS on 443."}
    root = traces.open("root")
    step = traces.open("RunnableParallel<context>.task", _lc_task("RunnableParallel<context>", "Which port?",
                                                                  {"context": [doc_a, doc_b]}), parent=root, start=1)
    multi = traces.open("vector_db_retrieve MultiQuery", _lc_task("MultiQuery", "Which port?", [doc_a, doc_b]),
                        parent=step, start=1)
    part_a = traces.span("vector_db_retrieve Docs", _lc_task("Docs", "port number?", [doc_a]),
                         parent=multi, start=2, end=3)
    part_b = traces.span("vector_db_retrieve Docs", _lc_task("Docs", "which port for TLS?", [doc_b]),
                         parent=multi, start=3, end=4)
    traces.close(multi, 5)
    traces.close(step, 5)
    traces.close(root, 6)
    stats = CaptureStats()
    samples = extract_samples(traces.finished(), stats=stats)
    assert [s.retrieval_span_id for s in samples] == [sid(multi), sid(part_a), sid(part_b)]
    assert [s.sample.query for s in samples] == ["Which port?", "port number?", "which port for TLS?"]
    assert stats.counts == {"nested_retrieval": 1}  # the RunnableParallel step


def test_a_wrapper_and_its_inner_call_are_one_sample_on_the_outer_span(traces: Traces) -> None:
    """LlamaIndex under OpenInference: `retrieve` (documents) around `_retrieve` (a QueryBundle, no documents)."""
    root = traces.open("query")
    outer = traces.open("VectorIndexRetriever.retrieve", _oi_retriever("Which port?", "Port 8080.", "TLS on 443."),
                        parent=root, start=1)
    bundle = json.dumps({"query_bundle": {"query_str": "Which port?", "embedding": None}})
    inner = traces.span("VectorIndexRetriever._retrieve", {"openinference.span.kind": "RETRIEVER",
                                                           "input.value": bundle}, parent=outer, start=1, end=2)
    same = traces.span("VectorIndexRetriever._retrieve_again", _oi_retriever("Which port?", "Port 8080."),
                       parent=outer, start=2, end=3)
    traces.close(outer, 3)
    traces.close(root, 4)
    stats = CaptureStats()
    [captured] = extract_samples(traces.finished(), stats=stats)
    assert captured.retrieval_span_id == sid(outer)
    assert captured.sample.context_texts == ["Port 8080.", "TLS on 443."]
    assert stats.counts == {"nested_retrieval": 2}
    assert sid(inner) != sid(same)
