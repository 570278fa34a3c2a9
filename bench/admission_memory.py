"""What the batching thread pays per span of a trace that is not sampled, against the sampling decision alone,
with the spans in the CPU's cache and out of it.

Behind the batching (`install()`'s placement), admission reads spans the app's thread wrote on another core,
a batch at a time, most of them no longer in any cache. Two passes over the same kind of unsampled spans
(the admission of a `RagScoringSpanExporter` sampling nothing: every span goes on):

- `admit`: `Admission.admit(batch)`, what the exporter face runs on every batch;
- `decision`: the sampling test alone, `span._context.trace_id & mask < bound` for each span, in a list
  comprehension: the least any per-span sampling decision reads.

`warm`: the same 512-span batch again and again (everything in cache, what a timeit sees); `cold`: a fresh
batch each time, out of spans made in order before the run (a working set far beyond the caches), with a
64 MiB buffer written between batches so that the next batch starts cold. The passes alternate batch by
batch, each on spans of its own, and `ratio` is `admit` over `decision` in the same setting: what the
admission loop costs beyond the decision it must make.

    python bench/admission_memory.py              # prints JSON
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from opentelemetry.sdk.trace import ReadableSpan
from overhead import FixedJudge, NullExporter, ended_spans, plain_trace, rag_trace

from ragtrace.live import RagScoringSpanExporter
from ragtrace.live.sampling import TRACE_ID_MASK, Sampler

BATCH = 512


def nothing_sampled() -> RagScoringSpanExporter:
    """The exporter face as install() builds it, sampling nothing: its admission lets every span go on."""
    return RagScoringSpanExporter(NullExporter(), judge=FixedJudge(), sampler=Sampler(0.0), worker="thread")


def decision(batch: Sequence[ReadableSpan], bound: int = 0) -> list[bool]:
    return [(span._context.trace_id & TRACE_ID_MASK) < bound for span in batch]  # type: ignore[union-attr]


def timed(run: Callable[[Sequence[ReadableSpan]], object], batch: Sequence[ReadableSpan]) -> float:
    """ns a span of one pass."""
    started = time.perf_counter_ns()
    run(batch)
    return (time.perf_counter_ns() - started) / len(batch)


def measure(kind: str, batches: int) -> dict[str, object]:
    build = rag_trace if kind == "rag" else plain_trace
    traces = 2 * batches * BATCH // 5 + 1
    spans = ended_spans(lambda tracer: [build(tracer) for _ in range(traces)])
    chunks = [spans[i:i + BATCH] for i in range(0, 2 * batches * BATCH, BATCH)]
    scoring = nothing_sampled()
    passes: dict[str, Callable[[Sequence[ReadableSpan]], object]] = {
        "admit": scoring.scoring.admission.admit, "decision": decision,
    }
    thrash = bytearray(64 << 20)
    cold: dict[str, list[float]] = {name: [] for name in passes}
    warm: dict[str, list[float]] = {name: [] for name in passes}
    gc.disable()
    try:
        for i in range(batches):
            for j, (name, run) in enumerate(passes.items()):
                thrash[:: 64] = bytes(len(thrash) // 64)  # every cache line of the buffer written
                cold[name].append(timed(run, chunks[2 * i + j]))
        for _ in range(batches):
            for name, run in passes.items():
                warm[name].append(timed(run, chunks[0]))
    finally:
        gc.enable()
        scoring.shutdown()
    out: dict[str, object] = {"kind": kind}
    for setting, got in (("warm", warm), ("cold", cold)):
        ns = {name: statistics.median(values) for name, values in got.items()}
        out[setting] = {**{f"{name}_ns_per_span": round(v, 1) for name, v in ns.items()},
                        "ratio": round(ns["admit"] / ns["decision"], 3),
                        "beyond_decision_ns_per_span": round(ns["admit"] - ns["decision"], 1)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=150, help="cold batches per pass (each 512 spans)")
    parser.add_argument("--kinds", nargs="+", default=["rag", "plain"], choices=("rag", "plain"))
    args = parser.parse_args()
    print(json.dumps([measure(kind, args.batches) for kind in args.kinds], indent=1))


if __name__ == "__main__":
    main()
