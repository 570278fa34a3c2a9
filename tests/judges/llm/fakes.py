"""A scripted `Transport` for unit tests of the judge's pieces: no server, no litellm client."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from ragtrace.judges.llm.transport import Answer, Call

_ENDPOINTS = itertools.count()


def fresh_api_base() -> str:
    """An endpoint no other test used: the structured-output mode learnt is remembered per endpoint."""
    return f"http://127.0.0.1:9/fake-{next(_ENDPOINTS)}/v1"


def reply(content: str | dict[str, Any], finish: str = "stop", tokens: int = 10) -> Answer:
    text = content if isinstance(content, str) else json.dumps(content)
    return Answer(text, finish, tokens, tokens, None)


def useful(*indices: int) -> dict[str, Any]:
    """A usefulness answer for the context `indices`."""
    return {"contexts": {str(i): {"reason": f"context {i}", "useful": i % 2 == 0} for i in indices}}


@dataclass
class ScriptedTransport:
    """Answers (or raises) from `script` in order, and keeps every `Call` it was given."""

    script: list[Answer | BaseException]
    calls: list[Call] = field(default_factory=list)

    async def complete(self, call: Call) -> Answer:
        self.calls.append(call)
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step


class StatusError(Exception):
    """An error as an OpenAI-compatible client raises it: a message and an HTTP status."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status_code = status
        self.litellm_response_headers = headers
