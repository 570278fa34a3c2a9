"""The next hop: where the SDK's exporter will send, and the refusal to send to the gateway itself."""

from __future__ import annotations

import pytest

from ragtrace.gateway.next_hop import next_hop_url, refuse_self_forwarding


def test_next_hop_url_resolves_like_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
                 "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    assert next_hop_url() == "http://localhost:4317"
    assert next_hop_url(protocol="http/protobuf") == "http://localhost:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert next_hop_url(protocol="http/protobuf") == "http://collector:4318/v1/traces"
    assert next_hop_url("http://tempo:4317") == "http://tempo:4317"


@pytest.mark.parametrize(
    ("endpoint", "protocol", "listen_host"),
    [
        ("http://localhost:4317", "grpc", "127.0.0.1"),
        ("localhost:4317", "grpc", "127.0.0.1"),
        ("http://127.0.0.1:4317", "grpc", "localhost"),
        ("http://0.0.0.0:4317", "grpc", "127.0.0.1"),
        ("http://[::1]:4317", "grpc", "::"),
        ("http://127.0.0.1:4317", "grpc", "0.0.0.0"),
        ("http://localhost:4318/v1/traces", "http/protobuf", "127.0.0.1"),
        (None, None, "127.0.0.1"),  # the SDK's default next hop is localhost:4317: the loop
    ],
)
def test_a_next_hop_on_a_listening_address_is_refused(
    endpoint: str | None, protocol: str | None, listen_host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    with pytest.raises(ValueError, match="own listening address"):
        refuse_self_forwarding(endpoint, protocol, listen_host, [4317, 4318])


@pytest.mark.parametrize(
    ("endpoint", "listen_host", "ports"),
    [
        ("http://localhost:14317", "127.0.0.1", [4317, 4318]),  # another port
        ("http://127.0.0.1:4317", "::1", [4317]),  # another address family, another socket
        ("http://localhost:4317", "127.0.0.1", [4318]),  # not a port the gateway listens on
    ],
)
def test_other_next_hops_pass(endpoint: str, listen_host: str, ports: list[int]) -> None:
    refuse_self_forwarding(endpoint, "grpc", listen_host, ports)
