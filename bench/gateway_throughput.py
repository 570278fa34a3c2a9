"""How much one `ragtrace serve` replica carries here: scored samples/s and pass-through spans/s.

Setup, all over real gRPC on 127.0.0.1: a sender in a separate process (its own GIL, like an upstream
collector) exports pre-encoded OTLP requests (100 traces each, 4 requests in flight) to a `Gateway`,
which forwards through the SDK's BatchSpanProcessor + OTLPSpanExporter to a counting OTLP sink. The clock
runs from the first request to the last span arriving at the sink, so judging, enrichment and export
are all inside it. Workload: the 5-span trace of bench/overhead.py (root, 2 plain children, retrieval
with 5 documents, chat), with texts unique to each trace (no embedding-cache hits); non-RAG traffic is
bench/overhead.py's 5-span trace without GenAI attributes.

Figures:
- passthrough_unsampled: non-RAG traces at sample rate 0 (the cheap path: convert + forward).
- passthrough_sampled_not_rag: non-RAG traces at sample rate 1 (each trace is held, closed, not_rag).
- instant_judge: RAG traces at rate 1, a judge that answers at once: the gateway's own ceiling.
- local_judge: RAG traces at rate 1 with `--judge local` (MiniLM on onnxruntime): what judging costs on
  this CPU.

The spool (`--spool-dir`): `passthrough_unsampled` and `instant_judge` run again with a spool in a fresh
temporary directory, synced to disk on every request (`spool_full`, the default) and on process crashes
only (`spool_normal`); `spool_cost` gives each one's throughput as a ratio of the run without a spool.

    python bench/gateway_throughput.py            # prints JSON (a few minutes: the local judge is slow)
    python bench/gateway_throughput.py --quick    # smaller runs
    python bench/gateway_throughput.py --spool --repeat 3    # spool on vs off only, 3 interleaved rounds
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from ragtrace.gateway import Gateway
from ragtrace.gateway.spool import Spool, Synchronous
from ragtrace.judges.base import Judge
from ragtrace.live.sampling import Sampler
from ragtrace.live.settings import RagtraceSettings

TRACES_PER_REQUEST = 100
SPANS_PER_TRACE = 5
IN_FLIGHT = 4
RUNS = ("passthrough_unsampled", "passthrough_sampled_not_rag", "instant_judge", "local_judge")
SPOOLED = ("passthrough_unsampled", "instant_judge")  # also run with a spool (judging would hide its cost)
SPOOL_MODES: tuple[Synchronous, ...] = ("full", "normal")


class Sink(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    """The next hop: counts spans, decodes nothing else (protobuf parsing happens in C)."""

    def __init__(self) -> None:
        self.spans = 0
        self.cond = threading.Condition()

    def Export(self, request: Any, context: Any) -> Any:
        n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        with self.cond:
            self.spans += n
            self.cond.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()


def _send(port: int, traces: int, rag: bool, ready: Any, go: Any) -> None:
    """Child process: build and encode the requests first, then send them as fast as the gateway takes them."""
    import overhead
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    payloads = []
    for start in range(0, traces, TRACES_PER_REQUEST):
        for number in range(start, min(start + TRACES_PER_REQUEST, traces)):
            overhead.rag_trace(tracer, number) if rag else overhead.plain_trace(tracer)
        payloads.append(encode_spans(memory.get_finished_spans()).SerializeToString())
        memory.clear()
    ready.set()
    go.wait()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)])
    export = channel.unary_unary(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        request_serializer=None, response_deserializer=None,
    )
    with futures.ThreadPoolExecutor(IN_FLIGHT) as pool:
        list(pool.map(lambda body: export(body, timeout=120), payloads))
    channel.close()


def run(
    label: str, traces: int, rag: bool, rate: float, judge: str | Judge, spool: Synchronous | None = None
) -> dict[str, Any]:
    if spool is None:
        return _run(label, traces, rag, rate, judge, None)
    with tempfile.TemporaryDirectory(prefix="ragtrace-spool-bench-") as directory:
        result = _run(f"{label}+spool_{spool}", traces, rag, rate, judge, Spool(directory, 8 << 30, synchronous=spool))
        return result


def _run(label: str, traces: int, rag: bool, rate: float, judge: str | Judge, spool: Spool | None) -> dict[str, Any]:
    sink = Sink()
    server = grpc.server(futures.ThreadPoolExecutor(4), options=[("grpc.max_receive_message_length", 64 << 20)])
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)  # type: ignore[no-untyped-call]
    sink_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    settings = RagtraceSettings(
        sample_rate=rate, max_queue=1_000_000, max_held_spans=10_000_000, max_open_traces=1_000_000,
        score_deadline=3600, concurrency=8,
    )
    exporting = BatchSpanProcessor(
        OTLPSpanExporter(endpoint=f"http://127.0.0.1:{sink_port}", insecure=True),
        max_queue_size=10_000_000, schedule_delay_millis=100, max_export_batch_size=2048,
    )
    # trace_settle=0: the sender's batches hold whole traces, so settling would only add a constant second.
    gateway = Gateway(
        settings, judge=judge, exporting=exporting, grpc_port=0, http_port=None, trace_settle=0.0,
        sampler=Sampler(rate), tick_interval=0.01, spool=spool,
    ).start()
    context = multiprocessing.get_context("spawn")
    ready, go = context.Event(), context.Event()
    sender = context.Process(target=_send, args=(gateway.grpc_port, traces, rag, ready, go))
    sender.start()
    ready.wait(300)
    expected = traces * SPANS_PER_TRACE
    started = time.perf_counter()
    go.set()
    with sink.cond:
        done = sink.cond.wait_for(lambda: sink.spans >= expected, timeout=1800)
    elapsed = time.perf_counter() - started
    sender.join(60)
    if spool is not None:  # the last batch's rows go once its export returned
        until = time.monotonic() + 30
        while gateway.health()["spool"]["spans"] and time.monotonic() < until:
            time.sleep(0.05)
    health = gateway.health()
    gateway.shutdown()
    server.stop(None)
    scored = health["decisions"].get("scored", 0) // 2  # two scorers per sample (no ground truth: no recall)
    return {
        "run": label,
        "traces": traces,
        "spans": expected,
        "spans_received_by_sink": sink.spans,
        "complete": bool(done),
        "seconds": round(elapsed, 2),
        "spans_per_s": round(expected / elapsed),
        "traces_per_s": round(traces / elapsed, 1),
        "samples_scored": scored,
        "samples_per_s": round(scored / elapsed, 1),
        "decisions": health["decisions"],
        **({"spool_left": health["spool"]["spans"], "spool_duplicates": health["spool"]["duplicate_spans"]}
           if spool is not None else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller runs (a smoke test)")
    parser.add_argument("--only", choices=RUNS, action="append", help="run only these (repeatable)")
    parser.add_argument("--spool", action="store_true", help="only the runs that compare spool on vs off")
    parser.add_argument("--repeat", type=int, default=1,
                        help="spool comparisons: run off / full / normal this many times, interleaved; the median "
                        "ratio is reported (a shared machine's noise is larger than the spool's cost)")
    args = parser.parse_args()
    import overhead

    scale = 0.1 if args.quick else 1.0
    plans: dict[str, tuple[int, bool, float, str | Judge]] = {
        "passthrough_unsampled": (20_000, False, 0.0, overhead.FixedJudge()),
        "passthrough_sampled_not_rag": (10_000, False, 1.0, overhead.FixedJudge()),
        "instant_judge": (4_000, True, 1.0, overhead.FixedJudge()),
        "local_judge": (100, True, 1.0, "local"),
    }
    results = []
    spool_cost = []
    for name, (traces, rag, rate, judge) in plans.items():
        if (args.only and name not in args.only) or (args.spool and name not in SPOOLED):
            continue
        if name not in SPOOLED:
            results.append(run(name, int(traces * scale), rag=rag, rate=rate, judge=judge))
            continue
        ratios: dict[str, list[float]] = {mode: [] for mode in SPOOL_MODES}
        for _ in range(max(args.repeat, 1)):
            off = run(name, int(traces * scale), rag=rag, rate=rate, judge=judge)
            results.append(off)
            for mode in SPOOL_MODES:
                on = run(name, int(traces * scale), rag=rag, rate=rate, judge=judge, spool=mode)
                results.append(on)
                ratios[mode].append(round(off["seconds"] / on["seconds"], 2))
        for synced, found in ratios.items():
            spool_cost.append({
                "run": name, "spool": synced, "throughput_ratio_on_vs_off": found,
                "median_ratio": statistics.median(found),
            })
    print(json.dumps({
        "cpus": os.cpu_count(),
        "note": "one gateway process; sender in a second process; sink in the gateway's process",
        "results": results,
        "spool_cost": spool_cost,
    }, indent=2))


if __name__ == "__main__":
    main()
