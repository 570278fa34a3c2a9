"""A scripted OpenAI-compatible judge server on 127.0.0.1 (stdlib http.server), and its fixture.

It speaks `/v1/chat/completions` well enough for the real litellm client. By default it answers like a
careful judge: it reads the contexts, query, response and ground truth back out of ragtrace's prompt
and computes verdicts deterministically (see `oracle`). A test scripts what the next requests get:

    def test_x(judge_server):
        judge_server.script(Status(429, headers={"Retry-After": "0"}), Valid())
        judge = LLMJudge("openai/judge-test", api_base=judge_server.url + "/v1", api_key="sk-test")
        ...
        assert len(judge_server.requests) == 2

Endpoint traits that persist (`reject_formats={"json_schema"}` answers 422 like llama.cpp's server)
are attributes. Every request body is recorded, and so is the peak number of requests in flight.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

__all__ = [
    "Fenced",
    "Hang",
    "JudgeServer",
    "NotJson",
    "Status",
    "Valid",
    "WrongCount",
    "judge_server",
    "oracle",
    "parse_prompt",
]

_CONTEXT = re.compile(r'<context index="(\d+)">(.*?)</context>', re.DOTALL)
_WORD = re.compile(r"[a-z0-9]{4,}")


def _tag(text: str, name: str) -> str | None:
    m = re.search(rf"<{name}>(.*?)</{name}>", text, re.DOTALL)
    return m.group(1) if m else None


@dataclass
class Parsed:
    """What the server read back out of a ragtrace prompt."""

    query: str
    contexts: list[str]
    reference: str | None
    response: str | None
    ground_truth: str | None
    fields: set[str]


def _schema_fields(body: dict[str, Any]) -> set[str] | None:
    fmt = body.get("response_format") or {}
    if fmt.get("type") != "json_schema":
        return None
    schema = fmt["json_schema"]["schema"]
    fields = set(schema.get("properties", {}))
    for definition in schema.get("$defs", {}).values():
        fields |= set(definition.get("properties", {}))
    return fields


def parse_prompt(body: dict[str, Any]) -> Parsed:
    """Read the sample back from the first user message; the asked fields from the schema or the prompt."""
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    fields = _schema_fields(body)
    if fields is None:  # no schema sent: answer what the instructions mention
        fields = {f for f in ("contexts", "useful", "level", "used", "missing", "claims") if f'"{f}"' in prompt}
    return Parsed(
        query=_tag(prompt, "query") or "",
        contexts=[m.group(2) for m in _CONTEXT.finditer(prompt)],
        reference=_tag(prompt, "reference"),
        response=_tag(prompt, "response"),
        ground_truth=_tag(prompt, "ground_truth"),
        fields=fields,
    )


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


def oracle(parsed: Parsed) -> dict[str, Any]:
    """Deterministic verdicts a test can predict.

    useful: the context's first sentence appears in the reference (or the ground truth when the
    reference is sent as <ground_truth>). level: high when useful, low when it shares a 4+ letter word with
    the query, else none. used: high and shares a 4+ letter word with the response. claims: the ground
    truth's sentences, supported by the contexts that contain them. missing: the query's 5+ letter words
    that no context contains.
    """
    reference = parsed.reference or parsed.ground_truth or parsed.response or ""
    query_words = set(_WORD.findall(parsed.query.lower()))
    response_words = set(_WORD.findall((parsed.response or "").lower()))
    contexts = []
    for i, text in enumerate(parsed.contexts):
        first = (_sentences(text) or [""])[0]
        useful = bool(first) and first in reference
        words = set(_WORD.findall(text.lower()))
        level = "high" if useful else ("low" if words & query_words else "none")
        verdict: dict[str, Any] = {"index": i, "reason": f"context {i} judged by the oracle"}
        if "useful" in parsed.fields:
            verdict["useful"] = useful
        if "level" in parsed.fields:
            verdict["level"] = level
            verdict["used"] = level == "high" and bool(words & response_words)
        contexts.append(verdict)
    claims = []
    for sentence in _sentences(parsed.ground_truth or ""):
        support = [i for i, text in enumerate(parsed.contexts) if sentence in text]
        claims.append({"claim": sentence, "supported": bool(support), "context_indices": support})
    context_words = set(_WORD.findall(" ".join(parsed.contexts).lower()))
    answer: dict[str, Any] = {}
    if "contexts" in parsed.fields:
        answer["contexts"] = contexts
    if "missing" in parsed.fields:
        answer["missing"] = sorted(w for w in query_words - context_words if len(w) >= 5)
    if "claims" in parsed.fields:
        answer["claims"] = claims
    return answer


# --- behaviours: what one request gets ---------------------------------------------------------------


@dataclass
class Reply:
    status: int = 200
    content: str | None = None
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


class Behaviour:
    delay: float = 0.0

    def reply(self, body: dict[str, Any]) -> Reply:
        raise NotImplementedError


@dataclass
class Valid(Behaviour):
    """The oracle's answer, after `delay` seconds."""

    delay: float = 0.0

    def reply(self, body: dict[str, Any]) -> Reply:
        return Reply(content=json.dumps(oracle(parse_prompt(body))))


