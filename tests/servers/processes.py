"""Waiting for and stopping the real servers the tests start as processes (Prometheus, Phoenix, Chromium,
Rotel, the Collector, apps)."""

from __future__ import annotations

import socket
import subprocess
import time
from typing import Any


def wait_listening(port: int, process: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """Until something accepts TCP connections on 127.0.0.1:`port`; fails at once if `process` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listened on port {port} within {timeout}s")


def stop(process: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds; reaped either way."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
