"""One trace's spans in, one CapturedSample per retrieval span out.

Pairing rule (attributes.md): the generation that consumed a retrieval is the first generation span of
the trace that starts at or after the retrieval ended, preferring one under the same parent. We read
"under the same parent" as "closest in the tree": candidates are ranked by how far up from the
retrieval their nearest common ancestor is (a sibling, sharing the parent, is nearest), then by start
time. For flat traces this is exactly the rule; for nested frameworks (LangChain puts the retriever
under a RunnableParallel and the LLM under the RunnableSequence above it) it still keeps two
concurrent RAG chains of one trace apart.

The query is the retrieval's own, else the last user message of the paired generation, else the trace
root's input. A retrieval with no generation is still a sample (empty response).

Custom extractor: when given, it runs first; if it returns samples, they are the answer for the trace.
If it raises (counted `extractor_error`) or returns nothing, the built-in readers run, so an extractor
only needs to know the app's own span shapes and a bug in it never costs a standard sample.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace.capture import openllmetry, readers
from ragtrace.capture.types import CapturedSample, CaptureStats, Extractor
from ragtrace.capture.values import (
    DEFAULT_LIMITS,
    CaptureLimits,
    RetrievalReading,
    Skip,
    attrs_of,
    cut,
)
from ragtrace.scoring import Document, RagSample

GROUND_TRUTH = "ragtrace.ground_truth"


@dataclass
class _Node:
    span: ReadableSpan
    trace_id: int
    span_id: int
    parent_id: int | None
    start: int | None
    end: int | None
    role: str | None = None
    shape: str = ""
    order: int = 0

    @property
    def sort_key(self) -> tuple[int, int, int]:
        return (self.start if self.start is not None else 0, self.order, self.span_id)


def _int_or_none(value: Any) -> int | None:
    return value if type(value) is int else None  # not bool, not an int subclass with surprises


def _node(span: ReadableSpan, order: int) -> _Node | None:
    context = getattr(span, "context", None)
    trace_id = _int_or_none(getattr(context, "trace_id", None))
    span_id = _int_or_none(getattr(context, "span_id", None))
    if trace_id is None or span_id is None:
        return None
    parent = getattr(span, "parent", None)
    return _Node(
        span,
        trace_id,
        span_id,
        _int_or_none(getattr(parent, "span_id", None)) if parent is not None else None,
        _int_or_none(getattr(span, "start_time", None)),
        _int_or_none(getattr(span, "end_time", None)),
        order=order,
    )


class _Trace:
    """The spans of one trace, indexed for pairing."""

    def __init__(self, nodes: list[_Node]) -> None:
        self.nodes = nodes
        self.by_id = {n.span_id: n for n in nodes}
        self.root = self._root()
        self.generations = [n for n in nodes if n.role == "generation"]
        self._responses: dict[int, str] = {}

    def _root(self) -> _Node | None:
        """The span with no parent; else the earliest whose parent is not in this batch (a local root)."""
        parentless = [n for n in self.nodes if n.parent_id is None]
        pool = parentless or [n for n in self.nodes if n.parent_id not in self.by_id]
        return min(pool, key=lambda n: n.sort_key) if pool else None

    def ancestors(self, node: _Node) -> list[int]:
        """Span ids from the parent up; stops at a missing parent or a cycle."""
        chain: list[int] = []
        seen = {node.span_id}
        parent = node.parent_id
        while parent is not None and parent not in seen and len(chain) < len(self.nodes):
            chain.append(parent)
            seen.add(parent)
            above = self.by_id.get(parent)
            parent = above.parent_id if above is not None else None
        return chain

    def pair(self, retrieval: _Node) -> _Node | None:
        ended = retrieval.end if retrieval.end is not None else retrieval.start
        if ended is None:
            return None
        candidates = [
            g for g in self.generations
            if g.start is not None and g.start >= ended and g.span_id != retrieval.span_id
        ]
        if not candidates:
            return None
        mine = {span_id: up for up, span_id in enumerate(self.ancestors(retrieval), start=1)}

        def distance(g: _Node) -> float:
            for span_id in [g.span_id, *self.ancestors(g)]:
                if span_id == retrieval.span_id:
                    return 0
                if span_id in mine:
                    return mine[span_id]
            return math.inf

        return min(candidates, key=lambda g: (distance(g), g.sort_key))

    def response(self, node: _Node, limits: CaptureLimits, notes: set[str]) -> str:
        """A generation's answer, read once however many retrievals it consumed."""
        cached = self._responses.get(node.span_id)
        if cached is None:
            try:
                cached = readers.read_response(node.span, node.shape, limits, notes)
            except Exception:
                notes.add("reader_error")
                cached = ""
            self._responses[node.span_id] = cached
        return cached

    def query(
        self, reading: RetrievalReading, generation: _Node | None, limits: CaptureLimits, notes: set[str]
    ) -> tuple[str, str]:
        """(query, source): the retrieval's own, else the generation's last user message, else the root's input."""
        if reading.query is not None:
            return reading.query, "retrieval"
        try:
            if generation is not None:
                found = readers.read_user_message(generation.span, generation.shape, limits, notes)
                if found is not None:
                    return found, "generation"
        except Exception:
            notes.add("reader_error")
        try:
            if self.root is not None:
                found = readers.read_input(self.root.span, limits, notes)
                if found is not None:
                    return found, "root"
        except Exception:
            notes.add("reader_error")
        raise Skip("no_query")

    def ground_truth(self, preferred: Sequence[_Node | None], notes: set[str]) -> str | None:
        """`ragtrace.ground_truth` from the retrieval, its generation, the root, then any span."""
        holders = [n for n in self.nodes if GROUND_TRUTH in attrs_of(n.span)]
        if not holders:  # the usual case: one pass of dict lookups, no sort
            return None
        order = [n for n in preferred if n is not None] + sorted(holders, key=lambda n: n.sort_key)
        for node in order:
            value = attrs_of(node.span).get(GROUND_TRUTH)
            if value is None:
                continue
            if isinstance(value, str) and value.strip():
                return value
            notes.add("wrong_attribute_type")
        return None


