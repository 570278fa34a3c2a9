"""What a score looks like on a span (attributes.md), and how it gets onto an ended, read-only span.

Ended spans are immutable in OpenTelemetry, so enrich mode builds a copy with merged attributes and
events, and link mode builds a new `evaluation <scorer>` span. Both are plain `ReadableSpan`s that the
wrapped exporting processor encodes like any other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind
from opentelemetry.util.types import AttributeValue

from ragtrace._logs import ragtrace_logger
from ragtrace._sdk import copy_span, dropped_counts
from ragtrace._version import __version__
from ragtrace.capture import CapturedSample
from ragtrace.capture.values import attrs_of
from ragtrace.judges.identity import JUDGE_ID
from ragtrace.scoring import JUDGE_TIMEOUT, JudgeUsage, ScoreResult
from ragtrace.scoring import timed_out as timed_out_result

logger = ragtrace_logger(__name__)

EvalStatus = Literal["scored", "partial", "skipped", "error", "timeout"]
EVENT_NAME = "gen_ai.evaluation.result"
SCOPE = InstrumentationScope("ragtrace", __version__)
_ids = RandomIdGenerator()


@dataclass(frozen=True)
class Evaluation:
    """Every scorer's result for one sample, as it will be written: results, total usage, why it ended."""

    results: tuple[ScoreResult, ...]
    usage: JudgeUsage
    expired: bool = False  # its deadline passed before the judge answered
    model: str = ""
    prompt_version: str = ""
    # Nothing was judged, and why: (status, ragtrace.eval.error), e.g. ("skipped", "queue_full").
    outcome: tuple[EvalStatus, str] | None = None
    judge_id: str = ""  # ragtrace.judge.id when no result carries it (a timeout)

    @property
    def status(self) -> EvalStatus:
        if self.outcome is not None:
            return self.outcome[0]
        if self.expired:
            return "timeout"
        scored = any(r.status == "scored" for r in self.results)
        errors = [r.error for r in self.results if r.error is not None]
        if errors:
            if scored:
                return "partial"
            return "timeout" if all(e == JUDGE_TIMEOUT for e in errors) else "error"
        return "scored" if scored else "skipped"

    @property
    def error(self) -> str | None:
        if self.outcome is not None:
            return self.outcome[1]
        if self.expired:
            return JUDGE_TIMEOUT
        return next((r.error for r in self.results if r.error is not None), None)


# What one span gets written: attributes and events, by span id.
Writes = dict[int, tuple[dict[str, AttributeValue], list[Event]]]
# Which of a span's result events it keeps (the rest may go out as log records): see `EvaluationResults`.
RouteEvents = Callable[[Sequence[Event]], Sequence[Event]]


SESSION = "ragtrace.session.id"
CONVERSATION = "gen_ai.conversation.id"  # on the evaluation events, as the GenAI conventions name it
RETRIEVAL_QUERY = "ragtrace.retrieval.query"
QUERY_SOURCE = "ragtrace.query.source"
AGENT_PREFIX = "ragtrace.agent"
_MAX_WRITTEN_TEXT = 4_000


def sample_attributes(captured: CapturedSample) -> dict[str, AttributeValue]:
    """What a sample says about itself on the span its scores go to: where its query came from, the
    retrieval's own query when another was judged, and the conversation it belongs to."""
    metadata = captured.sample.metadata
    attrs: dict[str, AttributeValue] = {}
    source = metadata.get("query_source")
    if isinstance(source, str):
        attrs[QUERY_SOURCE] = source
    query = metadata.get("retrieval_query")
    if isinstance(query, str):
        attrs[RETRIEVAL_QUERY] = _cap(query, _MAX_WRITTEN_TEXT)
    if captured.session_id:
        attrs[SESSION] = captured.session_id
    return attrs


@dataclass
class Rollup:
    """An agent run's retrievals taken together: how many, and the evaluations of those judged."""

    retrievals: int = 0
    evaluations: list[Evaluation] = field(default_factory=list)

    def attributes(self) -> dict[str, AttributeValue]:
        """`ragtrace.agent.retrievals`, and per scorer over the run's scored retrievals: `.max` (did any
        search find it), `.mean`, `.scored`, and `.label`: pass when any retrieval passed, fail when none
        did (the agent searched and never found the evidence)."""
        attrs: dict[str, AttributeValue] = {f"{AGENT_PREFIX}.retrievals": self.retrievals}
        by_scorer: dict[str, list[ScoreResult]] = {}
        for evaluation in self.evaluations:
            for result in evaluation.results:
                if result.score is not None:
                    by_scorer.setdefault(result.name, []).append(result)
        for name, results in sorted(by_scorer.items()):
            scores = [float(r.score) for r in results if r.score is not None]
            prefix = f"{AGENT_PREFIX}.{name}"
            attrs[f"{prefix}.max"] = max(scores)
            attrs[f"{prefix}.mean"] = round(sum(scores) / len(scores), 2)
            attrs[f"{prefix}.scored"] = len(scores)
            labels = [r.label for r in results if r.label is not None]
            if labels:
                attrs[f"{prefix}.label"] = "pass" if "pass" in labels else "fail"
        return attrs


