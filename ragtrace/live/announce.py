"""What ragtrace says to the person who set it up: once at setup, what it will do; at shutdown, when it
scored nothing, why. Logged on the `ragtrace` logger at INFO; when the app has not configured logging at
all (no handler anywhere, where INFO would go nowhere), written to stderr, so a first integration is never
silent about a sample rate that scores nothing."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping

from ragtrace._logs import ragtrace_logger
from ragtrace.judges.base import Judge

logger = ragtrace_logger("ragtrace")

#: Why a trace was not scored, per decision count (`ragtrace.evaluation.decisions`).
_WHY = {
    "not_sampled": "not sampled (sample_rate={rate:g}: {share}; sample_rate=1.0 scores every trace)",
    "not_rag": "no retrieval span ragtrace reads (`ragtrace explain FILE` on an export says span by span why)",
    "queue_full": "dropped: the scoring queue was full",
    "timeout": "the judge did not answer within score_deadline",
    "error": "the judge failed",
    "late_span": "spans that came after their trace was scored",
}


_WORKERS = {"process": "in a scoring process of its own", "thread": "in a thread of this process"}


def say(message: str, level: int = logging.INFO) -> None:
    """On the `ragtrace` logger (INFO unless told); stderr when logging is not configured at all."""
    if logger.hasHandlers():
        logger.log(level, message)
    else:
        sys.stderr.write(message + "\n")


def judge_description(judge: Judge) -> str:
    return f"judge {getattr(judge, 'model', type(judge).__name__)} (prompt {getattr(judge, 'prompt_version', '?')})"


def setup_line(*, placement: str, worker: str, judge: Judge, sample_rate: float, scores_to: str) -> str:
    """The one line said at setup: where ragtrace sits, what scores, with which judge, how much, and where
    the scores go."""
    return (
        f"ragtrace: scoring {sample_rate:.0%} of traces (sample_rate={sample_rate:g}) with "
        f"{judge_description(judge)}, {_WORKERS.get(worker, worker)} (worker={worker}), {placement}; scores go "
        f"on the spans "
        f"exported to {scores_to}"
    )


def nothing_scored_line(decisions: Mapping[str, int], sample_rate: float) -> str | None:
    """At shutdown: why nothing was scored, with the decision counts; None when something was."""
    if decisions.get("scored", 0):
        return None
    share = f"about 1 trace in {1 / sample_rate:.0f} is scored" if sample_rate > 0 else "no trace is scored"
    reasons = [
        f"{n} {_WHY.get(name, name).format(rate=sample_rate, share=share)}"
        for name, n in sorted(decisions.items(), key=lambda kv: -kv[1])
        if n
    ]
    why = "; ".join(reasons) if reasons else "no trace with a root span reached ragtrace"
    return f"ragtrace: scored nothing: {why} (decisions {dict(decisions)})"


__all__ = ["nothing_scored_line", "say", "setup_line"]
