"""Turn what a user wrote (`"local"`, a litellm model string, a judge object) into a Judge."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from ragtrace.judges.base import Judge

#: What a judge spec may be, said in every message that refuses one.
JUDGE_SPECS = "'local', or a litellm model string such as 'openai/gpt-4o-mini' (provider/model)"


class JudgeSpecError(ValueError):
    """A judge spec that names no judge: neither 'local' nor a model litellm can route."""


def is_local_judge(spec: str | Judge) -> bool:
    """True for `"local"` or `"local/..."`: the offline judge, which runs on this machine's CPU."""
    if not isinstance(spec, str):
        return False
    name = spec.strip()
    return name == "local" or name.startswith("local/")


def _closest(word: str, candidates: Iterable[str]) -> str | None:
    matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def judge_spec_problem(spec: str, api_base: str | None = None) -> str | None:
    """What is wrong with a judge spec, with the closest valid spelling (`locl` -> 'local'), or None when it
    names a judge. The one check behind every entry point: install, evaluate, the factories, the settings
    (and so RAGTRACE_JUDGE and `serve --judge`), and the CLI's eval, replay and demo."""
    name = spec.strip()
    if not name:
        return f"the judge spec is empty; use {JUDGE_SPECS}"
    if is_local_judge(name):
        return None
    from ragtrace.judges.llm.transport import load_litellm

    litellm = load_litellm()
    try:
        litellm.get_llm_provider(model=name, api_base=api_base)
        return None
    except Exception:  # litellm raises its BadRequestError for a model it cannot route
        pass
    provider, slash, model = name.partition("/")
    if slash:
        near = _closest(provider, ["local", *(str(getattr(p, "value", p)) for p in litellm.provider_list)])
        suggestion = (near if near == "local" else f"{near}/{model}") if near else None
        problem = f"unknown provider {provider!r}"
    else:
        suggestion = _closest(name, ["local", *litellm.model_cost])
        problem = "not 'local' and not a model litellm knows"
    hint = f" Did you mean {suggestion!r}?" if suggestion else ""
    return f"{problem}.{hint} Use {JUDGE_SPECS}"


def check_judge_spec(spec: str, api_base: str | None = None, *, name: str = "judge") -> None:
    """Raise JudgeSpecError (`<name> 'spec': problem. Did you mean ...?`) for a spec that names no judge."""
    problem = judge_spec_problem(spec, api_base)
    if problem is not None:
        raise JudgeSpecError(f"{name} {spec!r}: {problem}")


def resolve_judge(
    judge: str | Judge,
    *,
    api_base: str | None = None,
    llm_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> Judge:
    """`"local"` (or `"local/..."`) is the offline judge; any other string is a litellm model it can route
    (JudgeSpecError, a ValueError, otherwise: `check_judge_spec`).

    `api_base` and `llm_options` (LLMJudge keywords such as `timeout`, `max_tokens`) reach a litellm
    judge only: the local judge has no server to point at, so settings that name one for a litellm
    judge stay valid when the judge is switched to `"local"`.
    """
    if not isinstance(judge, str):
        if not isinstance(judge, Judge):
            raise TypeError(f"judge must be 'local', a litellm model string or a Judge, got {type(judge).__name__}")
        return judge
    name = judge.strip()
    check_judge_spec(name, api_base)
    if is_local_judge(name):
        from ragtrace.judges.local import LocalJudge

        return LocalJudge(**options)
    from ragtrace.judges.llm import LLMJudge

    if api_base:
        options["api_base"] = api_base
    return LLMJudge(name, **{**options, **(llm_options or {})})
