"""TraceJudging, the one judging algorithm of both workers, driven by hand: no worker, no timers."""

from __future__ import annotations

from ragtrace.capture import DEFAULT_RULES
from ragtrace.live.enrich import Evaluation
from ragtrace.live.judging import TraceJudging
from ragtrace.live.planning import Planner
from ragtrace.live.sampling import Sampler
from ragtrace.live.scoring_process.child import RecordedMetrics
from ragtrace.scoring import ContextPrecision, ContextRelevance, JudgeUsage
from tests.live.seams import HandRun, ended_spans, span_id, span_named

SCORERS = (ContextPrecision(), ContextRelevance())


def judging(jobs: HandRun, sampler: Sampler | None = None) -> tuple[TraceJudging, RecordedMetrics]:
    metrics = RecordedMetrics()
    planner = Planner(SCORERS, sampler or Sampler(rate=1.0), None, "retrieval")
    traces = TraceJudging(jobs, planner, extractor=None, rules=DEFAULT_RULES, score_deadline=30.0,
                          metrics=metrics, model="m", prompt_version="v")
    return traces, metrics


def test_a_rag_trace_goes_out_as_one_job_and_its_report_finishes_it() -> None:
    jobs = HandRun()
    traces, metrics = judging(jobs)
    spans = ended_spans()
    retrieval = span_id(span_named(spans, "retrieve"))
    assert traces.take("t", spans) is None
    assert traces.waiting == 1 and len(jobs.jobs) == 1
    assert [s.name for s in jobs.jobs[0].scorers] == ["context_precision", "context_relevance"]
    assert traces.take_finished() == []
    jobs.report_all()
    [verdict] = traces.take_finished()
    assert traces.waiting == 0
    assert verdict.decisions == {"scored": 2}
    assert list(verdict.evaluations) == [retrieval]
    assert verdict.start_ns is not None
    calls = [name for name, _ in metrics.take()]
    assert calls == ["record_judge_call", "record_score", "record_score"]


def test_the_sampler_is_charged_with_what_the_judge_used() -> None:
    jobs, sampler = HandRun(), Sampler(rate=1.0)
    traces, _ = judging(jobs, sampler)
    traces.take("t", ended_spans())
    jobs.report_all()
    assert sampler.tokens_spent_today == 12


def test_a_trace_with_nothing_to_judge_has_its_verdict_at_once() -> None:
    traces, _ = judging(HandRun())
    verdict = traces.take("t", ended_spans("plain"))
    assert verdict is not None and verdict.decisions == {"not_rag": 1} and not verdict.evaluations


def test_a_full_queue_is_counted_and_said_on_the_sample_span() -> None:
    traces, _ = judging(HandRun(room=0))
    spans = ended_spans()
    verdict = traces.take("t", spans)
    assert verdict is not None and verdict.decisions == {"queue_full": 1}
    [evaluation] = verdict.evaluations[span_id(span_named(spans, "retrieve"))]
    assert (evaluation.status, evaluation.error) == ("skipped", "queue_full")


def test_a_throttled_sample_is_declined_and_says_so() -> None:
    sampler = Sampler(rate=1.0, evaluations_per_minute=1, clock=lambda: 0.0)  # one evaluation, then none
    jobs = HandRun()
    traces, _ = judging(jobs, sampler)
    assert traces.take("first", ended_spans()) is None
    verdict = traces.take("second", ended_spans())
    assert verdict is not None and verdict.decisions == {"throttled": 1}
    [[evaluation]] = verdict.evaluations.values()
    assert evaluation.error == "throttled"


def test_timing_out_counts_each_scorer_once_and_a_late_report_is_dropped() -> None:
    jobs = HandRun()
    traces, metrics = judging(jobs)
    traces.take("t", ended_spans())
    verdict = traces.time_out("t")
    assert verdict is not None and verdict.decisions == {"timeout": 2}
    [[evaluation]] = verdict.evaluations.values()
    assert evaluation.expired and evaluation.status == "timeout"
    assert traces.time_out("t") is None  # handed out once
    jobs.report_all()  # the judge answers after all
    assert traces.take_finished() == [] and verdict.decisions == {"timeout": 2}
    assert [name for name, _ in metrics.take()] == ["record_judge_call"]  # billed, not scored


def test_timing_out_a_finished_trace_hands_out_its_verdict_instead() -> None:
    jobs = HandRun()
    traces, _ = judging(jobs)
    traces.take("t", ended_spans())
    jobs.report_all()
    verdict = traces.time_out("t")
    assert verdict is not None and verdict.decisions == {"scored": 2}
    assert traces.take_finished() == []


def test_the_same_key_again_is_a_new_trace() -> None:
    """A trace id may come again once its trace went on: reports of the old one do not reach the new."""
    jobs = HandRun()
    traces, _ = judging(jobs)
    traces.take("t", ended_spans())
    traces.time_out("t")
    old = list(jobs.jobs)
    jobs.jobs.clear()
    traces.take("t", ended_spans())
    for job in old:
        job.on_done(Evaluation((), JudgeUsage()), 0.0)
    assert traces.take_finished() == [] and traces.waiting == 1
    jobs.report_all()
    [verdict] = traces.take_finished()
    assert verdict.decisions == {"scored": 2}
