"""What pairing by evidence costs the worker: `extract_samples` CPU per trace, with and without the
generations' inputs, in one process.

Traces of k retrievals and k generations (interleaved, each generation's prompt quoting its own five
500-character contexts and the question, as a RAG prompt does) are captured twice: as recorded
("evidence": the inputs are read and searched) and with the generations' input attributes removed
("time only": no evidence, so pairing falls back to time order, which is all the old rule did). The
variants alternate in shuffled rounds; the ratio is the price of reading the evidence. Capture runs on
the worker, off the app's thread.

    python bench/capture_pairing.py                # k = 1, 4, 16
    python bench/capture_pairing.py --k 2 --rounds 20
    python bench/capture_pairing.py --base ../main  # also another checkout's capture, same traces, same run

With `--base DIR`, DIR's own copy of this script measures DIR's capture code in a child process, alternating
with this tree's in rounds (each side in a process of its own: one process cannot import two `ragtrace`s);
`vs_base` is this tree's median over the base's, per variant. Also measured: `span_role` over every span
of the traces (the hot-path classification), per span.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

from ragtrace.capture import extract_samples, span_role

INPUT_KEYS = ("llm.input_messages.0.message.content", "llm.input_messages.1.message.content", "input.value")


def trace_spans(k: int, seed: int) -> list[ReadableSpan]:
    """One trace: k retrievals (OpenInference), then their k LLM calls in a shuffled order."""
    rng = random.Random(seed)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    words = ["kettle", "warranty", "return", "refund", "support", "weekday", "litre", "boil", "minute", "purchase"]
    root = tracer.start_span("agent", start_time=0)
    context = set_span_in_context(root)
    questions = [f"question {i}: " + " ".join(rng.choices(words, k=8)) for i in range(k)]
    contexts = [[f"doc {i}.{j} " + " ".join(rng.choices(words, k=80))[:500] for j in range(5)] for i in range(k)]
    t = 1
    for i in range(k):
        attrs = {"openinference.span.kind": "RETRIEVER", "input.value": questions[i]}
        for j, text in enumerate(contexts[i]):
            attrs[f"retrieval.documents.{j}.document.content"] = text
        tracer.start_span(f"retrieve {i}", context=context, attributes=attrs, start_time=t).end(end_time=t + 1)
        t += 2
    for i in rng.sample(range(k), k):
        prompt = "Context:\n" + "\n".join(contexts[i]) + f"\nQuestion: {questions[i]}\nAnswer:"
        attrs = {"openinference.span.kind": "LLM", "llm.model_name": "m",
                 "llm.input_messages.0.message.role": "system", "llm.input_messages.0.message.content": "Be brief.",
                 "llm.input_messages.1.message.role": "user", "llm.input_messages.1.message.content": prompt,
                 "input.value": json.dumps({"messages": [{"role": "user", "content": prompt}]}),
                 "llm.output_messages.0.message.role": "assistant",
                 "llm.output_messages.0.message.content": f"answer {i}"}
        tracer.start_span(f"llm {i}", context=context, attributes=attrs, start_time=t).end(end_time=t + 1)
        t += 2
    root.end(end_time=t)
    return list(exporter.get_finished_spans())


def without_inputs(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    stripped = []
    for span in spans:
        attrs = dict(span.attributes or {})
        if attrs.get("openinference.span.kind") == "LLM":
            attrs = {key: value for key, value in attrs.items() if key not in INPUT_KEYS}
        stripped.append(ReadableSpan(name=span.name, context=span.context, parent=span.parent, attributes=attrs,
                                     start_time=span.start_time, end_time=span.end_time))
    return stripped


def measure(k: int, traces: int, rounds: int) -> dict[str, object]:
    variants = {"evidence": [trace_spans(k, seed) for seed in range(traces)]}
    variants["time only"] = [without_inputs(spans) for spans in variants["evidence"]]
    rules = {name: sorted({c.pairing for spans in batch for c in extract_samples(spans)})
             for name, batch in variants.items()}
    per_trace: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for _ in range(rounds):
        random.shuffle(names)
        for name in names:
            started = time.process_time()
            for spans in variants[name]:
                extract_samples(spans)
            per_trace[name].append((time.process_time() - started) / traces * 1e6)
    evidence, time_only = (statistics.median(per_trace[n]) for n in ("evidence", "time only"))
    spans = [span for batch in variants["evidence"] for span in batch]
    per_span = []
    for _ in range(rounds):
        started = time.process_time()
        for span in spans:
            span_role(span)
        per_span.append((time.process_time() - started) / len(spans) * 1e9)
    return {"k": k, "us_per_trace_evidence": round(evidence, 1), "us_per_trace_time_only": round(time_only, 1),
            "ratio": round(evidence / time_only, 2), "ns_per_span_role": round(statistics.median(per_span)),
            "rules": rules}


_KEYS = ("us_per_trace_evidence", "us_per_trace_time_only", "ns_per_span_role")


def against_base(base: Path, ks: list[int], traces: int, rounds: int) -> list[dict[str, object]]:
    """This tree and `base` measured alternately (one round each, `rounds` times, order shuffled), medians
    per side and the ratio this/base of each figure."""
    script = base / "bench" / "capture_pairing.py"
    here = Path(__file__).resolve()
    env = {**os.environ, "PYTHONPATH": ""}
    figures: dict[str, dict[int, dict[str, list[float]]]] = {"this": {}, "base": {}}
    for _ in range(rounds):
        sides = [("this", here, Path(__file__).resolve().parents[1]), ("base", script, base)]
        random.shuffle(sides)
        for side, path, cwd in sides:
            argv = [sys.executable, str(path), "--k", *map(str, ks), "--traces", str(traces), "--rounds", "1"]
            out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=cwd,
                                 env={**env, "PYTHONPATH": str(cwd)}).stdout
            for row in json.loads(out):
                slot = figures[side].setdefault(int(row["k"]), {})
                for key in _KEYS:
                    if key in row:
                        slot.setdefault(key, []).append(float(row[key]))
    results: list[dict[str, object]] = []
    for k in ks:
        row: dict[str, object] = {"k": k}
        for key in _KEYS:
            mine, theirs = figures["this"][k].get(key), figures["base"][k].get(key)
            if not mine or not theirs:
                continue
            row[key] = {"this": round(statistics.median(mine), 1), "base": round(statistics.median(theirs), 1),
                        "vs_base": round(statistics.median(mine) / statistics.median(theirs), 3)}
        results.append(row)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--traces", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--base", type=Path, help="another checkout (e.g. main) to measure alongside this one")
    args = parser.parse_args()
    if args.base is not None:
        print(json.dumps(against_base(args.base.resolve(), args.k, args.traces, args.rounds), indent=1))
        return
    print(json.dumps([measure(k, args.traces, args.rounds) for k in args.k], indent=1))


if __name__ == "__main__":
    main()
