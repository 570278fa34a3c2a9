"""The LLM judge (through litellm) pointed at a local OpenAI-compatible server, as you would point it at
Ollama, vLLM or llama.cpp's server (see docs/judges.md). Here the "model" is a tiny stdlib server on
127.0.0.1 that grades by word overlap, so the example runs offline; swap in a real server with

    RAGTRACE_JUDGE=openai/<model> RAGTRACE_JUDGE_API_BASE=http://127.0.0.1:8000/v1 OPENAI_API_KEY=unused

    python examples/llm_judge_local_server.py
"""

from __future__ import annotations

import json
import os
import re
from http.server import BaseHTTPRequestHandler
from typing import Any

from _chat_server import reply_json, serve
from _pipeline import finish, scored_provider

from ragtrace.instrument import generation_span, retrieval_span
from ragtrace.judges.llm import LLMJudge

QUESTION = "What does the Rosetta Stone say?"
DOCUMENTS = [
    "The Rosetta Stone carries a decree of Ptolemy V written in three scripts.",
    "The British Museum is in Bloomsbury, London.",
]
ANSWER = "It carries a decree of Ptolemy V, in three scripts."
WORD = re.compile(r"[a-z]{5,}")


def grade(prompt: str) -> dict[str, Any]:
    """A stand-in for the model: a context is useful and used when it shares a long word with the response."""
    response = set(WORD.findall((re.search(r"<response>(.*?)</response>", prompt, re.S) or ["", ""])[1].lower()))
    verdicts = []
    for index, text in re.findall(r'<context index="(\d+)">(.*?)</context>', prompt, re.S):
        shared = bool(set(WORD.findall(text.lower())) & response)
        verdicts.append({"index": int(index), "useful": shared, "level": "high" if shared else "none",
                         "used": shared, "reason": "shares words with the response" if shared else "unrelated"})
    return {"contexts": verdicts, "missing": []}


class JudgeModel(BaseHTTPRequestHandler):
    """POST /v1/chat/completions -> the verdicts as the assistant message's JSON content."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        prompt = next(m["content"] for m in request["messages"] if m["role"] == "user")
        content = json.dumps(grade(prompt))
        reply_json(self, {
            "id": "chatcmpl-judge", "object": "chat.completion", "created": 0, "model": request["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(content) // 4,
                      "total_tokens": (len(prompt) + len(content)) // 4},
        })


def main(endpoint: str | None = None) -> dict[str, Any]:
    with serve(JudgeModel) as api_base:
        # the same as RAGTRACE_JUDGE=openai/local-judge RAGTRACE_JUDGE_API_BASE=<api_base>
        # stream=False: this stand-in answers with one JSON body (real servers stream, so a cancel stops them)
        judge = LLMJudge("openai/local-judge", api_base=api_base, api_key="unused", max_retries=0, stream=False)
        provider, memory = scored_provider("llm-judge-app", endpoint=endpoint, judge=judge)
        tracer = provider.get_tracer("llm-judge-app")
        with tracer.start_as_current_span("rag.answer"):
            with retrieval_span(QUESTION, data_source="museum", tracer=tracer) as retrieval:
                retrieval.record(DOCUMENTS)
            with generation_span(model="templated", query=QUESTION, tracer=tracer) as generation:
                generation.record(ANSWER)
        return finish(provider, memory)


if __name__ == "__main__":
    main(os.environ.get("OTLP_ENDPOINT"))
