"""`resolve_judge` and `is_local_judge`: one reading of a judge spec for the CLI, the live setup and the gateway."""

from __future__ import annotations

import asyncio

import pytest

from ragtrace.judges import LLMJudge, judge_and_score
from ragtrace.judges.local import LocalJudge
from ragtrace.judges.resolve import is_local_judge, resolve_judge
from ragtrace.scoring import ContextRecall, RagSample
from tests.servers.judge import JudgeServer


@pytest.mark.parametrize(
    ("spec", "local"),
    [("local", True), (" local ", True), ("local/all-MiniLM-L6-v2", True), ("openai/gpt-4o-mini", False),
     ("localai/model", False), ("", False)],
)
def test_is_local_judge(spec: str, local: bool) -> None:
    assert is_local_judge(spec) is local


def test_a_judge_object_is_not_a_local_spec_and_resolves_to_itself() -> None:
    judge = LocalJudge()
    assert is_local_judge(judge) is False
    assert resolve_judge(judge) is judge


def test_api_base_is_ignored_by_the_local_judge() -> None:
    assert isinstance(resolve_judge("local", api_base="http://127.0.0.1:9/v1"), LocalJudge)


def test_api_base_reaches_a_litellm_judge(judge_server: JudgeServer) -> None:
    judge = resolve_judge("openai/judge-test", api_base=judge_server.url + "/v1", api_key="sk-test")
    assert isinstance(judge, LLMJudge)
    sample = RagSample(query="q?", contexts=["Paris is in France."], ground_truth="Paris is in France.")
    result = asyncio.run(judge_and_score(sample, [ContextRecall()], judge))
    assert result.results[0].score == 1.0
    assert len(judge_server.requests) == 1


@pytest.mark.parametrize("spec", ["", "   "])
def test_an_empty_spec_is_a_clear_error(spec: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        resolve_judge(spec)


def test_llm_options_reach_a_litellm_judge_only() -> None:
    options = {"timeout": 240.0, "max_tokens": 512, "contexts_per_call": 3}
    judge = resolve_judge("openai/judge-test", llm_options=options)
    assert isinstance(judge, LLMJudge)
    assert (judge.timeout, judge.max_tokens, judge.contexts_per_call) == (240.0, 512, 3)
    assert isinstance(resolve_judge("local", llm_options=options), LocalJudge)
