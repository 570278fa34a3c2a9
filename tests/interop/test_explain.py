"""`ragtrace explain` on a file exported from each real producer: the instrumented example app runs
through a plain TracerProvider, its spans are written as OTLP JSON lines (what the collector's file
exporter writes), and the command says how each span was read and which sample it built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragtrace.cli import main
from tests.interop.conftest import load_example

# example, the modules it needs, run() options, the retrieval scored, the generation paired, other verdicts
PRODUCERS: dict[str, tuple[str, tuple[str, ...], dict[str, Any], str, str, tuple[str, ...]]] = {
    "langchain-openinference": (
        "langchain_openinference", ("langchain_core", "openinference.instrumentation.langchain"), {},
        "VectorStoreRetriever", "FakeListChatModel", ()),
    "langchain-openllmetry": (
        "langchain_openllmetry", ("langchain_core", "opentelemetry.instrumentation.langchain"), {},
        "vector_db_retrieve VectorStoreRetriever", "FakeListChatModel.chat", ("openllmetry task: not a retrieval",)),
    "openai-v2": (
        "openai_retrieval_helper", ("openai", "opentelemetry.instrumentation.openai_v2"), {},
        "retrieval encyclopedia", "chat local-model", ()),
    "chromadb-openllmetry": (
        "chromadb_openllmetry", ("chromadb", "opentelemetry.instrumentation.chromadb"), {},
        "chroma.query", "chat templated", ()),
    "llamaindex-openinference": (
        "llamaindex_openinference", ("llama_index.core", "openinference.instrumentation.llama_index"), {},
        "VectorIndexRetriever.retrieve", "LiteLLM.chat",
        ("a nested layer of the same retrieval, scored once on 'VectorIndexRetriever.retrieve'",
         "wraps the model call 'LiteLLM.chat'")),
    "llamaindex-openllmetry": (
        "llamaindex_openllmetry",
        ("llama_index.core", "llama_index.llms.litellm", "opentelemetry.instrumentation.llamaindex"), {},
        "VectorIndexRetriever.task", "LiteLLM.task",
        ("a nested layer of the same retrieval, scored once on 'VectorIndexRetriever.task'",)),
    "haystack-prompt-builder": (
        "haystack_openinference", ("haystack", "openinference.instrumentation.haystack"), {"shape": "prompt"},
        "InMemoryBM25Retriever.run", "OpenAIChatGenerator.run",
        ("'PromptBuilder.run' [", "tagged LLM (openinference) but built a prompt")),
    "haystack-chat-prompt-builder": (
        "haystack_openinference", ("haystack", "openinference.instrumentation.haystack"), {"shape": "chat"},
        "InMemoryBM25Retriever.run", "OpenAIChatGenerator.run", ("'ChatPromptBuilder.run' [",)),
}


def export_file(example: Any, path: Path, **options: Any) -> list[ReadableSpan]:
    """Run the example app with no ragtrace in the pipeline; write its spans as OTLP JSON lines."""
    provider = TracerProvider(resource=Resource.create({"service.name": "explain-test"}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    try:
        example.run(provider, **options)
        spans = list(memory.get_finished_spans())
    finally:
        provider.shutdown()
    path.write_text(json_format.MessageToJson(encode_spans(spans), indent=None) + "\n")
    return spans


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
def test_explain_a_file_exported_from_each_producer(
    producer: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, requires, options, retrieval, generation, verdicts = PRODUCERS[producer]
    example = load_example(name, *requires)
    exported = tmp_path / f"{producer}.jsonl"
    spans = export_file(example, exported, **options)
    assert main(["explain", str(exported)]) == 0
    out = capsys.readouterr().out
    traces = {s.context.trace_id for s in spans if s.context is not None}
    assert out.count("1 sample(s)") == 1
    assert f"sample 1: retrieval {retrieval!r}" in out
    assert f"generation: {generation!r}, paired by " in out
    assert f"paired with retrieval {retrieval!r} by " in out
    assert f"query (retrieval): {example.QUESTION}" in out or f"query (generation): {example.QUESTION}" in out
    for verdict in verdicts:
        assert verdict in out
    assert f"{len(traces)} trace(s), 1 with samples, {len(traces) - 1} without" in out
