"""Evaluation results through the OTel Logs API: each `gen_ai.evaluation.result` is a log record tied to
the span it evaluates, exported by the SDK's own OTLP log exporter over real gRPC; the span event stays
behind `evaluation_results` for backends that read events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from ragtrace.live.evaluation_logs import EVENT_NAME, EvaluationResults
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from ragtrace.live.settings import RagtraceSettings
from tests.live.fakes import ScriptedJudge, rag_trace
from tests.servers.otlp import OtlpReceiver, ReceivedLog, ReceivedSpan

RESOURCE = Resource.create({"service.name": "rag-app"})


class LoggingApp:
    """An app exporting traces and logs over gRPC, ragtrace in front of its exporting processor."""

    def __init__(self, receiver: OtlpReceiver, **options: Any) -> None:
        self.loggers = LoggerProvider(resource=RESOURCE)
        self.loggers.add_log_record_processor(
            BatchLogRecordProcessor(OTLPLogExporter(endpoint=receiver.grpc_endpoint, insecure=True),
                                    schedule_delay_millis=50)
        )
        self.provider = TracerProvider(resource=RESOURCE)
        exporting = BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.grpc_endpoint, insecure=True),
                                       schedule_delay_millis=50)
        self.provider.add_span_processor(RagScoringSpanProcessor(
            exporting, judge=ScriptedJudge(), sampler=Sampler(rate=1.0), tick_interval=0.01,
            logger_provider=self.loggers, **options,
        ))
        self.tracer = self.provider.get_tracer("rag-app")

    def flush(self) -> None:
        assert self.provider.force_flush(10_000)
        assert self.loggers.force_flush(10_000)

    def close(self) -> None:
        self.provider.shutdown()
        self.loggers.shutdown()


@pytest.fixture
def app_factory(otlp_receiver: OtlpReceiver) -> Iterator[Any]:
    made: list[LoggingApp] = []

    def make(**options: Any) -> LoggingApp:
        made.append(LoggingApp(otlp_receiver, **options))
        return made[-1]

    yield make
    for app in made:
        app.close()


def _results(logs: list[ReceivedLog]) -> dict[str, ReceivedLog]:
    found = {log.attributes["gen_ai.evaluation.name"]: log for log in logs if log.event_name == EVENT_NAME}
    assert len(found) == len([log for log in logs if log.event_name == EVENT_NAME]), "one record per result"
    return found  # type: ignore[return-value]


def _retrieval(spans: list[ReceivedSpan]) -> ReceivedSpan:
    (retrieval,) = [s for s in spans if s.name == "retrieve"]
    return retrieval


@pytest.mark.parametrize("worker", ["thread", "process"])
def test_each_result_is_a_log_record_of_the_scored_span(
    app_factory: Any, otlp_receiver: OtlpReceiver, worker: str
) -> None:
    app = app_factory(worker=worker)
    ids = rag_trace(app.tracer, docs=("good doc", "noise", "good again"), plain=2)
    app.flush()
    retrieval = _retrieval(otlp_receiver.wait_for_spans(len(ids)))
    logs = _results(otlp_receiver.wait_for_logs(2))
    assert set(logs) == {"context_precision", "context_relevance"}
    events = {e["gen_ai.evaluation.name"]: e for e in retrieval.event(EVENT_NAME)}
    for name, log in logs.items():
        assert (log.trace_id, log.span_id) == (retrieval.trace_id, retrieval.span_id)
        assert log.attributes == events[name], "the record says what the span event says"
        assert log.transport == "grpc" and log.resource["service.name"] == "rag-app"
        assert log.severity_text == "INFO" and log.scope_name == "ragtrace"
    assert logs["context_precision"].attributes["gen_ai.evaluation.score.value"] == 0.83


def test_logs_only_keeps_the_scores_on_the_span_and_drops_its_result_events(
    app_factory: Any, otlp_receiver: OtlpReceiver
) -> None:
    app = app_factory(evaluation_results="logs")
    ids = rag_trace(app.tracer)
    app.flush()
    retrieval = _retrieval(otlp_receiver.wait_for_spans(len(ids)))
    logs = _results(otlp_receiver.wait_for_logs(2))
    assert retrieval.event(EVENT_NAME) == []
    assert retrieval.attributes["ragtrace.context_precision.score"] == logs["context_precision"].attributes[
        "gen_ai.evaluation.score.value"]
    assert all((log.trace_id, log.span_id) == (retrieval.trace_id, retrieval.span_id) for log in logs.values())


def test_events_only_emits_no_log_record(app_factory: Any, otlp_receiver: OtlpReceiver) -> None:
    app = app_factory(evaluation_results="events")
    ids = rag_trace(app.tracer)
    app.flush()
    retrieval = _retrieval(otlp_receiver.wait_for_spans(len(ids)))
    assert len(retrieval.event(EVENT_NAME)) == 2
    app.close()
    assert otlp_receiver.logs() == []


def test_link_mode_records_belong_to_the_evaluated_span(app_factory: Any, otlp_receiver: OtlpReceiver) -> None:
    app = app_factory(mode="link", worker="thread", evaluation_results="logs")
    ids = rag_trace(app.tracer)
    app.flush()
    spans = otlp_receiver.wait_for_spans(len(ids) + 2)
    retrieval = _retrieval(spans)
    evaluation_spans = [s for s in spans if s.name.startswith("evaluation ")]
    assert len(evaluation_spans) == 2 and all(s.event(EVENT_NAME) == [] for s in evaluation_spans)
    logs = _results(otlp_receiver.wait_for_logs(2))
    assert all((log.trace_id, log.span_id) == (retrieval.trace_id, retrieval.span_id) for log in logs.values())


def test_routing_unit() -> None:
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    result = Event(EVENT_NAME, {"gen_ai.evaluation.name": "context_recall"}, timestamp=7)
    other = Event("exception", {"exception.type": "E"})
    assert EvaluationResults("logs", provider).route(1, 2, 1, [result, other]) == [other]
    assert list(EvaluationResults("both", provider).route(1, 2, 1, [result, other])) == [result, other]
    assert list(EvaluationResults("events", provider).route(1, 2, 1, [result, other])) == [result, other]
    records = [r.log_record for r in exporter.get_finished_logs()]
    assert [(r.trace_id, r.span_id, r.timestamp, r.event_name) for r in records] == [(1, 2, 7, EVENT_NAME)] * 2
    with pytest.raises(ValueError, match="evaluation_results"):
        EvaluationResults("span")  # type: ignore[arg-type]


def test_the_setting_reads_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGTRACE_EVALUATION_RESULTS", "logs")
    assert RagtraceSettings.from_env().processor_options()["evaluation_results"] == "logs"
    monkeypatch.setenv("RAGTRACE_EVALUATION_RESULTS", "nowhere")
    with pytest.raises(Exception, match=r"evaluation_results|EVALUATION_RESULTS"):
        RagtraceSettings.from_env()
