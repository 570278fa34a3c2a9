"""The gateway's receivers on their own: ports that cannot be bound fail fast and leave nothing bound."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragtrace.gateway import Gateway
from ragtrace.gateway.receivers import HttpReceiver, url_host
from ragtrace.live.settings import RagtraceSettings
from tests.live.fakes import ScriptedJudge


def test_url_host_brackets_ipv6_literals() -> None:
    assert url_host("127.0.0.1") == "127.0.0.1"
    assert url_host("::1") == "[::1]"


def test_a_taken_health_port_fails_construction_and_frees_the_bound_ports() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        with pytest.raises(OSError):
            Gateway(
                RagtraceSettings(), judge=ScriptedJudge(), exporting=SimpleSpanProcessor(InMemorySpanExporter()),
                grpc_port=None, http_port=0, health_port=taken.getsockname()[1],
            )
    finally:
        taken.close()


def test_a_gateway_never_started_shuts_down() -> None:
    gateway = Gateway(
        RagtraceSettings(), judge=ScriptedJudge(), exporting=SimpleSpanProcessor(InMemorySpanExporter()),
        grpc_port=0, http_port=0, health_port=0,
    )
    gateway.shutdown(grace=1.0)
    assert gateway.wait(5.0)


class _Sink:
    closing = False

    def export(self, request: object) -> object:
        raise AssertionError("a health-only receiver takes no traces")

    def health(self) -> dict[str, object]:
        return {"status": "ok"}


def test_a_health_receiver_answers_health_only() -> None:
    receiver = HttpReceiver(_Sink(), "127.0.0.1", 0, otlp=False)  # type: ignore[arg-type]
    receiver.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{receiver.port}/healthz", timeout=5) as answer:
            assert answer.status == 200
        request = urllib.request.Request(f"http://127.0.0.1:{receiver.port}/v1/traces", data=b"", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 404
    finally:
        receiver.stop(1.0)
