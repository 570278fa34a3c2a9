"""Haystack's own tracing (`haystack.tracing`, sent to OpenTelemetry by opentelemetry-haystack): `haystack.*` keys.

Haystack 3 traces every pipeline component as a `haystack.component.run` span (`haystack.component.type`,
and, with content tracing on, `haystack.component.input` / `.output` as JSON), and an `Agent` as
`haystack.agent.run` > `haystack.agent.step` > `haystack.agent.step.llm` (the model call:
`haystack.agent.step.llm.input` / `.output`) and `haystack.agent.step.tool` (`haystack.tool.name`,
`haystack.agent.step.tool.input` / `.output`). What they mean here:

- a component whose type is a retriever (`InMemoryBM25Retriever`, `QdrantEmbeddingRetriever`: Haystack names
  them all `...Retriever`) is a retrieval: its output's `documents`, its input's `query`;
- a component whose type is a generator (`OpenAIChatGenerator`, `HuggingFaceLocalGenerator`), and an agent's
  model call, is a generation: the `messages` (or `prompt`) it was given, the `replies` it gave;
- an agent's tool call is a tool call (`tools.py`): a retrieval when its result is documents.

Haystack records content only with `HAYSTACK_CONTENT_TRACING_ENABLED=true`; a retriever traced without it
is counted `haystack_content_not_traced`.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace.capture.genai import documents_from
from ragtrace.capture.values import (
    Attrs,
    CaptureLimits,
    RetrievalReading,
    Skip,
    count_user_texts,
    first_assistant_text,
    last_user_text,
    maybe_json,
    plain,
    query_from,
    response_from,
    text_leaves,
    tool_call_answer,
)

COMPONENT_TYPE = "haystack.component.type"
COMPONENT_INPUT = "haystack.component.input"
COMPONENT_OUTPUT = "haystack.component.output"
LLM_INPUT = "haystack.agent.step.llm.input"
LLM_OUTPUT = "haystack.agent.step.llm.output"
TOOL_NAME = "haystack.tool.name"
TOOL_INPUT = "haystack.agent.step.tool.input"
TOOL_OUTPUT = "haystack.agent.step.tool.output"
AGENT_INPUT = "haystack.agent.input"
AGENT_MAX_STEPS = "haystack.agent.max_steps"  # a tag every agent run has, content tracing or not
PIPELINE_INPUT = "haystack.pipeline.input_data"
# The keys that make a span Haystack's, for the one-pass marker test in readers.classify.
MARKERS = frozenset({COMPONENT_TYPE, LLM_OUTPUT, LLM_INPUT, TOOL_NAME})
AGENT_MARKERS = frozenset({AGENT_MAX_STEPS, AGENT_INPUT})
INPUT_MARKERS = frozenset({AGENT_INPUT, PIPELINE_INPUT, COMPONENT_INPUT, LLM_INPUT})
# Components that only move messages or documents about (a prompt builder, a joiner) end in other words.
RETRIEVER_SUFFIX = "Retriever"
GENERATOR_SUFFIX = "Generator"


def role(attrs: Attrs, present: frozenset[str] | set[str]) -> str | None:
    """"retrieval", "generation", "tool" or None, from the keys `present` (constant time: no parsing)."""
    if COMPONENT_TYPE in present:
        kind = attrs[COMPONENT_TYPE]
        if isinstance(kind, str):
            if kind.endswith(RETRIEVER_SUFFIX):
                return "retrieval"
            if kind.endswith(GENERATOR_SUFFIX):
                return "generation"
        return None
    if TOOL_NAME in present:
        return "tool"
    return "generation" if LLM_OUTPUT in present or LLM_INPUT in present else None


def _parsed(value: Any, limits: CaptureLimits) -> Any:
    """A content tag as plain data: Haystack writes JSON text (structured values are taken as they are)."""
    return maybe_json(value, limits) if isinstance(value, str) else plain(value)


def _value(attrs: Attrs, keys: tuple[str, str], limits: CaptureLimits) -> Any:
    raw = attrs.get(keys[0])
    if raw is None:
        raw = attrs.get(keys[1])
    return None if raw is None else _parsed(raw, limits)


_INPUTS = (LLM_INPUT, COMPONENT_INPUT)
_OUTPUTS = (LLM_OUTPUT, COMPONENT_OUTPUT)


def read_retrieval(span: ReadableSpan, attrs: Attrs, limits: CaptureLimits, notes: set[str]) -> RetrievalReading:
    """A retriever component: `{"documents": [...]}` out (Haystack `Document`s: `content`, `id`, `score`)."""
    raw = attrs.get(COMPONENT_OUTPUT)
    if raw is None:
        raise Skip("haystack_content_not_traced")
    output = _parsed(raw, limits)
    items = output.get("documents") if isinstance(output, dict) else None
    if not isinstance(items, list):
        raise Skip("invalid_documents_json")
    kind = attrs.get(COMPONENT_TYPE)
    inputs = _parsed(attrs.get(COMPONENT_INPUT), limits) if attrs.get(COMPONENT_INPUT) is not None else None
    return RetrievalReading(
        convention="haystack",
        retriever=kind if isinstance(kind, str) else span.name or "",
        documents=documents_from(items, limits, notes),
        query=query_from(inputs.get("query")) if isinstance(inputs, dict) else None,
    )


def input_messages(attrs: Attrs, limits: CaptureLimits) -> list[Any]:
    """The chat messages a generation was given (a text prompt is one user message, as Haystack sends it)."""
    value = _value(attrs, _INPUTS, limits)
    if not isinstance(value, dict):
        return []
    messages = value.get("messages", value.get("prompt"))
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    return messages if isinstance(messages, list) else []


def input_texts(attrs: Attrs, limits: CaptureLimits, out: list[str]) -> None:
    """Every text of the messages a generation was given (not the tool definitions beside them)."""
    text_leaves(input_messages(attrs, limits), limits, out)


def user_message(attrs: Attrs, limits: CaptureLimits) -> str | None:
    return last_user_text(input_messages(attrs, limits))


def user_turns(attrs: Attrs, limits: CaptureLimits) -> int:
    return count_user_texts(input_messages(attrs, limits))


def _tool_call_arguments(replies: list[Any]) -> list[Any]:
    """The arguments of the `tool_call` parts of the replies (a model answering through a tool)."""
    found = []
    for reply in replies:
        parts = reply.get("content") if isinstance(reply, dict) else None
        for part in parts if isinstance(parts, list) else ():
            call = part.get("tool_call") if isinstance(part, dict) else None
            if isinstance(call, dict):
                found.append(call.get("arguments"))
    return found


def read_response(attrs: Attrs, limits: CaptureLimits) -> str:
    """The first assistant text among the `replies`; else an answer given as a tool call's arguments."""
    value = _value(attrs, _OUTPUTS, limits)
    replies = value.get("replies") if isinstance(value, dict) else None
    if not isinstance(replies, list):
        found = response_from(value) if value is not None else None
        return found if isinstance(found, str) else ""
    if replies and isinstance(replies[0], str):  # a text generator's replies
        return str(replies[0])
    found = first_assistant_text(replies)
    if found is None:
        found = tool_call_answer(_tool_call_arguments(replies), limits)
    return found or ""


def input_query(attrs: Attrs, limits: CaptureLimits) -> str | None:
    """The question an agent, a pipeline or a component was given: the agent's messages, a pipeline's
    inputs (component name -> its inputs: the first that holds a question), a component's inputs."""
    if INPUT_MARKERS.isdisjoint(attrs):
        return None
    for key in (AGENT_INPUT, COMPONENT_INPUT, LLM_INPUT):
        value = attrs.get(key)
        if value is not None:
            return query_from(_parsed(value, limits))
    data = _parsed(attrs.get(PIPELINE_INPUT), limits)
    if not isinstance(data, dict):
        return query_from(data)
    for inputs in list(data.values())[:50]:
        found = query_from(inputs)
        if found is not None:
            return found
    return None


def is_agent(attrs: Attrs) -> bool:
    """An agent's run (`haystack.agent.run`)."""
    return not AGENT_MARKERS.isdisjoint(attrs)
