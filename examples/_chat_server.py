"""A tiny OpenAI-compatible chat server on 127.0.0.1 for the examples: no API key, no network.

`answers` maps a question to the model's answer; a request is answered with the answer of the question
its messages quote last (a RAG prompt quotes the question after the contexts), else with `default`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _prompt_text(request: Mapping[str, Any]) -> str:
    if isinstance(request.get("prompt"), str):
        return str(request["prompt"])
    parts = []
    for message in request.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        parts.append(str(content or ""))
    return "\n".join(parts)


def pick_answer(prompt: str, answers: Mapping[str, str], default: str) -> str:
    """The answer of the question quoted last in `prompt`."""
    found = [(prompt.rfind(question), answer) for question, answer in answers.items() if question in prompt]
    return max(found)[1] if found else default


@contextmanager
def local_chat_server(answers: Mapping[str, str], default: str = "I don't know.") -> Iterator[str]:
    """Serve POST /v1/chat/completions and /v1/completions on a free port; yields the base URL (…/v1)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            text = pick_answer(_prompt_text(request), answers, default)
            usage = {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}
            if self.path.endswith("/chat/completions"):
                choice: dict[str, Any] = {
                    "index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"
                }
                kind = "chat.completion"
            else:
                choice = {"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}
                kind = "text_completion"
            reply_json(self, {
                "id": "cmpl-1", "object": kind, "created": 0, "model": request.get("model", "local-model"),
                "choices": [choice], "usage": usage,
            })

    with serve(Handler) as base_url:
        yield base_url


def reply_json(handler: BaseHTTPRequestHandler, document: Mapping[str, Any]) -> None:
    """Answer the handler's request with 200 and `document` as JSON."""
    body = json.dumps(document).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@contextmanager
def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` on a free port of 127.0.0.1, in a thread; yields the base URL (…/v1)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
