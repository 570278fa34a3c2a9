"""OpenInference (Arize Phoenix): `openinference.span.kind` RETRIEVER and LLM spans, flattened lists."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace.capture.values import (
    Attrs,
    CaptureLimits,
    RetrievalReading,
    as_id,
    as_number,
    as_text,
    content_text,
    indexed,
    maybe_json,
    query_from,
    response_from,
    role_name,
    tool_call_answer,
)
from ragtrace.scoring import Document

KIND = "openinference.span.kind"
DOCUMENTS_PREFIX = "retrieval.documents."
INPUT_VALUE = "input.value"
OUTPUT_VALUE = "output.value"
INPUT_MESSAGES_PREFIX = "llm.input_messages."
OUTPUT_MESSAGES_PREFIX = "llm.output_messages."
PROMPT_TEMPLATE = "llm.prompt_template.template"
TOOL_CALLS_PREFIX = "message.tool_calls."  # within one output message
TOOL_CALL_ARGUMENTS = "tool_call.function.arguments"
# Signs that a model ran: what it said, which model it was, what it cost. A span tagged LLM that has a
# prompt template and none of these rendered a prompt (Haystack's PromptBuilder) and is no generation.
MODEL_SIGNS = (
    "llm.output_messages.0.message.content",
    "llm.output_messages.0.message.role",
    "llm.output_messages.0.message.contents.0.message_content.text",
    "llm.model_name",
    "llm.token_count.completion",
)


def is_prompt_step(attrs: Attrs) -> bool:
    """An LLM-kind span that built a prompt rather than calling a model (constant-time lookups)."""
    return PROMPT_TEMPLATE in attrs and not any(key in attrs for key in MODEL_SIGNS)


def input_query(attrs: Attrs, limits: CaptureLimits, notes: set[str]) -> str | None:
    """`input.value`: a plain question, or JSON holding one (`{"query": ...}`, `{"input": ...}`)."""
    value = attrs.get(INPUT_VALUE)
    if value is None:
        return None
    if not isinstance(value, str):
        notes.add("wrong_attribute_type")
        return None
    return query_from(maybe_json(value, limits))


def read_retrieval(span: ReadableSpan, attrs: Attrs, limits: CaptureLimits, notes: set[str]) -> RetrievalReading:
    groups = indexed(attrs, DOCUMENTS_PREFIX)
    if not groups:
        notes.add("no_documents")
    if len(groups) > limits.max_documents:
        notes.add("too_many_documents")
        groups = groups[: limits.max_documents]
    documents: list[Document] = []
    for group in groups:
        content = group.get("document.content")
        if not isinstance(content, str):
            notes.add("wrong_attribute_type" if content is not None else "document_without_content")
            continue
        documents.append(
            Document(content=content, id=as_id(group.get("document.id")), score=as_number(group.get("document.score")))
        )
    return RetrievalReading(
        convention="openinference",
        retriever=span.name or "",
        documents=documents,
        query=input_query(attrs, limits, notes),
    )


def _message_text(group: dict[str, Any]) -> str | None:
    """`message.content`, or the text parts of `message.contents.{j}.message_content.*`."""
    text = content_text(group.get("message.content"))
    if text is not None:
        return text
    parts = indexed(group, "message.contents.")
    texts = [
        part["message_content.text"]
        for part in parts
        if isinstance(part.get("message_content.text"), str)
        and part.get("message_content.type", "text") == "text"
    ]
    return "".join(texts) if texts else None


def user_message(attrs: Attrs) -> str | None:
    last: str | None = None
    for group in indexed(attrs, INPUT_MESSAGES_PREFIX):
        if role_name(group.get("message.role", "")) == "user":
            text = as_text(_message_text(group))
            if text is not None:
                last = text
    return last


def user_turns(attrs: Attrs) -> int:
    return sum(
        1 for group in indexed(attrs, INPUT_MESSAGES_PREFIX)
        if role_name(group.get("message.role", "")) == "user" and as_text(_message_text(group)) is not None
    )


def read_response(span: ReadableSpan, attrs: Attrs, limits: CaptureLimits, notes: set[str]) -> str:
    """The first assistant text; else an answer given as tool-call arguments; else `output.value`."""
    response: str | None = None
    messages = indexed(attrs, OUTPUT_MESSAGES_PREFIX)
    for group in messages:
        if role_name(group.get("message.role", "assistant")) in ("assistant", "ai", "model"):
            response = as_text(_message_text(group))
            if response is not None:
                break
    if response is None:
        calls = (call.get(TOOL_CALL_ARGUMENTS) for group in messages for call in indexed(group, TOOL_CALLS_PREFIX))
        response = tool_call_answer(calls, limits)
    if response is None:
        value = attrs.get(OUTPUT_VALUE)
        if isinstance(value, str):
            response = response_from(maybe_json(value, limits))
        elif value is not None:
            notes.add("wrong_attribute_type")
    return response or ""
