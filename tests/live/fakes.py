"""Test helpers for the live pipeline: a scripted Judge and real-tracer RAG trace builders.

The judge implements the Judge protocol; its behaviour per sample is scripted by the query's prefix
(`fast:`, `slow:`, `hang:`, `timeout:`, `error:`, `invalid:`, `crash:`, `exit:`, `interrupt:`), so one
trace can be slow and the next one fail, as on live traffic.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Literal

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Span, Tracer, set_span_in_context

from ragtrace._state import PerProcessState
from ragtrace.judges.base import Judgement, JudgeRequest
from ragtrace.judges.errors import JudgeInvalidOutput, JudgeTimeout, RateLimited
from ragtrace.live.exporter import RagScoringSpanExporter, ScoringBatchSpanProcessor
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from ragtrace.scoring import Aspect, ClaimVerdict, ContextVerdict, JudgeUsage, Verdicts

BEHAVIOURS = ("fast", "slow", "hang", "timeout", "error", "invalid", "crash", "exit", "interrupt")


class ScriptedJudge(PerProcessState):
    """A fused in-process judge: verdicts say context i is useful iff its text contains 'good'.

    It pickles, so worker="process" tests run it in the scoring process (its call counts stay there).
    """

    model = "scripted/judge"
    prompt_version = "test-v1"
    fused = True

    def __init__(self, default: str = "fast", slow_s: float = 0.05) -> None:
        self.default = default
        self.slow_s = slow_s
        self.calls = 0
        self.suppressed: list[bool] = []
        self._lock = threading.Lock()

    def behaviour(self, request: JudgeRequest) -> str:
        head = request.sample.query.split(":", 1)[0]
        return head if head in BEHAVIOURS else self.default

    async def judge(self, request: JudgeRequest) -> Judgement:
        with self._lock:
            self.calls += 1
        self.suppressed.append(bool(otel_context.get_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY)))
        usage = JudgeUsage(calls=1, input_tokens=100, output_tokens=20, cost_usd=0.001, latency_ms=1.0,
                           model=self.model, prompt_version=self.prompt_version)
        kind = self.behaviour(request)
        if kind == "slow":
            await asyncio.sleep(self.slow_s)
        elif kind == "hang":
            await asyncio.sleep(3600)
        elif kind == "timeout":
            raise JudgeTimeout("judge took too long", usage)
        elif kind == "error":
            raise RateLimited("429 from the judge", usage)
        elif kind == "invalid":
            raise JudgeInvalidOutput("judge answer failed validation twice", usage)
        elif kind == "crash":
            raise RuntimeError("judge bug")
        elif kind == "exit":  # a library that calls sys.exit() on an error it cannot handle
            raise SystemExit(2)
        elif kind == "interrupt":
            raise KeyboardInterrupt
        contexts = [
            ContextVerdict(index=i, useful="good" in d.content, level="high" if "good" in d.content else "none",
                           used="good" in d.content, reason="scripted")
            for i, d in enumerate(request.sample.contexts)
        ]
        claims = None
        if Aspect.CLAIMS in request.aspects:
            claims = [ClaimVerdict(claim="c", supported=True, context_indices=[0])]
        return Judgement(Verdicts(contexts=contexts, missing=[], claims=claims), usage)


class LenientJudge(ScriptedJudge):
    """Another judge: it finds every context useful (as if each said 'good'). Swapped in for ScriptedJudge,
    it scores systematically higher, and disagrees with people on every useless context."""

    model = "scripted/lenient"

    async def judge(self, request: JudgeRequest) -> Judgement:
        contexts = tuple(d.model_copy(update={"content": "good " + d.content}) for d in request.sample.contexts)
        sample = request.sample.model_copy(update={"contexts": contexts})
        return await super().judge(JudgeRequest(sample, request.aspects, request.reference))


class Counting:
    """Records every span handed on, and the flushes and shutdowns."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []
        self._lock = threading.Lock()
        self.flushes = 0
        self.shutdowns = 0

    def _record(self, spans: Sequence[ReadableSpan]) -> None:
        with self._lock:
            self.spans.extend(spans)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.flushes += 1
        return True

    def shutdown(self) -> None:
        self.shutdowns += 1

    def ids(self) -> list[int]:
        with self._lock:
            return [s.context.span_id for s in self.spans if s.context is not None]

    def by_name(self, name: str) -> list[ReadableSpan]:
        with self._lock:
            return [s for s in self.spans if s.name == name]


