import asyncio
import json

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragtrace.instrument import generation_span, retrieval_span, traced_generation, traced_retrieval
from ragtrace.scoring import Document


def make_tracer() -> tuple[InMemorySpanExporter, TracerProvider]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, provider


def test_context_managers_write_genai_semconv_attributes() -> None:
    exporter, provider = make_tracer()
    tracer = provider.get_tracer("t")
    with retrieval_span("why?", data_source="kb", tracer=tracer) as r:
        r.record([Document(id="a", score=0.9, content="first"), "second", {"page_content": "third", "id": "c"}])
    with generation_span(model="m", query="why?", tracer=tracer) as g:
        g.record("because")
    retrieval, generation = exporter.get_finished_spans()
    assert retrieval.name == "retrieval kb"
    assert retrieval.attributes["gen_ai.operation.name"] == "retrieval"
    assert retrieval.attributes["gen_ai.retrieval.query.text"] == "why?"
    docs = json.loads(retrieval.attributes["gen_ai.retrieval.documents"])
    assert docs == [
        {"content": "first", "id": "a", "score": 0.9},
        {"id": "1", "content": "second"},
        {"id": "c", "content": "third"},
    ]
    assert generation.attributes["gen_ai.operation.name"] == "chat"
    out = json.loads(generation.attributes["gen_ai.output.messages"])
    assert out[0]["parts"][0]["content"] == "because"
    assert json.loads(generation.attributes["gen_ai.input.messages"])[0]["parts"][0]["content"] == "why?"


def test_decorators_sync_and_async() -> None:
    exporter, provider = make_tracer()
    tracer = provider.get_tracer("t")

    @traced_retrieval(data_source="kb", tracer=tracer)
    def search(query: str) -> list[str]:
        return [f"doc about {query}"]

    @traced_generation(model="m", tracer=tracer)
    async def answer(query: str, docs: list[str]) -> str:
        await asyncio.sleep(0)
        return docs[0].upper()

    @traced_retrieval(tracer=tracer)
    async def asearch(*, query: str) -> list[str]:
        return ["x"]

    docs = search("tides")
    assert asyncio.run(answer("tides", docs)) == "DOC ABOUT TIDES"
    assert asyncio.run(asearch(query="q2")) == ["x"]
    spans = exporter.get_finished_spans()
    assert [s.attributes["gen_ai.operation.name"] for s in spans] == ["retrieval", "chat", "retrieval"]
    assert json.loads(spans[0].attributes["gen_ai.retrieval.documents"])[0]["content"] == "doc about tides"
    assert spans[2].attributes["gen_ai.retrieval.query.text"] == "q2"
