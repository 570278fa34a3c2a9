"""Defensive reading of span attribute values: text, JSON, numbers, flattened lists, chat messages.

Everything in a span is untrusted: any key may hold any type, any JSON may be broken or huge, any
string may hold lone surrogates. Helpers here return None (or raise `Skip` with a counted reason)
instead of letting a bad value escape as an exception.
"""

from __future__ import annotations

import html
import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ragtrace import _checks as checks
from ragtrace._sdk import stored_attributes
from ragtrace.scoring import Document

Attrs = Mapping[str, Any]
_NO_ATTRS: Attrs = {}
_FAST_MAPPINGS = (MappingProxyType, dict)
_MAX_DEPTH = 8


@dataclass(frozen=True)
class CaptureLimits:
    """Caps that keep one sample small whatever a span holds; every cut is counted, never silent."""

    max_documents: int = 100
    max_context_chars: int = 8_000
    max_query_chars: int = 4_000
    max_response_chars: int = 16_000
    # JSON attributes longer than this are not parsed at all: a bound on the worker's time per span.
    max_json_chars: int = 4_000_000

    def __post_init__(self) -> None:
        checks.counts(self, *vars(self), minimum=0)


DEFAULT_LIMITS = CaptureLimits()


class Skip(Exception):
    """Raised by a reader to pass a span over; `reason` goes to the decision counter."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class RetrievalReading:
    """What one retrieval span says on its own, before pairing."""

    convention: str
    retriever: str
    documents: list[Document] = field(default_factory=list)
    query: str | None = None
    # Heuristically recognised spans (vector-DB clients, OpenLLMetry tasks) with no documents are dropped.
    explicit: bool = True
    distances: list[float | None] = field(default_factory=list)
    # Why a span that is not a retrieval by its convention was taken as one (a tool call), in words.
    taken_because: str | None = None


def attrs_of(obj: Any) -> Attrs:
    """A span's or event's attributes as a mapping; an empty one when missing or odd.

    For the SDK's own spans and events this is the dict inside their `BoundedAttributes`: an ended
    span's attributes no longer change, and a plain dict answers a missing key without the
    KeyError round trip that `Mapping.get` on the public proxy costs (readers probe many absent keys).
    """
    stored = stored_attributes(obj)
    if stored is not None:
        return stored
    value = getattr(obj, "attributes", None)
    if type(value) in _FAST_MAPPINGS:  # skip the slower ABC isinstance check for what the SDK returns
        return value  # type: ignore[return-value]
    return value if isinstance(value, Mapping) else _NO_ATTRS


# A note, not a count: some content of the sample was read from span events rather than attributes.
FROM_EVENTS = "content_from_events"
# Events looked at per span for content: an instrumentation writes a few (one per message), not thousands.
MAX_CONTENT_EVENTS = 256


def attribute_or_event(obj: Any, attrs: Attrs, key: str, notes: set[str], max_events: int = MAX_CONTENT_EVENTS) -> Any:
    """The span attribute `key`, else the same attribute on one of the span's first events (GenAI
    instrumentations may record content on an event, e.g. `gen_ai.client.inference.operation.details`)."""
    value = attrs.get(key)
    if value is not None:
        return value
    for event in itertools.islice(getattr(obj, "events", None) or (), max_events):
        value = attrs_of(event).get(key)
        if value is not None:
            notes.add(FROM_EVENTS)
            return value
    return None


def clean(text: str) -> str:
    """Replace lone surrogates and other unencodable code points, so pydantic and JSON accept the text."""
    if text.isascii():  # a flag CPython keeps on every str: no copy to encode for the usual text
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def cut(text: str, limit: int, notes: set[str], reason: str) -> str:
    """Clean and cap `text` at `limit` characters, noting `reason` when something was cut."""
    if limit >= 0 and len(text) > limit:
        notes.add(reason)
        text = text[:limit]
    return clean(text)


def as_text(value: Any) -> str | None:
    """A non-blank string, or None."""
    if isinstance(value, str) and value.strip():
        return value
    return None


def as_number(value: Any) -> float | None:
    """A finite float from a number or numeric string; bools and NaN are not scores."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):  # a tuple: faster than a union type on 3.11
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def as_id(value: Any) -> str | None:
    if type(value) is str:
        return clean(value[:512])
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return str(value)[:512]
    return None