def timeout_evaluation(names: Sequence[str], model: str, prompt_version: str) -> Evaluation:
    """The evaluation of a sample whose scores did not arrive before its trace was released."""
    return Evaluation(
        results=tuple(timed_out_result(n) for n in names),
        usage=JudgeUsage(),
        expired=True,
        model=model,
        prompt_version=prompt_version,
    )


def not_judged(status: EvalStatus, error: str, model: str, prompt_version: str) -> Evaluation:
    """The evaluation of a sample that was not judged at all (queue full, scoring process lost or not
    answering, a flush that came first): its status and why, and no scorer results."""
    return Evaluation(results=(), usage=JudgeUsage(), model=model, prompt_version=prompt_version,
                      outcome=(status, error))


# What a sample the limits turned away says on its span: a sampled retrieval span always says what became of
# it. Per-scorer sampling that picked no scorer is not here: nothing was meant to look at that sample.
_DECLINED: dict[str, tuple[EvalStatus, str]] = {
    "throttled": ("skipped", "throttled"),
    "over_budget": ("skipped", "over_budget"),
    "error": ("error", "internal_error"),
}


def declined(decision: str, model: str, prompt_version: str) -> Evaluation | None:
    """The evaluation of a sample the planner declined with `decision`, or None when it says nothing."""
    outcome = _DECLINED.get(decision)
    return not_judged(*outcome, model, prompt_version) if outcome is not None else None


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def scorer_attributes(result: ScoreResult, reason_max_chars: int) -> dict[str, AttributeValue]:
    """`ragtrace.<scorer>.score|label|reason` for one result (score and label only when scored)."""
    prefix = f"ragtrace.{result.name}"
    attrs: dict[str, AttributeValue] = {f"{prefix}.reason": _cap(result.reason, reason_max_chars)}
    if result.score is not None:
        attrs[f"{prefix}.score"] = float(result.score)
    if result.label is not None:
        attrs[f"{prefix}.label"] = result.label
    return attrs


def common_attributes(evaluation: Evaluation) -> dict[str, AttributeValue]:
    """`ragtrace.eval.*` and `ragtrace.judge.*`: the outcome and what the judge spent."""
    usage = evaluation.usage
    attrs: dict[str, AttributeValue] = {
        "ragtrace.eval.status": evaluation.status,
        "ragtrace.judge.model": usage.model or evaluation.model,
        "ragtrace.judge.prompt_version": usage.prompt_version or evaluation.prompt_version,
        "ragtrace.judge.input_tokens": int(usage.input_tokens),
        "ragtrace.judge.output_tokens": int(usage.output_tokens),
        "ragtrace.judge.latency_ms": float(usage.latency_ms),
    }
    if usage.cost_usd is not None:
        attrs["ragtrace.judge.cost_usd"] = float(usage.cost_usd)
    if judge_id := usage.judge_id or evaluation.judge_id:
        attrs[JUDGE_ID] = judge_id
    if usage.judge_trace_id:  # judge traces on: the trace of the judge's own calls
        attrs["ragtrace.judge.trace_id"] = usage.judge_trace_id
    if (error := evaluation.error) is not None:
        attrs["ragtrace.eval.error"] = error
    return attrs


def evaluation_event(
    result: ScoreResult, reason_max_chars: int, timestamp: int | None = None, session: str | None = None
) -> Event:
    """One `gen_ai.evaluation.result` event, with the GenAI semantic convention's attribute names."""
    attrs: dict[str, AttributeValue] = {
        "gen_ai.evaluation.name": result.name,
        "gen_ai.evaluation.explanation": _cap(result.reason, reason_max_chars),
    }
    if session:
        attrs[CONVERSATION] = session
    if result.score is not None:
        attrs["gen_ai.evaluation.score.value"] = float(result.score)
    if result.label is not None:
        attrs["gen_ai.evaluation.score.label"] = result.label
    if result.error is not None:
        attrs["error.type"] = result.error
    if result.usage.judge_id:
        attrs[JUDGE_ID] = result.usage.judge_id
    return Event(EVENT_NAME, attrs, timestamp=timestamp or time.time_ns())


def evaluation_writes(
    evaluation: Evaluation, reason_max_chars: int, session: str | None = None
) -> tuple[dict[str, AttributeValue], list[Event]]:
    """All attributes and events that one evaluation adds to its target span (enrich mode)."""
    attrs = common_attributes(evaluation)
    now = time.time_ns()
    events: list[Event] = []
    for result in evaluation.results:
        attrs.update(scorer_attributes(result, reason_max_chars))
        events.append(evaluation_event(result, reason_max_chars, now, session))
    return attrs, events


