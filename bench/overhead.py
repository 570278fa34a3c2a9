"""What ragtrace costs the app: throughput with and without it, A/B in one process.

Workload per trace: a root, 2 plain children, 1 retrieval (5 documents), 1 generation = 5 spans, through
a real TracerProvider into a BatchSpanProcessor with a null exporter. Each ragtrace configuration
(10 % sampling, a judge that answers at once) is `<placement>/<worker>`:

- placement `processor`: a RagScoringSpanProcessor in front of the BatchSpanProcessor, looking at every
  span on the app's thread; `exporter`: a ScoringBatchSpanProcessor (the SDK's BatchSpanProcessor) with a
  RagScoringSpanExporter in front of the null exporter, looking at the spans a batch at a time on the
  batching thread;
- worker `thread` (the default): scoring in a thread of the app's process; `process`: in a scoring
  process of its own.

The top-level figures are those of `install`: the README's first snippet, `ragtrace.install(provider,
judge=..., sample_rate=0.1)` on a provider that exports through a BatchSpanProcessor (`config` names it);
`by_config` has every configuration against the same baseline. `--base REV` adds the same placements
and workers of the tree at git revision REV (`base:exporter/process`, ...), imported side by side as
`ragtrace_base` (see bench/worker_ab.py): old against new in one run, on the same machine speed.

The machine is shared: its speed drifts by tens of percent within seconds, so two measures are taken.

- The figures (`ratio_*`) are CPU per trace with the variants interleaved every `--traces` traces (a few
  ms), so that all run at the same machine speed: each variant's app-thread CPU around its own traces,
  plus its background threads' CPU (exporter, ragtrace's worker) from their own clocks. Under the GIL an
  app thread that never waits does one trace per that sum, so the ratio of the sums is the throughput
  ratio. Garbage collection is off during the rounds and runs between segments (a collection lands on
  whichever variant runs, whoever allocated), and ragtrace's worker ticks as many times slower as there
  are variants, so that it sees as many traces per tick as it would alone (see `interleaved`). The
  median over `--segments` paired segment ratios is reported, with quartiles. `twin`, a second variant
  without ragtrace, measures the estimator's own error: its ratio should be 1.00; `forward_only`, a
  processor that only forwards, is the floor of any design that wraps the exporting processor.
- `wall_blocks`: the direct measure, wall time of blocks of `--wall-traces` traces in a shuffled order
  (GC on), each settled until ragtrace holds nothing and the exporter is flushed, that settling's CPU
  counted in the block. It needs no model of the GIL, and is several times noisier.

With worker="process" the scoring process's own CPU runs on another core and is in neither measure.
`on_end_p99_us` times the processor's own `on_end`, warm, outside any app.

The null exporter never reads a span, so the baseline pays nothing for what an exporter reads, and
ragtrace pays every cache miss of the spans it reads on the batching thread. `--exporter encode` makes
every variant encode its batches as OTLP protobuf, as an OTLP exporter does before it sends: the baseline
then reads every span, and ragtrace's extra includes encoding the scores it writes (`spans_encoded`
counts what was encoded, over all variants).

    python bench/overhead.py                    # prints JSON: all four configurations
    python bench/overhead.py --placement exporter --worker process   # one configuration only
    python bench/overhead.py --app-work 7       # plus ~1 ms of the app's own CPU per trace
    python bench/overhead.py --exporter encode  # every variant encodes its spans as OTLP protobuf
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import gc
import importlib
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Tracer, set_span_in_context

from ragtrace.judges.base import Judgement, JudgeRequest
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from ragtrace.live.worker import DEFAULT_TICK_S
from ragtrace.scoring import ContextVerdict, JudgeUsage, Verdicts

# the processor's default tick interval (seconds)
# The configuration the README's first snippet gives: `ragtrace.install(provider, judge=..., sample_rate=0.1)`.
README_FIRST = "install"
TICK_S: float = DEFAULT_TICK_S
DOCS = json.dumps([
    {"id": f"doc-{i}", "score": 0.9 - i / 10, "content": f"passage {i} " + "lorem ipsum dolor sit amet " * 8}
    for i in range(5)
])
ANSWER = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "an answer " * 20}]}])


class NullExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class EncodingExporter(SpanExporter):
    """What an OTLP exporter does with each batch before it sends it: the protobuf encoding of every span
    (the bytes go nowhere). It reads every field of every span, as a real exporter does."""

    spans_encoded = 0  # over every instance: each variant's batching thread and ragtrace's worker export
    _counting = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        encode_spans(spans).SerializeToString()
        with EncodingExporter._counting:
            EncodingExporter.spans_encoded += len(spans)
        return SpanExportResult.SUCCESS


# What every variant exports to (`--exporter`): nothing (`null`, the workload the targets are set on) or
# the OTLP encoding (`encode`). Set once, before any variant is built.
EXPORTERS: dict[str, type[SpanExporter]] = {"null": NullExporter, "encode": EncodingExporter}
EXPORTER: type[SpanExporter] = NullExporter


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
    """Every context useful, high and used, after `delay` seconds (0: a judge answering at once), in the
    types of `package` (`ragtrace`, or an older tree imported as `ragtrace_base`, see bench/worker_ab.py)."""

    prompt_version = "bench-v1"
    fused = True

    def __init__(self, delay: float = 0.0, package: str = "ragtrace") -> None:
        self.delay = delay
        self.model = f"bench/fixed-{delay:g}s"
        self.package = package

    async def judge(self, request: JudgeRequest) -> Judgement:
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.package == "ragtrace":
            contexts = [ContextVerdict(index=i, useful=True, level="high", used=True)
                        for i in range(len(request.sample.contexts))]
            return Judgement(Verdicts(contexts=contexts), JudgeUsage(calls=1, model=self.model))
        scoring = importlib.import_module(self.package + ".scoring")
        base = importlib.import_module(self.package + ".judges.base")
        contexts = [scoring.ContextVerdict(index=i, useful=True, level="high", used=True)
                    for i in range(len(request.sample.contexts))]
        return base.Judgement(scoring.Verdicts(contexts=contexts), scoring.JudgeUsage(calls=1, model=self.model))


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


def thread_cpu(thread: threading.Thread) -> float:
    """CPU seconds of another thread, from its own CPU clock (nanosecond resolution); 0.0 where the
    platform has none."""
    try:
        assert thread.ident is not None
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (AttributeError, AssertionError, OSError):
        return 0.0


class ForwardOnly(SpanProcessor):
    """The least any wrapping processor costs: one more Python call per span, and nothing else."""

    def __init__(self, exporting: SpanProcessor) -> None:
        self.exporting = exporting

    def on_end(self, span: ReadableSpan) -> None:
        self.exporting.on_end(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporting.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.exporting.shutdown()


class Variant:
    """One provider and the background threads it started (exporter, ragtrace worker).

    placement="processor": a RagScoringSpanProcessor in front of the BatchSpanProcessor; "exporter": a
    ScoringBatchSpanProcessor with a RagScoringSpanExporter in front of the null exporter; "install": the
    README's first snippet, `install(provider, judge=..., sample_rate=...)` on a provider exporting
    through a BatchSpanProcessor, with its defaults (worker ignored). `package` is the tree measured."""

    def __init__(
        self, with_ragtrace: bool, rate: float = 0.1, worker: str = "thread", forward_only: bool = False,
        tick_interval: float = TICK_S, placement: str = "processor", package: str = "ragtrace",
    ) -> None:
        before = set(threading.enumerate())
        self.placement = placement
        self.provider = TracerProvider()
        self.processor: Any = None  # what reports held_spans and decisions
        self.exporting: BatchSpanProcessor
        if with_ragtrace:
            live = importlib.import_module(package + ".live")
            sampling = importlib.import_module(package + ".live.sampling")
            # A scoring process imports the judge's class: take it from this file imported as a module,
            # not from __main__.
            judge = importlib.import_module("overhead").FixedJudge(package=package)
            options = {"judge": judge, "sampler": sampling.Sampler(rate), "worker": worker,
                       "tick_interval": tick_interval}
            if placement == "install":
                self.exporting = BatchSpanProcessor(EXPORTER(), max_queue_size=100_000)
                self.provider.add_span_processor(self.exporting)
                self.processor = live.install(self.provider, judge=judge, sample_rate=rate, tick_interval=tick_interval)
            elif placement == "exporter":
                scoring = live.RagScoringSpanExporter(EXPORTER(), **options)
                self.processor = getattr(scoring, "processor", scoring)  # older trees count inside
                self.exporting = live.ScoringBatchSpanProcessor(scoring, max_queue_size=100_000)
                self.provider.add_span_processor(self.exporting)
            else:
                self.exporting = BatchSpanProcessor(EXPORTER(), max_queue_size=100_000)
                self.processor = live.RagScoringSpanProcessor(self.exporting, **options)
                self.provider.add_span_processor(self.processor)
        else:
            self.exporting = BatchSpanProcessor(EXPORTER(), max_queue_size=100_000)
            self.provider.add_span_processor(ForwardOnly(self.exporting) if forward_only else self.exporting)
        self.tracer = self.provider.get_tracer("bench")
        self.threads = [t for t in threading.enumerate() if t not in before]

    def background_cpu(self) -> float:
        return sum(thread_cpu(t) for t in self.threads)

    def block(self, build: Callable[[Tracer], None], n: int) -> tuple[float, float, float]:
        """(time, app-thread CPU, background CPU) in µs per trace for n traces, their scoring and export.

        The time is the wall time of producing the traces plus the CPU the process then spends until
        ragtrace holds no span and the exporter has exported everything: the backlog is paid inside the
        block, while idle waits (for the worker's next tick, or a scoring process's answers) cost a
        running app nothing.
        """
        background = [thread_cpu(t) for t in self.threads]
        wall, app = time.perf_counter(), time.thread_time()
        for _ in range(n):
            build(self.tracer)
        wall, app = time.perf_counter() - wall, time.thread_time() - app
        wall += self.settle()
        spent = sum(thread_cpu(t) - b for t, b in zip(self.threads, background, strict=True))
        return wall / n * 1e6, app / n * 1e6, spent / n * 1e6

    def settle(self, timeout: float = 60.0) -> float:
        """`drain`, returning the CPU seconds the process spent on it, less this thread's polling."""
        busy, polling = time.process_time(), time.thread_time()
        exporting = self.drain(timeout)
        return (time.process_time() - busy) - (time.thread_time() - polling) + exporting

    def drain(self, timeout: float = 60.0) -> float:
        """Export everything, waiting until ragtrace holds nothing; returns this thread's CPU seconds spent
        exporting (the polling left out). Only the SDK's batching is flushed, never ragtrace (whose flush
        closes traces early and has fixed costs of its own): a running app does not flush every thousand
        requests. Behind the batching, the batches go first, and what ragtrace holds goes out by itself."""
        if self.placement in ("exporter", "install"):
            flushing = time.thread_time()
            BatchSpanProcessor.force_flush(self.exporting, 60_000)
            spent = time.thread_time() - flushing
            self.wait_scored(timeout)
            return spent
        self.wait_scored(timeout)
        flushing = time.thread_time()
        self.exporting.force_flush(60_000)
        return time.thread_time() - flushing

    def wait_scored(self, timeout: float = 60.0) -> None:
        if self.processor is not None:
            deadline = time.monotonic() + timeout
            while self.processor.held_spans and time.monotonic() < deadline:
                time.sleep(0.005)


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


