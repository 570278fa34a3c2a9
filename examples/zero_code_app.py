"""An app with no ragtrace or exporter setup in its code: run it under `opentelemetry-instrument` and
ragtrace installs itself behind the batching the OTel SDK configured from the environment.

    RAGTRACE_ENABLED=true RAGTRACE_JUDGE=local RAGTRACE_SAMPLE_RATE=1 RAGTRACE_MODE=enrich \\
    OTEL_SERVICE_NAME=zero-code-app OTEL_TRACES_EXPORTER=otlp OTEL_METRICS_EXPORTER=otlp \\
    OTEL_LOGS_EXPORTER=none OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 \\
    OTEL_EXPORTER_OTLP_PROTOCOL=grpc opentelemetry-instrument python examples/zero_code_app.py

The spans are recorded with ragtrace's GenAI-semconv helpers; any instrumentor that
`opentelemetry-instrument` loads (LangChain, OpenAI, chromadb ...) would do as well. The scores are on
the exported retrieval span; this program prints the scoring decisions it saw.
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry import trace

from ragtrace.instrument import generation_span, retrieval_span
from ragtrace.live import installed

QUESTIONS = {
    "What is the capital of France?": (
        ["Paris is the capital and largest city of France.", "Bananas are rich in potassium."],
        "The capital of France is Paris.",
    ),
    "How many legs does a spider have?": (
        ["Spiders have eight legs.", "Insects have six legs.", "Paris is the capital of France."],
        "A spider has eight legs.",
    ),
}


def answer(question: str) -> str:
    tracer = trace.get_tracer("zero-code-app")
    with tracer.start_as_current_span("rag.answer"):
        docs, text = QUESTIONS[question]
        with retrieval_span(question, data_source="wiki") as retrieval:
            retrieval.record(docs)
        with generation_span(model="templated", query=question) as generation:
            generation.record(text)
        return text


def main() -> dict[str, Any]:
    answers = {question: answer(question) for question in QUESTIONS}
    processor = installed()  # None: ragtrace is not active
    provider = trace.get_tracer_provider()
    if hasattr(provider, "force_flush"):
        provider.force_flush(30_000)  # score now, so the decisions below are final
    result = {"answers": answers, "ragtrace": processor is not None,
              "decisions": processor.decisions if processor else {}}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
