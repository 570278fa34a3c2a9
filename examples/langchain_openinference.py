"""A LangChain RAG app traced by OpenInference (openinference-instrumentation-langchain), scored live.

ragtrace reads the RETRIEVER span's `retrieval.documents.*` and the LLM span's output messages; the
scores land on the retriever span. Offline: fake chat model, in-memory store, the local judge.

    python examples/langchain_openinference.py
"""

from __future__ import annotations

import os
from typing import Any

from _pipeline import Placement, finish, scored_provider
from langchain_app import QUESTION, build_chain
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from ragtrace.judges.base import Judge


def main(
    endpoint: str | None = None, judge: str | Judge = "local", placement: Placement = "processor"
) -> dict[str, Any]:
    provider, memory = scored_provider("langchain-openinference", endpoint=endpoint, judge=judge, placement=placement)
    run(provider)
    return finish(provider, memory)


def run(provider: TracerProvider) -> None:
    """The instrumented app, traced through `provider`."""
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        build_chain().invoke(QUESTION)
    finally:
        instrumentor.uninstrument()  # instrumentors patch LangChain globally


if __name__ == "__main__":
    main(os.environ.get("OTLP_ENDPOINT"))
