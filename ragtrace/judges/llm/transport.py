"""The judge's one way to a model: a `Transport` sends one completion and returns its `Answer`.

`LiteLLMTransport` is the only module that calls litellm for completions (every provider but the
OpenAI-compatible ones, which `openai_http` speaks to itself; `routing` chooses): it builds litellm's
arguments, reads a stream to its end (closing it in any case, so a cancelled call stops the server's
generation), and counts and prices the tokens of servers that report no usage (`with_usage`, shared by
both). A test can pass any object with the same `complete` to `LLMJudge(transport=...)`; errors it raises
are read by `failures.classify` as litellm's are (a `status_code`, litellm's exception types).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ragtrace.judges.llm.streaming import streams

__all__ = [
    "REPEATED",
    "Answer",
    "Call",
    "LiteLLMTransport",
    "TokenCounter",
    "Transport",
    "conversation_text",
    "load_litellm",
    "text_of",
    "with_usage",
]

# litellm stops a stream whose model sends the same chunk 100 times over (a JSON-mode model padding its
# answer with whitespace, a loop); its error says so in these words, as a 500 that is not the server's.
_REPEATED_WORDS = "repeating the same chunk"
REPEATED = "repeated"  # the finish reason of an answer stopped that way


def load_litellm() -> Any:
    """Import litellm on first use (it takes seconds) with its offline price map: no fetch at run time.

    Its "Give Feedback / Get Help" banners are print() calls on stdout, where they would corrupt the
    output of a program that prints JSON; the judge reports each failure itself, so they are turned off.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


class TokenCounter:
    """Counts tokens with litellm's offline tokenizer for `model`."""

    def __init__(self, model: str) -> None:
        self.model = model

    def __call__(self, text: str) -> int:
        return int(load_litellm().token_counter(model=self.model, text=text))


@dataclass(frozen=True)
class Call:
    """What one completion asks: the conversation, its temperature, its output cap, and the
    structured-output request (`response_format`, None for plain text)."""

    messages: list[dict[str, str]]
    temperature: float
    max_tokens: int
    response_format: dict[str, Any] | None = None


@dataclass(frozen=True)
class Answer:
    """One call's reply: its text, why it ended, and what it cost (tokens 0 when nobody counted them).
    `reasoned` says the server sent a reasoning model's thinking apart (`reasoning_content`)."""

    content: str
    finish_reason: str | None
    input_tokens: int
    output_tokens: int
    cost: float | None
    reasoned: bool = False


class Transport(Protocol):
    """Sends one completion. Raises what the client raises; the caller classifies it."""

    async def complete(self, call: Call) -> Answer: ...


class LiteLLMTransport:
    """`litellm.acompletion` to `model`, with no retries of its own (the judge retries, knowing why).

    `stream=True` reads the answer as a stream, so a cancelled call closes its connection and the server
    sees it; `None` streams where `streaming.streams` says it is worth it. Extra keyword arguments go to
    `litellm.acompletion` unchanged.
    """

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        stream: bool | None = None,
        **litellm_kwargs: Any,
    ) -> None:
        self.model = model
        self.api_base = api_base
        self.timeout = timeout
        self.stream = stream
        self._api_key = api_key
        self._kwargs = litellm_kwargs
        self._count = TokenCounter(model)

    def __repr__(self) -> str:  # never shows the api key
        return f"LiteLLMTransport(model={self.model!r}, api_base={self.api_base!r}, stream={self.stream})"

    async def complete(self, call: Call) -> Answer:
        litellm = load_litellm()
        stream = streams(self.stream, (self.api_base or "", self.model))
        kwargs = self._arguments(call, stream)
        if not stream:
            answer = _from_response(await litellm.acompletion(**kwargs), litellm)
        else:
            answer = await _read_stream(await litellm.acompletion(**kwargs))
        return with_usage(answer, call, self.model, self._count)

    def _arguments(self, call: Call, stream: bool) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": call.messages,
            "temperature": call.temperature,
            "max_tokens": call.max_tokens,
            "timeout": self.timeout,
            "max_retries": 0,
            "num_retries": 0,
            **self._kwargs,
        }
        if stream:
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}
        if self.api_base is not None:
            kwargs["api_base"] = self.api_base
        if self._api_key is not None:
            kwargs["api_key"] = self._api_key
        if call.response_format is not None:
            kwargs["response_format"] = call.response_format
        return kwargs


