"""Agentic RAG: tool calls as retrievals, the user's question as the query, content on events, sessions,
the agent's roll-up span. Spans are built with the real OTel SDK in the shapes the producers record."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ragtrace.capture import CaptureRules, CaptureStats, extract_samples, span_role
from ragtrace.capture.explain import explain, render
from ragtrace.capture.values import CaptureLimits, Skip
from tests.capture.conftest import Traces, genai_messages, sid

QUESTION = "How long is the warranty on the X200 kettle?"
REWRITE = "X200 kettle warranty"
DOCS = ["The X200 kettle has a two-year warranty.", "Returns are accepted within 30 days of purchase.",
        "The X200 kettle boils a litre in three minutes."]
ANSWER = "Two years."


def _genai_chat(traces: Traces, parent: Any, start: int, messages: list[dict[str, Any]], answer: str | None,
                **extra: Any) -> Any:
    attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(messages), **extra}
    if answer is not None:
        attrs["gen_ai.output.messages"] = genai_messages("assistant", answer)
    return traces.span("chat m", attrs, parent=parent, start=start, end=start + 1)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


def _pydantic_agent(traces: Traces, result: Any, *, tool: str = "search_handbook", arguments: Any = None,
                    conversation: str | None = None) -> tuple[Any, Any, Any]:
    """Pydantic AI's shape: invoke_agent > chat (calls the tool), execute_tool, chat (answers)."""
    common = {"gen_ai.conversation.id": conversation} if conversation else {}
    agent = traces.open("invoke_agent agent", {"gen_ai.operation.name": "invoke_agent", **common})
    _genai_chat(traces, agent, 1, [_user(QUESTION)], None, **common)
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
             "gen_ai.tool.call.arguments": json.dumps(arguments or {"query": REWRITE}), **common}
    if result is not None:
        attrs["gen_ai.tool.call.result"] = result
    call = traces.span(f"execute_tool {tool}", attrs, parent=agent, start=3, end=4)
    tool_response = {"role": "user", "parts": [{"type": "tool_call_response", "name": tool, "result": result}]}
    answer = _genai_chat(traces, agent, 5, [_user(QUESTION), tool_response], ANSWER, **common)
    traces.close(agent, 7)
    return agent, call, answer


def test_a_genai_tool_returning_a_list_of_texts_is_a_retrieval_judged_on_the_users_question(traces: Traces) -> None:
    agent, call, answer = _pydantic_agent(traces, json.dumps(DOCS), conversation="conv-1")
    spans = traces.finished()
    assert [span_role(s) for s in spans if s.context is not None and s.context.span_id == sid(call)] == ["retrieval"]
    stats = CaptureStats()
    [captured] = extract_samples(spans, stats=stats)
    sample = captured.sample
    assert sample.context_texts == DOCS
    assert (sample.query, sample.metadata["query_source"]) == (QUESTION, "generation")
    assert sample.metadata["retrieval_query"] == REWRITE
    assert sample.response == ANSWER
    assert (captured.retrieval_span_id, captured.generation_span_id) == (sid(call), sid(answer))
    assert captured.retriever == "search_handbook" and captured.convention == "genai"
    assert captured.session_id == "conv-1" and sample.metadata["session_id"] == "conv-1"
    assert captured.agent_span_id == sid(agent)
    assert not stats.counts
    text = render(explain(spans))
    assert "taken as a retrieval: tool 'search_handbook': its result is a list of documents" in text
    assert f"query (generation): {QUESTION}" in text
    assert (f"retrieval's own query (tool call arguments; not judged, written as ragtrace.retrieval.query): "
            f"{REWRITE}") in text


def test_one_setting_keeps_the_retrievals_own_query(traces: Traces) -> None:
    _pydantic_agent(traces, json.dumps(DOCS))
    [captured] = extract_samples(traces.finished(), rules=CaptureRules(query_source="retrieval"))
    assert (captured.sample.query, captured.sample.metadata["query_source"]) == (REWRITE, "retrieval")
    assert "retrieval_query" not in captured.sample.metadata


