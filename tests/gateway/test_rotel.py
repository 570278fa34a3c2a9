"""The gateway behind a real collector binary: app -> rotel (OTLP in, OTLP gRPC out) -> `Gateway` -> receiver.

rotel (PyPI `rotel`) is a small OTLP collector that ships its agent binary inside the wheel. This is the
deployment the architecture describes: the app knows nothing of ragtrace; its collector forwards to the
gateway, which scores and forwards every span to the backend.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragtrace.gateway import Gateway
from tests.gateway.test_gateway import make_gateway, send_rag_traffic
from tests.servers.otlp import OtlpReceiver
from tests.servers.processes import stop, wait_listening


def rotel_binary() -> Path:
    try:
        import rotel
    except ImportError:
        pytest.skip("rotel is not installed (pip install rotel: the test extra ships it)")
    binary = Path(rotel.__file__).parent / "rotel-agent"
    if not binary.is_file():
        pytest.skip(f"the rotel wheel has no agent binary at {binary}")
    return binary


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Rotel:
    def __init__(self, grpc_port: int, http_port: int, process: subprocess.Popen[bytes]) -> None:
        self.grpc_endpoint = f"http://127.0.0.1:{grpc_port}"
        self.http_endpoint = f"http://127.0.0.1:{http_port}"
        self.process = process


@pytest.fixture
def gateway(otlp_receiver: OtlpReceiver) -> Iterator[Gateway]:
    gw = make_gateway(otlp_receiver)
    yield gw
    gw.shutdown()


@pytest.fixture
def rotel(gateway: Gateway, tmp_path: Path) -> Iterator[Rotel]:
    binary = rotel_binary()
    grpc_port, http_port = free_port(), free_port()
    command = [
        str(binary), "start",
        "--otlp-grpc-endpoint", f"127.0.0.1:{grpc_port}",
        "--otlp-http-endpoint", f"127.0.0.1:{http_port}",
        "--exporter", "otlp",
        "--otlp-exporter-endpoint", gateway.grpc_endpoint,
        "--otlp-exporter-protocol", "grpc",
        "--batch-timeout", "50ms",
        "--pid-file", str(tmp_path / "rotel.pid"),
        "--log-file", str(tmp_path / "rotel.log"),
    ]
    log = (tmp_path / "rotel.out").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        try:
            wait_listening(grpc_port, process)
            wait_listening(http_port, process)
        except (RuntimeError, TimeoutError) as exc:
            log.flush()
            raise RuntimeError(f"{exc}: {(tmp_path / 'rotel.out').read_text(errors='replace')[-2000:]}") from None
        yield Rotel(grpc_port, http_port, process)
    finally:
        stop(process)
        log.close()


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_scores_arrive_through_rotel_and_the_gateway(
    transport: str, rotel: Rotel, gateway: Gateway, otlp_receiver: OtlpReceiver
) -> None:
    ids, other, _ = send_rag_traffic(transport, rotel.grpc_endpoint, rotel.http_endpoint, otlp_receiver, timeout=15)
    time.sleep(0.2)
    assert Counter(s.span_id for s in otlp_receiver.spans()) == Counter(ids + other), "every span exactly once"
    assert gateway.health()["decisions"] == {"scored": 2, "not_rag": 1}
