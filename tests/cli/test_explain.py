"""`ragtrace explain FILE`: why a trace was not scored, one trace by id, bad files (the producers' files:
tests/interop/test_explain.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import json_format
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragtrace.cli import main


def _export(path: Path) -> list[int]:
    """Two traces: a retrieval whose documents are broken JSON, and nothing RAG. Returns their trace ids."""
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("rag", context=Context()) as rag:  # a root whatever else is current
        with tracer.start_as_current_span("retrieve", attributes={"gen_ai.operation.name": "retrieval",
                                                                  "gen_ai.retrieval.query.text": "Which port?",
                                                                  "gen_ai.retrieval.documents": "[{broken"}):
            pass
        with tracer.start_as_current_span("llm", attributes={"openinference.span.kind": "LLM",
                                                             "llm.output_messages.0.message.content": "8080"}):
            pass
    with tracer.start_as_current_span("health check", context=Context()) as health:
        pass
    path.write_text(json_format.MessageToJson(encode_spans(memory.get_finished_spans()), indent=None) + "\n")
    return [rag.get_span_context().trace_id, health.get_span_context().trace_id]


def test_explain_says_why_a_trace_was_not_scored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trace whose only retrieval's documents are broken JSON, and one with nothing RAG in it."""
    exported = tmp_path / "unscored.jsonl"
    _export(exported)
    assert main(["explain", str(exported)]) == 0
    out = capsys.readouterr().out
    assert ("why not scored: every retrieval span was passed over: "
            "a retrieval's documents attribute is not valid JSON") in out
    assert "'retrieve' [" in out and "retrieval (genai): passed over (invalid_documents_json)" in out
    assert "why not scored: no span is a retrieval" in out
    assert "2 trace(s), 0 with samples, 2 without" in out


def test_explain_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(tmp_path / "nope.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_one_trace_by_the_start_of_its_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exported = tmp_path / "two.jsonl"
    rag, _ = _export(exported)
    assert main(["explain", str(exported), "--trace", f"{rag:032x}"[:10]]) == 0
    out = capsys.readouterr().out
    assert out.count("trace ") == 1 and "'retrieve' [" in out and "health check" not in out
    assert main(["explain", str(exported), "--trace", "ffffffffffffffffffffffffffffffff0"]) == 2
    assert "no trace id starting with" in capsys.readouterr().err