def _group(spans: Sequence[ReadableSpan], stats: CaptureStats) -> dict[int, list[_Node]]:
    traces: dict[int, list[_Node]] = {}
    seen: set[tuple[int, int]] = set()
    for order, span in enumerate(spans):
        try:
            node = _node(span, order)
        except Exception:
            node = None
        if node is None:
            stats.count("invalid_span")
            continue
        if (node.trace_id, node.span_id) in seen:
            stats.count("duplicate_span_id")
            continue
        seen.add((node.trace_id, node.span_id))
        try:
            found = readers.classify(span)
        except Exception:
            found = None
            stats.count("reader_error")
        if found is not None:
            node.role, _, node.shape = found
        traces.setdefault(node.trace_id, []).append(node)
    return traces


def _bounded_documents(documents: Sequence[Document], limits: CaptureLimits, notes: set[str]) -> list[Document]:
    if len(documents) > limits.max_documents:
        notes.add("too_many_documents")
        documents = documents[: limits.max_documents]
    bounded = []
    for document in documents:
        content = cut(document.content, limits.max_context_chars, notes, "context_truncated")
        bounded.append(document if content is document.content else document.model_copy(update={"content": content}))
    return bounded


def _sample(
    trace: _Trace, node: _Node, reading: RetrievalReading, limits: CaptureLimits, notes: set[str]
) -> CapturedSample | None:
    generation = trace.pair(node)
    query, source = trace.query(reading, generation, limits, notes)
    response = trace.response(generation, limits, notes) if generation is not None else ""
    ground_truth = trace.ground_truth([node, generation, trace.root], notes)
    metadata: dict[str, Any] = {"query_source": source}
    if any(d is not None for d in reading.distances):
        metadata["distances"] = reading.distances[: limits.max_documents]
    sample = RagSample(
        query=cut(query, limits.max_query_chars, notes, "query_truncated"),
        contexts=tuple(_bounded_documents(reading.documents, limits, notes)),
        response=cut(response, limits.max_response_chars, notes, "response_truncated"),
        ground_truth=(
            cut(ground_truth, limits.max_response_chars, notes, "ground_truth_truncated")
            if ground_truth is not None else None
        ),
        metadata=metadata,
    )
    return CapturedSample(
        sample=sample,
        trace_id=node.trace_id,
        retrieval_span_id=node.span_id,
        generation_span_id=generation.span_id if generation is not None else None,
        root_span_id=trace.root.span_id if trace.root is not None else None,
        convention=reading.convention,
        retriever=cut(reading.retriever, 128, set(), ""),
    )


_Read = dict[int, tuple[_Node, RetrievalReading, set[str]]]


def _read_retrievals(trace: _Trace, limits: CaptureLimits, stats: CaptureStats) -> _Read:
    read: _Read = {}
    for node in sorted((n for n in trace.nodes if n.role == "retrieval"), key=lambda n: n.sort_key):
        notes: set[str] = set()
        try:
            reading = readers.read_retrieval(node.span, node.shape, limits, notes)
            if not reading.documents and reading.explicit:
                notes.add("no_documents")
            read[node.span_id] = (node, reading, notes)
            continue
        except Skip as skip:
            notes.add(skip.reason)
        except Exception:
            notes.add("reader_error")
        for reason in notes:
            stats.count(reason)
    return read


