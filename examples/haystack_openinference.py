"""A Haystack pipeline traced by OpenInference (openinference-instrumentation-haystack), scored live.

The instrumentor tags the prompt builder as an LLM span whose output is the rendered prompt; ragtrace
does not take it for the generation (it built a prompt, no model answered) and pairs the retrieval with
the generator, whose input quotes the retrieved texts. `shape="prompt"`: `PromptBuilder` (a text prompt)
+ `OpenAIChatGenerator`; `shape="chat"`: `ChatPromptBuilder` + `OpenAIChatGenerator`. Offline: BM25 in
memory, a local OpenAI-compatible server, the local judge.

    python examples/haystack_openinference.py
"""

from __future__ import annotations

import os
from typing import Any

from _chat_server import local_chat_server
from _pipeline import Placement, finish, scored_provider
from haystack_app import ANSWERS, QUESTION, Shape, ask, build_pipeline
from openinference.instrumentation.haystack import HaystackInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from ragtrace.judges.base import Judge


def main(
    endpoint: str | None = None, judge: str | Judge = "local", placement: Placement = "processor",
    shape: Shape = "prompt",
) -> dict[str, Any]:
    provider, memory = scored_provider(f"haystack-{shape}", endpoint=endpoint, judge=judge, placement=placement)
    run(provider, shape)
    return finish(provider, memory)


def run(provider: TracerProvider, shape: Shape = "prompt") -> None:
    """The instrumented pipeline, traced through `provider`."""
    with local_chat_server(ANSWERS) as base_url:
        pipeline = build_pipeline(base_url, shape)
        instrumentor = HaystackInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            ask(pipeline, QUESTION)
        finally:
            instrumentor.uninstrument()


if __name__ == "__main__":
    main(os.environ.get("OTLP_ENDPOINT"))
    main(os.environ.get("OTLP_ENDPOINT"), shape="chat")
