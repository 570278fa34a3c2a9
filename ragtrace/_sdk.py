"""The one module that touches the OpenTelemetry SDK's private fields: spans, and a provider's processors.

Each property of a `ReadableSpan` (and of its `SpanContext`) is a Python call. On the paths that touch
every span (admission, the encoding of traces for a scoring process, the copy that carries the scores)
those calls are most of the cost: 5 µs a span against 0.4 µs for the fields on a 2-core VM. `SDK_SPAN`
is the SDK's `ReadableSpan` when its fields are where this module reads them, checked once at import on
a span built through the public constructor; otherwise it is None and every span goes through the
properties. Only spans of exactly that type take the fast path: a subclass may override a property.

The SDK has no public way to put a processor in front of the others (`add_span_processor` only
appends), nor to put an exporter behind a `BatchSpanProcessor` that exists; `install` needs both, and
does them here: the provider's tuple of processors is swapped under the multi-processor's own lock, the
way `add_span_processor` does, and the batching's exporter is swapped in one attribute write.

Nor does the API say whether a measurement or a log record goes anywhere: until the app sets a global
provider, its proxies hand everything to a no-op. `records_anywhere` and `emits_anywhere` read the proxy's
real instrument or logger, so that the scoring worker builds no attributes, contexts or exemplar spans
for a record nobody keeps, and starts building them the moment the app sets a provider.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from typing import Any, Final

from opentelemetry._logs import Logger, NoOpLogger
from opentelemetry._logs._internal import ProxyLogger
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.metrics import Instrument, NoOpCounter, NoOpHistogram
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.metrics.view import DropAggregation
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.util.types import AttributeValue

# SpanContext is a tuple: (trace_id, span_id, is_remote, trace_flags, trace_state, is_valid)
TRACE_ID: Final = 0
SPAN_ID: Final = 1
IS_REMOTE: Final = 2
TRACE_FLAGS: Final = 3

# (context, parent) of a span: C-level getters, no Python frame per span.
SDK_IDS: Final = attrgetter("_context", "_parent")
PUBLIC_IDS: Final = attrgetter("context", "parent")


def _fields_match_properties() -> bool:
    try:
        parent = SpanContext(0x1234, 0x56, is_remote=True, trace_flags=TraceFlags(1))
        context = SpanContext(0x1234, 0x78, is_remote=False, trace_flags=TraceFlags(1))
        resource = Resource.create({"service.name": "check"})
        events = [Event("e", {"k": 1}, timestamp=3)]
        span = ReadableSpan(
            name="n", context=context, parent=parent, resource=resource, attributes={"a": 1}, events=events,
            kind=SpanKind.CLIENT, start_time=1, end_time=2, links=[Link(parent)],
        )
        fields = vars(span)
        return (
            SDK_IDS(span) == (span.context, span.parent)
            and fields["_name"] == span.name and fields["_kind"] is span.kind
            and fields["_start_time"] == span.start_time and fields["_end_time"] == span.end_time
            and fields["_resource"] is span.resource and tuple(fields["_events"]) == tuple(span.events)
            and tuple(fields["_links"]) == tuple(span.links)
            and dict(fields["_attributes"]) == dict(span.attributes or {})
            and (context[TRACE_ID], context[SPAN_ID], context[IS_REMOTE], context[TRACE_FLAGS])
            == (context.trace_id, context.span_id, context.is_remote, context.trace_flags)
            and parent[IS_REMOTE] is True
        )
    except Exception:
        return False


SDK_SPAN: type[ReadableSpan] | None = ReadableSpan if _fields_match_properties() else None


def ids_of(span: ReadableSpan) -> tuple[SpanContext | None, SpanContext | None]:
    """(context, parent) of any span; the hot paths inline this as `(SDK_IDS if ... else PUBLIC_IDS)(span)`."""
    return (SDK_IDS if type(span) is SDK_SPAN else PUBLIC_IDS)(span)  # type: ignore[no-any-return]


# The SDK's spans whose fields `capture_fields` and `has_events` read: its ReadableSpan, and the Span that the
# processors and exporters of the same process are handed (it inherits the properties, overrides none).
_CAPTURE_TYPES: Final = (
    frozenset({ReadableSpan, Span}) if SDK_SPAN is not None
    and not any(name in vars(Span) for name in ("context", "parent", "start_time", "end_time", "events"))
    else frozenset()
)
_CAPTURE_FIELDS: Final = attrgetter("_context", "_parent", "_start_time", "_end_time")


def capture_fields(span: object) -> tuple[Any, Any, Any, Any, Any]:
    """(trace id, span id, parent's span id, start, end) of a span, None for what it lacks, unchecked: capture
    reads them for every span of a trace, and each property (the span's and its contexts') is a Python call."""
    if type(span) in _CAPTURE_TYPES:
        context, parent, start, end = _CAPTURE_FIELDS(span)
        if type(context) is SpanContext and (parent is None or type(parent) is SpanContext):
            return (context[TRACE_ID], context[SPAN_ID], parent[SPAN_ID] if parent is not None else None,
                    start, end)
    context, parent = getattr(span, "context", None), getattr(span, "parent", None)
    return (getattr(context, "trace_id", None), getattr(context, "span_id", None),
            getattr(parent, "span_id", None) if parent is not None else None,
            getattr(span, "start_time", None), getattr(span, "end_time", None))


def has_events(span: object) -> bool:
    """Whether a span recorded any event: its list's length, not the tuple copy (taken under a lock) that
    each read of `span.events` builds; most spans have none."""
    if type(span) in _CAPTURE_TYPES:
        return len(span._events) > 0  # type: ignore[attr-defined]
    return bool(span.events)  # type: ignore[attr-defined]


def is_local_root(span: ReadableSpan) -> bool:
    """A span whose parent is not in this process: it has none, or one propagated from elsewhere."""
    parent = ids_of(span)[1]
    return parent is None or bool(parent[IS_REMOTE])


_SPAN_FIELDS: Final = attrgetter(
    "_name", "_context", "_parent", "_resource", "_events", "_kind", "_start_time", "_end_time", "_attributes"
)


def span_fields(span: ReadableSpan) -> tuple[Any, ...]:
    """(name, context, parent, resource, events, kind, start, end, attributes) of an ended span; the
    attributes are the plain dict inside the SDK's `BoundedAttributes` where there is one (see
    `stored_attributes`) and the events the deque inside its `BoundedList`, else whatever the span returns."""
    if type(span) is SDK_SPAN:
        name, context, parent, resource, events, kind, start, end, attributes = _SPAN_FIELDS(span)
        if type(events) is BoundedList:  # an ended span's events no longer change: its deque, read in C
            events = events._dq  # type: ignore[attr-defined]
        if (inner := _inner_dict(attributes)) is not None:
            attributes = inner
        return name, context, parent, resource, events, kind, start, end, attributes
    return (span.name, span.context, span.parent, span.resource, span.events, span.kind,
            span.start_time, span.end_time, span.attributes)


def stored_attributes(obj: object) -> dict[str, Any] | None:
    """The plain dict inside a span's or event's `BoundedAttributes`, None for anything else: an ended
    span's attributes no longer change, and a dict answers a missing key without the KeyError round
    trip that `Mapping.get` on the public proxy costs (readers probe many absent keys)."""
    return _inner_dict(getattr(obj, "_attributes", None))


def _inner_dict(stored: object) -> dict[str, Any] | None:
    """The plain dict inside a `BoundedAttributes`, None for anything else."""
    if type(stored) is BoundedAttributes:
        inner = getattr(stored, "_dict", None)
        if type(inner) is dict:
            return inner
    return None


def _dropped(container: object) -> int:
    """What a span's BoundedAttributes or BoundedList dropped (0 for a plain container)."""
    dropped = getattr(container, "dropped", 0)
    return dropped if isinstance(dropped, int) else 0


