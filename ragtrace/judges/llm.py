"""The LLM judge: any litellm provider, one fused call per sample when it fits, validated and completed.

One `judge()` is: cache lookup -> a plan (one call, or per aspect and per chunk of contexts when the
prompt would not fit the model's context) -> per call: budget check, prompt (contexts cut to a token
budget), the strongest structured-output mode the endpoint accepts, bounded by `max_tokens` and a
timeout that cancels the request -> the well-formed verdicts of the answer are kept and only the rest is
asked again (a follow-up); an answer with nothing usable is retried with the error shown, a stricter rule
and a temperature step -> `check_verdicts` on the whole. Transport failures (429, 5xx, connection) are
retried with backoff; a 4xx/5xx that names the structured-output request steps down a mode instead;
everything else ends as a typed `JudgeError` that carries the usage spent so far.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import os
import random
import re
import sys
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, ClassVar

from opentelemetry import context as otel_context
from pydantic import ValidationError

from ragtrace._checks import count
from ragtrace._state import PerProcessState, fresh_lock
from ragtrace._untraced import suppress_tracing
from ragtrace.judges.base import (
    JudgeError,
    JudgeInvalidOutput,
    Judgement,
    JudgeRequest,
    JudgeTimeout,
    OverBudget,
    RateLimited,
)
from ragtrace.judges.cache import CachedVerdicts, VerdictCache, cache_key
from ragtrace.judges.limits import DailyTokenBudget, RateLimiter
from ragtrace.judges.prompts import (
    FUSED_VERSION,
    MODES,
    REASON_CHARS,
    Mode,
    Part,
    Prompt,
    Reading,
    RepeatedKey,
    TokenCounter,
    build_prompt,
    load_litellm,
    output_budget,
    parse_cut_json,
    parse_json,
    read_answer,
    response_format,
    retry_messages,
    version_for,
    whole,
    without_reasoning,
)
from ragtrace.scoring import Aspect, ContextVerdict, JudgeUsage, Verdicts, check_verdicts
from ragtrace.scoring.verdicts import ClaimVerdict

__all__ = ["JudgeAuthFailed", "JudgeUnavailable", "LLMJudge"]

PER_ASPECT_VERSION = "per-aspect-v2"
# What servers say when they refuse the structured-output request, whatever the status: llama-cpp-python
# answers 500 naming `response_format.type`, llama.cpp's server 500/400 ("response_format type must
# be ..."), vLLM 400 ("... JSON schema ... not supported ..."), Ollama 400/500 about the format's schema.
_FORMAT_WORDS = (
    "response_format", "response format", "json_schema", "json schema", "json_object", "structured output",
    "grammar", "guided",
)
# Statuses that are never about the request's format: auth, routing, rate, timeout.
_NOT_FORMAT = frozenset({401, 403, 404, 408, 429})
_MAX_BACKOFF = 60.0
# litellm stops a stream whose model sends the same chunk 100 times over (a JSON-mode model padding its
# answer with whitespace, a loop); its error says so in these words, as a 500 that is not the server's.
_REPEATED_WORDS = "repeating the same chunk"
REPEATED = "repeated"  # the finish reason of an answer stopped that way

# The structured-output mode each endpoint (api_base, model) was found to accept, for every judge of
# this process: a refusal learnt once is not probed again.
_ENDPOINT_MODES: dict[tuple[str, str], Mode] = {}
_ENDPOINT_LOCK = threading.Lock()


class JudgeUnavailable(JudgeError):
    """The judge endpoint kept failing (5xx or connection errors) after every retry."""

    code = "judge_unavailable"


class JudgeAuthFailed(JudgeError):
    """The provider refused the credentials, or none were configured: no retry can fix that."""

    code = "judge_auth"


# How providers and their clients word a missing or refused credential (litellm reports some of them as
# InternalServerError, OpenAI's client raises before sending when no key is set).
_AUTH_WORDS = re.compile(
    r"api[ _-]?key|credential|unauthori[sz]ed|authenticat|permission denied|forbidden|access denied",
    re.IGNORECASE,
)
_SECRET_NAME = re.compile(r"key|token|secret|password|auth", re.IGNORECASE)
_AUTH_HINT = (
    "set the provider's API key in the environment (for example OPENAI_API_KEY or ANTHROPIC_API_KEY), "
    "or pass api_key= to the judge"
)


def _retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (Retry-After / retry-after-ms), when it said so."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or getattr(
        exc, "litellm_response_headers", None
    )
    if not headers:
        return None
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return max(0.0, float(ms) / 1000.0)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, (when - datetime.now(UTC)).total_seconds())
    except (TypeError, ValueError, AttributeError):
        return None


@dataclass(frozen=True)
class _Answer:
    """One call's reply: its text, why it ended, and what it cost (tokens 0 when nobody counted them).
    `reasoned` says the server sent a reasoning model's thinking apart (`reasoning_content`)."""

    content: str
    finish_reason: str | None
    input_tokens: int
    output_tokens: int
    cost: float | None
    reasoned: bool = False


