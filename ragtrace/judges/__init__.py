"""Judges: who gives the verdicts. The LLM judge (litellm) and the offline local judge."""

from ragtrace.judges.base import (
    Judge,
    JudgeError,
    JudgeInvalidOutput,
    Judgement,
    JudgeRequest,
    JudgeTimeout,
    OverBudget,
    RateLimited,
)
from ragtrace.judges.run import SampleScores, judge_and_score

__all__ = [
    "Judge",
    "JudgeError",
    "JudgeInvalidOutput",
    "JudgeRequest",
    "JudgeTimeout",
    "Judgement",
    "OverBudget",
    "RateLimited",
    "SampleScores",
    "judge_and_score",
]
