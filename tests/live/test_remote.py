"""worker="process": the plain-data codec, what pickles, and the processor with a real scoring process."""

from __future__ import annotations

import os
import pickle
import random
import re
import signal
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, set_span_in_context

from ragtrace.capture import CaptureStats, extract_samples, span_role
from ragtrace.judges.llm import LLMJudge
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.redaction import Redactor
from ragtrace.live.sampling import Sampler, SamplingRule
from ragtrace.live.scoring_process.parent import ScoringProcess
from ragtrace.live.scoring_process.protocol import ChildSettings, frame, plain_traces, span_of
from tests.capture.test_fuzz import span_specs
from tests.live.fakes import (
    CountingExporter,
    CountingProcessor,
    Rig,
    ScriptedJudge,
    open_rag_trace,
    plain_trace,
    rag_trace,
)
from tests.live.test_zero_loss import check


def shout(text: str) -> str:  # a redaction hook the scoring process can import
    return text.upper()


def ended(build: Callable[[TracerProvider], object]) -> list[ReadableSpan]:
    out = CountingProcessor()
    provider = TracerProvider(resource=Resource.create({"service.name": "codec"}))
    provider.add_span_processor(out)
    build(provider)
    return out.spans


def test_spans_survive_the_trip_to_the_scoring_process() -> None:
    def build(provider: TracerProvider) -> None:
        tracer = provider.get_tracer("t")
        remote_parent = SpanContext(7, 9, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        with tracer.start_as_current_span(
            "retrieve", context=set_span_in_context(NonRecordingSpan(remote_parent)), kind=SpanKind.CLIENT
        ) as span:
            span.set_attribute("db.system", "qdrant")
            span.set_attribute("scores", [0.5, 0.25])
            span.add_event("db.query.result", {"db.query.result.document": "text é ☃"})

    (span,) = ended(build)
    resources, traces = plain_traces([[span]])
    (copy,) = [span_of(p, [Resource(r) for r in resources]) for p in pickle.loads(pickle.dumps(traces))[0]]
    assert copy.name == span.name and copy.kind == SpanKind.CLIENT
    assert copy.context == span.context and copy.parent == span.parent and copy.parent.is_remote  # type: ignore[union-attr]
    assert (copy.start_time, copy.end_time) == (span.start_time, span.end_time)
    assert dict(copy.attributes or {}) == dict(span.attributes or {})
    assert [(e.name, dict(e.attributes or {}), e.timestamp) for e in copy.events] == [
        (e.name, dict(e.attributes or {}), e.timestamp) for e in span.events
    ]
    assert copy.resource.attributes["service.name"] == "codec"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(span_specs)
def test_the_scoring_process_reads_what_the_thread_worker_reads(
    specs: list[tuple[dict[str, Any], list[Any], int, int, int]],
) -> None:
    """Fuzzed spans: after the trip, span roles and captured samples are exactly those of the originals."""

    def build(provider: TracerProvider) -> None:
        tracer = provider.get_tracer("fuzz")
        made: list[Any] = []
        for attrs, events, start, duration, parent_index in specs:
            parent = made[parent_index] if 0 <= parent_index < len(made) else None
            context = set_span_in_context(parent) if parent is not None else None
            span = tracer.start_span("s", context=context, attributes=attrs, start_time=start)
            for name, event_attrs in events:
                span.add_event(name, event_attrs)
            span.end(end_time=start + duration)
            made.append(span)

    spans = ended(build)
    resources, traces = pickle.loads(pickle.dumps(plain_traces([spans])))
    copies = [span_of(p, [Resource(r) for r in resources]) for p in traces[0]]
    assert [span_role(s) for s in copies] == [span_role(s) for s in spans]
    original, copied = CaptureStats(), CaptureStats()
    assert extract_samples(copies, stats=copied) == extract_samples(spans, stats=original)
    assert copied.counts == original.counts


def test_what_the_scoring_process_is_sent_pickles_with_fresh_locks() -> None:
    judge = LLMJudge("openai/gpt-4o-mini", api_key="sk-test", requests_per_minute=60, daily_token_budget=1000)
    copy = pickle.loads(pickle.dumps(judge))
    assert copy.model == judge.model and copy.budget is not None and copy.budget.limit == 1000
    assert copy._lock is not judge._lock and not copy._lock.locked()
    sampler = Sampler(0.3, rules=[SamplingRule(1.0, span_name="retrieve*")], evaluations_per_minute=2)
    sampler_copy = pickle.loads(pickle.dumps(sampler))
    assert sampler_copy.rate == 0.3 and sampler_copy.rules == sampler.rules
    assert [sampler_copy.admit() for _ in range(3)] == ["ok", "ok", "throttled"]
    redactor = Redactor(shout, builtin=True, patterns=[re.compile(r"acme-\d+")])
    text = "mail bob@example.com about acme-42"
    assert pickle.loads(pickle.dumps(redactor)).redact_text(text) == redactor.redact_text(text)
    assert "[EMAIL]" in redactor.redact_text(text) and "[REDACTED]" in redactor.redact_text(text)


def test_objects_the_scoring_process_cannot_import_are_refused_up_front() -> None:
    main_judge = type("MainJudge", (ScriptedJudge,), {"__module__": "__main__"})
    with pytest.raises(ValueError, match="defined in __main__"):
        RagScoringSpanProcessor(CountingProcessor(), judge=main_judge(), worker="process")
    with pytest.raises(ValueError, match="must pickle"):
        RagScoringSpanProcessor(CountingProcessor(), judge=ScriptedJudge(), worker="process",
                                redactor=Redactor(lambda text: text))
    with pytest.raises(ValueError, match="enrich mode only"):
        RagScoringSpanProcessor(CountingProcessor(), judge=ScriptedJudge(), worker="process", mode="link")
    with pytest.raises(ValueError, match="worker must be"):
        RagScoringSpanProcessor(CountingProcessor(), judge=ScriptedJudge(), worker="fork")  # type: ignore[arg-type]


def test_scores_written_by_the_scoring_process(rig: Callable[..., Rig]) -> None:
    r = rig(worker="process", redactor=Redactor(shout), target="root")
    ids = rag_trace(r.tracer, docs=("good doc", "bad doc", "good too"), ground_truth="good")
    other = plain_trace(r.tracer, 3)
    r.settle(len(ids) + len(other))
    r.assert_exactly_once(ids + other)
    (root,) = [s for s in r.out.spans if s.context is not None and s.context.span_id == ids[0]]
    attrs = root.attributes or {}
    # the hook upper-cased every text before the judge saw it: no context contains "good" any more
    assert attrs["ragtrace.context_precision.score"] == 0.0
    assert attrs["ragtrace.eval.status"] == "scored"
    assert {e.attributes["gen_ai.evaluation.name"] for e in root.events} == {  # type: ignore[index]
        "context_precision", "context_relevance", "context_recall",
    }
    assert r.proc.decisions == {"scored": 3, "not_rag": 1}
    assert r.proc.queue_depth == 0


def test_judge_failures_and_hangs_in_the_scoring_process(rig: Callable[..., Rig]) -> None:
    r = rig(worker="process", score_deadline=1.0)  # room for the fast one on a busy machine; the hang never ends
    ids = {kind: rag_trace(r.tracer, query=f"{kind}: q") for kind in ("fast", "error", "hang", "crash")}
    r.settle(sum(len(v) for v in ids.values()), timeout=15)
    r.assert_exactly_once([i for v in ids.values() for i in v])
    status = {
        kind: (next(s for s in r.out.spans if s.context and s.context.span_id == v[1]).attributes or {}).get(
            "ragtrace.eval.status"
        )
        for kind, v in ids.items()
    }
    assert status == {"fast": "scored", "error": "error", "hang": "timeout", "crash": "error"}
    assert r.proc.decisions == {"scored": 2, "error": 4, "timeout": 2}


def test_a_lost_scoring_process_costs_its_scores_and_is_started_again(rig: Callable[..., Rig]) -> None:
    r = rig(worker="process")
    before = rag_trace(r.tracer)
    r.settle(len(before))
    slow = rag_trace(r.tracer, query="hang: q")  # out at the scoring process when it dies
    time.sleep(0.1)
    remote = r.proc.scoring.judging.process
    old_pid = remote.pid
    assert old_pid is not None
    os.kill(old_pid, signal.SIGKILL)
    end = time.monotonic() + 10
    while not (remote.alive and remote.pid not in (None, old_pid)):
        assert time.monotonic() < end, "no new scoring process"
        time.sleep(0.01)
    after = rag_trace(r.tracer)
    r.settle(len(before) + len(slow) + len(after), timeout=10)
    r.assert_exactly_once(before + slow + after)
    scored = {
        s.context.span_id for s in r.out.spans
        if s.context is not None and (s.attributes or {}).get("ragtrace.eval.status") == "scored"
    }
    assert scored == {before[1], after[1]}  # the retrieval spans before and after; not the one it had
    assert r.proc.decisions == {"scored": 4, "error": 1}
    assert r.proc.queue_depth == 0


def test_every_span_exported_once_with_a_scoring_process() -> None:
    """Randomized: traces of every judge behaviour, open roots, tight limits and flushes of every length."""
    rnd = random.Random(20261129)
    out = CountingExporter()  # counted where they are exported, behind the SDK's default batching queue
    proc = RagScoringSpanProcessor(
        BatchSpanProcessor(out, schedule_delay_millis=10), judge=ScriptedJudge(slow_s=0.03), sampler=Sampler(rate=0.8),
        worker="process", tick_interval=0.01,
        score_deadline=0.2, max_trace_wait=0.3, max_queue=8, max_held_spans=40, max_open_traces=6,
    )
    provider = TracerProvider()
    provider.add_span_processor(proc)
    tracer = provider.get_tracer("zero-loss")
    entered: set[int] = set()
    while "scored" not in proc.decisions:  # wait until the scoring process is up (80 % of traces are sampled)
        entered.update(rag_trace(tracer))
        assert proc.force_flush(10_000)
    for n in range(120):
        kind = rnd.choice(["rag", "rag", "plain", "open"])
        if kind == "plain":
            entered.update(plain_trace(tracer, rnd.randint(1, 4)))
        else:
            behaviour = rnd.choice(["fast", "fast", "slow", "hang", "timeout", "error", "invalid", "crash"])
            _, ids = open_rag_trace(tracer, query=f"{behaviour}: q{n}", retrievals=rnd.randint(1, 3),
                                    plain=rnd.randint(0, 2), end_root=kind == "rag")
            entered.update(ids if kind == "rag" else ids[1:])
        if rnd.random() < 0.1:
            proc.force_flush(rnd.choice([0, 20, 200]))
        if rnd.random() < 0.1:
            time.sleep(0.02)
    proc.shutdown()
    check(out, proc, entered, "enrich")
    decisions = proc.decisions
    assert decisions["scored"] >= 2 and decisions.get("error", 0) + decisions.get("timeout", 0) > 0, decisions


def test_a_trace_that_cannot_be_sent_is_forwarded_and_the_rest_scored(rig: Callable[..., Rig]) -> None:
    """A foreign span with an attribute value that does not pickle: its trace goes out unscored, counted."""
    r = rig(worker="process", tick_interval=0.2)  # one tick's message holds both traces
    flags = TraceFlags(TraceFlags.SAMPLED)
    odd = ReadableSpan(
        name="retrieve", context=SpanContext(1234, 5678, is_remote=False, trace_flags=flags),
        attributes={"gen_ai.operation.name": "retrieval", "handle": threading.Lock()},  # type: ignore[dict-item]
        start_time=1, end_time=2,
    )
    r.proc.on_end(odd)
    ids = rag_trace(r.tracer)
    r.settle(len(ids) + 1)
    r.assert_exactly_once([*ids, 5678])
    assert r.retrieval_status() == {5678: ("error", "internal_error"), ids[1]: ("scored", None)}
    assert r.proc.decisions == {"scored": 2, "error": 1}


def test_a_judge_the_scoring_process_cannot_import(
    rig: Callable[..., Rig], caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """Importable here, not there (a module made at run time): the scoring process stops and says why; the
    app's process logs it and forwards every span unscored."""
    module = types.ModuleType("made_at_run_time")
    judge_class = type("ElsewhereJudge", (ScriptedJudge,), {"__module__": module.__name__})
    module.ElsewhereJudge = judge_class  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        r = rig(judge_class(), worker="process")
        ids = rag_trace(r.tracer)
        r.settle(len(ids), timeout=10)
        r.assert_exactly_once(ids)
        assert not any(k.endswith(".score") for s in r.out.spans for k in (s.attributes or {}))
        (retrieval,) = (s.attributes or {} for s in r.out.spans if s.name == "retrieve")
        assert (retrieval["ragtrace.eval.status"], retrieval["ragtrace.eval.error"]) in (
            ("error", "scoring_process_lost"), ("timeout", "judge_timeout")
        )
        assert r.proc.decisions in ({"timeout": 1}, {"error": 1})
        assert "the scoring process exited (code 1)" in caplog.text
        assert "ragtrace scoring process: ERROR" in capfd.readouterr().err
    finally:
        del sys.modules[module.__name__]


def test_the_pipes_work_above_select_limit_of_1024_descriptors(rig: Callable[..., Rig]) -> None:
    """A busy server has many files open: the scoring process's pipes then get descriptors above 1024."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the descriptor limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        r = rig(worker="process")
        answers_fd = r.proc.scoring.judging.process.answers_fd
        assert answers_fd is not None and answers_fd > 1024
        ids = rag_trace(r.tracer)
        r.settle(len(ids))
        r.assert_exactly_once(ids)
        assert r.proc.decisions == {"scored": 2}
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_garbled_answer_stream_is_a_lost_scoring_process(caplog: pytest.LogCaptureFixture) -> None:
    settings = ChildSettings(
        judge=ScriptedJudge(), scorers=(), sampler=Sampler(), target="retrieval", score_deadline=1.0,
        max_queue=1, concurrency=1, redactor=None, extractor=None, reason_max_chars=10, record_metrics=False,
    )
    garbling = "import os, sys, time; os.write(int(sys.argv[-1]), {!r}); time.sleep(10)".format(frame(b"not a pickle"))
    remote = ScoringProcess(settings, command=[sys.executable, "-c", garbling])
    remote.start()
    try:
        assert remote.receive(5.0) == []
        assert not remote.alive
        assert "could not be read" in caplog.text
    finally:
        remote.stop(timeout=1.0)
