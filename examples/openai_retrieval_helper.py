"""The OpenAI Python client traced by opentelemetry-instrumentation-openai-v2, with the retrieval step
recorded by ragtrace's own `retrieval_span` helper, scored live.

The chat completion goes to a tiny OpenAI-compatible server on 127.0.0.1 (`_chat_server`: no API key, no
network). openai-v2 writes `gen_ai.output.messages` on its chat span only with message content capture
on: `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only` (the latest GenAI conventions, which
opentelemetry-util-genai >= 1.0 always uses; `true` is the value for the older v1.30 path).

    python examples/openai_retrieval_helper.py
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")

from _chat_server import local_chat_server
from _pipeline import Placement, finish, scored_provider
from openai import OpenAI
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from ragtrace.instrument import retrieval_span
from ragtrace.judges.base import Judge

QUESTION = "When was the Eiffel Tower completed?"
ANSWER = "The Eiffel Tower was completed in 1889."
DOCUMENTS = [
    {"id": "eiffel-1", "score": 0.91, "content": "The Eiffel Tower was completed in 1889 for the World's Fair."},
    {"id": "eiffel-2", "score": 0.55, "content": "The tower is 330 metres tall."},
    {"id": "louvre-1", "score": 0.12, "content": "The Louvre is the world's most visited museum."},
]


def answer(client: OpenAI, tracer: Any, question: str) -> str:
    """The app: retrieve (recorded by ragtrace's helper), then ask the model with the contexts."""
    with tracer.start_as_current_span("rag.answer"):
        with retrieval_span(question, data_source="encyclopedia", tracer=tracer) as retrieval:
            docs = DOCUMENTS  # your vector search here
            retrieval.record(docs)
        context = "\n".join(d["content"] for d in docs)
        completion = client.chat.completions.create(
            model="local-model",
            messages=[
                {"role": "system", "content": f"Answer from the context.\n{context}"},
                {"role": "user", "content": question},
            ],
        )
        return completion.choices[0].message.content or ""


def main(
    endpoint: str | None = None, judge: str | Judge = "local", placement: Placement = "processor"
) -> dict[str, Any]:
    provider, memory = scored_provider("openai-app", endpoint=endpoint, judge=judge, placement=placement)
    run(provider)
    return finish(provider, memory)


def run(provider: TracerProvider) -> None:
    """The instrumented app, traced through `provider`."""
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with local_chat_server({QUESTION: ANSWER}) as base_url:
            client = OpenAI(base_url=base_url, api_key="not-needed", max_retries=0)
            answer(client, provider.get_tracer("openai-app"), QUESTION)
    finally:
        instrumentor.uninstrument()


if __name__ == "__main__":
    main(os.environ.get("OTLP_ENDPOINT"))
