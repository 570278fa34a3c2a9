"""One test per real producer: the example app, instrumented by the real instrumentation library, runs
through a TracerProvider with `ragtrace.live.install(..., sample_rate=1.0)` in front of a
BatchSpanProcessor(OTLPSpanExporter), or with `scoring_batch_processor` behind the batching, to a real OTLP
receiver. Asserted: the exact contexts (in rank
order), query and response ragtrace extracted, and the scores on the exported retrieval span.

Each example instruments in a try/finally and uninstruments, so no patch leaks into the next test.
"""

from __future__ import annotations

from collections import Counter
from types import ModuleType
from typing import Any

import pytest

from ragtrace.judges.base import Judge
from tests.interop.conftest import load_example
from tests.servers.otlp import OtlpReceiver, ReceivedSpan

SCORERS = {"context_precision", "context_relevance"}  # recall needs a ground truth


@pytest.fixture(params=["processor", "exporter"])
def placement(request: pytest.FixtureRequest) -> str:
    """ragtrace in front of the exporting processors (install), or behind the batching."""
    return str(request.param)


def run_and_receive(
    example: ModuleType, receiver: OtlpReceiver, judge: Judge, retrieval_name: str, placement: str
) -> tuple[dict[str, Any], ReceivedSpan]:
    """Run the example against the receiver; its report and the one exported retrieval span."""
    result = example.main(endpoint=receiver.grpc_endpoint, judge=judge, placement=placement)
    spans = receiver.wait_for_spans(lambda got: any(s.name == retrieval_name for s in got))
    assert all(n == 1 for n in Counter(s.span_id for s in spans).values()), "every span exported once"
    [retrieval] = [s for s in spans if s.name == retrieval_name]
    attrs = retrieval.attributes
    assert result["status"] == attrs["ragtrace.eval.status"] == "scored"
    assert set(result["scores"]) == SCORERS
    for name, score in result["scores"].items():
        assert attrs[f"ragtrace.{name}.score"] == pytest.approx(score)
        assert 0.0 <= score <= 1.0
        assert attrs[f"ragtrace.{name}.label"] in ("pass", "fail")
    assert attrs["ragtrace.judge.model"].startswith("local/")
    assert {e["gen_ai.evaluation.name"] for e in retrieval.event("gen_ai.evaluation.result")} == SCORERS
    others = [s for s in spans if s.span_id != retrieval.span_id]
    assert not any(k.startswith("ragtrace.") for s in others for k in s.attributes), "only the retrieval span"
    return result, retrieval


def test_langchain_openinference(otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str) -> None:
    example = load_example("langchain_openinference", "langchain_core", "openinference.instrumentation.langchain")
    from langchain_app import ANSWER, HANDBOOK, QUESTION, expected_contexts
    from openinference.instrumentation.langchain import LangChainInstrumentor

    result, span = run_and_receive(example, otlp_receiver, local_judge, "VectorStoreRetriever", placement)
    assert result["convention"] == "openinference"
    assert span.attributes["openinference.span.kind"] == "RETRIEVER"
    # DeterministicFakeEmbedding ranks by a hash of the text: the useful handbook line comes last
    assert result["contexts"] == expected_contexts() == [HANDBOOK[3], HANDBOOK[1], HANDBOOK[0]]
    assert span.attributes["retrieval.documents.2.document.content"] == HANDBOOK[0]
    assert (result["query"], result["response"]) == (QUESTION, ANSWER)
    assert not LangChainInstrumentor().is_instrumented_by_opentelemetry


def test_langchain_openllmetry(otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str) -> None:
    example = load_example("langchain_openllmetry", "langchain_core", "opentelemetry.instrumentation.langchain")
    from langchain_app import ANSWER, HANDBOOK, QUESTION, expected_contexts
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    result, span = run_and_receive(
        example, otlp_receiver, local_judge, "vector_db_retrieve VectorStoreRetriever", placement
    )
    assert result["convention"] == "openllmetry"
    assert span.attributes["traceloop.span.kind"] == "task"
    assert result["contexts"] == expected_contexts() == [HANDBOOK[3], HANDBOOK[1], HANDBOOK[0]]
    assert (result["query"], result["response"]) == (QUESTION, ANSWER)
    assert not LangchainInstrumentor().is_instrumented_by_opentelemetry
    from langchain_core.callbacks import BaseCallbackManager

    assert not hasattr(BaseCallbackManager.__init__, "__wrapped__"), "the example's uninstrument left a patch"


def test_openai_v2_with_ragtrace_retrieval_helper(
    otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str
) -> None:
    example = load_example("openai_retrieval_helper", "openai", "opentelemetry.instrumentation.openai_v2")
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    result, span = run_and_receive(example, otlp_receiver, local_judge, "retrieval encyclopedia", placement)
    assert result["convention"] == "genai"
    assert span.attributes["gen_ai.data_source.id"] == "encyclopedia"
    assert result["contexts"] == [d["content"] for d in example.DOCUMENTS]
    assert (result["query"], result["response"]) == (example.QUESTION, example.ANSWER)
    # the response came from openai-v2's own chat span, written with content capture on
    [chat] = [s for s in otlp_receiver.spans() if s.name == "chat local-model"]
    assert "The Eiffel Tower was completed in 1889." in chat.attributes["gen_ai.output.messages"]
    assert chat.scope_name == "opentelemetry.util.genai.handler"  # openai-v2 records through util-genai
    assert result["scores"]["context_precision"] == 1.0  # the one useful document is ranked first
    assert not OpenAIInstrumentor().is_instrumented_by_opentelemetry


def test_chromadb_openllmetry(otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str) -> None:
    example = load_example("chromadb_openllmetry", "chromadb", "opentelemetry.instrumentation.chromadb")
    from opentelemetry.instrumentation.chromadb import ChromaInstrumentor

    result, span = run_and_receive(example, otlp_receiver, local_judge, "chroma.query", placement)
    assert result["convention"] == "openllmetry"
    planets = example.PLANETS
    assert result["contexts"] == [planets["saturn"], planets["venus"], planets["jupiter"]]
    assert [e["db.query.result.id"] for e in span.event("db.query.result")] == ["saturn", "venus", "jupiter"]
    assert (result["query"], result["response"]) == (example.QUESTION, example.ANSWER)
    assert result["scores"]["context_precision"] == 1.0
    assert not ChromaInstrumentor().is_instrumented_by_opentelemetry
