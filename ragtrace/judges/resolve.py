"""Turn what a user wrote (`"local"`, a litellm model string, a judge object) into a Judge."""

from __future__ import annotations

from typing import Any

from ragtrace.judges.base import Judge


def resolve_judge(judge: str | Judge, **options: Any) -> Judge:
    """`"local"` (or `"local/..."`) is the offline judge; any other string is a litellm model."""
    if not isinstance(judge, str):
        if not isinstance(judge, Judge):
            raise TypeError(f"judge must be 'local', a litellm model string or a Judge, got {type(judge).__name__}")
        return judge
    name = judge.strip()
    if not name:
        raise ValueError("judge model string is empty; use 'local' or a litellm model such as 'openai/gpt-4o-mini'")
    if name == "local" or name.startswith("local/"):
        from ragtrace.judges.local import LocalJudge

        return LocalJudge(**options)
    from ragtrace.judges.llm import LLMJudge

    return LLMJudge(name, **options)
