"""LLM judge throughput against an OpenAI-compatible HTTP judge that takes 200 ms per call, tree vs tree.

The judge server is the scripted server of tests/servers/judge.py from THIS bench's tree, run in a process
of its own (so its CPU is nobody's, and an old tree under test needs none of its own test code): every
answer arrives after `--latency` seconds (default 0.2) and is computed from the prompt. Each measurement
runs in a fresh process whose PYTHONPATH is the tree under test (this one, or `--base DIR`, an old
checkout), using only ragtrace's public API, so an old tree runs as it was. The judge's cache is off and
every sample has its own texts: each sample is one real HTTP call. Concurrency is 16 throughout: the
wire allows 16 / 0.2 = 80 samples/s; the target is 72 (90 %). The samples arrive at once, so they go out
in waves of 16: `--samples` defaults to 400 (25 full waves); 200 samples make 13 waves, the last half
empty, which caps the wire at 76.9/s (`wire_limit_for_these_samples`).

Modes (`--modes`):
- judge: `judge_and_score` over N samples gathered at once; the clock covers the gather only.
- processor: the live path in the app's process (`RagScoringSpanProcessor`, worker="thread").
- install: the README's first snippet: a BatchSpanProcessor, then `ragtrace.install(provider, judge=...)`
  (behind the batching, scoring in a scoring process of its own); clock from the first trace to
  `force_flush`. Its judging process is the scoring process: `judging_cpu_ms_per_sample` is the CPU of
  the runner's child processes (from /proc), `app_cpu_ms_per_sample` the app's own.
- serve: `ragtrace serve`'s Gateway (gRPC OTLP in, scored spans out through a BatchSpanProcessor), fed by
  a sender process; the gateway's process judges.

Variants (`--variants`, each a set of LLMJudge keywords; a tree that lacks a keyword is skipped):
- default: LLMJudge's defaults. On this tree an `openai/` model goes over aiohttp (`openai_http.py`) and,
  its server being on 127.0.0.1 (a local model server), streams; on an older tree, litellm streamed.
- default_twin: the same again (an A/A twin: the spread between the two is the machine's noise).
- stream_off / stream_on: `stream=False` / `stream=True`.
- litellm_stream_off / litellm_stream_on: `transport=LiteLLMTransport(...)` (this tree's litellm path).

Every (tree, variant, mode) runs once per round, interleaved, `--rounds` times; figures are per round
and their median. `cpu_ms_per_sample` is the judging process's CPU per judged sample.

    python bench/judge_throughput.py --base c8df8af --rounds 2
    python bench/judge_throughput.py --modes judge --variants default,default_twin,stream_off,litellm_stream_on
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import json
import math
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CONCURRENCY = 16
TARGET = 72.0
WORDS = ("harbour", "glacier", "lantern", "meadow", "quarry", "orchard", "canyon", "beacon", "tundra", "delta")
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "default_twin": {},
    "stream_off": {"stream": False},
    "stream_on": {"stream": True},
    "litellm_stream_off": {"transport": "litellm", "stream": False},
    "litellm_stream_on": {"transport": "litellm", "stream": True},
}
MODES = ("judge", "processor", "install", "serve")


# --- the judge server: this bench's own, in a process of its own ---------------------------------------


def serve(latency: float) -> None:
    """`--serve`: the scripted server; prints its URL, then answers `stats` / `reset` lines on stdin."""
    sys.path.insert(0, str(ROOT))
    from tests.servers.judge import JudgeServer, Valid

    server = JudgeServer()
    server.default = Valid(delay=latency)
    server.start()
    print(server.url, flush=True)
    for line in sys.stdin:
        if line.strip() == "reset":
            with server._lock:
                server.max_in_flight = server.in_flight
                server.requests.clear()
        print(json.dumps({"max_in_flight": server.max_in_flight, "requests": len(server.requests),
                          "disconnects": server.disconnects}), flush=True)


class Server:
    """The scripted judge server's process, seen from the bench."""

    def __init__(self, latency: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(latency)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()

    def ask(self, what: str) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(what + "\n")
        self.process.stdin.flush()
        return dict(json.loads(self.process.stdout.readline()))

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


# --- one measurement, in a process whose ragtrace is the tree under test --------------------------------


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


def make_judge(url: str, variant: dict[str, Any]) -> Any:
    import inspect

    from ragtrace.judges import LLMJudge

    options = dict(variant)
    if options.pop("transport", None) == "litellm":
        from ragtrace.judges.llm.transport import LiteLLMTransport

        options["transport"] = LiteLLMTransport(
            "openai/judge-test", api_base=url + "/v1", api_key="x", stream=options.get("stream")
        )
    accepted = inspect.signature(LLMJudge).parameters
    if "transport" in options and "transport" not in accepted:
        raise SystemExit("skip: this tree has no transport keyword")
    return LLMJudge("openai/judge-test", api_base=url + "/v1", api_key="x", concurrency=CONCURRENCY, cache=False,
                    **options)


def cpu_of_children() -> float:
    """CPU seconds of this process's live descendants (a scoring process), from /proc."""
    import psutil

    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


class Counter:
    """An exporter that counts exported spans and scored retrieval spans."""

    def __init__(self) -> None:
        self.spans = self.scored = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        with self._lock:
            for span in spans:
                self.spans += 1
                if (span.attributes or {}).get("ragtrace.eval.status") == "scored":
                    self.scored += 1
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def send_traces(tracer: Any, samples: int, tag: str) -> None:
    from ragtrace.instrument import generation_span, retrieval_span

    for i in range(samples):
        query, contexts, response = texts(i, tag)
        with tracer.start_as_current_span("rag request"):
            with retrieval_span(query, data_source="bench", tracer=tracer) as retrieval:
                retrieval.record(contexts)
            with generation_span(model="app-model", query=query, tracer=tracer) as generation:
                generation.record(response)


def run_judge(url: str, variant: dict[str, Any], samples: int) -> dict[str, Any]:
    from ragtrace.judges import judge_and_score
    from ragtrace.scoring import ContextPrecision, ContextRecall, ContextRelevance, RagSample

    judge = make_judge(url, variant)
    scorers = (ContextPrecision(), ContextRelevance(), ContextRecall())
    query, contexts, response = texts(0, "warmup")  # outside the clock: lazy imports, the first connection
    asyncio.run(judge_and_score(RagSample(query=query, contexts=contexts, response=response), scorers, judge))
    batch = [RagSample(query=q, contexts=c, response=r) for q, c, r in (texts(i, "judge") for i in range(samples))]

    async def gather() -> list[Any]:
        return await asyncio.gather(*(judge_and_score(s, scorers, judge) for s in batch))

    start, cpu = time.perf_counter(), time.process_time()
    results = asyncio.run(gather())
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    scored = sum(1 for r in results if r.by_name()["context_precision"].score is not None)
    return {"elapsed_s": elapsed, "scored": scored, "judging_cpu_s": cpu}


def run_live(url: str, variant: dict[str, Any], samples: int, mode: str) -> dict[str, Any]:
    """`processor` (worker thread, in the app) or `install` (the README's first snippet)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    import ragtrace

    exported = Counter()
    judge = make_judge(url, variant)
    options: dict[str, Any] = {"concurrency": CONCURRENCY, "max_queue": samples + 10, "score_deadline": 60}
    provider = TracerProvider()
    if mode == "install":
        provider.add_span_processor(BatchSpanProcessor(exported))  # type: ignore[arg-type]
        entry: Any = ragtrace.install(provider, judge=judge, sample_rate=1.0, **options)
    else:
        from ragtrace.live import RagScoringSpanProcessor
        from ragtrace.live.sampling import Sampler

        entry = RagScoringSpanProcessor(
            SimpleSpanProcessor(exported), judge=judge, sampler=Sampler(1.0), worker="thread", **options  # type: ignore[arg-type]
        )
        provider.add_span_processor(entry)
    tracer = provider.get_tracer("bench.judge_throughput")
    send_traces(tracer, 2, "warmup")  # a scoring process starts and warms up outside the clock
    provider.force_flush(120_000)
    exported.spans = exported.scored = 0
    start, cpu, children = time.perf_counter(), time.process_time(), cpu_of_children()
    send_traces(tracer, samples, "live")
    provider.force_flush(300_000)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    children = cpu_of_children() - children
    provider.shutdown()
    judging = children if mode == "install" else cpu
    return {"elapsed_s": elapsed, "scored": exported.scored, "judging_cpu_s": judging, "app_cpu_s": cpu}


def _sender(port: int, samples: int, ready: Any, go: Any) -> None:
    """Child process: the traces encoded first; 2 warm-up traces sent on `ready`'s first set, the rest
    as OTLP/gRPC requests of 50 traces, 4 in flight, once `go` is set."""
    from concurrent import futures

    import grpc
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    send_traces(provider.get_tracer("bench"), 2, "serve-warmup")
    warmup = encode_spans(memory.get_finished_spans()).SerializeToString()
    memory.clear()
    payloads = []
    for start in range(0, samples, 50):
        send_traces(provider.get_tracer("bench"), min(50, samples - start), f"serve{start}")
        payloads.append(encode_spans(memory.get_finished_spans()).SerializeToString())
        memory.clear()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                                 request_serializer=None, response_deserializer=None)
    export(warmup, timeout=300)
    ready.set()
    go.wait()
    with futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda body: export(body, timeout=300), payloads))
    channel.close()


def run_serve(url: str, variant: dict[str, Any], samples: int) -> dict[str, Any]:
    """`ragtrace serve`'s Gateway: OTLP in from a sender process, judged here, counted on the way out."""
    import multiprocessing

    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from ragtrace.gateway import Gateway
    from ragtrace.live.sampling import Sampler
    from ragtrace.live.settings import RagtraceSettings

    exported = Counter()
    settings = RagtraceSettings(sample_rate=1.0, max_queue=samples + 10, score_deadline=300, concurrency=CONCURRENCY)
    judge = make_judge(url, variant)
    gateway = Gateway(
        settings, judge=judge, grpc_port=0, http_port=None, trace_settle=0.0,
        exporting=BatchSpanProcessor(exported, schedule_delay_millis=20),  # type: ignore[arg-type]
        sampler=Sampler(1.0), tick_interval=0.01,
    ).start()
    try:  # what `ragtrace serve` does once its gateway is built (trees before it had nothing of the kind)
        from ragtrace.live.heap import freeze_startup_heap
    except ImportError:
        pass
    else:
        freeze_startup_heap(judge)
    try:
        context = multiprocessing.get_context("spawn")
        ready, go = context.Event(), context.Event()
        sender = context.Process(target=_sender, args=(gateway.grpc_port, samples, ready, go))
        sender.start()
        ready.wait(300)
        until = time.monotonic() + 120
        while exported.scored < 2 and time.monotonic() < until:  # the warm-up traces, outside the clock
            time.sleep(0.01)
        exported.scored = 0
        start, cpu = time.perf_counter(), time.process_time()
        go.set()
        until = time.monotonic() + 300
        while exported.scored < samples and time.monotonic() < until:
            time.sleep(0.005)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        sender.join(60)
    finally:
        gateway.shutdown()
    return {"elapsed_s": elapsed, "scored": exported.scored, "judging_cpu_s": cpu}


def measure(url: str, variant: str, mode: str, samples: int) -> dict[str, Any]:
    """`--run`: one measurement of the ragtrace on this process's PYTHONPATH."""
    options = VARIANTS[variant]
    if mode == "judge":
        found = run_judge(url, options, samples)
    elif mode == "serve":
        found = run_serve(url, options, samples)
    else:
        found = run_live(url, options, samples, mode)
    import ragtrace

    result = {
        "samples_per_s": round(found["scored"] / found["elapsed_s"], 1),
        "cpu_ms_per_sample": round(found["judging_cpu_s"] * 1000 / samples, 2),
        "scored": found["scored"],
        "tree": str(Path(ragtrace.__file__).resolve().parents[1]),
    }
    if "app_cpu_s" in found:
        result["app_cpu_ms_per_sample"] = round(found["app_cpu_s"] * 1000 / samples, 2)
    return result


# --- the bench: trees, variants and modes, interleaved -------------------------------------------------


def tree_dir(spec: str) -> Path:
    """A tree to measure: a directory holding `ragtrace/`, or a git revision of this repo (exported)."""
    path = Path(spec)
    if (path / "ragtrace").is_dir():
        return path.resolve()
    into = Path(tempfile.mkdtemp(prefix="ragtrace-base-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", spec, "ragtrace"], check=True, capture_output=True)
    with tempfile.TemporaryFile() as file:
        file.write(archive.stdout)
        file.seek(0)
        with tarfile.open(fileobj=file) as tar:
            tar.extractall(into, filter="data")
    return into


def one_run(tree: Path, server: Server, variant: str, mode: str, samples: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    server.ask("reset")
    done = subprocess.run(
        [sys.executable, __file__, "--run", mode, "--variant", variant, "--url", server.url, "--samples", str(samples)],
        env=env, capture_output=True, text=True, cwd=tempfile.gettempdir(),
    )
    stats = server.ask("stats")
    if done.returncode != 0:
        last = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["?"]
        return {"error": last[0][:300]}
    result = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    result["max_in_flight"] = stats["max_in_flight"]
    if str(tree) != result.pop("tree"):
        return {"error": f"imported ragtrace from elsewhere than {tree}"}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=400,
                        help="samples per measurement; a multiple of 16 fills the last wave of calls")
    parser.add_argument("--latency", type=float, default=0.2, help="the judge server's delay per call (s)")
    parser.add_argument("--base", help="an old tree: a directory holding ragtrace/, or a git revision")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--modes", default="judge,install,serve", help=f"comma-separated, of {MODES}")
    parser.add_argument("--variants", default="default,default_twin,stream_off,litellm_stream_on,litellm_stream_off",
                        help=f"this tree's, comma-separated, of {tuple(VARIANTS)}")
    parser.add_argument("--base-variants", default="default,stream_off")
    parser.add_argument("--serve", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--run", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        return serve(args.serve)
    if args.run:
        print(json.dumps(measure(args.url, args.variant, args.run, args.samples)))
        return None
    trees = {"new": ROOT}
    if args.base:
        trees["base"] = tree_dir(args.base)
    plan = [("new", v) for v in args.variants.split(",")]
    plan += [("base", v) for v in args.base_variants.split(",")] if args.base else []
    modes = args.modes.split(",")
    server = Server(args.latency)
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        for _ in range(args.rounds):
            for mode in modes:
                for tree, variant in plan:
                    runs.setdefault(f"{tree}:{variant}:{mode}", []).append(
                        one_run(trees[tree], server, variant, mode, args.samples)
                    )
    finally:
        server.stop()
    print(json.dumps({
        "samples": args.samples, "judge_latency_s": args.latency, "concurrency": CONCURRENCY,
        "wire_limit_samples_per_s": CONCURRENCY / args.latency, "target": TARGET,
        # All samples arrive at once: ceil(N / 16) waves of calls, the last one partly empty when N is not
        # a multiple of 16 (200 samples: 13 waves, 76.9/s at most).
        "wire_limit_for_these_samples": round(args.samples / (math.ceil(args.samples / CONCURRENCY) * args.latency), 1),
        "trees": {name: str(path) for name, path in trees.items()},
        "median": summary(runs), "ratios_vs_base_default": ratios(runs, modes), "runs": runs,
        "load_average_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
    }, indent=1))
    return None


def summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, found in runs.items():
        good = [r for r in found if "error" not in r]
        if not good:
            out[key] = found[0]
            continue
        out[key] = {name: round(statistics.median(r[name] for r in good), 2)
                    for name in ("samples_per_s", "cpu_ms_per_sample", "app_cpu_ms_per_sample") if name in good[0]}
    return out


def ratios(runs: dict[str, list[dict[str, Any]]], modes: list[str]) -> dict[str, Any]:
    """Samples/s of each of this tree's variants over the old tree's default, per round (same machine speed)."""
    out: dict[str, Any] = {}
    for mode in modes:
        base = runs.get(f"base:default:{mode}", [])
        for key, found in runs.items():
            if not key.startswith("new:") or not key.endswith(":" + mode):
                continue
            pairs = [(n["samples_per_s"], b["samples_per_s"]) for n, b in zip(found, base, strict=False)
                     if "error" not in n and "error" not in b and b["samples_per_s"]]
            if pairs:
                out[key] = [round(n / b, 2) for n, b in pairs]
    return out


if __name__ == "__main__":
    main()
