"""Progress of a scoring run on stderr."""

from __future__ import annotations

import time
from typing import TextIO


class Progress:
    """A bar redrawn in place on a TTY; elsewhere (CI logs) a line every 10% or 10 seconds."""

    def __init__(self, total: int, stream: TextIO, *, enabled: bool = True, done: int = 0) -> None:
        self.total, self.stream, self.enabled = total, stream, enabled
        self.done = self.start_done = done
        self.started = time.monotonic()
        self.tty = enabled and bool(getattr(stream, "isatty", lambda: False)())
        self.step = max(1, total // 10)
        self.last_line = self.started

    def _text(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = (self.done - self.start_done) / elapsed
        left = self.total - self.done
        eta = f"{left / rate:.0f}s" if rate > 0 else "?"
        pct = 100 * self.done / self.total if self.total else 100.0
        return f"{self.done}/{self.total} ({pct:.0f}%) {rate:.1f} items/s, eta {eta}"

    def update(self) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self.tty:
            width = 30
            filled = int(width * self.done / self.total) if self.total else width
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self._text()}   ")
            self.stream.flush()
            return
        now = time.monotonic()
        if self.done == self.total or self.done % self.step == 0 or now - self.last_line >= 10:
            self.last_line = now
            self.stream.write(f"ragtrace: {self._text()}\n")
            self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


__all__ = ["Progress"]
