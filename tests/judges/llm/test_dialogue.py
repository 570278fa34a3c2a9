"""The retry dialogue and the model caller, driven through `LLMJudge(transport=...)` by a scripted transport.

The real-server tests (tests/judges/llm/test_judge.py) prove the same paths end to end over HTTP; these
pin down what each step sends and counts, one scripted answer or error at a time.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest

from ragtrace.judges import (
    DailyTokenBudget,
    JudgeAuthFailed,
    JudgeError,
    JudgeInvalidOutput,
    Judgement,
    JudgeRequest,
    JudgeTimeout,
    JudgeUnavailable,
    LLMJudge,
    OverBudget,
    RateLimited,
)
from ragtrace.judges.llm.transport import Answer, Call
from ragtrace.scoring import Aspect, RagSample
from tests.judges.llm.fakes import ScriptedTransport, StatusError, fresh_api_base, reply, useful

SAMPLE = RagSample(query="Where is the tower?", contexts=["The tower is in Paris.", "Bananas are yellow."],
                   response="In Paris.", ground_truth="The tower is in Paris.")
USEFULNESS = JudgeRequest(SAMPLE, frozenset({Aspect.USEFULNESS}))


def judge_with(script: list[Answer | BaseException], **kwargs: Any) -> tuple[LLMJudge, ScriptedTransport]:
    transport = ScriptedTransport(script)
    kwargs.setdefault("backoff_base", 0.001)
    judge = LLMJudge("openai/judge-test", api_base=fresh_api_base(), transport=transport, cache=False, **kwargs)
    return judge, transport


def run(judge: LLMJudge, request: JudgeRequest = USEFULNESS) -> Judgement:
    return asyncio.run(judge.judge(request))


def asked_keys(call: Call) -> list[str]:
    assert call.response_format is not None
    schema = call.response_format["json_schema"]["schema"]
    return list(schema["properties"]["contexts"]["required"])


def test_one_good_answer_is_one_call_with_its_usage() -> None:
    judge, transport = judge_with([reply(useful(0, 1), tokens=7)])
    judgement = run(judge)
    assert [v.useful for v in judgement.verdicts.contexts] == [True, False]
    assert (judgement.usage.calls, judgement.usage.input_tokens, judgement.usage.output_tokens) == (1, 7, 7)
    assert asked_keys(transport.calls[0]) == ["0", "1"] and transport.calls[0].temperature == 0.0
    assert judge.path_counts() == {"calls": 1, "judged": 1}


def test_a_partial_answer_is_kept_and_only_the_rest_asked_in_a_fresh_follow_up() -> None:
    judge, transport = judge_with([reply(useful(0)), reply(useful(1))])
    judgement = run(judge)
    assert [v.index for v in judgement.verdicts.contexts] == [0, 1]
    assert asked_keys(transport.calls[1]) == ["1"]
    assert [m["role"] for m in transport.calls[1].messages] == ["system", "user"]  # no history: a new question
    assert judge.path_counts()["followup_calls"] == 1 and judgement.usage.calls == 2


def test_an_unusable_answer_is_shown_back_with_its_error_then_the_temperature_steps() -> None:
    judge, transport = judge_with([reply("not json"), reply("still not json"), reply(useful(0, 1))])
    run(judge)
    retry = transport.calls[1].messages[-2:]
    assert retry[0] == {"role": "assistant", "content": "not json"}
    assert retry[1]["role"] == "user" and "That answer is invalid: the reply is not JSON" in retry[1]["content"]
    assert '"contexts" must have exactly the keys "0", "1"' in retry[1]["content"]
    assert [c.temperature for c in transport.calls] == [0.0, 0.0, 0.3]
    counts = judge.path_counts()
    assert (counts["invalid_retries"], counts["temperature_steps"]) == (2, 1)


def test_retries_run_out_in_a_typed_error_that_counts_every_call() -> None:
    judge, transport = judge_with([reply("no")] * 3, max_invalid_retries=2)
    with pytest.raises(JudgeInvalidOutput, match="after 3 attempts") as caught:
        run(judge)
    assert caught.value.usage.calls == 3 and len(transport.calls) == 3
    assert judge.path_counts()["failed"] == 1


def test_a_cut_answer_is_read_up_to_the_cut_and_the_rest_asked_again() -> None:
    whole = json.dumps(useful(0, 1))
    cut = whole[: whole.index('"1"') + 8]  # context 1's verdict is cut off mid-way
    judge, transport = judge_with([reply(cut, finish="length"), reply(useful(1))])
    judgement = run(judge)
    assert [v.index for v in judgement.verdicts.contexts] == [0, 1]
    assert asked_keys(transport.calls[1]) == ["1"]
    assert judge.path_counts()["cut_answers_read"] == 1


def test_a_refused_format_steps_down_for_every_judge_on_the_endpoint() -> None:
    refusal = StatusError(400, "response_format json_schema is not supported")
    judge, transport = judge_with([refusal, reply(useful(0, 1))])
    run(judge)
    first, second = (c.response_format for c in transport.calls)
    assert first is not None and first["type"] == "json_schema"
    assert second is not None and second["type"] == "json_object" and "schema" in second
    assert judge.mode == "json_object_schema" and judge.path_counts()["format_stepdowns"] == 1
    other = LLMJudge("openai/judge-test", api_base=judge._api_base, transport=ScriptedTransport([]))
    assert other.mode == "json_object_schema"


def test_in_text_mode_the_schema_travels_in_the_prompt() -> None:
    refusals: list[Answer | BaseException] = [StatusError(400, "response_format unsupported")] * 3
    judge, transport = judge_with([*refusals, reply(useful(0, 1))])
    run(judge)
    last = transport.calls[-1]
    assert last.response_format is None and judge.mode == "text"
    assert "JSON schema: " in last.messages[-1]["content"]


def test_an_outage_is_retried_then_answered() -> None:
    judge, _ = judge_with([StatusError(503, "overloaded"), reply(useful(0, 1))])
    assert run(judge).usage.calls == 2
    assert judge.path_counts()["transport_retries"] == 1


def test_an_outage_that_lasts_is_judge_unavailable_after_every_retry() -> None:
    judge, _ = judge_with([StatusError(503, "overloaded")] * 3, max_retries=2)
    with pytest.raises(JudgeUnavailable, match="after 3 attempts") as caught:
        run(judge)
    assert caught.value.usage.calls == 3


def test_a_wait_longer_than_the_timeout_is_rate_limited_at_once() -> None:
    judge, transport = judge_with([StatusError(429, "slow", {"retry-after": "120"})], timeout=5.0)
    with pytest.raises(RateLimited, match="asked to wait 120s"):
        run(judge)
    assert len(transport.calls) == 1


def test_refused_credentials_end_at_once_without_the_key() -> None:
    key = "sk-live-123456789"
    judge, transport = judge_with([StatusError(401, f"Incorrect API key {key}")], api_key=key)
    with pytest.raises(JudgeAuthFailed) as caught:
        run(judge)
    assert key not in str(caught.value) and "[SECRET]" in str(caught.value)
    assert len(transport.calls) == 1


def test_another_client_error_is_a_judge_error_not_retried() -> None:
    judge, transport = judge_with([StatusError(404, "model not found")])
    with pytest.raises(JudgeError, match="judge call failed: model not found"):
        run(judge)
    assert len(transport.calls) == 1


def test_a_call_past_its_timeout_is_cancelled() -> None:
    class Hanging:
        cancelled = False

        async def complete(self, call: Call) -> Answer:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                Hanging.cancelled = True
                raise
            raise AssertionError("not reached")

    judge = LLMJudge("openai/judge-test", api_base=fresh_api_base(), transport=Hanging(), timeout=0.05)
    with pytest.raises(JudgeTimeout):
        run(judge)
    assert Hanging.cancelled and judge.path_counts()["timeouts"] == 1


def test_a_spent_budget_stops_before_calling() -> None:
    judge, transport = judge_with([reply(useful(0, 1), tokens=60)], daily_token_budget=DailyTokenBudget(100))
    run(judge)
    with pytest.raises(OverBudget):
        run(judge)
    assert len(transport.calls) == 1
