"""Scoring in a process of its own: `RagScoringSpanProcessor(..., worker="process")`.

In CPython the scoring thread's Python work holds the app's GIL (see docs/overhead.md). With
`worker="process"` the app's process keeps only what must stay there: it holds the spans of sampled traces,
ships each closed RAG trace to a child process as plain data, and writes the child's findings onto the
spans it forwards. Capture, per-scorer sampling, admission, redaction, judging and scoring run in the
child, under a GIL of its own. The child runs the same pipeline as the thread worker
(`scoring_child.ScoringPipeline`), which answers each trace with the attributes and events to write
instead of forwarding spans.

The child is `python -m ragtrace.live.scoring_child`, not a multiprocessing child: the spawn method
re-imports the app's main module, and fork copies a threaded process. It talks length-prefixed pickles over
two pipes; its settings travel in the first message, so the judge, scorers, sampler, redactor and
extractor must pickle (ragtrace's own do; yours must be classes or functions the child can import).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import pickle
import select
import struct
import subprocess
import sys
import time
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.util.types import AttributeValue

from ragtrace._sdk import IS_REMOTE, SPAN_ID, TRACE_FLAGS, TRACE_ID, span_fields
from ragtrace.capture import Extractor
from ragtrace.capture.values import attrs_of
from ragtrace.judges.base import Judge
from ragtrace.live.redaction import Redactor
from ragtrace.live.sampling import Sampler
from ragtrace.scoring import Scorer

logger = logging.getLogger(__name__)

_HEADER = struct.Struct("!Q")

# What crosses the pipe. A span: (name, trace id, span id, trace flags, parent span id or None, parent is
# remote, kind, start, end, attributes, events as (name, attributes, timestamp), index of its resource).
PlainSpan = tuple[Any, ...]
PlainEvent = tuple[str, dict[str, AttributeValue], int]
# What the child wrote for one span: (span id, attributes, events).
SpanWrites = tuple[int, dict[str, AttributeValue], list[PlainEvent]]
MetricCall = tuple[str, tuple[Any, ...]]


@dataclass(frozen=True)
class ChildSettings:
    """Everything the scoring process needs to build its pipeline (it must pickle)."""

    judge: Judge
    scorers: tuple[Scorer, ...]
    sampler: Sampler
    target: Literal["retrieval", "generation", "root"]
    score_deadline: float
    max_queue: int
    max_held_spans: int
    max_open_traces: int
    concurrency: int
    redactor: Redactor | None
    extractor: Extractor | None
    reason_max_chars: int
    record_metrics: bool  # the app's process has metrics to replay the scores and judge calls on


@dataclass
class TraceAnswer:
    """What the child made of one trace: its decisions and capture counts, and the attributes and events
    for each evaluated span. The app's process counts them only if it still holds the trace, so that a
    trace it gave up on (a deadline, a short flush) is counted once, as a timeout."""

    trace_id: int
    decisions: dict[str, int]
    capture: dict[str, int]
    writes: list[SpanWrites] = field(default_factory=list)


@dataclass
class Answers:
    """One message from the child: finished traces, and the metrics calls of its judgings."""

    traces: list[TraceAnswer] = field(default_factory=list)
    metric_calls: list[MetricCall] = field(default_factory=list)


# --- plain data ----------------------------------------------------------------------------------------


def plain_traces(traces: Sequence[Sequence[ReadableSpan]]) -> tuple[list[dict[str, Any]], list[list[PlainSpan]]]:
    """Spans as tuples of plain values, with each distinct resource's attributes sent once."""
    resources: list[dict[str, Any]] = []
    index: dict[int, int] = {}
    out: list[list[PlainSpan]] = []
    for spans in traces:
        plain: list[PlainSpan] = []
        for span in spans:
            name, ctx, parent, resource, events, kind, start, end = span_fields(span)
            assert ctx is not None  # the store holds spans with a context only
            at = index.get(id(resource))
            if at is None:
                at = index[id(resource)] = len(resources)
                resources.append(dict(resource.attributes) if resource is not None else {})
            plain.append((
                name, ctx[TRACE_ID], ctx[SPAN_ID], int(ctx[TRACE_FLAGS]),
                parent[SPAN_ID] if parent is not None else None, bool(parent is not None and parent[IS_REMOTE]),
                kind._value_, start, end, _plain_dict(attrs_of(span)),
                plain_events(events) if events else [],
                at,
            ))
        out.append(plain)
    return resources, out


