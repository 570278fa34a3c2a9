"""What ragtrace costs the app: throughput with and without the scoring processor, A/B in one process.

Workload per trace: a root, 2 plain children, 1 retrieval (5 documents), 1 generation = 5 spans, through
a real TracerProvider into a BatchSpanProcessor with a null exporter. The ragtrace variants put a
RagScoringSpanProcessor (10 % sampling, a judge that answers at once) in front, scoring in a worker thread
(`worker="thread"`, the default) or in a scoring process of its own (`worker="process"`).

The machine is shared and its speed drifts by tens of percent within seconds, so the variants run in
short blocks (`--traces` traces, then force_flush, so the worker's and exporter's backlog is paid inside
the block: a block's time is the wall time of its traces plus the CPU the flush costs this process), in a
shuffled order every round; each round gives one paired ratio per variant against the
same baseline block, and the median over rounds is reported (`ratio_*`). Per-thread CPU time (Linux
/proc) splits the cost: what the app's own thread spends more per trace, and what the app's background
threads spend. Under the GIL their CPU is the app's loss, so `worker_cpu_us_per_sampled_trace` is the
figure that decides the ratio at a given sampling rate (with worker="process", the scoring process's own
CPU runs on another core and is not in it). `on_end_p99_us` times the processor's own `on_end`.

    python bench/overhead.py                    # prints JSON: both workers; top-level figures: the thread's
    python bench/overhead.py --worker process   # the scoring process only
    python bench/overhead.py --app-work 7       # plus ~1 ms of the app's own CPU per trace
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import importlib
import json
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
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


class Keep(SpanProcessor):
    """Keeps every ended span, in the order they ended."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def ended_spans(record: Callable[[Tracer], object]) -> list[ReadableSpan]:
    """Every span that `record` ends on a tracer of a real TracerProvider."""
    keep = Keep()
    provider = TracerProvider()
    provider.add_span_processor(keep)
    record(provider.get_tracer("bench"))
    return keep.spans


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


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def thread_cpu(thread: threading.Thread) -> float:
    """CPU seconds of another thread (Linux); 0.0 where /proc is not there."""
    try:
        with open(f"/proc/self/task/{thread.native_id}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


class Variant:
    """One provider and the background threads it started (exporter, ragtrace worker)."""

    def __init__(self, with_ragtrace: bool, rate: float = 0.1, worker: str = "thread") -> None:
        before = set(threading.enumerate())
        exporting = BatchSpanProcessor(NullExporter(), max_queue_size=100_000)
        self.provider = TracerProvider()
        self.processor: RagScoringSpanProcessor | None = None
        if with_ragtrace:
            # A scoring process imports the judge's class: take it from this file imported as a module,
            # not from __main__.
            judge = importlib.import_module("overhead").FixedJudge() if worker == "process" else FixedJudge()
            self.processor = RagScoringSpanProcessor(
                exporting, judge=judge, sampler=Sampler(rate), worker=worker  # type: ignore[arg-type]
            )
            self.provider.add_span_processor(self.processor)
        else:
            self.provider.add_span_processor(exporting)
        self.tracer = self.provider.get_tracer("bench")
        self.threads = [t for t in threading.enumerate() if t not in before]

    def block(self, build: Callable[[Tracer], None], n: int) -> tuple[float, float, float]:
        """(time, app-thread CPU, background CPU) in µs per trace for n traces and a force_flush.

        The time is the wall time of producing the traces plus the CPU time this process spends in the
        flush: the flush pays the worker's and the exporter's backlog inside the block, while its idle
        waits (for a scoring process's last answers, say) cost a running app nothing.
        """
        background = [thread_cpu(t) for t in self.threads]
        wall, app = time.perf_counter(), time.thread_time()
        for _ in range(n):
            build(self.tracer)
        wall, flushing = time.perf_counter() - wall, time.process_time()
        self.provider.force_flush(60_000)
        wall += time.process_time() - flushing
        app = time.thread_time() - app
        spent = sum(thread_cpu(t) - b for t, b in zip(self.threads, background, strict=True))
        return wall / n * 1e6, app / n * 1e6, spent / n * 1e6


_PAYLOAD = {"items": [{"id": i, "name": f"item {i}", "tags": ["a", "b", "c"], "price": i * 1.5} for i in range(40)]}


def with_app_work(build: Callable[[Tracer], None], rounds: int) -> Callable[[Tracer], None]:
    """The same trace plus `rounds` JSON round trips of a ~2 KB payload: an app doing real work per request."""
    if rounds <= 0:
        return build

    def traced(tracer: Tracer) -> None:
        for _ in range(rounds):
            json.loads(json.dumps(_PAYLOAD))
        build(tracer)

    return traced


def compare(
    build: Callable[[Tracer], None], rounds: int, n: int, rate: float, workers: Sequence[str]
) -> dict[str, dict[str, object]]:
    """Paired rounds of the same workload without ragtrace and with each worker, shuffled every round."""
    variants = {"without": Variant(False), **{worker: Variant(True, rate, worker) for worker in workers}}
    for variant in variants.values():  # warm up
        variant.block(build, n)
    got: dict[str, list[tuple[float, float, float]]] = {name: [] for name in variants}
    for _ in range(rounds):
        order = list(variants)
        random.shuffle(order)
        for name in order:
            got[name].append(variants[name].block(build, n))
    # CPU per trace over all rounds (/proc counts whole clock ticks, too coarse for one block).
    base_app, base_bg = (statistics.fmean(x[i] for x in got["without"]) for i in (1, 2))
    out: dict[str, dict[str, object]] = {}
    for worker in workers:
        ratios = [a[0] / b[0] for a, b in zip(got["without"], got[worker], strict=True)]
        cpu_ratios = [(a[1] + a[2]) / (b[1] + b[2]) for a, b in zip(got["without"], got[worker], strict=True)]
        app, bg = (statistics.fmean(x[i] for x in got[worker]) for i in (1, 2))
        processor = variants[worker].processor
        out[worker] = {
            "ratio": round(statistics.median(ratios), 4),
            "cpu_ratio": round(statistics.median(cpu_ratios), 4),
            "ratio_quartiles": [round(q, 4) for q in statistics.quantiles(ratios, n=4)],
            "app_thread_us_per_trace_without": round(base_app, 1),
            "app_thread_extra_us_per_trace": round(app - base_app, 1),
            "background_extra_us_per_trace": round(bg - base_bg, 1),
            "decisions": processor.decisions if processor is not None else {},
        }
    for variant in variants.values():
        variant.provider.shutdown()
    return out


def on_end_times(n_traces: int) -> list[float]:
    """Per-call time of RagScoringSpanProcessor.on_end (wrapping a no-op), worker running, µs."""

    def half_rag(tracer: Tracer) -> None:
        for i in range(n_traces):
            (rag_trace if i % 2 == 0 else plain_trace)(tracer)

    spans = ended_spans(half_rag)
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
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--traces", type=int, default=1000,
                        help="traces per block; each ends with a flush, whose CPU counts in the block")
    parser.add_argument("--rate", type=float, default=0.1, help="sampling rate of the RAG run")
    parser.add_argument("--app-work", type=int, default=0,
                        help="JSON round trips of a 2 KB payload per trace, to stand for an app's own work "
                             "(0: the bare 5-span workload the targets are set on)")
    parser.add_argument("--worker", choices=("thread", "process", "both"), default="both",
                        help="where scoring runs: a thread of the app's process, a scoring process of its own, "
                             "or both against the same baseline (the top-level figures are then the thread's)")
    args = parser.parse_args()
    workers = ("thread", "process") if args.worker == "both" else (args.worker,)

    rag = compare(with_app_work(rag_trace, args.app_work), args.rounds, args.traces, args.rate, workers)
    plain = compare(with_app_work(plain_trace, args.app_work), args.rounds, args.traces, args.rate, workers)
    times = sorted(on_end_times(4000))
    p = lambda q: times[min(int(q * len(times)), len(times) - 1)]  # noqa: E731

    def figures(worker: str) -> dict[str, object]:
        background = float(rag[worker]["background_extra_us_per_trace"])  # type: ignore[arg-type]
        # Under the GIL, ratio ~= app / (app + extra): the app CPU per trace at which this rate costs 10 %.
        extra_per_trace = float(rag[worker]["app_thread_extra_us_per_trace"]) + background  # type: ignore[arg-type]
        return {
            "ratio_rag_10pct": rag[worker]["ratio"],
            "ratio_non_rag": plain[worker]["ratio"],
            # the app's process only: with worker="process" the scoring process's CPU is not counted
            "worker_cpu_us_per_sampled_trace": round(background / args.rate, 1) if args.rate > 0 else None,
            "app_cpu_us_per_trace_for_ratio_0_90": round(9 * extra_per_trace, 1),
            "rag": rag[worker],
            "non_rag": plain[worker],
        }

    primary = figures(workers[0])
    print(json.dumps({
        "ratio_rag_10pct": primary["ratio_rag_10pct"],
        "ratio_non_rag": primary["ratio_non_rag"],
        "on_end_p99_us": round(p(0.99), 2),
        "on_end_p50_us": round(p(0.50), 2),
        "on_end_max_us": round(times[-1], 2),
        **{k: v for k, v in primary.items() if k not in ("ratio_rag_10pct", "ratio_non_rag")},
        "worker": workers[0],
        "by_worker": {worker: figures(worker) for worker in workers},
        "rounds": args.rounds,
        "traces_per_block": args.traces,
        "sampling_rate": args.rate,
        "app_work_json_round_trips": args.app_work,
        "spans_per_trace": 5,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "targets": {"ratio_rag_10pct": 0.90, "ratio_non_rag": 0.97},
    }))


if __name__ == "__main__":
    main()
