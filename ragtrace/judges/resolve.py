"""Turn what a user wrote (`"local"`, a litellm model string, a judge object) into a Judge."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragtrace.judges.base import Judge


def is_local_judge(spec: str | Judge) -> bool:
    """True for `"local"` or `"local/..."`: the offline judge, which runs on this machine's CPU."""
    if not isinstance(spec, str):
        return False
    name = spec.strip()
    return name == "local" or name.startswith("local/")


def resolve_judge(
    judge: str | Judge,
    *,
    api_base: str | None = None,
    llm_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> Judge:
    """`"local"` (or `"local/..."`) is the offline judge; any other string is a litellm model.

    `api_base` and `llm_options` (LLMJudge keywords such as `timeout`, `max_tokens`) reach a litellm
    judge only: the local judge has no server to point at, so settings that name one for a litellm
    judge stay valid when the judge is switched to `"local"`.
    """
    if not isinstance(judge, str):
        if not isinstance(judge, Judge):
            raise TypeError(f"judge must be 'local', a litellm model string or a Judge, got {type(judge).__name__}")
        return judge
    name = judge.strip()
    if not name:
        raise ValueError("judge model string is empty; use 'local' or a litellm model such as 'openai/gpt-4o-mini'")
    if is_local_judge(name):
        from ragtrace.judges.local import LocalJudge

        return LocalJudge(**options)
    from ragtrace.judges.llm import LLMJudge

    if api_base:
        options["api_base"] = api_base
    return LLMJudge(name, **{**options, **(llm_options or {})})
