"""What the app's process would still pay per sampled trace if scoring ran in another process.

An estimate for a design question, not a feature: ragtrace scores in a thread of the app's process,
under its GIL (see docs/overhead.md). Moving capture, judging and scoring to a child process leaves the
parent with:

- turning the held spans into plain data;
- pickling them through a pipe;
- unpickling the child's answer;
- enriching the evaluated span.

This bench runs exactly that round trip against a real child process. The child rebuilds the spans,
runs `extract_samples` and `judge_and_score` with a judge that answers at once, and returns
`evaluation_writes`. The parent's CPU (`time.process_time` excludes the child) is measured per trace and
compared with the same traces through today's in-thread path, both forwarding to a null processor.

    python bench/process_worker_estimate.py          # prints JSON
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import json
import multiprocessing
import pickle
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.trace import SpanContext, TraceFlags, Tracer
from overhead import FixedJudge, Noop, ended_spans, rag_trace

from ragtrace.capture import extract_samples
from ragtrace.judges.run import judge_and_score
from ragtrace.live.enrich import Evaluation, enrich, evaluation_writes
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from ragtrace.scoring import default_scorers

Plain = tuple[Any, ...]


def to_plain(span: ReadableSpan) -> Plain:
    ctx, parent = span.context, span.parent
    assert ctx is not None
    return (
        span.name, ctx.trace_id, ctx.span_id,
        parent.span_id if parent is not None else None, parent.is_remote if parent is not None else False,
        span.start_time, span.end_time, dict(span.attributes or {}),
        [(e.name, dict(e.attributes or {}), e.timestamp) for e in span.events],
    )


def from_plain(plain: Plain, resource: Resource) -> ReadableSpan:
    name, trace_id, span_id, parent_id, remote, start, end, attributes, events = plain
    flags = TraceFlags(TraceFlags.SAMPLED)
    parent = SpanContext(trace_id, parent_id, is_remote=remote, trace_flags=flags) if parent_id else None
    return ReadableSpan(
        name=name, context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=flags), parent=parent,
        resource=resource, attributes=attributes, start_time=start, end_time=end,
        events=[Event(n, a, timestamp=t) for n, a, t in events],
    )


def child(conn: Connection) -> None:
    """Score what arrives, answer with the writes for each evaluated span."""
    resource, loop = Resource.get_empty(), asyncio.new_event_loop()
    judge, scorers = FixedJudge(), tuple(s for s in default_scorers() if s.name != "context_recall")
    while True:
        message = conn.recv_bytes()
        if not message:
            return
        spans = [from_plain(p, resource) for p in pickle.loads(message)]
        answers = []
        for captured in extract_samples(spans):
            scores = loop.run_until_complete(judge_and_score(captured.sample, scorers, judge))
            attrs, events = evaluation_writes(Evaluation(scores.results, scores.usage), 500)
            answers.append((captured.retrieval_span_id, attrs, [(e.name, dict(e.attributes or {}), e.timestamp)
                                                                  for e in events]))
        conn.send_bytes(pickle.dumps(answers, protocol=pickle.HIGHEST_PROTOCOL))


def collect(n: int) -> list[list[ReadableSpan]]:
    """n traces with unique texts, each as its list of spans."""

    def record(tracer: Tracer) -> None:
        for i in range(n):
            rag_trace(tracer, i)

    traces: dict[int, list[ReadableSpan]] = {}
    for span in ended_spans(record):
        assert span.context is not None
        traces.setdefault(span.context.trace_id, []).append(span)
    return list(traces.values())


def out_of_process(traces: list[list[ReadableSpan]], forward: SpanProcessor) -> float:
    """Parent CPU seconds for the round trip of every trace (one in flight at a time)."""
    parent_end, child_end = multiprocessing.Pipe()
    worker = multiprocessing.get_context("spawn").Process(target=child, args=(child_end,), daemon=True)
    worker.start()
    parent_end.send_bytes(pickle.dumps([to_plain(s) for s in traces[0]]))  # warm the child up
    parent_end.recv_bytes()
    cpu = time.process_time()
    for spans in traces:
        parent_end.send_bytes(pickle.dumps([to_plain(s) for s in spans], protocol=pickle.HIGHEST_PROTOCOL))
        answers = {span_id: (attrs, events) for span_id, attrs, events in pickle.loads(parent_end.recv_bytes())}
        for span in spans:
            assert span.context is not None
            found = answers.get(span.context.span_id)
            if found is not None:
                attrs, events = found
                span = enrich(span, attrs, [Event(n, a, timestamp=t) for n, a, t in events])
            forward.on_end(span)
    spent = time.process_time() - cpu
    parent_end.send_bytes(b"")
    worker.join(10)
    return spent


def in_thread(traces: list[list[ReadableSpan]], forward: SpanProcessor) -> float:
    """Process CPU seconds for today's path: the processor at 100 % sampling, flushed at the end."""
    processor = RagScoringSpanProcessor(forward, judge=FixedJudge(), sampler=Sampler(1.0), max_queue=100_000)
    cpu = time.process_time()
    for spans in traces:
        for span in spans:
            processor.on_end(span)
    processor.force_flush(60_000)
    spent = time.process_time() - cpu
    processor.shutdown()
    return spent


def forward_only(traces: list[list[ReadableSpan]], forward: SpanProcessor) -> float:
    cpu = time.process_time()
    for spans in traces:
        for span in spans:
            forward.on_end(span)
    return time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    traces = collect(args.traces)
    forward = Noop()
    runs: dict[str, list[float]] = {"forward_only": [], "in_thread": [], "out_of_process": []}
    for _ in range(args.rounds):  # interleaved, best of rounds: the machine's speed drifts
        runs["forward_only"].append(forward_only(traces, forward))
        runs["in_thread"].append(in_thread(traces, forward))
        runs["out_of_process"].append(out_of_process(traces, forward))
    per_trace = {name: min(values) / len(traces) * 1e6 for name, values in runs.items()}
    print(json.dumps({
        "parent_cpu_us_per_sampled_trace": {
            "in_thread": round(per_trace["in_thread"] - per_trace["forward_only"], 1),
            "out_of_process": round(per_trace["out_of_process"] - per_trace["forward_only"], 1),
        },
        "traces": len(traces),
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }))


if __name__ == "__main__":
    main()
