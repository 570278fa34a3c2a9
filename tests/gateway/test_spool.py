"""The gateway's spool (`--spool-dir`): acknowledged spans survive a gateway that dies.

The crash test runs as an operator would see it: a real `ragtrace serve` process (local judge, sample rate
1.0), an app exporting RAG traces through the SDK's own OTLP exporter (which retries while the gateway is
down), an OTLP receiver as the next hop; the gateway is SIGKILLed mid-stream and restarted on the same
port and spool. Without a spool the spans it held are lost; with one, every trace arrives complete.
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from ragtrace.gateway import Gateway, request_of
from ragtrace.gateway.spool import SPAN_ROW_BYTES, Spool, span_key
from ragtrace.live.sampling import Sampler
from ragtrace.live.settings import RagtraceSettings
from tests.cli.test_serve import free_port
from tests.gateway.test_gateway import health, recorded_trace
from tests.live.fakes import ScriptedJudge, rag_trace
from tests.servers.otlp import OtlpReceiver

# ------------------------------------------------------------------ the crash test


def _start_serve(grpc_port: int, http_port: int, next_hop: str, spool_dir: Path | None) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "ragtrace", "serve", "--judge", "local", "--sample-rate", "1.0",
        "--grpc-port", str(grpc_port), "--http-port", str(http_port),
        "--exporter-endpoint", next_hop, "--trace-settle", "0.5", "--score-deadline", "15", "--log-level", "WARNING",
    ]
    if spool_dir is not None:
        command += ["--spool-dir", str(spool_dir)]
    env = {**os.environ, "OTEL_METRICS_EXPORTER": "none"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("ragtrace serve: listening"), line + (process.stderr.read() if process.stderr else "")
    return process


def _stop_serve(process: subprocess.Popen[str]) -> dict[str, Any]:
    """SIGTERM (the gateway flushes what it holds), then its final counts from the `stopped` line."""
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("ragtrace serve: stopped ")]
    final: dict[str, Any] = ast.literal_eval(line.removeprefix("ragtrace serve: stopped "))
    return final


def crash_run(
    receiver: OtlpReceiver, spool_dir: Path | None, traces: int = 240, seconds: float = 12.0
) -> dict[str, Any]:
    """Send `traces` RAG traces over `seconds`, every other one over OTLP/HTTP, the others over gRPC; SIGKILL
    the gateway 40 % in, restart it 1 s later on the same ports (and spool); once the app's exporters have
    delivered everything, stop the gateway with SIGTERM. Returns what arrived at the next hop, per trace."""
    grpc_port, http_port = free_port(), free_port()
    gateway = _start_serve(grpc_port, http_port, receiver.grpc_endpoint, spool_dir)
    # The app: the SDK's batch processor and OTLP exporters, which retry (up to 60 s) while the gateway is down.
    exporters: list[SpanExporter] = [
        GrpcSpanExporter(endpoint=f"http://127.0.0.1:{grpc_port}", insecure=True, timeout=60),
        HttpSpanExporter(endpoint=f"http://127.0.0.1:{http_port}/v1/traces", timeout=60),
    ]
    providers = []
    for exporter in exporters:
        provider = TracerProvider(resource=Resource.create({"service.name": "rag-app"}))
        provider.add_span_processor(
            BatchSpanProcessor(exporter, max_queue_size=100_000, schedule_delay_millis=100, max_export_batch_size=64)
        )
        providers.append(provider)
    tracers = [provider.get_tracer("rag-app") for provider in providers]
    sent: list[list[int]] = []

    def app() -> None:
        for number in range(traces):
            tracer = tracers[number % 2]
            sent.append(rag_trace(tracer, query=f"what is good? ({number})", docs=("good doc", "noise"), plain=1))
            time.sleep(seconds / traces)

    sender = threading.Thread(target=app)
    sender.start()
    try:
        time.sleep(seconds * 0.4)
        # Kill while the gateway holds acknowledged spans for scoring (it nearly always does mid-stream): the
        # run without a spool then loses something for sure, so its loss is a measurement, not luck.
        holding_by = time.monotonic() + 10.0
        while health(f"http://127.0.0.1:{http_port}")["held_spans"] == 0 and time.monotonic() < holding_by:
            time.sleep(0.01)
        gateway.kill()  # SIGKILL: no flush, no shutdown
        gateway.wait()
        killed_after = len(sent)
        time.sleep(1.0)
        gateway = _start_serve(grpc_port, http_port, receiver.grpc_endpoint, spool_dir)
        sender.join()
        for provider in providers:
            assert provider.force_flush(120_000), "the app's exporter did not deliver to the restarted gateway"
            provider.shutdown()
        final = _stop_serve(gateway)
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()
    expected = Counter(span_id for ids in sent for span_id in ids)
    arrived = Counter(s.span_id for s in receiver.spans() if s.span_id in expected)
    retrievals = [s for s in receiver.spans() if s.span_id in expected and s.name == "retrieve"]
    return {
        "traces": len(sent),
        "spans": sum(expected.values()),
        "traces_sent_before_kill": killed_after,
        "incomplete_traces": sum(1 for ids in sent if any(arrived[i] == 0 for i in ids)),
        "lost_spans": sum(1 for i in expected if arrived[i] == 0),
        "duplicate_spans_at_next_hop": sum(n - 1 for n in arrived.values() if n > 1),
        "retrieval_status": dict(Counter(str(s.attributes.get("ragtrace.eval.status")) for s in retrievals)),
        "retrieval_errors": dict(Counter(str(s.attributes.get("ragtrace.eval.error")) for s in retrievals)),
        "gateway_after_restart": final,
    }


def test_a_killed_gateway_loses_acknowledged_spans_without_a_spool_and_none_with_one(
    otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    without = crash_run(otlp_receiver, None)
    with_spool = crash_run(otlp_receiver, tmp_path / "spool")
    figures = f"without a spool: {without}\nwith a spool: {with_spool}"
    print(figures)
    # Without a spool, what the gateway held for scoring (settling roots, held traces, the export queue)
    # dies with it: its clients were told it had arrived, so nobody sends it again.
    assert without["incomplete_traces"] > 0 and without["lost_spans"] > 0, figures
    # With one: nothing lost, every retrieval span says what became of it.
    assert with_spool["incomplete_traces"] == 0 and with_spool["lost_spans"] == 0, figures
    assert sum(with_spool["retrieval_status"].values()) >= with_spool["traces"], figures
    assert set(with_spool["retrieval_status"]) <= {"scored", "timeout"}, figures
    spool = with_spool["gateway_after_restart"]["spool"]
    assert spool["found_at_start"] > 0 and spool["replayed_spans"] == spool["found_at_start"], figures
    assert spool["spans"] == 0 and spool["requests"] == 0, "everything forwarded, nothing left in the spool"
    # At least once: a duplicate is a span of the export batch that was out at the kill (the next hop took it,
    # its rows were not deleted yet). The gateway cannot know, so it counts every replayed span of that batch.
    counted = spool["replayed_maybe_delivered_spans"] + spool["duplicate_spans"]
    assert with_spool["duplicate_spans_at_next_hop"] <= counted, figures


# ------------------------------------------------------------------ in-process: replay, full, duplicates


SETTINGS = RagtraceSettings(sample_rate=1.0, score_deadline=5.0)
FAST: dict[str, Any] = {"sampler": Sampler(rate=1.0), "tick_interval": 0.01}


def spool_gateway(spool: Spool, next_hop: str, **options: Any) -> Gateway:
    exporter = GrpcSpanExporter(endpoint=next_hop, insecure=True, timeout=1)
    exporting = BatchSpanProcessor(exporter, schedule_delay_millis=50)
    return Gateway(
        SETTINGS, judge=ScriptedJudge(), exporting=exporting, grpc_port=0, http_port=0, trace_settle=0.1,
        spool=spool, **FAST, **options,
    ).start()


def keys_of(trace: list[ReadableSpan]) -> list[bytes]:
    return [span_key(span.context.trace_id, span.context.span_id) for span in trace if span.context is not None]


def test_replay_scores_what_is_within_the_deadline_and_says_why_for_the_rest(
    otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    """Two traces left in a spool by a dead gateway: one stored 100 s ago (past the 5 s deadline), one now."""
    old, recent = recorded_trace(2)
    spool = Spool(tmp_path, 1 << 20)
    for trace, received in ((old, time.time() - 100), (recent, time.time())):
        spool.add(request_of(trace).SerializeToString(), keys_of(trace), received=received)
    spool.close()

    gateway = spool_gateway(Spool(tmp_path, 1 << 20), otlp_receiver.grpc_endpoint)
    try:
        ids_old = {s.context.span_id for s in old}
        ids_recent = {s.context.span_id for s in recent}
        spans = otlp_receiver.wait_for_spans(len(old) + len(recent), timeout=15)
        assert Counter(s.span_id for s in spans) == Counter(ids_old | ids_recent), "each span once"
        for span_id in ids_old:
            late = [s for s in spans if s.span_id == span_id and s.name == "retrieve"]
            for span in late:
                assert span.attributes["ragtrace.eval.status"] == "timeout"
                assert span.attributes["ragtrace.eval.error"] == "gateway_restarted"
                assert not any(k.endswith(".score") for k in span.attributes)
        scored = [s for s in spans if s.span_id in ids_recent and s.name == "retrieve"]
        assert scored and all(s.attributes["ragtrace.eval.status"] == "scored" for s in scored)
        deadline = time.monotonic() + 10
        while gateway.health()["spool"]["spans"]:
            assert time.monotonic() < deadline, gateway.health()
            time.sleep(0.05)
        found = gateway.health()["spool"]
        assert found["replayed_spans"] == len(old) + len(recent)
        assert found["replayed_late_spans"] == len(old)
    finally:
        gateway.shutdown()


def test_a_full_spool_refuses_and_drops_nothing_it_acknowledged(otlp_receiver: OtlpReceiver, tmp_path: Path) -> None:
    """Next hop down: the spool fills, then HTTP gets 503 and gRPC UNAVAILABLE; a gateway started later on
    the same spool, with the next hop up, forwards every span that was acknowledged."""
    traces = recorded_trace(12)
    bodies = [request_of(trace).SerializeToString() for trace in traces]
    down = f"http://127.0.0.1:{free_port()}"
    room_for_three = 3 * (len(bodies[0]) + SPAN_ROW_BYTES * len(traces[0]))
    gateway = spool_gateway(Spool(tmp_path, room_for_three), down)
    acknowledged: set[int] = set()
    answers: list[str] = []
    try:
        channel = grpc.insecure_channel(gateway.grpc_endpoint.removeprefix("http://"))
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
        for number, (trace, body) in enumerate(zip(traces, bodies, strict=True)):
            if number % 2:
                try:
                    stub.Export(request_of(trace), timeout=5)
                    answers.append("ok")
                except grpc.RpcError as refused:
                    answers.append(refused.code().name)
                    continue
            else:
                http = urllib.request.Request(
                    gateway.http_endpoint + "/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}
                )
                try:
                    with urllib.request.urlopen(http, timeout=5) as answer:
                        answers.append(str(answer.status))
                except urllib.error.HTTPError as refused:
                    answers.append(str(refused.code))
                    assert refused.headers["Retry-After"] == "1"
                    continue
            acknowledged |= {s.context.span_id for s in trace}
        channel.close()
        time.sleep(1.5)  # the next hop's exporter gives up (1 s timeout): nothing forwarded, nothing lost
        state = gateway.health()
        assert state["forwarded_spans"] == 0 and state["failed_spans"] > 0, state
        assert state["spool"]["spans"] == len(acknowledged), state
    finally:
        gateway.shutdown()
    assert "503" in answers and "UNAVAILABLE" in answers, answers
    assert answers[:3] == ["200", "ok", "200"], answers
    assert len(acknowledged) == answers.count("200") * len(traces[0]) + answers.count("ok") * len(traces[0])

    gateway = spool_gateway(Spool(tmp_path, 1 << 20), otlp_receiver.grpc_endpoint)
    try:
        spans = otlp_receiver.wait_for_spans(len(acknowledged), timeout=15)
        assert Counter(s.span_id for s in spans) == Counter(acknowledged)
    finally:
        gateway.shutdown()


def test_a_span_sent_again_while_still_spooled_is_counted_as_a_duplicate_and_forwarded_once(
    otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    """A client that resends a request the gateway stored (its answer was lost): counted, forwarded once."""
    (trace,) = recorded_trace(1)
    spool = Spool(tmp_path, 1 << 20)
    spool.add(request_of(trace).SerializeToString(), keys_of(trace))
    spool.close()
    gateway = spool_gateway(Spool(tmp_path, 1 << 20), otlp_receiver.grpc_endpoint)
    try:
        stub = trace_service_pb2_grpc.TraceServiceStub(  # type: ignore[no-untyped-call]
            grpc.insecure_channel(gateway.grpc_endpoint.removeprefix("http://"))
        )
        stub.Export(request_of(trace), timeout=5)
        spans = otlp_receiver.wait_for_spans(len(trace), timeout=15)
        time.sleep(0.5)
        assert Counter(s.span_id for s in otlp_receiver.spans()) == Counter(s.context.span_id for s in trace)
        state = gateway.health()
        assert state["spool"]["duplicate_spans"] + state["spool"]["replayed_spans"] >= len(trace), state
        assert state["spool"]["found_at_start"] == len(trace)
        assert len(spans) == len(trace)
    finally:
        gateway.shutdown()


def test_health_counts_forwarded_only_when_the_next_hop_took_the_spans(tmp_path: Path) -> None:
    """A next hop that is down: the spans are failed, not forwarded."""
    down = f"http://127.0.0.1:{free_port()}"
    exporting = BatchSpanProcessor(GrpcSpanExporter(endpoint=down, insecure=True, timeout=1), schedule_delay_millis=50)
    gateway = Gateway(
        SETTINGS, judge=ScriptedJudge(), exporting=exporting, grpc_port=0, http_port=0, trace_settle=0.0, **FAST
    ).start()
    try:
        (trace,) = recorded_trace(1)
        gateway.export(request_of(trace))
        deadline = time.monotonic() + 15
        while gateway.health()["failed_spans"] < len(trace):
            assert time.monotonic() < deadline, gateway.health()
            time.sleep(0.1)
        state = health(gateway.http_endpoint)
        assert state["forwarded_spans"] == 0 and state["failed_spans"] == len(trace), state
        assert state["received_spans"] == len(trace)
    finally:
        gateway.shutdown()


@pytest.mark.parametrize("size", [0, -1])
def test_a_spool_needs_a_positive_bound(tmp_path: Path, size: int) -> None:
    with pytest.raises(ValueError, match="at least 1 byte"):
        Spool(tmp_path, size)


def test_spans_whose_export_was_out_when_the_gateway_died_are_counted_as_possible_duplicates(
    otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    """A gateway killed while an export batch was out cannot know whether the next hop took it: its replay
    forwards those spans again and counts them; the spans that were not out are not counted."""
    out, waiting = recorded_trace(2)
    spool = Spool(tmp_path, 1 << 20)
    for trace in (out, waiting):
        spool.add(request_of(trace).SerializeToString(), keys_of(trace))
    spool.sending(keys_of(out))
    spool.close()
    gateway = spool_gateway(Spool(tmp_path, 1 << 20), otlp_receiver.grpc_endpoint)
    try:
        otlp_receiver.wait_for_spans(len(out) + len(waiting), timeout=15)
        state = gateway.health()["spool"]
        assert state["replayed_spans"] == len(out) + len(waiting)
        assert state["replayed_maybe_delivered_spans"] == len(out), state
    finally:
        gateway.shutdown()


def test_one_gateway_at_a_time_uses_a_spool(tmp_path: Path) -> None:
    """Two gateways replaying one spool would both forward everything in it."""
    first = Spool(tmp_path, 1 << 20)
    with pytest.raises(ValueError, match="another gateway uses this spool"):
        Spool(tmp_path, 1 << 20)
    first.close()
    Spool(tmp_path, 1 << 20).close()  # free again once the first one closed (or died)
