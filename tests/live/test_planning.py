"""Planner: which scorers judge a sample, what it counts as when none does, and where its scores go."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace.capture import CapturedSample, extract_samples
from ragtrace.live.planning import Planner
from ragtrace.live.sampling import Sampler
from ragtrace.scoring import ContextPrecision, ContextRecall, RagSample
from tests.live.seams import ended_spans, span_id, span_named

SCORERS = (ContextPrecision(), ContextRecall())


def sample_of(spans: Sequence[ReadableSpan]) -> CapturedSample:
    [captured] = extract_samples(spans)
    return captured


class Failing:
    def redact_sample(self, sample: RagSample) -> RagSample:
        raise RuntimeError("redactor bug")


def test_recall_needs_a_ground_truth() -> None:
    planner = Planner(SCORERS, Sampler(rate=1.0), None, "retrieval")
    spans = ended_spans()
    planned = planner.plan(1, sample_of(spans), spans[0])
    assert not isinstance(planned, str) and [s.name for s in planned[1]] == ["context_precision"]
    spans = ended_spans(ground_truth="the truth")
    planned = planner.plan(1, sample_of(spans), spans[0])
    assert not isinstance(planned, str) and [s.name for s in planned[1]] == ["context_precision", "context_recall"]


def test_what_a_declined_sample_counts_as() -> None:
    spans = ended_spans()
    captured = sample_of(spans)
    assert Planner(SCORERS, Sampler(rate=0.0), None, "retrieval").plan(1, captured, spans[0]) == "not_sampled"
    throttled = Sampler(rate=1.0, evaluations_per_minute=1, clock=lambda: 0.0)
    planner = Planner(SCORERS, throttled, None, "retrieval")
    assert not isinstance(planner.plan(1, captured, spans[0]), str)
    assert planner.plan(1, captured, spans[0]) == "throttled"
    assert Planner(SCORERS, Sampler(rate=1.0), Failing(), "retrieval").plan(1, captured, spans[0]) == "error"


def test_the_target_span_of_the_scores() -> None:
    spans = ended_spans()
    captured = sample_of(spans)
    by_id = {span_id(s): s for s in spans}
    targets = {t: Planner(SCORERS, Sampler(), None, t).target_of(captured, by_id, spans)
               for t in ("retrieval", "generation", "root")}
    assert targets == {name: span_id(span_named(spans, span)) for name, span in
                       (("retrieval", "retrieve"), ("generation", "chat"), ("root", "rag request"))}
