"""End to end over real sockets: TracerProvider -> RagScoringSpanProcessor -> BatchSpanProcessor (or
ScoringBatchSpanProcessor -> RagScoringSpanExporter) -> the SDK's own OTLP exporters (gRPC and HTTP) -> a
real OTLP receiver on 127.0.0.1; metrics likewise."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind

from ragtrace.judges import judge_id
from ragtrace.live.exporter import RagScoringSpanExporter, ScoringBatchSpanProcessor
from ragtrace.live.metrics import SCORE_SERIES_KEYS, RagtraceMetrics, views
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from tests.live.fakes import Placement, ScriptedJudge, open_rag_trace, plain_trace, rag_trace
from tests.servers.otlp import OtlpReceiver, ReceivedSpan


class App:
    """An instrumented app as a user would wire it, pointed at the receiver."""

    def __init__(
        self, span_exporter: SpanExporter, metric_exporter: MetricExporter, placement: Placement = "processor",
        metric_views: Sequence[View] = (), session_exemplars: bool = False, **options: object,
    ) -> None:
        resource = Resource.create({"service.name": "rag-app"})
        self.meter_provider = MeterProvider(
            resource=resource,
            metric_readers=[PeriodicExportingMetricReader(metric_exporter, export_interval_millis=200)],
            views=metric_views,
        )
        self.metrics = RagtraceMetrics(self.meter_provider, session_exemplars=session_exemplars)
        scoring: dict[str, Any] = {
            "judge": ScriptedJudge(), "sampler": Sampler(rate=1.0), "metrics": self.metrics,
            "tick_interval": 0.01, **options,
        }
        self.provider = TracerProvider(resource=resource)
        if placement == "exporter":  # behind the batching
            exporter = RagScoringSpanExporter(span_exporter, **scoring)
            self.provider.add_span_processor(ScoringBatchSpanProcessor(exporter, schedule_delay_millis=50))
        else:  # in front of the exporting processor
            self.provider.add_span_processor(
                RagScoringSpanProcessor(BatchSpanProcessor(span_exporter, schedule_delay_millis=50), **scoring)
            )
        self.tracer = self.provider.get_tracer("rag-app")

    def close(self) -> None:
        self.provider.shutdown()
        self.meter_provider.shutdown()


PLACEMENTS = ["processor", "exporter"]


@pytest.fixture(params=[(p, w) for p in PLACEMENTS for w in ("thread", "process")], ids="-".join)
def grpc_app(otlp_receiver: OtlpReceiver, request: pytest.FixtureRequest) -> Iterator[App]:
    """The app exporting over gRPC; ragtrace in front of the exporting processor or behind the batching,
    scoring in a worker thread or in a scoring process of its own."""
    placement, worker = request.param
    app = App(
        GrpcSpanExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True),
        GrpcMetricExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True),
        placement,
        worker=worker,
    )
    yield app
    app.close()


def by_id(spans: list[ReceivedSpan]) -> Counter[int]:
    return Counter(s.span_id for s in spans)


def assert_scored_trace(spans: list[ReceivedSpan], ids: list[int]) -> ReceivedSpan:
    counts = by_id(spans)
    assert all(counts[i] == 1 for i in ids), "every span arrives exactly once"
    (retrieval,) = [s for s in spans if s.span_id in ids and s.name == "retrieve"]
    attrs = retrieval.attributes
    assert attrs["ragtrace.context_precision.score"] == 0.83
    assert attrs["ragtrace.context_precision.label"] == "pass"
    assert attrs["ragtrace.context_relevance.score"] == pytest.approx(0.67)
    assert attrs["ragtrace.eval.status"] == "scored"
    assert attrs["ragtrace.judge.model"] == "scripted/judge"
    assert attrs["ragtrace.judge.id"] == judge_id(ScriptedJudge())  # beside the model, on every score
    assert attrs["ragtrace.judge.input_tokens"] == 100
    assert attrs["ragtrace.judge.cost_usd"] == pytest.approx(0.001)
    assert attrs["gen_ai.operation.name"] == "retrieval"  # the original attributes are kept
    events = retrieval.event("gen_ai.evaluation.result")
    assert {e["gen_ai.evaluation.name"]: e["gen_ai.evaluation.score.value"] for e in events} == {
        "context_precision": 0.83, "context_relevance": pytest.approx(0.67),
    }
    assert all(e["gen_ai.evaluation.score.label"] == "pass" for e in events)
    assert {e["ragtrace.judge.id"] for e in events} == {attrs["ragtrace.judge.id"]}
    assert retrieval.resource["service.name"] == "rag-app"
    for span in spans:
        if span.span_id in ids and span.name != "retrieve":
            assert not any(k.startswith("ragtrace.") for k in span.attributes)
            assert span.events == []
    return retrieval


def test_scores_and_metrics_arrive_over_grpc(grpc_app: App, otlp_receiver: OtlpReceiver) -> None:
    ids = rag_trace(grpc_app.tracer, docs=("good doc", "noise", "good again"), plain=3)
    other = plain_trace(grpc_app.tracer, 3)
    assert grpc_app.provider.force_flush(5000)
    spans = otlp_receiver.wait_for_spans(len(ids) + len(other))
    assert {s.transport for s in spans} == {"grpc"}
    retrieval = assert_scored_trace(spans, ids)
    assert all(by_id(spans)[i] == 1 for i in other)
    assert len(spans) == len(ids) + len(other)

    decisions = otlp_receiver.wait_for_metric(
        "ragtrace.evaluation.decisions",
        predicate=lambda m: m.point_where({"decision": "scored"}) is not None
        and m.point_where({"decision": "not_rag"}) is not None,
    )
    assert decisions.point_where({"decision": "scored"}).value == 2  # type: ignore[union-attr]
    assert decisions.point_where({"decision": "not_rag"}).value == 1  # type: ignore[union-attr]
    score = otlp_receiver.wait_for_metric("ragtrace.evaluation.score")
    assert sum(p.count or 0 for p in score.data_points) == 2
    # One series per judge: the judge's id labels the score histogram.
    assert {p.attributes["ragtrace.judge.id"] for p in score.data_points} == {judge_id(ScriptedJudge())}
    # Each score is an exemplar of the retrieval span it was written on: a chart of scores links to traces.
    exemplars = {
        (round(value, 2), trace_id, span_id)
        for m in otlp_receiver.metrics() if m.name == score.name for p in m.data_points
        for value, trace_id, span_id, _ in p.exemplars
    }
    assert exemplars == {(0.83, retrieval.trace_id, retrieval.span_id), (0.67, retrieval.trace_id, retrieval.span_id)}
    tokens = otlp_receiver.wait_for_metric("ragtrace.judge.tokens")
    assert sum(int(p.value or 0) for p in tokens.data_points) == 120
    otlp_receiver.wait_for_metric("ragtrace.judge.duration")
    otlp_receiver.wait_for_metric("ragtrace.spans.held")
    otlp_receiver.wait_for_metric("ragtrace.queue.depth")


SESSION = "ragtrace.session.id"
# (metric views, session_exemplars): only both put the session on the exemplars; the option alone must not
# turn it into a series label.
SESSION_SETUPS = {"views+option": (True, True), "neither": (False, False), "option without views": (False, True)}


@pytest.mark.parametrize("worker", ["thread", "process"])
@pytest.mark.parametrize("with_views, session_exemplars", SESSION_SETUPS.values(), ids=SESSION_SETUPS.keys())
def test_the_session_reaches_score_exemplars_never_series(
    otlp_receiver: OtlpReceiver, worker: str, with_views: bool, session_exemplars: bool
) -> None:
    app = App(
        GrpcSpanExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True),
        GrpcMetricExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True),
        metric_views=views() if with_views else (), session_exemplars=session_exemplars, worker=worker,
    )
    try:
        root, ids = open_rag_trace(app.tracer, docs=("good doc", "noise", "good again"))
        root.set_attribute("session.id", "chat-42")  # what the app's instrumentation says of the conversation
        root.end()
        assert app.provider.force_flush(5000)
        retrieval = assert_scored_trace(otlp_receiver.wait_for_spans(len(ids)), ids)
        assert retrieval.attributes[SESSION] == "chat-42"  # the sample carries it in every setup
        score = otlp_receiver.wait_for_metric(
            "ragtrace.evaluation.score", predicate=lambda m: sum(p.count or 0 for p in m.data_points) == 2
        )
        points = [p for m in otlp_receiver.metrics() if m.name == score.name for p in m.data_points]
        assert {frozenset(p.attributes) for p in points} == {frozenset(SCORE_SERIES_KEYS)}  # never a session label
        exemplars = [e for p in points for e in p.exemplars]
        assert {(round(e.value, 2), e.trace_id, e.span_id) for e in exemplars} == {
            (0.83, retrieval.trace_id, retrieval.span_id), (0.67, retrieval.trace_id, retrieval.span_id),
        }
        expected = {SESSION: "chat-42"} if with_views and session_exemplars else {}
        assert all(e.filtered_attributes == expected for e in exemplars)
        assert app.metrics.session_exemplars is (with_views and session_exemplars)
    finally:
        app.close()


def test_judge_failure_arrives_as_status_not_as_loss(grpc_app: App, otlp_receiver: OtlpReceiver) -> None:
    ids = rag_trace(grpc_app.tracer, query="error: q")
    assert grpc_app.provider.force_flush(5000)
    spans = otlp_receiver.wait_for_spans(len(ids))
    assert all(by_id(spans)[i] == 1 for i in ids)
    (retrieval,) = [s for s in spans if s.name == "retrieve"]
    assert retrieval.attributes["ragtrace.eval.status"] == "error"
    assert retrieval.attributes["ragtrace.eval.error"] == "rate_limited"
    assert {e["error.type"] for e in retrieval.event("gen_ai.evaluation.result")} == {"rate_limited"}


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_scores_arrive_over_http(otlp_receiver: OtlpReceiver, placement: Placement) -> None:
    app = App(
        HttpSpanExporter(endpoint=f"{otlp_receiver.http_endpoint}/v1/traces"),
        HttpMetricExporter(endpoint=f"{otlp_receiver.http_endpoint}/v1/metrics"),
        placement,
    )
    try:
        ids = rag_trace(app.tracer, docs=("good doc", "noise", "good again"), plain=3)
        assert app.provider.force_flush(5000)
        spans = otlp_receiver.wait_for_spans(len(ids))
        assert {s.transport for s in spans} == {"http"}
        assert_scored_trace(spans, ids)
        otlp_receiver.wait_for_metric("ragtrace.evaluation.decisions")
        assert otlp_receiver.bad_requests() == []
    finally:
        app.close()


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_link_mode_over_grpc(otlp_receiver: OtlpReceiver, placement: Placement) -> None:
    app = App(
        GrpcSpanExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True),
        GrpcMetricExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True),
        placement,
        mode="link",
    )
    try:
        ids = rag_trace(app.tracer, docs=("good doc", "noise", "good again"))
        assert app.provider.force_flush(5000)
        spans = otlp_receiver.wait_for_spans(len(ids) + 2)
        counts = by_id(spans)
        assert all(counts[i] == 1 for i in ids) and len(spans) == len(ids) + 2
        (retrieval,) = [s for s in spans if s.name == "retrieve"]
        assert not any(k.startswith("ragtrace.") for k in retrieval.attributes)
        evals = {s.name: s for s in spans if s.name.startswith("evaluation ")}
        assert set(evals) == {"evaluation context_precision", "evaluation context_relevance"}
        for span in evals.values():
            assert span.trace_id == retrieval.trace_id
            assert span.parent_span_id == retrieval.span_id
            assert span.links == [(retrieval.trace_id, retrieval.span_id, {})]
            assert span.kind == SpanKind.INTERNAL
            assert span.scope_name == "ragtrace"
            assert span.attributes["openinference.span.kind"] == "EVALUATOR"
            assert span.resource["service.name"] == "rag-app"
            assert [e["gen_ai.evaluation.name"] for e in span.event("gen_ai.evaluation.result")] == [
                span.name.removeprefix("evaluation ")
            ]
        assert evals["evaluation context_precision"].attributes["ragtrace.context_precision.score"] == 0.83
    finally:
        app.close()


@pytest.mark.parametrize(("way_in", "worker"), [("install", "thread"), ("install", "process"),
                                              ("scoring_batch_processor", "process")])
def test_the_user_path_with_the_local_judge_over_otlp(otlp_receiver: OtlpReceiver, way_in: str, worker: str) -> None:
    """The whole user path: install() on a provider that exports over OTLP, or scoring_batch_processor()
    around the OTLP exporter; the real offline judge (in the scoring process too: it pickles, and loads its
    model there)."""
    pytest.importorskip("numpy")
    try:
        from ragtrace.judges.local import LocalJudge

        LocalJudge()
    except Exception as exc:  # the model weights are an optional extra
        pytest.skip(f"local judge unavailable: {exc}")
    from ragtrace.live import RagtraceSettings, install, scoring_batch_processor

    resource = Resource.create({"service.name": "rag-app"})
    meter_provider = MeterProvider(resource=resource, metric_readers=[PeriodicExportingMetricReader(
        GrpcMetricExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True), export_interval_millis=200)])
    provider = TracerProvider(resource=resource)
    exporter = GrpcSpanExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True)
    settings = RagtraceSettings(sample_rate=1.0, worker=worker)  # type: ignore[arg-type]
    if way_in == "install":
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
        assert install(provider, judge="local", settings=settings, meter_provider=meter_provider) is not None
    else:
        provider.add_span_processor(scoring_batch_processor(
            exporter, judge="local", settings=settings, meter_provider=meter_provider,
            batch_options={"schedule_delay_millis": 50},
        ))
    try:
        ids = rag_trace(
            provider.get_tracer("rag-app"),
            query="What is the capital of France?",
            docs=("Paris is the capital and largest city of France.", "Bananas are rich in potassium."),
            answer="The capital of France is Paris.",
        )
        assert provider.force_flush(20_000)
        spans = otlp_receiver.wait_for_spans(len(ids))
        assert all(by_id(spans)[i] == 1 for i in ids)
        (retrieval,) = [s for s in spans if s.name == "retrieve"]
        attrs = retrieval.attributes
        assert attrs["ragtrace.eval.status"] == "scored"
        assert attrs["ragtrace.judge.model"].startswith("local/")
        assert attrs["ragtrace.judge.id"] == judge_id(LocalJudge())
        assert 0.0 <= attrs["ragtrace.context_precision.score"] <= 1.0
        assert attrs["ragtrace.context_precision.label"] in ("pass", "fail")
        assert len(retrieval.event("gen_ai.evaluation.result")) == 2
        otlp_receiver.wait_for_metric(
            "ragtrace.evaluation.decisions", predicate=lambda m: m.point_where({"decision": "scored"}) is not None
        )
    finally:
        provider.shutdown()
        meter_provider.shutdown()
