"""The live worker's own cost per sampled trace, this tree against an older revision, in one process.

Timings on a shared machine drift by tens of percent within seconds, so two separate runs cannot be
compared. This bench exports `ragtrace/` at `--base` (a git revision) under the package name
`ragtrace_base`, imports both versions side by side and alternates them:

- `extract`: `extract_samples` on the 5-span trace of bench/overhead.py;
- `judge_and_score`: precision and relevance with a judge that answers at once;
- `pipeline`: RagScoringSpanProcessor at 100 % sampling, traces in blocks with a flush, measured as
  the background threads' CPU per trace (from /proc), minus the same workload without ragtrace.

    python bench/worker_ab.py --base HEAD~5          # prints JSON: each figure for base and this tree
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import importlib
import io
import json
import random
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from overhead import NullExporter, ended_spans, rag_trace, thread_cpu

ROOT = Path(__file__).resolve().parents[1]
_IMPORTS = re.compile(r"\b(from|import) ragtrace\b")


def export_base(revision: str, into: Path) -> str:
    """`ragtrace/` at `revision`, as the package `ragtrace_base` under `into`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "ragtrace"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    package = into / "ragtrace_base"
    (into / "ragtrace").rename(package)
    for source in package.rglob("*.py"):
        text = source.read_text()
        text = _IMPORTS.sub(lambda m: f"{m.group(1)} ragtrace_base", text)
        text = text.replace('"ragtrace.', '"ragtrace_base.')
        source.write_text(text)
    sys.path.insert(0, str(into))
    return "ragtrace_base"


def instant_judge(package: str) -> Any:
    scoring = importlib.import_module(package + ".scoring")
    base = importlib.import_module(package + ".judges.base")

    class Instant:
        prompt_version, fused, model = "bench-v1", True, "bench/instant"

        async def judge(self, request: Any) -> Any:
            contexts = [scoring.ContextVerdict(index=i, useful=True, level="high", used=True)
                        for i in range(len(request.sample.contexts))]
            return base.Judgement(scoring.Verdicts(contexts=contexts), scoring.JudgeUsage(calls=1, model=self.model))

    return Instant()


def steps(package: str, spans: list[ReadableSpan], loop: asyncio.AbstractEventLoop) -> dict[str, Callable[[], Any]]:
    capture = importlib.import_module(package + ".capture")
    run = importlib.import_module(package + ".judges.run")
    scoring = importlib.import_module(package + ".scoring")
    sample = capture.extract_samples(spans)[0].sample
    scorers = tuple(s for s in scoring.default_scorers() if s.name != "context_recall")
    judge = instant_judge(package)
    return {
        "extract": lambda: capture.extract_samples(spans),
        "judge_and_score": lambda: loop.run_until_complete(run.judge_and_score(sample, scorers, judge)),
    }


class Pipeline:
    def __init__(self, package: str | None) -> None:
        before = set(threading.enumerate())
        exporting = BatchSpanProcessor(NullExporter(), max_queue_size=100_000)
        self.provider = TracerProvider()
        if package is None:
            self.provider.add_span_processor(exporting)
        else:
            processor = importlib.import_module(package + ".live.processor")
            sampling = importlib.import_module(package + ".live.sampling")
            self.provider.add_span_processor(processor.RagScoringSpanProcessor(
                exporting, judge=instant_judge(package), sampler=sampling.Sampler(1.0), max_queue=100_000))
        self.tracer = self.provider.get_tracer("bench")
        self.threads = [t for t in threading.enumerate() if t not in before]

    def block(self, n: int) -> float:
        """Background CPU seconds for n traces and a flush."""
        before = [thread_cpu(t) for t in self.threads]
        for _ in range(n):
            rag_trace(self.tracer)
        self.provider.force_flush(60_000)
        return sum(thread_cpu(t) - b for t, b in zip(self.threads, before, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="git revision to compare this tree against")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = export_base(args.base, Path(tmp))
        packages = {"base": base, "this": "ragtrace"}
        spans, loop = ended_spans(lambda tracer: rag_trace(tracer, 1)), asyncio.new_event_loop()
        timed = {name: steps(package, spans, loop) for name, package in packages.items()}
        samples: dict[tuple[str, str], list[float]] = {(v, s): [] for v in packages for s in timed["base"]}
        for r in range(args.rounds):
            for version in (("base", "this") if r % 2 else ("this", "base")):
                for step, fn in timed[version].items():
                    samples[(version, step)].append(timeit.timeit(fn, number=200) / 200 * 1e6)
        pipelines = {"none": Pipeline(None), **{name: Pipeline(package) for name, package in packages.items()}}
        cpu: dict[str, float] = dict.fromkeys(pipelines, 0.0)
        traces = 0
        for _ in range(args.rounds):
            order = list(pipelines)
            random.shuffle(order)
            for name in order:
                cpu[name] += pipelines[name].block(300)
            traces += 300
        for pipeline in pipelines.values():
            pipeline.provider.shutdown()
    report: dict[str, Any] = {}
    for step in timed["base"]:
        base_us, this_us = samples[("base", step)], samples[("this", step)]
        report[step] = {
            "base_us": round(min(base_us), 1),
            "this_us": round(min(this_us), 1),
            "this_over_base_median": round(statistics.median(t / b for t, b in zip(this_us, base_us, strict=True)), 3),
        }
    worker = {name: (cpu[name] - cpu["none"]) / traces * 1e6 for name in packages}
    report["pipeline_worker_cpu_us_per_sampled_trace"] = {
        "base": round(worker["base"], 1), "this": round(worker["this"], 1),
        "this_over_base": round(worker["this"] / worker["base"], 3) if worker["base"] > 0 else None,
    }
    report.update({"base_revision": args.base, "rounds": args.rounds, "cpus": os.cpu_count(),
                   "load_average_1m": round(os.getloadavg()[0], 2)})
    print(json.dumps(report))


if __name__ == "__main__":
    main()
