"""A scripted OpenAI-compatible judge server on 127.0.0.1 (stdlib http.server), and its fixture.

It speaks `/v1/chat/completions` well enough for the real litellm client. By default it answers like a
careful judge: it reads the contexts, query, response and ground truth back out of ragtrace's prompt
and computes verdicts deterministically (see `oracle`). A test scripts what the next requests get:

    def test_x(judge_server):
        judge_server.script(Status(429, headers={"Retry-After": "0"}), Valid())
        judge = LLMJudge("openai/judge-test", api_base=judge_server.url + "/v1", api_key="sk-test")
        ...
        assert len(judge_server.requests) == 2

Endpoint traits that persist are attributes: `reject_formats={"json_schema"}` refuses that
structured-output type the way `refusal` says (llama-cpp-python's 500, llama.cpp's, vLLM's, Ollama's
shapes are below). A request with `stream: true` gets server-sent events, chunk by chunk, on a kept-alive
connection; a client that closes the stream is counted in `disconnects`. Every request body is recorded,
and so is the peak number of requests in flight.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

__all__ = [
    "CallTool",
    "CutOff",
    "Fenced",
    "Hang",
    "JudgeServer",
    "NotJson",
    "Partial",
    "Raw",
    "Reply",
    "Rewritten",
    "Say",
    "Status",
    "Valid",
    "WrongCount",
    "judge_server",
    "llama_cpp_python_refusal",
    "llama_cpp_server_refusal",
    "ollama_refusal",
    "oracle",
    "parse_prompt",
    "request_schema",
    "schema_fields",
    "unprocessable_refusal",
    "vllm_refusal",
]

_CONTEXT = re.compile(r'<context index="(\d+)">(.*?)</context>', re.DOTALL)
_WORD = re.compile(r"[a-z0-9]{4,}")
_SCHEMA_LINE = re.compile(r"^JSON schema: (.*)$", re.MULTILINE)


def _tag(text: str, name: str) -> str | None:
    m = re.search(rf"<{name}>(.*?)</{name}>", text, re.DOTALL)
    return m.group(1) if m else None


@dataclass
class Parsed:
    """What the server read back out of a ragtrace prompt and the schema it was asked to fill."""

    query: str
    contexts: dict[int, str]
    reference: str | None
    response: str | None
    ground_truth: str | None
    fields: set[str]
    asked: list[int]  # the context indices the schema wants a verdict for


def request_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The answer schema a request carries: in `response_format` (json_schema, or json_object with a
    `schema` as llama-cpp-python takes it), else on the prompt's "JSON schema:" line."""
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return dict(fmt["json_schema"]["schema"])
    if fmt.get("type") == "json_object" and "schema" in fmt:
        return dict(fmt["schema"])
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    line = _SCHEMA_LINE.search(prompt)
    return dict(json.loads(line.group(1))) if line else None


