"""Stopping the real servers the tests start as processes (Prometheus, Phoenix, Chromium, Rotel, apps)."""

from __future__ import annotations

import subprocess
from typing import Any


def stop(process: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds; reaped either way."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
