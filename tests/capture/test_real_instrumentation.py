"""The shapes real instrumentation libraries write, read back: a LangChain RAG chain (fake retriever and
fake chat model, no network) traced by OpenInference and by OpenLLMetry.

Skipped where the instrumentation packages are not installed (they are not ragtrace dependencies).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragtrace.capture import CaptureStats, extract_samples, span_role

pytest.importorskip("langchain_core")

QUESTION = "How long is the warranty?"
CONTEXTS = ["The warranty lasts two years.", "Returns are accepted within 30 days."]


def _run_chain(instrumentor: Any) -> list[ReadableSpan]:
    """Instrument, run a retriever | prompt | chat model chain once, uninstrument; the finished spans."""
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnablePassthrough

    class Handbook(BaseRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            return [Document(page_content=text, metadata={"source": f"{i}.md"}) for i, text in enumerate(CONTEXTS)]

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor.instrument(tracer_provider=provider)
    try:
        prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {question}")
        chain = (
            {"context": Handbook(), "question": RunnablePassthrough()}
            | prompt
            | FakeListChatModel(responses=["Two years."])
            | StrOutputParser()
        )
        assert chain.invoke(QUESTION) == "Two years."
    finally:
        instrumentor.uninstrument()
    return list(exporter.get_finished_spans())


@pytest.fixture
def openinference_spans() -> Iterator[list[ReadableSpan]]:
    module = pytest.importorskip("openinference.instrumentation.langchain")
    yield _run_chain(module.LangChainInstrumentor())


@pytest.fixture
def openllmetry_spans() -> Iterator[list[ReadableSpan]]:
    module = pytest.importorskip("opentelemetry.instrumentation.langchain")
    yield _run_chain(module.LangchainInstrumentor())


def _by_name(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    return next(s for s in spans if s.name == name)


def test_openinference_langchain_chain(openinference_spans: list[ReadableSpan]) -> None:
    spans = openinference_spans
    retriever, llm = _by_name(spans, "Handbook"), _by_name(spans, "FakeListChatModel")
    assert (span_role(retriever), span_role(llm)) == ("retrieval", "generation")
    stats = CaptureStats()
    [captured] = extract_samples(spans, stats=stats)
    assert captured.sample.context_texts == CONTEXTS
    assert captured.sample.query == QUESTION
    assert captured.sample.response == "Two years."
    assert captured.convention == "openinference"
    assert captured.retriever == "Handbook"
    assert retriever.context is not None and llm.context is not None
    ids = (retriever.context.span_id, llm.context.span_id)
    assert (captured.retrieval_span_id, captured.generation_span_id) == ids
    assert not stats.counts


def test_openllmetry_langchain_chain(openllmetry_spans: list[ReadableSpan]) -> None:
    spans = openllmetry_spans
    retriever = next(s for s in spans if (s.attributes or {}).get("traceloop.entity.name") == "Handbook")
    chat = next(s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "chat")
    assert (span_role(retriever), span_role(chat)) == ("retrieval", "generation")
    stats = CaptureStats()
    [captured] = extract_samples(spans, stats=stats)
    assert captured.sample.context_texts == CONTEXTS
    assert captured.sample.query == QUESTION
    assert captured.sample.response == "Two years."
    assert captured.convention == "openllmetry"
    assert captured.retriever == "Handbook"
    assert retriever.context is not None and chat.context is not None
    ids = (retriever.context.span_id, chat.context.span_id)
    assert (captured.retrieval_span_id, captured.generation_span_id) == ids
    # RunnableParallel<context,question> repeats the documents in its output: one sample, not two.
    assert stats.counts == {"nested_retrieval": 1}
