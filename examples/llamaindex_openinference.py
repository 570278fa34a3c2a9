"""A LlamaIndex RAG app traced by OpenInference (openinference-instrumentation-llama-index), scored live.

The query engine records the retrieval twice, `VectorIndexRetriever.retrieve` (documents) around
`VectorIndexRetriever._retrieve` (a QueryBundle): ragtrace scores it once, on the outer span. Two LLM
spans carry the answer, `LiteLLM.predict` around `LiteLLM.chat`: the model call (chat) is the generation,
paired because its messages quote the retrieved texts. Offline: a local OpenAI-compatible server, a
deterministic embedding, the local judge.

    python examples/llamaindex_openinference.py
"""

from __future__ import annotations

import os
from typing import Any

from _pipeline import Placement, finish, finish_all, scored_provider
from llama_index.core import get_response_synthesizer
from llamaindex_app import QUESTION, SECOND_QUESTION, build_index, build_query_engine, build_retriever, llm_settings
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from ragtrace.judges.base import Judge


def main(
    endpoint: str | None = None, judge: str | Judge = "local", placement: Placement = "processor"
) -> dict[str, Any]:
    provider, memory = scored_provider("llamaindex-openinference", endpoint=endpoint, judge=judge, placement=placement)
    run(provider)
    return finish(provider, memory)


def run(provider: TracerProvider) -> None:
    """The instrumented app, traced through `provider`."""
    with llm_settings():
        index = build_index()  # before instrumenting: indexing is no part of the traced request
        instrumentor = LlamaIndexInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            build_query_engine(index).query(QUESTION)
        finally:
            instrumentor.uninstrument()  # instrumentors patch LlamaIndex globally


def two_questions(
    endpoint: str | None = None, judge: str | Judge = "local", placement: Placement = "processor"
) -> list[dict[str, Any]]:
    """One trace that retrieves for two questions, then answers them in the other order: time order
    would pair the first retrieval with the second answer; the answers' prompts show which is which."""
    provider, memory = scored_provider("llamaindex-two-questions", endpoint=endpoint, judge=judge, placement=placement)
    run_two_questions(provider)
    return finish_all(provider, memory)


def run_two_questions(provider: TracerProvider) -> None:
    """The two-question app, traced through `provider`."""
    with llm_settings():
        index = build_index()
        instrumentor = LlamaIndexInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            with provider.get_tracer("llamaindex-app").start_as_current_span("answer two questions"):
                retriever, synthesizer = build_retriever(index), get_response_synthesizer()
                first, second = retriever.retrieve(QUESTION), retriever.retrieve(SECOND_QUESTION)
                synthesizer.synthesize(SECOND_QUESTION, second)
                synthesizer.synthesize(QUESTION, first)
        finally:
            instrumentor.uninstrument()


if __name__ == "__main__":
    main(os.environ.get("OTLP_ENDPOINT"))
    two_questions(os.environ.get("OTLP_ENDPOINT"))
