"""A real Arize Phoenix server on 127.0.0.1 (its working dir in the test's tmp dir, telemetry off), and its fixture.

    def test_x(phoenix):
        exporter = OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces")   # OTLP/HTTP to its UI port
        phoenix.get("/v1/projects/default/spans", limit="100")
        phoenix.post("/v1/span_annotations", {"data": [...]})

Tests that use it skip when arize-phoenix (in the test extra) is not installed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.servers.processes import stop


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Phoenix:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def get(self, path: str, **query: str | list[str]) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(query, doseq=True)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)

    def post(self, path: str, body: Any) -> Any:
        request = urllib.request.Request(
            f"{self.url}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)


@pytest.fixture
def phoenix(tmp_path: Path) -> Iterator[Phoenix]:
    pytest.importorskip("phoenix", reason="arize-phoenix is in the test extra")
    port = free_port()
    work = tmp_path / "phoenix"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
    env.update(
        PHOENIX_WORKING_DIR=str(work), PHOENIX_HOST="127.0.0.1", PHOENIX_PORT=str(port),
        # Phoenix also opens an OTLP/gRPC receiver; the tests send over HTTP to the loopback UI port.
        PHOENIX_GRPC_PORT=str(free_port()),
        PHOENIX_TELEMETRY_ENABLED="false", PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
        PHOENIX_DISABLE_AGENT_ASSISTANT="true", PHOENIX_LOG_MIGRATIONS="false",
    )
    log = tmp_path / "phoenix.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "phoenix.server.main", "serve"], cwd=work, env=env, stdout=sink, stderr=sink
        )
    server = Phoenix(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert process.poll() is None, f"phoenix exited:\n{log.read_text(errors='replace')[-3000:]}"
            try:
                server.get("/v1/projects")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"phoenix did not start:\n{log.read_text(errors='replace')[-3000:]}") from None
                time.sleep(0.5)
        yield server
    finally:
        stop(process, timeout=20)


__all__ = ["Phoenix", "free_port", "phoenix"]
