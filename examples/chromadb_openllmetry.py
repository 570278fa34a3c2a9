"""chromadb in memory, traced by OpenLLMetry's opentelemetry-instrumentation-chromadb, scored live.

The instrumentor writes one `db.query.result` event per hit (`db.query.result.document`, `.id`,
`.distance`) on the `chroma.query` span; ragtrace reads the contexts from those events. The query text
comes from the generation's user message (ragtrace's `generation_span` helper stands in for the LLM).
Offline: an EphemeralClient with our own deterministic embedding function (chromadb's default one
would download a model).

    python examples/chromadb_openllmetry.py
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")  # chromadb's own product telemetry: off

import chromadb
from _pipeline import Placement, finish, scored_provider
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from opentelemetry.instrumentation.chromadb import ChromaInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from ragtrace.instrument import generation_span
from ragtrace.judges.base import Judge

QUESTION = "Which planet has the most moons?"
ANSWER = "Saturn has the most known moons."
PLANETS = {
    "saturn": "Saturn has the most known moons of any planet.",
    "jupiter": "Jupiter is the largest planet in the solar system.",
    "mars": "Mars has two small moons, Phobos and Deimos.",
    "venus": "Venus has no moons.",
}


class WordHashEmbedding(EmbeddingFunction[Documents]):
    """Bag of hashed words: deterministic, offline, and good enough to rank by shared words."""

    def __init__(self) -> None:
        pass

    def __call__(self, input: Documents) -> Embeddings:
        vectors = []
        for text in input:
            vector = [0.0] * 64
            for word in text.lower().replace("?", " ").replace(".", " ").replace(",", " ").split():
                vector[int(hashlib.sha1(word.encode()).hexdigest(), 16) % 64] += 1.0
            vectors.append(vector)
        return vectors  # type: ignore[return-value]

    @staticmethod
    def name() -> str:
        return "word-hash"


def answer(collection: Any, tracer: Any, question: str) -> str:
    """The app: a chroma query (traced by the instrumentor), then a templated answer."""
    with tracer.start_as_current_span("rag.answer"):
        collection.query(query_texts=[question], n_results=3)
        with generation_span(model="templated", query=question, tracer=tracer) as generation:
            generation.record(ANSWER)
        return ANSWER


def main(
    endpoint: str | None = None, judge: str | Judge = "local", placement: Placement = "processor"
) -> dict[str, Any]:
    provider, memory = scored_provider("chromadb-app", endpoint=endpoint, judge=judge, placement=placement)
    run(provider)
    return finish(provider, memory)


def run(provider: TracerProvider) -> None:
    """The instrumented app, traced through `provider`."""
    instrumentor = ChromaInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        client = chromadb.EphemeralClient()
        collection = client.get_or_create_collection("planets", embedding_function=WordHashEmbedding())
        collection.add(ids=list(PLANETS), documents=list(PLANETS.values()))
        answer(collection, provider.get_tracer("chromadb-app"), QUESTION)
    finally:
        instrumentor.uninstrument()


if __name__ == "__main__":
    main(os.environ.get("OTLP_ENDPOINT"))