def schema_fields(schema: dict[str, Any]) -> set[str]:
    """Every property name in a schema, at any depth (context index keys left out)."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for name, child in (node.get("properties") or {}).items():
                if not name.isdigit():
                    names.add(name)
                walk(child)
            walk(node.get("items"))
            for child in (node.get("$defs") or {}).values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(schema)
    return names


def parse_prompt(body: dict[str, Any]) -> Parsed:
    """Read the sample back from the first user message, and the asked fields and indices from the schema."""
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    schema = request_schema(body) or {}
    contexts_schema = schema.get("properties", {}).get("contexts", {})
    return Parsed(
        query=_tag(prompt, "query") or "",
        contexts={int(m.group(1)): m.group(2) for m in _CONTEXT.finditer(prompt)},
        reference=_tag(prompt, "reference"),
        response=_tag(prompt, "response"),
        ground_truth=_tag(prompt, "ground_truth"),
        fields=schema_fields(schema),
        asked=[int(k) for k in contexts_schema.get("properties", {})],
    )


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


def oracle(parsed: Parsed) -> dict[str, Any]:
    """Deterministic verdicts a test can predict, in the shape the schema asks (contexts keyed by index).

    useful: the context's first sentence appears in the reference (or the ground truth when the
    reference is sent as <ground_truth>). level: high when useful, low when it shares a 4+ letter word with
    the query, else none. used: high and shares a 4+ letter word with the response. claims: the ground
    truth's sentences, supported by the contexts that contain them. missing: the query's 5+ letter words
    that no context contains.
    """
    reference = parsed.reference or parsed.ground_truth or parsed.response or ""
    query_words = set(_WORD.findall(parsed.query.lower()))
    response_words = set(_WORD.findall((parsed.response or "").lower()))
    contexts: dict[str, Any] = {}
    for i in parsed.asked:
        text = parsed.contexts.get(i, "")
        first = (_sentences(text) or [""])[0]
        useful = bool(first) and first in reference
        words = set(_WORD.findall(text.lower()))
        level = "high" if useful else ("low" if words & query_words else "none")
        verdict: dict[str, Any] = {"reason": f"context {i} judged by the oracle"}
        if "useful" in parsed.fields:
            verdict["useful"] = useful
        if "level" in parsed.fields:
            verdict["level"] = level
            verdict["used"] = level == "high" and bool(words & response_words)
        contexts[str(i)] = verdict
    claims = []
    for sentence in _sentences(parsed.ground_truth or ""):
        support = [i for i, text in sorted(parsed.contexts.items()) if sentence in text]
        claims.append({"claim": sentence, "supported": bool(support), "context_indices": support})
    context_words = set(_WORD.findall(" ".join(parsed.contexts.values()).lower()))
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
    finish_reason: str = "stop"
    chunk_delay: float = 0.0  # seconds between streamed chunks
    message: dict[str, Any] = field(default_factory=dict)  # extra message fields (tool_calls, reasoning_content)
    # How a stream ends: "done" (finish, usage, [DONE]), "drop" (the connection closes after `drop_after`
    # content characters, no finish), "forever" (the content, then keep-alive comments until the client leaves).
    stream_end: str = "done"
    drop_after: int = 0


class Behaviour:
    delay: float = 0.0

    def reply(self, body: dict[str, Any]) -> Reply:
        raise NotImplementedError


@dataclass
class Valid(Behaviour):
    """The oracle's answer, after `delay` seconds; streamed with `chunk_delay` between chunks."""

    delay: float = 0.0
    chunk_delay: float = 0.0

    def reply(self, body: dict[str, Any]) -> Reply:
        return Reply(content=json.dumps(oracle(parse_prompt(body))), chunk_delay=self.chunk_delay)


@dataclass
class Fenced(Behaviour):
    """The oracle's answer inside a ```json fence with a line of prose before it."""

    delay: float = 0.0

    def reply(self, body: dict[str, Any]) -> Reply:
        return Reply(content="Here are the verdicts:\n```json\n" + json.dumps(oracle(parse_prompt(body))) + "\n```")


@dataclass
class Rewritten(Behaviour):
    """The oracle's answer (a dict, contexts keyed by index) turned into any reply text by `write`: what a
    real server's model wraps, misspells or reshapes. The other fields are `Reply`'s, as they are."""

    write: Callable[[dict[str, Any]], str] = json.dumps
    finish_reason: str = "stop"
    message: dict[str, Any] = field(default_factory=dict)
    stream_end: str = "done"
    drop_after: int = 0
    delay: float = 0.0

    def reply(self, body: dict[str, Any]) -> Reply:
        return Reply(
            content=self.write(oracle(parse_prompt(body))), finish_reason=self.finish_reason,
            message=dict(self.message), stream_end=self.stream_end, drop_after=self.drop_after,
        )


@dataclass
class WrongCount(Behaviour):
    """The oracle's answer with the last context verdict dropped."""

    delay: float = 0.0

    def reply(self, body: dict[str, Any]) -> Reply:
        answer = oracle(parse_prompt(body))
        contexts = answer.get("contexts", {})
        answer["contexts"] = dict(list(contexts.items())[:-1])
        return Reply(content=json.dumps(answer))


@dataclass
class Partial(Behaviour):
    """The oracle's answer for only the asked indices in `only` (what a small model often does), as a
    list of entries with "index" (the other shape a model may choose); the sample-level fields kept."""

    only: tuple[int, ...] = ()
    delay: float = 0.0

    def reply(self, body: dict[str, Any]) -> Reply:
        answer = oracle(parse_prompt(body))
        answer["contexts"] = [
            {"index": int(k), **v} for k, v in answer.get("contexts", {}).items() if int(k) in self.only
        ]
        return Reply(content=json.dumps(answer))


