"""The gateway's spool: what it acknowledged, kept on disk until the next hop has it.

A gateway answers an OTLP request as soon as it holds the spans, then keeps them in memory for up to
`score_deadline` while the trace is scored. Without a spool, a gateway killed in that window (an OOM kill,
a pod eviction, SIGKILL) loses spans its clients were told had arrived. With one, each request is written
to SQLite (WAL mode, one transaction per request) before it is answered, and each span's row is deleted
once the next hop's exporter reported success for it; on start the gateway replays what is left.

Layout: one row per request (the OTLP bytes as received, after decoding) and one row per span (its
24-byte trace+span id, pointing at its request). A request row goes when its last span row goes. A span
whose row is still there when the same span arrives again (a client retrying a request the gateway
stored but died before answering) is a duplicate: it is counted and not stored, or forwarded, twice.
A span's row is marked `sending` while its export batch is out: a gateway that dies then cannot know
whether the next hop took the batch, so a replayed span with the mark is counted as a possible duplicate.

The size bound counts the stored request bytes plus a fixed cost per span row; a request that does not
fit is refused with `SpoolFull` (HTTP 503 / gRPC UNAVAILABLE), which OTLP clients retry.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ragtrace._logs import ragtrace_logger
from ragtrace.gateway.receivers import RetryLater

logger = ragtrace_logger("ragtrace.gateway.spool")

FILE_NAME = "ragtrace-spool.sqlite3"
LOCK_NAME = "ragtrace-spool.lock"
# What a span's row and its index entry cost on disk, roughly: counted towards the size bound.
SPAN_ROW_BYTES = 64

Synchronous = Literal["full", "normal"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS requests ("
    " id INTEGER PRIMARY KEY, received REAL NOT NULL, size INTEGER NOT NULL, body BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS spans ("
    " key BLOB PRIMARY KEY, request INTEGER NOT NULL, sending INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS spans_by_request ON spans (request)",
)


class SpoolFull(RetryLater):
    """The spool has no room for a request: refused, the client keeps it and sends it again."""


def span_key(trace_id: int, span_id: int) -> bytes:
    """A span's identity in the spool: its trace id and span id, 24 bytes."""
    return ((trace_id << 64) | span_id).to_bytes(24, "big")


@dataclass(frozen=True)
class StoredRequest:
    """A request as the spool holds it: the spans of `body` whose keys are in `pending` are not forwarded yet."""

    id: int
    received: float  # time.time() when it was stored
    body: bytes
    pending: frozenset[bytes]
    # Those of `pending` that were in an export when the gateway stopped: the next hop may have them already.
    sending: frozenset[bytes] = frozenset()