def _drop_nested(trace: _Trace, read: _Read, stats: CaptureStats) -> None:
    """One sample per retrieval, not per layer that shows the same documents.

    Frameworks wrap a retrieval in task spans whose outputs repeat its documents (LangChain's
    RunnableAssign > RunnableParallel > retriever, a vector-DB client span under them). When
    nested retrieval spans include a heuristic one (OpenLLMetry task or vector-DB span), only one is
    kept: the explicit one (GenAI / OpenInference) if there is one, else the innermost. The kept one
    inherits a dropped one's query when it has none. Explicit retrievals nested in each other are all
    kept: a fusion retriever and its parts are distinct retrievals.
    """
    dropped: set[int] = set()
    for span_id, (node, reading, _) in read.items():
        for up in trace.ancestors(node):
            if up not in read:
                continue
            outer = read[up][1]
            if reading.explicit and outer.explicit:
                continue
            dropped.add(span_id if outer.explicit and not reading.explicit else up)
    for span_id, (node, reading, _) in read.items():
        if span_id in dropped or reading.query is not None:
            continue
        above = [up for up in trace.ancestors(node) if up in dropped]
        below = [i for i in dropped if span_id in trace.ancestors(read[i][0])]
        reading.query = next((q for i in above + below if (q := read[i][1].query) is not None), None)
    for span_id in dropped:
        stats.count("nested_retrieval")
        del read[span_id]


def _builtin(spans: Sequence[ReadableSpan], stats: CaptureStats, limits: CaptureLimits) -> list[CapturedSample]:
    samples: list[CapturedSample] = []
    for nodes in _group(spans, stats).values():
        trace = _Trace(nodes)
        read = _read_retrievals(trace, limits, stats)
        _drop_nested(trace, read, stats)
        for node, reading, notes in read.values():
            try:
                captured = _sample(trace, node, reading, limits, notes)
            except Skip as skip:
                notes.add(skip.reason)
                captured = None
            except Exception:
                notes.add("reader_error")
                captured = None
            for reason in notes:
                stats.count(reason)
            if captured is not None:
                samples.append(captured)
    return samples


def _bounded_custom(captured: CapturedSample, limits: CaptureLimits, notes: set[str]) -> CapturedSample:
    """Apply the same caps to an extractor's samples, so memory stays bounded whoever built them."""
    sample = captured.sample
    bounded = sample.model_copy(
        update={
            "query": cut(sample.query, limits.max_query_chars, notes, "query_truncated"),
            "contexts": tuple(_bounded_documents(sample.contexts, limits, notes)),
            "response": cut(sample.response, limits.max_response_chars, notes, "response_truncated"),
        }
    )
    return captured if not notes else dataclasses.replace(captured, sample=bounded)


def _custom(
    extractor: Extractor, spans: Sequence[ReadableSpan], stats: CaptureStats, limits: CaptureLimits
) -> list[CapturedSample]:
    try:
        produced = list(extractor(spans))
    except Exception:
        stats.count("extractor_error")
        return []
    samples = []
    for item in produced:
        if not isinstance(item, CapturedSample) or not isinstance(item.sample, RagSample):
            stats.count("extractor_invalid_output")
            continue
        notes: set[str] = set()
        try:
            samples.append(_bounded_custom(item, limits, notes))
        except Exception:
            notes.add("extractor_invalid_output")
        for reason in notes:
            stats.count(reason)
    return samples


CaptureStart = Literal["retrieval", "ground_truth"]
_STARTING_KEYS = readers.RETRIEVAL_MARKERS | {GROUND_TRUTH}
_STARTING_KEYS_BUT_DB = _STARTING_KEYS - readers.DB_SYSTEMS


def capture_start(span: ReadableSpan) -> CaptureStart | None:
    """Why the built-in readers need this span of a trace none of whose retrievals has ended yet: it is
    a retrieval, or it carries the ground truth; None when they do not. Nothing else that ends before a
    trace's first retrieval is read: a generation pairs with a retrieval only if it starts after the
    retrieval ended, and ancestors and the root (the query's last fallback) end after their
    descendants. The live processor holds a sampled trace's spans from such a span on, and calls this
    on each of them, so most spans are turned away by a set operation (`isdisjoint`: no new set)."""
    attrs = attrs_of(span)
    if _STARTING_KEYS.isdisjoint(attrs):
        return None  # nothing RAG
    if _STARTING_KEYS_BUT_DB.isdisjoint(attrs) and openllmetry.db_system(attrs) is None:
        return None  # a database span of a database that is not a vector store
    if readers.span_role(span) == "retrieval":
        return "retrieval"
    return "ground_truth" if GROUND_TRUTH in attrs else None


def extract_samples(
    spans: Sequence[ReadableSpan],
    *,
    extractor: Extractor | None = None,
    stats: CaptureStats | None = None,
    limits: CaptureLimits = DEFAULT_LIMITS,
) -> list[CapturedSample]:
    """All ended spans of one trace (any order) in; one CapturedSample per retrieval span out.

    Never raises: a span that cannot be read is passed over and `stats` counts why
    (`invalid_documents_json`, `wrong_attribute_type`, `no_query`, `too_many_documents`, ...).
    Samples come out in the order their retrievals started. An `extractor` runs first; its non-empty
    result is the answer, and when it raises (`extractor_error`) or returns nothing, the readers run.
    """
    stats = stats if stats is not None else CaptureStats()
    try:
        spans = list(spans)
        if extractor is not None:
            custom = _custom(extractor, spans, stats, limits)
            if custom:
                return custom
        return _builtin(spans, stats, limits)
    except Exception:  # a last guard: nothing above should get here
        stats.count("capture_error")
        return []
