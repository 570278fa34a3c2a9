"""What a judge answers, validated before any formula sees it.

Both judges (LLM and local) fill the same schema, so every scorer works with either. A fused answer
carries every field; a per-scorer answer leaves the others empty. `Aspect` names what was asked for.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

RelevanceLevel = Literal["high", "medium", "low", "none"]

LEVEL_WEIGHTS: dict[str, float] = {"high": 1.0, "medium": 0.7, "low": 0.3, "none": 0.0}


class Aspect(StrEnum):
    """A kind of verdict a scorer needs from the judge."""

    USEFULNESS = "usefulness"  # binary, per context, against a reference answer (precision)
    RELEVANCE = "relevance"  # graded level + usage per context, missing info (relevance)
    CLAIMS = "claims"  # ground-truth claims and their support (recall)


class ContextVerdict(BaseModel):
    model_config = ConfigDict(extra="ignore")

    index: int = Field(ge=0, description="0-based position of the context in the retrieved list")
    useful: bool | None = Field(
        default=None, description="useful for producing the reference answer to the query"
    )
    level: RelevanceLevel | None = Field(default=None, description="relevance to the query")
    used: bool | None = Field(default=None, description="the response clearly uses this context")
    reason: str = Field(default="", description="a short justification")
    confidence: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="a graded relevance in [0, 1], when the judge has one (the local judge does)",
    )


class ClaimVerdict(BaseModel):
    model_config = ConfigDict(extra="ignore")

    claim: str
    supported: bool
    context_indices: list[int] = Field(default_factory=list)


class Verdicts(BaseModel):
    """A judge's answer for one sample."""

    model_config = ConfigDict(extra="ignore")

    contexts: list[ContextVerdict] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    claims: list[ClaimVerdict] | None = None


class InvalidVerdicts(ValueError):
    """The judge's answer does not fit the sample; the message is shown to the judge on retry."""


def check_verdicts(verdicts: Verdicts, n_contexts: int, aspects: frozenset[Aspect]) -> Verdicts:
    """Check one verdict per context index 0..n-1 with the fields each aspect needs.

    Returns the verdicts sorted by index. Never repairs positions: a shifted or missing index is an
    invalid answer, because silently re-aligning would attach verdicts to the wrong documents.
    """
    per_context = {Aspect.USEFULNESS, Aspect.RELEVANCE} & aspects
    problems: list[str] = []
    if per_context:
        indices = sorted(v.index for v in verdicts.contexts)
        if indices != list(range(n_contexts)):
            problems.append(
                f"expected exactly one verdict for each context index 0..{n_contexts - 1}, "
                f"got indices {indices}"
            )
        for v in verdicts.contexts:
            if Aspect.USEFULNESS in aspects and v.useful is None:
                problems.append(f"context {v.index}: 'useful' must be true or false")
            if Aspect.RELEVANCE in aspects and v.level is None:
                problems.append(f"context {v.index}: 'level' must be one of high, medium, low, none")
            if Aspect.RELEVANCE in aspects and v.used is None:
                problems.append(f"context {v.index}: 'used' must be true or false")
    if Aspect.CLAIMS in aspects:
        if verdicts.claims is None:
            problems.append("'claims' is required: split the ground truth into atomic claims")
        else:
            for i, claim in enumerate(verdicts.claims):
                bad = [j for j in claim.context_indices if not 0 <= j < n_contexts]
                if bad:
                    problems.append(f"claim {i}: context_indices {bad} out of range 0..{n_contexts - 1}")
    if problems:
        raise InvalidVerdicts("; ".join(problems[:10]))
    return verdicts.model_copy(update={"contexts": sorted(verdicts.contexts, key=lambda v: v.index)})
