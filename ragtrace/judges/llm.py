"""The LLM judge: any litellm provider, one fused call per sample, validated and retried.

One `judge()` is: cache lookup -> budget check -> prompt (contexts cut to a token budget) -> a call in
the strongest structured-output mode the endpoint accepts -> pydantic + `check_verdicts` -> on an invalid
answer, the same conversation plus the validation error, a bounded number of times. Transport failures
(429, 5xx, connection) are retried with backoff; everything else ends as a typed `JudgeError` that
carries the usage spent so far.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from opentelemetry import context as otel_context
from pydantic import ValidationError

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
    Mode,
    Prompt,
    TokenCounter,
    answer_model,
    build_prompt,
    load_litellm,
    parse_json,
    response_format,
    retry_messages,
    version_for,
)
from ragtrace.scoring import Aspect, ContextVerdict, InvalidVerdicts, JudgeUsage, Verdicts, check_verdicts

__all__ = ["JudgeUnavailable", "LLMJudge"]

PER_ASPECT_VERSION = "per-aspect-v1"
_MODES: tuple[Mode, ...] = ("json_schema", "json_object", "text")
_FORMAT_WORDS = ("response_format", "schema", "json_object", "structured", "grammar")
_MAX_BACKOFF = 60.0
_MAX_REASON = 300


class JudgeUnavailable(JudgeError):
    """The judge endpoint kept failing (5xx or connection errors) after every retry."""

    code = "judge_unavailable"


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

    def add(self, response: Any, litellm: Any) -> None:
        usage = getattr(response, "usage", None)
        self.input_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
        self.output_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
        hidden = getattr(response, "_hidden_params", None) or {}
        try:  # litellm prices each response it logs; None means the model's price is unknown
            cost = hidden["response_cost"] if "response_cost" in hidden else (
                litellm.completion_cost(completion_response=response)
            )
        except Exception:  # unknown price: no cost, never an error
            return
        if cost is not None:
            self.cost = (self.cost or 0.0) + float(cost)

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

    `fused=True` answers every requested aspect in one call; `fused=False` asks once per aspect.
    `cache=True` (default) keeps a bounded in-memory `VerdictCache`; pass one to share it, or
    False/None to disable. Extra keyword arguments go to `litellm.acompletion` unchanged.
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
        concurrency: int = 8,
        requests_per_minute: float | None = None,
        daily_token_budget: int | DailyTokenBudget | None = None,
        context_token_budget: int = 400,
        cache: VerdictCache | bool | None = True,
        temperature: float = 0.0,
        backoff_base: float = 0.5,
        **litellm_kwargs: Any,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency!r}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        self.model = model
        self.fused = fused
        self.prompt_version = FUSED_VERSION if fused else PER_ASPECT_VERSION
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.max_invalid_retries = max(0, max_invalid_retries)
        self.concurrency = concurrency
        self.context_token_budget = context_token_budget
        self.temperature = temperature
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
        self._kwargs = litellm_kwargs
        self._count = TokenCounter(model)
        self._mode: Mode = "json_schema"
        self._lock = threading.Lock()
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:  # never shows the api key
        return f"LLMJudge(model={self.model!r}, fused={self.fused}, mode={self._mode!r})"

    @property
    def mode(self) -> Mode:
        """The structured-output mode this endpoint was found to accept (starts at json_schema)."""
        return self._mode

    # --- the Judge protocol ----------------------------------------------------------------------------

    async def judge(self, request: JudgeRequest) -> Judgement:
        if "litellm" not in sys.modules:  # the first import takes seconds: keep it off the event loop
            await asyncio.to_thread(load_litellm)
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

    # --- one question, one (or a few) calls ------------------------------------------------------------

    async def _judge_one(self, request: JudgeRequest) -> Judgement:
        sample, aspects = request.sample, request.aspects
        version = version_for(aspects, self.fused)
        key = self._key(request, version) if self.cache is not None else None
        if key is not None and self.cache is not None and (hit := self.cache.get(key)) is not None:
            usage = JudgeUsage(model=self.model, prompt_version=version, cache_hits=1)
            return Judgement(hit.verdicts, usage, hit.truncated)

        tally = _Tally(self.model, version)
        prompts: dict[Mode, Prompt] = {}

        def render(mode: Mode) -> Prompt:
            if mode not in prompts:
                prompts[mode] = build_prompt(
                    sample,
                    aspects,
                    request.reference,
                    mode=mode,
                    budget=self.context_token_budget,
                    count=self._count,
                    fused=self.fused,
                )
            return prompts[mode]

        history: list[dict[str, str]] = []
        for invalid in range(self.max_invalid_retries + 1):
            content = await self._complete(render, history, aspects, tally)
            try:
                verdicts = _validate(content, aspects, len(sample.contexts))
            except (ValueError, ValidationError) as exc:  # InvalidVerdicts is a ValueError
                if invalid >= self.max_invalid_retries:
                    raise JudgeInvalidOutput(
                        f"invalid judge answer after {invalid + 1} attempts: {_short(exc)}", tally.usage()
                    ) from exc
                history += retry_messages(content, _short(exc, 1500))
                continue
            truncated = next(iter(prompts.values())).truncated  # the same cut in every mode
            if key is not None and self.cache is not None:
                self.cache.put(key, CachedVerdicts(verdicts, truncated))
            return Judgement(verdicts, tally.usage(), truncated)
        raise AssertionError("unreachable")  # pragma: no cover

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
            extra=f"budget={self.context_token_budget};t={self.temperature}",
        )

    async def _complete(
        self,
        render: Callable[[Mode], Prompt],
        history: list[dict[str, str]],
        aspects: frozenset[Aspect],
        tally: _Tally,
    ) -> str:
        """One answer's text: walks down the output modes on rejection, retries transport failures."""
        litellm = load_litellm()
        attempt = 0
        while True:
            mode = self._mode
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
                "temperature": self.temperature,
                "timeout": self.timeout,
                "max_retries": 0,
                "num_retries": 0,
                **self._kwargs,
            }
            if self._api_base is not None:
                kwargs["api_base"] = self._api_base
            if self._api_key is not None:
                kwargs["api_key"] = self._api_key
            if (fmt := response_format(aspects, mode)) is not None:
                kwargs["response_format"] = fmt
            token = suppress_tracing()
            try:
                async with self._semaphore():
                    tally.calls += 1
                    response = await asyncio.wait_for(litellm.acompletion(**kwargs), self.timeout + 2.0)
            except (TimeoutError, litellm.Timeout) as exc:
                raise JudgeTimeout(f"judge call timed out after {self.timeout:g}s", tally.usage()) from exc
            except Exception as exc:
                status = getattr(exc, "status_code", None)
                if mode != "text" and _rejects_format(exc, status):
                    self._downgrade(mode)
                    continue
                retryable = status == 429 or _unavailable(exc, status, litellm)
                if not retryable:
                    raise JudgeError(f"judge call failed: {_short(exc)}", tally.usage()) from exc
                if attempt >= self.max_retries:
                    if status == 429:
                        raise RateLimited(
                            f"judge rate limited after {attempt + 1} attempts: {_short(exc)}", tally.usage()
                        ) from exc
                    raise JudgeUnavailable(
                        f"judge unavailable after {attempt + 1} attempts: {_short(exc)}", tally.usage()
                    ) from exc
                await asyncio.sleep(self._backoff(attempt, _retry_after(exc)))
                attempt += 1
                continue
            finally:
                otel_context.detach(token)  # type: ignore[arg-type]
            tally.add(response, litellm)
            content = str(response.choices[0].message.content or "")
            if self.budget is not None:
                self.budget.spend(_spent_tokens(response, messages, content, self._count))
            return content

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
        """Remember that the endpoint refused `rejected`, so later calls start one mode lower."""
        with self._lock:
            if self._mode == rejected:
                self._mode = _MODES[_MODES.index(rejected) + 1]

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, _MAX_BACKOFF)
        ceiling = min(_MAX_BACKOFF, self.backoff_base * 2**attempt)
        return random.uniform(ceiling / 2, ceiling)