def scoring(config: str, rate: float, tick_interval: float = TICK_S) -> Variant:
    """A ragtrace variant from its configuration's name: `install` (the README's first snippet) or
    `<placement>/<worker>` (e.g. exporter/process), either prefixed `base:` for the tree at `--base`."""
    package = "ragtrace"
    if config.startswith("base:"):
        package, config = "ragtrace_base", config.removeprefix("base:")
    placement, _, worker = config.partition("/")
    return Variant(True, rate, worker or "thread", tick_interval=tick_interval, placement=placement, package=package)


def wall_blocks(
    build: Callable[[Tracer], None], rounds: int, n: int, rate: float, configs: Sequence[str]
) -> dict[str, dict[str, object]]:
    """The direct measure: wall time of blocks of n traces (plus the CPU that settles them), without
    ragtrace and with each configuration, shuffled every round; one paired ratio per round and configuration."""
    variants = {"without": Variant(False), **{config: scoring(config, rate) for config in configs}}
    for variant in variants.values():  # warm up
        variant.block(build, n)
    got: dict[str, list[tuple[float, float, float]]] = {name: [] for name in variants}
    for _ in range(rounds):
        order = list(variants)
        random.shuffle(order)
        for name in order:
            got[name].append(variants[name].block(build, n))
    out: dict[str, dict[str, object]] = {}
    for config in configs:
        ratios = [a[0] / b[0] for a, b in zip(got["without"], got[config], strict=True)]
        out[config] = {"ratio": round(statistics.median(ratios), 4), "ratio_quartiles": quartiles(ratios)}
    for variant in variants.values():
        variant.provider.shutdown()
    return out