@pytest.mark.parametrize("result", [
    "42",  # a calculator
    json.dumps({"agent": "billing"}),  # a handoff
    json.dumps([{"type": "text", "text": "42"}]),  # MCP content parts: a reply
    json.dumps([{"role": "assistant", "content": "hi"}]),  # chat messages
    json.dumps([]),  # nothing says these were documents
    json.dumps([1, 2, 3]),
])
def test_tools_that_are_not_retrievals_stay_untouched_and_explain_says_why(traces: Traces, result: str) -> None:
    _, call, _ = _pydantic_agent(traces, result, tool="calculator", arguments={"expression": "6*7"})
    spans = traces.finished()
    stats = CaptureStats()
    assert extract_samples(spans, stats=stats) == []
    [report] = explain(spans)
    verdict = next(v.verdict for v in report.spans if v.span_id == sid(call))
    # either turned away by the hot-path test (with why), or read in full and passed over (counted)
    assert ("tool 'calculator' (genai): not a retrieval" in verdict
            or verdict == "passed over (tool_result_not_documents)"), verdict
    assert set(stats.counts) <= {"tool_result_not_documents"}


def test_a_named_tool_splits_its_plain_text_result_at_the_separator(traces: Traces) -> None:
    _pydantic_agent(traces, "\n\n".join(DOCS))
    assert extract_samples(traces.finished()) == []  # plain text: not a retrieval unless named
    [captured] = extract_samples(traces.finished(), rules=CaptureRules(retrieval_tools=("search_*",)))
    assert captured.sample.context_texts == DOCS
    assert captured.sample.metadata["taken_because"] == "tool 'search_handbook': named in retrieval_tools"
    traces.exporter.clear()
    _pydantic_agent(traces, "\n".join(DOCS))
    rules = CaptureRules(retrieval_tools=("search_handbook",), tool_separator="\n")
    assert extract_samples(traces.finished(), rules=rules)[0].sample.context_texts == DOCS


def test_a_tool_excluded_by_name_is_no_retrieval_whatever_it_returns(traces: Traces) -> None:
    _, call, _ = _pydantic_agent(traces, json.dumps(["a.txt", "b.txt"]), tool="list_files")
    rules = CaptureRules(retrieval_tools=("!list_files",))
    spans = traces.finished()
    assert len(extract_samples(spans)) == 1
    assert extract_samples(spans, rules=rules) == []
    [report] = explain(spans, rules=rules)
    assert "excluded in retrieval_tools" in next(v.verdict for v in report.spans if v.span_id == sid(call))


def test_a_named_tool_with_no_recorded_result_is_a_counted_skip(traces: Traces) -> None:
    _pydantic_agent(traces, None)
    stats = CaptureStats()
    rules = CaptureRules(retrieval_tools=("search_handbook",))
    assert extract_samples(traces.finished(), stats=stats, rules=rules) == []
    assert stats.counts == {"tool_result_not_recorded": 1}


