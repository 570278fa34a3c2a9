"""The LLM judge: any litellm provider, one fused call per sample when it fits, validated and completed."""

from ragtrace.judges.errors import JudgeAuthFailed, JudgeUnavailable
from ragtrace.judges.llm.judge import LLMJudge

__all__ = ["JudgeAuthFailed", "JudgeUnavailable", "LLMJudge"]
