"""A LlamaIndex RAG app traced by OpenLLMetry (opentelemetry-instrumentation-llamaindex), scored live.

The retriever task spans hold the query as a QueryBundle (`query_bundle` / `str_or_query_bundle`) and
each retrieved node as `NodeWithScore` JSON: ragtrace reads the query's `query_str` and each node's text,
id and score, and scores the outer of the two nested `VectorIndexRetriever.task` spans. The answer comes
from the chat span's `gen_ai.output.messages`. The instrumentor imports `llama_index.llms`, so a
`llama-index-llms-*` package must be installed (here llama-index-llms-litellm, which the app uses).

    python examples/llamaindex_openllmetry.py
"""

from __future__ import annotations

import os
from typing import Any

from _pipeline import Placement, finish, scored_provider
from llama_index.core.instrumentation import get_dispatcher
from llamaindex_app import QUESTION, build_index, build_query_engine, llm_settings
from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor
from opentelemetry.instrumentation.llamaindex.dispatcher_wrapper import OpenLLMetryEventHandler, OpenLLMetrySpanHandler
from opentelemetry.sdk.trace import TracerProvider

from ragtrace.judges.base import Judge


def uninstrument(instrumentor: LlamaIndexInstrumentor) -> None:
    """`uninstrument()`, plus what 0.62.4's misses: the span and event handlers it added to LlamaIndex's root
    dispatcher. Left there, they keep tracing to the first TracerProvider, and a second `instrument()` in the
    process adds another pair, whose spans leave a context attached after the request (the next trace of the
    thread would become its child)."""
    instrumentor.uninstrument()
    dispatcher = get_dispatcher()
    dispatcher.span_handlers = [h for h in dispatcher.span_handlers if not isinstance(h, OpenLLMetrySpanHandler)]
    dispatcher.event_handlers = [h for h in dispatcher.event_handlers if not isinstance(h, OpenLLMetryEventHandler)]


def main(
    endpoint: str | None = None, judge: str | Judge = "local", placement: Placement = "processor"
) -> dict[str, Any]:
    provider, memory = scored_provider("llamaindex-openllmetry", endpoint=endpoint, judge=judge, placement=placement)
    run(provider)
    return finish(provider, memory)


def run(provider: TracerProvider) -> None:
    """The instrumented app, traced through `provider`."""
    with llm_settings():
        index = build_index()
        instrumentor = LlamaIndexInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            build_query_engine(index).query(QUESTION)
        finally:
            uninstrument(instrumentor)  # instrumentors patch LlamaIndex globally


if __name__ == "__main__":
    main(os.environ.get("OTLP_ENDPOINT"))