def test_openinference_tool_with_document_objects_and_kwargs_arguments(traces: Traces) -> None:
    """The OpenAI Agents SDK and smolagents shapes: a TOOL span, documents as JSON objects, the question
    only in the task input of the AGENT root and (prefixed) in the model's user message."""
    root = traces.open("ToolCallingAgent.run", {"openinference.span.kind": "AGENT",
                                                "input.value": json.dumps({"task": QUESTION, "stream": False})})
    documents = [{"id": f"h{i}", "content": text, "score": 1.0 - i / 10} for i, text in enumerate(DOCS)]
    call = traces.span("SimpleTool", {
        "openinference.span.kind": "TOOL", "tool.name": "search_handbook",
        "input.value": json.dumps({"args": [], "sanitize_inputs_outputs": True, "kwargs": {"query": REWRITE}}),
        "output.value": json.dumps(documents)}, parent=root, start=1, end=2)
    answer = traces.span("OpenAIModel.generate", {
        "openinference.span.kind": "LLM", "llm.model_name": "m",
        "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": f"New task:\n{QUESTION}",
        "llm.input_messages.1.message.role": "tool-response",
        "llm.input_messages.1.message.content": "Observation:\n" + repr(DOCS),
        "llm.output_messages.0.message.role": "assistant", "llm.output_messages.0.message.content": ANSWER,
    }, parent=root, start=3, end=4)
    traces.close(root, 5)
    [captured] = extract_samples(traces.finished())
    sample = captured.sample
    assert sample.context_texts == DOCS and [d.id for d in sample.contexts] == ["h0", "h1", "h2"]
    # The model's message wraps the agent's input: the input is the question.
    assert (sample.query, sample.metadata["query_source"]) == (QUESTION, "root")
    assert sample.metadata["retrieval_query"] == REWRITE
    assert (captured.retrieval_span_id, captured.generation_span_id) == (sid(call), sid(answer))
    assert captured.agent_span_id == sid(root)


def test_python_repr_and_framework_tool_outputs(traces: Traces) -> None:
    """A Python repr of a list (instrumentors that record str(result)); LlamaIndex's ToolOutput, whose list
    is under `raw_output`; an OpenLLMetry tool with `{"documents": [...]}`."""
    root = traces.open("agent", {"input.value": QUESTION})
    traces.span("t1", {"openinference.span.kind": "TOOL", "tool.name": "a", "output.value": repr(DOCS[:1])},
                parent=root, start=1, end=2)
    output = {"blocks": [{"text": repr(DOCS[1:2])}], "tool_name": "b", "raw_output": DOCS[1:2], "is_error": False}
    traces.span("t2", {"openinference.span.kind": "TOOL", "tool.name": "b", "output.value": json.dumps(output)},
                parent=root, start=3, end=4)
    traces.span("t3", {"traceloop.span.kind": "tool", "traceloop.entity.name": "c",
                       "traceloop.entity.input": json.dumps({"args": [], "kwargs": {"q": REWRITE}}),
                       "traceloop.entity.output": json.dumps({"documents": [{"content": DOCS[2]}]})},
                parent=root, start=5, end=6)
    traces.close(root, 7)
    samples = extract_samples(traces.finished())
    assert [(c.retriever, c.sample.context_texts, c.convention) for c in samples] == [
        ("a", DOCS[:1], "openinference"), ("b", DOCS[1:2], "openinference"), ("c", DOCS[2:], "openllmetry")]
    assert [c.sample.query for c in samples] == [QUESTION] * 3
    assert {c.agent_span_id for c in samples} == {sid(root)}  # several searches, no agent span: the root


def test_a_tool_around_a_retriever_gives_way_to_it(traces: Traces) -> None:
    """LangGraph's create_retriever_tool under OpenInference, with the tool named: the RETRIEVER inside is
    the one sample, judged on the user's question."""
    root = traces.open("LangGraph", {"openinference.span.kind": "CHAIN",
                                     "input.value": json.dumps({"messages": [["user", QUESTION]]})})
    tool = traces.open("search_handbook", {"openinference.span.kind": "TOOL", "tool.name": "search_handbook",
                                           "input.value": REWRITE}, parent=root, start=1)
    documents = {f"retrieval.documents.{i}.document.content": d for i, d in enumerate(DOCS)}
    retriever = traces.span("Handbook", {"openinference.span.kind": "RETRIEVER", "input.value": REWRITE, **documents},
                            parent=tool, start=2, end=3)
    tool.set_attribute("output.value", json.dumps({"content": "\n\n".join(DOCS), "tool_call_id": "c1"}))
    traces.close(tool, 4)
    traces.span("ChatOpenAI", {"openinference.span.kind": "LLM", "llm.model_name": "m",
                               "llm.input_messages.0.message.role": "user",
                               "llm.input_messages.0.message.content": QUESTION,
                               "llm.input_messages.1.message.role": "tool",
                               "llm.input_messages.1.message.content": "\n\n".join(DOCS),
                               "llm.output_messages.0.message.role": "assistant",
                               "llm.output_messages.0.message.content": ANSWER}, parent=root, start=5, end=6)
    traces.close(root, 7)
    for rules in (CaptureRules(), CaptureRules(retrieval_tools=("search_handbook",))):
        stats = CaptureStats()
        [captured] = extract_samples(traces.finished(), stats=stats, rules=rules)
        assert captured.retrieval_span_id == sid(retriever)
        assert (captured.sample.query, captured.sample.metadata["retrieval_query"]) == (QUESTION, REWRITE)


