"""The agent-run shape of the seed API, turned into a RagSample.

`{"input": {"inputMessages": [...]}, "output": [{"role": "assistant", "content": ...}], "groundTruth": ...}`
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def message_text(message: Any) -> str:
    """Text of a chat message whose content is a string or a list of parts."""
    if not isinstance(message, Mapping):
        return message if isinstance(message, str) else ""
    content = message.get("content", "")
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text", part.get("content")), str):
                parts.append(part.get("text", part.get("content")))
        return "\n".join(parts)
    return ""


def _messages(value: Any) -> list[Any]:
    if isinstance(value, Mapping):
        value = value.get("inputMessages", value.get("messages", []))
    return list(value) if isinstance(value, Sequence) and not isinstance(value, str) else []


def query_of(run_input: Any) -> str:
    if isinstance(run_input, str):
        return run_input
    users = [m for m in _messages(run_input) if isinstance(m, Mapping) and m.get("role", "user") == "user"]
    return message_text(users[-1]) if users else ""


def response_of(run_output: Any) -> str:
    if isinstance(run_output, str):
        return run_output
    replies = [m for m in _messages(run_output) if isinstance(m, Mapping) and m.get("role") == "assistant"]
    return "\n".join(t for t in (message_text(m) for m in replies) if t)