def dropped_counts(span: ReadableSpan) -> tuple[Sequence[Event], Sequence[Link], int, int, int]:
    """(events, links, dropped attributes, dropped events, dropped links) of an ended span."""
    if type(span) is SDK_SPAN:
        events, links = span._events, span._links
        return events, links, _dropped(span._attributes), _dropped(events), _dropped(links)
    return span.events, span.links, span.dropped_attributes, span.dropped_events, span.dropped_links


def copy_span(
    span: ReadableSpan, attributes: Mapping[str, AttributeValue], events: Sequence[Event], links: Sequence[Link]
) -> ReadableSpan:
    """A copy of an ended span with other attributes, events and links; ids and times unchanged."""
    if type(span) is SDK_SPAN:  # a copy of its fields: the constructor would read a dozen properties
        copy = object.__new__(ReadableSpan)
        copy.__dict__.update(vars(span))
        copy._attributes, copy._events, copy._links = attributes, events, links  # type: ignore[assignment]
        return copy
    return ReadableSpan(
        name=span.name, context=span.context, parent=span.parent, resource=span.resource,
        attributes=attributes, events=events, links=links, kind=span.kind, status=span.status,
        start_time=span.start_time, end_time=span.end_time, instrumentation_scope=span.instrumentation_scope,
    )


def set_context(span: ReadableSpan, context: SpanContext) -> None:
    """Give a span that is still being built (never one another processor holds) another context."""
    span._context = context


def set_batch_exporter(processor: BatchSpanProcessor, exporter: SpanExporter) -> None:
    """Make a BatchSpanProcessor hand its next batches to another exporter (one attribute swap: a batch
    being exported goes to the old one)."""
    processor._batch_processor._exporter = exporter
    if processor.span_exporter is not exporter:
        raise TypeError("this BatchSpanProcessor keeps its exporter elsewhere; use scoring_batch_processor()")