def test_a_prompt_built_around_the_question_is_not_the_question(traces: Traces) -> None:
    """Classic RAG: the user message is a template quoting the contexts; the retrieval's query stays."""
    root = traces.open("rag", {"input.value": QUESTION})
    traces.span("retrieve", {"openinference.span.kind": "RETRIEVER", "input.value": QUESTION,
                             "retrieval.documents.0.document.content": DOCS[0]}, parent=root, start=1, end=2)
    traces.span("llm", {"openinference.span.kind": "LLM", "llm.model_name": "m",
                        "llm.input_messages.0.message.role": "user",
                        "llm.input_messages.0.message.content": f"Context: {DOCS[0]}\nQuestion: {QUESTION}",
                        "llm.output_messages.0.message.content": ANSWER}, parent=root, start=3, end=4)
    traces.close(root, 5)
    [captured] = extract_samples(traces.finished())
    assert (captured.sample.query, captured.sample.metadata["query_source"]) == (QUESTION, "retrieval")
    assert "retrieval_query" not in captured.sample.metadata


def test_a_condensed_follow_up_keeps_its_standalone_form(traces: Traces) -> None:
    """LlamaIndex's condense-plus-context: the retrieval's query is the follow-up made standalone; the
    paired generation replays the conversation (two user turns), so the condensed question is judged."""
    root = traces.open("chat", {"session.id": "s-7"})
    standalone = "How long is the warranty on the X300 kettle?"
    traces.span("retrieve", {"openinference.span.kind": "RETRIEVER", "input.value": standalone,
                             "retrieval.documents.0.document.content": DOCS[0]}, parent=root, start=1, end=2)
    traces.span("llm", {"openinference.span.kind": "LLM", "llm.model_name": "m",
                        "llm.input_messages.0.message.role": "system",
                        "llm.input_messages.0.message.content": f"Context: {DOCS[0]}",
                        "llm.input_messages.1.message.role": "user", "llm.input_messages.1.message.content": QUESTION,
                        "llm.input_messages.2.message.role": "assistant",
                        "llm.input_messages.2.message.content": ANSWER,
                        "llm.input_messages.3.message.role": "user",
                        "llm.input_messages.3.message.content": "and the X300?",
                        "llm.output_messages.0.message.content": "Also two."}, parent=root, start=3, end=4)
    traces.close(root, 5)
    [captured] = extract_samples(traces.finished())
    assert captured.sample.query == standalone
    assert captured.sample.metadata["query_source"] == "retrieval (standalone form of a follow-up)"
    assert captured.session_id == "s-7"