def _priced(litellm: Any, model: str, input_tokens: int, output_tokens: int) -> float | None:
    """The price litellm's bundled map gives these tokens, or None for a model it does not price."""
    try:
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=model, prompt_tokens=input_tokens, completion_tokens=output_tokens
        )
    except Exception:  # unknown price: no cost, never an error
        return None
    return float(prompt_cost) + float(completion_cost)


def _text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts (Mistral's reasoning
    models send `[{"type": "thinking", ...}, {"type": "text", "text": ...}]`; the thinking is not the answer)."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "") for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    return str(content)


def _from_response(response: Any, litellm: Any) -> _Answer:
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
    return _Answer(
        content=_text_of(choice.message.content),
        finish_reason=getattr(choice, "finish_reason", None),
        input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        cost=None if cost is None else float(cost),
        reasoned=bool(getattr(choice.message, "reasoning_content", None)),
    )


@dataclass
class _Tally:
    """What one `judge()` has spent so far; becomes the `JudgeUsage` of its answer or its error."""

    model: str
    version: str
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    started: float = field(default_factory=time.perf_counter)

    def add(self, answer: _Answer) -> None:
        self.input_tokens += answer.input_tokens
        self.output_tokens += answer.output_tokens
        if answer.cost is not None:
            self.cost = (self.cost or 0.0) + answer.cost

    def usage(self) -> JudgeUsage:
        return JudgeUsage(
            calls=self.calls,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_usd=self.cost,
            latency_ms=(time.perf_counter() - self.started) * 1000.0,
            model=self.model,
            prompt_version=self.version,
        )


