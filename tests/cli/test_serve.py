"""`ragtrace serve`: the gateway as a process, its flags, and its flush on SIGTERM."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

from ragtrace.cli import build_parser
from ragtrace.cli.serve import settings_of
from tests.gateway.test_gateway import app_provider, health
from tests.live.fakes import plain_trace, rag_trace
from tests.servers.otlp import OtlpReceiver


def serve_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", *argv])


def test_flags_win_over_ragtrace_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGTRACE_SAMPLE_RATE", "0.25")
    monkeypatch.setenv("RAGTRACE_MAX_QUEUE", "77")
    settings = settings_of(serve_args("--sample-rate", "0.5"))
    assert settings.sample_rate == 0.5 and settings.max_queue == 77


def test_a_bad_flag_value_is_checked_like_the_variable() -> None:
    with pytest.raises(ValueError, match="sample_rate"):
        settings_of(serve_args("--sample-rate", "2"))


def test_serve_subprocess_flushes_on_sigterm(otlp_receiver: OtlpReceiver) -> None:
    """`ragtrace serve` with the local judge: SIGTERM while spans are still held -> all exported, scored."""
    env = {**os.environ, "RAGTRACE_SAMPLE_RATE": "1.0", "OTEL_BSP_SCHEDULE_DELAY": "60000"}
    command = [
        sys.executable, "-m", "ragtrace", "serve", "--grpc-port", "0", "--http-port", "0", "--health-port", "0",
        "--judge", "local", "--exporter-endpoint", otlp_receiver.grpc_endpoint, "--trace-settle", "30",
        "--score-deadline", "20", "--log-level", "WARNING",
    ]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("ragtrace serve: listening"), line + (process.stderr.read() if process.stderr else "")
        ports = dict(part.split("=", 1) for part in line.split()[3:6])
        health_url = f"http://127.0.0.1:{ports['health']}"
        assert health(health_url)["status"] == "ok"

        provider = app_provider(GrpcSpanExporter(endpoint=f"http://127.0.0.1:{ports['grpc']}", insecure=True))
        tracer = provider.get_tracer("rag-app")
        ids = rag_trace(tracer, query="what is good?", docs=("good doc", "noise"), plain=2)
        other = plain_trace(tracer, 2)
        assert provider.force_flush(5000)
        provider.shutdown()
        deadline = time.monotonic() + 10
        while health(health_url)["received_spans"] < len(ids) + len(other):
            assert time.monotonic() < deadline, "the gateway did not receive the spans"
            time.sleep(0.05)
        # The root waits 30 s to settle and the exporter flushes every 60 s: only shutdown can deliver now.
        assert health(health_url)["settling_roots"] == 2  # both roots (rate 1.0)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    spans = otlp_receiver.wait_for_spans(len(ids) + len(other), timeout=5)
    assert Counter(s.span_id for s in spans) == Counter(ids + other)
    (retrieval,) = [s for s in spans if s.name == "retrieve"]
    assert retrieval.attributes["ragtrace.eval.status"] == "scored"
    assert retrieval.attributes["ragtrace.judge.model"].startswith("local")
    assert "ragtrace.context_precision.score" in retrieval.attributes
    # ragtrace's own metrics go to the same next hop, flushed at shutdown.
    decisions = otlp_receiver.wait_for_metric("ragtrace.evaluation.decisions", timeout=5)
    assert any(p.attributes.get("decision") == "scored" for p in decisions.data_points)
    assert otlp_receiver.wait_for_metric("ragtrace.evaluation.score", timeout=5).data_points