def span_of(plain: PlainSpan, resources: Sequence[Resource]) -> ReadableSpan:
    name, trace_id, span_id, flags, parent_id, parent_remote, kind, start, end, attrs, events, at = plain
    trace_flags = TraceFlags(flags)
    parent = (
        SpanContext(trace_id, parent_id, is_remote=parent_remote, trace_flags=trace_flags)
        if parent_id is not None else None
    )
    return ReadableSpan(
        name=name,
        context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=trace_flags),
        parent=parent,
        resource=resources[at],
        attributes=attrs,
        events=[Event(n, a, timestamp=t) for n, a, t in events],
        kind=SpanKind(kind),
        start_time=start,
        end_time=end,
    )


def _plain_dict(attrs: Mapping[str, Any]) -> dict[str, Any]:
    return attrs if type(attrs) is dict else dict(attrs)  # the SDK's own dict travels as it is


def plain_events(events: Sequence[Event]) -> list[PlainEvent]:
    return [(e.name, dict(attrs_of(e)), e.timestamp) for e in events]


def events_of(plain: Sequence[PlainEvent]) -> list[Event]:
    return [Event(name, attrs, timestamp=timestamp) for name, attrs, timestamp in plain]


# --- frames --------------------------------------------------------------------------------------------


def frame(data: bytes) -> bytes:
    return _HEADER.pack(len(data)) + data


def write_frame(stream: IO[bytes], message: object) -> None:
    stream.write(frame(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)))
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next message; EOFError when the other side closed its end."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


class _Importable(pickle.Pickler):
    """Refuses what the child could not import: a class or function of the app's `__main__`."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type | types.FunctionType) and getattr(obj, "__module__", None) == "__main__":
            raise pickle.PicklingError(
                f"{obj.__qualname__} is defined in __main__, which the scoring process cannot import; "
                "define it in a module"
            )
        return NotImplemented


def _importable_pickle(message: object) -> bytes:
    out = io.BytesIO()
    _Importable(out, protocol=pickle.HIGHEST_PROTOCOL).dump(message)
    return out.getvalue()


def _readable(fd: int, timeout: float) -> bool:
    """Whether `fd` has data (or end of file) within `timeout` seconds. poll(), not select(): an app with
    many open files gives the pipe a descriptor above select()'s limit of 1024."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


# --- the app's side ------------------------------------------------------------------------------------


