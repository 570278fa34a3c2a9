"""Opt-in judge traces over real OTLP: the real litellm client against the scripted server, the live pipeline
scoring an app's trace, the judge's spans on a tracer provider of their own, linked from the scored span."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

from ragtrace.judges import LLMJudge
from ragtrace.judges.llm.tracing import TRACE_ENV, JudgeTraces, TracedTransport
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.redaction import EMAIL, Redactor
from ragtrace.live.sampling import Sampler
from tests.live.fakes import rag_trace
from tests.servers.judge import JudgeServer
from tests.servers.otlp import OtlpReceiver, ReceivedSpan

SECRET = "ann@example.com"


def _provider(receiver: OtlpReceiver, service: str) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter = OTLPSpanExporter(endpoint=receiver.grpc_endpoint, insecure=True)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
    return provider


@pytest.fixture
def app_provider(otlp_receiver: OtlpReceiver) -> Iterator[TracerProvider]:
    provider = _provider(otlp_receiver, "rag-app")
    yield provider
    provider.shutdown()


def _score_one(
    app_provider: TracerProvider, judge: LLMJudge, receiver: OtlpReceiver, worker: str = "thread"
) -> ReceivedSpan:
    """One RAG trace of the app, scored by `judge` (no pipeline redactor: the judge's trace redacts itself)."""
    app_provider.add_span_processor(RagScoringSpanProcessor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.grpc_endpoint, insecure=True), schedule_delay_millis=50),
        judge=judge, sampler=Sampler(rate=1.0), tick_interval=0.01, redactor=None, worker=worker,
    ))
    ids = rag_trace(app_provider.get_tracer("rag-app"), query=f"what is good? mail {SECRET}",
                    docs=("good doc", "bad doc"))
    assert app_provider.force_flush(20_000)
    spans = receiver.wait_for_spans(
        lambda got: any(s.span_id in ids and "ragtrace.eval.status" in s.attributes for s in got), timeout=30
    )
    (scored,) = [s for s in spans if s.span_id in ids and "ragtrace.eval.status" in s.attributes]
    assert scored.attributes["ragtrace.eval.status"] == "scored"
    return scored


def test_the_judges_calls_are_traced_apart_and_linked_from_the_score(
    judge_server: JudgeServer, otlp_receiver: OtlpReceiver, app_provider: TracerProvider,
) -> None:
    judge_provider = _provider(otlp_receiver, "ragtrace-judge")
    traces = JudgeTraces(judge_provider, capture_content=True, redact=Redactor().redact_text)
    judge = LLMJudge("openai/judge-test", api_base=judge_server.url + "/v1", api_key="sk-test", traces=traces)
    try:
        scored = _score_one(app_provider, judge, otlp_receiver)
        trace_id = int(str(scored.attributes["ragtrace.judge.trace_id"]), 16)
        assert judge_provider.force_flush(10_000)
        spans = otlp_receiver.wait_for_spans(
            lambda got: sum(s.trace_id == trace_id for s in got) >= 1 + len(judge_server.requests), timeout=20
        )
    finally:
        judge_provider.shutdown()
    judged = [s for s in spans if s.trace_id == trace_id]
    (root,) = [s for s in judged if s.name == "ragtrace.judge"]
    calls = [s for s in judged if s.name == "chat openai/judge-test"]
    assert len(calls) == len(judge_server.requests) >= 1  # every call to the model, no more
    assert {s.service_name for s in judged} == {"ragtrace-judge"}  # not the app's provider
    assert root.parent_span_id is None and all(c.parent_span_id == root.span_id for c in calls)
    call = calls[0]
    assert call.kind == SpanKind.CLIENT
    attrs = call.attributes
    assert attrs["gen_ai.operation.name"] == "chat" and attrs["gen_ai.request.model"] == "openai/judge-test"
    assert attrs["gen_ai.usage.input_tokens"] == judge_server.usages[0]["prompt_tokens"]
    assert attrs["gen_ai.usage.output_tokens"] == judge_server.usages[0]["completion_tokens"]
    assert float(attrs["ragtrace.judge.latency_ms"]) > 0  # type: ignore[arg-type]
    sent = json.dumps(json.loads(str(attrs["gen_ai.input.messages"])))
    assert SECRET not in sent and EMAIL in sent  # the request, through the redactor
    reply = json.loads(str(attrs["gen_ai.output.messages"]))
    assert reply[0]["role"] == "assistant" and "contexts" in reply[0]["parts"][0]["content"]
    # The judge's spans are never scored: nothing in the judge's trace carries a score or a status.
    assert not any(k.startswith("ragtrace.eval") for s in judged for k in s.attributes)
    # And the app's trace holds no judge span.
    app_spans = [s for s in spans if s.trace_id == scored.trace_id]
    assert not any(s.name.startswith("chat ") or s.name == "ragtrace.judge" for s in app_spans)


def test_the_scoring_process_traces_the_judge_on_a_provider_of_its_own(
    judge_server: JudgeServer, otlp_receiver: OtlpReceiver, app_provider: TracerProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`worker="process"` (install()'s default): the judge runs in the scoring process, whose own provider
    exports the judge's spans over OTLP as the standard variables say; the scored span still names them."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.http_endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    judge = LLMJudge("openai/judge-test", api_base=judge_server.url + "/v1", api_key="sk-test",
                     traces=JudgeTraces())
    scored = _score_one(app_provider, judge, otlp_receiver, worker="process")
    trace_id = int(str(scored.attributes["ragtrace.judge.trace_id"]), 16)
    wanted = {"ragtrace.judge", "chat openai/judge-test"}
    spans = otlp_receiver.wait_for_spans(
        lambda got: wanted <= {s.name for s in got if s.trace_id == trace_id}, timeout=30
    )
    judged = [s for s in spans if s.trace_id == trace_id]
    assert {s.service_name for s in judged} == {"ragtrace-judge"}  # the scoring process's own provider
    assert {s.transport for s in judged} == {"http"}  # as OTEL_EXPORTER_OTLP_PROTOCOL says


def test_without_the_setting_no_judge_call_is_traced(
    judge_server: JudgeServer, otlp_receiver: OtlpReceiver, app_provider: TracerProvider,
) -> None:
    judge = LLMJudge("openai/judge-test", api_base=judge_server.url + "/v1", api_key="sk-test")
    assert not isinstance(judge.transport, TracedTransport)
    scored = _score_one(app_provider, judge, otlp_receiver)
    assert "ragtrace.judge.trace_id" not in scored.attributes
    assert judge_server.requests
    spans = otlp_receiver.wait_for_spans(1)
    assert not any(s.name.startswith("chat ") or s.name == "ragtrace.judge" for s in spans)
    assert {s.service_name for s in spans} == {"rag-app"}


def test_content_is_left_out_unless_captured() -> None:
    traces = JudgeTraces(TracerProvider())
    assert traces.capture_content is False  # OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT unset


def test_the_apps_global_provider_is_refused() -> None:
    with pytest.raises(ValueError, match="of their own"):
        JudgeTraces(trace.get_tracer_provider())  # type: ignore[arg-type]


def test_the_setting_turns_judge_traces_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragtrace.live.settings import RagtraceSettings

    assert "traces" not in RagtraceSettings().llm_judge_options()["llm_options"]
    monkeypatch.setenv(TRACE_ENV, "true")
    options = RagtraceSettings.from_env().llm_judge_options()["llm_options"]
    assert isinstance(options["traces"], JudgeTraces) and options["traces"].redact is not None
