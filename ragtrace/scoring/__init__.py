"""The pure scoring core: samples, verdict schemas, formulas, scorers. No I/O, no OpenTelemetry."""

from ragtrace.scoring.result import JUDGE_TIMEOUT, JudgeUsage, ScoreResult, SkipReason, timed_out
from ragtrace.scoring.sample import Document, RagSample
from ragtrace.scoring.scorers import (
    SCORERS,
    ContextPrecision,
    ContextRecall,
    ContextRelevance,
    Scorer,
    default_scorers,
)
from ragtrace.scoring.verdicts import (
    LEVEL_WEIGHTS,
    Aspect,
    ClaimVerdict,
    ContextVerdict,
    InvalidVerdicts,
    RelevanceLevel,
    Verdicts,
    check_verdicts,
)

__all__ = [
    "JUDGE_TIMEOUT",
    "LEVEL_WEIGHTS",
    "SCORERS",
    "Aspect",
    "ClaimVerdict",
    "ContextPrecision",
    "ContextRecall",
    "ContextRelevance",
    "ContextVerdict",
    "Document",
    "InvalidVerdicts",
    "JudgeUsage",
    "RagSample",
    "RelevanceLevel",
    "ScoreResult",
    "Scorer",
    "SkipReason",
    "Verdicts",
    "check_verdicts",
    "default_scorers",
    "timed_out",
]