@dataclass
class Fenced(Behaviour):
    """The oracle's answer inside a ```json fence with a line of prose before it."""

    delay: float = 0.0

    def reply(self, body: dict[str, Any]) -> Reply:
        return Reply(content="Here are the verdicts:\n```json\n" + json.dumps(oracle(parse_prompt(body))) + "\n```")


@dataclass
class WrongCount(Behaviour):
    """The oracle's answer with the last context verdict dropped."""

    delay: float = 0.0

    def reply(self, body: dict[str, Any]) -> Reply:
        answer = oracle(parse_prompt(body))
        answer["contexts"] = answer.get("contexts", [])[:-1]
        return Reply(content=json.dumps(answer))


@dataclass
class NotJson(Behaviour):
    delay: float = 0.0
    text: str = "The first context looks relevant, the others less so."

    def reply(self, body: dict[str, Any]) -> Reply:
        return Reply(content=self.text)


@dataclass
class Status(Behaviour):
    """An HTTP error status with an OpenAI-style error body."""

    status: int = 500
    message: str = "scripted error"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0

    def reply(self, body: dict[str, Any]) -> Reply:
        error = {"error": {"message": self.message, "type": "scripted", "code": self.status}}
        return Reply(status=self.status, body=error, headers=dict(self.headers))


@dataclass
class Hang(Behaviour):
    """Say nothing for `delay` seconds (or until the server stops), then answer validly."""

    delay: float = 30.0

    def reply(self, body: dict[str, Any]) -> Reply:
        return Valid().reply(body)


# --- the server --------------------------------------------------------------------------------------


class JudgeServer:
    """The scripted server. `script()` queues behaviours; `default` answers once the queue is empty."""

    def __init__(self) -> None:
        self.default: Behaviour = Valid()
        self.reject_formats: set[str] = set()
        self.report_usage = True  # some local servers send no `usage`
        self.requests: list[dict[str, Any]] = []
        self.usages: list[dict[str, int]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._queue: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="judge-server", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, *behaviours: Behaviour) -> None:
        with self._lock:
            self._queue.extend(behaviours)

    def start(self) -> JudgeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next(self) -> Behaviour:
        with self._lock:
            return self._queue.popleft() if self._queue else self.default

    def handle(self, body: dict[str, Any]) -> Reply:
        fmt = (body.get("response_format") or {}).get("type")
        if fmt in self.reject_formats:  # like llama.cpp's server
            message = f"Unsupported response_format type: {fmt} (json_schema is not supported)"
            return Status(422, message).reply(body)
        behaviour = self._next()
        if behaviour.delay:
            self._stopping.wait(behaviour.delay)
        return behaviour.reply(body)

    def _completion(self, body: dict[str, Any], content: str) -> dict[str, Any]:
        prompt = sum(len(m.get("content") or "") for m in body.get("messages", []))
        usage = {"prompt_tokens": prompt // 4, "completion_tokens": len(content) // 4}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        with self._lock:
            self.usages.append(usage)
        return {
            "id": f"chatcmpl-{len(self.usages)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "judge-test"),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            ],
            **({"usage": usage} if self.report_usage else {}),
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw or b"{}")
                with server._lock:
                    server.requests.append(body)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if not self.path.rstrip("/").endswith("/chat/completions"):
                        reply = Status(404, f"no route {self.path}").reply(body)
                    else:
                        reply = server.handle(body)
                finally:
                    with server._lock:
                        server.in_flight -= 1
                payload = reply.body if reply.content is None else server._completion(body, reply.content)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test); nothing to answer

        return Handler


@pytest.fixture
def judge_server() -> Iterator[JudgeServer]:
    server = JudgeServer().start()
    try:
        yield server
    finally:
        server.stop()