def plain(value: Any, depth: int = 0) -> Any:
    """A structured (AnyValue) attribute as plain lists and dicts, like parsed JSON; too deep becomes None."""
    if depth > 2 * _MAX_DEPTH:
        return None
    if isinstance(value, Mapping):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v, depth + 1) for v in value]
    return value


def parse_json(value: Any, limits: CaptureLimits, reason: str) -> Any:
    """Parse a JSON string attribute; raise Skip(reason) when it is not valid JSON or too big to parse."""
    if not isinstance(value, str):
        raise Skip("wrong_attribute_type")
    if len(value) > limits.max_json_chars:
        raise Skip("attribute_too_large")
    try:
        return json.loads(value)
    except (ValueError, RecursionError) as exc:
        raise Skip(reason) from exc


def maybe_json(value: str, limits: CaptureLimits) -> Any:
    """Parse `value` when it looks like a JSON object or list; otherwise (or when broken) return it as is."""
    head = value.lstrip()[:1]
    if head not in ("{", "[") or len(value) > limits.max_json_chars:
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def indexed(attrs: Attrs, prefix: str) -> list[dict[str, Any]]:
    """Group flattened list attributes (`prefix{i}.rest`) into one dict per index, in index order.

    Scans keys rather than probing 0, 1, 2... so a gap or an out-of-order index loses nothing.
    """
    groups: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if not isinstance(key, str) or not key.startswith(prefix):
            continue
        index, dot, rest = key[len(prefix) :].partition(".")
        if not dot or not index.isdigit() or len(index) > 9:
            continue
        groups.setdefault(int(index), {})[rest] = value
    return [groups[i] for i in sorted(groups)]


def content_text(content: Any, depth: int = 0) -> str | None:
    """Text of a message content: a string, or a list of parts ({type: text, content|text: ...})."""
    if isinstance(content, str):
        return content
    if depth > 2:
        return None
    if isinstance(content, dict):
        if content.get("type", "text") not in ("text", "output_text", "input_text"):
            return None
        for key in ("content", "text", "value"):
            text = content_text(content.get(key), depth + 1)
            if text is not None:
                return text
        return None
    if isinstance(content, list):
        texts = [t for t in (content_text(part, depth + 1) for part in content[:1000]) if t is not None]
        return "".join(texts) if texts else None
    return None


def message_text(message: Any) -> str | None:
    """Text of one chat message: GenAI `parts`, or an OpenAI-style `content`."""
    if not isinstance(message, dict):
        return None
    if "parts" in message:
        return content_text(message["parts"])
    if "content" in message:
        return content_text(message["content"])
    return content_text(message.get("text"))


def messages_of(parsed: Any) -> list[Any]:
    """The message list of a parsed messages attribute (a list, or an object holding `messages`)."""
    if isinstance(parsed, dict):
        parsed = parsed.get("messages")
    return parsed if isinstance(parsed, list) else []


def role_name(role: Any) -> str:
    """A message role in lower case, without an enum's class prefix (Haystack writes `ChatRole.USER`)."""
    return str(role).rpartition(".")[2].lower()


def last_user_text(messages: Iterable[Any]) -> str | None:
    last: str | None = None
    for message in messages:
        if isinstance(message, dict) and role_name(message.get("role", "")) in ("user", "human"):
            text = as_text(message_text(message))
            if text is not None:
                last = text
    return last


def count_user_texts(messages: Iterable[Any]) -> int:
    return sum(
        1 for message in messages
        if isinstance(message, dict) and role_name(message.get("role", "")) in ("user", "human")
        and as_text(message_text(message)) is not None
    )


