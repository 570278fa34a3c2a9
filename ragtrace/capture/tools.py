"""Tool calls that are retrievals: an agent's search tool, whichever convention recorded it.

Four conventions record a tool call: a GenAI `execute_tool` span (`gen_ai.tool.name`,
`gen_ai.tool.call.arguments` / `.result`, on the span or on one of its events), an OpenInference `TOOL`
span (`tool.name`, `input.value` / `output.value`), an OpenLLMetry `tool` span (`traceloop.entity.name`,
`traceloop.entity.input` / `.output`), a Haystack agent's `haystack.agent.step.tool` span (`haystack.tool.name`,
`haystack.agent.step.tool.input` / `.output`). A call is a retrieval when

- the app named the tool in `CaptureRules.retrieval_tools` (its plain-text result is split into documents
  at `tool_separator`), or
- its result is unambiguously documents: a list (JSON, or a Python literal as some instrumentors write it)
  of strings, or of objects with a text field (`content`, `text`, `page_content`, `document`, or a
  framework's serialized document), possibly inside a tool message or under a `documents` / `results` key.

Anything else (a number, a sentence, an agent handoff, chat messages, MCP-style content parts) is not,
unless named. `is_retrieval` is the constant-time test the hot path runs; `read` parses at assembly time.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace.capture import genai, haystack, openinference, openllmetry
from ragtrace.capture.rules import CaptureRules
from ragtrace.capture.values import (
    Attrs,
    CaptureLimits,
    RetrievalReading,
    Skip,
    attribute_or_event,
    maybe_json,
    plain,
    query_from,
)

GENAI_OPERATION = "execute_tool"
OPENINFERENCE_KIND = "TOOL"
OPENLLMETRY_KIND = "tool"
GENAI_NAME = "gen_ai.tool.name"
GENAI_ARGUMENTS = "gen_ai.tool.call.arguments"
GENAI_RESULT = "gen_ai.tool.call.result"
OPENINFERENCE_NAME = "tool.name"
# How far into a result the hot-path test looks (the same bound as OpenLLMetry's sniff).
SNIFF_CHARS = openllmetry.SNIFF_CHARS
_TEXT_KEYS = ("content", "text", "page_content", "document")
_QUOTED_TEXT_KEYS = tuple(f"{key}{quote}" for key in ("content", "text", "document") for quote in "\"'")
_CONTAINER_KEYS = ("documents", "docs", "results", "result", "output", "outputs", "raw_output", "items", "hits",
                   "chunks", "nodes", "contexts", "sources", "source_nodes")
# An object result holding a list under a container key (`{"documents": [{...`, LlamaIndex's ToolOutput
# `"raw_output": ["...`), looked for within the first CONTAINER_SNIFF_CHARS: such keys may follow a long field.
_CONTAINER = re.compile("[\"'](?:" + "|".join(_CONTAINER_KEYS) + r""")["']\s*:\s*\[\s*["'{\[]""")
CONTAINER_SNIFF_CHARS = 65_536
# A list of model content parts (`[{"type": "text", "text": "42"}]`, what MCP tools return) is a reply.
_CONTENT_PARTS = re.compile(r"""\[\s*\{\s*["']type["']\s*:\s*["'](?:text|image|image_url|audio|resource)["']""")
# A tool message wraps the result the model saw (LangChain's ToolMessage, OpenAI tool outputs).
_MESSAGE_KEYS = ("tool_call_id", "call_id")
_CONTENT_PART_TYPES = frozenset({"text", "image", "image_url", "audio", "resource", "input_text", "output_text"})


@dataclass(frozen=True)
class ToolCall:
    """A tool call as recorded: its name, and its raw arguments and result (None when not recorded)."""

    name: str
    arguments: Any
    result: Any


def convention_of(shape: str) -> str:
    return shape.removesuffix("_tool")


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _name(span: ReadableSpan, attrs: Attrs, key: str) -> str:
    name = _text(attrs.get(key))
    if not name:
        name = (span.name or "").removeprefix(f"{GENAI_OPERATION} ")
    return name


# Where each convention records a tool call's name, arguments and result.
_NAME_KEYS = {"genai": GENAI_NAME, "openinference": OPENINFERENCE_NAME, "haystack": haystack.TOOL_NAME}
_ARGUMENT_KEYS = {"openinference": openinference.INPUT_VALUE, "haystack": haystack.TOOL_INPUT}
_RESULT_KEYS = {"genai": GENAI_RESULT, "openinference": openinference.OUTPUT_VALUE, "haystack": haystack.TOOL_OUTPUT}


def tool_name(span: ReadableSpan, attrs: Attrs, convention: str) -> str:
    return _name(span, attrs, _NAME_KEYS.get(convention, openllmetry.ENTITY_NAME))


def tool_call(span: ReadableSpan, attrs: Attrs, convention: str, notes: set[str]) -> ToolCall:
    if convention == "genai":
        return ToolCall(tool_name(span, attrs, convention), attribute_or_event(span, attrs, GENAI_ARGUMENTS, notes),
                        attribute_or_event(span, attrs, GENAI_RESULT, notes))
    return ToolCall(tool_name(span, attrs, convention),
                    attrs.get(_ARGUMENT_KEYS.get(convention, openllmetry.ENTITY_INPUT)),
                    attrs.get(_RESULT_KEYS.get(convention, openllmetry.ENTITY_OUTPUT)))


def _looks_like_documents(result: Any) -> bool:
    """Bounded test of a raw result: a list opening on a string, or on an object with a text key; or a
    framework's serialized document (`page_content`) near the start."""
    if isinstance(result, list | tuple):
        return bool(result) and all(isinstance(item, str) for item in result[:20])
    if not isinstance(result, str):
        return False
    head = result[:SNIFF_CHARS].lstrip()
    if head.startswith("["):
        rest = head[1:].lstrip()
        if rest[:1] in ("\"", "'"):
            return True
        if rest.startswith("{") and any(key in head for key in _QUOTED_TEXT_KEYS):
            return _CONTENT_PARTS.match(head) is None
    elif head.startswith("{") and _CONTAINER.search(result, 0, CONTAINER_SNIFF_CHARS):
        return True
    return "page_content" in head


def is_retrieval(span: ReadableSpan, attrs: Attrs, convention: str, rules: CaptureRules) -> bool:
    """Constant-time on the hot path: the tool is named a retrieval, or (not excluded) its result opens
    like a list of documents. `read` checks the whole result."""
    named = rules.tool_named(tool_name(span, attrs, convention))
    if named is not None:
        return named
    key = _RESULT_KEYS.get(convention, openllmetry.ENTITY_OUTPUT)
    result = attrs.get(key)
    if result is None and convention == "genai":
        result = attribute_or_event(span, attrs, key, set(), max_events=4)
    return _looks_like_documents(result)


def excluded(span: ReadableSpan, attrs: Attrs, convention: str, rules: CaptureRules) -> bool:
    """The user said this tool is no retrieval (`!name` in retrieval_tools)."""
    return rules.tool_named(tool_name(span, attrs, convention)) is False


def _parsed(value: Any, limits: CaptureLimits) -> Any:
    """A raw result as plain data: structured values as they are, JSON parsed, else a Python literal
    (instrumentors that record `str(result)`); a string that is neither stays a string."""
    if not isinstance(value, str):
        return plain(value)
    parsed = maybe_json(value, limits)
    if parsed is value and value.lstrip()[:1] in ("[", "{") and len(value) <= limits.max_json_chars:
        try:
            parsed = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            parsed = value
    return parsed


def _unwrapped(value: Any, limits: CaptureLimits, depth: int = 0) -> Any:
    """The result inside a tool message (`{content, tool_call_id}`, LangChain's serialized ToolMessage)."""
    if depth > 3 or not isinstance(value, dict):
        return value
    kwargs = value.get("kwargs")
    if isinstance(kwargs, dict) and any(key in kwargs for key in _MESSAGE_KEYS):  # LangChain to_json()
        value = kwargs
    if any(key in value for key in _MESSAGE_KEYS) and "content" in value:
        content = value["content"]
        return _unwrapped(_parsed(content, limits), limits, depth + 1) if isinstance(content, str) else content
    return value


def _is_document(item: Any, limits: CaptureLimits, named: bool) -> bool:
    if isinstance(item, str):
        return True
    if not isinstance(item, dict) or "role" in item:  # a chat message is no document
        return False
    kind = item.get("type")
    if not named and isinstance(kind, str) and kind in _CONTENT_PART_TYPES:  # MCP / model content parts: a reply
        return False
    if any(isinstance(item.get(key), str) for key in _TEXT_KEYS):
        return True
    return openllmetry.document_fields(item, limits) is not None


def _document_list(value: Any, limits: CaptureLimits, named: bool) -> list[Any] | None:
    """The list of documents a result is, or holds under a container key; None when it is something else."""
    if isinstance(value, dict):
        for key in _CONTAINER_KEYS:
            found = value.get(key)
            if isinstance(found, list) and found:
                return _document_list(found, limits, named)
        return None
    if not isinstance(value, list) or (not value and not named):
        return None
    head = value[: limits.max_documents + 1]
    return value if all(_is_document(item, limits, named) for item in head) else None


def read(span: ReadableSpan, attrs: Attrs, shape: str, rules: CaptureRules, limits: CaptureLimits,
         notes: set[str]) -> RetrievalReading:
    """The documents and query of a tool call taken as a retrieval; raises Skip when its result is not
    documents after all (`tool_result_not_documents`) or was not recorded (`tool_result_not_recorded`)."""
    convention = convention_of(shape)
    call = tool_call(span, attrs, convention, notes)
    named = rules.tool_named(call.name) is True
    if call.result is None:
        raise Skip("tool_result_not_recorded")
    value = _unwrapped(_parsed(call.result, limits), limits)
    items = _document_list(value, limits, named)
    if items is None and named and isinstance(value, str):
        items = rules.split(value)
    if items is None:  # a framework's serialized documents deeper inside (LangChain, LlamaIndex, Haystack)
        items = openllmetry.find_documents(value, limits, strings_ok=False)
    if items is None:
        raise Skip("tool_result_not_documents")
    documents = genai.documents_from(items, limits, notes) if items else []
    how = "named in retrieval_tools" if named else "its result is a list of documents"
    return RetrievalReading(
        convention=convention,
        retriever=call.name,
        documents=documents,
        query=_query(call.arguments, limits),
        explicit=False,
        taken_because=f"tool {call.name!r}: {how}",
    )


def _query(arguments: Any, limits: CaptureLimits) -> str | None:
    """The search text among a tool's arguments: a query-named argument, else the only text argument."""
    if arguments is None:
        return None
    value = _parsed(arguments, limits)
    found = query_from(value)
    if found is None and isinstance(value, dict):
        texts = [v for v in value.values() if isinstance(v, str) and v.strip()]
        found = texts[0] if len(texts) == 1 else None
    return found


def describe(span: ReadableSpan, attrs: Attrs, convention: str, rules: CaptureRules) -> str:
    """Why a tool span is not a retrieval, in words."""
    name = tool_name(span, attrs, convention)
    if rules.tool_named(name) is False:
        return f"tool {name!r} ({convention}): not a retrieval (excluded in retrieval_tools)"
    return (f"tool {name!r} ({convention}): not a retrieval (its result is not a list of documents; "
            "name it in retrieval_tools if it searches)")
