"""Arbitrary attributes and events on real SDK spans: readers and span_role never raise, outputs are valid,
and capture_start's shortcuts agree with span_role."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.context import Context
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

from ragtrace.capture import (
    DEFAULT_RULES,
    CapturedSample,
    CaptureLimits,
    CaptureRules,
    CaptureStats,
    capture_start,
    extract_samples,
    span_role,
)
from ragtrace.capture.explain import explain, render
from ragtrace.scoring import RagSample

KEYS = [
    "gen_ai.operation.name", "gen_ai.retrieval.documents", "gen_ai.retrieval.query.text", "gen_ai.input.messages",
    "gen_ai.output.messages", "gen_ai.prompt.0.role", "gen_ai.prompt.0.content", "gen_ai.completion.0.content",
    "gen_ai.data_source.id", "openinference.span.kind", "input.value", "output.value",
    "retrieval.documents.0.document.content", "retrieval.documents.1.document.content",
    "retrieval.documents.0.document.score", "retrieval.documents.0.document.id",
    "llm.input_messages.0.message.role", "llm.input_messages.0.message.content",
    "llm.output_messages.0.message.content", "llm.output_messages.0.message.contents.0.message_content.text",
    "traceloop.span.kind", "traceloop.entity.name", "traceloop.entity.input", "traceloop.entity.output",
    "db.system", "db.operation", "db.system.name", "db.operation.name", "llm.request.type", "ragtrace.ground_truth",
    "llm.prompt_template.template", "llm.prompt_template.variables", "llm.model_name", "llm.token_count.completion",
    "gen_ai.system_instructions", "gen_ai.tool.name", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
    "tool.name", "session.id", "gen_ai.conversation.id",
]
EVENT_KEYS = ["db.query.result.document", "db.query.result.id", "db.query.result.score",
              "db.query.result.distance", "db.query.result.metadata", "gen_ai.output.messages",
              "gen_ai.input.messages", "gen_ai.prompt", "gen_ai.completion", "content", "role", "message",
              "message.content", "gen_ai.tool.call.result", "gen_ai.tool.call.arguments"]
EVENT_NAMES = ["db.query.result", "gen_ai.client.inference.operation.details", "other", "gen_ai.content.prompt",
               "gen_ai.content.completion", "gen_ai.user.message", "gen_ai.choice", "gen_ai.tool.message"]
ROLE_WORDS = ["retrieval", "chat", "RETRIEVER", "LLM", "task", "tool", "chroma", "query", "user", "assistant",
              "retriever", "page_content"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | st.sampled_from(ROLE_WORDS),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["id", "score", "content", "role", "parts", "type", "text", "page_content",
                                       "kwargs", "documents", "query", "inputs", "outputs", "choices", "message",
                                       "node", "id_", "meta", "text_resource", "query_bundle", "query_str",
                                       "replies", "raw_output", "results", "tool_call_id", "task"]),
                      inner, max_size=4),
    max_leaves=6,
)
scalars = (
    st.text(max_size=30) | st.sampled_from(ROLE_WORDS) | st.integers() | st.floats(allow_nan=True)
    | st.booleans() | json_values.map(json.dumps)
)
values = (
    scalars | st.lists(st.text(max_size=10), max_size=3) | st.lists(st.integers(), max_size=3)
    | st.lists(json_values, max_size=3)  # structured (AnyValue) attributes
)
# A role marker makes most spans reach a reader; the rest of the attributes are arbitrary.
MARKERS: list[dict[str, Any]] = [
    {}, {"gen_ai.operation.name": "retrieval"}, {"gen_ai.operation.name": "chat"},
    {"openinference.span.kind": "RETRIEVER"}, {"openinference.span.kind": "LLM"},
    {"traceloop.span.kind": "task", "traceloop.entity.name": "retriever"}, {"llm.request.type": "chat"},
    {"db.system": "chroma", "db.operation": "query"}, {"db.system.name": "Qdrant", "db.operation.name": "search"},
    {"db.system": "postgresql", "db.operation": "query"}, {"db.system": "postgresql", "ragtrace.ground_truth": "gt"},
    {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"},
    {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.result": '["a text", {"content": "b"}]'},
    {"openinference.span.kind": "TOOL", "tool.name": "search"}, {"openinference.span.kind": "AGENT"},
    {"traceloop.span.kind": "tool", "traceloop.entity.name": "other_tool"}, {"gen_ai.operation.name": "invoke_agent"},
]
# Named tools, a pattern and an exclusion: the rules change roles, never robustness.
RULES = CaptureRules(retrieval_tools=("search", "other_*", "!s"), tool_separator="\n")
attr_dicts = st.builds(
    lambda marker, rest: {**rest, **marker},
    st.sampled_from(MARKERS),
    st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), values, max_size=5),
)
event_lists = st.lists(
    st.tuples(st.sampled_from(EVENT_NAMES),
              st.dictionaries(st.sampled_from(EVENT_KEYS), values, max_size=4)),
    max_size=3,
)
span_specs = st.lists(
    st.tuples(attr_dicts, event_lists, st.integers(0, 20), st.integers(0, 5), st.integers(-1, 5)),
    min_size=1, max_size=5,
)

_exporter = InMemorySpanExporter()
_provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=1_000))
_provider.add_span_processor(SimpleSpanProcessor(_exporter))
_tracer = _provider.get_tracer("fuzz")
_LIMITS = CaptureLimits(max_documents=3, max_context_chars=10, max_query_chars=10, max_response_chars=10)


@settings(max_examples=160, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(span_specs, st.sampled_from([DEFAULT_RULES, RULES]))
def test_arbitrary_spans_never_raise(
    specs: list[tuple[dict[str, Any], list[Any], int, int, int]], rules: CaptureRules
) -> None:
    _check(specs, rules)


# Haystack's own tracing: its keys, its span shapes (component, agent step, tool call) and its JSON (ChatMessage
# content parts, Document dicts, per-component pipeline inputs), arbitrary around them.
HAYSTACK_KEYS = [
    "haystack.component.type", "haystack.component.name", "haystack.component.input", "haystack.component.output",
    "haystack.agent.step.llm.input", "haystack.agent.step.llm.output", "haystack.tool.name",
    "haystack.agent.step.tool.input", "haystack.agent.step.tool.output", "haystack.agent.input",
    "haystack.agent.max_steps", "haystack.pipeline.input_data",
]
HAYSTACK_MARKERS: list[dict[str, Any]] = [
    {}, {"haystack.component.type": "InMemoryBM25Retriever"}, {"haystack.component.type": "OpenAIChatGenerator"},
    {"haystack.component.type": "ChatPromptBuilder"}, {"haystack.component.type": 7},
    {"haystack.tool.name": "search"}, {"haystack.tool.name": "calculator"},
    {"haystack.agent.step.llm.output": '{"replies": [{"role": "assistant", "content": [{"text": "a"}]}]}'},
    {"haystack.agent.max_steps": 5}, {"haystack.pipeline.input_data": '{"retriever": {"query": "q"}}'},
]
haystack_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | st.sampled_from(ROLE_WORDS),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["documents", "content", "id", "score", "meta", "messages", "prompt",
                                       "replies", "role", "text", "tool_call", "tool_call_result", "result",
                                       "arguments", "tool_name", "query", "origin", "error", "reasoning"]),
                      inner, max_size=4),
    max_leaves=8,
)
haystack_values = scalars | haystack_json.map(json.dumps) | st.lists(haystack_json, max_size=3)
haystack_specs = st.lists(
    st.tuples(
        st.builds(lambda marker, rest: {**rest, **marker}, st.sampled_from(HAYSTACK_MARKERS),
                  st.dictionaries(st.sampled_from(HAYSTACK_KEYS), haystack_values, max_size=5)),
        st.just([]), st.integers(0, 20), st.integers(0, 5), st.integers(-1, 5)),
    min_size=1, max_size=5,
)


@settings(max_examples=160, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(haystack_specs, st.sampled_from([DEFAULT_RULES, RULES]))
def test_arbitrary_haystack_spans_never_raise(
    specs: list[tuple[dict[str, Any], list[Any], int, int, int]], rules: CaptureRules
) -> None:
    _check(specs, rules)


def _check(specs: list[tuple[dict[str, Any], list[Any], int, int, int]], rules: CaptureRules) -> None:
    """Spans made from `specs` (attributes, events, start, duration, parent index) through the real SDK: every
    reader and the explanation take them without raising, and what they give is bounded and valid."""
    _exporter.clear()
    made: list[Any] = []
    for attrs, events, start, duration, parent_index in specs:
        parent = made[parent_index] if 0 <= parent_index < len(made) else None
        context = set_span_in_context(parent) if parent is not None else Context()
        span = _tracer.start_span("s", context=context, attributes=attrs, start_time=start)
        for name, event_attrs in events:
            span.add_event(name, event_attrs)
        span.end(end_time=start + duration)
        made.append(span)
    spans = list(_exporter.get_finished_spans())
    for finished in spans:
        role = span_role(finished, rules)
        assert role in (None, "retrieval", "generation")
        # the live processor's hold decision: a retrieval exactly when span_role says so
        expected = "retrieval" if role == "retrieval" else (
            "ground_truth" if "ragtrace.ground_truth" in (finished.attributes or {}) else None
        )
        assert capture_start(finished, rules) == expected
    stats = CaptureStats()
    samples = extract_samples(spans, stats=stats, limits=_LIMITS, rules=rules)
    retrievals = sum(1 for s in spans if span_role(s, rules) == "retrieval")
    assert len(samples) <= retrievals
    for captured in samples:
        assert isinstance(captured, CapturedSample)
        assert isinstance(captured.sample, RagSample)
        sample = captured.sample
        assert len(sample.contexts) <= 3
        assert len(sample.query) <= 10 and len(sample.response) <= 10
        assert all(len(c) <= 10 for c in sample.context_texts)
        json.loads(sample.model_dump_json())  # serialisable: no lone surrogates, no NaN scores
    assert "capture_error" not in stats.counts and "reader_error" not in stats.counts
    for report in explain(spans, limits=_LIMITS, rules=rules):  # the explanation reads the same spans without raising
        assert len(report.samples) <= retrievals
        assert {v.span_id for v in report.spans} <= {s.context.span_id for s in spans if s.context is not None}
    assert isinstance(render(explain(spans, limits=_LIMITS, rules=rules)), str)
