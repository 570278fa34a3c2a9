"""Finding the JSON object in a model's reply: bare, fenced or wrapped in prose, after a reasoning
model's thinking, with trailing commas forgiven, or cut off at the token limit. A string-aware scanner
(`_scan`) underlies the comma filter, the top-level object finder and the cut reader."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
# Reasoning models (DeepSeek-R1, Qwen3, ...) served without a reasoning parser think in the reply itself.
_THINK_OPEN = re.compile(r"<(?:think|thinking|reasoning)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(?:think|thinking|reasoning)>", re.IGNORECASE)


class RepeatedKey(ValueError):
    """A JSON object names a key twice: which value the judge meant cannot be told, so neither is read."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise RepeatedKey(f"the reply gives {key!r} twice; give each key once")
        found[key] = value
    return found


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)


def _decode(text: str) -> Any:
    """`text` as JSON; nesting deeper than the interpreter's recursion limit (a model looping on "[")
    is a decode error like any other, not a RecursionError."""
    try:
        return _DECODER.decode(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, 0) from None


def without_reasoning(text: str) -> str:
    """The reply without a reasoning model's thinking: what follows the last closing tag (a chat template
    may have sent the opening one itself); a block never closed leaves nothing, as its drafts are not
    the answer."""
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    opened = _THINK_OPEN.search(text)
    return text[: opened.start()] if opened else text


def _scan(text: str, start: int = 0) -> Iterator[tuple[int, str, bool]]:
    """Each character of `text` from `start`, with whether it belongs to a JSON string (its quotes too)."""
    in_string = escaped = False
    for pos in range(start, len(text)):
        char = text[pos]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        else:
            yield pos, char, False
            continue
        yield pos, char, True


def _without_trailing_commas(text: str) -> str:
    """The text with every comma that directly precedes a closing bracket dropped (outside strings)."""
    out: list[str] = []
    pending = ""  # a comma and the blanks after it, held until the next character says whether it stays
    for _, char, quoted in _scan(text):
        if pending and not quoted and char.isspace():
            pending += char
            continue
        if pending:
            out.append(pending[1:] if not quoted and char in "}]" else pending)
            pending = ""
        if not quoted and char == ",":
            pending = char
            continue
        out.append(char)
    return "".join(out) + pending


def _objects(text: str) -> list[Any]:
    """Every top-level {...} of `text` that is a JSON object, in order: prose around and between them
    is skipped, and so is what is nested in a span that is not JSON (a cut answer's inner verdict is
    not the answer)."""
    found: list[Any] = []
    start = text.find("{")
    while start >= 0:
        depth, end = 0, None
        for pos, char, quoted in _scan(text, start):
            if quoted or char not in "{}":
                continue
            depth += 1 if char == "{" else -1
            if depth == 0:
                end = pos + 1
                break
        if end is None:
            return found  # never closed: nothing after it is at the top level
        with contextlib.suppress(json.JSONDecodeError):
            found.append(_decode(text[start:end]))
        start = text.find("{", end)
    return found


def _as_written_then_forgiven(text: str) -> Iterator[str]:
    """The reply, then (only when that did not parse: it costs a pass in Python) without trailing commas."""
    yield text
    yield _without_trailing_commas(text)


def parse_json(text: str) -> Any:
    """The JSON object in a reply: bare, in a ```json fence, or in prose (the last object when there are
    several: a model that corrects itself ends with the correction). Trailing commas are forgiven; a
    key given twice is not (`RepeatedKey`)."""
    text = text.strip().lstrip("\ufeff")
    error: json.JSONDecodeError | None = None
    for source in _as_written_then_forgiven(text):
        candidates = [source, *(m.group(1).strip() for m in _FENCE.finditer(source))]
        for candidate in candidates:
            try:
                return _decode(candidate)
            except json.JSONDecodeError as exc:
                error = error or exc
        objects = _objects(source)
        if objects:
            return objects[-1]
    raise ValueError(f"the reply is not JSON ({error}); reply with a JSON object only")


def parse_cut_json(text: str) -> Any:
    """The complete part of a JSON object cut off mid-way (an answer that hit `max_tokens`): the text up
    to the last value that closed, with the objects still open closed. An array still open is never
    closed: a list cut short (the claims, the missing items) is not the list, so the reading ends
    before it. Raises ValueError when nothing complete is left."""
    start = text.find("{")
    if start < 0:
        raise ValueError("the reply has no JSON object")
    stack: list[str] = []
    closes: list[tuple[int, str]] = []  # (end of a closed value, the closers still owed there)
    for pos, char, quoted in _scan(text, start):
        if quoted:
            continue
        if char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]":
            if not stack:
                break
            stack.pop()
            closes.append((pos + 1, "".join(reversed(stack))))
            if not stack:
                break
    whole_lists = [(end, closers) for end, closers in closes if "]" not in closers]
    for end, closers in reversed(whole_lists[-50:]):
        try:
            return _decode(text[start:end] + closers)
        except json.JSONDecodeError:
            continue
    raise ValueError("the reply is cut off before any complete JSON value")
