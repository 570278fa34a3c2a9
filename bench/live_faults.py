"""The live pipeline when its scoring process is killed or stopped mid-stream: spans in, spans at the
exporter, the statuses on the retrieval spans, and how long recovery and shutdown take.

Traffic: 5-span RAG traces (root, retrieval, generation, two steps) at a steady rate, 100 % sampling,
worker="process", a judge that takes `--judge-ms`. The exporter counts what it receives, behind the
SDK's BatchSpanProcessor with its default queue (2,048 spans), and takes `--export-ms` a call like one
over a network. Faults, on the real child process:

- `kill`: SIGKILL at `--fault-at` seconds; its traces are released and a new child is started;
- `stop`: SIGSTOP at `--fault-at` seconds, never continued: it is detected, killed and replaced;
- `stop_then_shutdown`: SIGSTOP, a few more traces, then `shutdown()` at once (bounded by score_deadline).

    nice -n 10 python bench/live_faults.py                 # prints JSON, one object per fault and placement
    python bench/live_faults.py --traces 300 --rate 100 --fault-at 1.5 --faults kill
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from ragtrace.live.core import ScoringFace
from ragtrace.live.exporter import RagScoringSpanExporter, ScoringBatchSpanProcessor
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler
from ragtrace.live.scoring_process.parent import GRACE_S
from tests.live.fakes import ScriptedJudge, SlowExporter, rag_trace


def build(placement: str, out: SlowExporter, judge_s: float, score_deadline: float) -> tuple[SpanProcessor, Any]:
    options: dict[str, Any] = dict(judge=ScriptedJudge(default="slow", slow_s=judge_s), sampler=Sampler(rate=1.0),
                                   worker="process", score_deadline=score_deadline)
    if placement == "processor":
        proc = RagScoringSpanProcessor(BatchSpanProcessor(out), **options)
        return proc, proc
    exporter = RagScoringSpanExporter(out, **options)
    batching = ScoringBatchSpanProcessor(exporter)
    return batching, batching


def run(fault: str, placement: str, args: argparse.Namespace) -> dict[str, Any]:
    out = SlowExporter(args.export_ms / 1000)
    entry, face = build(placement, out, args.judge_ms / 1000, args.score_deadline)
    assert isinstance(face, ScoringFace)
    provider = TracerProvider()
    provider.add_span_processor(entry)
    tracer = provider.get_tracer("bench")
    process = face.scoring.judging.process  # type: ignore[attr-defined]
    entered: list[int] = []
    peak_held = 0
    fault_at: float | None = None
    old_pid: int | None = None
    replaced_s = first_timeout_s = None
    start = time.monotonic()
    n = 0

    def watch() -> None:
        nonlocal peak_held, replaced_s, first_timeout_s
        if fault_at is None:
            return
        peak_held = max(peak_held, face.held_spans)
        if replaced_s is None and process.alive and process.pid not in (None, old_pid):
            replaced_s = time.monotonic() - fault_at
        if first_timeout_s is None and fault != "kill" and any(
            (s.attributes or {}).get("ragtrace.eval.status") == "timeout" for s in out.spans[-200:]
        ):
            first_timeout_s = time.monotonic() - fault_at

    traces = args.traces if fault != "stop_then_shutdown" else int(args.fault_at * args.rate)
    while n < traces:
        now = time.monotonic()
        due = int((now - start) * args.rate) + 1
        while n < min(due, traces):
            entered += rag_trace(tracer, query=f"slow: q{n}", plain=2)
            n += 1
        if fault_at is None and now - start >= args.fault_at:
            old_pid, fault_at = process.pid, time.monotonic()
            assert old_pid is not None
            os.kill(old_pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
        watch()
        time.sleep(0.005)
    # then until the pipeline recovered (a new child, nothing held), or score_deadline + grace + 10 s
    end = time.monotonic() + args.score_deadline + GRACE_S + 10
    while fault != "stop_then_shutdown" and time.monotonic() < end and (replaced_s is None or face.held_spans):
        watch()
        time.sleep(0.01)
    if fault == "stop_then_shutdown":
        old_pid, fault_at = process.pid, time.monotonic()
        assert old_pid is not None
        os.kill(old_pid, signal.SIGSTOP)
        for k in range(20):
            entered += rag_trace(tracer, query=f"slow: late{k}", plain=2)
    shutdown_start = time.monotonic()
    provider.shutdown()
    shutdown_s = time.monotonic() - shutdown_start
    if fault != "kill" and old_pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(old_pid, signal.SIGCONT)  # killed by the pipeline already, normally
    counts = Counter(out.ids())
    retrievals = [s for s in out.spans if s.name == "retrieve"]
    statuses = Counter(str((s.attributes or {}).get("ragtrace.eval.status")) for s in retrievals)
    errors = Counter(str((s.attributes or {}).get("ragtrace.eval.error")) for s in retrievals
                     if (s.attributes or {}).get("ragtrace.eval.error") is not None)
    return {
        "fault": fault, "placement": placement,
        "spans_in": len(entered), "spans_at_exporter": sum(counts[i] >= 1 for i in entered),
        "lost": sum(counts[i] == 0 for i in entered), "duplicated": sum(counts[i] > 1 for i in entered),
        "retrieval_spans": len(retrievals), "retrieval_spans_without_status": statuses.get("None", 0),
        "statuses": dict(statuses), "errors": dict(errors), "decisions": face.decisions,
        "peak_held_spans_after_fault": peak_held,
        "new_child_after_s": None if replaced_s is None else round(replaced_s, 2),
        "first_timeout_at_exporter_after_s": None if first_timeout_s is None else round(first_timeout_s, 2),
        "shutdown_s": round(shutdown_s, 2), "score_deadline_s": args.score_deadline,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=100.0, help="traces per second")
    parser.add_argument("--fault-at", type=float, default=5.0, help="seconds into the traffic")
    parser.add_argument("--judge-ms", type=float, default=50.0)
    parser.add_argument("--export-ms", type=float, default=5.0)
    parser.add_argument("--score-deadline", type=float, default=3.0)
    parser.add_argument("--faults", nargs="+", default=["kill", "stop", "stop_then_shutdown"])
    parser.add_argument("--placements", nargs="+", default=["processor", "exporter"])
    args = parser.parse_args()
    results = [run(fault, placement, args) for fault in args.faults for placement in args.placements]
    print(json.dumps({"args": vars(args), "runs": results}, indent=1))


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
