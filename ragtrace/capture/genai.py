"""OTel GenAI semantic conventions: `gen_ai.operation.name` retrieval and chat spans.

Also reads the older flattened `gen_ai.prompt.{i}` / `gen_ai.completion.{i}` attributes, which
OpenLLMetry and early GenAI instrumentations still write on LLM spans.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace._sdk import has_events
from ragtrace.capture import openllmetry
from ragtrace.capture.values import (
    FROM_EVENTS,
    MAX_CONTENT_EVENTS,
    Attrs,
    CaptureLimits,
    RetrievalReading,
    Skip,
    as_id,
    as_number,
    as_text,
    attribute_or_event,
    attrs_of,
    content_text,
    count_user_texts,
    first_assistant_text,
    indexed,
    last_user_text,
    maybe_json,
    messages_of,
    parse_json,
    plain,
    tool_call_answer,
)
from ragtrace.scoring import Document

OPERATION = "gen_ai.operation.name"
RETRIEVAL_OPERATIONS = frozenset({"retrieval", "retrieve"})
GENERATION_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
DOCUMENTS = "gen_ai.retrieval.documents"
QUERY = "gen_ai.retrieval.query.text"
QUERY_OLDER = "gen_ai.retrieval.query"  # written by some pre-release GenAI retrieval instrumentations
DATA_SOURCE = "gen_ai.data_source.id"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
# Where content goes when an instrumentation records it on an event rather than on the span.
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
CONTENT_KEYS = ("content", "text", "page_content", "document")


# Older GenAI conventions (and Semantic Kernel, OpenLIT, Azure AI Inference) record content as span events:
# the whole prompt / completion on one event, or one event per message.
PROMPT_EVENT, PROMPT_KEY = "gen_ai.content.prompt", "gen_ai.prompt"
COMPLETION_EVENT, COMPLETION_KEY = "gen_ai.content.completion", "gen_ai.completion"
MESSAGE_EVENTS = {
    "gen_ai.system.message": "system", "gen_ai.user.message": "user", "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
CHOICE_EVENT = "gen_ai.choice"


def _attribute(span: ReadableSpan, attrs: Attrs, key: str, notes: set[str] | None = None) -> Any:
    """The span attribute, else the same attribute on one of its events (the GenAI details event)."""
    return attribute_or_event(span, attrs, key, notes if notes is not None else set())


def _event_messages(value: Any, role: str, limits: CaptureLimits) -> list[Any]:
    """A prompt or completion event's value as messages: JSON messages (or choices), else one text."""
    parsed = maybe_json(value, limits) if isinstance(value, str) else plain(value)
    if isinstance(parsed, dict) and isinstance(parsed.get("choices"), list):
        parsed = [c.get("message") for c in parsed["choices"] if isinstance(c, dict)]
    if isinstance(parsed, dict) and "message" in parsed:
        parsed = [parsed["message"]]
    found = messages_of(parsed)
    if found:
        return found
    return [{"role": role, "content": parsed}] if isinstance(parsed, str) else []


def _message_event(name: str, event_attrs: Attrs, limits: CaptureLimits) -> dict[str, Any] | None:
    """One per-message event (`gen_ai.user.message`, `gen_ai.choice`) as a message dict."""
    if name == CHOICE_EVENT:
        message = event_attrs.get("message")
        parsed = maybe_json(message, limits) if isinstance(message, str) else plain(message)
        if isinstance(parsed, dict):
            return {"role": "assistant", **parsed}
        content = event_attrs.get("message.content", event_attrs.get("content"))
        return {"role": "assistant", "content": content} if content is not None else None
    content = event_attrs.get("content", event_attrs.get("gen_ai.event.content"))
    if isinstance(content, str):
        parsed = maybe_json(content, limits)
        if isinstance(parsed, dict) and "content" in parsed:  # a whole event body as JSON
            content = parsed["content"]
    role = event_attrs.get("role")
    return {"role": role if isinstance(role, str) else MESSAGE_EVENTS[name], "content": content}


def event_messages(span: ReadableSpan, output: bool, limits: CaptureLimits, notes: set[str]) -> list[Any]:
    """Messages a span recorded as events, input side or output side; notes that events were read."""
    messages: list[Any] = []
    for event in itertools.islice(span.events or (), MAX_CONTENT_EVENTS):
        name = event.name
        if output and name == COMPLETION_EVENT:
            messages.extend(_event_messages(attrs_of(event).get(COMPLETION_KEY), "assistant", limits))
        elif (output and name == CHOICE_EVENT) or (not output and name in MESSAGE_EVENTS):
            found = _message_event(name, attrs_of(event), limits)
            if found is not None:
                messages.append(found)
        elif not output and name == PROMPT_EVENT:
            messages.extend(_event_messages(attrs_of(event).get(PROMPT_KEY), "user", limits))
    if messages:
        notes.add(FROM_EVENTS)
    return messages


