"""Zero loss: whatever the traces, the judge, the limits and the flush/shutdown points, every span that
entered the processor is exported exactly once, and the decision counters match what was written. The
spans are counted at the exporter, behind the SDK's BatchSpanProcessor with its default queue (in front
of it or behind it), not at ragtrace's own output."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span

from ragtrace.live.core import ScoringFace
from ragtrace.live.exporter import RagScoringSpanExporter, ScoringBatchSpanProcessor
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from tests.live.fakes import (
    BEHAVIOURS,
    Counting,
    Placement,
    Rig,
    ScriptedJudge,
    SlowExporter,
    open_rag_trace,
    plain_trace,
    rag_trace,
)

trace_spec = st.fixed_dictionaries({
    "kind": st.sampled_from(["rag", "rag", "plain", "open", "open"]),
    "behaviour": st.sampled_from(BEHAVIOURS),
    "retrievals": st.integers(1, 3),
    "plain": st.integers(0, 3),
    "flush": st.sampled_from([None, None, None, None, None, 0, 20, 100]),  # force_flush after this trace (ms)
    "pause": st.sampled_from([0.0, 0.0, 0.01]),
})

options = st.fixed_dictionaries({
    "placement": st.sampled_from(["processor", "exporter"]),
    "mode": st.sampled_from(["enrich", "link"]),
    "rate": st.sampled_from([1.0, 1.0, 1.0, 0.5, 0.0]),
    "max_held_spans": st.integers(1, 24),
    "max_open_traces": st.integers(1, 3),
    "max_queue": st.integers(1, 6),
    "concurrency": st.integers(1, 3),
    "score_deadline": st.sampled_from([0.02, 0.1, 0.3]),
    "max_trace_wait": st.sampled_from([0.02, 5.0, 5.0]),
})


def check(
    out: Counting, proc: RagScoringSpanProcessor, entered: set[int], mode: str
) -> None:
    counts = Counter(out.ids())
    assert {i for i in entered if counts[i] != 1} == set(), "a span was lost or exported twice"
    extra = [s for s in out.spans if s.context is not None and s.context.span_id not in entered]
    # link mode: `evaluation <scorer>` spans, and `evaluation` for a sample that was not judged at all
    assert all(s.name.partition(" ")[0] == "evaluation" for s in extra), "unknown spans exported"
    assert all(counts[s.context.span_id] == 1 for s in extra if s.context is not None)
    assert proc.held_spans == 0 and proc.open_traces == 0
    decisions = proc.decisions
    if mode == "enrich":
        events = [e for s in out.spans for e in s.events if e.name == "gen_ai.evaluation.result"]
    else:
        events = [e for s in extra for e in s.events]
    attrs = [e.attributes or {} for e in events]
    scored = sum(1 for a in attrs if "gen_ai.evaluation.score.value" in a)
    errors = sum(1 for a in attrs if a.get("error.type") not in (None, "judge_timeout"))
    timeouts = sum(1 for a in attrs if a.get("error.type") == "judge_timeout")
    assert scored == decisions.get("scored", 0)
    assert errors == decisions.get("error", 0)
    assert timeouts <= decisions.get("timeout", 0)


EXAMPLES = int(os.environ.get("RAGTRACE_ZERO_LOSS_EXAMPLES", "30"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(opts=options, traces=st.lists(trace_spec, min_size=1, max_size=12), shutdown_at=st.integers(0, 12),
       end_open_after=st.booleans())
def test_every_span_exported_exactly_once(
    opts: dict[str, Any], traces: list[dict[str, object]], shutdown_at: int, end_open_after: bool
) -> None:
    rate = float(opts.pop("rate"))
    mode = str(opts["mode"])
    rig = Rig(ScriptedJudge(slow_s=0.03), sampler=Sampler(rate=rate), batched=True, **opts)
    tracer = rig.tracer
    entered: set[int] = set()
    open_roots: list[Span] = []
    # Behind the batching, spans that end after shutdown never reach ragtrace: the SDK's
    # BatchSpanProcessor drops them, as it would without ragtrace.
    entering = True
    for n, spec in enumerate(traces):
        if n == shutdown_at:
            rig.close()
            entering = not rig.batched
        if spec["kind"] == "plain":
            ids = plain_trace(tracer, 1 + int(spec["plain"]))  # type: ignore[call-overload]
        else:
            root, ids = open_rag_trace(
                tracer, query=f"{spec['behaviour']}: q{n}", retrievals=int(spec["retrievals"]),  # type: ignore[call-overload]
                plain=int(spec["plain"]), end_root=spec["kind"] == "rag",  # type: ignore[call-overload]
            )
            if spec["kind"] == "open":
                open_roots.append(root)
                ids = ids[1:]
        if entering:
            entered.update(ids)
        if spec["flush"] is not None:
            rig.flush(int(spec["flush"]))  # type: ignore[call-overload]
        if spec["pause"]:
            time.sleep(float(spec["pause"]))  # type: ignore[arg-type]
    if end_open_after:
        for root in open_roots:
            root.end()
            if entering:
                entered.add(root.get_span_context().span_id)
    rig.close()
    check(rig.out, rig.proc, entered, mode)


@pytest.mark.parametrize("placement", ["processor", "exporter"])
def test_concurrent_app_threads_with_flushes(placement: Placement) -> None:
    """Several app threads end spans while another thread flushes: still exactly once."""
    rig = Rig(
        ScriptedJudge(slow_s=0.01), placement, batched=True, max_held_spans=200, max_open_traces=30, max_queue=10,
        score_deadline=0.2,
    )
    tracer = rig.tracer
    entered: list[list[int]] = [[] for _ in range(4)]
    stop = threading.Event()

    def app(k: int) -> None:
        rnd = random.Random(k)
        for n in range(150):
            kind = rnd.choice(["rag", "plain"])
            behaviour = rnd.choice(["fast", "slow", "error", "hang"])
            if kind == "rag":
                entered[k] += rag_trace(tracer, query=f"{behaviour}: {n}", retrievals=rnd.randint(1, 2))
            else:
                entered[k] += plain_trace(tracer, 3)

    def flusher() -> None:
        while not stop.is_set():
            rig.flush(20)
            time.sleep(0.02)

    threads = [threading.Thread(target=app, args=(k,)) for k in range(4)]
    f = threading.Thread(target=flusher)
    f.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    f.join()
    rig.close()
    check(rig.out, rig.proc, {i for ids in entered for i in ids}, "enrich")


@pytest.mark.parametrize("placement", ["processor", "exporter"])
def test_a_killed_scoring_process_loses_nothing_at_the_exporter(placement: Placement) -> None:
    """2,800 spans of traces out at the scoring process are released at once when it is killed: more than
    the SDK's default BatchSpanProcessor queue (2,048) holds, behind an exporter slower than the release."""
    out = SlowExporter(delay_s=0.01)
    if placement == "processor":
        entry: SpanProcessor = RagScoringSpanProcessor(
            BatchSpanProcessor(out), judge=ScriptedJudge(), sampler=Sampler(rate=1.0), worker="process",
            tick_interval=0.05,
        )
        face: ScoringFace = entry  # type: ignore[assignment]
    else:
        exporter = RagScoringSpanExporter(out, judge=ScriptedJudge(), sampler=Sampler(rate=1.0), worker="process",
                                          tick_interval=0.05)
        entry = face = ScoringBatchSpanProcessor(exporter, schedule_delay_millis=10)
    provider = TracerProvider()
    provider.add_span_processor(entry)
    tracer = provider.get_tracer("kill")
    entered = rag_trace(tracer)
    assert provider.force_flush(10_000)
    for n in range(700):
        entered += rag_trace(tracer, query=f"hang: q{n}")
    end = time.monotonic() + 20
    while face.queue_depth < 700:
        assert time.monotonic() < end, f"only {face.queue_depth} traces reached the scoring process"
        time.sleep(0.05)
    pid = face.scoring.judging.process.pid  # type: ignore[attr-defined]
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + 20
    while face.held_spans:
        assert time.monotonic() < end, "the killed child's traces are still held"
        time.sleep(0.05)
    provider.shutdown()
    counts = Counter(out.ids())
    assert {i for i in entered if counts[i] != 1} == set(), f"{sum(counts[i] != 1 for i in entered)} spans lost"
    statuses = Counter(
        (s.attributes or {}).get("ragtrace.eval.status") for s in out.spans if s.name == "retrieve"
    )
    assert statuses == {"scored": 1, "error": 700}