class CountingProcessor(Counting, SpanProcessor):
    """The 'exporting' processor of the unit tests: records every span handed to it."""

    def on_end(self, span: ReadableSpan) -> None:
        self._record((span,))


class CountingExporter(Counting, SpanExporter):
    """The exporter behind `RagScoringSpanExporter` in the unit tests: records every span exported."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._record(spans)
        return SpanExportResult.SUCCESS


class SlowExporter(CountingExporter):
    """A counting exporter that takes `delay_s` a call, as one over a network does."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        time.sleep(self.delay_s)
        return super().export(spans)


def documents(texts: Sequence[str]) -> str:
    return json.dumps([{"id": f"d{i}", "score": 1.0 - i / 10, "content": t} for i, t in enumerate(texts)])


def output_messages(answer: str) -> str:
    return json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": answer}]}])


def rag_trace(
    tracer: Tracer,
    query: str = "fast: what is good?",
    docs: Sequence[str] = ("good doc", "bad doc"),
    answer: str = "a good answer",
    *,
    retrievals: int = 1,
    plain: int = 1,
    end_root: bool = True,
    ground_truth: str | None = None,
) -> list[int]:
    """One request: root, `retrievals` x (retrieval + chat), `plain` other spans. Returns the span ids."""
    return open_rag_trace(
        tracer, query, docs, answer, retrievals=retrievals, plain=plain, end_root=end_root, ground_truth=ground_truth
    )[1]


def open_rag_trace(
    tracer: Tracer,
    query: str = "fast: what is good?",
    docs: Sequence[str] = ("good doc", "bad doc"),
    answer: str = "a good answer",
    *,
    retrievals: int = 1,
    plain: int = 1,
    end_root: bool = False,
    ground_truth: str | None = None,
) -> tuple[Span, list[int]]:
    """Like `rag_trace`, and hands back the root span (left open unless `end_root`)."""
    ids: list[int] = []
    root = tracer.start_span("rag request")
    if ground_truth is not None:
        root.set_attribute("ragtrace.ground_truth", ground_truth)
    ids.append(root.get_span_context().span_id)
    ctx = set_span_in_context(root)
    for _ in range(retrievals):
        with tracer.start_as_current_span("retrieve", context=ctx) as r:
            r.set_attribute("gen_ai.operation.name", "retrieval")
            r.set_attribute("gen_ai.retrieval.query.text", query)
            r.set_attribute("gen_ai.retrieval.documents", documents(docs))
            ids.append(r.get_span_context().span_id)
        with tracer.start_as_current_span("chat", context=ctx) as g:
            g.set_attribute("gen_ai.operation.name", "chat")
            g.set_attribute("gen_ai.output.messages", output_messages(answer))
            ids.append(g.get_span_context().span_id)
    for i in range(plain):
        with tracer.start_as_current_span(f"step {i}", context=ctx) as s:
            s.set_attribute("step", i)
            ids.append(s.get_span_context().span_id)
    if end_root:
        root.end()
    return root, ids


def plain_trace(tracer: Tracer, n: int = 3) -> list[int]:
    """A trace with no RAG spans."""
    ids = []
    with tracer.start_as_current_span("http request") as root:
        ids.append(root.get_span_context().span_id)
        for i in range(n - 1):
            with tracer.start_as_current_span(f"db {i}") as s:
                ids.append(s.get_span_context().span_id)
    return ids


def provider_with(processor: SpanProcessor) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(processor)
    return provider


Placement = Literal["processor", "exporter"]


