"""Receive-side security: TLS with a self-signed certificate made in the test's tmp dir, and a required
bearer token or header, on gRPC and HTTP, through the SDK's own OTLP exporters."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.sdk.trace.export import SpanExporter

from ragtrace.gateway import Gateway, request_of
from ragtrace.gateway.security import ReceiverSecurity
from tests.gateway.test_gateway import app_provider, make_gateway, recorded_trace
from tests.live.fakes import plain_trace
from tests.servers.otlp import OtlpReceiver

TOKEN = "s3cr3t-token-for-tests"


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, and its key, as PEM files in `directory`."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "gateway.crt", directory / "gateway.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    return self_signed(tmp_path)


def secured_gateway(receiver: OtlpReceiver, security: ReceiverSecurity) -> Gateway:
    return make_gateway(receiver, trace_settle=0.0, security=security)


@pytest.fixture
def tls_gateway(
    otlp_receiver: OtlpReceiver, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Gateway]:
    # requests prefers these bundles to the exporter's certificate_file when they are set in the environment.
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    cert, key = certificate
    gateway = secured_gateway(otlp_receiver, ReceiverSecurity.of(tls_cert=cert, tls_key=key, bearer_token=TOKEN))
    yield gateway
    gateway.shutdown()


def export_through(exporter: SpanExporter, receiver: OtlpReceiver) -> list[int]:
    provider = app_provider(exporter)
    ids = plain_trace(provider.get_tracer("app"), 3)
    assert provider.force_flush(10_000)
    provider.shutdown()
    arrived = receiver.wait_for_spans(len(ids), timeout=10)
    assert sorted(s.span_id for s in arrived) == sorted(ids)
    return ids


def test_grpc_over_tls_with_the_token(
    tls_gateway: Gateway, otlp_receiver: OtlpReceiver, certificate: tuple[Path, Path]
) -> None:
    assert tls_gateway.grpc_endpoint.startswith("https://")
    credentials = grpc.ssl_channel_credentials(certificate[0].read_bytes())
    exporter = GrpcSpanExporter(
        endpoint=tls_gateway.grpc_endpoint, credentials=credentials, headers={"authorization": f"Bearer {TOKEN}"}
    )
    export_through(exporter, otlp_receiver)


def test_http_over_tls_with_the_token(
    tls_gateway: Gateway, otlp_receiver: OtlpReceiver, certificate: tuple[Path, Path]
) -> None:
    exporter = HttpSpanExporter(
        endpoint=tls_gateway.http_endpoint + "/v1/traces", certificate_file=str(certificate[0]),
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    export_through(exporter, otlp_receiver)


def grpc_export(gateway: Gateway, certificate: Path | None, metadata: tuple[tuple[str, str], ...]) -> grpc.StatusCode:
    (trace,) = recorded_trace(1)
    address = f"127.0.0.1:{gateway.grpc_port}"
    channel = (
        grpc.secure_channel(address, grpc.ssl_channel_credentials(certificate.read_bytes()))
        if certificate is not None
        else grpc.insecure_channel(address)
    )
    with channel:
        try:
            trace_service_pb2_grpc.TraceServiceStub(channel).Export(  # type: ignore[no-untyped-call]
                request_of(trace), metadata=metadata, timeout=5
            )
        except grpc.RpcError as error:
            return error.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def http_post(gateway: Gateway, context: ssl.SSLContext | None, headers: dict[str, str]) -> int:
    (trace,) = recorded_trace(1)
    request = urllib.request.Request(
        gateway.http_endpoint + "/v1/traces", data=request_of(trace).SerializeToString(),
        headers={"Content-Type": "application/x-protobuf", **headers}, method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_without_the_token_nothing_is_accepted(
    tls_gateway: Gateway, otlp_receiver: OtlpReceiver, certificate: tuple[Path, Path]
) -> None:
    cert = certificate[0]
    assert grpc_export(tls_gateway, cert, ()) == grpc.StatusCode.UNAUTHENTICATED
    assert grpc_export(tls_gateway, cert, (("authorization", "Bearer wrong"),)) == grpc.StatusCode.UNAUTHENTICATED
    assert grpc_export(tls_gateway, cert, (("authorization", f"Bearer {TOKEN}"),)) == grpc.StatusCode.OK
    context = ssl.create_default_context(cafile=str(cert))
    assert http_post(tls_gateway, context, {}) == 401
    assert http_post(tls_gateway, context, {"Authorization": "Bearer wrong"}) == 401
    assert http_post(tls_gateway, context, {"Authorization": f"Bearer {TOKEN}"}) == 200
    assert tls_gateway.health()["received_spans"] == 2 * len(recorded_trace(1)[0]), "only the authorised ones"


def test_plaintext_clients_cannot_talk_to_a_tls_gateway(tls_gateway: Gateway) -> None:
    assert grpc_export(tls_gateway, None, (("authorization", f"Bearer {TOKEN}"),)) == grpc.StatusCode.UNAVAILABLE
    plain = urllib.request.Request(
        tls_gateway.http_endpoint.replace("https://", "http://") + "/v1/traces", data=b"", method="POST"
    )
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(plain, timeout=5)


def test_a_custom_required_header_without_tls(otlp_receiver: OtlpReceiver) -> None:
    gateway = secured_gateway(otlp_receiver, ReceiverSecurity.of(header="X-Api-Key=k-123"))
    try:
        assert grpc_export(gateway, None, (("x-api-key", "k-123"),)) == grpc.StatusCode.OK
        assert grpc_export(gateway, None, (("x-api-key", "nope"),)) == grpc.StatusCode.UNAUTHENTICATED
        assert http_post(gateway, None, {"X-Api-Key": "k-123"}) == 200
        assert http_post(gateway, None, {}) == 401
    finally:
        gateway.shutdown()


def test_security_options_are_checked() -> None:
    with pytest.raises(ValueError, match="both a certificate and its private key"):
        ReceiverSecurity.of(tls_cert="cert.pem")
    with pytest.raises(ValueError, match="not both"):
        ReceiverSecurity.of(bearer_token="t", header="x=y")
    with pytest.raises(ValueError, match="name=value"):
        ReceiverSecurity.of(header="no-separator")
    with pytest.raises(ValueError, match="not a valid header name"):
        ReceiverSecurity.of(header="bad name=v")