class Spool:
    """A bounded SQLite store of acknowledged, not yet forwarded requests (thread-safe).

    directory: created if missing; the database is `ragtrace-spool.sqlite3` in it (plus SQLite's -wal and
    -shm files), and one gateway at a time may use it (a lock file, released when the process ends).
    max_bytes: the bound. synchronous: "full" (default) syncs every commit to disk, so a stored request
    survives the machine's crash too; "normal" survives the process's crash (SIGKILL, OOM) only and
    costs less.
    """

    def __init__(self, directory: str | Path, max_bytes: int, *, synchronous: Synchronous = "full") -> None:
        if max_bytes < 1:
            raise ValueError(f"the spool's size bound must be at least 1 byte, got {max_bytes!r}")
        if synchronous not in ("full", "normal"):
            raise ValueError(f"spool synchronous must be 'full' or 'normal', got {synchronous!r}")
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._owner = _own(self.directory)
        except OSError as exc:
            raise ValueError(f"cannot open the spool in {self.directory}: {exc.strerror or exc}") from exc
        try:
            self._db = sqlite3.connect(
                self.directory / FILE_NAME, isolation_level=None, check_same_thread=False, timeout=30.0
            )
        except sqlite3.Error as exc:
            os.close(self._owner)
            raise ValueError(f"cannot open the spool in {self.directory}: {exc}") from exc
        self.path = self.directory / FILE_NAME
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        try:
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise ValueError(f"the spool in {self.directory} cannot use SQLite's WAL mode (got {mode!r})")
            self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            for statement in _SCHEMA:
                self._db.execute(statement)
            self._db.execute("CREATE TEMP TABLE IF NOT EXISTS batch (key BLOB PRIMARY KEY) WITHOUT ROWID")
            self._bytes = int(self._db.execute("SELECT coalesce(sum(size), 0) FROM requests").fetchone()[0])
            self._spans = int(self._db.execute("SELECT count(*) FROM spans").fetchone()[0])
            self._requests = int(self._db.execute("SELECT count(*) FROM requests").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            self._db.close()
            os.close(self._owner)
            raise ValueError(f"the spool {self.path} is not a usable SQLite database: {exc}") from exc
        self.found_at_start = self._spans
        self.duplicates = 0
        self.refused = 0

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (under `self._lock`): committed, durably, or rolled back."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    # --- the hot path ----------------------------------------------------------------------------------

    def add(self, body: bytes, keys: Sequence[bytes], received: float | None = None) -> list[bool]:
        """Store a request and its spans' keys in one transaction, durably; for each key, whether it is
        new (False: that span is still stored from an earlier request, a duplicate). SpoolFull when it
        does not fit (a request larger than the whole bound is taken into an empty spool)."""
        cost = len(body) + SPAN_ROW_BYTES * len(keys)
        with self._lock:
            if self._bytes and self._bytes + cost > self.max_bytes:
                self.refused += len(keys)
                raise SpoolFull(
                    f"the gateway's spool is full ({self._bytes} of {self.max_bytes} bytes in {self._spans} "
                    "spans not yet forwarded); retry"
                )
            try:
                with self._transaction() as db:
                    request = db.execute(
                        "INSERT INTO requests (received, size, body) VALUES (?, ?, ?)",
                        (time.time() if received is None else received, cost, body),
                    ).lastrowid
                    before = db.total_changes
                    db.executemany("INSERT OR IGNORE INTO spans (key, request) VALUES (?, ?)",
                                   [(key, request) for key in keys])
                    stored = db.total_changes - before
                    if stored == len(keys):
                        fresh = [True] * len(keys)
                    else:  # some were stored already (or twice in this request): which ones
                        mine = {k for (k,) in db.execute("SELECT key FROM spans WHERE request = ?", (request,))}
                        fresh = []
                        for key in keys:
                            fresh.append(key in mine)
                            mine.discard(key)  # a span twice in one request is stored once
                        stored = sum(fresh)
                    if not stored:  # every span is stored already: keep no empty request
                        db.execute("DELETE FROM requests WHERE id = ?", (request,))
            except sqlite3.Error as exc:
                logger.error("ragtrace gateway: cannot write to the spool %s: %s", self.path, exc)
                raise SpoolFull(f"the gateway's spool cannot store the request ({exc}); retry") from exc
            if stored:
                self._bytes += cost
                self._requests += 1
                self._spans += stored
            self.duplicates += len(keys) - stored
        return fresh

    def forwarded(self, keys: Iterable[bytes]) -> int:
        """The next hop has these spans: delete their rows, and each request whose last span this was.
        Returns how many rows were deleted (keys not stored are ignored)."""
        with self._lock:
            try:
                with self._transaction() as db:
                    _load_keys(db, keys)
                    requests = [r for (r,) in db.execute(
                        "SELECT DISTINCT request FROM spans WHERE key IN (SELECT key FROM temp.batch)")]
                    before = db.total_changes
                    db.execute("DELETE FROM spans WHERE key IN (SELECT key FROM temp.batch)")
                    deleted = db.total_changes - before
                    freed = gone = 0
                    for request in requests:
                        row = db.execute(
                            "DELETE FROM requests WHERE id = ? AND NOT EXISTS "
                            "(SELECT 1 FROM spans WHERE request = ?) RETURNING size",
                            (request, request),
                        ).fetchone()
                        if row is not None:
                            freed += row[0]
                            gone += 1
            except sqlite3.Error as exc:
                # The rows stay: the spans are replayed at the next start (a duplicate, never a loss).
                logger.error("ragtrace gateway: cannot delete forwarded spans from the spool %s: %s", self.path, exc)
                return 0
            self._bytes -= freed
            self._requests -= gone
            self._spans -= deleted
        return deleted

    def sending(self, keys: Iterable[bytes], sending: bool = True) -> None:
        """Mark the rows of an export batch that is going out now (False: it failed, they were not taken)."""
        with self._lock:
            try:
                with self._transaction() as db:
                    _load_keys(db, keys)
                    db.execute(
                        "UPDATE spans SET sending = ? WHERE key IN (SELECT key FROM temp.batch)", (int(sending),)
                    )
            except sqlite3.Error as exc:  # the mark only sharpens a count: the spans are safe either way
                logger.warning("ragtrace gateway: cannot mark spans being sent in the spool %s: %s", self.path, exc)

    # --- replay ------------------------------------------------------------------------------------------

    def stored(self) -> Iterator[StoredRequest]:
        """The requests stored now, oldest first, each with the keys of its spans not forwarded yet."""
        with self._lock:
            ids = [row[0] for row in self._db.execute("SELECT id FROM requests ORDER BY id")]
        for request in ids:
            with self._lock:
                row = self._db.execute("SELECT received, body FROM requests WHERE id = ?", (request,)).fetchone()
                rows = self._db.execute("SELECT key, sending FROM spans WHERE request = ?", (request,)).fetchall()
            keys = frozenset(key for key, _ in rows)
            if row is not None and keys:
                sending = frozenset(key for key, mark in rows if mark)
                yield StoredRequest(request, float(row[0]), bytes(row[1]), keys, sending)

    # --- state -------------------------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "requests": self._requests,
                "spans": self._spans,
                "bytes": self._bytes,
                "max_bytes": self.max_bytes,
                "found_at_start": self.found_at_start,
                "duplicate_spans": self.duplicates,
                "refused_spans": self.refused,
            }

    def close(self) -> None:
        with self._lock:
            try:
                self._db.close()
            except sqlite3.Error:
                logger.exception("ragtrace gateway: closing the spool failed")
            if self._owner >= 0:
                os.close(self._owner)  # releases the directory for the next gateway
                self._owner = -1


def _own(directory: Path) -> int:
    """Lock the spool directory for this process (released when it closes the descriptor, or dies): two
    gateways replaying one spool would both forward every span in it."""
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise OSError(errno.EBUSY, "another gateway uses this spool; give each gateway a directory of its own") \
            from None
    return fd


def _load_keys(db: sqlite3.Connection, keys: Iterable[bytes]) -> None:
    """An export batch's keys into the temporary table `batch`, so that the statements on them run in
    SQLite's own loops, not one Python call per span."""
    db.execute("DELETE FROM temp.batch")
    db.executemany("INSERT OR IGNORE INTO temp.batch (key) VALUES (?)", ((key,) for key in keys))


__all__ = ["FILE_NAME", "SPAN_ROW_BYTES", "Spool", "SpoolFull", "StoredRequest", "span_key"]
