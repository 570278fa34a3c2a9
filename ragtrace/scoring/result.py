"""What a scorer returns, and what the judge spent to get there."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SkipReason = Literal["no_context", "no_ground_truth", "no_claims", "no_response"]
Label = Literal["pass", "fail"]

#: The `error` of a result that has no score because its deadline passed (the judge was too slow).
JUDGE_TIMEOUT = "judge_timeout"
#: Its message (the result's reason is "not scored: " + this).
DEADLINE_PASSED = "no score before the deadline"


class JudgeUsage(BaseModel):
    """Cost of the judge calls behind a result. A fused call is shared by the results it served."""

    model_config = ConfigDict(frozen=True)

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    latency_ms: float = 0.0
    model: str = ""
    prompt_version: str = ""
    cache_hits: int = 0
    # `ragtrace.judge.id` of the judge that answered (ragtrace.judges.judge_identity); "" when none did.
    judge_id: str = ""
    # The trace of the judge's own work (hex), when judge traces are on (`ragtrace.judge.trace_id`).
    judge_trace_id: str = ""

    def __add__(self, other: JudgeUsage) -> JudgeUsage:
        cost = None if self.cost_usd is None and other.cost_usd is None else (
            (self.cost_usd or 0.0) + (other.cost_usd or 0.0)
        )
        return JudgeUsage(
            calls=self.calls + other.calls,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=cost,
            latency_ms=self.latency_ms + other.latency_ms,
            model=self.model or other.model,
            prompt_version=self.prompt_version or other.prompt_version,
            cache_hits=self.cache_hits + other.cache_hits,
            judge_id=self.judge_id or other.judge_id,
            judge_trace_id=self.judge_trace_id or other.judge_trace_id,
        )


class ScoreResult(BaseModel):
    """One scorer's verdict on one sample: a score, or the machine-readable reason there is none."""

    model_config = ConfigDict(frozen=True)

    name: str
    score: float | None = None
    label: Label | None = None
    reason: str = ""
    skipped: SkipReason | None = None
    error: str | None = Field(default=None, description="judge_timeout, judge_invalid_output, ...")
    error_message: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    usage: JudgeUsage = Field(default_factory=JudgeUsage)

    @property
    def status(self) -> Literal["scored", "skipped", "error"]:
        if self.error is not None:
            return "error"
        if self.skipped is not None:
            return "skipped"
        return "scored"

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def timed_out(name: str) -> ScoreResult:
    """The result of scorer `name` when no score arrived before the deadline: the same wherever it is made."""
    return ScoreResult(
        name=name, error=JUDGE_TIMEOUT, error_message=DEADLINE_PASSED, reason=f"not scored: {DEADLINE_PASSED}"
    )