def documents_from(items: list[Any], limits: CaptureLimits, notes: set[str]) -> list[Document]:
    """`{id, score, content}` objects (or bare strings, or a framework's serialized documents) to Documents,
    rank order kept, capped."""
    if len(items) > limits.max_documents:
        notes.add("too_many_documents")
        items = items[: limits.max_documents]
    documents: list[Document] = []
    for item in items:
        if isinstance(item, str):
            documents.append(Document(content=item))
            continue
        if not isinstance(item, dict):
            notes.add("invalid_document")
            continue
        content = None
        for key in CONTENT_KEYS:
            value = item.get(key)
            if isinstance(value, str):
                content = value
                break
        if content is None:  # a framework's own serialized document (LlamaIndex NodeWithScore / TextNode)
            native = openllmetry.document_fields(item, limits)
            if native is not None:
                documents.append(Document(content=native["page_content"], id=as_id(native.get("id")),
                                          score=as_number(native.get("score"))))
                continue
            notes.add("document_without_content")
            continue
        doc_id = as_id(item.get("id", item.get("id_")))  # `id_`: a LlamaIndex TextNode
        documents.append(Document(content=content, id=doc_id, score=as_number(item.get("score"))))
    return documents


def read_retrieval(span: ReadableSpan, attrs: Attrs, limits: CaptureLimits, notes: set[str]) -> RetrievalReading:
    raw = _attribute(span, attrs, DOCUMENTS, notes)
    items: list[Any] = []
    if raw is None:
        notes.add("no_documents")
    elif isinstance(raw, str):
        parsed = parse_json(raw, limits, "invalid_documents_json")
        if isinstance(parsed, dict):  # tolerate {"documents": [...]}
            parsed = parsed.get("documents")
        if not isinstance(parsed, list):
            raise Skip("invalid_documents_json")
        items = parsed
    elif isinstance(raw, tuple | list):  # structured (AnyValue) documents, or one JSON string per document
        for entry in raw[: limits.max_documents + 1]:
            if isinstance(entry, str) and entry.lstrip().startswith("{"):
                try:
                    items.append(parse_json(entry, limits, "invalid_documents_json"))
                    continue
                except Skip as skip:
                    notes.add(skip.reason)
                    continue
            items.append(plain(entry))  # a mapping, or a plain string document
        if len(raw) > limits.max_documents:
            notes.add("too_many_documents")
    else:
        raise Skip("wrong_attribute_type")
    query = _attribute(span, attrs, QUERY, notes)
    if query is None:
        query = attrs.get(QUERY_OLDER)
    if query is not None and not isinstance(query, str):
        notes.add("wrong_attribute_type")
    source = attrs.get(DATA_SOURCE)
    return RetrievalReading(
        convention="genai",
        retriever=source if isinstance(source, str) and source else span.name or "",
        documents=documents_from(items, limits, notes),
        query=as_text(query),
    )


def _messages(span: ReadableSpan, attrs: Attrs, key: str, limits: CaptureLimits, notes: set[str]) -> list[Any]:
    raw = _attribute(span, attrs, key, notes)
    if raw is None:
        if not has_events(span) or indexed(attrs, "gen_ai.prompt." if key == INPUT_MESSAGES else "gen_ai.completion."):
            return []
        return event_messages(span, key == OUTPUT_MESSAGES, limits, notes)
    if isinstance(raw, tuple | list):  # structured (AnyValue) messages
        return messages_of(plain(raw))
    try:
        return messages_of(parse_json(raw, limits, "invalid_messages_json"))
    except Skip as skip:
        notes.add(skip.reason)
        return []


def _flattened(attrs: Attrs, prefix: str) -> list[dict[str, Any]]:
    """Older `gen_ai.prompt.{i}.role/.content` attributes as message dicts."""
    return [
        {"role": group.get("role", "user" if prefix.endswith("prompt.") else "assistant"),
         "content": group.get("content")}
        for group in indexed(attrs, prefix)
    ]


def user_message(span: ReadableSpan, attrs: Attrs, limits: CaptureLimits, notes: set[str]) -> str | None:
    found = last_user_text(_messages(span, attrs, INPUT_MESSAGES, limits, notes))
    if found is None:
        found = last_user_text(_flattened(attrs, "gen_ai.prompt."))
    return found


def user_turns(span: ReadableSpan, attrs: Attrs, limits: CaptureLimits, notes: set[str]) -> int:
    messages = _messages(span, attrs, INPUT_MESSAGES, limits, notes) or _flattened(attrs, "gen_ai.prompt.")
    return count_user_texts(messages)


def _tool_call_arguments(messages: list[Any], completions: list[dict[str, Any]]) -> Iterator[Any]:
    """Arguments of the tool calls among output messages: `tool_call` parts, or the older flattened
    `gen_ai.completion.{i}.tool_calls.{j}.arguments`."""
    for message in messages:
        parts = message.get("parts") if isinstance(message, dict) else None
        for part in parts if isinstance(parts, list) else ():
            if isinstance(part, dict) and part.get("type") == "tool_call":
                yield part.get("arguments")
    for completion in completions:
        for call in indexed(completion, "tool_calls."):
            yield call.get("arguments")


def read_response(span: ReadableSpan, attrs: Attrs, limits: CaptureLimits, notes: set[str]) -> str:
    """The first assistant text; else an answer given as tool-call arguments (structured output)."""
    messages = _messages(span, attrs, OUTPUT_MESSAGES, limits, notes)
    response = as_text(first_assistant_text(messages))
    completions = indexed(attrs, "gen_ai.completion.")
    if response is None:
        for group in completions:
            response = as_text(content_text(group.get("content")))
            if response is not None:
                break
    if response is None:
        response = tool_call_answer(_tool_call_arguments(messages, completions), limits)
    return response or ""