class LLMJudge(PerProcessState):
    """A `Judge` backed by any litellm model string (`openai/...`, `anthropic/...`, `ollama/...`, ...).

    `fused=True` answers every requested aspect in one call; `fused=False` asks once per aspect. When a
    fused prompt would not fit the model's context (`context_window`, else what litellm knows of the
    model), the request is split per aspect and then into chunks of contexts; `contexts_per_call` forces
    chunks of that many contexts (small local models answer short questions faster and better).
    `max_tokens` caps each answer (default: derived from what the call asks); `timeout` bounds each call,
    whose request is cancelled, not left running (`stream=True` lets the server see the cancel).
    `cache=True` (default) keeps a bounded in-memory `VerdictCache`; pass one to share it, or
    False/None to disable. Extra keyword arguments go to `litellm.acompletion` unchanged.
    `path_counts()` says how often each fallback (format step-down, follow-up, retry, ...) was taken.
    """

    # Semaphores belong to the event loops of this process; another process makes its own.
    _per_process: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "_lock": fresh_lock,
        "_semaphores": lambda _judge: weakref.WeakKeyDictionary(),
    }

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        fused: bool = True,
        timeout: float = 30.0,
        max_retries: int = 3,
        max_invalid_retries: int = 2,
        max_followups: int = 3,
        concurrency: int = 8,
        requests_per_minute: float | None = None,
        daily_token_budget: int | DailyTokenBudget | None = None,
        context_token_budget: int = 400,
        max_tokens: int | None = None,
        reason_chars: int = REASON_CHARS,
        contexts_per_call: int | None = None,
        context_window: int | None = None,
        stream: bool = True,
        cache: VerdictCache | bool | None = True,
        temperature: float = 0.0,
        temperature_step: float = 0.3,
        backoff_base: float = 0.5,
        **litellm_kwargs: Any,
    ) -> None:
        count(concurrency, "concurrency")
        count(reason_chars, "reason_chars")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        for name, value in (
            ("max_tokens", max_tokens), ("contexts_per_call", contexts_per_call), ("context_window", context_window)
        ):
            if value is not None:
                count(value, f"{name} (or None)")
        self.model = model
        self.fused = fused
        self.prompt_version = FUSED_VERSION if fused else PER_ASPECT_VERSION
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.max_invalid_retries = max(0, max_invalid_retries)
        self.max_followups = max(0, max_followups)
        self.concurrency = concurrency
        self.context_token_budget = context_token_budget
        self.max_tokens = max_tokens
        self.reason_chars = reason_chars
        self.contexts_per_call = contexts_per_call
        self.context_window = context_window
        self.stream = stream
        self.temperature = temperature
        self.temperature_step = temperature_step
        self.backoff_base = backoff_base
        self.rate_limiter = RateLimiter(requests_per_minute) if requests_per_minute else None
        self.budget = (
            DailyTokenBudget(daily_token_budget)
            if isinstance(daily_token_budget, int)
            else daily_token_budget
        )
        self.cache: VerdictCache | None = (
            VerdictCache() if cache is True else (cache if isinstance(cache, VerdictCache) else None)
        )
        self._api_base = api_base
        self._api_key = api_key
        self._endpoint = (api_base or "", model)
        self._kwargs = litellm_kwargs
        self._count = TokenCounter(model)
        self._window: int | None = context_window
        self._window_known = context_window is not None
        self._paths: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:  # never shows the api key
        return f"LLMJudge(model={self.model!r}, fused={self.fused}, mode={self.mode!r})"

    @property
    def mode(self) -> Mode:
        """The structured-output mode this endpoint was found to accept (starts at json_schema).

        Remembered per endpoint (api_base and model) in this process, so a second judge on the same
        server does not probe again."""
        return _ENDPOINT_MODES.get(self._endpoint, MODES[0])

    def path_counts(self) -> dict[str, int]:
        """How often each path was taken since this judge was made: `calls`, `format_stepdowns`,
        `transport_retries`, `timeouts`, `invalid_retries`, `temperature_steps`, `followup_calls`,
        `cut_answers_read`, `repeated_answers`, `split_per_aspect`, `chunked_requests`, `judged`, `failed`."""
        with self._lock:
            return dict(self._paths)

    def _scrub(self, exc: BaseException) -> str:
        """The error's text, short, without any secret this judge was configured with: a provider's error
        can echo the key it refused, and this text ends up in span attributes, events and logs."""
        text = _short(exc)
        for secret in self._secrets():
            text = text.replace(secret, "[SECRET]")
        return text

    def _secrets(self) -> list[str]:
        found = [self._api_key] if self._api_key else []
        # litellm takes keys from the environment too (OPENAI_API_KEY, AZURE_API_KEY, ...).
        found += [value for name, value in os.environ.items() if _SECRET_NAME.search(name) and len(value) >= 8]
        for name, value in self._kwargs.items():
            if isinstance(value, dict):  # extra_headers / headers: every value may be a credential
                found += [v for v in value.values() if isinstance(v, str)]
            elif isinstance(value, str) and _SECRET_NAME.search(name):
                found.append(value)
        # Longest first, and only values long enough not to blank ordinary words out of the message.
        return sorted({s for s in found if len(s) >= 6}, key=len, reverse=True)

    def _note(self, path: str, n: int = 1) -> None:
        with self._lock:
            self._paths[path] += n

    # --- the Judge protocol ----------------------------------------------------------------------------

    async def judge(self, request: JudgeRequest) -> Judgement:
        if "litellm" not in sys.modules:  # the first import takes seconds: keep it off the event loop
            await asyncio.to_thread(load_litellm)
        if not self._window_known:
            self._window, self._window_known = _known_window(self.model), True
        try:
            judgement = await self._judge_request(request)
        except JudgeError:
            self._note("failed")
            raise
        self._note("judged")
        return judgement

    async def _judge_request(self, request: JudgeRequest) -> Judgement:
        aspects = sorted(request.aspects)
        if self.fused or len(aspects) <= 1:
            return await self._judge_one(request)
        parts: list[Judgement] = []
        spent = JudgeUsage()
        for aspect in aspects:
            try:
                part = await self._judge_one(
                    JudgeRequest(request.sample, frozenset({aspect}), request.reference)
                )
            except JudgeError as exc:
                exc.usage = spent + exc.usage
                raise
            parts.append(part)
            spent = spent + part.usage
        return Judgement(
            _merge([p.verdicts for p in parts]),
            spent.model_copy(update={"prompt_version": self.prompt_version}),
            tuple(sorted({i for p in parts for i in p.truncated})),
        )

    # --- one question, one or a few calls --------------------------------------------------------------

    async def _judge_one(self, request: JudgeRequest) -> Judgement:
        sample, aspects = request.sample, request.aspects
        version = version_for(aspects, self.fused)
        key = self._key(request, version) if self.cache is not None else None
        if key is not None and self.cache is not None and (hit := self.cache.get(key)) is not None:
            usage = JudgeUsage(model=self.model, prompt_version=version, cache_hits=1)
            return Judgement(hit.verdicts, usage, hit.truncated)

        tally = _Tally(self.model, version)
        collected = Reading()
        truncated: set[int] = set()
        for part in self._plan(request, version):
            await self._answer(request, part, version, tally, collected, truncated)
        try:
            verdicts = _assemble(collected, aspects, len(sample.contexts))
        except (ValueError, ValidationError) as exc:  # InvalidVerdicts is a ValueError
            raise JudgeInvalidOutput(f"invalid judge answer: {_short(exc)}", tally.usage()) from exc
        cut = tuple(sorted(truncated))
        if key is not None and self.cache is not None:
            self.cache.put(key, CachedVerdicts(verdicts, cut))
        return Judgement(verdicts, tally.usage(), cut)

    def _plan(self, request: JudgeRequest, version: str) -> list[Part]:
        """The calls a request takes: one, or per aspect and per chunk of contexts when one is too long."""
        n = len(request.sample.contexts)
        full = whole(request.aspects, n)
        size = self.contexts_per_call
        if size is None and self._fits(request, full, version):
            return [p for p in [full] if _asks(p)]
        groups = [request.aspects]
        if size is None and len(request.aspects) > 1:  # too long fused: one aspect at a time first
            groups = [frozenset({a}) for a in sorted(request.aspects)]
            self._note("split_per_aspect")
        parts: list[Part] = []
        for group in groups:
            part = whole(group, n)
            if size is None and self._fits(request, part, version):
                parts.append(part)
                continue
            chunk = size or self._chunk_size(request, part, version)
            if part.per_context and chunk < len(part.indices):
                self._note("chunked_requests")
            for start in range(0, len(part.indices) if part.per_context else 0, chunk):
                parts.append(Part(part.per_context, part.indices[start : start + chunk]))
            if part.sample_level:
                parts.append(Part(frozenset(), (), part.missing, part.claims))
        return [p for p in parts if _asks(p)]

    def _fits(self, request: JudgeRequest, part: Part, version: str) -> bool:
        if self._window is None:
            return True
        prompt = self._prompt(request, part, self.mode, version)
        return self._count(_text(prompt.messages)) + self._output_budget(request, part) <= self._window

    def _chunk_size(self, request: JudgeRequest, part: Part, version: str) -> int:
        size = len(part.indices)
        while size > 1 and not self._fits(request, Part(part.per_context, part.indices[:size]), version):
            size = (size + 1) // 2
        return max(1, size)

    def _prompt(self, request: JudgeRequest, part: Part, mode: Mode, version: str) -> Prompt:
        return build_prompt(
            request.sample,
            part,
            request.reference,
            mode=mode,
            budget=self.context_token_budget,
            count=self._count,
            version=version,
            reason_chars=self.reason_chars,
        )

    def _output_budget(self, request: JudgeRequest, part: Part) -> int:
        if self.max_tokens is not None:
            return self.max_tokens
        truth = self._count(request.sample.ground_truth or "") if part.claims else 0
        return output_budget(part, truth, self.reason_chars)

    async def _answer(
        self,
        request: JudgeRequest,
        part: Part,
        version: str,
        tally: _Tally,
        collected: Reading,
        truncated: set[int],
    ) -> None:
        """Ask for `part` until every verdict in it is in `collected`.

        An answer that covers some of it is kept, and only the rest is asked again, in a smaller call.
        An answer with nothing usable is retried with something changed: the error and a stricter rule
        are shown, and from the second retry (or when the same text comes back) the temperature steps up.
        """
        n = len(request.sample.contexts)
        pending: Part | None = part
        history: list[dict[str, str]] = []
        followups = invalid = 0
        temperature = self.temperature
        previous: str | None = None
        while pending is not None:
            asked = pending
            prompts: dict[Mode, Prompt] = {}

            def render(mode: Mode, asked: Part = asked, prompts: dict[Mode, Prompt] = prompts) -> Prompt:
                if mode not in prompts:
                    prompts[mode] = self._prompt(request, asked, mode, version)
                return prompts[mode]

            answer = await self._complete(
                render, history, asked, tally, temperature, self._output_budget(request, asked)
            )
            content, finish = answer.content, answer.finish_reason
            truncated.update(next(iter(prompts.values())).truncated)  # the same cut in every mode
            reading, error = self._read(content, asked, n, answer.reasoned)
            if finish == "length":
                error = f"the answer was cut off at the token limit; keep every reason short. {error}"
            elif finish == REPEATED:
                self._note("repeated_answers")
                error = f"the answer repeated the same text until it was stopped; end it after the JSON. {error}"
            collected.merge(reading)
            pending = reading.left(asked)
            if pending is None:
                return
            if reading.progress() and followups < self.max_followups:
                followups += 1
                self._note("followup_calls")
                history = []
                continue
            if invalid >= self.max_invalid_retries:
                raise JudgeInvalidOutput(
                    f"invalid judge answer after {invalid + 1} attempts: {_short(error, 500)}", tally.usage()
                )
            invalid += 1
            self._note("invalid_retries")
            if invalid >= 2 or content == previous:
                temperature = min(1.0, temperature + self.temperature_step)
                self._note("temperature_steps")
            previous = content
            history = retry_messages(content, _short(error, 1500), pending, self.reason_chars)

    def _read(self, content: str, part: Part, n: int, reasoned: bool = False) -> tuple[Reading, str]:
        """The usable verdicts of an answer, and what to tell the judge about the rest."""
        answer = without_reasoning(content)
        if not answer.strip():
            if reasoned or answer != content:  # a reasoning model that never got to its answer
                return Reading(), (
                    "the reply holds only reasoning and no JSON object; think briefly, then reply with the "
                    "JSON object (a reasoning model needs a larger max_tokens, or its thinking turned off)"
                )
            return Reading(), "the reply was empty; reply with a JSON object"
        content = answer
        try:
            data = parse_json(content)
        except RepeatedKey as exc:  # a shorter reading would silently keep one of the two values
            return Reading(), str(exc)
        except ValueError as exc:
            try:
                data = parse_cut_json(content)
            except ValueError:
                return Reading(), str(exc)
            self._note("cut_answers_read")
        reading = read_answer(data, part, n, self.reason_chars)
        return reading, "; ".join(reading.problems[:10])

    def _key(self, request: JudgeRequest, version: str) -> str:
        sample, aspects = request.sample, request.aspects
        return cache_key(
            model=self.model,
            prompt_version=version,
            aspects=aspects,
            query=sample.query,
            reference=request.reference if Aspect.USEFULNESS in aspects else None,
            response=sample.response if {Aspect.RELEVANCE, Aspect.USEFULNESS} & aspects else None,
            ground_truth=sample.ground_truth if {Aspect.CLAIMS, Aspect.USEFULNESS} & aspects else None,
            contexts=sample.context_texts,
            extra=(
                f"budget={self.context_token_budget};t={self.temperature};r={self.reason_chars};"
                f"k={self.contexts_per_call};w={self._window}"
            ),
        )

    async def _complete(
        self,
        render: Callable[[Mode], Prompt],
        history: list[dict[str, str]],
        part: Part,
        tally: _Tally,
        temperature: float,
        max_tokens: int,
    ) -> _Answer:
        """One answer: walks down the output modes on rejection, retries
        transport failures, and cancels a call that runs past `timeout`."""
        litellm = load_litellm()
        attempt = 0
        while True:
            mode = self.mode
            messages = render(mode).messages + history
            if self.budget is not None and self.budget.exhausted():
                raise OverBudget(
                    f"daily judge token budget of {self.budget.limit} is spent", tally.usage()
                )
            if self.rate_limiter is not None:
                await self.rate_limiter.acquire()
            kwargs: dict[str, Any] = {
                "model": self.model,
                "messages": messages,
                "temperature": temperature,
                "max_tokens": max_tokens,
                "timeout": self.timeout,
                "max_retries": 0,
                "num_retries": 0,
                **self._kwargs,
            }
            if self.stream:
                kwargs["stream"] = True
                kwargs["stream_options"] = {"include_usage": True}
            if self._api_base is not None:
                kwargs["api_base"] = self._api_base
            if self._api_key is not None:
                kwargs["api_key"] = self._api_key
            if (fmt := response_format(part, mode, self.reason_chars)) is not None:
                kwargs["response_format"] = fmt
            token = suppress_tracing()
            try:
                async with self._semaphore():
                    tally.calls += 1
                    self._note("calls")
                    async with asyncio.timeout(self.timeout):
                        response = await self._call(litellm, kwargs)
            except (TimeoutError, litellm.Timeout) as exc:
                self._note("timeouts")
                raise JudgeTimeout(
                    f"judge call timed out after {self.timeout:g}s (raise it with --judge-timeout / "
                    "RAGTRACE_JUDGE_TIMEOUT, or ask less per call with contexts_per_call)",
                    tally.usage(),
                ) from exc
            except Exception as exc:
                status = getattr(exc, "status_code", None)
                if mode != "text" and _rejects_format(exc, status):
                    self._note("format_stepdowns")
                    self._downgrade(mode)
                    continue
                if _auth_failure(exc, status, litellm):
                    raise JudgeAuthFailed(
                        f"the judge {self.model} refused the credentials: {self._scrub(exc)}; {_AUTH_HINT}",
                        tally.usage(),
                    ) from exc
                retryable = status == 429 or _unavailable(exc, status, litellm)
                if not retryable:
                    raise JudgeError(f"judge call failed: {self._scrub(exc)}", tally.usage()) from exc
                wait = _retry_after(exc)
                # A server that asks for a longer wait than a whole call may take is not waited for: the
                # sample would outlive its timeout asleep, and an earlier retry only meets the same refusal.
                too_long = wait is not None and wait > self.timeout
                if attempt >= self.max_retries or too_long:
                    asked = f" (the server asked to wait {wait:g}s)" if too_long else ""
                    if status == 429:
                        raise RateLimited(
                            f"judge rate limited after {attempt + 1} attempts{asked}: {self._scrub(exc)}",
                            tally.usage(),
                        ) from exc
                    raise JudgeUnavailable(
                        f"judge unavailable after {attempt + 1} attempts{asked}: {self._scrub(exc)}", tally.usage()
                    ) from exc
                self._note("transport_retries")
                await asyncio.sleep(self._backoff(attempt, wait))
                attempt += 1
                continue
            finally:
                otel_context.detach(token)  # type: ignore[arg-type]
            tally.add(response)
            if self.budget is not None:
                self.budget.spend(_spent_tokens(response, messages, self._count))
            return response

    async def _call(self, litellm: Any, kwargs: dict[str, Any]) -> _Answer:
        """One completion. A stream is read to its end and closed in any case, so a cancelled call
        closes its connection and the server stops generating at its next token."""
        if not kwargs.get("stream"):
            return self._counted(_from_response(await litellm.acompletion(**kwargs), litellm), kwargs, litellm)
        stream = await litellm.acompletion(**kwargs)
        pieces: list[str] = []
        finish: str | None = None
        usage: Any = None
        reasoned = False
        try:
            async for chunk in stream:
                for choice in getattr(chunk, "choices", None) or []:
                    pieces.append(_text_of(getattr(choice.delta, "content", None)))
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
        content = "".join(pieces)
        input_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        output_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        answer = _Answer(content, finish, input_tokens, output_tokens, None, reasoned)
        return self._counted(answer, kwargs, litellm)

    def _counted(self, answer: _Answer, kwargs: dict[str, Any], litellm: Any) -> _Answer:
        """The answer with tokens and price: servers that report no usage (llama-cpp-python's stream,
        some servers' plain replies) get our own count, priced as litellm prices the model."""
        if answer.input_tokens:
            if answer.cost is not None:
                return answer
            cost = _priced(litellm, self.model, answer.input_tokens, answer.output_tokens)
            return replace(answer, cost=cost)
        input_tokens = self._count(_text(kwargs["messages"]))
        output_tokens = self._count(answer.content) if answer.content else 0
        return replace(
            answer,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost=_priced(litellm, self.model, input_tokens, output_tokens),
        )

    # --- plumbing --------------------------------------------------------------------------------------

    def _semaphore(self) -> asyncio.Semaphore:
        """One semaphore per event loop (asyncio primitives cannot cross loops)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            sem = self._semaphores.get(loop)
            if sem is None:
                sem = self._semaphores[loop] = asyncio.Semaphore(self.concurrency)
            return sem

    def _downgrade(self, rejected: Mode) -> None:
        """Remember that the endpoint refused `rejected`, so later calls (of any judge on it) start lower."""
        with _ENDPOINT_LOCK:
            if _ENDPOINT_MODES.get(self._endpoint, MODES[0]) == rejected:
                _ENDPOINT_MODES[self._endpoint] = MODES[MODES.index(rejected) + 1]

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, _MAX_BACKOFF)
        ceiling = min(_MAX_BACKOFF, self.backoff_base * 2**attempt)
        return random.uniform(ceiling / 2, ceiling)


def _known_window(model: str) -> int | None:
    """The model's input context length as litellm's bundled model map knows it, or None (any
    self-hosted model: then no automatic split unless `context_window` is given)."""
    known = load_litellm().model_cost
    for name in (model, model.split("/", 1)[-1]):
        info = known.get(name)
        if isinstance(info, dict):
            window = info.get("max_input_tokens") or info.get("max_tokens")
            return int(window) if window else None
    return None


def _asks(part: Part) -> bool:
    return bool(part.indices) or part.sample_level


def _assemble(collected: Reading, aspects: frozenset[Aspect], n_contexts: int) -> Verdicts:
    contexts = [ContextVerdict.model_validate(collected.verdicts[i]) for i in sorted(collected.verdicts)]
    claims = None
    if collected.claims is not None:
        claims = [ClaimVerdict.model_validate(c) for c in collected.claims]
    verdicts = Verdicts(contexts=contexts, missing=collected.missing or [], claims=claims)
    return check_verdicts(verdicts, n_contexts, aspects)


def _spent_tokens(answer: _Answer, messages: list[dict[str, str]], counter: TokenCounter) -> int:
    """Tokens a call cost, for the budget: the provider's count, or our own when it reports none."""
    spent = answer.input_tokens + answer.output_tokens
    if spent:
        return spent
    return counter(_text(messages)) + counter(answer.content)


