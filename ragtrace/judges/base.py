"""The judge interface: one request for one sample, an answer of validated verdicts plus usage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ragtrace.scoring import JUDGE_TIMEOUT, Aspect, JudgeUsage, RagSample, Verdicts


@dataclass(frozen=True)
class JudgeRequest:
    """What to judge. `reference` is the answer usefulness is judged against (precision only)."""

    sample: RagSample
    aspects: frozenset[Aspect]
    reference: str | None = None


@dataclass(frozen=True)
class Judgement:
    """A judge's validated answer. `truncated` lists the context indices cut to the token budget."""

    verdicts: Verdicts
    usage: JudgeUsage
    truncated: tuple[int, ...] = field(default=())


@runtime_checkable
class Judge(Protocol):
    """Anything that turns a `JudgeRequest` into a `Judgement`, or raises a `JudgeError`.

    `fused` judges answer every aspect in one call; others are asked once per scorer.
    """

    model: str
    prompt_version: str
    fused: bool

    async def judge(self, request: JudgeRequest) -> Judgement: ...


class JudgeError(Exception):
    """A judge could not answer. `code` is the machine-readable `ragtrace.eval.error` value."""

    code: str = "judge_error"

    def __init__(self, message: str, usage: JudgeUsage | None = None) -> None:
        super().__init__(message)
        self.usage = usage or JudgeUsage()


class JudgeTimeout(JudgeError):
    code = JUDGE_TIMEOUT


class JudgeInvalidOutput(JudgeError):
    code = "judge_invalid_output"


class RateLimited(JudgeError):
    code = "rate_limited"


class OverBudget(JudgeError):
    code = "over_budget"
