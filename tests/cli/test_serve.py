"""`ragtrace serve`: the gateway as a process, its flags, and its flush on SIGTERM."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ragtrace.cli import build_parser
from ragtrace.cli.serve import settings_of, spool_of
from ragtrace.live.metrics import SCORE_SERIES_KEYS
from tests.gateway.test_gateway import app_provider, health
from tests.gateway.test_security import self_signed
from tests.live.fakes import open_rag_trace, plain_trace, rag_trace
from tests.servers.otlp import OtlpReceiver


def serve_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", *argv])


def test_flags_win_over_ragtrace_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGTRACE_SAMPLE_RATE", "0.25")
    monkeypatch.setenv("RAGTRACE_MAX_QUEUE", "77")
    settings = settings_of(serve_args("--sample-rate", "0.5"))
    assert settings.sample_rate == 0.5 and settings.max_queue == 77


def test_the_spool_is_set_by_flag_or_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert spool_of(serve_args()) is None
    monkeypatch.setenv("RAGTRACE_GATEWAY_SPOOL_DIR", str(tmp_path / "from-env"))
    monkeypatch.setenv("RAGTRACE_GATEWAY_SPOOL_MAX_MIB", "2")
    spool = spool_of(serve_args())
    assert spool is not None and spool.path.parent == tmp_path / "from-env" and spool.max_bytes == 2 << 20
    spool.close()
    spool = spool_of(serve_args("--spool-dir", str(tmp_path / "flag"), "--spool-max-mib", "0.5"))
    assert spool is not None and spool.path.parent == tmp_path / "flag" and spool.max_bytes == 1 << 19
    spool.close()
    with pytest.raises(ValueError, match="--spool-max-mib"):
        spool_of(serve_args("--spool-max-mib", "0"))


def test_a_bad_flag_value_is_checked_like_the_variable() -> None:
    with pytest.raises(ValueError, match=r"--sample-rate=2\.0: Input should be less than or equal to 1"):
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


# ------------------------------------------------------------------ no loop, no collision, useful logs


def serve_command(*argv: str) -> list[str]:
    return [sys.executable, "-m", "ragtrace", "serve", "--judge", "local", *argv]


def free_port() -> int:
    """A port free a moment ago (for the self-forwarding test, which needs the port before serving)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("hop_host", ["localhost", "127.0.0.1", "0.0.0.0"])
