"""A LangChain RAG app traced by OpenLLMetry (opentelemetry-instrumentation-langchain), scored live.

ragtrace reads the retriever task span's `traceloop.entity.output` (`documents[].page_content`) and
the chat span's `gen_ai.output.messages`; the scores land on the retriever span (`vector_db_retrieve
VectorStoreRetriever`). Offline: fake chat model, in-memory store, the local judge.

    python examples/langchain_openllmetry.py
"""

from __future__ import annotations

import os
from typing import Any

from _pipeline import Placement, finish, scored_provider
from langchain_app import QUESTION, build_chain
from langchain_core.callbacks import BaseCallbackManager
from opentelemetry.instrumentation.langchain import LangchainInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from ragtrace.judges.base import Judge


def uninstrument(instrumentor: LangchainInstrumentor) -> None:
    """`uninstrument()`, plus the unwrap it misses: 0.62.4 unwraps `"langchain_core.callbacks"` /
    `"BaseCallbackManager.__init__"`, a path that resolves to nothing, so its callback handler (and the
    first TracerProvider) would stay patched in and a second `instrument()` in the process would be ignored."""
    instrumentor.uninstrument()
    init = original = BaseCallbackManager.__dict__["__init__"]
    while type(getattr(init, "_self_wrapper", None)).__name__ == "_BaseCallbackManagerInitWrapper":
        init = init.__wrapped__
    if init is not original:
        BaseCallbackManager.__init__ = init  # type: ignore[method-assign]


def main(
    endpoint: str | None = None, judge: str | Judge = "local", placement: Placement = "processor"
) -> dict[str, Any]:
    provider, memory = scored_provider("langchain-openllmetry", endpoint=endpoint, judge=judge, placement=placement)
    run(provider)
    return finish(provider, memory)


def run(provider: TracerProvider) -> None:
    """The instrumented app, traced through `provider`."""
    instrumentor = LangchainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        build_chain().invoke(QUESTION)
    finally:
        uninstrument(instrumentor)  # instrumentors patch LangChain globally


if __name__ == "__main__":
    main(os.environ.get("OTLP_ENDPOINT"))
