"""An agent that searches through a tool, several times, in a conversation: each search is scored on its own
span, the agent span gets the roll-up, and the conversation id travels with the scores (both workers)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import pytest
from opentelemetry.trace import Tracer, set_span_in_context

from ragtrace.capture import CaptureRules
from ragtrace.live.settings import RagtraceSettings
from tests.live.fakes import Rig, output_messages, rag_trace
from tests.live.test_processor import wait_until

QUESTION = "fast: which doc is good?"


def agent_trace(tracer: Tracer, results: Sequence[Sequence[str]], conversation: str = "conv-9") -> int:
    """invoke_agent > (execute_tool search)* > chat quoting every result; returns the agent span id."""
    common = {"gen_ai.conversation.id": conversation}
    agent = tracer.start_span("invoke_agent support", attributes={"gen_ai.operation.name": "invoke_agent", **common})
    ctx = set_span_in_context(agent)
    for i, texts in enumerate(results):
        with tracer.start_as_current_span("execute_tool search", context=ctx, attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
            "gen_ai.tool.call.arguments": json.dumps({"query": f"try {i}"}),
            "gen_ai.tool.call.result": json.dumps(list(texts)), **common}):
            pass
    messages = [{"role": "user", "parts": [{"type": "text", "content": QUESTION}]}] + [
        {"role": "tool", "parts": [{"type": "tool_call_response", "result": list(t)}]} for t in results]
    with tracer.start_as_current_span("chat", context=ctx, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(messages),
        "gen_ai.output.messages": output_messages("the good one"), **common}):
        pass
    agent.end()
    return agent.get_span_context().span_id


@pytest.mark.parametrize("worker", ["thread", "process"])
def test_each_search_is_scored_and_the_agent_gets_the_roll_up(rig: Callable[..., Rig], worker: str) -> None:
    r = rig(worker=worker)
    results = [["bad doc one long enough"], ["bad doc two long enough"], ["good doc three long enough"]]
    agent_id = agent_trace(r.tracer, results)
    assert wait_until(lambda: len(r.out.spans) == 5)
    tools = [s for s in r.out.spans if s.name == "execute_tool search"]
    assert [(s.attributes or {}).get("ragtrace.context_precision.score") for s in tools] == [0.0, 0.0, 1.0]
    for i, span in enumerate(tools):
        attrs = span.attributes or {}
        assert attrs["ragtrace.session.id"] == "conv-9"
        assert attrs["ragtrace.retrieval.query"] == f"try {i}"
        assert attrs["ragtrace.query.source"] == "generation"
        events = [e for e in span.events if e.name == "gen_ai.evaluation.result"]
        assert events and all((e.attributes or {})["gen_ai.conversation.id"] == "conv-9" for e in events)
    [agent] = [s for s in r.out.spans if s.context is not None and s.context.span_id == agent_id]
    attrs = agent.attributes or {}
    assert attrs["ragtrace.agent.retrievals"] == 3
    assert attrs["ragtrace.agent.context_precision.max"] == 1.0
    assert attrs["ragtrace.agent.context_precision.mean"] == 0.33
    assert attrs["ragtrace.agent.context_precision.scored"] == 3
    assert attrs["ragtrace.agent.context_precision.label"] == "pass"
    assert not any(k.endswith(".score") for k in attrs)  # the roll-up is no sample's score
    [chat] = r.out.by_name("chat")
    assert not any(k.startswith("ragtrace.") for k in chat.attributes or {})


def test_an_agent_that_never_found_the_evidence_fails_its_roll_up(rig: Callable[..., Rig]) -> None:
    r = rig()
    agent_id = agent_trace(r.tracer, [["bad doc one long enough"], ["bad doc two long enough"]])
    assert wait_until(lambda: len(r.out.spans) == 4)
    [agent] = [s for s in r.out.spans if s.context is not None and s.context.span_id == agent_id]
    attrs = agent.attributes or {}
    assert (attrs["ragtrace.agent.retrievals"], attrs["ragtrace.agent.context_precision.label"]) == (2, "fail")


def test_capture_rules_reach_the_live_pipeline(rig: Callable[..., Rig]) -> None:
    """A tool named in retrieval_tools is held and scored; excluded, its trace goes on unscored."""
    r = rig(capture_rules=CaptureRules(retrieval_tools=("!search",)))
    agent_trace(r.tracer, [["good doc three long enough"]])
    assert wait_until(lambda: len(r.out.spans) == 3)
    assert r.flush()
    assert not any(k.startswith("ragtrace.") for s in r.out.spans for k in s.attributes or {})


def test_settings_read_the_capture_rules_from_the_environment() -> None:
    settings = RagtraceSettings.from_env({
        "RAGTRACE_RETRIEVAL_TOOLS": "search_handbook, kb_*, !list_files",
        "RAGTRACE_TOOL_SEPARATOR": "\\n", "RAGTRACE_QUERY_SOURCE": "retrieval"})
    rules = settings.processor_options()["capture_rules"]
    assert rules == CaptureRules(retrieval_tools=("search_handbook", "kb_*", "!list_files"), tool_separator="\n",
                                 query_source="retrieval")
    assert [rules.tool_named(name) for name in ("kb_docs", "list_files", "calc")] == [True, False, None]
    assert RagtraceSettings.from_env({}).capture_rules() == CaptureRules()
    with pytest.raises(ValueError, match="RAGTRACE_QUERY_SOURCE"):
        RagtraceSettings.from_env({"RAGTRACE_QUERY_SOURCE": "both"})


@pytest.mark.parametrize("worker", ["thread", "process"])
def test_searches_without_an_agent_span_roll_up_on_the_root_which_waits_for_it(
    rig: Callable[..., Rig], worker: str
) -> None:
    """Only the spans a score or a roll-up may be written on wait for the scores: here the two searches and
    the root above them; the chat spans and the plain step go on as they end."""
    r = rig(worker=worker)
    ids = rag_trace(r.tracer, retrievals=2)  # root, (retrieve, chat) x 2, step 0: one question
    assert wait_until(lambda: len(r.out.spans) == len(ids))
    [root] = r.out.by_name("rag request")
    assert (root.attributes or {})["ragtrace.agent.retrievals"] == 2
    assert [(s.attributes or {})["ragtrace.eval.status"] for s in r.out.by_name("retrieve")] == ["scored"] * 2
    assert r.exported_once(ids)
    waited = [s.name for s in r.out.spans[-3:]]  # exported after the scores, at the release
    assert sorted(waited) == ["rag request", "retrieve", "retrieve"]