def test_serve_refuses_to_forward_to_itself(hop_host: str) -> None:
    port = free_port()
    result = subprocess.run(
        serve_command("--grpc-port", str(port), "--http-port", "-1", "--exporter-endpoint", f"http://{hop_host}:{port}"),
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "own listening address" in result.stderr and str(port) in result.stderr
    assert "listening" not in result.stdout


def test_serve_refuses_a_grpc_port_another_grpc_server_holds(otlp_receiver: OtlpReceiver) -> None:
    """The receiver is a gRPC server (SO_REUSEPORT on, as gRPC sets it): binding its port must still fail."""
    port = otlp_receiver.grpc_endpoint.rsplit(":", 1)[1]
    result = subprocess.run(
        serve_command("--grpc-port", port, "--http-port", "-1", "--exporter-endpoint", otlp_receiver.http_endpoint),
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"port {port} is already in use" in result.stderr and "gRPC" in result.stderr
    # One line that says which flag to change; no errno, no raw gRPC line.
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "--grpc-port" in result.stderr and "[Errno" not in result.stderr


def test_serve_refuses_a_taken_http_port(otlp_receiver: OtlpReceiver) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = subprocess.run(
            serve_command("--grpc-port", "-1", "--http-port", port, "--exporter-endpoint", otlp_receiver.grpc_endpoint),
            capture_output=True, text=True, timeout=60,
        )
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"port {port} is already in use" in result.stderr and "HTTP" in result.stderr
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "--http-port" in result.stderr and "[Errno" not in result.stderr


@contextlib.contextmanager
def serving(command: list[str], env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    """`ragtrace serve` running, with its bound ports from the listening line; killed if still running."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("ragtrace serve: listening"), line + (process.stderr.read() if process.stderr else "")
        yield process, dict(part.split("=", 1) for part in line.split()[3:6])
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def stopped(process: subprocess.Popen[str]) -> str:
    """SIGTERM, then the exit code must be 0; returns what the gateway wrote to stderr."""
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    return err


def test_serve_metrics_carry_sessions_on_exemplars_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings_of(serve_args()).session_exemplars  # serve builds its MeterProvider with the views
    monkeypatch.setenv("RAGTRACE_SESSION_EXEMPLARS", "false")
    assert not settings_of(serve_args()).session_exemplars


def test_serve_metrics_put_the_session_on_score_exemplars(otlp_receiver: OtlpReceiver) -> None:
    """Out of the box, a scored sample's session is on its score exemplars; the series stay per scorer."""
    env = {**os.environ, "RAGTRACE_SAMPLE_RATE": "1.0"}
    env.pop("RAGTRACE_SESSION_EXEMPLARS", None)
    command = serve_command(
        "--grpc-port", "0", "--http-port", "0", "--exporter-endpoint", otlp_receiver.grpc_endpoint,
        "--trace-settle", "0", "--log-level", "WARNING",
    )
    with serving(command, env) as (process, ports):
        provider = app_provider(GrpcSpanExporter(endpoint=f"http://127.0.0.1:{ports['grpc']}", insecure=True))
        root, ids = open_rag_trace(provider.get_tracer("rag-app"), query="what is good?", docs=("good doc", "noise"))
        root.set_attribute("gen_ai.conversation.id", "conv-7")
        root.end()
        assert provider.force_flush(5000)
        provider.shutdown()
        spans = otlp_receiver.wait_for_spans(len(ids), timeout=60)
        err = stopped(process)  # flushes the metrics
    (retrieval,) = [s for s in spans if s.name == "retrieve"]
    assert retrieval.attributes["ragtrace.eval.status"] == "scored", err
    score = otlp_receiver.wait_for_metric("ragtrace.evaluation.score", timeout=5)
    points = [p for m in otlp_receiver.metrics() if m.name == score.name for p in m.data_points]
    assert points and all(set(p.attributes) <= set(SCORE_SERIES_KEYS) for p in points)
    exemplars = [e for p in points for e in p.exemplars]
    assert exemplars and all(
        (e.trace_id, e.span_id, e.filtered_attributes) == (retrieval.trace_id, retrieval.span_id,
                                                           {"ragtrace.session.id": "conv-7"})
        for e in exemplars
    )


def test_serve_logs_what_matters_at_info(otlp_receiver: OtlpReceiver) -> None:
    """INFO: listening, next hop, the counts; the drift scheduler's per-run lines stay out."""
    env = {**os.environ, "RAGTRACE_SAMPLE_RATE": "1.0", "RAGTRACE_DRIFT_INTERVAL": "0.2"}
    command = serve_command(
        "--grpc-port", "0", "--http-port", "0", "--exporter-endpoint", otlp_receiver.grpc_endpoint,
        "--trace-settle", "0", "--stats-interval", "0.2", "--log-level", "INFO",
    )
    with serving(command, env) as (process, ports):
        provider = app_provider(GrpcSpanExporter(endpoint=f"http://127.0.0.1:{ports['grpc']}", insecure=True))
        ids = plain_trace(provider.get_tracer("app"), 3)
        assert provider.force_flush(5000)
        provider.shutdown()
        otlp_receiver.wait_for_spans(len(ids), timeout=10)
        time.sleep(1.0)  # several stats intervals and drift runs
        err = stopped(process)
    assert f"forwarding to {otlp_receiver.grpc_endpoint}" in err
    assert "listening for OTLP gRPC on" in err
    assert f"received {len(ids)} spans (0 rejected), forwarded {len(ids)}" in err
    assert "apscheduler" not in err, err


def test_serve_with_tls_and_a_token_from_the_environment(otlp_receiver: OtlpReceiver, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    env = {**os.environ, "RAGTRACE_GATEWAY_TOKEN": "tok-from-env"}
    command = serve_command(
        "--grpc-port", "0", "--http-port", "0", "--exporter-endpoint", otlp_receiver.grpc_endpoint,
        "--trace-settle", "0", "--tls-cert", str(cert), "--tls-key", str(key), "--log-level", "INFO",
    )
    with serving(command, env) as (process, ports):
        credentials = grpc.ssl_channel_credentials(cert.read_bytes())
        endpoint = f"https://127.0.0.1:{ports['grpc']}"
        token = {"authorization": "Bearer tok-from-env"}
        provider = app_provider(GrpcSpanExporter(endpoint=endpoint, credentials=credentials, headers=token))
        ids = plain_trace(provider.get_tracer("app"), 2)
        assert provider.force_flush(10_000)
        provider.shutdown()
        assert sorted(s.span_id for s in otlp_receiver.wait_for_spans(len(ids), timeout=10)) == sorted(ids)
        channel = grpc.secure_channel(f"127.0.0.1:{ports['grpc']}", credentials)
        with channel, pytest.raises(grpc.RpcError) as denied:
            trace_service_pb2_grpc.TraceServiceStub(channel).Export(  # type: ignore[no-untyped-call]
                ExportTraceServiceRequest(), timeout=5
            )
        assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
        err = stopped(process)
    assert "TLS, authorization header required" in err
    assert "tok-from-env" not in err, "the token is never logged"


# ------------------------------------------------------------------ signals in bursts


@pytest.mark.parametrize("round_", range(3))
def test_serve_exits_on_signal_bursts(otlp_receiver: OtlpReceiver, round_: int) -> None:
    """`timeout` sends SIGTERM then more; a supervisor may send many. A handler that took a lock (Event.set)
    hung the process for good once in 22 tries, re-entered by the next signal while it held the lock. Each
    round sends SIGTERM and SIGINT back to back for 1.5 s (thousands, at start and on through the shutdown),
    and the process must exit 0 within the bound."""
    command = serve_command(
        "--grpc-port", "0", "--http-port", "0", "--exporter-endpoint", otlp_receiver.grpc_endpoint,
        "--trace-settle", "0", "--score-deadline", "5", "--log-level", "WARNING",
    )
    with serving(command, dict(os.environ)) as (process, _):
        time.sleep(0.1 * round_)  # the burst starts at another moment of the main loop
        sent = 0
        until = time.monotonic() + 1.5
        while time.monotonic() < until and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM if sent % 2 == 0 else signal.SIGINT)
            sent += 1
        try:
            _, err = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail(f"ragtrace serve did not exit within 20 s of a burst of {sent} signals")
    assert process.returncode == 0, err


def test_serve_logs_the_spool_with_the_counts(otlp_receiver: OtlpReceiver, tmp_path: Path) -> None:
    command = serve_command(
        "--grpc-port", "0", "--http-port", "0", "--exporter-endpoint", otlp_receiver.grpc_endpoint,
        "--trace-settle", "0", "--stats-interval", "0.2", "--log-level", "INFO", "--spool-dir", str(tmp_path),
    )
    with serving(command, {**os.environ, "OTEL_METRICS_EXPORTER": "none"}) as (process, ports):
        provider = app_provider(GrpcSpanExporter(endpoint=f"http://127.0.0.1:{ports['grpc']}", insecure=True))
        ids = plain_trace(provider.get_tracer("app"), 3)
        assert provider.force_flush(5000)
        provider.shutdown()
        otlp_receiver.wait_for_spans(len(ids), timeout=10)
        time.sleep(1.0)
        err = stopped(process)
    assert f"forwarded {len(ids)} (0 failed)" in err, err
    assert "; spool: 0 spans stored" in err and "0 duplicates received" in err, err


def test_each_replica_has_an_instance_id_of_its_own_unless_one_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two gateways behind one Collector must not share a resource: its Prometheus exporter keys series by
    service.instance.id and would keep only the last replica's write. Recent SDKs give each process
    one; older ones (the floor allows them) give none, and the gateway makes its own."""
    import subprocess

    from ragtrace.cli.serve import replica_resource

    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    ask = [sys.executable, "-c", "from ragtrace.cli.serve import replica_resource as r; "
           "print(r().attributes['service.instance.id'])"]
    ids = {subprocess.run(ask, capture_output=True, text=True, check=True).stdout.strip() for _ in range(2)}
    assert len(ids) == 2 and "" not in ids
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=gateway-a")
    assert replica_resource().attributes["service.instance.id"] == "gateway-a"
