"""The judge interface: one request for one sample, an answer of validated verdicts plus usage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ragtrace.scoring import Aspect, JudgeUsage, RagSample, Verdicts


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
    """Anything that turns a `JudgeRequest` into a `Judgement`, or raises a `JudgeError`
    (`ragtrace.judges.errors`).

    `fused` judges answer every aspect in one call; others are asked once per scorer.
    """

    model: str
    prompt_version: str
    fused: bool

    async def judge(self, request: JudgeRequest) -> Judgement: ...

