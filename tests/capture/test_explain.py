"""capture.explain: the verdicts put into words, on real SDK spans (the producer files: tests/interop)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ragtrace import capture
from ragtrace.capture import extract_samples
from ragtrace.capture.explain import REASONS, explain, in_words, render
from tests.capture.conftest import Traces, genai_messages, sid


def test_every_span_gets_a_verdict_and_the_report_matches_extract_samples(traces: Traces) -> None:
    root = traces.open("query")
    outer = traces.open("retrieve", {"openinference.span.kind": "RETRIEVER", "input.value": "Which port is used?",
                                     "retrieval.documents.0.document.content": "The service listens on 8080."},
                        parent=root, start=1)
    traces.span("_retrieve", {"openinference.span.kind": "RETRIEVER",
                              "input.value": json.dumps({"query_bundle": {"query_str": "Which port is used?"}})},
                parent=outer, start=1, end=2)
    traces.close(outer, 2)
    traces.span("PromptBuilder.run", {"openinference.span.kind": "LLM", "llm.prompt_template.template": "{x}",
                                      "output.value": "rendered"}, parent=root, start=3, end=4)
    predict = traces.open("predict", {"openinference.span.kind": "LLM", "llm.model_name": "m",
                                      "output.value": "8080"}, parent=root, start=5)
    chat = traces.span("chat", {"gen_ai.operation.name": "chat",
                                "gen_ai.input.messages": genai_messages("user", "The service listens on 8080. Port?"),
                                "gen_ai.output.messages": genai_messages("assistant", "8080")},
                       parent=predict, start=5, end=6)
    traces.close(predict, 7)
    traces.close(root, 8)
    spans = traces.finished()
    [report] = explain(spans)
    assert report.samples == extract_samples(spans)
    verdicts = {v.name: v for v in report.spans}
    assert set(verdicts) == {"query", "retrieve", "_retrieve", "PromptBuilder.run", "predict", "chat"}
    assert verdicts["retrieve"].verdict == "sample 1"
    assert verdicts["_retrieve"].verdict.startswith("a nested layer of the same retrieval, scored once on 'retrieve'")
    assert verdicts["PromptBuilder.run"].role is None
    assert "built a prompt" in verdicts["PromptBuilder.run"].verdict
    assert verdicts["predict"].verdict.startswith("wraps the model call 'chat'")
    assert (verdicts["chat"].role, verdicts["chat"].convention) == ("generation", "genai")
    assert "by contexts (its input quotes 1 of 1 retrieved texts)" in verdicts["chat"].verdict
    assert report.counts == {"nested_retrieval": 1}
    text = render([report])
    assert f"'chat' [{sid(chat):016x}] generation (genai): paired with retrieval 'retrieve'" in text
    assert "query (retrieval): Which port is used?" in text
    assert "response: 8080" in text
    assert "counted nested_retrieval x1" in text


def test_long_texts_are_cut_for_reading(traces: Traces) -> None:
    traces.span("r", {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": "q" * 500,
                      "gen_ai.retrieval.documents": json.dumps(["x" * 500])})
    text = render(explain(traces.finished()), max_chars=40)
    assert "q" * 39 + "…" in text and "q" * 41 not in text


def test_every_counted_reason_has_words() -> None:
    """Each reason the capture code counts (`notes.add`, `Skip`, `count`, `cut`) is in REASONS."""
    source = "\n".join(p.read_text() for p in Path(capture.__file__).parent.glob("*.py"))
    counted = set(re.findall(r'(?:notes\.add|Skip|\.count)\("([a-z_]+)"\)', source))
    counted |= set(re.findall(r'cut\([^()]*, "([a-z_]+)"\)', source))
    assert {"no_query", "no_documents", "nested_retrieval", "context_truncated"} <= counted
    assert counted - set(REASONS) == set()
    assert in_words("no_query").startswith("no query")
    assert in_words("something_new") == "something new"


def test_a_plain_string_as_output_messages_is_shown_the_shape_to_write(traces: Traces) -> None:
    """Issue 30, item 12: a plain string in gen_ai.output.messages was dropped as 'invalid messages json'
    with no example of what to write."""
    root = traces.open("rag")
    traces.span("retrieval", {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": "q?",
                              "gen_ai.retrieval.documents": '[{"content": "Olympus Mons is on Mars."}]'},
                parent=root, start=1, end=2)
    traces.span("chat", {"gen_ai.operation.name": "chat", "gen_ai.output.messages": "Olympus Mons."},
                parent=root, start=3, end=4)
    traces.close(root, 5)
    text = render(explain(traces.finished()))
    assert "gen_ai.output.messages is not a JSON list of messages" in text, text
    assert '[{"role": "assistant", "parts": [{"type": "text", "content": "the answer"}]}]' in text