def _text(messages: list[dict[str, str]]) -> str:
    """A conversation's text, as it is counted for a context window or a budget."""
    return "\n".join(m["content"] for m in messages)


def _rejects_format(exc: BaseException, status: int | None) -> bool:
    """A 4xx/5xx whose message is about the structured-output request (not an outage: that names none)."""
    if status is None or not 400 <= status < 600 or status in _NOT_FORMAT:
        return False
    text = str(exc).lower()
    return any(word in text for word in _FORMAT_WORDS) or (status in (400, 422) and "schema" in text)


def _auth_failure(exc: BaseException, status: int | None, litellm: Any) -> bool:
    # From litellm.exceptions: litellm's top level exports PermissionDeniedError only from about 1.7x on.
    errors = litellm.exceptions
    if isinstance(exc, errors.AuthenticationError | errors.PermissionDeniedError) or status in (401, 403):
        return True
    # A missing key is often reported without a status (raised before sending) or as a 500 by a proxy.
    return (status is None or status >= 500) and bool(_AUTH_WORDS.search(str(exc)))


def _unavailable(exc: BaseException, status: int | None, litellm: Any) -> bool:
    if isinstance(exc, litellm.exceptions.APIConnectionError):
        return True
    return status is not None and (status >= 500 or status == 408)


def _short(exc: BaseException | str, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _merge(parts: list[Verdicts]) -> Verdicts:
    """Per-aspect answers as one: context fields merged by index, the first non-empty reason kept."""
    by_index: dict[int, dict[str, Any]] = {}
    missing: list[str] = []
    claims = None
    for verdicts in parts:
        for v in verdicts.contexts:
            merged = by_index.setdefault(v.index, {"index": v.index})
            for name, value in v.model_dump().items():
                if value not in (None, "") and merged.get(name) in (None, ""):
                    merged[name] = value
        missing += verdicts.missing
        claims = verdicts.claims if verdicts.claims is not None else claims
    contexts = [ContextVerdict.model_validate(by_index[i]) for i in sorted(by_index)]
    return Verdicts(contexts=contexts, missing=missing, claims=claims)
