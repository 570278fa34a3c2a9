"""The transports on their own: one `Call` through the real litellm client, or over aiohttp
(`OpenAIHttpTransport`), to the real judge server."""

from __future__ import annotations

import asyncio
import os
import pickle

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import aiohttp
import pytest

from ragtrace.judges import JudgeRequest, LLMJudge
from ragtrace.judges.llm.openai_http import OpenAIHttpTransport
from ragtrace.judges.llm.part import whole
from ragtrace.judges.llm.prompt import Prompting
from ragtrace.judges.llm.reading import read_reply
from ragtrace.judges.llm.schema import response_format
from ragtrace.judges.llm.transport import Call, LiteLLMTransport, TokenCounter
from ragtrace.scoring import Aspect, RagSample
from tests.servers.judge import JudgeServer, Valid

SAMPLE = RagSample(query="Where is the tower?", contexts=["The tower is in Paris.", "Bananas are yellow."],
                   response="In Paris.", ground_truth="The tower is in Paris.")


@pytest.mark.parametrize("kind", [LiteLLMTransport, OpenAIHttpTransport])
@pytest.mark.parametrize("stream", [True, False])
def test_one_call_returns_the_answer_with_its_tokens(judge_server: JudgeServer, stream: bool, kind: type) -> None:
    judge_server.script(Valid())
    request = JudgeRequest(SAMPLE, frozenset({Aspect.USEFULNESS, Aspect.RELEVANCE}))
    part = whole(request.aspects, 2)
    prompt = Prompting(TokenCounter("openai/judge-test")).prompt(request, part, "json_schema", "v")
    transport = kind(
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


def test_openai_compatible_models_go_over_http_and_the_rest_through_litellm() -> None:
    def kind(model: str, **kwargs: object) -> type:
        return type(LLMJudge(model, api_key="sk-test", **kwargs).transport)

    assert kind("openai/gpt-4o-mini") is OpenAIHttpTransport
    assert kind("openai/qwen", api_base="http://127.0.0.1:8080/v1", seed=7, extra_headers={"X-A": "b"}) is (
        OpenAIHttpTransport
    )
    assert kind("anthropic/claude-3-5-haiku-latest") is LiteLLMTransport
    assert kind("ollama/llama3") is LiteLLMTransport
    assert kind("openai/gpt-4o-mini", organization="org-1") is LiteLLMTransport  # a keyword only litellm takes


def test_the_http_transport_crosses_to_a_scoring_process_and_answers_there(judge_server: JudgeServer) -> None:
    transport = OpenAIHttpTransport("openai/judge-test", api_base=judge_server.url + "/v1", api_key="sk-test")
    request = JudgeRequest(SAMPLE, frozenset({Aspect.USEFULNESS}))
    part = whole(request.aspects, 2)
    prompt = Prompting(TokenCounter("openai/judge-test")).prompt(request, part, "json_schema", "v")
    call = Call(prompt.messages, 0.0, 300, response_format(part, "json_schema"))
    asyncio.run(transport.complete(call))  # a client made for that loop: not pickled with the transport
    copy = pickle.loads(pickle.dumps(transport))
    answer = asyncio.run(copy.complete(call))
    assert read_reply(answer.content, part, 2)[1] == "" and answer.input_tokens > 0


def test_the_http_transport_goes_through_the_proxy_the_environment_names(
    judge_server: JudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY / NO_PROXY, as litellm's client honours them. The judge server stands in for the proxy:
    it answers a request line that carries the absolute URL of an endpoint where nothing listens."""
    for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", judge_server.url)
    request = JudgeRequest(SAMPLE, frozenset({Aspect.USEFULNESS}))
    part = whole(request.aspects, 2)
    prompt = Prompting(TokenCounter("openai/judge-test")).prompt(request, part, "json_schema", "v")
    call = Call(prompt.messages, 0.0, 300, response_format(part, "json_schema"))
    nowhere = "http://127.0.0.2:9/v1"  # loopback, port 9: refused when reached directly

    answer = asyncio.run(OpenAIHttpTransport("openai/judge-test", api_base=nowhere, api_key="sk-t").complete(call))
    assert read_reply(answer.content, part, 2)[1] == "" and len(judge_server.requests) == 1

    monkeypatch.setenv("NO_PROXY", "127.0.0.2")
    with pytest.raises(aiohttp.ClientConnectionError):
        asyncio.run(OpenAIHttpTransport("openai/judge-test", api_base=nowhere, api_key="sk-t").complete(call))
    assert len(judge_server.requests) == 1