def test_content_recorded_on_span_events_is_read(traces: Traces) -> None:
    """Older GenAI conventions: the tool result on an event, the prompt and completion as events, and
    per-message events; explain says events were read."""
    root = traces.open("agent", {"gen_ai.operation.name": "invoke_agent"})
    call = traces.span("execute_tool search", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"},
                       parent=root, start=1, end=2,
                       events=[("gen_ai.client.inference.operation.details",
                                {"gen_ai.tool.call.arguments": json.dumps({"query": REWRITE}),
                                 "gen_ai.tool.call.result": json.dumps(DOCS)})])
    answer = traces.span("chat", {"gen_ai.operation.name": "chat"}, parent=root, start=3, end=4, events=[
        ("gen_ai.system.message", {"content": "Answer from the tool results."}),
        ("gen_ai.user.message", {"content": QUESTION}),
        ("gen_ai.tool.message", {"content": json.dumps(DOCS)}),
        ("gen_ai.choice", {"message": json.dumps({"role": "assistant", "content": ANSWER}), "index": 0}),
    ])
    older = traces.span("chat", {"gen_ai.operation.name": "chat"}, parent=root, start=5, end=6, events=[
        ("gen_ai.content.prompt", {"gen_ai.prompt": json.dumps([{"role": "user", "content": QUESTION}])}),
        ("gen_ai.content.completion", {"gen_ai.completion": "Still two years."}),
    ])
    traces.close(root, 7)
    spans = traces.finished()
    assert span_role(next(s for s in spans if s.name == "execute_tool search")) == "retrieval"
    stats = CaptureStats()
    [captured] = extract_samples(spans, stats=stats)
    assert (captured.retrieval_span_id, captured.generation_span_id) == (sid(call), sid(answer))
    assert captured.pairing == "contexts"
    assert (captured.sample.query, captured.sample.response) == (QUESTION, ANSWER)
    assert captured.sample.metadata["content_from_events"] is True
    assert not stats.counts
    assert "content read from span events" in render(explain(spans))
    from ragtrace.capture import readers
    older_span = next(s for s in spans if s.context is not None and s.context.span_id == sid(older))
    assert readers.read_response(older_span, "genai", CaptureLimits(), set()) == "Still two years."
    assert readers.read_user_message(older_span, "genai", CaptureLimits(), set()) == QUESTION


def test_several_searches_in_one_agent_run_each_get_a_sample_and_share_the_agent(traces: Traces) -> None:
    agent = traces.open("invoke_agent agent", {"gen_ai.operation.name": "invoke_agent"})
    calls = []
    for i, text in enumerate(DOCS):
        calls.append(traces.span("execute_tool search", {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
            "gen_ai.tool.call.arguments": json.dumps({"query": f"try {i}"}),
            "gen_ai.tool.call.result": json.dumps([text])}, parent=agent, start=1 + 2 * i, end=2 + 2 * i))
    results = [{"role": "tool", "parts": [{"type": "tool_call_response", "result": [t]}]} for t in DOCS]
    _genai_chat(traces, agent, 10, [_user(QUESTION), *results], ANSWER)
    traces.close(agent, 12)
    samples = extract_samples(traces.finished())
    assert [c.retrieval_span_id for c in samples] == [sid(c) for c in calls]
    assert [c.sample.metadata["retrieval_query"] for c in samples] == ["try 0", "try 1", "try 2"]
    assert {c.sample.query for c in samples} == {QUESTION}
    assert {c.agent_span_id for c in samples} == {sid(agent)}


# --- fuzz: the tool and event readers turn any input into documents, a counted Skip, or nothing ---------

_leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
_json = st.recursive(_leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.sampled_from(["content", "text", "page_content", "role", "type", "documents", "raw_output", "tool_call_id",
                     "kwargs", "node", "id_", "query", "results", "output", "message"]) | st.text(max_size=5),
    inner, max_size=4), max_leaves=8)
