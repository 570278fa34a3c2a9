"""One test per real producer: the example app, instrumented by the real instrumentation library, runs
through a TracerProvider with `ragtrace.live.install(..., sample_rate=1.0)` in front of a
BatchSpanProcessor(OTLPSpanExporter), or with `scoring_batch_processor` behind the batching, to a real OTLP
receiver. Asserted for every producer: the scores on the exported retrieval span equal
`ragtrace.evaluate()` on the right sample (the user's question, the retrieved texts in rank order, the
LLM's own answer), and no other span of the trace carries anything of ragtrace's.

Each example instruments in a try/finally and uninstruments, so no patch leaks into the next test.
"""

from __future__ import annotations

from collections import Counter
from types import ModuleType
from typing import Any

import pytest

import ragtrace
from ragtrace.judges.base import Judge
from ragtrace.scoring import RagSample
from tests.interop.conftest import load_example
from tests.servers.otlp import OtlpReceiver, ReceivedSpan

SCORERS = {"context_precision", "context_relevance"}  # recall needs a ground truth


@pytest.fixture(params=["processor", "exporter"])
def placement(request: pytest.FixtureRequest) -> str:
    """ragtrace in front of the exporting processors (install), or behind the batching."""
    return str(request.param)


def assert_scored_as_evaluate(attrs: dict[str, Any], expected: RagSample, judge: Judge) -> None:
    """The scores on an exported span are those `ragtrace.evaluate()` gives the right sample."""
    assert attrs["ragtrace.eval.status"] == "scored"
    [item] = ragtrace.evaluate([expected], scorers=sorted(SCORERS), judge=judge).items
    assert {f"ragtrace.{name}.score" for name in item.results} <= set(attrs)
    for name, result in item.results.items():
        assert result.score is not None
        assert attrs[f"ragtrace.{name}.score"] == pytest.approx(result.score), name
        assert attrs[f"ragtrace.{name}.label"] == result.label


def _written(key: str) -> bool:
    """A sample's write, as opposed to an agent run's roll-up (`ragtrace.agent.*`)."""
    return key.startswith("ragtrace.") and not key.startswith("ragtrace.agent.")


def run_and_receive(
    example: ModuleType, receiver: OtlpReceiver, judge: Judge, retrieval_name: str, placement: str,
    expected: RagSample, **options: Any,
) -> tuple[dict[str, Any], ReceivedSpan]:
    """Run the example against the receiver; its report and the one exported retrieval span, checked
    against `evaluate(expected)`."""
    result = example.main(endpoint=receiver.grpc_endpoint, judge=judge, placement=placement, **options)
    spans = receiver.wait_for_spans(lambda got: any(s.name == retrieval_name for s in got))
    assert all(n == 1 for n in Counter(s.span_id for s in spans).values()), "every span exported once"
    [retrieval] = [s for s in spans if s.name == retrieval_name and "ragtrace.eval.status" in s.attributes]
    attrs = retrieval.attributes
    assert result["status"] == attrs["ragtrace.eval.status"] == "scored"
    assert (result["query"], result["contexts"], result["response"]) == (
        expected.query, expected.context_texts, expected.response)
    assert_scored_as_evaluate(attrs, expected, judge)
    assert set(result["scores"]) == SCORERS
    for name, score in result["scores"].items():
        assert attrs[f"ragtrace.{name}.score"] == pytest.approx(score)
        assert 0.0 <= score <= 1.0
    assert attrs["ragtrace.judge.model"].startswith("local/")
    assert {e["gen_ai.evaluation.name"] for e in retrieval.event("gen_ai.evaluation.result")} == SCORERS
    others = [s for s in spans if s.span_id != retrieval.span_id]
    # Only the retrieval is scored; an agent run's span (OpenLLMetry marks a LangChain chain's workflow
    # invoke_agent) carries the roll-up of its retrievals, which is no sample's score.
    assert not any(_written(k) for s in others for k in s.attributes), "only the retrieval span"
    return result, retrieval