def quartiles(values: Sequence[float]) -> list[float]:
    return [round(q, 4) for q in statistics.quantiles(values, n=4)] if len(values) > 1 else [round(values[0], 4)] * 3


def shuffled_rounds(
    variants: dict[str, Variant], build: Callable[[Tracer], None], rounds: int, n: int
) -> dict[str, float]:
    """Each variant's app-thread CPU seconds over `rounds` rounds of n traces each, in a new order every round."""
    names = list(variants)
    app = dict.fromkeys(names, 0.0)
    for _ in range(rounds):
        random.shuffle(names)
        for name in names:
            tracer = variants[name].tracer
            started = time.thread_time()
            for _ in range(n):
                build(tracer)
            app[name] += time.thread_time() - started
    return app


def interleaved(
    build: Callable[[Tracer], None], rounds: int, n: int, segments: int, rate: float, configs: Sequence[str]
) -> dict[str, dict[str, object]]:
    """The precise measure: CPU per trace, with the variants interleaved every n traces.

    Under the GIL an app thread that never waits does one trace per (its own CPU + the CPU its
    process's other threads take from it) per trace, so the ratio of those sums is the throughput
    ratio. Each variant's app-thread CPU is timed around its own traces only; its background threads
    (exporter, ragtrace's worker) are read from their own CPU clocks, which see nothing of the other
    variants. Interleaving every n traces (a few ms) puts every variant on the same machine speed,
    which drifts by tens of percent within seconds here. The rounds are cut into `segments`, each
    closed by settling every variant, for one paired ratio per segment.

    Two things keep the variants' costs their own. Garbage collection is off during the rounds (a
    collection is triggered by any variant's allocations and would land on whichever runs) and runs
    between segments. And k variants interleaved each get 1/k of the traffic per second, so ragtrace's
    worker ticks k times slower than its default here: it then ships as many traces per tick and ticks
    as often per trace as it would alone (a tick's own cost is per second, a message's per batch).
    While idle it ticks once a second either way, which charges it (k - 1) x 0.3 ms more per second
    of its own than alone; the settling at a segment's end is charged to it too. `twin` is a second
    variant without ragtrace: its ratio shows the estimator's own error (it should be 1.00).
    `forward_only` wraps the exporting processor in one that only forwards:
    the floor of any wrapping design.
    """
    variants = {"without": Variant(False), "twin": Variant(False), "forward_only": Variant(False, forward_only=True)}
    tick = TICK_S * (len(variants) + len(configs))
    variants.update({config: scoring(config, rate, tick) for config in configs})
    names = list(variants)
    for variant in variants.values():  # warm up
        variant.block(build, n)
    decided = {name: Counter(variant.processor.decisions) for name, variant in variants.items() if variant.processor}
    gc.collect()
    gc.disable()  # collections are triggered by any variant's allocations, and would land on whichever runs
    per_trace: dict[str, list[tuple[float, float]]] = {name: [] for name in names}  # (app, background) µs
    per_segment = max(rounds // segments, 1)
    try:
        for _ in range(segments):
            background = {name: variants[name].background_cpu() for name in names}
            app = shuffled_rounds(variants, build, per_segment, n)
            for name in names:
                # waiting is on its threads' clocks; what is left to export runs on this thread
                app[name] += variants[name].drain()
            for name in names:
                spent = variants[name].background_cpu() - background[name]
                traces = per_segment * n
                per_trace[name].append((app[name] / traces * 1e6, spent / traces * 1e6))
            gc.collect()  # between segments, on nobody's clock
    finally:
        gc.enable()
    total = {name: [a + b for a, b in got] for name, got in per_trace.items()}
    base_app, base_bg = (statistics.fmean(x[i] for x in per_trace["without"]) for i in (0, 1))
    out: dict[str, dict[str, object]] = {}
    for name in names:
        if name == "without":
            continue
        ratios = [a / b for a, b in zip(total["without"], total[name], strict=True)]
        app_us, bg_us = (statistics.fmean(x[i] for x in per_trace[name]) for i in (0, 1))
        processor = variants[name].processor
        out[name] = {
            "ratio": round(statistics.median(ratios), 4),
            "ratio_quartiles": quartiles(ratios),
            "app_thread_us_per_trace_without": round(base_app, 1),
            "background_us_per_trace_without": round(base_bg, 1),
            "app_thread_extra_us_per_trace": round(app_us - base_app, 1),
            "background_extra_us_per_trace": round(bg_us - base_bg, 1),
            # the measured rounds' traces only
            "decisions": dict(Counter(processor.decisions) - decided[name]) if processor is not None else {},
        }
    for variant in variants.values():
        variant.provider.shutdown()
    return out


def idle_cpu(configs: Sequence[str], seconds: float = 2.0) -> dict[str, float]:
    """CPU µs per second that ragtrace's background threads take while the app sends nothing (after the
    worker has had time to slow down), per configuration; the exporter's idle cost is subtracted."""
    variants = {"without": Variant(False), **{config: scoring(config, 0.1) for config in configs}}
    for variant in variants.values():
        variant.block(rag_trace, 20)
    time.sleep(2.0)  # an idle worker halves its pace each tick, down to once a second
    before = {name: variant.background_cpu() for name, variant in variants.items()}
    time.sleep(seconds)
    spent = {name: (variant.background_cpu() - before[name]) / seconds * 1e6 for name, variant in variants.items()}
    for variant in variants.values():
        variant.provider.shutdown()
    return {config: round(spent[config] - spent["without"], 1) for config in configs}


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
    parser.add_argument("--rounds", type=int, default=600, help="interleaved rounds of --traces traces per variant")
    parser.add_argument("--traces", type=int, default=20, help="traces per variant and round (interleaved measure)")
    parser.add_argument("--segments", type=int, default=12, help="settle points, one paired ratio each")
    parser.add_argument("--wall-rounds", type=int, default=20, help="rounds of the wall-time blocks (0: skip)")
    parser.add_argument("--wall-traces", type=int, default=1000, help="traces per wall-time block")
    parser.add_argument("--rate", type=float, default=0.1, help="sampling rate of the RAG run")
    parser.add_argument("--app-work", type=int, default=0,
                        help="JSON round trips of a 2 KB payload per trace, to stand for an app's own work "
                             "(0: the bare 5-span workload the targets are set on)")
    parser.add_argument("--placement", choices=("processor", "exporter", "both"), default="both",
                        help="where ragtrace sits: in front of the exporting processor (RagScoringSpanProcessor), "
                             "behind the batching (RagScoringSpanExporter), or both against the same baseline")
    parser.add_argument("--worker", choices=("thread", "process", "both"), default="both",
                        help="where scoring runs: a thread of the app's process, a scoring process of its own, "
                             "or both against the same baseline")
    parser.add_argument("--base", help="a git revision: its tree's placement/worker configurations too (base:...)")
    parser.add_argument("--exporter", choices=tuple(EXPORTERS), default="null",
                        help="what every variant exports to: nothing (the workload the targets are set on), or "
                             "the OTLP protobuf encoding an OTLP exporter does before it sends (sent nowhere)")
    args = parser.parse_args()
    global EXPORTER
    EXPORTER = EXPORTERS[args.exporter]
    placements = ("processor", "exporter") if args.placement == "both" else (args.placement,)
    workers = ("thread", "process") if args.worker == "both" else (args.worker,)
    configs = [README_FIRST, *(f"{placement}/{worker}" for placement in placements for worker in workers)]
    if args.base:
        from worker_ab import export_base  # it imports this module: imported here, once it is loaded

        export_base(args.base, Path(tempfile.mkdtemp(prefix="ragtrace-base-")))
        configs += [f"base:{config}" for config in configs]  # the first snippet too, old against new

    workloads = {"rag": with_app_work(rag_trace, args.app_work), "non_rag": with_app_work(plain_trace, args.app_work)}
    cpu = {
        name: interleaved(build, args.rounds, args.traces, args.segments, args.rate, configs)
        for name, build in workloads.items()
    }
    wall = {
        name: wall_blocks(build, args.wall_rounds, args.wall_traces, args.rate, configs) if args.wall_rounds else {}
        for name, build in workloads.items()
    }
    idle = idle_cpu(configs)
    times = sorted(on_end_times(4000))
    p = lambda q: times[min(int(q * len(times)), len(times) - 1)]  # noqa: E731

    def figures(config: str) -> dict[str, object]:
        rag = cpu["rag"][config]
        background = float(rag["background_extra_us_per_trace"])  # type: ignore[arg-type]
        # Under the GIL, ratio ~= app / (app + extra): the app CPU per trace at which this rate costs 10 %.
        extra_per_trace = float(rag["app_thread_extra_us_per_trace"]) + background  # type: ignore[arg-type]
        return {
            "ratio_rag_10pct": rag["ratio"],
            "ratio_non_rag": cpu["non_rag"][config]["ratio"],
            # the app's process only: with worker="process" the scoring process's CPU is not counted
            "worker_cpu_us_per_sampled_trace": round(background / args.rate, 1) if args.rate > 0 else None,
            "app_cpu_us_per_trace_for_ratio_0_90": round(9 * extra_per_trace, 1),
            "rag": rag,
            "non_rag": cpu["non_rag"][config],
            "wall_blocks": {name: got.get(config) for name, got in wall.items()},
            "idle_worker_cpu_us_per_s": idle[config],
        }

    # The top-level figures are those of the README's first snippet (see the docstring).
    primary_config = README_FIRST
    primary = figures(primary_config)
    print(json.dumps({
        "ratio_rag_10pct": primary["ratio_rag_10pct"],
        "ratio_non_rag": primary["ratio_non_rag"],
        "config": primary_config,
        # RagScoringSpanProcessor.on_end; behind the batching the app's thread runs no ragtrace code
        "on_end_p99_us": round(p(0.99), 2),
        "on_end_p50_us": round(p(0.50), 2),
        "on_end_max_us": round(times[-1], 2),
        **{k: v for k, v in primary.items() if k not in ("ratio_rag_10pct", "ratio_non_rag")},
        "by_config": {config: figures(config) for config in configs},
        "twin": {name: got["twin"] for name, got in cpu.items()},  # the estimator's own error: should be 1.00
        # a processor that only forwards: the floor of any design that wraps the exporting processor
        "forward_only": {name: got["forward_only"] for name, got in cpu.items()},
        "rounds": args.rounds,
        "traces_per_round": args.traces,
        "segments": args.segments,
        "wall_rounds": args.wall_rounds,
        "wall_traces_per_block": args.wall_traces,
        "sampling_rate": args.rate,
        "app_work_json_round_trips": args.app_work,
        "exporter": args.exporter,
        "spans_encoded": EncodingExporter.spans_encoded,
        "spans_per_trace": 5,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "targets": {"ratio_rag_10pct": 0.93, "ratio_non_rag": 0.98},  # issue 27
    }))


if __name__ == "__main__":
    main()
