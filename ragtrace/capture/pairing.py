"""One trace's spans in, one CapturedSample per retrieval span out.

A generation is a span that produced model output; a prompt-building step is not, whatever kind its
instrumentor gave it (readers.classify), and a generation that wraps another one (LlamaIndex's
`predict` around `chat`, an OpenLLMetry task around its chat span) stands aside for the inner model call
(whose answer is read from the wrapper when the call itself recorded none).

Pairing: a retrieval goes to the generation that consumed it, as its input shows. Among the
generations that start at or after the retrieval ended, the one whose input (prompt, messages, template
variables) quotes the largest share of the retrieved texts wins ("contexts"); when none quotes any, the
one whose input quotes the retrieval's query ("query"). Ties go to a generation that answered over one
that only called tools (an agent's step that searches again quotes the first search's texts as fully as
the final answer does), then to one no other retrieval has claimed, so k retrievals and k generations,
interleaved in any order, pair one to one. Only when no
input holds such evidence (content capture off, texts rewritten) does the time rule of attributes.md
apply ("time"): the first generation that starts after the retrieval ended, preferring the closest in
the tree (a sibling first; for nested frameworks the nearest common ancestor, which keeps concurrent
chains of one trace apart). The rule used is recorded in the sample's metadata (`pairing`,
`pairing_evidence`) and on the CapturedSample.

The query is the retrieval's own, else the last user message of the paired generation, else the trace
root's input. A retrieval with no generation is still a sample (empty response).

Custom extractor: when given, it runs first; if it returns samples, they are the answer for the trace.
If it raises (counted `extractor_error`) or returns nothing, the built-in readers run, so an extractor
only needs to know the app's own span shapes and a bug in it never costs a standard sample.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace._sdk import capture_fields
from ragtrace.capture import openllmetry, readers
from ragtrace.capture.rules import DEFAULT_RULES, CaptureRules
from ragtrace.capture.types import CapturedSample, CaptureStats, Extractor, SpanVerdict, TraceReport
from ragtrace.capture.values import (
    DEFAULT_LIMITS,
    FROM_EVENTS,
    Attrs,
    CaptureLimits,
    RetrievalReading,
    Skip,
    attrs_of,
    cut,
)
from ragtrace.scoring import Document, RagSample

GROUND_TRUTH = "ragtrace.ground_truth"
_MARK_KEYS = readers.SESSION_MARKERS | {GROUND_TRUTH}


@dataclass
class _Node:
    span: ReadableSpan
    trace_id: int
    span_id: int
    parent_id: int | None
    start: int | None
    end: int | None
    role: str | None = None
    convention: str | None = None
    shape: str = ""
    order: int = 0
    attrs: Attrs = dataclasses.field(default_factory=dict)  # the span's, looked up once for every rule that reads them

    @property
    def sort_key(self) -> tuple[int, int, int]:
        return (self.start if self.start is not None else 0, self.order, self.span_id)


# Texts shorter than this prove nothing when found in a prompt ("a", "yes").
MIN_EVIDENCE_CHARS = 12
# A retrieved text is looked for by its start: prompts may cut long contexts short.
PROBE_CHARS = 300


def _normalised(text: str) -> str:
    return " ".join(text.split())


def _normalised_all(texts: list[str]) -> str:
    """`_normalised("\\n".join(texts))`, text by text: a text that recurs (a prompt both in a generation's
    messages and in its `input.value`) is normalised once."""
    if len(set(texts)) == len(texts):
        return _normalised("\n".join(texts))
    done: dict[str, str] = {}
    parts = []
    for text in texts:
        flat = done.get(text)
        if flat is None:
            flat = done[text] = _normalised(text)
        if flat:
            parts.append(flat)
    return " ".join(parts)


def _probe(text: str) -> str:
    return _normalised(text[: PROBE_CHARS * 2])[:PROBE_CHARS]


def _node(span: ReadableSpan, order: int) -> _Node | None:
    trace_id, span_id, parent_id, start, end = capture_fields(span)
    if type(trace_id) is not int or type(span_id) is not int:  # not bool, not an int subclass with surprises
        return None
    return _Node(
        span,
        trace_id,
        span_id,
        parent_id if type(parent_id) is int else None,
        start if type(start) is int else None,
        end if type(end) is int else None,
        order=order,
        attrs=attrs_of(span),
    )


class _Trace:
    """The spans of one trace, indexed for pairing."""

    def __init__(
        self, nodes: list[_Node], limits: CaptureLimits = DEFAULT_LIMITS, explain: bool = False,
        rules: CaptureRules = DEFAULT_RULES,
    ) -> None:
        self.nodes = nodes
        self.by_id = {n.span_id: n for n in nodes}
        self.root = self._root()
        self.limits = limits
        self.rules = rules
        self._marks: tuple[list[_Node], str | None] | None = None
        self._probes: dict[int, list[str]] = {}
        self._agents: dict[int, _Node | None] = {}
        self._ancestry: dict[int, list[int]] = {}
        everything = [n for n in nodes if n.role == "generation"]
        generation_ids = {n.span_id for n in everything}
        # A generation with another generation below it wraps that model call: the inner one pairs.
        self.wrapped: dict[int, _Node] = {}
        self.wrappers: dict[int, list[_Node]] = {}  # a model call -> the generations around it, innermost first
        for node in everything:
            for up in self.ancestors(node):
                if up in generation_ids:
                    self.wrapped.setdefault(up, node)
                    self.wrappers.setdefault(node.span_id, []).append(self.by_id[up])
        self.generations = [n for n in everything if n.span_id not in self.wrapped]
        self.claimed: set[int] = set()
        self._responses: dict[int, str] = {}
        self._inputs: dict[int, str] = {}
        # What was decided about each span, in words (explain only).
        self.verdicts: dict[int, str] | None = {} if explain else None
        self.asked = _Asked(self)

    def note(self, node: _Node, verdict: str) -> None:
        if self.verdicts is not None:
            self.verdicts.setdefault(node.span_id, verdict)

    def _root(self) -> _Node | None:
        """The span with no parent; else the earliest whose parent is not in this batch (a local root)."""
        parentless = [n for n in self.nodes if n.parent_id is None]
        pool = parentless or [n for n in self.nodes if n.parent_id not in self.by_id]
        return min(pool, key=lambda n: n.sort_key) if pool else None

    def ancestors(self, node: _Node) -> list[int]:
        """Span ids from the parent up; stops at a missing parent or a cycle. Walked once a span (pairing asks
        for a generation's once per retrieval); the list is shared, not to be changed."""
        chain = self._ancestry.get(node.span_id)
        if chain is not None:
            return chain
        chain = self._ancestry[node.span_id] = []
        seen = {node.span_id}
        parent = node.parent_id
        while parent is not None and parent not in seen and len(chain) < len(self.nodes):
            chain.append(parent)
            seen.add(parent)
            above = self.by_id.get(parent)
            parent = above.parent_id if above is not None else None
        return chain

    def candidates(self, retrieval: _Node) -> list[_Node]:
        """Generations that start at or after the retrieval ended: only they can have consumed it."""
        ended = retrieval.end if retrieval.end is not None else retrieval.start
        if ended is None:
            return []
        return [
            g for g in self.generations
            if g.start is not None and g.start >= ended and g.span_id != retrieval.span_id
        ]

    def distance_from(self, retrieval: _Node) -> Callable[[_Node], float]:
        """How far up from the retrieval its nearest common ancestor with a generation is (0: the
        generation is below it); the retrieval's ancestors are walked once for all candidates."""
        mine = {span_id: up for up, span_id in enumerate(self.ancestors(retrieval), start=1)}

        def distance(generation: _Node) -> float:
            if generation.span_id in mine:
                return mine[generation.span_id]
            for span_id in self.ancestors(generation):
                if span_id == retrieval.span_id:
                    return 0
                if span_id in mine:
                    return mine[span_id]
            return math.inf

        return distance

    def input_text(self, node: _Node, notes: set[str]) -> str:
        """A generation's whole input as one whitespace-normalised text, read once."""
        cached = self._inputs.get(node.span_id)
        if cached is None:
            try:
                cached = _normalised_all(readers.read_input_texts(node.span, self.limits))
            except Exception:
                notes.add("reader_error")
                cached = ""
            self._inputs[node.span_id] = cached
        return cached

    def pair(self, retrieval: _Node, reading: RetrievalReading, notes: set[str]) -> tuple[_Node | None, str, str]:
        """(generation, rule, evidence in words): by the texts or query its input quotes, else by time."""
        candidates = self.candidates(retrieval)
        if not candidates:
            return None, "", "no generation started after the retrieval ended"
        distance = self.distance_from(retrieval)
        best: tuple[tuple[float, bool, bool, bool, float, float], _Node] | None = None
        probes: list[str] | None = None  # worked out when some input is there to search (content capture on)
        query = ""
        for g in candidates:
            text = self.input_text(g, notes)
            if not text:
                continue
            if probes is None:
                probes, query = self.probes(retrieval, reading), _probe(reading.query or "")
            quoted = sum(1 for p in probes if p in text)
            asked = len(query) >= MIN_EVIDENCE_CHARS and query in text
            if not quoted and not asked:
                continue
            key = (quoted / len(probes) if probes else 0.0, asked, bool(self.answer(g, notes)),
                   g.span_id not in self.claimed, -distance(g), -float(g.sort_key[0]))
            if best is None or key > best[0]:
                best = (key, g)
        if best is not None:
            (share, asked, *_), chosen = best
            self.claimed.add(chosen.span_id)
            if share > 0:
                count = len(probes or ())
                return chosen, "contexts", f"its input quotes {round(share * count)} of {count} retrieved texts"
            return chosen, "query", "its input quotes the retrieval's query"
        chosen = min(candidates, key=lambda g: (distance(g), g.sort_key))
        self.claimed.add(chosen.span_id)
        return chosen, "time", "no generation's input quotes the retrieved texts or the query: the first after it"

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

    def answer(self, node: _Node, notes: set[str]) -> str:
        """A generation's answer; when the call recorded no text (content off), a wrapper's around it."""
        found = self.response(node, self.limits, notes)
        if not found:
            around = self.wrappers.get(node.span_id, ())
            found = next((text for w in around if (text := self.response(w, self.limits, notes))), "")
        return found

    def probes(self, retrieval: _Node, reading: RetrievalReading) -> list[str]:
        """The starts of a retrieval's texts that count as evidence when quoted, worked out once."""
        found = self._probes.get(retrieval.span_id)
        if found is None:
            found = [_probe(d.content) for d in reading.documents]
            found = [p for p in found if len(p) >= MIN_EVIDENCE_CHARS]
            self._probes[retrieval.span_id] = found
        return found

    def agent_of(self, node: _Node) -> _Node | None:
        """The nearest agent run above a span (GenAI invoke_agent, OpenInference AGENT, OpenLLMetry agent)."""
        if node.span_id in self._agents:
            return self._agents[node.span_id]
        found, parent, steps = None, node.parent_id, 0  # the parents walked as `ancestors` does, no list built
        while parent is not None and parent != node.span_id and steps < len(self.nodes):
            above = self.by_id.get(parent)
            if above is None or readers.is_agent(above.attrs):
                found = above
                break
            parent, steps = above.parent_id, steps + 1
        self._agents[node.span_id] = found
        return found

    def marks(self) -> tuple[list[_Node], str | None]:
        """What few spans of a trace say, found in one pass of dict lookups over its spans the first time a
        sample needs it: the spans that carry a ground truth, and the conversation the trace belongs to (one
        trace, one conversation: the root's, else the first span's that says; Pydantic AI writes it on every
        span, OpenLLMetry on the root only)."""
        if self._marks is None:
            marked = [n for n in self.nodes if not _MARK_KEYS.isdisjoint(n.attrs)]  # most say nothing
            holders = [n for n in marked if GROUND_TRUTH in n.attrs]
            said = [n for n in marked if not readers.SESSION_MARKERS.isdisjoint(n.attrs)]
            if self.root in said:
                said.insert(0, self.root)
            session = next((found for n in said if (found := readers.read_session(n.span)) is not None), None)
            self._marks = (holders, session)
        return self._marks

    def session(self) -> str | None:
        return self.marks()[1]

    def ground_truth(self, preferred: Sequence[_Node | None], notes: set[str]) -> str | None:
        """`ragtrace.ground_truth` from the retrieval, its generation, the root, then any span."""
        holders = self.marks()[0]
        if not holders:  # the usual case
            return None
        order = [n for n in preferred if n is not None] + sorted(holders, key=lambda n: n.sort_key)
        for node in order:
            value = node.attrs.get(GROUND_TRUTH)
            if value is None:
                continue
            if isinstance(value, str) and value.strip():
                return value
            notes.add("wrong_attribute_type")
        return None


class _Asked:
    """What the user asked, as one trace records it: the query a sample is judged against (`query`)."""

    def __init__(self, trace: _Trace) -> None:
        self.trace = trace
        self._run_inputs: dict[int, str | bool | None] = {}

    def user_question(
        self, node: _Node, reading: RetrievalReading, generation: _Node | None, rule: str, notes: set[str]
    ) -> tuple[str, str, int] | None:
        """(question, where, user turns) as the trace records the user asking it, by evidence order: the
        paired generation's last user message (when its input shows it consumed the retrieval: paired by
        time, it may be another step's), the agent's input, the root's input. A text that quotes the
        retrieved documents, or holds the retrieval's query within more, is a prompt built from them, not
        the question, and is passed over. A generation's message that holds the agent's or root's input
        within more (smolagents' "New task:\n<question>") wraps it: the input is the question. Without a query
        of the retrieval's own to weigh them against, the sources are taken as they are (the generation's
        message even when paired by time)."""
        strict = reading.query is not None
        run_inputs = self.run_inputs(node, notes)
        # Paired by time, the generation may be another step's: its message counts only without a query to weigh.
        consulted = generation if rule != "time" or not strict else None
        if not run_inputs and consulted is None:
            return None  # nothing recorded the user asking (an ordinary trace whose root says nothing)
        trace = self.trace
        inputs: list[tuple[str, str]] = []
        if run_inputs:  # an ordinary trace's root says nothing: no normalising for it
            if strict and any(_normalised(text) == _normalised(reading.query or "") for text, _ in run_inputs):
                return None  # the run was given the retrieval's query itself: no rewrite to undo
            inputs = [(text, where) for text, where in run_inputs if _is_question(trace, node, reading, text)]
        if consulted is not None:
            try:
                found = readers.read_user_message(consulted.span, consulted.shape, trace.limits, notes)
                if found is not None and _is_question(trace, node, reading, found):
                    flat = _normalised(found)
                    inner = next(((t, w) for t, w in inputs if (f := _normalised(t)) != flat and f in flat), None)
                    turns = readers.read_user_turns(consulted.span, consulted.shape, trace.limits, notes)
                    return (*inner, turns) if inner is not None else (found, "generation", turns)
            except Exception:
                notes.add("reader_error")
        return (*inputs[0], 1) if inputs else None

    def run_inputs(self, node: _Node, notes: set[str]) -> list[tuple[str, str]]:
        """The texts the agent run above a span and the trace's root say they were given, with where."""
        found: list[tuple[str, str]] = []
        agent, root = self.trace.agent_of(node), self.trace.root
        if agent is not None and agent is not root and (text := self._given(agent, notes)) is not None:
            found.append((text, "agent"))
        if root is not None and (text := self._given(root, notes)) is not None:
            found.append((text, "root"))
        return found

    def _given(self, holder: _Node, notes: set[str]) -> str | None:
        """What a run says it was given, read once a trace."""
        cached = self._run_inputs.get(holder.span_id, False)
        if cached is False:
            try:
                cached = readers.read_input(holder.span, self.trace.limits, notes, holder.attrs)
            except Exception:
                notes.add("reader_error")
                cached = None
            self._run_inputs[holder.span_id] = cached
        return cached if isinstance(cached, str) else None

    def query(
        self, node: _Node, reading: RetrievalReading, generation: _Node | None, rule: str, notes: set[str]
    ) -> tuple[str, str]:
        """(query, source) of a sample: the user's question where the trace records one that differs from
        the retrieval's own query, else the retrieval's own (see `_query_metadata` for the follow-up rule)."""
        own = reading.query
        if own is not None and self.trace.rules.query_source == "retrieval":
            return own, "retrieval"
        asked = self.user_question(node, reading, generation, rule, notes)
        if asked is None:
            if own is None:
                raise Skip("no_query")
            return own, "retrieval"
        question, where, turns = asked
        if own is None or _normalised(question) == _normalised(own):
            return (own, "retrieval") if own is not None else (question, where)
        if turns > 1:  # a follow-up in a conversation: the retrieval's query is its standalone form
            return own, "retrieval (standalone form of a follow-up)"
        return question, where


def _is_question(trace: _Trace, node: _Node, reading: RetrievalReading, text: str) -> bool:
    """Whether a text may be the user's question rather than a prompt built around the retrieval: with a
    query of the retrieval's own, a text that holds it within more, or quotes the retrieved texts, is not.
    The cheapest test first: the usual RAG template holds the query as written."""
    query = reading.query
    if query is None:
        return True
    raw_own = query.strip()
    if raw_own and raw_own in text and raw_own != text.strip():  # the usual template, found unnormalised
        return False
    flat, own = _normalised(text), _normalised(query)
    if own and own in flat and own != flat:
        return False
    return not any(p in flat for p in trace.probes(node, reading))


def _group(spans: Sequence[ReadableSpan], stats: CaptureStats, rules: CaptureRules) -> dict[int, list[_Node]]:
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
            found = readers.classify(span, rules, node.attrs)
        except Exception:
            found = None
            stats.count("reader_error")
        if found is not None:
            node.role, node.convention, node.shape = found
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
    generation, rule, evidence = trace.pair(node, reading, notes)
    query, source = trace.asked.query(node, reading, generation, rule, notes)
    response = trace.answer(generation, notes) if generation is not None else ""
    ground_truth = trace.ground_truth([node, generation, trace.root], notes)
    metadata: dict[str, Any] = {"query_source": source}
    if reading.query is not None and not source.startswith("retrieval"):
        metadata["retrieval_query"] = cut(reading.query, limits.max_query_chars, notes, "query_truncated")
        metadata["retrieval_query_from"] = "tool call arguments" if node.shape.endswith("_tool") else "retrieval span"
    if reading.taken_because is not None:
        metadata["taken_because"] = reading.taken_because
    if FROM_EVENTS in notes:
        notes.discard(FROM_EVENTS)
        metadata[FROM_EVENTS] = True
    session = trace.session()
    if session is not None:
        metadata["session_id"] = cut(session, 256, set(), "")
    if generation is not None:
        metadata["pairing"] = rule
        metadata["pairing_evidence"] = evidence
        trace.note(generation, f"paired with retrieval {node.span.name!r} by {rule} ({evidence})")
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
    agent = trace.agent_of(node)
    return CapturedSample(
        sample=sample,
        trace_id=node.trace_id,
        retrieval_span_id=node.span_id,
        generation_span_id=generation.span_id if generation is not None else None,
        root_span_id=trace.root.span_id if trace.root is not None else None,
        convention=reading.convention,
        retriever=cut(reading.retriever, 128, set(), ""),
        pairing=rule,
        agent_span_id=agent.span_id if agent is not None else None,
        session_id=metadata.get("session_id"),
    )


_Read = dict[int, tuple[_Node, RetrievalReading, set[str]]]


def _read_retrievals(trace: _Trace, limits: CaptureLimits, stats: CaptureStats) -> _Read:
    read: _Read = {}
    for node in sorted((n for n in trace.nodes if n.role == "retrieval"), key=lambda n: n.sort_key):
        notes: set[str] = set()
        try:
            reading = readers.read_retrieval(node.span, node.shape, limits, notes, trace.rules)
            if not reading.documents and reading.explicit:
                notes.add("no_documents")
            read[node.span_id] = (node, reading, notes)
            continue
        except Skip as skip:
            notes.add(skip.reason)
        except Exception:
            notes.add("reader_error")
        notes.discard(FROM_EVENTS)
        for reason in notes:
            stats.count(reason)
        trace.note(node, "passed over (" + ", ".join(sorted(notes)) + ")")
    return read


def _strength(node: _Node, reading: RetrievalReading) -> int:
    """How surely a span is the retrieval itself: explicit convention > vector-DB call > task named like a
    retriever > task recognised by its output only (a chain step that passes documents on)."""
    if reading.explicit:
        return 3
    if node.shape == "vector_db":
        return 2
    if node.shape.endswith("_tool"):  # the tool around a retrieval its framework recorded too
        return 0
    return 1 if openllmetry.is_named_retriever(node.span, node.attrs) else 0


# From this strength on a span is a retrieval in its instrumentor's own words (a RETRIEVER / retrieval span, a
# vector-DB query, a task its instrumentor named for a retriever callback), not a chain step passing documents on.
SURE_RETRIEVAL = 1


def _same_retrieval(inner: RetrievalReading, outer: RetrievalReading) -> bool:
    """A wrapper and its inner call: the same query (or one unknown), and one's texts a subset of the other's."""
    if inner.query is not None and outer.query is not None and inner.query.strip() != outer.query.strip():
        return False
    mine, theirs = {d.content for d in inner.documents}, {d.content for d in outer.documents}
    return mine <= theirs or theirs <= mine


def _drop_nested(trace: _Trace, read: _Read, stats: CaptureStats) -> None:
    """One sample per retrieval, not per layer that shows the same documents.

    Frameworks wrap a retrieval in spans of their own: LlamaIndex's `retrieve` around `_retrieve`,
    LangChain's RunnableAssign > RunnableParallel > retriever, a vector-DB client span under them. Of
    two nested retrieval spans, the one that is more surely the retrieval stays (`_strength`); of two
    equally sure, the outer one (what the app got back), unless it shows no documents and the inner one
    does. Two spans that are each surely a retrieval (explicit, a vector-DB query, a task named for a
    retriever) are one only when they share the query and one's texts are a subset of the other's: a fusion or
    multi-query retriever and its parts are distinct retrievals, whichever instrumentor recorded them. The kept
    span inherits a dropped one's query when it has none; a dropped span is no sample and gets no status.
    """
    dropped: dict[int, int] = {}  # dropped span id -> the span id it lost to
    for span_id, (node, reading, _) in read.items():
        for up in trace.ancestors(node):
            if up not in read:
                continue
            outer_node, outer = read[up][0], read[up][1]
            inner_rank, outer_rank = _strength(node, reading), _strength(outer_node, outer)
            if min(inner_rank, outer_rank) >= SURE_RETRIEVAL and not _same_retrieval(reading, outer):
                continue
            if inner_rank == outer_rank:
                keep_inner = not outer.documents and bool(reading.documents)
            else:
                keep_inner = inner_rank > outer_rank
            loser, winner = (up, span_id) if keep_inner else (span_id, up)
            dropped.setdefault(loser, winner)
    for span_id, (node, reading, _) in read.items():
        if span_id in dropped or reading.query is not None:
            continue
        above = [up for up in trace.ancestors(node) if up in dropped]
        below = [i for i in dropped if span_id in trace.ancestors(read[i][0])]
        reading.query = next((q for i in above + below if (q := read[i][1].query) is not None), None)
    for span_id, winner in dropped.items():
        stats.count("nested_retrieval")
        while winner in dropped and winner != span_id:  # the layer it lost to may have lost too
            winner = dropped[winner]
        trace.note(read[span_id][0], f"a nested layer of the same retrieval, scored once on "
                                     f"{read[winner][0].span.name!r}")
        del read[span_id]


def _rolled_up_on_root(trace: _Trace, found: list[CapturedSample]) -> list[CapturedSample]:
    """Several searches for one question with no agent span above them (an agent loop its framework does
    not mark, a multi-query retriever) roll up on the root; retrievals for different questions (a batch of
    requests in one trace) do not."""
    if len(found) < 2:
        return found
    loose = [c for c in found if c.agent_span_id is None]
    if len(loose) < 2 or trace.root is None or len({c.sample.query for c in loose}) > 1:
        return found
    root = trace.root.span_id
    return [c if c.agent_span_id is not None else dataclasses.replace(c, agent_span_id=root) for c in found]


def _verdicts(trace: _Trace, read: _Read, samples: Sequence[CapturedSample]) -> list[SpanVerdict]:
    """Every span's verdict in start order; spans no rule touched say why they were passed over."""
    assert trace.verdicts is not None
    sampled = {c.retrieval_span_id: i for i, c in enumerate(samples, start=1)}
    rolled = Counter(c.agent_span_id for c in samples if c.agent_span_id is not None)
    verdicts = []
    for node in sorted(trace.nodes, key=lambda n: n.sort_key):
        said = trace.verdicts.get(node.span_id)
        if said is None:
            if node.span_id in sampled:
                said = f"sample {sampled[node.span_id]}"
            elif node.role == "generation" and node.span_id in trace.wrapped:
                said = (f"wraps the model call {trace.wrapped[node.span_id].span.name!r}, "
                        "which is the one paired")
            elif node.role == "generation":
                said = "consumed no retrieval of this trace"
            elif node.role == "retrieval":
                said = "passed over"
            elif node.span_id in rolled:
                said = f"agent run: gets the roll-up of its {rolled[node.span_id]} retrieval(s) (ragtrace.agent.*)"
            else:
                said = readers.describe_unclassified(node.span, trace.rules) or "not a retrieval or a generation"
        verdicts.append(
            SpanVerdict(node.span_id, node.parent_id, node.span.name or "", node.role, node.convention, said)
        )
    return verdicts


def _builtin(
    spans: Sequence[ReadableSpan], stats: CaptureStats, limits: CaptureLimits,
    reports: list[TraceReport] | None = None, rules: CaptureRules = DEFAULT_RULES,
) -> list[CapturedSample]:
    samples: list[CapturedSample] = []
    for trace_id, nodes in _group(spans, stats, rules).items():
        trace = _Trace(nodes, limits, explain=reports is not None, rules=rules)
        mine = CaptureStats() if reports is not None else stats
        read = _read_retrievals(trace, limits, mine)
        _drop_nested(trace, read, mine)
        found: list[CapturedSample] = []
        for node, reading, notes in read.values():
            try:
                captured = _sample(trace, node, reading, limits, notes)
            except Skip as skip:
                notes.add(skip.reason)
                captured = None
            except Exception:
                notes.add("reader_error")
                captured = None
            notes.discard(FROM_EVENTS)
            for reason in notes:
                mine.count(reason)
            if captured is not None:
                found.append(captured)
            elif trace.verdicts is not None:
                trace.note(node, "no sample (" + ", ".join(sorted(notes)) + ")")
        samples.extend(_rolled_up_on_root(trace, found))
        if reports is not None:
            stats.counts.update(mine.counts)
            reports.append(TraceReport(trace_id, _verdicts(trace, read, found), found, mine.counts))
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


def capture_start(span: ReadableSpan, rules: CaptureRules = DEFAULT_RULES) -> CaptureStart | None:
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
    if readers.span_role(span, rules) == "retrieval":
        return "retrieval"
    return "ground_truth" if GROUND_TRUTH in attrs else None


def holds_rollup(span: ReadableSpan, *, is_root: bool, retrievals: int) -> bool:
    """Whether a trace's roll-up may be written on this span: an agent's run, or a local root that ended
    after two retrievals or more (`_rolled_up_on_root`; a root ends after its descendants). With the
    retrieval spans, these are the only spans the built-in readers write on when the scores go to the
    retrievals: the live processor lets every other span of a sampled trace go on as it ends."""
    return (is_root and retrievals >= 2) or readers.is_agent(attrs_of(span))


def extract_samples(
    spans: Sequence[ReadableSpan],
    *,
    extractor: Extractor | None = None,
    stats: CaptureStats | None = None,
    limits: CaptureLimits = DEFAULT_LIMITS,
    rules: CaptureRules = DEFAULT_RULES,
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
        return _builtin(spans, stats, limits, rules=rules)
    except Exception:  # a last guard: nothing above should get here
        stats.count("capture_error")
        return []


def report_traces(
    spans: Sequence[ReadableSpan], *, limits: CaptureLimits = DEFAULT_LIMITS, rules: CaptureRules = DEFAULT_RULES
) -> list[TraceReport]:
    """What the built-in readers decide for each trace of `spans`, span by span (for `ragtrace explain`).

    The same code path as `extract_samples`, so the report cannot drift from what is scored; it costs more
    (every verdict is put in words), so the live pipeline does not call it per trace.
    """
    reports: list[TraceReport] = []
    _builtin(list(spans), CaptureStats(), limits, reports, rules)
    return reports
