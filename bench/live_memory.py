"""Memory stays bounded under overload: 100,000 traces at 100 % sampling against a judge that takes 1 s.

The judge serves 8 samples a second, so nearly everything overflows: the job queue (max_queue), the held
spans (max_held_spans) and the open traces (max_open_traces) all fill up, and overflow is forwarded
unscored and counted. We report the peak RSS growth next to the bound the limits imply (held spans x
the measured size of one held span, plus queued jobs), and check that every span was exported exactly
once (a count and two checksums of span ids, so the check itself costs no memory).

    python bench/live_memory.py                        # prints JSON; ~1-2 minutes
    python bench/live_memory.py --placement exporter   # ragtrace behind the SDK's batching
    python bench/live_memory.py --worker process       # scoring in a process of its own
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import gc
import json
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from overhead import FixedJudge, Keep, ended_spans, rag_trace  # the same workload and judge as the overhead bench

from ragtrace.live.exporter import RagScoringSpanExporter, ScoringBatchSpanProcessor
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler

PRIME = (1 << 61) - 1


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Checksum:
    """Count, sum and sum of squares of span ids: equal on both sides iff (w.h.p.) the same multiset."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self.squares = 0
        self._lock = threading.Lock()

    def add(self, span_id: int) -> None:
        with self._lock:
            self.count += 1
            self.total = (self.total + span_id) % PRIME
            self.squares = (self.squares + span_id * span_id) % PRIME

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checksum) and (self.count, self.total, self.squares) == (
            other.count, other.total, other.squares)

    __hash__ = None  # type: ignore[assignment]


class Exported(SpanExporter):
    def __init__(self) -> None:
        self.sum = Checksum()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            if span.context is not None:
                self.sum.add(span.context.span_id)
        return SpanExportResult.SUCCESS


class Entry(SpanProcessor):
    """In front of ragtrace: what entered."""

    def __init__(self, inner: SpanProcessor) -> None:
        self.inner = inner
        self.sum = Checksum()

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None:
            self.sum.add(span.context.span_id)
        self.inner.on_end(span)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def bytes_per_held_span(n: int = 20_000) -> float:
    """RSS cost of keeping n ended spans of this workload alive (what the held store pays per span)."""
    keep = Keep()
    kept = keep.spans
    provider = TracerProvider()
    provider.add_span_processor(keep)
    tracer = provider.get_tracer("calibrate")
    gc.collect()
    before = rss_mb()
    while len(kept) < n:
        rag_trace(tracer)
    after = rss_mb()
    per = (after - before) * 1024 * 1024 / len(kept)
    kept.clear()
    gc.collect()
    return per


def bytes_per_job(n: int = 2000) -> float:
    """RSS cost of one queued scoring job (task, coroutine frames, sample copy) with the judge waiting."""
    from ragtrace.capture import extract_samples
    from ragtrace.live.worker import ScoreJob, ScoringWorker
    from ragtrace.scoring import ContextPrecision, ContextRelevance

    template = extract_samples(ended_spans(rag_trace))[0].sample
    worker = ScoringWorker(FixedJudge(delay=1.0), concurrency=8, max_queue=n)
    worker.start()
    gc.collect()
    before = rss_mb()
    scorers = (ContextPrecision(), ContextRelevance())
    jobs = [ScoreJob(template.model_copy(deep=True), scorers, time.monotonic() + 60, lambda e, d: None)
            for _ in range(n)]

    def submit_all() -> None:
        for job in jobs:
            worker.submit(job)

    worker.call(submit_all, 10)
    jobs.clear()
    time.sleep(0.2)
    per = (rss_mb() - before) * 1024 * 1024 / n
    worker.stop()
    return per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--traces", type=int, default=100_000)
    parser.add_argument("--max-held-spans", type=int, default=20_000)
    parser.add_argument("--max-open-traces", type=int, default=5_000)
    parser.add_argument("--max-queue", type=int, default=1000)
    parser.add_argument("--score-deadline", type=float, default=5.0)
    parser.add_argument("--placement", choices=("processor", "exporter"), default="processor",
                        help="ragtrace in front of the exporting processor, or behind the SDK's batching")
    parser.add_argument("--worker", choices=("thread", "process"), default="thread",
                        help="score in a thread of this process, or in a scoring process of its own")
    args = parser.parse_args()

    per_span = bytes_per_held_span()
    per_job = bytes_per_job()
    exported = Exported()
    options: dict[str, Any] = {
        # a scoring process imports the judge's class: from the overhead module, not from __main__
        "judge": FixedJudge(delay=1.0), "sampler": Sampler(1.0), "worker": args.worker,
        "max_held_spans": args.max_held_spans, "max_open_traces": args.max_open_traces, "max_queue": args.max_queue,
        "score_deadline": args.score_deadline, "max_trace_wait": args.score_deadline,
    }
    queued_spans = 0  # spans the SDK's batching may hold in front of ragtrace
    if args.placement == "exporter":
        scoring = RagScoringSpanExporter(exported, **options)
        queued_spans = 2048  # the SDK's default
        batching = ScoringBatchSpanProcessor(scoring, max_queue_size=queued_spans)
        proc, entry = scoring, Entry(batching)
    else:
        proc = RagScoringSpanProcessor(SimpleSpanProcessor(exported), **options)
        entry = Entry(proc)
    provider = TracerProvider()
    provider.add_span_processor(entry)
    tracer = provider.get_tracer("live-memory")

    gc.collect()
    baseline = rss_mb()
    peaks = {"rss": baseline, "held": 0, "queue": 0, "open": 0}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            peaks["rss"] = max(peaks["rss"], rss_mb())
            peaks["held"] = max(peaks["held"], proc.held_spans)
            peaks["queue"] = max(peaks["queue"], proc.queue_depth)
            peaks["open"] = max(peaks["open"], proc.open_traces)
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    for _ in range(args.traces):
        rag_trace(tracer)
    produced_s = time.monotonic() - started
    provider.shutdown()
    done.set()
    watcher.join()

    growth = peaks["rss"] - baseline
    # What the limits allow: held spans (and the batching's queue, behind it) and queued jobs at their
    # measured sizes, plus a fixed 32 MB for
    # the open-trace index, the closed-id memory and allocator slack (pymalloc keeps freed arenas).
    bound_mb = ((args.max_held_spans + queued_spans) * per_span + args.max_queue * per_job) / 2**20 + 32
    print(json.dumps({
        "traces": args.traces,
        "placement": args.placement,
        "worker": args.worker,
        "spans_entered": entry.sum.count,
        "spans_exported": exported.sum.count,
        "exactly_once": entry.sum == exported.sum,
        "peak_rss_growth_mb": round(growth, 1),
        "bound_mb": round(bound_mb, 1),
        "within_bound": growth <= bound_mb,
        "unbounded_estimate_mb": round(entry.sum.count * per_span / 2**20, 1),
        "bytes_per_held_span": round(per_span),
        "bytes_per_queued_job": round(per_job),
        "peak_held_spans": peaks["held"],
        "peak_queue_depth": peaks["queue"],
        "peak_open_traces": peaks["open"],
        "limits": {"max_held_spans": args.max_held_spans, "max_open_traces": args.max_open_traces,
                   "max_queue": args.max_queue, "score_deadline_s": args.score_deadline},
        "decisions": proc.decisions,
        "produce_s": round(produced_s, 1),
        "total_s": round(time.monotonic() - started, 1),
    }, indent=2))


if __name__ == "__main__":
    main()
