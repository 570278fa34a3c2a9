"""Live scoring throughput against an OpenAI-compatible HTTP judge that takes 200 ms per call.

The judge is the real `LLMJudge` (litellm, HTTP over 127.0.0.1) talking to the scripted server of
tests/servers/judge.py, whose every answer arrives after `--latency` seconds (default 0.2) and is
computed from the prompt. The judge's cache is off and every sample has its own query, contexts and
response, so each sample costs one real HTTP call. Concurrency is 16 throughout.

Figures:
- judge_samples_per_s: `judge_and_score` over N samples, all gathered at once and bounded by the
  judge's own semaphore (concurrency 16); the clock covers the gather only.
- processor_samples_per_s: the live path. N traces (root -> retrieval span with 3 documents + chat
  span, via ragtrace.instrument) go through a TracerProvider whose processor is
  RagScoringSpanProcessor(rate 1.0, concurrency 16, enrich) wrapping a span counter; the clock runs
  from the first trace's start to the end of `force_flush`. Scored = exported retrieval spans with
  `ragtrace.eval.status == "scored"`.
- max_in_flight: the server's peak of concurrent requests, per figure.
- details.*.cpu_ms_per_sample: this process's CPU time (all threads, the in-process judge server
  included) per sample. The process has one GIL, so 1000 / cpu_ms_per_sample bounds samples/s
  whatever the concurrency.
- details.processor.worker_thread_cpu_ms_per_sample: the ragtrace worker thread alone (capture,
  litellm's client, scoring, enrichment), without the server: what an app pays per sampled trace.
- processor_scoring_process_samples_per_s and details.processor_scoring_process: the same live path with
  `worker="process"`; its worker thread only ships traces and writes answers, so its CPU per sample is
  what the app pays when judging (litellm's client included) runs in the scoring process.
- exporter_scoring_process_samples_per_s: the same with ragtrace behind the SDK's batching
  (RagScoringSpanExporter in a ScoringBatchSpanProcessor, 50 ms batches), the production setup.

At 200 ms per call and 16 in flight, the ceiling is 16 / 0.2 = 80 samples/s; the target is 40.

    python bench/judge_throughput.py                 # prints one JSON object
    python bench/judge_throughput.py --samples 200
    python bench/judge_throughput.py --base main     # this tree's judge and live path against main's, alternated
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import importlib
import json
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: ragtrace and tests.servers

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from ragtrace.instrument import generation_span, retrieval_span
from ragtrace.judges import LLMJudge, judge_and_score
from ragtrace.scoring import ContextPrecision, ContextRelevance, RagSample
from tests.servers.judge import JudgeServer, Valid

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import thread_cpu  # per-thread CPU from /proc

CONCURRENCY = 16
TARGET = 40.0
WORDS = ("harbour", "glacier", "lantern", "meadow", "quarry", "orchard", "canyon", "beacon", "tundra", "delta")


def texts(i: int, tag: str) -> tuple[str, list[str], str]:
    """Query, 3 contexts and a response unique to sample `i` (no cache or prompt reuse)."""
    a, b = WORDS[i % len(WORDS)], WORDS[(i // len(WORDS)) % len(WORDS)]
    query = f"What is known about the {a} of site {tag}-{i} near the {b}?"
    contexts = [
        f"The {a} of site {tag}-{i} was surveyed in {1900 + i % 100}. It lies near the {b}.",
        f"Site {tag}-{i} has a {b} to the north, recorded by team {i * 7 % 97}.",
        f"Unrelated note {tag}-{i}: the committee met {i % 12 + 1} times that year.",
    ]
    response = f"The {a} of site {tag}-{i} was surveyed in {1900 + i % 100}. It lies near the {b}."
    return query, contexts, response


def make_judge(server: JudgeServer, package: str = "ragtrace") -> LLMJudge:
    llm_judge = LLMJudge if package == "ragtrace" else importlib.import_module(package + ".judges").LLMJudge
    return llm_judge(
        "openai/judge-test", api_base=server.url + "/v1", api_key="x", concurrency=CONCURRENCY, cache=False
    )


def start_server(latency: float) -> JudgeServer:
    server = JudgeServer()
    server.default = Valid(delay=latency)
    return server.start()


def warm_up(judge: LLMJudge, scorers: tuple[Any, ...]) -> None:
    """One call outside the clock: litellm's lazy imports and provider setup."""
    query, contexts, response = texts(0, "warmup")
    asyncio.run(judge_and_score(RagSample(query=query, contexts=contexts, response=response), scorers, judge))