@dataclass
class CutOff(Behaviour):
    """The oracle's answer cut after `chars` characters, ended like a reply that hit max_tokens."""

    chars: int = 200
    delay: float = 0.0

    def reply(self, body: dict[str, Any]) -> Reply:
        return Reply(content=json.dumps(oracle(parse_prompt(body)))[: self.chars], finish_reason="length")


@dataclass
class NotJson(Behaviour):
    delay: float = 0.0
    text: str = "The first context looks relevant, the others less so."

    def reply(self, body: dict[str, Any]) -> Reply:
        return Reply(content=self.text)


@dataclass
class Status(Behaviour):
    """An HTTP error status with an OpenAI-style error body (`top_level`: vLLM's, without the "error" wrapper)."""

    status: int = 500
    message: str = "scripted error"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    error_type: str = "scripted"
    top_level: bool = False

    def reply(self, body: dict[str, Any]) -> Reply:
        error = {"message": self.message, "type": self.error_type, "param": None, "code": self.status}
        payload = {"object": "error", **error} if self.top_level else {"error": error}
        return Reply(status=self.status, body=payload, headers=dict(self.headers))


@dataclass
class Raw(Behaviour):
    """Any JSON body with any status, as a proxy or a broken server sends it (never streamed)."""

    body: Any = None
    status: int = 200
    delay: float = 0.0

    def reply(self, body: dict[str, Any]) -> Reply:
        return Reply(status=self.status, body=self.body)


@dataclass
class Hang(Behaviour):
    """Say nothing for `delay` seconds (or until the server stops), then answer validly."""

    delay: float = 30.0

    def reply(self, body: dict[str, Any]) -> Reply:
        return Valid().reply(body)


@dataclass
class CallTool(Behaviour):
    """A model turn of an agent: it calls the tool `name` with `arguments` and writes no text (content null,
    finish_reason tool_calls; streamed, the call comes whole in the first delta, with its index)."""

    name: str = "search"
    arguments: dict[str, Any] = field(default_factory=dict)
    delay: float = 0.0

    def reply(self, body: dict[str, Any]) -> Reply:
        call = {"index": 0, "id": f"call_{self.name}_{len(json.dumps(body))}", "type": "function",
                "function": {"name": self.name, "arguments": json.dumps(self.arguments)}}
        return Reply(content="", message={"content": None, "tool_calls": [call]}, finish_reason="tool_calls")


@dataclass
class Say(Behaviour):
    """A model turn that answers with `text` (an agent's final answer)."""

    text: str = ""
    delay: float = 0.0

    def reply(self, body: dict[str, Any]) -> Reply:
        return Reply(content=self.text)


# How servers that cannot honour a structured-output type refuse it (`JudgeServer.refusal`).


def llama_cpp_python_refusal(kind: str) -> Status:
    """llama-cpp-python 0.3.36 (as run for bench/llm_judge_real.py): its request model allows only
    text/json_object; the validation error reaches its catch-all route handler, which answers 500 with
    the error's text (and a traceback line, left out here)."""
    message = (
        "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
        f"'msg': \"Input should be 'text' or 'json_object'\", 'input': '{kind}', "
        "'ctx': {'expected': \"'text' or 'json_object'\"}}"
    )
    return Status(500, message, error_type="internal_server_error")


def llama_cpp_server_refusal(kind: str) -> Status:
    """llama.cpp's C++ server (builds without json_schema support)."""
    return Status(500, f'response_format type must be one of "text" or "json_object", but got: {kind}',
                  error_type="server_error")


def vllm_refusal(kind: str) -> Status:
    """vLLM: a schema its guided-decoding backend cannot compile is a 400 with a top-level error body."""
    return Status(400, "The provided JSON schema contains features not supported by xgrammar.",
                  error_type="BadRequestError", top_level=True)


def ollama_refusal(kind: str) -> Status:
    """Ollama's OpenAI-compatible endpoint: a format it cannot turn into a grammar is a 400."""
    return Status(400, 'invalid format: expected "json" or a valid JSON schema', error_type="invalid_request_error")


def unprocessable_refusal(kind: str) -> Status:
    return Status(422, f"Unsupported response_format type: {kind} (json_schema is not supported)")


# --- the server --------------------------------------------------------------------------------------


class _Listening(ThreadingHTTPServer):
    request_queue_size = 128  # many clients connecting at once (http.server's 5 drops their SYNs for a second)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that left a kept-alive connection
            super().handle_error(request, client_address)