def _spent_tokens(response: Any, messages: list[dict[str, str]], content: str, count: TokenCounter) -> int:
    """Tokens a call cost, for the budget: the provider's count, or our own when it reports none."""
    usage = getattr(response, "usage", None)
    spent = int(getattr(usage, "prompt_tokens", 0) or 0) + int(getattr(usage, "completion_tokens", 0) or 0)
    if spent:
        return spent
    return count("\n".join(m["content"] for m in messages)) + count(content)


def _rejects_format(exc: BaseException, status: int | None) -> bool:
    """A 400/422 that complains about the structured-output request (llama.cpp answers 422)."""
    if status not in (400, 422):
        return False
    text = str(exc).lower()
    return any(word in text for word in _FORMAT_WORDS)


def _unavailable(exc: BaseException, status: int | None, litellm: Any) -> bool:
    if isinstance(exc, litellm.APIConnectionError):
        return True
    return status is not None and (status >= 500 or status == 408)


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _validate(content: str, aspects: frozenset[Aspect], n_contexts: int) -> Verdicts:
    """The answer as checked verdicts, or a ValueError/ValidationError whose text goes back to the judge."""
    if not content.strip():
        raise InvalidVerdicts("the reply was empty; reply with a JSON object")
    answer = answer_model(aspects).model_validate(parse_json(content))
    data = answer.model_dump()
    for verdict in data.get("contexts", []):
        verdict["reason"] = str(verdict.get("reason", ""))[:_MAX_REASON]
    return check_verdicts(Verdicts.model_validate(data), n_contexts, aspects)


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