def first_assistant_text(messages: Iterable[Any]) -> str | None:
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = role_name(message.get("role", "assistant"))
        if role in ("assistant", "ai", "model", "bot"):
            text = message_text(message)
            if text is not None:
                return text
    return None


# Keys under which JSON inputs carry the user's question, best first. After them, any other key that
# names a query or question is tried: frameworks pass query objects under their parameter's name
# (LlamaIndex's `query_bundle` / `str_or_query_bundle` hold a QueryBundle whose text is `query_str`).
_QUERY_KEYS = (
    "query", "question", "query_str", "query_text", "input", "q", "text", "prompt", "user_input", "task",
    "message", "messages", "inputs", "args", "kwargs",
)
_QUERY_WORDS = ("query", "question")


def query_from(value: Any, depth: int = 0) -> str | None:
    """Find the user's question in a (parsed) input value: a string, or a JSON object holding one."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(value, str):
        return as_text(value)
    if isinstance(value, dict):
        for key in _QUERY_KEYS:
            if key not in value:
                continue
            found = (
                last_user_text(messages_of(value[key])) if key == "messages" else query_from(value[key], depth + 1)
            )
            if found is not None:
                return found
        for key, item in list(value.items())[:50]:
            if isinstance(key, str) and key not in _QUERY_KEYS and any(w in key.lower() for w in _QUERY_WORDS):
                found = query_from(item, depth + 1)
                if found is not None:
                    return found
        return None
    if isinstance(value, list):
        if value and all(isinstance(m, dict) and "role" in m for m in value[:20]):
            return last_user_text(value)
        for item in value[:20]:
            found = query_from(item, depth + 1)
            if found is not None:
                return found
    return None


def response_from(value: Any, depth: int = 0) -> str | None:
    """Find a model's answer in a (parsed) output value: a string, or a known response object shape."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        choices = value.get("choices")
        if isinstance(choices, list) and choices:
            first = choices[0]
            if isinstance(first, dict):
                found = message_text(first.get("message")) or as_text(first.get("text"))
                if found is not None:
                    return found
        generations = value.get("generations")  # LangChain LLMResult
        if isinstance(generations, list) and generations:
            found = response_from(generations[0], depth + 1)
            if found is not None:
                return found
        for key in ("content", "text", "output", "outputs", "answer", "result", "response", "message", "replies"):
            if key in value:
                found = response_from(value[key], depth + 1)
                if found is not None:
                    return found
        return None
    if isinstance(value, list) and value:
        if isinstance(value[0], dict) and ("role" in value[0] or "parts" in value[0]):
            return first_assistant_text(value)
        return response_from(value[0], depth + 1)
    return None


# Structured model output: the fields a framework asked the model to fill, each under a marker of its
# own. DSPy's ChatAdapter writes `[[ ## answer ## ]]` headers; its XMLAdapter and many prompts use tags.
_SECTION_HEADER = re.compile(r"^[ \t]*\[\[ ## (\w+) ## \]\][ \t]*$", re.MULTILINE)
_TAGGED_FIELD = re.compile(r"\s*<(\w+)>(.*?)</\1>\s*", re.DOTALL)
# Fields named for the answer, best first; fields that hold the model's working, which is no part of what
# the app was told. DSPy ends its sections with an empty `[[ ## completed ## ]]` marker.
_ANSWER_FIELDS = ("answer", "final_answer", "response", "output", "result", "text", "content")
_WORKING_FIELDS = frozenset({"reasoning", "rationale", "thinking", "thought", "thoughts", "scratchpad"})
_END_MARKER = "completed"


def _sections(text: str) -> dict[str, str] | None:
    """`[[ ## name ## ]]`-headed fields, when the text is nothing but such fields."""
    headers = list(_SECTION_HEADER.finditer(text))
    if not headers or text[: headers[0].start()].strip():
        return None
    ends = [h.start() for h in headers[1:]] + [len(text)]
    fields = {h.group(1): text[h.end() : end].strip() for h, end in zip(headers, ends, strict=True)}
    if not fields.get(_END_MARKER):
        fields.pop(_END_MARKER, None)
    return fields


