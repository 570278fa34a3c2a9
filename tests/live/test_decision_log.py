"""A running processor can be asked why its last traces were (not) scored: `decision_log`."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ragtrace.capture.explain import DecisionLog
from tests.live.fakes import Rig, rag_trace


@pytest.mark.parametrize("placement", ["processor", "exporter"])
def test_the_last_traces_closed_are_explained(rig: Callable[..., Rig], placement: str) -> None:
    log = DecisionLog(size=2)
    r = rig(placement=placement, decision_log=log)
    rag_trace(r.tracer, query="first question", docs=("doc one",))
    with r.tracer.start_as_current_span("broken request"), r.tracer.start_as_current_span("retrieve") as span:
        span.set_attribute("gen_ai.operation.name", "retrieval")
        span.set_attribute("gen_ai.retrieval.documents", "[{not json")
    rag_trace(r.tracer, query="third question", docs=("doc three",))
    assert r.flush()
    reports = log.explain()
    assert len(reports) == 2, "only the last two traces are kept"
    broken, third = reports
    assert broken.samples == [] and broken.counts == {"invalid_documents_json": 1}
    assert [c.sample.query for c in third.samples] == ["third question"]
    text = log.render()
    assert "every retrieval span was passed over: a retrieval's documents attribute is not valid JSON" in text
    assert "query (retrieval): third question" in text
    assert "first question" not in text


def test_a_decision_log_needs_a_positive_size() -> None:
    with pytest.raises(ValueError, match="size"):
        DecisionLog(size=0)


def test_install_takes_a_decision_log() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ragtrace.live import install
    from tests.live.fakes import ScriptedJudge

    log = DecisionLog(size=5)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    try:
        assert install(provider, judge=ScriptedJudge(), sample_rate=1.0, decision_log=log) is not None
        rag_trace(provider.get_tracer("app"), query="asked through install")
        assert provider.force_flush(5000)
        [report] = log.explain()
        assert [c.sample.query for c in report.samples] == ["asked through install"]
    finally:
        provider.shutdown()
