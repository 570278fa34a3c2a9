import pytest

from ragtrace.live.otlp import otlp_target


def test_protocol_and_endpoint_follow_the_otlp_env_vars(monkeypatch: pytest.MonkeyPatch) -> None:
    for signal in ("", "TRACES_", "METRICS_"):
        monkeypatch.delenv(f"OTEL_EXPORTER_OTLP_{signal}PROTOCOL", raising=False)
    assert otlp_target("traces", None, None) == ("grpc", None)
    assert otlp_target("traces", "http://127.0.0.1:4318", "http/protobuf") == (
        "http/protobuf", "http://127.0.0.1:4318/v1/traces",
    )
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    assert otlp_target("metrics", "http://127.0.0.1:4318/", None) == ("http/protobuf", "http://127.0.0.1:4318/v1/metrics")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")  # the per-signal variable wins
    assert otlp_target("traces", "127.0.0.1:4317", None) == ("grpc", "127.0.0.1:4317")
    with pytest.raises(ValueError, match="protocol"):
        otlp_target("traces", None, "http/json")
