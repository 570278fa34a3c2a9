"""The LLM judge: any litellm provider, one fused call per sample when it fits, validated and completed.

One `judge()` is: cache lookup -> a plan (`planning`: one call, or per aspect and per chunk of contexts
when the prompt would not fit the model's context) -> per call, a dialogue (`dialogue`) that keeps the
well-formed verdicts of each answer and asks again only for the rest, each answer got by the caller
(`calls`: budget, rate limit, structured-output mode, transport retries, timeout) through the transport
(`transport`: litellm) -> `check_verdicts` on the whole, cached. The pieces are built here from the
judge's settings; everything that can fail ends as a `ragtrace.judges.errors.JudgeError`.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import Counter
from typing import Any

from pydantic import ValidationError

from ragtrace._checks import count
from ragtrace._state import PerProcessState
from ragtrace.judges.base import Judgement, JudgeRequest
from ragtrace.judges.cache import CachedVerdicts, VerdictCache, cache_key
from ragtrace.judges.errors import JudgeError, JudgeInvalidOutput
from ragtrace.judges.limits import DailyTokenBudget, RateLimiter
from ragtrace.judges.llm.calls import CallLimits, ModelCaller, Tally
from ragtrace.judges.llm.dialogue import Dialogue, Persistence
from ragtrace.judges.llm.failures import Scrubber, short
from ragtrace.judges.llm.part import FUSED_VERSION, PER_ASPECT_VERSION, REASON_CHARS, version_for
from ragtrace.judges.llm.planning import Planner
from ragtrace.judges.llm.prompt import Prompting, prompt_digest
from ragtrace.judges.llm.reading import Reading
from ragtrace.judges.llm.routing import default_transport
from ragtrace.judges.llm.schema import Mode
from ragtrace.judges.llm.tracing import JudgeTraces, TracedTransport
from ragtrace.judges.llm.transport import TokenCounter, Transport, load_litellm
from ragtrace.scoring import Aspect, ContextVerdict, JudgeUsage, Verdicts, check_verdicts
from ragtrace.scoring.verdicts import ClaimVerdict

__all__ = ["SAMPLING_KEYWORDS", "LLMJudge"]

#: litellm keywords that change what a model answers, part of the judge's id (`identity_settings`);
#: others (headers, timeouts, keys, endpoints) change how it is reached, not what it says.
SAMPLING_KEYWORDS = frozenset({
    "top_p", "top_k", "seed", "frequency_penalty", "presence_penalty", "repetition_penalty", "logit_bias",
    "stop", "reasoning_effort", "thinking", "min_p", "extra_body",
})


class LLMJudge(PerProcessState):
    """A `Judge` backed by any litellm model string (`openai/...`, `anthropic/...`, `ollama/...`, ...).

    `fused=True` answers every requested aspect in one call; `fused=False` asks once per aspect. When a
    fused prompt would not fit the model's context (`context_window`, else what litellm knows of the
    model), the request is split per aspect and then into chunks of contexts; `contexts_per_call` forces
    chunks of that many contexts (small local models answer short questions faster and better).
    `max_tokens` caps each answer (default: derived from what the call asks); `timeout` bounds each call,
    whose request is cancelled, not left running: `stream=True` lets the server see the cancel, `None`
    (default) streams only to a local model server or an endpoint that has timed out (`streaming`).
    `cache=True` (default) keeps a bounded in-memory `VerdictCache`; pass one to share it, or
    False/None to disable. Extra keyword arguments go to `litellm.acompletion` unchanged.
    `openai/...` models go over aiohttp (`openai_http`), the others through litellm (`routing`); `transport`
    replaces either (`transport.Transport`, e.g. `LiteLLMTransport`); api_base still names the endpoint.
    `traces` (`tracing.JudgeTraces`, off by default) records each judgement and its calls as spans on a
    tracer provider that is not the app's, and the scores name that trace (`ragtrace.judge.trace_id`).
    `path_counts()` says how often each fallback (format step-down, follow-up, retry, ...) was taken.
    `identity_settings()` lists what its `ragtrace.judge.id` digests (`ragtrace.judges.judge_identity`).
    """

    identity_kind = "llm"

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
        stream: bool | None = None,
        cache: VerdictCache | bool | None = True,
        temperature: float = 0.0,
        temperature_step: float = 0.3,
        backoff_base: float = 0.5,
        transport: Transport | None = None,
        traces: JudgeTraces | None = None,
        **litellm_kwargs: Any,
    ) -> None:
        _check_settings(concurrency, reason_chars, timeout, max_tokens, contexts_per_call, context_window)
        self.model = model
        self.fused = fused
        self.prompt_version = FUSED_VERSION if fused else PER_ASPECT_VERSION
        self.timeout, self.stream, self.concurrency, self.backoff_base = timeout, stream, concurrency, backoff_base
        self.max_retries = max(0, max_retries)
        self.max_invalid_retries = max(0, max_invalid_retries)
        self.max_followups = max(0, max_followups)
        self.context_token_budget, self.max_tokens, self.reason_chars = context_token_budget, max_tokens, reason_chars
        self.contexts_per_call, self.context_window = contexts_per_call, context_window
        self.temperature, self.temperature_step = temperature, temperature_step
        self.rate_limiter = RateLimiter(requests_per_minute) if requests_per_minute else None
        self.budget = (
            DailyTokenBudget(daily_token_budget) if isinstance(daily_token_budget, int) else daily_token_budget
        )
        self.cache: VerdictCache | None = (
            VerdictCache() if cache is True else (cache if isinstance(cache, VerdictCache) else None)
        )
        self._api_base = api_base
        self._sampling = {k: v for k, v in litellm_kwargs.items() if k in SAMPLING_KEYWORDS}
        self._paths: Counter[str] = Counter()
        self._lock = threading.Lock()
        if transport is None:
            transport = default_transport(
                model, api_base=api_base, api_key=api_key, timeout=timeout, stream=stream, **litellm_kwargs
            )
        self.traces = traces
        if traces is not None:  # each call a span of the judge's own trace, on a provider that is not the app's
            transport = TracedTransport(transport, traces, model)
        self.transport = transport
        self._wire(Scrubber(api_key, litellm_kwargs))

    def _wire(self, scrub: Scrubber) -> None:
        """The pieces a judgement goes through, made from this judge's settings."""
        counter = TokenCounter(self.model)
        prompting = Prompting(counter, self.context_token_budget, self.reason_chars, self.max_tokens)
        limits = CallLimits(self.timeout, self.max_retries, self.backoff_base, self.concurrency)
        self._caller = ModelCaller(
            self.transport, (self._api_base or "", self.model), limits, count=counter, scrub=scrub,
            note=self._note, budget=self.budget, rate_limiter=self.rate_limiter, reason_chars=self.reason_chars,
        )
        self._planner = Planner(
            self.model, prompting, context_window=self.context_window, contexts_per_call=self.contexts_per_call,
            note=self._note,
        )
        persistence = Persistence(self.max_followups, self.max_invalid_retries, self.temperature, self.temperature_step)
        self._dialogue = Dialogue(self._caller, prompting, persistence, self._note)

    def __repr__(self) -> str:  # never shows the api key
        return f"LLMJudge(model={self.model!r}, fused={self.fused}, mode={self.mode!r})"

    @property
    def mode(self) -> Mode:
        """The structured-output mode this endpoint was found to accept (starts at json_schema).

        Remembered per endpoint (api_base and model) in this process, so a second judge on the same
        server does not probe again."""
        return self._caller.mode

    def identity_settings(self) -> dict[str, Any]:
        """The settings that change verdicts (and so `ragtrace.judge.id`): sampling, answer and context
        caps, how contexts are split, and the digest of the prompt text. Not the endpoint, timeouts,
        retries or concurrency: they change whether and when an answer comes, not what it says."""
        return {
            "temperature": self.temperature,
            "temperature_step": self.temperature_step,
            "max_tokens": self.max_tokens,
            "reason_chars": self.reason_chars,
            "context_token_budget": self.context_token_budget,
            "contexts_per_call": self.contexts_per_call,
            "context_window": self.context_window,
            "prompt": prompt_digest(self.fused, self.reason_chars),
            "sampling": dict(sorted(self._sampling.items())),
        }

    def path_counts(self) -> dict[str, int]:
        """How often each path was taken since this judge was made: `calls`, `format_stepdowns`,
        `transport_retries`, `timeouts`, `invalid_retries`, `temperature_steps`, `followup_calls`,
        `cut_answers_read`, `repeated_answers`, `split_per_aspect`, `chunked_requests`, `judged`, `failed`."""
        with self._lock:
            return dict(self._paths)

    def _note(self, path: str) -> None:
        with self._lock:
            self._paths[path] += 1

    # --- the Judge protocol ----------------------------------------------------------------------------

    async def judge(self, request: JudgeRequest) -> Judgement:
        if "litellm" not in sys.modules:  # the first import takes seconds: keep it off the event loop
            await asyncio.to_thread(load_litellm)
        if self.traces is None:
            return await self._judged(request)
        with self.traces.judgement(self.model, self.prompt_version) as trace_id:
            try:
                judgement = await self._judged(request)
            except JudgeError as exc:
                exc.usage = exc.usage.model_copy(update={"judge_trace_id": trace_id})
                raise
        usage = judgement.usage.model_copy(update={"judge_trace_id": trace_id})
        return Judgement(judgement.verdicts, usage, judgement.truncated)

    async def _judged(self, request: JudgeRequest) -> Judgement:
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
                part = await self._judge_one(JudgeRequest(request.sample, frozenset({aspect}), request.reference))
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

    async def _judge_one(self, request: JudgeRequest) -> Judgement:
        """One question (all of the request's aspects at once), from the cache or in one or a few calls."""
        version = version_for(request.aspects, self.fused)
        key = self._key(request, version) if self.cache is not None else None
        if key is not None and self.cache is not None and (hit := self.cache.get(key)) is not None:
            usage = JudgeUsage(model=self.model, prompt_version=version, cache_hits=1)
            return Judgement(hit.verdicts, usage, hit.truncated)
        tally = Tally(self.model, version)
        collected = Reading()
        truncated: set[int] = set()
        for part in self._planner.plan(request, version, self.mode):
            await self._dialogue.answer(request, part, version, tally, collected, truncated)
        try:
            verdicts = _assemble(collected, request.aspects, len(request.sample.contexts))
        except (ValueError, ValidationError) as exc:  # InvalidVerdicts is a ValueError
            raise JudgeInvalidOutput(f"invalid judge answer: {short(exc)}", tally.usage()) from exc
        cut = tuple(sorted(truncated))
        if key is not None and self.cache is not None:
            self.cache.put(key, CachedVerdicts(verdicts, cut))
        return Judgement(verdicts, tally.usage(), cut)

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
                f"k={self.contexts_per_call};w={self._planner.window}"
            ),
        )


def _check_settings(
    concurrency: int,
    reason_chars: int,
    timeout: float,
    max_tokens: int | None,
    contexts_per_call: int | None,
    context_window: int | None,
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


def _assemble(collected: Reading, aspects: frozenset[Aspect], n_contexts: int) -> Verdicts:
    contexts = [ContextVerdict.model_validate(collected.verdicts[i]) for i in sorted(collected.verdicts)]
    claims = None
    if collected.claims is not None:
        claims = [ClaimVerdict.model_validate(c) for c in collected.claims]
    verdicts = Verdicts(contexts=contexts, missing=collected.missing or [], claims=claims)
    return check_verdicts(verdicts, n_contexts, aspects)


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
