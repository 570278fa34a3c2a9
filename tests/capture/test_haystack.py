"""Haystack's own tracing (`haystack.*` keys, as opentelemetry-haystack records Haystack 3): spans built with
the real OTel SDK in the shapes the producer tests in tests/interop/test_agent_producers.py receive."""

from __future__ import annotations

import json
from typing import Any

from ragtrace.capture import CaptureRules, CaptureStats, capture_start, extract_samples, span_role
from ragtrace.capture.explain import explain, render
from tests.capture.conftest import Traces, sid

QUESTION = "How long is the warranty on the X200 kettle?"
REWRITE = "X200 kettle warranty"
DOCS = ["The X200 kettle has a two-year warranty.", "The X200 kettle boils a litre in three minutes."]
ANSWER = "Two years."


def _message(role: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "meta": {}, "name": None, "content": list(parts)}


def _documents(texts: list[str]) -> str:
    return json.dumps({"documents": [{"id": f"d{i}", "content": t, "blob": None, "score": 2.0 - i,
                                      "embedding": None} for i, t in enumerate(texts)]})


def _component(traces: Traces, kind: str, inputs: Any, output: Any, parent: Any, start: int) -> Any:
    attrs = {"haystack.component.name": kind.lower(), "haystack.component.type": kind,
             "haystack.component.visits": 1}
    if inputs is not None:
        attrs["haystack.component.input"] = json.dumps(inputs)
    if output is not None:
        attrs["haystack.component.output"] = output if isinstance(output, str) else json.dumps(output)
    return traces.span("haystack.component.run", attrs, parent=parent, start=start, end=start + 1)


def _pipeline(traces: Traces, *, content: bool = True, generator: str = "OpenAIChatGenerator") -> dict[str, Any]:
    root = traces.open("haystack.pipeline.run", {
        "haystack.pipeline.input_data": json.dumps({"retriever": {"query": QUESTION},
                                                    "prompt": {"question": QUESTION}})})
    prompt = [_message("system", {"text": "Context:\n" + "\n".join(DOCS)}), _message("user", {"text": QUESTION})]
    replies = ([ANSWER] if generator.endswith("Generator") and not generator.endswith("ChatGenerator")
               else [_message("assistant", {"text": ANSWER})])
    spans = {
        "retriever": _component(traces, "InMemoryBM25Retriever", {"query": QUESTION, "top_k": None},
                                _documents(DOCS) if content else None, root, 1),
        "prompt": _component(traces, "ChatPromptBuilder", {"documents": json.loads(_documents(DOCS))["documents"],
                                                           "question": QUESTION}, {"prompt": prompt}, root, 3),
        "llm": _component(traces, generator, {"messages": prompt, "tools": None},
                          {"replies": replies} if content else None, root, 5),
        "root": root,
    }
    traces.close(root, 9)
    return spans


def test_a_pipeline_s_retriever_and_generator_components(traces: Traces) -> None:
    spans = _pipeline(traces)
    finished = traces.finished()
    roles = {s.context.span_id: span_role(s) for s in finished}
    assert roles[sid(spans["retriever"])] == "retrieval" and roles[sid(spans["llm"])] == "generation"
    assert roles[sid(spans["prompt"])] is None  # it holds the documents too, but only passes them on
    assert capture_start(next(s for s in finished if s.context.span_id == sid(spans["retriever"]))) == "retrieval"
    [captured] = extract_samples(finished)
    assert (captured.convention, captured.retriever, captured.pairing) == ("haystack", "InMemoryBM25Retriever",
                                                                           "contexts")
    assert captured.generation_span_id == sid(spans["llm"])
    sample = captured.sample
    assert (sample.query, list(sample.context_texts), sample.response) == (QUESTION, DOCS, ANSWER)
    assert [d.id for d in sample.contexts] == ["d0", "d1"] and sample.contexts[0].score == 2.0