class JudgeServer:
    """The scripted server. `script()` queues behaviours; `default` answers once the queue is empty."""

    def __init__(self) -> None:
        self.default: Behaviour = Valid()
        self.reject_formats: set[str] = set()  # "json_schema", "json_object_schema", "json_object"
        self.refusal: Callable[[str], Status] = unprocessable_refusal
        self.report_usage = True  # some local servers send no `usage`
        self.requests: list[dict[str, Any]] = []
        self.usages: list[dict[str, int]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.chunks_sent = 0  # streamed chunks written
        self.disconnects = 0  # streams the client closed before their end
        self._queue: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = _Listening(("127.0.0.1", 0), self._handler())
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
        fmt = body.get("response_format") or {}
        kind = fmt.get("type")
        if kind == "json_object" and "schema" in fmt:
            kind = "json_object_schema"
        if kind in self.reject_formats:
            return self.refusal(str(fmt.get("type"))).reply(body)
        behaviour = self._next()
        if behaviour.delay:
            self._stopping.wait(behaviour.delay)
        return behaviour.reply(body)

    def _usage(self, body: dict[str, Any], content: str) -> dict[str, int]:
        prompt = sum(len(m.get("content") or "") for m in body.get("messages", []))
        usage = {"prompt_tokens": prompt // 4, "completion_tokens": len(content) // 4}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        with self._lock:
            self.usages.append(usage)
        return usage

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        content = reply.content or ""
        usage = self._usage(body, content)
        return {
            "id": f"chatcmpl-{len(self.usages)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "judge-test"),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content, **reply.message},
                 "finish_reason": reply.finish_reason}
            ],
            **({"usage": usage} if self.report_usage else {}),
        }

    def _chunks(self, body: dict[str, Any], reply: Reply) -> Iterator[dict[str, Any]]:
        """The reply as OpenAI stream chunks: the content 16 characters at a time, the finish, the usage."""
        content = reply.content or ""
        base = {"id": "chatcmpl-stream", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": body.get("model", "judge-test")}
        first = {"role": "assistant", "content": "", **reply.message}
        yield {**base, "choices": [{"index": 0, "delta": first, "finish_reason": None}]}
        if reply.stream_end == "drop":
            content = content[: reply.drop_after]
        for start in range(0, len(content), 16):
            piece = content[start : start + 16]
            yield {**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        if reply.stream_end != "done":
            return
        yield {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": reply.finish_reason}]}
        usage = self._usage(body, content)
        if self.report_usage and (body.get("stream_options") or {}).get("include_usage"):
            yield {**base, "choices": [], "usage": usage}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body leave in separate writes: with Nagle's algorithm on, the body waits for the
            # client's delayed ACK (40 ms on Linux), which no real model server adds to every answer.
            disable_nagle_algorithm = True

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
                if reply.content is not None and body.get("stream"):
                    self._stream(body, reply)
                    return
                payload = reply.body if reply.content is None else server._completion(body, reply)
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

            def _stream(self, body: dict[str, Any], reply: Reply) -> None:
                """Server-sent events, written chunk by chunk on a kept-alive connection (chunked encoding, as
                vLLM's and llama.cpp's servers send them); a closed connection stops the "generation". A
                stream that drops ends its connection mid-answer, with no end of the body."""
                dropping = reply.stream_end == "drop"
                self.close_connection = dropping
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Connection", "close") if dropping else self.send_header(
                        "Transfer-Encoding", "chunked"
                    )
                    self.end_headers()
                    for chunk in server._chunks(body, reply):
                        self._write(b"data: " + json.dumps(chunk).encode() + b"\n\n", chunked=not dropping)
                        with server._lock:
                            server.chunks_sent += 1
                        if reply.chunk_delay and server._stopping.wait(reply.chunk_delay):
                            self.close_connection = True
                            return
                    if dropping:
                        return  # the connection closes mid-answer: no finish, no [DONE]
                    while reply.stream_end == "forever" and not server._stopping.wait(0.05):
                        self._write(b": keep-alive\n\n")
                    self._write(b"data: [DONE]\n\n")
                    self._write(b"")  # the end of the chunked body: the connection can carry the next request
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                    with server._lock:
                        server.disconnects += 1

            def _write(self, data: bytes, chunked: bool = True) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                self.wfile.flush()

        return Handler


@pytest.fixture
def judge_server() -> Iterator[JudgeServer]:
    server = JudgeServer().start()
    try:
        yield server
    finally:
        server.stop()
