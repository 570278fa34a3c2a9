"""What crosses the pipes between the app's process and its scoring process: plain data, in frames.

Both ends talk length-prefixed pickles over two pipes. The child's settings travel in the first message,
so the judge, scorers, sampler, redactor and extractor must pickle (ragtrace's own do; yours must be
classes or functions the child can import). Spans travel as tuples of plain values, each distinct
resource's attributes once per message; the answers carry, per trace, its decision and capture counts
and the attributes and events to write on each evaluated span.
"""

from __future__ import annotations

import io
import pickle
import struct
import types
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import IO, Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.util.types import AttributeValue

from ragtrace._sdk import IS_REMOTE, SPAN_ID, TRACE_FLAGS, TRACE_ID, span_fields
from ragtrace.capture.values import attrs_of
from ragtrace.live.metrics import MetricCall
from ragtrace.live.options import ScoringOptions

HEADER = struct.Struct("!Q")

# What crosses the pipe. A span: (name, trace id, span id, trace flags, parent span id or None, parent is
# remote, kind, start, end, attributes, events as (name, attributes, timestamp), index of its resource).
PlainSpan = tuple[Any, ...]
PlainEvent = tuple[str, dict[str, AttributeValue], int]
# What the child wrote for one span: (span id, attributes, events).
SpanWrites = tuple[int, dict[str, AttributeValue], list[PlainEvent]]

# The scoring process starts with the OTel SDK off, so that no auto-instrumentation hook of the app installs
# ragtrace there; this variable carries the app's own OTEL_SDK_DISABLED (empty: unset), which the child puts
# back once started, for the one provider it may own (opt-in judge traces).
APP_SDK_SWITCH = "RAGTRACE_APP_OTEL_SDK_DISABLED"


@dataclass(frozen=True)
class ChildSettings(ScoringOptions):
    """The app's `ScoringOptions` as the scoring process gets them (they must pickle): the same fields,
    names and defaults, less what stays in the app's process (metrics, decision log, logger provider), plus whether the
    app has metrics to replay the child's scores and judge calls on."""

    record_metrics: bool = False

    @classmethod
    def of(cls, options: ScoringOptions) -> ChildSettings:
        given = {f.name: getattr(options, f.name) for f in fields(ScoringOptions)}
        kept_here = {"metrics": None, "decision_log": None, "logger_provider": None}
        return cls(**{**given, **kept_here}, record_metrics=options.metrics is not None)


@dataclass
class TraceAnswer:
    """What the child made of one trace: its decisions and capture counts, and the attributes and events
    for each evaluated span. The app's process counts them only if it still holds the trace, so that a
    trace it gave up on (a deadline, a short flush) is counted once, as a timeout."""

    trace_id: int
    decisions: dict[str, int]
    capture: dict[str, int]
    writes: list[SpanWrites] = field(default_factory=list)


# One message from the child, as it crosses the pipe: its finished traces, each (trace id, decisions,
# capture counts, writes), and the metrics calls of its judgings. Plain tuples: the app's process unpickles
# them for about a third less than the same answers as objects.
PlainAnswer = tuple[int, dict[str, int], dict[str, int], list[SpanWrites]]
Answers = tuple[list[PlainAnswer], list[MetricCall]]


def plain_answers(traces: Sequence[TraceAnswer], metric_calls: list[MetricCall]) -> Answers:
    return [(t.trace_id, t.decisions, t.capture, t.writes) for t in traces], metric_calls


# --- plain data ----------------------------------------------------------------------------------------


def plain_traces(traces: Sequence[Sequence[ReadableSpan]]) -> tuple[list[dict[str, Any]], list[list[PlainSpan]]]:
    """Spans as tuples of plain values, with each distinct resource's attributes sent once."""
    resources: list[dict[str, Any]] = []
    index: dict[int, int] = {}
    out: list[list[PlainSpan]] = []
    for spans in traces:
        plain: list[PlainSpan] = []
        for span in spans:
            name, ctx, parent, resource, events, kind, start, end, attrs = span_fields(span)
            assert ctx is not None  # the store holds spans with a context only
            at = index.get(id(resource))
            if at is None:
                at = index[id(resource)] = len(resources)
                resources.append(dict(resource.attributes) if resource is not None else {})
            plain.append((
                name, ctx[TRACE_ID], ctx[SPAN_ID], int(ctx[TRACE_FLAGS]),
                parent[SPAN_ID] if parent is not None else None, bool(parent is not None and parent[IS_REMOTE]),
                kind._value_, start, end, attrs if type(attrs) is dict else dict(attrs_of(span)),
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


def plain_events(events: Sequence[Event]) -> list[PlainEvent]:
    return [(e.name, dict(attrs_of(e)), e.timestamp) for e in events]


def events_of(plain: Sequence[PlainEvent]) -> list[Event]:
    return [Event(name, attrs, timestamp=timestamp) for name, attrs, timestamp in plain]


# --- frames --------------------------------------------------------------------------------------------


def frame(data: bytes) -> bytes:
    return HEADER.pack(len(data)) + data


def write_frame(stream: IO[bytes], message: object) -> None:
    stream.write(frame(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)))
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next message; EOFError when the other side closed its end."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        raise EOFError
    (size,) = HEADER.unpack(header)
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


def importable_pickle(message: object) -> bytes:
    out = io.BytesIO()
    _Importable(out, protocol=pickle.HIGHEST_PROTOCOL).dump(message)
    return out.getvalue()