_results = (_json.map(json.dumps) | _json.map(repr) | st.text(max_size=40)
            | st.sampled_from(["[", "['a'", "[{'content': 'x'}]", "{'documents': [", "[" * 200, "(1,)*9**9"]))


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(result=_results, arguments=_results | st.none(), named=st.booleans(), on_event=st.booleans())
@example(result=json.dumps([{"type": [], "text": "x"}]), arguments=None, named=False, on_event=False)  # unhashable
def test_fuzz_tool_results_never_crash(traces: Traces, result: str, arguments: str | None, named: bool,
                                       on_event: bool) -> None:
    from ragtrace.capture import readers, tools

    traces.exporter.clear()
    attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}
    payload = {"gen_ai.tool.call.result": result}
    if arguments is not None:
        payload["gen_ai.tool.call.arguments"] = arguments
    events = [("gen_ai.choice", payload), ("gen_ai.user.message", {"content": result})] if on_event else []
    if not on_event:
        attrs.update(payload)
    traces.span("execute_tool search", attrs, events=events)
    [span] = traces.finished()
    rules = CaptureRules(retrieval_tools=("search",) if named else ())
    limits = CaptureLimits(max_documents=3, max_json_chars=1_000)
    notes: set[str] = set()
    try:
        reading = tools.read(span, span.attributes or {}, "genai_tool", rules, limits, notes)
    except Skip as skip:
        assert skip.reason in ("tool_result_not_documents", "tool_result_not_recorded")
    else:
        assert len(reading.documents) <= 3 and all(isinstance(d.content, str) for d in reading.documents)
    assert isinstance(tools.is_retrieval(span, span.attributes or {}, "genai", rules), bool)
    user = readers.read_user_message(span, "genai", limits, notes)
    assert user is None or isinstance(user, str)
    assert isinstance(readers.read_response(span, "genai", limits, notes), str)
    stats = CaptureStats()
    extract_samples([span], stats=stats, rules=rules, limits=limits)
    assert "reader_error" not in stats.counts and "capture_error" not in stats.counts


def test_a_graph_node_carrying_documents_gives_way_to_the_retriever_below_it(traces: Traces) -> None:
    """LangGraph's rewrite -> retrieve -> generate under OpenLLMetry 0.62: the node `execute_task retrieve`
    returns a state update holding the documents; the retriever callback under it is the retrieval."""
    def lc_doc(text: str) -> dict[str, Any]:
        return {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "document", "Document"],
                "kwargs": {"page_content": text, "metadata": {}}}

    root = traces.open("invoke_agent LangGraph", {"gen_ai.operation.name": "invoke_agent"})
    node = traces.open("execute_task retrieve", {
        "gen_ai.operation.name": "execute_task", "traceloop.span.kind": "task", "traceloop.entity.name": "retrieve",
        "traceloop.entity.input": json.dumps({"inputs": {"question": QUESTION, "search_query": REWRITE}}),
        "traceloop.entity.output": json.dumps({"outputs": {"documents": [lc_doc(d) for d in DOCS]}})},
        parent=root, start=1)
    retriever = traces.span("vector_db_retrieve Handbook", {
        "gen_ai.operation.name": "vector_db_retrieve", "traceloop.span.kind": "task",
        "traceloop.entity.name": "Handbook", "traceloop.entity.input": json.dumps({"query": REWRITE}),
        "traceloop.entity.output": json.dumps({"documents": [{"page_content": d, "metadata": {}} for d in DOCS]})},
        parent=node, start=2, end=3)
    traces.close(node, 4)
    chat = traces.span("ChatOpenAI.chat", {
        "gen_ai.operation.name": "chat", "gen_ai.system_instructions": json.dumps(
            [{"type": "text", "content": "Answer from the context.\n" + "\n".join(DOCS)}]),
        "gen_ai.input.messages": json.dumps([_user(QUESTION)]),
        "gen_ai.output.messages": genai_messages("assistant", ANSWER)}, parent=root, start=5, end=6)
    traces.close(root, 7)
    stats = CaptureStats()
    [captured] = extract_samples(traces.finished(), stats=stats)
    assert (captured.retrieval_span_id, captured.generation_span_id) == (sid(retriever), sid(chat))
    assert (captured.sample.query, captured.sample.metadata["retrieval_query"]) == (QUESTION, REWRITE)
    assert stats.counts == {"nested_retrieval": 1}
