"""`OpenAIHttpTransport`: an OpenAI-compatible chat endpoint spoken to over aiohttp, without litellm.

litellm's per-call cost (its request and response models, logging hooks, and a stream wrapper that does
work on every chunk) is most of the judge's CPU: 10 ms a call, 30 ms streamed, on a 2-core machine
where the judge's throughput is bound by CPU, not by the wire. An `openai/...` model is one POST of
JSON, so this transport sends it itself with aiohttp (a litellm dependency; about 0.5 ms a call, 1 ms
streamed, against 2.5-3.5 ms for httpx and 4-8 ms for the `openai` client: bench/judge_clients.py)
and raises what `failures.classify` reads as it reads litellm's errors: a `status_code` and the
response's headers (Retry-After), aiohttp's connection errors, a timeout. litellm still counts the
tokens and prices them (its offline map), and still carries every provider only it knows (`routing`).
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit

import aiohttp

from ragtrace._state import PerProcessState, fresh_lock
from ragtrace.judges.llm.streaming import streams
from ragtrace.judges.llm.transport import REPEATED, Answer, Call, TokenCounter, text_of, with_usage

__all__ = ["BODY_OPTIONS", "EndpointError", "OpenAIHttpTransport"]

OPENAI_BASE = "https://api.openai.com/v1"
# litellm keyword arguments this transport honours: they go into the request body (headers) as they are.
BODY_OPTIONS = frozenset(
    {"seed", "top_p", "stop", "user", "presence_penalty", "frequency_penalty", "logit_bias", "extra_body",
     "extra_headers"}
)
_MISSING_KEY = (
    "The api_key client option must be set either by passing api_key to the client or by setting the "
    "OPENAI_API_KEY environment variable"
)
_REPEATS = 100  # litellm's guard: a stream that sends the same chunk this often in a row is stopped


@dataclass(frozen=True)
class ErrorReply:
    """What `failures.retry_after` reads of a refused call: its status and headers."""

    status_code: int
    headers: Mapping[str, str]


class EndpointError(Exception):
    """A reply that is not an answer: the endpoint's status, its error message, and its headers."""

    def __init__(self, status_code: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(f"{status_code}: {message}")
        self.status_code = status_code
        self.response = ErrorReply(status_code, headers or {})


class OpenAIHttpTransport(PerProcessState):
    """POSTs `/chat/completions` to `api_base` (else OPENAI_BASE_URL / OPENAI_API_BASE, else OpenAI's).

    `model` is litellm's `openai/<name>`; `<name>` is sent. `stream=None` streams where `streaming`
    says it is worth it. One pooled session per event loop (a session cannot cross loops), closed with
    the loop's async generators (`asyncio.run` does it; so does the live worker's loop).
    """

    _per_process: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "_lock": fresh_lock,
        "_sessions": lambda _transport: weakref.WeakKeyDictionary(),
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
        self._sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Session] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:  # never shows the api key
        return f"OpenAIHttpTransport(model={self.model!r}, api_base={self.api_base!r}, stream={self.stream})"

    async def complete(self, call: Call) -> Answer:
        key = self._api_key or os.environ.get("OPENAI_API_KEY")
        if not key:  # as OpenAI's client: refused before anything is sent
            raise EndpointError(401, _MISSING_KEY)
        stream = streams(self.stream, (self.api_base or "", self.model))
        headers = {"Authorization": f"Bearer {key}", **self._options.get("extra_headers", {})}
        session = await self._session()
        async with session.client.post(
            session.url, data=json.dumps(self._body(call, stream)), headers=headers, proxy=session.proxy
        ) as response:
            if response.status >= 400:
                raise _error(response.status, await response.read(), response.headers)
            answer = await _read_events(response.content) if stream else _from_body(await response.read())
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

    async def _session(self) -> _Session:
        loop = asyncio.get_running_loop()
        with self._lock:
            session = self._sessions.get(loop)
            if session is not None:
                return session
            base = self.api_base or os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE")
            session = self._sessions[loop] = _Session(
                (base or OPENAI_BASE).rstrip("/") + "/chat/completions", self.timeout
            )
        await session.hold()
        return session


class _Session:
    """An aiohttp session for one event loop, closed when the loop shuts its async generators down."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.proxy = env_proxy(url)
        self.client = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=timeout),
            headers={"Content-Type": "application/json"},
            connector=aiohttp.TCPConnector(limit=0),  # the judge's semaphore bounds the calls in flight
        )
        self._keeper: AsyncIterator[None] | None = None

    async def hold(self) -> None:
        """Register the session's closing with the running loop: an async generator suspended until the
        loop's `shutdown_asyncgens` closes it (no "Unclosed client session" when a loop ends)."""
        if self._keeper is None:
            self._keeper = self._held()
            await self._keeper.__anext__()

    async def _held(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await self.client.close()


def env_proxy(url: str) -> str | None:
    """The proxy HTTP(S)_PROXY / NO_PROXY name for `url`, as litellm's client honours them, read once per
    session. (aiohttp's `trust_env` would read them per request, and ~/.netrc too, in a thread: credentials
    that would clash with our Authorization header.)"""
    parts = urlsplit(url)
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return urllib.request.getproxies_environment().get(parts.scheme)


def _error(status: int, raw: bytes, headers: Mapping[str, str]) -> EndpointError:
    """The endpoint's error, with its own message (OpenAI's `{"error": {...}}` or vLLM's top level)."""
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = None
    message = ""
    if isinstance(payload, Mapping):
        error = payload.get("error", payload)
        message = str(error.get("message") or "") if isinstance(error, Mapping) else str(error)
    return EndpointError(status, message or raw[:300].decode("utf-8", "replace") or f"HTTP {status}", headers)


def _from_body(raw: bytes) -> Answer:
    payload = json.loads(raw)
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


async def _read_events(lines: AsyncIterable[bytes]) -> Answer:
    """A streamed answer (server-sent events) read to its end, or to litellm's repetition guard."""
    pieces: list[str] = []
    finish: str | None = None
    usage: Mapping[str, Any] = {}
    reasoned = False
    last, repeats = None, 0
    done = False
    async for line in lines:
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            done = True
            break
        chunk = json.loads(data)
        if isinstance(chunk.get("error"), Mapping):  # an error sent inside the stream
            error = chunk["error"]
            code = error.get("code")
            raise EndpointError(code if isinstance(code, int) else 500, str(error.get("message") or ""))
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
    if not done and finish is None:  # the connection closed mid-answer: the server's doing, retried as an outage
        raise aiohttp.ClientPayloadError("the stream ended before the answer did (no finish, no [DONE])")
    return Answer(
        "".join(pieces), finish, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
        None, reasoned,
    )
