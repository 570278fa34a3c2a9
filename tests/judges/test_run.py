"""judge_and_score: whatever the judge raises costs the sample its scores, never the caller."""

from __future__ import annotations

import asyncio

import pytest

from ragtrace.judges import Judgement, JudgeRequest, judge_and_score
from ragtrace.scoring import ContextPrecision, ContextRelevance, RagSample

SAMPLE = RagSample(query="where is the Eiffel Tower?", contexts=["It is in Paris."], response="Paris")


class Raising:
    model, prompt_version, fused = "raising/judge", "v1", True

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def judge(self, request: JudgeRequest) -> Judgement:
        raise self.error


@pytest.mark.parametrize("error", [RuntimeError("bug"), SystemExit(2), KeyboardInterrupt()])
def test_any_judge_failure_is_a_judge_error_result(error: BaseException) -> None:
    scores = asyncio.run(judge_and_score(SAMPLE, [ContextPrecision(), ContextRelevance()], Raising(error)))
    assert [(r.name, r.error) for r in scores.results] == [
        ("context_precision", "judge_error"), ("context_relevance", "judge_error")
    ]
    assert all(type(error).__name__ in (r.error_message or "") for r in scores.results)


def test_a_cancelled_judge_call_stays_cancelled() -> None:
    # Cancellation is how the score deadline cuts a judge call: it must reach the worker, not become a score.
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(judge_and_score(SAMPLE, [ContextPrecision()], Raising(asyncio.CancelledError())))
