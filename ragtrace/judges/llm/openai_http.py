"""`OpenAIHttpTransport`: an OpenAI-compatible chat endpoint spoken to over httpx, without litellm.

litellm's per-call cost (its request and response models, logging hooks, and a stream wrapper that does
work on every chunk) is most of the judge's CPU: 10 ms a call, 30 ms streamed, on a 2-core machine
where the judge's throughput is bound by CPU, not by the wire. An `openai/...` model is one POST of
JSON, so this transport sends it itself (2-3 ms a call, streamed or not, bench/judge_throughput.py) and
raises what `failures.classify` reads as it reads litellm's errors: a `status_code` and the response's
headers (Retry-After), httpx's timeout and connection errors. litellm still counts the tokens and
prices them (its offline map), and still routes every provider only it knows (`routing`).
"""

from __future__ import annotations

import asyncio
import json
import os
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import httpx

from ragtrace._state import PerProcessState, fresh_lock
from ragtrace.judges.llm.streaming import streams
from ragtrace.judges.llm.transport import REPEATED, Answer, Call, TokenCounter, text_of, with_usage

__all__ = ["BODY_OPTIONS", "EndpointError", "OpenAIHttpTransport"]

OPENAI_BASE = "https://api.openai.com/v1"
# litellm keyword arguments this transport honours: they go into the request body as they are.
BODY_OPTIONS = frozenset(
    {"seed", "top_p", "stop", "user", "presence_penalty", "frequency_penalty", "logit_bias", "extra_body",
     "extra_headers"}
)
_MISSING_KEY = (
    "The api_key client option must be set either by passing api_key to the client or by setting the "
    "OPENAI_API_KEY environment variable"
)
_REPEATS = 100  # litellm's guard: a stream that sends the same chunk this often in a row is stopped


class EndpointError(Exception):
    """A reply that is not an answer: the endpoint's status, its error message, and its response."""

    def __init__(self, status_code: int, message: str, response: httpx.Response | None = None) -> None:
        super().__init__(f"{status_code}: {message}")
        self.status_code = status_code
        self.response = response


class OpenAIHttpTransport(PerProcessState):
    """POSTs `/chat/completions` to `api_base` (else OPENAI_BASE_URL / OPENAI_API_BASE, else OpenAI's).

    `model` is litellm's `openai/<name>`; `<name>` is sent. `stream=None` streams where `streaming`
    says it is worth it. One pooled httpx client per event loop (a client cannot cross loops).
    """

    _per_process: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "_lock": fresh_lock,
        "_clients": lambda _transport: weakref.WeakKeyDictionary(),
    }

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        stream: bool | None = None,
        **options: Any,
    ) -> None:
        unknown = set(options) - BODY_OPTIONS
        if unknown:
            raise TypeError(f"OpenAIHttpTransport does not take {sorted(unknown)}; use LiteLLMTransport")
        self.model = model
        self.api_base = api_base
        self.timeout = timeout
        self.stream = stream
        self._api_key = api_key
        self._options = options
        self._count = TokenCounter(model)
        self._lock = fresh_lock(self)
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:  # never shows the api key
        return f"OpenAIHttpTransport(model={self.model!r}, api_base={self.api_base!r}, stream={self.stream})"

    async def complete(self, call: Call) -> Answer:
        key = self._api_key or os.environ.get("OPENAI_API_KEY")
        if not key:  # as OpenAI's client: refused before anything is sent
            raise EndpointError(401, _MISSING_KEY)
        stream = streams(self.stream, (self.api_base or "", self.model))
        body = self._body(call, stream)
        headers = {"Authorization": f"Bearer {key}", **self._options.get("extra_headers", {})}
        client = self._client()
        if stream:
            async with client.stream("POST", "/chat/completions", json=body, headers=headers) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise _error(response)
                answer = await _read_events(response)
        else:
            response = await client.post("/chat/completions", json=body, headers=headers)
            if response.status_code >= 400:
                raise _error(response)
            answer = _from_body(response)
        return with_usage(answer, call, self.model, self._count)

    def _body(self, call: Call, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model.split("/", 1)[1] if self.model.startswith("openai/") else self.model,
            "messages": call.messages,
            "temperature": call.temperature,
            "max_tokens": call.max_tokens,
        }
        body.update({k: v for k, v in self._options.items() if k not in ("extra_body", "extra_headers")})
        body.update(self._options.get("extra_body", {}))
        if call.response_format is not None:
            body["response_format"] = call.response_format
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(loop)
            if client is None:
                base = self.api_base or os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE")
                client = self._clients[loop] = httpx.AsyncClient(
                    base_url=(base or OPENAI_BASE).rstrip("/"),
                    timeout=self.timeout,
                    limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
                )
            return client


def _error(response: httpx.Response) -> EndpointError:
    """The endpoint's error, with its own message (OpenAI's `{"error": {...}}` or vLLM's top level)."""
    try:
        payload = response.json()
    except ValueError:
        payload = None
    message = ""
    if isinstance(payload, Mapping):
        error = payload.get("error", payload)
        message = str(error.get("message") or "") if isinstance(error, Mapping) else str(error)
    return EndpointError(response.status_code, message or response.text[:300] or response.reason_phrase, response)


def _from_body(response: httpx.Response) -> Answer:
    payload = response.json()
    choices = payload.get("choices") if isinstance(payload, Mapping) else None
    if not choices:  # a 200 that is not an answer: a proxy's page, a server's error object
        raise ValueError("the server's reply holds no answer (no choices); check the endpoint")
    choice, usage = choices[0], payload.get("usage") or {}
    message = choice.get("message") or {}
    return Answer(
        content=text_of(message.get("content")),
        finish_reason=choice.get("finish_reason"),
        input_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        cost=None,
        reasoned=bool(message.get("reasoning_content") or message.get("reasoning")),
    )


async def _read_events(response: httpx.Response) -> Answer:
    """A streamed answer (server-sent events) read to its end, or to litellm's repetition guard."""
    pieces: list[str] = []
    finish: str | None = None
    usage: Mapping[str, Any] = {}
    reasoned = False
    last, repeats = None, 0
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if isinstance(chunk.get("error"), Mapping):  # an error sent inside the stream
            error = chunk["error"]
            code = error.get("code")
            raise EndpointError(code if isinstance(code, int) else 500, str(error.get("message") or ""), response)
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            piece = text_of(delta.get("content"))
            pieces.append(piece)
            reasoned = reasoned or bool(delta.get("reasoning_content") or delta.get("reasoning"))
            finish = choice.get("finish_reason") or finish
            repeats = repeats + 1 if piece and piece == last else 0
            last = piece
        if repeats >= _REPEATS - 1:  # the model's doing: what it wrote so far is its answer, read like a cut one
            finish = REPEATED
            break
    return Answer(
        "".join(pieces), finish, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
        None, reasoned,
    )
