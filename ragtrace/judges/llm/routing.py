"""Which client carries a judge's calls: aiohttp for an OpenAI-compatible endpoint, litellm for the rest.

An `openai/...` model (OpenAI itself, or any server that speaks its chat API: vLLM, llama.cpp, Ollama's
/v1, LM Studio, a proxy) goes through `OpenAIHttpTransport`, a tenth of litellm's CPU a call. Every other
provider (anthropic, bedrock, vertex, azure, ollama/...) and any litellm keyword argument the light path
does not honour (`openai_http.BODY_OPTIONS`) keeps `LiteLLMTransport`, which knows them all.
"""

from __future__ import annotations

from typing import Any

from ragtrace.judges.llm.openai_http import BODY_OPTIONS, OpenAIHttpTransport
from ragtrace.judges.llm.transport import LiteLLMTransport, Transport

__all__ = ["default_transport", "speaks_openai"]


def speaks_openai(model: str, litellm_kwargs: dict[str, Any]) -> bool:
    """Whether `OpenAIHttpTransport` can carry this judge's calls exactly as litellm would."""
    return model.startswith("openai/") and set(litellm_kwargs) <= BODY_OPTIONS


def default_transport(
    model: str, *, api_base: str | None, api_key: str | None, timeout: float, stream: bool | None,
    **litellm_kwargs: Any,
) -> Transport:
    """The transport `LLMJudge` uses when it is given none."""
    if speaks_openai(model, litellm_kwargs):
        return OpenAIHttpTransport(
            model, api_base=api_base, api_key=api_key, timeout=timeout, stream=stream, **litellm_kwargs
        )
    return LiteLLMTransport(model, api_base=api_base, api_key=api_key, timeout=timeout, stream=stream, **litellm_kwargs)
