"""Where `ragtrace serve` sends its own metrics: the next hop by default, elsewhere or nowhere on request,
and a next hop that takes traces only (Phoenix) said once, clearly, instead of an error line per batch."""

from __future__ import annotations

import os
import time
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tests.cli.test_serve import serve_command, serving, stopped
from tests.gateway.test_gateway import app_provider
from tests.live.fakes import plain_trace
from tests.servers.otlp import OtlpReceiver
from tests.servers.phoenix import Phoenix

FAST_METRICS = {"OTEL_METRIC_EXPORT_INTERVAL": "300", "RAGTRACE_SAMPLE_RATE": "1.0"}
REFUSED = "does not take OTLP metrics"


def send_and_stop(command: list[str], env: dict[str, str], seconds: float = 2.0) -> str:
    """Run the gateway, send a trace through it, let several metric intervals pass; its stderr."""
    with serving(command, env) as (process, ports):
        provider = app_provider(GrpcSpanExporter(endpoint=f"http://127.0.0.1:{ports['grpc']}", insecure=True))
        plain_trace(provider.get_tracer("app"), 2)
        assert provider.force_flush(5000)
        provider.shutdown()
        time.sleep(seconds)
        return stopped(process)


def test_metrics_follow_the_next_hop_by_default_and_can_be_redirected_or_turned_off(
    otlp_receiver: OtlpReceiver,
) -> None:
    env = {**os.environ, **FAST_METRICS}
    base = ["--grpc-port", "0", "--http-port", "0", "--exporter-endpoint", otlp_receiver.grpc_endpoint,
            "--trace-settle", "0", "--log-level", "WARNING"]
    send_and_stop(serve_command(*base), env, seconds=1.0)
    assert otlp_receiver.wait_for_metric("ragtrace.evaluation.decisions", timeout=5)

    with OtlpReceiver() as elsewhere:
        otlp_receiver.clear()
        send_and_stop(serve_command(*base, "--metrics-endpoint", elsewhere.http_endpoint,
                                    "--metrics-protocol", "http/protobuf"), env, seconds=1.0)
        assert elsewhere.wait_for_metric("ragtrace.evaluation.decisions", timeout=5)
        assert otlp_receiver.spans() and not otlp_receiver.metrics()

    for off in (["--metrics-endpoint", "none"], []):
        otlp_receiver.clear()
        off_env = env if off else {**env, "OTEL_METRICS_EXPORTER": "none"}
        send_and_stop(serve_command(*base, *off), off_env, seconds=1.0)
        assert otlp_receiver.spans() and not otlp_receiver.metrics(), off


class _TracesOnly(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def Export(self, request: Any, context: Any) -> trace_service_pb2.ExportTraceServiceResponse:
        return trace_service_pb2.ExportTraceServiceResponse()


def test_a_grpc_next_hop_without_a_metrics_service_is_said_once() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TracesOnly(), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        command = serve_command("--grpc-port", "0", "--http-port", "0", "--exporter-endpoint",
                                f"http://127.0.0.1:{port}", "--trace-settle", "0", "--log-level", "INFO")
        err = send_and_stop(command, {**os.environ, **FAST_METRICS})
    finally:
        server.stop(None)
    assert err.count(REFUSED) == 1, err
    assert "gRPC UNIMPLEMENTED" in err and "--metrics-endpoint" in err
    assert err.count("Failed to export metrics") <= 1, err  # the SDK's own line, the first time only


def test_phoenix_as_the_next_hop_is_said_once(phoenix: Phoenix) -> None:
    """Phoenix takes OTLP/HTTP traces and answers 405 to metrics."""
    command = serve_command("--grpc-port", "0", "--http-port", "0", "--exporter-endpoint", phoenix.url,
                            "--exporter-protocol", "http/protobuf", "--trace-settle", "0", "--log-level", "INFO")
    err = send_and_stop(command, {**os.environ, **FAST_METRICS})
    assert err.count(REFUSED) == 1, err
    assert "HTTP 405" in err and "--metrics-endpoint none" in err
    assert err.count("Failed to export metrics") <= 1, err
