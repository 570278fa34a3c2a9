"""Admission: the hot-path decision, for each ended span, to hold it for scoring or let it go on now.

It runs on every span (on the app's thread in front of the exporting processor, on the batching thread
behind it), so it calls as few Python functions as it can: no property, no method of the sampler, the
trace-id test inlined. Each call costs the app more than the work inside it.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace._logs import ragtrace_logger
from ragtrace._sdk import IS_REMOTE, PUBLIC_IDS, SDK_IDS, SDK_SPAN, TRACE_ID
from ragtrace.capture import DEFAULT_RULES, CaptureRules, capture_start, holds_rollup
from ragtrace.live.counts import Counts
from ragtrace.live.modes import Mode
from ragtrace.live.sampling import TRACE_ID_MASK
from ragtrace.live.store import SpanStore

logger = ragtrace_logger(__name__)


class Admission:
    """Holds the spans of sampled RAG traces in the store; says which spans go on at once.

    A sampled trace is kept from the first span the readers need on (`capture_start`): the spans that
    end before it carry no score and inform none, so they go straight on, and a trace with no RAG span
    is never kept at all. Of the spans kept, only the targets wait for the trace's release: those a score,
    an outcome or a roll-up may be written on (its retrievals, an agent's run, a root above several
    retrievals: `holds_rollup`). Every other span goes on as it ends, and the store keeps a reference for
    the readers (an ended span does not change). `hold_every_span` keeps all spans of a sampled trace (an
    extractor may read any of them); `every_span_a_target` makes each a target (an extractor, or scores
    that go to the generation or the root). In link mode (`mode.holds_spans` False) nothing waits: every
    span goes on at once, and the store keeps a reference to read and to link to.
    """

    def __init__(
        self, store: SpanStore, counts: Counts, *, trace_id_bound: int, mode: Mode, hold_every_span: bool,
        every_span_a_target: bool = False, rules: CaptureRules = DEFAULT_RULES,
    ) -> None:
        self._store = store
        self._counts = counts
        self._bound = trace_id_bound
        self._wait_for_release = mode.holds_spans  # decided once: the hot path reads a bool
        self._hold_every_span = hold_every_span
        self._every_span_a_target = every_span_a_target or hold_every_span
        self._rules = rules
        self.holding = True

    def stop_holding(self) -> None:
        """From now on every span goes on at once (shutdown)."""
        self.holding = False

    def holds(self, span: ReadableSpan) -> bool:
        """True when the span is held for scoring; False: it goes on now. Never raises."""
        try:
            ctx, parent = (SDK_IDS if type(span) is SDK_SPAN else PUBLIC_IDS)(span)
            if ctx is not None:
                trace_id = ctx[TRACE_ID]
                is_root = parent is None or parent[IS_REMOTE]  # a local root
                if type(trace_id) is int and (trace_id & TRACE_ID_MASK) < self._bound:
                    return self._hold(span, trace_id, is_root)
                if is_root:  # one unsampled trace
                    next(self._counts.unsampled_roots.count)
        except Exception:
            logger.exception("ragtrace: admitting a span failed; span forwarded unscored")
        return False

    def admit(self, spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
        """`holds` for a batch: holds what it holds, returns what goes on now, in order.

        It is `holds` unrolled over the batch (a call per span is a third of the loop's cost), and it
        works the sampling test out once per run of spans of one trace (a batch holds a trace's spans
        side by side, and they share the trace id's int). A test checks it decides as `holds` does."""
        passing: list[ReadableSpan] = []
        bound, sdk_span = self._bound, SDK_SPAN
        last_trace_id, sampled = None, False
        for span in spans:
            try:
                ctx, parent = (SDK_IDS if type(span) is sdk_span else PUBLIC_IDS)(span)
                if ctx is not None:
                    trace_id = ctx[TRACE_ID]
                    if trace_id is not last_trace_id:
                        last_trace_id = trace_id
                        sampled = type(trace_id) is int and (trace_id & TRACE_ID_MASK) < bound
                    if sampled:
                        if self._hold(span, trace_id, parent is None or parent[IS_REMOTE]):
                            continue
                    elif parent is None or parent[IS_REMOTE]:  # one unsampled trace
                        next(self._counts.unsampled_roots.count)
            except Exception:
                logger.exception("ragtrace: admitting a span failed; span forwarded unscored")
            passing.append(span)
        return passing

    def _hold(self, span: ReadableSpan, trace_id: int, is_root: bool) -> bool:
        """True when the span waits in the store for the pipeline to release it; False: it goes on now."""
        if not self.holding:
            return False
        held = self._store.open_trace(trace_id)
        start: str | None = capture_start(span, self._rules)
        if start is None:
            if self._hold_every_span:
                start = "every_span"
            elif held is None and not is_root:
                return False
        # A span that ends before its trace's first retrieval heads no roll-up: its retrievals end before it.
        target = (
            start == "retrieval" or self._every_span_a_target
            or (held is not None and holds_rollup(span, is_root=is_root, retrievals=held.retrievals))
        )
        result = self._store.add(span, trace_id, is_root, start == "retrieval", start is not None, target)
        if result == "held":
            return target and self._wait_for_release
        if result == "passed":
            if is_root:  # a sampled trace that ended with nothing to read
                next(self._counts.rag_free_roots.count)
            return False
        if result == "overflow":  # once a trace: its later spans are turned away
            self._counts.add("queue_full")
        # A sampled retrieval span says why it was not judged (turned away, or it ended after its trace
        # had closed): on itself, going on at the next tick, or (link mode) on a span of its own then.
        if start == "retrieval":
            return self._store.refuse(span, result) and self._wait_for_release
        return False