class ScoringProcess:
    """The child process and its pipes, seen from the app. `send` ships traces; `receive` returns the
    answers that arrived. Both run on the processor's worker thread, at its ticks: the app's process has
    no thread of its own waiting on the child, since each wake-up of a thread costs the app CPU and GIL.
    `alive` turns False for good when the child exits or a pipe breaks."""

    def __init__(self, settings: ChildSettings) -> None:
        self._settings = _importable_pickle(settings)
        self._process: subprocess.Popen[bytes] | None = None
        # Plain file descriptors, no file objects: a forked copy of the app closes its copies without
        # flushing anything into the parent's pipe.
        self._to_child: int | None = None
        self._from_child: int | None = None
        self._received = bytearray()
        self._stopping = False
        self.alive = False

    def start(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "ragtrace.live.scoring_child", str(to_child_r), str(from_child_w)],
                pass_fds=(to_child_r, from_child_w),
                stdin=subprocess.DEVNULL,
                # the app's own path, so that `-m` finds the same ragtrace (sys.path itself follows)
                env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
            )
        except BaseException:
            for fd in (to_child_w, from_child_r):
                os.close(fd)
            raise
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self._to_child, self._from_child = to_child_w, from_child_r
        self.alive = True
        # sys.path first, so that the settings (your judge's class, say) unpickle in the child
        if not (self._send(pickle.dumps(list(sys.path))) and self._send(pickle.dumps(self._settings))):
            raise RuntimeError(f"ragtrace: the scoring process did not start (exit code {self.code})")

    def send(self, traces: Sequence[Sequence[ReadableSpan]]) -> bool:
        """Ship closed traces; False when the child is gone (the caller forwards them unscored). Raises
        when a trace does not pickle, before anything is written."""
        if not self.alive:
            return False
        return self._send(pickle.dumps(plain_traces(traces), protocol=pickle.HIGHEST_PROTOCOL))

    def _send(self, data: bytes) -> bool:
        fd = self._to_child
        if fd is None:
            return False
        view = memoryview(frame(data))
        try:
            while view:
                view = view[os.write(fd, view) :]
            return True
        except OSError:  # the child exited (broken pipe)
            self._lost()
            return False

    def receive(self, timeout: float = 0.0) -> list[Answers]:
        """The answers that arrived, waiting up to `timeout` seconds for the first."""
        fd = self._from_child
        if fd is None:
            return []
        answers: list[Answers] = []
        wait = max(timeout, 0.0)
        while True:
            try:
                ready = _readable(fd, wait)
                chunk = os.read(fd, 1 << 20) if ready else b""
            except (OSError, ValueError):
                chunk, ready = b"", True
            if not ready:
                return answers
            if not chunk:  # end of file: the child exited
                self._lost()
                return answers
            self._received += chunk
            try:
                answers.extend(self._complete_frames())
            except Exception:  # a garbled stream: this child cannot be trusted any more
                logger.exception("ragtrace: an answer of the scoring process could not be read")
                if self._process is not None:
                    self._process.kill()
                self._lost()
                return answers
            wait = 0.0  # then take whatever else is there already, without waiting

    def _complete_frames(self) -> list[Answers]:
        frames: list[Answers] = []
        buffer = self._received
        while len(buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(buffer)
            if len(buffer) < _HEADER.size + size:
                break
            frames.append(pickle.loads(bytes(buffer[_HEADER.size : _HEADER.size + size])))
            del buffer[: _HEADER.size + size]
        return frames

    def _lost(self) -> None:
        if self.alive and not self._stopping:
            if self._process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._process.wait(0.5)  # for its exit code
            logger.error("ragtrace: the scoring process exited (code %s); its traces are forwarded unscored",
                         self.code)
        self.alive = False

    def restart(self) -> None:
        """Let the old child go (killed if it still runs) and start a new one with the same settings."""
        self.stop(timeout=1.0)
        self._received = bytearray()
        self._stopping = False
        self.start()

    @property
    def code(self) -> int | None:
        return self._process.poll() if self._process is not None else None

    def stop(self, timeout: float = 5.0) -> None:
        """Close the pipe (the child finishes what it holds and exits); kill it after `timeout`. Answers
        that still arrive are read and dropped, so that the child never blocks writing them."""
        self._stopping = True
        self.alive = False
        to_child, self._to_child = self._to_child, None
        if to_child is not None:
            os.close(to_child)
        process, from_child = self._process, self._from_child
        deadline = time.monotonic() + timeout
        while process is not None and process.poll() is None and time.monotonic() < deadline:
            if from_child is not None:
                try:
                    if _readable(from_child, 0.05) and not os.read(from_child, 1 << 20):
                        from_child = None  # the child closed its end
                except OSError:
                    from_child = None
            else:
                time.sleep(0.05)
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout)
        fd, self._from_child = self._from_child, None
        if fd is not None:
            os.close(fd)

    def abandon(self) -> None:
        """In a forked copy of the app: let go of the parent's child without writing to it or stopping it."""
        for fd in (self._from_child, self._to_child):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._to_child = self._from_child = self._process = None
        self.alive = False
