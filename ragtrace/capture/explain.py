"""Why a trace was or was not scored, in words: every span's classification, the samples, the counts.

`explain(spans)` runs the capture code itself (`report_traces`), so what it says is what the live
processor and `replay` do with the same spans. `render` puts reports into text for `ragtrace explain`.
`DecisionLog` keeps the spans of the last traces a live processor closed, so a running app can be asked
why nothing was scored; the explanation is worked out only when asked.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Mapping, Sequence

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace import _checks as checks
from ragtrace.capture.pairing import report_traces
from ragtrace.capture.rules import DEFAULT_RULES, CaptureRules
from ragtrace.capture.types import SpanVerdict, TraceReport
from ragtrace.capture.values import DEFAULT_LIMITS, FROM_EVENTS, CaptureLimits

# Capture counts in words: why a span or a trace gave no sample (or a cut one).
REASONS: Mapping[str, str] = {
    "not_rag": "no span of the trace is a retrieval ragtrace can read",
    "no_documents": "a retrieval span recorded no documents",
    "document_without_content": "a retrieved document has no text",
    "invalid_document": "a retrieved document has a shape ragtrace cannot read",
    "invalid_documents_json": "a retrieval's documents attribute is not valid JSON",
    "invalid_messages_json": (
        "a generation's gen_ai.output.messages is not a JSON list of messages; it should read like "
        '[{"role": "assistant", "parts": [{"type": "text", "content": "the answer"}]}] '
        "(docs/span-contract.md)"
    ),
    "wrong_attribute_type": "an attribute has an unexpected type (e.g. a list where text was expected)",
    "attribute_too_large": "an attribute was too large to parse",
    "no_query": "no query: not on the retrieval, not in the paired generation's user message, not on the root",
    "tool_result_not_documents": "a tool call looked like a retrieval but its result is not a list of documents",
    "tool_result_not_recorded": "a tool named in retrieval_tools recorded no result (content capture off?)",
    "haystack_content_not_traced": (
        "a Haystack retriever recorded no output: set HAYSTACK_CONTENT_TRACING_ENABLED=true"
    ),
    "nested_retrieval": "a nested layer of a retrieval already sampled (scored once, on the kept span)",
    "too_many_documents": "more documents than the limit: the rest were cut",
    "context_truncated": "a retrieved text was longer than the limit and was cut",
    "query_truncated": "the query was longer than the limit and was cut",
    "response_truncated": "the response was longer than the limit and was cut",
    "ground_truth_truncated": "the ground truth was longer than the limit and was cut",
    "invalid_span": "a span without valid trace or span id",
    "duplicate_span_id": "a span id seen twice in the trace (the second was ignored)",
    "reader_error": "a reader failed on a span (a bug: please report it with the span)",
    "capture_error": "capture failed on the trace (a bug: please report it)",
    "extractor_error": "the custom extractor raised",
    "extractor_invalid_output": "the custom extractor returned something that is not a CapturedSample",
}


def in_words(reason: str) -> str:
    return REASONS.get(reason, reason.replace("_", " "))


def explain(
    spans: Sequence[ReadableSpan], *, limits: CaptureLimits = DEFAULT_LIMITS, rules: CaptureRules = DEFAULT_RULES
) -> list[TraceReport]:
    """One report per trace of `spans` (any order, any number of traces)."""
    return report_traces(spans, limits=limits, rules=rules)


def _why_no_sample(report: TraceReport) -> str:
    roles = Counter(span.role for span in report.spans)
    if not roles["retrieval"]:
        found = "no span is a retrieval"
        if roles["generation"]:
            found += f" ({roles['generation']} generation span(s), but nothing retrieved to score)"
        return found + (": no OpenInference RETRIEVER, GenAI retrieval, OpenLLMetry retriever task, vector-DB query, "
                        "or tool call whose result is a list of documents (or named in retrieval_tools)")
    return "every retrieval span was passed over: " + "; ".join(
        in_words(reason) for reason in sorted(report.counts) if reason != "nested_retrieval"
    )


def _span_line(span: SpanVerdict, depth: int) -> str:
    kind = f"{span.role} ({span.convention})" if span.role else "-"
    return f"{'  ' * depth}- {span.name!r} [{span.span_id:016x}] {kind}: {span.verdict}"


def _tree(spans: Sequence[SpanVerdict]) -> list[str]:
    ids = {s.span_id for s in spans}
    children: dict[int | None, list[SpanVerdict]] = {}
    for span in spans:
        children.setdefault(span.parent_id if span.parent_id in ids else None, []).append(span)
    lines: list[str] = []
    stack = [(span, 0) for span in reversed(children.get(None, []))]
    seen: set[int] = set()
    while stack:
        span, depth = stack.pop()
        if span.span_id in seen:
            continue
        seen.add(span.span_id)
        lines.append(_span_line(span, depth))
        stack.extend((child, depth + 1) for child in reversed(children.get(span.span_id, [])))
    lines.extend(_span_line(span, 0) for span in spans if span.span_id not in seen)  # cycles
    return lines


def render(reports: Sequence[TraceReport], *, max_chars: int = 200) -> str:
    """Reports as text: per trace the span tree with verdicts, each sample, and why nothing was scored."""

    def short(text: str) -> str:
        text = " ".join(text.split())
        return text if len(text) <= max_chars else text[: max_chars - 1] + "…"

    names = {(r.trace_id, s.span_id): s.name for r in reports for s in r.spans}
    out: list[str] = []
    for report in reports:
        verdict = f"{len(report.samples)} sample(s)" if report.samples else "not scored"
        out.append(f"trace {report.trace_id:032x}: {len(report.spans)} span(s), {verdict}")
        out.extend("  " + line for line in _tree(report.spans))
        for number, captured in enumerate(report.samples, start=1):
            sample = captured.sample
            out.append(f"  sample {number}: retrieval {names.get((report.trace_id, captured.retrieval_span_id))!r}"
                       f" ({captured.convention})")
            meta = sample.metadata
            if meta.get("taken_because"):
                out.append(f"    taken as a retrieval: {meta['taken_because']}")
            out.append(f"    query ({meta.get('query_source', '?')}): {short(sample.query)}")
            if meta.get("retrieval_query"):
                where = meta.get("retrieval_query_from", "?")
                out.append(f"    retrieval's own query ({where}; not judged, written as ragtrace.retrieval.query): "
                           f"{short(meta['retrieval_query'])}")
            if meta.get(FROM_EVENTS):
                out.append("    content read from span events (not only attributes)")
            if captured.session_id:
                out.append(f"    session: {short(captured.session_id)}")
            for rank, text in enumerate(sample.context_texts, start=1):
                out.append(f"    context {rank}: {short(text)}")
            if captured.generation_span_id is None:
                out.append("    generation: none after the retrieval (response empty)")
            else:
                generation = names.get((report.trace_id, captured.generation_span_id))
                out.append(f"    generation: {generation!r}, paired by {captured.pairing}"
                           f" ({sample.metadata.get('pairing_evidence', '')})")
            out.append(f"    response: {short(sample.response)}")
        if not report.samples:
            out.append(f"  why not scored: {_why_no_sample(report)}")
        for reason, count in sorted(report.counts.items()):
            out.append(f"  counted {reason} x{count}: {in_words(reason)}")
        out.append("")
    return "\n".join(out)


class DecisionLog:
    """The spans of the last `size` traces a live processor closed, explained on demand.

    Recording is one deque append under a lock (the spans are held, not copied); `explain()` and
    `render()` run the capture code over them when a user asks. Traces the sampler dropped never reach
    the processor's capture step, so they are not here: the decision counter counts them.
    """

    def __init__(
        self, size: int = 20, *, limits: CaptureLimits = DEFAULT_LIMITS, rules: CaptureRules = DEFAULT_RULES
    ) -> None:
        self._traces: deque[tuple[ReadableSpan, ...]] = deque(maxlen=checks.count(size, "size"))
        self._lock = threading.Lock()
        self._limits = limits
        self._rules = rules

    def record(self, spans: Sequence[ReadableSpan]) -> None:
        """Keep one closed trace's spans (the oldest kept trace goes when full)."""
        with self._lock:
            self._traces.append(tuple(spans))

    def explain(self) -> list[TraceReport]:
        """The kept traces' reports, oldest first."""
        with self._lock:
            traces = list(self._traces)
        return [report for spans in traces for report in explain(spans, limits=self._limits, rules=self._rules)]

    def render(self) -> str:
        return render(self.explain())


__all__ = ["REASONS", "DecisionLog", "explain", "in_words", "render"]
