"""Judges: who gives the verdicts. The LLM judge (litellm) and the offline local judge."""

from ragtrace.judges.base import Judge, Judgement, JudgeRequest
from ragtrace.judges.cache import VerdictCache
from ragtrace.judges.errors import (
    JudgeAuthFailed,
    JudgeError,
    JudgeInvalidOutput,
    JudgeTimeout,
    JudgeUnavailable,
    OverBudget,
    RateLimited,
)
from ragtrace.judges.identity import JUDGE_ID, JudgeIdentity, judge_id, judge_identity
from ragtrace.judges.limits import DailyTokenBudget, RateLimiter
from ragtrace.judges.llm import LLMJudge
from ragtrace.judges.resolve import JudgeSpecError, check_judge_spec
from ragtrace.judges.run import SampleScores, judge_and_score


def __getattr__(name: str) -> object:
    # The local judge is imported on first use: its model stack (numpy, tokenizers) is an optional extra.
    if name == "LocalJudge":
        from ragtrace.judges.local import LocalJudge

        return LocalJudge
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "JUDGE_ID",
    "DailyTokenBudget",
    "Judge",
    "JudgeAuthFailed",
    "JudgeError",
    "JudgeIdentity",
    "JudgeInvalidOutput",
    "JudgeRequest",
    "JudgeSpecError",
    "JudgeTimeout",
    "JudgeUnavailable",
    "Judgement",
    "LLMJudge",
    "LocalJudge",
    "OverBudget",
    "RateLimited",
    "RateLimiter",
    "SampleScores",
    "VerdictCache",
    "check_judge_spec",
    "judge_and_score",
    "judge_id",
    "judge_identity",
]
