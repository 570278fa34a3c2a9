"""Instructions the app's process executes per trace under the README's first snippet with worker="process",
counted by valgrind's callgrind: a figure that does not move with the machine's load, unlike CPU time.

`ragtrace.install(provider, judge=..., sample_rate=RATE, worker="process")` on a provider exporting through a
BatchSpanProcessor to a null exporter; the traces of bench/overhead.py (`rag`: root, 2 plain children, a
retrieval, a chat span; `plain`: 5 spans and no RAG span). Trace ids come from a seeded generator, so the
same traces are sampled in every run. Each figure is (instructions of the app's process running `repeat`
blocks of `traces` traces, each block flushed and settled until ragtrace holds nothing) minus (the same with
one block), over the extra traces: the app's thread, the batching thread and ragtrace's worker thread
together; the scoring process runs natively (valgrind does not follow it) and is not counted. With
`--base DIR`, DIR's ragtrace runs the same driver and `vs_base` is this tree's count over DIR's.

    python bench/admission_cost.py --base /work/wt-head --without
    python bench/admission_cost.py --kinds rag --rate 1.0     # every trace sampled: the per-sampled cost
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from callgrind_count import count_instructions

HERE = Path(__file__).resolve().parents[1]
# The driver: the judge is this file's `Judge`, imported by the scoring process from the bench directory.
_CHILD = """
import random, sys, time
sys.path.append({bench!r})
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
import ragtrace
from admission_cost import Judge, NullExporter, plain_trace, rag_trace

class Seeded(IdGenerator):
    def __init__(self): self.r = random.Random(7)
    def generate_span_id(self): return self.r.getrandbits(64)
    def generate_trace_id(self): return self.r.getrandbits(128)

provider = TracerProvider(id_generator=Seeded())
batching = BatchSpanProcessor(NullExporter(), max_queue_size=100_000)
provider.add_span_processor(batching)
installed = ragtrace.install(provider, judge=Judge(), sample_rate={rate}, worker="process") if {install} else None
tracer = provider.get_tracer("bench")
build = rag_trace if {kind!r} == "rag" else plain_trace
for _ in range({repeat}):
    for _ in range({traces}):
        build(tracer)
    BatchSpanProcessor.force_flush(batching, 60_000)
    deadline = time.monotonic() + 120
    while installed is not None and installed.held_spans and time.monotonic() < deadline:
        time.sleep(0.01)
provider.shutdown()
"""


# bench/overhead.py's traces, repeated here: importing overhead.py would put this tree first on sys.path,
# which the scoring process of a --base run inherits.
DOCS = json.dumps([
    {"id": f"doc-{i}", "score": 0.9 - i / 10, "content": f"passage {i} " + "lorem ipsum dolor sit amet " * 8}
    for i in range(5)
])
ANSWER = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "an answer " * 20}]}])


def rag_trace(tracer: Any) -> None:
    from opentelemetry.trace import set_span_in_context

    with tracer.start_as_current_span("request") as root:
        ctx = set_span_in_context(root)
        with tracer.start_as_current_span("auth", context=ctx):
            pass
        with tracer.start_as_current_span("retrieve", context=ctx) as r:
            r.set_attribute("gen_ai.operation.name", "retrieval")
            r.set_attribute("gen_ai.retrieval.query.text", "what is lorem ipsum?")
            r.set_attribute("gen_ai.retrieval.documents", DOCS)
        with tracer.start_as_current_span("chat", context=ctx) as g:
            g.set_attribute("gen_ai.operation.name", "chat")
            g.set_attribute("gen_ai.output.messages", ANSWER)
        with tracer.start_as_current_span("render", context=ctx):
            pass


def plain_trace(tracer: Any) -> None:
    from opentelemetry.trace import set_span_in_context

    with tracer.start_as_current_span("request") as root:
        ctx = set_span_in_context(root)
        for name in ("auth", "db query", "cache", "render"):
            with tracer.start_as_current_span(name, context=ctx) as s:
                s.set_attribute("db.system", "postgresql")


class Judge:
    """Every context useful, high and used, at once."""

    prompt_version = "bench-v1"
    fused = True
    model = "bench/fixed"

    async def judge(self, request: object) -> object:
        from ragtrace.judges.base import Judgement
        from ragtrace.scoring import ContextVerdict, JudgeUsage, Verdicts

        contexts = [ContextVerdict(index=i, useful=True, level="high", used=True)
                    for i in range(len(request.sample.contexts))]  # type: ignore[attr-defined]
        return Judgement(Verdicts(contexts=contexts), JudgeUsage(calls=1, model=self.model))


class NullExporter:
    def export(self, spans: object) -> object:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def instructions(tree: Path, kind: str, rate: float | None, traces: int, repeat: int) -> int:
    """Instructions of the app's process running `repeat` settled blocks of `traces` traces with `tree`'s
    ragtrace installed (`rate` None: without ragtrace)."""
    code = _CHILD.format(bench=str(HERE / "bench"), kind=kind, rate=rate, install=rate is not None, traces=traces,
                         repeat=repeat)
    return count_instructions(code, tree)


def per_trace(tree: Path, kind: str, rate: float | None, traces: int, repeat: int) -> float:
    warm = instructions(tree, kind, rate, traces, 1)
    many = instructions(tree, kind, rate, traces, repeat)
    return (many - warm) / ((repeat - 1) * traces)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", default=["rag", "plain"], choices=("rag", "plain"))
    parser.add_argument("--rate", type=float, default=0.1)
    parser.add_argument("--traces", type=int, default=200, help="traces per settled block")
    parser.add_argument("--repeat", type=int, default=4, help="blocks in the counted run (the other runs one)")
    parser.add_argument("--base", type=Path, help="another checkout (e.g. main) to count alongside this one")
    parser.add_argument("--without", action="store_true",
                        help="also count the app without ragtrace: `ratio` (and `base_ratio`) is that count over "
                             "the count with it, the throughput ratio of a CPU-bound app in instructions")
    args = parser.parse_args()
    rows = []
    for kind in args.kinds:
        row: dict[str, object] = {"kind": kind, "rate": args.rate}
        mine = per_trace(HERE, kind, args.rate, args.traces, args.repeat)
        row["instructions_per_trace"] = round(mine)
        without = per_trace(HERE, kind, None, args.traces, args.repeat) if args.without else None
        if without is not None:
            row["without_ragtrace"] = round(without)
            row["ratio"] = round(without / mine, 4)
        if args.base is not None:
            theirs = per_trace(args.base.resolve(), kind, args.rate, args.traces, args.repeat)
            row["base"] = round(theirs)
            row["vs_base"] = round(mine / theirs, 4)
            if without is not None:
                row["base_ratio"] = round(without / theirs, 4)
        rows.append(row)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
