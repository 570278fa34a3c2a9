"""The timed-out result is one value wherever a deadline passes (the thread worker, the live pipeline)."""

from ragtrace.judges.errors import JudgeTimeout
from ragtrace.scoring import JUDGE_TIMEOUT, ContextRecall, timed_out


def test_timed_out_is_an_error_result_with_the_judge_timeout_code() -> None:
    result = timed_out("context_recall")
    assert result.status == "error"
    assert result.error == JUDGE_TIMEOUT == JudgeTimeout.code
    assert result.reason == "not scored: no score before the deadline"
    assert result == ContextRecall().failed(JUDGE_TIMEOUT, "no score before the deadline")