def test_a_text_generator_s_replies_are_strings(traces: Traces) -> None:
    _pipeline(traces, generator="HuggingFaceLocalGenerator")
    [captured] = extract_samples(traces.finished())
    assert captured.sample.response == ANSWER


def test_content_tracing_off_is_counted_and_explained(traces: Traces) -> None:
    """Without HAYSTACK_CONTENT_TRACING_ENABLED the retriever is still recognised, and why nothing is scored
    is counted under its own reason."""
    _pipeline(traces, content=False)
    stats = CaptureStats()
    assert extract_samples(traces.finished(), stats=stats) == []
    assert stats.counts["haystack_content_not_traced"] == 1
    assert "haystack_content_not_traced" in render(explain(traces.finished()))


def _agent(traces: Traces, tool: str, result: str) -> dict[str, Any]:
    """Haystack 3's Agent: agent.run > step > (step.llm calling the tool, step.tool), step > step.llm answering."""
    user = _message("user", {"text": QUESTION})
    call = _message("assistant", {"tool_call": {"tool_name": tool, "arguments": {"query": REWRITE}, "id": "c1"}})
    run = traces.open("haystack.agent.run", {"haystack.agent.max_steps": 100,
                                             "haystack.agent.input": json.dumps({"messages": [user]})})
    step = traces.open("haystack.agent.step", {"haystack.agent.step": 0}, parent=run, start=1)
    traces.span("haystack.agent.step.llm", {
        "haystack.agent.step.llm.input": json.dumps({"messages": [user], "tools": [{"type": "ComponentTool"}]}),
        "haystack.agent.step.llm.output": json.dumps({"replies": [call]})}, parent=step, start=1, end=2)
    tool_span = traces.span("haystack.agent.step.tool", {
        "haystack.tool.name": tool, "haystack.agent.step.tool.input": json.dumps({"query": REWRITE}),
        "haystack.agent.step.tool.output": result}, parent=step, start=3, end=4)
    traces.close(step, 4)
    step = traces.open("haystack.agent.step", {"haystack.agent.step": 1}, parent=run, start=5)
    told = _message("tool", {"tool_call_result": {"result": result, "origin": {"tool_name": tool}, "error": False}})
    answer = traces.span("haystack.agent.step.llm", {
        "haystack.agent.step.llm.input": json.dumps({"messages": [user, call, told]}),
        "haystack.agent.step.llm.output": json.dumps({"replies": [_message("assistant", {"text": ANSWER})]})},
        parent=step, start=5, end=6)
    traces.close(step, 6)
    traces.close(run, 7)
    return {"run": run, "tool": tool_span, "answer": answer}


def test_an_agent_s_tool_call_returning_documents_is_a_retrieval(traces: Traces) -> None:
    spans = _agent(traces, "search_handbook", _documents(DOCS))
    [captured] = extract_samples(traces.finished())
    assert captured.retrieval_span_id == sid(spans["tool"])
    assert captured.generation_span_id == sid(spans["answer"])
    assert captured.agent_span_id == sid(spans["run"])
    sample = captured.sample
    assert (sample.query, list(sample.context_texts), sample.response) == (QUESTION, DOCS, ANSWER)
    assert sample.metadata["retrieval_query"] == REWRITE
    assert sample.metadata["taken_because"] == "tool 'search_handbook': its result is a list of documents"


def test_an_agent_s_other_tools_are_not_retrievals_unless_named(traces: Traces) -> None:
    _agent(traces, "calculator", json.dumps({"result": 42}))
    assert extract_samples(traces.finished()) == []
    said = render(explain(traces.finished()))
    assert "tool 'calculator' (haystack): not a retrieval" in said
    traces.exporter.clear()
    _agent(traces, "lookup", "The X200 kettle has a two-year warranty.\n\nReturns within 30 days.")
    rules = CaptureRules(retrieval_tools=("lookup",))
    [captured] = extract_samples(traces.finished(), rules=rules)
    assert list(captured.sample.context_texts) == ["The X200 kettle has a two-year warranty.",
                                                   "Returns within 30 days."]