def judge_throughput(samples: int, latency: float, package: str = "ragtrace") -> dict[str, Any]:
    """The judge alone: `judge_and_score` of the tree `package` (`ragtrace`, or `ragtrace_base`), no live path."""
    scoring = importlib.import_module(package + ".scoring")
    score = importlib.import_module(package + ".judges").judge_and_score
    server = start_server(latency)
    try:
        judge = make_judge(server, package)
        scorers = (scoring.ContextPrecision(), scoring.ContextRelevance(), scoring.ContextRecall())
        query, contexts, response = texts(0, "warmup")  # outside the clock: litellm's lazy imports and setup
        asyncio.run(score(scoring.RagSample(query=query, contexts=contexts, response=response), scorers, judge))
        server.max_in_flight = 0
        batch = [
            scoring.RagSample(query=q, contexts=c, response=r)
            for q, c, r in (texts(i, "judge") for i in range(samples))
        ]

        async def run() -> list[Any]:
            return await asyncio.gather(*(score(s, scorers, judge) for s in batch))

        start, cpu = time.perf_counter(), time.process_time()
        results = asyncio.run(run())
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        scored = sum(1 for r in results if r.by_name()["context_precision"].score is not None)
        return {
            "samples_per_s": scored / elapsed,
            "elapsed_s": elapsed,
            "cpu_ms_per_sample": cpu * 1000 / samples,
            "scored": scored,
            "max_in_flight": server.max_in_flight,
        }
    finally:
        server.stop()


class Counter(SpanExporter):
    """The exporting side: counts exported spans and scored retrieval spans."""

    def __init__(self) -> None:
        self.spans = 0
        self.scored = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            for span in spans:
                self.spans += 1
                attrs = span.attributes or {}
                # an older tree imported as ragtrace_base writes its attributes under that name
                if "scored" in (attrs.get("ragtrace.eval.status"), attrs.get("ragtrace_base.eval.status")):
                    self.scored += 1
        return SpanExportResult.SUCCESS


def send_traces(tracer: Any, samples: int, tag: str) -> None:
    for i in range(samples):
        query, contexts, response = texts(i, tag)
        with tracer.start_as_current_span("rag request"):
            with retrieval_span(query, data_source="bench", tracer=tracer) as retrieval:
                retrieval.record(contexts)
            with generation_span(model="app-model", query=query, tracer=tracer) as generation:
                generation.record(response)


