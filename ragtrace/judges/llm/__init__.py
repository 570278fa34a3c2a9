"""The LLM judge: any litellm provider, one fused call per sample when it fits, validated and completed.

One module per concern, in the order a judgement passes them:

- `judge`: `LLMJudge`, its settings, the verdict cache, per-aspect merging and the final check.
- `planning`: which calls a request takes to fit the model's context window.
- `dialogue`: one part answered: follow-ups for what an answer left out, retries after bad answers.
- `calls`: one answer: budget, rate limit, concurrency, mode step-down, transport retries, timeout.
- `failures`: what a client's error means, how long to wait, and secrets kept out of error texts.
- `transport`: `Transport` (one `complete`), `LiteLLMTransport` and `load_litellm`.
- `openai_http`, `routing`: `OpenAIHttpTransport` (aiohttp) for `openai/` models, litellm for the rest.
- `streaming`: whether a call streams (to a local model server, or an endpoint that has timed out).
- `part`, `schema`, `prompt`: what one call asks, its structured-output request, its prompt text.
- `parsing`, `reading`: the JSON object of a reply, and the verdicts read from it.

The errors are in `ragtrace.judges.errors`.
"""

from ragtrace.judges.errors import JudgeAuthFailed, JudgeUnavailable
from ragtrace.judges.llm.judge import LLMJudge

__all__ = ["JudgeAuthFailed", "JudgeUnavailable", "LLMJudge"]
