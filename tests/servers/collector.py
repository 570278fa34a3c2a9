"""The ragtrace Collector distribution and Jaeger v2, built by collector/build.sh, and the servers of the
deployment (Collector, Jaeger, Prometheus, `ragtrace serve`) as processes on loopback.

The binaries come from the build script's cache (built there by `.ci/run` before the tests; a test run
on a machine where they are missing builds them first). Everything else a test starts writes only into
its own tmp dir: configs, logs, storage, spools.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.servers.processes import stop

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "collector" / "build.sh"

T = TypeVar("T")


@dataclass(frozen=True)
class Binaries:
    otelcol: Path
    jaeger: Path


def build_binaries() -> Binaries:
    """The Collector and Jaeger of collector/build.sh (reused from its cache when built for this manifest).

    Skips, naming the toolchain, where Go is not installed; fails if the build itself fails."""
    if shutil.which("go") is None:
        pytest.skip("the Go toolchain is missing (go >= 1.26): collector/build.sh builds the OpenTelemetry "
                    "Collector and Jaeger v2 from the Go module proxy")
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=3600)
    assert result.returncode == 0, f"collector/build.sh failed:\n{result.stderr[-4000:]}"
    paths = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    return Binaries(otelcol=Path(paths["otelcol"]), jaeger=Path(paths["jaeger"]))


@pytest.fixture(scope="session")
def collector_binaries() -> Binaries:
    return build_binaries()


def free_port() -> int:
    """A loopback port free a moment ago (for configs that must name their ports before the server starts)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # only 127.0.0.1 URLs are passed here
        return json.loads(response.read())


def get_text(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return bytes(response.read()).decode()


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.2) -> T:
    """Poll `probe` until it returns something other than None (exceptions count as not yet)."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
        except (OSError, ValueError, KeyError) as exc:
            last_error, value = exc, None
        if value is not None:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last_error})")


class Server:
    """A server process writing stdout and stderr to a log file in the test's tmp dir."""

    def __init__(self, name: str, argv: Sequence[str], log_dir: Path, env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.log = log_dir / f"{name}.log"
        with self.log.open("ab") as out:
            self.process: subprocess.Popen[bytes] = subprocess.Popen(
                list(argv), stdout=out, stderr=subprocess.STDOUT, env=None if env is None else dict(env)
            )

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def wait_ready(self, url: str, timeout: float = 60.0) -> None:
        """Until `url` answers 200; fails with the log's tail if the process exits first."""

        def ready() -> bool | None:
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited {self.process.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    return True if response.status == 200 else None
            except (urllib.error.URLError, OSError):
                return None

        try:
            wait_for(f"{self.name} at {url}", ready, timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.tail()}") from None

    def kill(self) -> None:
        """SIGKILL, as an OOM kill or an eviction past its grace period does."""
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            stop(self.process)


@contextlib.contextmanager
def servers() -> Iterator[list[Server]]:
    """A list to start servers into; each is stopped at the end, the last started first."""
    started: list[Server] = []
    try:
        yield started
    finally:
        for server in reversed(started):
            server.stop()