def _tagged(text: str) -> dict[str, str] | None:
    """`<name>...</name>` fields, when the text is nothing but such fields."""
    fields: dict[str, str] = {}
    position = 0
    while position < len(text):
        match = _TAGGED_FIELD.match(text, position)
        if match is None or match.end() == position:
            return None
        fields.setdefault(match.group(1), html.unescape(match.group(2).strip()))  # XML escapes `<` and `&`
        position = match.end()
    return fields or None


def _named_answer(lowered: Mapping[str, Any]) -> str | None:
    for name in _ANSWER_FIELDS:
        found = as_text(lowered.get(name))
        if found is not None:
            return found
    return None


def _answer_field(fields: Mapping[str, Any], protocol: bool) -> str | None:
    """The answer among a structured output's fields: the field named for it; else, when the model's
    working is set apart (or the fields follow a framework's protocol), the other text fields in order;
    None when neither (a JSON document or HTML that is itself the answer)."""
    lowered = {str(k).lower(): v for k, v in fields.items()}
    found = _named_answer(lowered)
    if found is not None:
        return found
    if not protocol and _WORKING_FIELDS.isdisjoint(lowered):
        return None  # plain JSON data: the model's answer is the document itself
    rest = [v for k, v in lowered.items() if k not in _WORKING_FIELDS and as_text(v) is not None]
    return "\n\n".join(rest) if rest else None


def answer_text(text: str, limits: CaptureLimits) -> str:
    """What a model told the app, out of the structured output it wrote: the answer field of a JSON object,
    of `[[ ## field ## ]]` sections or of `<field>` tags, without its reasoning; any other text unchanged.

    Frameworks that ask for fields (DSPy, JSON mode, tagged prompts) parse the answer out of the completion
    and hand the app that, so the judge is given that too: a chain of thought quoting every context would
    otherwise read as a use of every context.
    """
    stripped = text.strip()
    found: str | None = None
    if stripped.startswith("{"):
        parsed = maybe_json(stripped, limits)
        if isinstance(parsed, dict):
            found = _answer_field(parsed, protocol=False)
    elif len(stripped) > limits.max_json_chars:  # the same bound on the worker's time as for JSON
        return text
    elif "[[ ## " in stripped and (sections := _sections(stripped)):  # a framework's own protocol
        found = _answer_field(sections, protocol=True)
    elif stripped.startswith("<") and (tags := _tagged(stripped)):  # tags may also be plain HTML
        found = _answer_field(tags, protocol=False)
    return found if found is not None else text


def tool_call_answer(arguments: Iterable[Any], limits: CaptureLimits) -> str | None:
    """The answer a model gave through a tool call (structured output: LangChain's `with_structured_output`,
    instructor, a forced `Answer` tool): the first call's argument named for the answer. Arguments are
    objects or JSON text. Calls without such an argument (an agent asking a search tool) give None."""
    for value in arguments:
        parsed = maybe_json(value, limits) if isinstance(value, str) else plain(value)
        if isinstance(parsed, dict):
            found = _named_answer({str(k).lower(): v for k, v in parsed.items()})
            if found is not None:
                return found
    return None


def text_leaves(value: Any, limits: CaptureLimits, out: list[str], budget: int = 10_000, depth: int = 0) -> None:
    """Append the strings inside `value` (JSON strings parsed, at most `budget` of them) to `out`:
    what a prompt or a message list says, whatever its nesting, for finding quoted texts in it."""
    if depth > 2 * _MAX_DEPTH or len(out) >= budget:
        return
    if isinstance(value, str):
        parsed = maybe_json(value, limits)
        if parsed is value:
            out.append(value)
        else:
            text_leaves(parsed, limits, out, budget, depth + 1)
    elif isinstance(value, Mapping):
        for item in list(value.values())[:1000]:
            text_leaves(item, limits, out, budget, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value[:1000]:
            text_leaves(item, limits, out, budget, depth + 1)
