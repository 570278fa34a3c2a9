"""When a judge's calls stream: to a local model server, or to an endpoint once it has timed out."""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest

from ragtrace.judges import LLMJudge, judge_and_score
from ragtrace.judges.llm import streaming
from ragtrace.judges.llm.streaming import is_local_endpoint, streams
from ragtrace.scoring import ContextPrecision, RagSample
from tests.judges.llm.test_judge import CLIENTS, with_client
from tests.servers.judge import Hang, JudgeServer


@pytest.mark.parametrize(
    ("api_base", "model", "local"),
    [
        ("http://127.0.0.1:8080/v1", "openai/qwen", True),
        ("http://localhost:11434/v1", "openai/llama3", True),
        ("http://[::1]:8000/v1", "openai/m", True),
        ("http://192.168.1.20:8000/v1", "openai/m", True),
        ("http://10.0.0.7/v1", "openai/m", True),
        ("", "ollama/llama3", True),
        ("", "hosted_vllm/qwen", True),
        ("https://api.openai.com/v1", "openai/gpt-4o-mini", False),
        ("", "openai/gpt-4o-mini", False),
        ("", "anthropic/claude-3-5-haiku", False),
        ("https://my-proxy.example.com", "openai/m", False),
    ],
)
def test_a_local_model_server_is_told_from_a_hosted_api(api_base: str, model: str, local: bool) -> None:
    assert is_local_endpoint(api_base, model) is local
    assert streams(None, (api_base, model)) is local
    assert streams(True, (api_base, model)) and not streams(False, (api_base, model))


@pytest.mark.parametrize("client", CLIENTS)
def test_a_hosted_endpoint_streams_once_a_call_to_it_has_timed_out(
    judge_server: JudgeServer, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    # The scripted server is on 127.0.0.1; here it stands for a hosted API.
    monkeypatch.setattr(streaming, "is_local_endpoint", lambda api_base, model: False)
    api_base = judge_server.url + "/v1"
    judge = LLMJudge("openai/judge-test", api_base=api_base,
                     **with_client(client, api_base, {"api_key": "sk-test", "timeout": 2.0}))
    judge_server.script(Hang(6.0))  # the timeout leaves room for litellm's first call on a busy machine

    def score(query: str) -> str | None:
        sample = RagSample(query=query, contexts=["The tower is in Paris."], response="In Paris.")
        return asyncio.run(judge_and_score(sample, [ContextPrecision()], judge)).results[0].error

    assert score("Where is the tower?") == "judge_timeout"
    assert score("Where is the tower now?") is None
    assert [bool(body.get("stream")) for body in judge_server.requests] == [False, True]