def processor_throughput(
    samples: int, latency: float, worker: str = "thread", placement: str = "processor", package: str = "ragtrace"
) -> dict[str, Any]:
    """The live path of the tree `package` (`ragtrace`, or `ragtrace_base` with --base)."""
    live = importlib.import_module(package + ".live")

    server = start_server(latency)
    try:
        judge = make_judge(server, package)
        if package == "ragtrace":
            warm_up(judge, (ContextPrecision(), ContextRelevance()))
        exported = Counter()
        options: dict[str, Any] = {
            "judge": judge, "sampler": importlib.import_module(package + ".live.sampling").Sampler(1.0),
            "concurrency": CONCURRENCY, "max_queue": samples + 10, "score_deadline": 60, "worker": worker,
        }
        before = set(threading.enumerate())
        entry: SpanProcessor
        if placement == "exporter":  # behind the SDK's batching
            scoring = live.RagScoringSpanExporter(exported, **options)
            processor = getattr(scoring, "processor", scoring)  # older trees count inside
            entry = live.ScoringBatchSpanProcessor(scoring, schedule_delay_millis=50)
        else:  # in front of the exporting processor
            processor = entry = live.RagScoringSpanProcessor(SimpleSpanProcessor(exported), **options)
        (worker_thread,) = [t for t in threading.enumerate() if t not in before and t.name == "ragtrace-worker"]
        provider = TracerProvider()
        provider.add_span_processor(entry)
        tracer = provider.get_tracer("bench.judge_throughput")
        send_traces(tracer, 1, "warmup")  # a scoring process starts, and warms litellm up, outside the clock
        entry.force_flush(60_000)
        exported.spans = exported.scored = server.max_in_flight = 0
        # The thread whose CPU the app pays for under the GIL: with worker="process" it only ships traces
        # and writes the answers; judging (litellm's client) happens in the scoring process.
        start, cpu, worker_cpu = time.perf_counter(), time.process_time(), thread_cpu(worker_thread)
        send_traces(tracer, samples, "live")
        submitted = time.perf_counter() - start
        flushed = entry.force_flush(120_000)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        worker_cpu = thread_cpu(worker_thread) - worker_cpu
        decisions = processor.decisions
        provider.shutdown()
        return {
            "samples_per_s": exported.scored / elapsed,
            "elapsed_s": elapsed,
            "submit_s": submitted,
            "cpu_ms_per_sample": cpu * 1000 / samples,
            "worker_thread_cpu_ms_per_sample": worker_cpu * 1000 / samples,
            "scored": exported.scored,
            "spans_exported": exported.spans,
            "flushed": flushed,
            "max_in_flight": server.max_in_flight,
            "decisions": decisions,
        }
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--latency", type=float, default=0.2, help="the judge server's delay per call (s)")
    parser.add_argument("--base", help="a git revision: its judge and live path too, alternated with this tree's")
    args = parser.parse_args()
    if args.base:
        from worker_ab import export_base

        export_base(args.base, Path(tempfile.mkdtemp(prefix="ragtrace-base-")))
        old_new: dict[str, list[dict[str, Any]]] = {}
        for _ in range(2):  # alternated, so that both trees see the same machine speeds
            for package in ("ragtrace", "ragtrace_base"):
                run = judge_throughput(args.samples, args.latency, package)
                old_new.setdefault(f"{package}:judge", []).append(
                    {k: round(run[k], 2) for k in ("samples_per_s", "cpu_ms_per_sample")} | {"scored": run["scored"]}
                )
                for worker, placement in (("thread", "processor"), ("process", "exporter")):
                    run = processor_throughput(args.samples, args.latency, worker, placement, package)
                    old_new.setdefault(f"{package}:{placement}/{worker}", []).append(
                        {k: round(run[k], 2) for k in ("samples_per_s", "cpu_ms_per_sample",
                                                       "worker_thread_cpu_ms_per_sample")} | {"scored": run["scored"]}
                    )
        print(json.dumps({"samples": args.samples, "judge_latency_s": args.latency, "old_new": old_new,
                          "base": args.base, "load_average_1m": round(os.getloadavg()[0], 2)}, indent=2))
        return
    judge = judge_throughput(args.samples, args.latency)
    live = processor_throughput(args.samples, args.latency)
    remote = processor_throughput(args.samples, args.latency, worker="process")
    behind = processor_throughput(args.samples, args.latency, worker="process", placement="exporter")
    print(json.dumps({
        "judge_samples_per_s": round(judge["samples_per_s"], 1),
        "processor_samples_per_s": round(live["samples_per_s"], 1),
        "processor_scoring_process_samples_per_s": round(remote["samples_per_s"], 1),
        # RagScoringSpanExporter behind a ScoringBatchSpanProcessor, scoring process: the production setup
        "exporter_scoring_process_samples_per_s": round(behind["samples_per_s"], 1),
        "concurrency": CONCURRENCY,
        "judge_latency_s": args.latency,
        "samples": args.samples,
        "max_in_flight": {
            "judge": judge["max_in_flight"], "processor": live["max_in_flight"],
            "processor_scoring_process": remote["max_in_flight"], "exporter_scoring_process": behind["max_in_flight"],
        },
        "decisions": live["decisions"],
        "decisions_scoring_process": remote["decisions"],
        "target": TARGET,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "details": {
            "judge": {k: judge[k] for k in ("elapsed_s", "cpu_ms_per_sample", "scored")},
            **{
                name: {
                    k: run[k]
                    for k in ("elapsed_s", "submit_s", "cpu_ms_per_sample", "worker_thread_cpu_ms_per_sample",
                              "scored", "spans_exported", "flushed")
                }
                for name, run in (
                    ("processor", live), ("processor_scoring_process", remote), ("exporter_scoring_process", behind)
                )
            },
        },
    }, indent=2))


if __name__ == "__main__":
    main()
