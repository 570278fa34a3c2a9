"""Every way a judge can fail to answer, as one tree of exceptions.

    JudgeError              judge_error           anything else a judge call ended with
    ├── JudgeTimeout        judge_timeout         one call ran past its timeout and was cancelled
    ├── JudgeInvalidOutput  judge_invalid_output  no usable answer after the retries it was given
    ├── RateLimited         rate_limited          the provider kept answering 429
    ├── OverBudget          over_budget           the daily token budget is spent
    ├── JudgeUnavailable    judge_unavailable     5xx or connection errors after every retry
    └── JudgeAuthFailed     judge_auth            credentials refused or missing: no retry can help

The second column is `code`, the `ragtrace.eval.error` value a span carries. Every error holds the
`JudgeUsage` spent before it, so a failed sample still counts its calls and tokens.
"""

from __future__ import annotations

from ragtrace.scoring import JUDGE_TIMEOUT, JudgeUsage

__all__ = [
    "JudgeAuthFailed",
    "JudgeError",
    "JudgeInvalidOutput",
    "JudgeTimeout",
    "JudgeUnavailable",
    "OverBudget",
    "RateLimited",
]


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


class JudgeUnavailable(JudgeError):
    """The judge endpoint kept failing (5xx or connection errors) after every retry."""

    code = "judge_unavailable"


class JudgeAuthFailed(JudgeError):
    """The provider refused the credentials, or none were configured: no retry can fix that."""

    code = "judge_auth"