def with_usage(answer: Answer, call: Call, model: str, count: Callable[[str], int]) -> Answer:
    """The answer with tokens and price: servers that report no usage (llama-cpp-python's stream,
    some servers' plain replies) get our own count, priced as litellm prices the model."""
    if answer.input_tokens:
        if answer.cost is not None:
            return answer
        return replace(answer, cost=_priced(model, answer.input_tokens, answer.output_tokens))
    input_tokens = count(conversation_text(call.messages))
    output_tokens = count(answer.content) if answer.content else 0
    return replace(
        answer, input_tokens=input_tokens, output_tokens=output_tokens,
        cost=_priced(model, input_tokens, output_tokens),
    )


def conversation_text(messages: list[dict[str, str]]) -> str:
    """A conversation's text, as it is counted for a context window or a budget."""
    return "\n".join(m["content"] for m in messages)


async def _read_stream(stream: Any) -> Answer:
    """A streamed answer, read to its end; the stream is closed in any case."""
    pieces: list[str] = []
    finish: str | None = None
    usage: Any = None
    reasoned = False
    try:
        async for chunk in stream:
            for choice in getattr(chunk, "choices", None) or []:
                pieces.append(text_of(getattr(choice.delta, "content", None)))
                reasoned = reasoned or bool(getattr(choice.delta, "reasoning_content", None))
                finish = getattr(choice, "finish_reason", None) or finish
            usage = getattr(chunk, "usage", None) or usage
    except Exception as exc:
        if _REPEATED_WORDS not in str(exc):
            raise
        # The model's doing, not the server's: what it wrote so far is its answer (often complete,
        # with the padding after it), read like a cut one.
        finish = REPEATED
    finally:
        with contextlib.suppress(Exception):
            await stream.aclose()
    input_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
    output_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
    return Answer("".join(pieces), finish, input_tokens, output_tokens, None, reasoned)


_UNPRICED: set[str] = set()  # models litellm's map has no price for (asking again costs 0.3 ms a call)


def _priced(model: str, input_tokens: int, output_tokens: int) -> float | None:
    """The price litellm's bundled map gives these tokens, or None for a model it does not price."""
    if model in _UNPRICED:
        return None
    try:
        prompt_cost, completion_cost = load_litellm().cost_per_token(
            model=model, prompt_tokens=input_tokens, completion_tokens=output_tokens
        )
    except Exception:  # unknown price: no cost, never an error
        _UNPRICED.add(model)
        return None
    return float(prompt_cost) + float(completion_cost)


def text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts (Mistral's reasoning
    models send `[{"type": "thinking", ...}, {"type": "text", "text": ...}]`; the thinking is not the answer)."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "") for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    return str(content)


def _from_response(response: Any, litellm: Any) -> Answer:
    usage = getattr(response, "usage", None)
    if not response.choices:  # a 200 that is not an answer: a proxy's page, a server's error object
        raise ValueError("the server's reply holds no answer (no choices); check the endpoint")
    choice = response.choices[0]
    hidden = getattr(response, "_hidden_params", None) or {}
    try:  # litellm prices each response it logs; None means the model's price is unknown
        cost = hidden["response_cost"] if "response_cost" in hidden else (
            litellm.completion_cost(completion_response=response)
        )
    except Exception:
        cost = None
    return Answer(
        content=text_of(choice.message.content),
        finish_reason=getattr(choice, "finish_reason", None),
        input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        cost=None if cost is None else float(cost),
        reasoned=bool(getattr(choice.message, "reasoning_content", None)),
    )
