"""One answer from the model, whatever it takes: the budget and the rate limit are checked, the
strongest structured-output mode the endpoint accepts is asked for (a refusal steps down a mode, for
every judge on that endpoint), transport failures are retried with backoff, a call that runs past its
timeout is cancelled, and everything else ends as a typed `JudgeError` carrying the usage spent so far.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from opentelemetry import context as otel_context

from ragtrace._state import PerProcessState, fresh_lock
from ragtrace._untraced import suppress_tracing
from ragtrace.judges.errors import (
    JudgeAuthFailed,
    JudgeError,
    JudgeTimeout,
    JudgeUnavailable,
    OverBudget,
    RateLimited,
)
from ragtrace.judges.limits import DailyTokenBudget, RateLimiter
from ragtrace.judges.llm.failures import AUTH_HINT, Failure, Scrubber, backoff, classify, retry_after
from ragtrace.judges.llm.part import Part
from ragtrace.judges.llm.prompt import Prompt, TokenCount
from ragtrace.judges.llm.schema import Mode, endpoint_mode, response_format, step_down
from ragtrace.judges.llm.streaming import note_timeout
from ragtrace.judges.llm.transport import Answer, Call, Transport, conversation_text
from ragtrace.scoring import JudgeUsage

Render = Callable[[Mode], Prompt]  # the prompt of one question, in the mode the endpoint accepts
Note = Callable[[str], None]  # counts a path taken (`LLMJudge.path_counts`)


@dataclass
class Tally:
    """What one `judge()` has spent so far; becomes the `JudgeUsage` of its answer or its error."""

    model: str
    version: str
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    started: float = field(default_factory=time.perf_counter)

    def add(self, answer: Answer) -> None:
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


@dataclass(frozen=True)
class CallLimits:
    """How far one answer may go: per-call timeout, transport retries and their backoff, calls in flight."""

    timeout: float = 30.0
    max_retries: int = 3
    backoff_base: float = 0.5
    concurrency: int = 8


class ModelCaller(PerProcessState):
    """Gets one answer through `transport`, for the endpoint (api_base, model) it is sent to."""

    # Semaphores belong to the event loops of this process; another process makes its own.
    _per_process: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "_lock": fresh_lock,
        "_semaphores": lambda _caller: weakref.WeakKeyDictionary(),
    }

    def __init__(
        self,
        transport: Transport,
        endpoint: tuple[str, str],
        limits: CallLimits,
        *,
        count: TokenCount,
        scrub: Scrubber,
        note: Note,
        budget: DailyTokenBudget | None = None,
        rate_limiter: RateLimiter | None = None,
        reason_chars: int,
    ) -> None:
        self.transport = transport
        self.endpoint = endpoint
        self.limits = limits
        self.budget = budget
        self.rate_limiter = rate_limiter
        self.reason_chars = reason_chars
        self._count = count
        self._scrub = scrub
        self._note = note
        self._lock = fresh_lock(self)
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def mode(self) -> Mode:
        return endpoint_mode(self.endpoint)

    async def complete(
        self, render: Render, history: list[dict[str, str]], part: Part, tally: Tally, temperature: float,
        max_tokens: int,
    ) -> Answer:
        """One answer to `render`'s prompt followed by `history`."""
        attempt = 0
        while True:
            mode = self.mode
            fmt = response_format(part, mode, self.reason_chars)
            call = Call(render(mode).messages + history, temperature, max_tokens, fmt)
            await self._admit(tally)
            try:
                answer = await self._send(call, tally)
            except Exception as exc:
                failure = classify(exc, format_requested=fmt is not None)
                if failure is Failure.FORMAT_REFUSED:
                    self._note("format_stepdowns")
                    step_down(self.endpoint, mode)
                    continue
                await asyncio.sleep(self._retry_wait(exc, failure, attempt, tally))
                attempt += 1
                continue
            tally.add(answer)
            if self.budget is not None:
                self.budget.spend(_spent_tokens(answer, call.messages, self._count))
            return answer

    async def _admit(self, tally: Tally) -> None:
        if self.budget is not None and self.budget.exhausted():
            raise OverBudget(f"daily judge token budget of {self.budget.limit} is spent", tally.usage())
        if self.rate_limiter is not None:
            await self.rate_limiter.acquire()

    async def _send(self, call: Call, tally: Tally) -> Answer:
        """The call, with the judge's own instrumentation suppressed, counted, gated and timed out."""
        token = suppress_tracing()
        try:
            async with self._semaphore():
                tally.calls += 1
                self._note("calls")
                async with asyncio.timeout(self.limits.timeout):
                    return await self.transport.complete(call)
        finally:
            otel_context.detach(token)  # type: ignore[arg-type]

    def _retry_wait(self, exc: Exception, failure: Failure, attempt: int, tally: Tally) -> float:
        """Seconds to wait before retrying after `exc`, or the typed error that ends the answer."""
        limits = self.limits
        if failure is Failure.TIMEOUT:
            self._note("timeouts")
            note_timeout(self.endpoint)  # its later calls stream, so that a cancel frees the server
            raise JudgeTimeout(
                f"judge call timed out after {limits.timeout:g}s (raise it with --judge-timeout / "
                "RAGTRACE_JUDGE_TIMEOUT, or ask less per call with contexts_per_call)",
                tally.usage(),
            ) from exc
        if failure is Failure.AUTH:
            model = self.endpoint[1]
            raise JudgeAuthFailed(
                f"the judge {model} refused the credentials: {self._scrub(exc)}; {AUTH_HINT}", tally.usage()
            ) from exc
        if not failure.retryable:
            raise JudgeError(f"judge call failed: {self._scrub(exc)}", tally.usage()) from exc
        wait = retry_after(exc)
        # A server that asks for a longer wait than a whole call may take is not waited for: the
        # sample would outlive its timeout asleep, and an earlier retry only meets the same refusal.
        too_long = wait is not None and wait > limits.timeout
        if attempt >= limits.max_retries or too_long:
            asked = f" (the server asked to wait {wait:g}s)" if too_long else ""
            kind = RateLimited if failure is Failure.RATE_LIMITED else JudgeUnavailable
            what = "rate limited" if failure is Failure.RATE_LIMITED else "unavailable"
            raise kind(f"judge {what} after {attempt + 1} attempts{asked}: {self._scrub(exc)}", tally.usage()) from exc
        self._note("transport_retries")
        return backoff(attempt, wait, limits.backoff_base)

    def _semaphore(self) -> asyncio.Semaphore:
        """One semaphore per event loop (asyncio primitives cannot cross loops)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            sem = self._semaphores.get(loop)
            if sem is None:
                sem = self._semaphores[loop] = asyncio.Semaphore(self.limits.concurrency)
            return sem


def _spent_tokens(answer: Answer, messages: list[dict[str, str]], count: TokenCount) -> int:
    """Tokens a call cost, for the budget: the provider's count, or our own when it reports none."""
    spent = answer.input_tokens + answer.output_tokens
    if spent:
        return spent
    return count(conversation_text(messages)) + count(answer.content)