def metric_exporter_preferences(exporter: MetricExporter) -> tuple[Any, Any]:
    """(preferred temporality, preferred aggregation) of a metric exporter, for an exporter wrapping it (the
    SDK's reader reads these fields of the exporter it is given, and they have no public getter)."""
    return exporter._preferred_temporality, exporter._preferred_aggregation


def views_keep_attribute(provider: object, instrument: object, key: str) -> bool | None:
    """Whether the SDK MeterProvider's views keep measurement attribute `key` as a series attribute of
    `instrument` (one of its own): True when a view matching it keeps every attribute or names `key`, or
    when none matches (the default view keeps every attribute); False when each matching view drops it
    (lists other keys, or drops the instrument). None when unknown: not the SDK's provider, or its views
    are not where this reads them. The SDK takes views only in the provider's constructor, and shows them
    nowhere public: `_sdk_config.views`, matched by the View's own `_match`."""
    if not isinstance(provider, SdkMeterProvider):
        return None
    try:
        views = provider._sdk_config.views
        matching = [view for view in views if view._match(instrument)]  # type: ignore[arg-type]
        if not matching:
            return True
        for view in matching:
            if isinstance(view._aggregation, DropAggregation):
                continue
            keys = view._attribute_keys
            if keys is None or key in keys:
                return True
        return False
    except Exception:
        return None


def batch_queue_room(processor: SpanProcessor) -> tuple[int, int, int] | None:
    """(free places, size, export batch size) of the fullest span queue behind `processor`: a
    BatchSpanProcessor's own, or the least free of those a multi-span processor hands spans to. None
    when no queue is known there (a SimpleSpanProcessor, another processor): spans go on at once."""
    members = getattr(processor, "_span_processors", None)
    if isinstance(members, tuple):
        rooms = [room for member in members if (room := batch_queue_room(member)) is not None]
        return min(rooms) if rooms else None
    if not isinstance(processor, BatchSpanProcessor):
        return None
    batching = getattr(processor, "_batch_processor", None)
    queue = getattr(batching, "_queue", None)
    size = getattr(batching, "_max_export_batch_size", None)
    maxlen = getattr(queue, "maxlen", None)
    if queue is None or not isinstance(maxlen, int) or not isinstance(size, int):
        return None
    return maxlen - len(queue), maxlen, size


def span_processors(provider: TracerProvider) -> tuple[SpanProcessor, ...]:
    """The processors a provider's active multi-span processor calls, in order."""
    active = provider._active_span_processor
    existing = getattr(active, "_span_processors", None)
    if not isinstance(existing, tuple):
        raise TypeError(
            f"cannot install ragtrace into {type(active).__name__}: expected the SDK's "
            "SynchronousMultiSpanProcessor or ConcurrentMultiSpanProcessor"
        )
    return existing


def replace_span_processors(
    provider: TracerProvider, replace: Callable[[tuple[SpanProcessor, ...]], tuple[SpanProcessor, ...]]
) -> None:
    """Swap the provider's processors for `replace(current)`, atomically for the provider's other users."""
    span_processors(provider)  # the same check, outside the lock
    active = provider._active_span_processor
    with active._lock:
        active._span_processors = replace(active._span_processors)


def destination(target: SpanExporter | SpanProcessor) -> str:
    """Where an exporter (or the exporters behind a processor) sends spans, in words: the exporter's class
    and, for the OTLP exporters, the endpoint they keep privately (`_endpoint`)."""
    members = getattr(target, "_span_processors", None)
    if isinstance(members, tuple):
        return ", ".join(destination(member) for member in members) or "no exporter"
    exporter = getattr(target, "span_exporter", None)
    if isinstance(target, SpanProcessor) and exporter is None:
        return type(target).__name__
    exporter = exporter if exporter is not None else target
    endpoint = getattr(exporter, "_endpoint", None)
    return f"{type(exporter).__name__} {endpoint}" if isinstance(endpoint, str) else type(exporter).__name__


_NO_OP_INSTRUMENTS: Final = frozenset({NoOpCounter, NoOpHistogram})


def records_anywhere(instrument: Instrument) -> bool:
    """False for an instrument whose measurements go nowhere: a no-op one, or the API's proxy while no
    MeterProvider is set (the proxy gets its real instrument when one is). Exact types, no `isinstance`:
    the instruments are ABCs, and this runs for every score the app's process records."""
    real = getattr(instrument, "_real_instrument", instrument)  # a proxy's (None until a provider is set)
    return real is not None and type(real) not in _NO_OP_INSTRUMENTS


def emits_anywhere(logger: Logger) -> bool:
    """False for a logger whose records go nowhere: a no-op one, or the API's proxy while no LoggerProvider
    is set (its `_logger` resolves the real one as soon as one is)."""
    if type(logger) is ProxyLogger:
        logger = logger._logger
    return type(logger) is not NoOpLogger
