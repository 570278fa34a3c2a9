"""What a trace's judging comes to (`Verdict`), and enrich or link (`Mode`), chosen once.

Judging returns a `Verdict` for each closed trace: its decision and capture counts, the evaluations of
its samples, or the one outcome that says why none was judged. The pipeline sends the trace on with it
through the `Mode`: `Enrich` holds a sampled trace's spans and sends them with the scores written on
them; `Link` lets every span go on as it ends and sends one `evaluation <scorer>` span per evaluation,
linked to the evaluated span. Nothing else asks which of the two it is.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext
from opentelemetry.util.types import AttributeValue

from ragtrace._logs import ragtrace_logger
from ragtrace._sdk import PUBLIC_IDS, SDK_IDS, SDK_SPAN, SPAN_ID, TRACE_FLAGS, TRACE_ID, ids_of
from ragtrace.capture import CaptureRules
from ragtrace.capture.readers import span_role
from ragtrace.live.enrich import (
    EvalStatus,
    Evaluation,
    Rollup,
    RouteEvents,
    Writes,
    enrich,
    link_spans,
    not_judged,
    writes_for,
)
from ragtrace.live.evaluation_logs import EvaluationResults
from ragtrace.scoring import JUDGE_TIMEOUT

logger = ragtrace_logger(__name__)

# Why a trace's retrieval spans were not judged: (ragtrace.eval.status, ragtrace.eval.error).
Outcome = tuple[EvalStatus, str]
QUEUE_FULL: Outcome = ("skipped", "queue_full")
JUDGE_TIMED_OUT: Outcome = ("timeout", JUDGE_TIMEOUT)
INTERNAL_ERROR: Outcome = ("error", "internal_error")
# A retrieval span that ended after its trace was closed for scoring (after its root, or after
# max_trace_wait): it is in no sample.
LATE: Outcome = ("skipped", "late_span")


@dataclass
class Verdict:
    """What became of one closed trace: its counts, and what its spans say. Judging returns it; the
    pipeline counts it and sends the trace on with it, once."""

    trace_id: int = 0
    decisions: dict[str, int] = field(default_factory=dict)
    capture: dict[str, int] = field(default_factory=dict)
    # target span id -> its evaluations (several samples may share a target)
    evaluations: dict[int, list[Evaluation]] = field(default_factory=dict)
    # target span id -> what its samples say about themselves; agent span id -> its retrievals' roll-up
    annotations: dict[int, dict[str, AttributeValue]] = field(default_factory=dict)
    rollups: dict[int, Rollup] = field(default_factory=dict)
    # Nothing of the trace was judged: each of its retrieval spans says why.
    outcome: Outcome | None = None
    # Written already (by the scoring process): the attributes and events of each span, by span id.
    writes: Writes | None = None
    # When its jobs were submitted: the start of its link-mode evaluation spans.
    start_ns: int | None = None

    @classmethod
    def unjudged(cls, trace_id: int, outcome: Outcome, decision: str | None = None, n: int = 1) -> Verdict:
        """A trace none of whose samples was judged, counted as `decision` (when not counted already)."""
        return cls(trace_id, {decision: n} if decision is not None else {}, outcome=outcome)

    def add(self, decision: str, n: int = 1) -> None:
        self.decisions[decision] = self.decisions.get(decision, 0) + n

    def evaluated(self, target: int, evaluation: Evaluation) -> None:
        self.evaluations.setdefault(target, []).append(evaluation)


class Mode:
    """Enrich or link: what admission does with a held span, and what a trace sends on at its release."""

    # Admission: a held span waits for its trace's release (enrich), or goes on at once (link).
    holds_spans: ClassVar[bool]

    def __init__(
        self, *, reason_max_chars: int, model: str, prompt_version: str, rules: CaptureRules,
        results: EvaluationResults | None = None,
    ) -> None:
        self.reason_max_chars = reason_max_chars
        self.results = results if results is not None else EvaluationResults()
        self._model = model
        self._prompt_version = prompt_version
        self._rules = rules

    def counted_while_judged(self, spans: Sequence[ReadableSpan]) -> int:
        """How many of a judged trace's spans its parked trace keeps counted as held."""
        return len(spans) if self.holds_spans else 0

    def send(self, spans: Sequence[ReadableSpan], verdict: Verdict) -> list[ReadableSpan]:
        """What goes on when `spans` (of one trace, or retrieval spans of several) are released with `verdict`."""
        evaluations = verdict.evaluations
        if verdict.outcome is not None:
            evaluations = {**self.not_judged(spans, verdict.outcome), **evaluations}
        return self._send(spans, evaluations, verdict)

    def unwritten(self, spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
        """What goes on when writing a verdict failed: the held spans as they are."""
        return list(spans)

    def send_unheld(self, spans: Sequence[ReadableSpan], verdict: Verdict) -> list[ReadableSpan]:
        """What goes on for spans that were never held (spans replayed from a spool), with `verdict`."""
        return self.send(spans, verdict)

    def _send(
        self, spans: Sequence[ReadableSpan], evaluations: dict[int, list[Evaluation]], verdict: Verdict
    ) -> list[ReadableSpan]:
        raise NotImplementedError

    def not_judged(self, spans: Iterable[ReadableSpan], outcome: Outcome) -> dict[int, list[Evaluation]]:
        """The `outcome` as an evaluation for each retrieval span of `spans`, by span id."""
        evaluation = not_judged(*outcome, self._model, self._prompt_version)
        targets: dict[int, list[Evaluation]] = {}
        for span in spans:
            ctx = ids_of(span)[0]
            if ctx is not None and span_role(span, self._rules) == "retrieval":
                targets[ctx[SPAN_ID]] = [evaluation]
        return targets


class Enrich(Mode):
    """The spans of a held trace that wait (its targets) go on once, at its release, the evaluated ones with
    their writes."""

    holds_spans = True
    _said_unwritten = False

    def _send(
        self, spans: Sequence[ReadableSpan], evaluations: dict[int, list[Evaluation]], verdict: Verdict
    ) -> list[ReadableSpan]:
        writes = verdict.writes
        if writes is None:
            writes = writes_for(evaluations, self.reason_max_chars, verdict.annotations, verdict.rollups)
        elif evaluations:  # written by the scoring process, and not judged here (a timeout, a lost child)
            writes = {**writes_for(evaluations, self.reason_max_chars), **writes}
        out = list(spans)
        if writes:
            written = 0
            for i, span in enumerate(out):  # most spans of a trace have no writes: no call for them
                ctx = (SDK_IDS if type(span) is SDK_SPAN else PUBLIC_IDS)(span)[0]
                if ctx is not None and (found := writes.get(ctx[SPAN_ID])) is not None:
                    out[i] = self._written(span, ctx, found)
                    written += 1
            if written < len(writes) and not self._said_unwritten:
                # A span with writes that did not wait for them (admission's targets missed it): say so once.
                self._said_unwritten = True
                logger.warning("ragtrace: %d evaluated span(s) had gone on before their scores; they carry none",
                               len(writes) - written)
        return out

    def _written(
        self, span: ReadableSpan, ctx: SpanContext, found: tuple[dict[str, AttributeValue], list[Event]]
    ) -> ReadableSpan:
        try:
            attributes, events = found
            kept = self.results.route(ctx[TRACE_ID], ctx[SPAN_ID], ctx[TRACE_FLAGS], events)
            return enrich(span, attributes, kept)
        except Exception:
            logger.exception("ragtrace: enriching a span failed; forwarded unscored")
            return span


class Link(Mode):
    """The spans went on as they ended: a release sends the `evaluation <scorer>` spans, linked to them."""

    holds_spans = False

    def unwritten(self, spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
        return []  # they went on as they ended

    def send_unheld(self, spans: Sequence[ReadableSpan], verdict: Verdict) -> list[ReadableSpan]:
        return [*spans, *self.send(spans, verdict)]  # they did not go on as they ended: they go now

    def _send(
        self, spans: Sequence[ReadableSpan], evaluations: dict[int, list[Evaluation]], verdict: Verdict
    ) -> list[ReadableSpan]:
        if not evaluations:
            return []
        start = time.time_ns() if verdict.start_ns is None else verdict.start_ns
        results = self.results

        def route_to(target: SpanContext) -> RouteEvents:
            # The results belong to the evaluated span: their log records are in its context.
            return lambda events: results.route(target.trace_id, target.span_id, target.trace_flags, events)

        linked: list[ReadableSpan] = []
        for span in spans:
            target = span.context
            if target is None or not (found := evaluations.get(target.span_id)):
                continue
            try:
                for evaluation in found:
                    linked += link_spans(target, evaluation, resource=span.resource, start_time=start,
                                         reason_max_chars=self.reason_max_chars, route=route_to(target))
            except Exception:
                logger.exception("ragtrace: building an evaluation span failed")
        return linked