def test_langchain_openinference(otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str) -> None:
    example = load_example("langchain_openinference", "langchain_core", "openinference.instrumentation.langchain")
    from langchain_app import ANSWER, HANDBOOK, QUESTION, expected_contexts
    from openinference.instrumentation.langchain import LangChainInstrumentor

    expected = RagSample(query=QUESTION, contexts=[HANDBOOK[3], HANDBOOK[1], HANDBOOK[0]], response=ANSWER)
    result, span = run_and_receive(example, otlp_receiver, local_judge, "VectorStoreRetriever", placement, expected)
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

    expected = RagSample(query=QUESTION, contexts=[HANDBOOK[3], HANDBOOK[1], HANDBOOK[0]], response=ANSWER)
    result, span = run_and_receive(
        example, otlp_receiver, local_judge, "vector_db_retrieve VectorStoreRetriever", placement, expected
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

    expected = RagSample(query=example.QUESTION, contexts=[d["content"] for d in example.DOCUMENTS],
                         response=example.ANSWER)
    result, span = run_and_receive(example, otlp_receiver, local_judge, "retrieval encyclopedia", placement, expected)
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

    planets = example.PLANETS
    expected = RagSample(query=example.QUESTION, contexts=[planets["saturn"], planets["venus"], planets["jupiter"]],
                         response=example.ANSWER)
    result, span = run_and_receive(example, otlp_receiver, local_judge, "chroma.query", placement, expected)
    assert result["convention"] == "openllmetry"
    assert result["contexts"] == [planets["saturn"], planets["venus"], planets["jupiter"]]
    assert [e["db.query.result.id"] for e in span.event("db.query.result")] == ["saturn", "venus", "jupiter"]
    assert (result["query"], result["response"]) == (example.QUESTION, example.ANSWER)
    assert result["scores"]["context_precision"] == 1.0
    assert not ChromaInstrumentor().is_instrumented_by_opentelemetry


def test_llamaindex_openinference(otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str) -> None:
    example = load_example("llamaindex_openinference", "llama_index.core", "openinference.instrumentation.llama_index")
    from llamaindex_app import ANSWER, QUESTION, expected_contexts
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    expected = RagSample(query=QUESTION, contexts=expected_contexts(), response=ANSWER)
    result, span = run_and_receive(
        example, otlp_receiver, local_judge, "VectorIndexRetriever.retrieve", placement, expected
    )
    assert (result["convention"], result["generation_span"], result["pairing"]) == (
        "openinference", "LiteLLM.chat", "contexts")
    # the nested _retrieve span of the same retrieval is no second sample (checked above: no ragtrace keys)
    [inner] = [s for s in otlp_receiver.spans() if s.name == "VectorIndexRetriever._retrieve"]
    assert inner.parent_span_id == span.span_id
    assert not LlamaIndexInstrumentor().is_instrumented_by_opentelemetry


def test_llamaindex_openinference_two_questions_answered_in_reverse(
    otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str
) -> None:
    """Two retrievals, then two generations in the other order, in one trace: each retrieval is scored
    with its own question and its own answer."""
    example = load_example("llamaindex_openinference", "llama_index.core", "openinference.instrumentation.llama_index")
    from llamaindex_app import ANSWERS, QUESTION, SECOND_QUESTION, expected_contexts

    results = example.two_questions(endpoint=otlp_receiver.grpc_endpoint, judge=local_judge, placement=placement)
    spans = otlp_receiver.wait_for_spans(lambda got: any(s.name == "answer two questions" for s in got))
    assert [r["query"] for r in results] == [QUESTION, SECOND_QUESTION]
    assert {s.trace_id for s in spans} == {spans[0].trace_id}, "one trace"
    scored = {s.span_id: s for s in spans if "ragtrace.eval.status" in s.attributes}
    assert set(scored) == {r["retrieval_span_id"] for r in results}
    for result in results:
        question = result["query"]
        expected = RagSample(query=question, contexts=expected_contexts(question), response=ANSWERS[question])
        assert (result["contexts"], result["response"], result["pairing"]) == (
            expected.context_texts, expected.response, "contexts")
        assert_scored_as_evaluate(scored[result["retrieval_span_id"]].attributes, expected, local_judge)
    others = [s for s in spans if s.span_id not in scored]
    assert not any(_written(k) for s in others for k in s.attributes)


def test_llamaindex_openllmetry(otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str) -> None:
    example = load_example("llamaindex_openllmetry", "llama_index.core", "llama_index.llms.litellm",
                           "opentelemetry.instrumentation.llamaindex")
    from llamaindex_app import ANSWER, QUESTION, expected_contexts

    expected = RagSample(query=QUESTION, contexts=expected_contexts(), response=ANSWER)
    result, span = run_and_receive(
        example, otlp_receiver, local_judge, "VectorIndexRetriever.task", placement, expected
    )
    assert result["convention"] == "openllmetry"
    [inner] = [s for s in otlp_receiver.spans()
               if s.name == "VectorIndexRetriever.task" and s.span_id != span.span_id]
    assert inner.parent_span_id == span.span_id, "the outer of the two nested retriever tasks is scored"
    from llama_index.core.instrumentation import get_dispatcher

    dispatcher = get_dispatcher()
    left = [type(h).__name__ for h in [*dispatcher.span_handlers, *dispatcher.event_handlers]]
    assert not any(name.startswith("OpenLLMetry") for name in left), "the example's uninstrument left a handler"


@pytest.mark.parametrize("shape", ["prompt", "chat"])
def test_haystack_openinference(otlp_receiver: OtlpReceiver, local_judge: Judge, placement: str, shape: str) -> None:
    example = load_example("haystack_openinference", "haystack", "openinference.instrumentation.haystack")
    from haystack_app import ANSWER, QUESTION, expected_contexts
    from openinference.instrumentation.haystack import HaystackInstrumentor

    expected = RagSample(query=QUESTION, contexts=expected_contexts(), response=ANSWER)
    result, _ = run_and_receive(
        example, otlp_receiver, local_judge, "InMemoryBM25Retriever.run", placement, expected, shape=shape
    )
    # Haystack 3: both prompt builders feed the chat generator (a text prompt is one user message)
    assert (result["convention"], result["generation_span"], result["pairing"]) == (
        "openinference", "OpenAIChatGenerator.run", "contexts")
    assert not HaystackInstrumentor().is_instrumented_by_opentelemetry
