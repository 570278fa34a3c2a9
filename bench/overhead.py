"""What ragtrace costs the app: throughput with and without the scoring processor, A/B alternated.

Workload per trace: a root, 2 plain children, 1 retrieval (5 documents), 1 generation = 5 spans, through
a real TracerProvider into a BatchSpanProcessor with a null exporter. Variant B puts a
RagScoringSpanProcessor (10 % sampling, a judge that answers at once) in front. Rounds alternate A and B
and the median ratio is reported, by wall clock (`ratio_*`) and by this process's CPU time
(`cpu_ratio_*`, steadier on a shared machine; the worker's CPU is the app's cost, as it holds the GIL).
Each round ends with force_flush, so background work is paid inside the round. `on_end_p99_us` times
the processor's own `on_end` (wrapping a no-op processor) on the app thread while its worker runs.

    python bench/overhead.py            # prints JSON
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Tracer, set_span_in_context

from ragtrace.judges.base import Judgement, JudgeRequest
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from ragtrace.scoring import ContextVerdict, JudgeUsage, Verdicts

DOCS = json.dumps([
    {"id": f"doc-{i}", "score": 0.9 - i / 10, "content": f"passage {i} " + "lorem ipsum dolor sit amet " * 8}
    for i in range(5)
])
ANSWER = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "an answer " * 20}]}])


class NullExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class Noop(SpanProcessor):
    pass


class FixedJudge:
    """Every context useful, high and used, after `delay` seconds (0: a judge answering at once)."""

    prompt_version = "bench-v1"
    fused = True

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.model = f"bench/fixed-{delay:g}s"

    async def judge(self, request: JudgeRequest) -> Judgement:
        if self.delay:
            await asyncio.sleep(self.delay)
        contexts = [ContextVerdict(index=i, useful=True, level="high", used=True)
                    for i in range(len(request.sample.contexts))]
        return Judgement(Verdicts(contexts=contexts), JudgeUsage(calls=1, model=self.model))


def rag_trace(tracer: Tracer, number: int | None = None) -> None:
    """Root, 2 plain children, a GenAI retrieval (5 documents) and a chat span. With `number`, every text
    is unique to the trace (a caching judge would otherwise time its cache); without, texts are shared."""
    docs, answer, query = DOCS, ANSWER, "what is lorem ipsum?"
    if number is not None:
        docs = json.dumps([
            {"id": f"doc-{number}-{i}", "score": 0.9 - i / 10,
             "content": f"passage {i} of request {number}: " + "lorem ipsum dolor sit amet " * 8}
            for i in range(5)
        ])
        answer = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": f"answer {number} " * 20}]}])
        query = f"what is lorem ipsum, question {number}?"
    with tracer.start_as_current_span("request") as root:
        ctx = set_span_in_context(root)
        with tracer.start_as_current_span("auth", context=ctx):
            pass
        with tracer.start_as_current_span("retrieve", context=ctx) as r:
            r.set_attribute("gen_ai.operation.name", "retrieval")
            r.set_attribute("gen_ai.retrieval.query.text", query)
            r.set_attribute("gen_ai.retrieval.documents", docs)
        with tracer.start_as_current_span("chat", context=ctx) as g:
            g.set_attribute("gen_ai.operation.name", "chat")
            g.set_attribute("gen_ai.output.messages", answer)
        with tracer.start_as_current_span("render", context=ctx):
            pass


def plain_trace(tracer: Tracer) -> None:
    with tracer.start_as_current_span("request") as root:
        ctx = set_span_in_context(root)
        for name in ("auth", "db query", "cache", "render"):
            with tracer.start_as_current_span(name, context=ctx) as s:
                s.set_attribute("db.system", "postgresql")


def make_provider(with_ragtrace: bool) -> tuple[TracerProvider, RagScoringSpanProcessor | None]:
    exporting = BatchSpanProcessor(NullExporter(), max_queue_size=100_000)
    provider = TracerProvider()
    proc = None
    if with_ragtrace:
        proc = RagScoringSpanProcessor(exporting, judge=FixedJudge(), sampler=Sampler(0.1))
        provider.add_span_processor(proc)
    else:
        provider.add_span_processor(exporting)
    return provider, proc


def throughput(provider: TracerProvider, workload: str, n: int) -> tuple[float, float]:
    """(traces per wall second, traces per CPU second of this process), background work included:
    the round ends with a force_flush, so the worker's and the exporter's backlog is paid inside it."""
    build = rag_trace if workload == "rag" else plain_trace
    tracer = provider.get_tracer("bench")
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        build(tracer)
    provider.force_flush(60_000)
    return n / (time.perf_counter() - wall), n / max(time.process_time() - cpu, 1e-9)


def on_end_times(n_traces: int) -> list[float]:
    """Per-call time of RagScoringSpanProcessor.on_end (wrapping a no-op), worker running, µs."""
    spans: list[ReadableSpan] = []

    class Collect(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            spans.append(span)

    provider = TracerProvider()
    provider.add_span_processor(Collect())
    tracer = provider.get_tracer("bench")
    for i in range(n_traces):
        (rag_trace if i % 2 == 0 else plain_trace)(tracer)
    proc = RagScoringSpanProcessor(Noop(), judge=FixedJudge(), sampler=Sampler(0.1))
    times = []
    clock = time.perf_counter_ns
    for span in spans:
        t0 = clock()
        proc.on_end(span)
        times.append((clock() - t0) / 1000)
    proc.shutdown()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--traces", type=int, default=4000, help="traces per round and variant")
    args = parser.parse_args()

    base_provider, _ = make_provider(False)
    rag_provider, proc = make_provider(True)
    for provider in (base_provider, rag_provider):  # warm up
        throughput(provider, "rag", 300)
        throughput(provider, "plain", 300)

    ratios: dict[str, list[float]] = {"rag": [], "plain": []}
    cpu_ratios: dict[str, list[float]] = {"rag": [], "plain": []}
    rates: dict[str, list[tuple[float, float]]] = {"rag": [], "plain": []}
    for r in range(args.rounds):
        for workload in ("rag", "plain"):
            order = [(base_provider, False), (rag_provider, True)]
            if r % 2:
                order.reverse()
            got = {with_rag: throughput(provider, workload, args.traces) for provider, with_rag in order}
            ratios[workload].append(got[True][0] / got[False][0])
            cpu_ratios[workload].append(got[True][1] / got[False][1])
            rates[workload].append((got[False][0], got[True][0]))

    assert proc is not None
    decisions = proc.decisions
    base_provider.shutdown()
    rag_provider.shutdown()

    times = sorted(on_end_times(4000))
    p = lambda q: times[min(int(q * len(times)), len(times) - 1)]  # noqa: E731
    print(json.dumps({
        "ratio_rag_10pct": round(statistics.median(ratios["rag"]), 4),
        "ratio_non_rag": round(statistics.median(ratios["plain"]), 4),
        "cpu_ratio_rag_10pct": round(statistics.median(cpu_ratios["rag"]), 4),
        "cpu_ratio_non_rag": round(statistics.median(cpu_ratios["plain"]), 4),
        "on_end_p50_us": round(p(0.50), 2),
        "on_end_p99_us": round(p(0.99), 2),
        "on_end_max_us": round(times[-1], 2),
        "rounds": args.rounds,
        "traces_per_round": args.traces,
        "spans_per_trace": 5,
        "ratios_rag": [round(x, 4) for x in ratios["rag"]],
        "ratios_non_rag": [round(x, 4) for x in ratios["plain"]],
        "cpu_ratios_rag": [round(x, 4) for x in cpu_ratios["rag"]],
        "cpu_ratios_non_rag": [round(x, 4) for x in cpu_ratios["plain"]],
        "traces_per_s_rag_without_with": [[round(a), round(b)] for a, b in rates["rag"]],
        "traces_per_s_non_rag_without_with": [[round(a), round(b)] for a, b in rates["plain"]],
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "decisions": decisions,
        "targets": {"ratio_rag_10pct": 0.90, "ratio_non_rag": 0.97},
    }))


if __name__ == "__main__":
    main()
