"""LiteLLMTransport on its own: one `Call` through the real litellm client to the real judge server."""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest

from ragtrace.judges import JudgeRequest
from ragtrace.judges.llm.part import whole
from ragtrace.judges.llm.prompt import Prompting
from ragtrace.judges.llm.reading import read_reply
from ragtrace.judges.llm.schema import response_format
from ragtrace.judges.llm.transport import Call, LiteLLMTransport, TokenCounter
from ragtrace.scoring import Aspect, RagSample
from tests.servers.judge import JudgeServer, Valid

SAMPLE = RagSample(query="Where is the tower?", contexts=["The tower is in Paris.", "Bananas are yellow."],
                   response="In Paris.", ground_truth="The tower is in Paris.")


@pytest.mark.parametrize("stream", [True, False])
def test_one_call_returns_the_answer_with_its_tokens(judge_server: JudgeServer, stream: bool) -> None:
    judge_server.script(Valid())
    request = JudgeRequest(SAMPLE, frozenset({Aspect.USEFULNESS, Aspect.RELEVANCE}))
    part = whole(request.aspects, 2)
    prompt = Prompting(TokenCounter("openai/judge-test")).prompt(request, part, "json_schema", "v")
    transport = LiteLLMTransport(
        "openai/judge-test", api_base=judge_server.url + "/v1", api_key="sk-transport-secret", stream=stream
    )
    call = Call(prompt.messages, 0.0, 300, response_format(part, "json_schema"))
    answer = asyncio.run(transport.complete(call))
    reading, error = read_reply(answer.content, part, 2)
    assert sorted(reading.verdicts) == [0, 1] and error == ""
    assert answer.finish_reason == "stop" and answer.input_tokens > 0 and answer.output_tokens > 0
    body = judge_server.requests[0]
    assert body["model"] == "judge-test" and body["max_tokens"] == 300 and body["temperature"] == 0.0
    assert body["response_format"]["type"] == "json_schema" and bool(body.get("stream")) == stream
    assert "sk-transport-secret" not in repr(transport)