class Rig:
    """Scoring (100 % sampling, fast ticks) on a real provider, handing spans to a counter.

    placement="processor": a RagScoringSpanProcessor in front of a counting processor (`batched`: in front
    of the SDK's BatchSpanProcessor with its default queue, 10 ms batches, exporting to a counting
    exporter); "exporter": a ScoringBatchSpanProcessor (10 ms batches) with a RagScoringSpanExporter in
    front of a counting exporter. Either way `proc` is the scoring face (its counts) and `out` the counter
    at the end, where the spans are exported.
    """

    def __init__(
        self, judge: ScriptedJudge | None = None, placement: Placement = "processor", *, batched: bool = False,
        **options: object
    ) -> None:
        self.judge = judge or ScriptedJudge()
        options.setdefault("sampler", Sampler(rate=1.0))
        options.setdefault("tick_interval", 0.01)
        self.out: Counting
        entry: SpanProcessor
        if placement == "exporter":
            self.out = CountingExporter()
            self.scoring = RagScoringSpanExporter(self.out, judge=self.judge, **options)
            self.proc = self.scoring
            entry = ScoringBatchSpanProcessor(self.scoring, schedule_delay_millis=10)
        elif batched:
            self.out = CountingExporter()
            batching = BatchSpanProcessor(self.out, schedule_delay_millis=10)  # the SDK's default queue
            self.proc = entry = RagScoringSpanProcessor(batching, judge=self.judge, **options)  # type: ignore[arg-type]
        else:
            self.out = CountingProcessor()
            self.proc = entry = RagScoringSpanProcessor(self.out, judge=self.judge, **options)  # type: ignore[arg-type]
        self.placement = placement
        # Spans reach `out` through an SDK BatchSpanProcessor, which drops what ends after its shutdown.
        self.batched = batched or placement == "exporter"
        self.provider: TracerProvider = provider_with(entry)
        self.tracer: Tracer = self.provider.get_tracer("test")

    def end(self, span: ReadableSpan) -> None:
        """Hand over a span as the SDK would: to the processor's on_end, or in a batch to the exporter."""
        if self.placement == "exporter":
            self.scoring.export([span])
        else:
            self.proc.on_end(span)

    def flush(self, timeout_millis: int = 2000) -> bool:
        return self.provider.force_flush(timeout_millis)

    def exported_once(self, ids: list[int]) -> bool:
        counts = Counter(self.out.ids())
        return all(counts[i] == 1 for i in ids) and len(counts) == len(self.out.ids())

    def settle(self, n: int, timeout: float = 10.0) -> None:
        """Wait for n exported spans (or the timeout), then flush."""
        end = time.monotonic() + timeout
        while len(self.out.spans) < n and time.monotonic() < end:
            time.sleep(0.01)
        assert self.flush()

    def assert_exactly_once(self, ids: list[int]) -> None:
        counts = Counter(self.out.ids())
        assert all(counts[i] == 1 for i in ids)
        assert sum(counts.values()) == len(ids)
        assert self.proc.held_spans == 0 and self.proc.open_traces == 0

    def retrieval_status(self) -> dict[int, tuple[object, object]]:
        """(ragtrace.eval.status, ragtrace.eval.error) of each exported retrieval span, by span id."""
        status = {}
        for span in self.out.spans:
            if span.name == "retrieve" and span.context is not None:
                attrs = span.attributes or {}
                status[span.context.span_id] = (attrs.get("ragtrace.eval.status"), attrs.get("ragtrace.eval.error"))
        return status

    def linked_status(self) -> dict[int, set[tuple[str, object, object]]]:
        """Link mode: (span name, ragtrace.eval.status, ragtrace.eval.error) of the evaluation spans linked
        to each exported retrieval span, by the retrieval span's id."""
        status: dict[int, set[tuple[str, object, object]]] = {}
        for span in self.out.spans:
            if span.name == "retrieve" and span.context is not None:
                status.setdefault(span.context.span_id, set())
        for span in self.out.spans:
            if span.name.partition(" ")[0] == "evaluation" and span.links:
                attrs = span.attributes or {}
                status.setdefault(span.links[0].context.span_id, set()).add(
                    (span.name, attrs.get("ragtrace.eval.status"), attrs.get("ragtrace.eval.error")))
        return status

    def close(self) -> None:
        self.provider.shutdown()


def fork_running(check: Callable[[], bool]) -> tuple[int, int]:
    """Fork; the child runs `check`, reports its verdict on a pipe and exits. (pid, read end) for
    `child_verdict`."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            ok = check()
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    return pid, read


def child_verdict(pid: int, read: int, timeout: float = 30.0) -> bool:
    """The verdict of a child `fork_running` started; a child that hangs is killed and fails."""
    answered, _, _ = select.select([read], [], [], timeout)
    if not answered:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    verdict = bool(answered) and os.read(read, 1) == b"1"
    os.close(read)
    return verdict