def writes_for(
    evaluations_by_span: Mapping[int, Sequence[Evaluation]],
    reason_max_chars: int,
    annotations: Mapping[int, Mapping[str, AttributeValue]] | None = None,
    rollups: Mapping[int, Rollup] | None = None,
) -> Writes:
    """The attributes and events each evaluated span gets (with its samples' `annotations`), and each agent
    span its `rollups`; a span whose writes fail goes out unscored."""
    annotations = annotations or {}
    writes: Writes = {}
    for span_id, evaluations in evaluations_by_span.items():
        try:
            attrs: dict[str, AttributeValue] = dict(annotations.get(span_id, {}))
            session = attrs.get(SESSION)
            events: list[Event] = []
            for evaluation in evaluations:
                more_attrs, more_events = evaluation_writes(
                    evaluation, reason_max_chars, session if isinstance(session, str) else None)
                attrs.update(more_attrs)
                events.extend(more_events)
            writes[span_id] = (attrs, events)
        except Exception:
            logger.exception("ragtrace: writing an evaluation failed; its span is forwarded unscored")
    for span_id, rollup in (rollups or {}).items():
        try:
            writes.setdefault(span_id, ({}, []))[0].update(rollup.attributes())
        except Exception:
            logger.exception("ragtrace: writing an agent's roll-up failed")
    return writes


def enrich(span: ReadableSpan, attributes: Mapping[str, AttributeValue], events: Sequence[Event]) -> ReadableSpan:
    """A copy of an ended span with attributes and events added; everything else (ids, times) unchanged.

    The added attributes are not subject to the span's attribute limit (the scores are the point), and
    the original dropped counts are carried over so exporters still report them.
    """
    old_events, links, dropped_attributes, dropped_events, dropped_links = dropped_counts(span)
    merged: Mapping[str, AttributeValue] = {**attrs_of(span), **attributes}
    all_events: Sequence[Event] = (*old_events, *events)
    # Bounded containers only where they carry a dropped count the exporter must still report.
    if dropped_attributes:
        bounded = BoundedAttributes(maxlen=None, attributes=merged, immutable=True)
        bounded.dropped = dropped_attributes
        merged = bounded
    if dropped_events:
        bounded_events: BoundedList[Event] = BoundedList(maxlen=None)
        bounded_events.extend(all_events)
        bounded_events.dropped = dropped_events
        all_events = bounded_events
    if dropped_links:
        bounded_links: BoundedList[Link] = BoundedList(maxlen=None)
        bounded_links.extend(links)
        bounded_links.dropped = dropped_links
        links = bounded_links
    return copy_span(span, merged, all_events, links)


def evaluation_span(
    target: SpanContext,
    result: ScoreResult | None,
    evaluation: Evaluation,
    *,
    resource: Resource,
    start_time: int,
    reason_max_chars: int,
    route: RouteEvents | None = None,
) -> ReadableSpan:
    """Link mode: a short `evaluation <scorer>` span, child of the evaluated span and linked to it; for a
    sample not judged at all (no `result`), one `evaluation` span saying why. `route` decides which of its
    result events it keeps (and may emit them elsewhere, as log records)."""
    end = time.time_ns()
    context = SpanContext(
        trace_id=target.trace_id,
        span_id=_ids.generate_span_id(),
        is_remote=False,
        trace_flags=target.trace_flags,
        trace_state=target.trace_state,
    )
    attrs: dict[str, AttributeValue] = {"openinference.span.kind": "EVALUATOR", **common_attributes(evaluation)}
    events: tuple[Event, ...] = ()
    if result is not None:
        attrs["gen_ai.evaluation.name"] = result.name
        attrs.update(scorer_attributes(result, reason_max_chars))
        events = (evaluation_event(result, reason_max_chars, end),)
        if route is not None:
            events = tuple(route(events))
        if result.error is not None:
            attrs["error.type"] = result.error
    elif evaluation.status != "skipped" and evaluation.error is not None:  # a failure, not a decision
        attrs["error.type"] = evaluation.error
    parent = SpanContext(target.trace_id, target.span_id, is_remote=False, trace_flags=target.trace_flags)
    return ReadableSpan(
        name="evaluation" if result is None else f"evaluation {result.name}",
        context=context,
        parent=parent,
        resource=resource,
        attributes=attrs,
        events=events,
        links=(Link(parent),),
        kind=SpanKind.INTERNAL,
        start_time=min(start_time, end),
        end_time=end,
        instrumentation_scope=SCOPE,
    )


def link_spans(
    target: SpanContext, evaluation: Evaluation, *, resource: Resource, start_time: int, reason_max_chars: int,
    route: RouteEvents | None = None,
) -> list[ReadableSpan]:
    """Link mode: the `evaluation <scorer>` spans of one evaluation; one `evaluation` span, saying why, for
    a sample not judged at all (it has no scorer results)."""
    results: Sequence[ScoreResult | None] = evaluation.results or (None,)
    return [
        evaluation_span(target, result, evaluation, resource=resource, start_time=start_time,
                        reason_max_chars=reason_max_chars, route=route)
        for result in results
    ]
