"""CPU per call of the HTTP clients an OpenAI-compatible judge could use, streamed and not.

The same 300 judge calls (ragtrace prompts, a JSON-schema response format) at concurrency 16 against
bench/judge_throughput.py's scripted server in its own process (200 ms per answer), through litellm,
the `openai` async client, httpx and aiohttp; two interleaved rounds. `cpu_ms_per_call` is this process's
CPU (the client alone: no ragtrace judging around it). The choice of `OpenAIHttpTransport` rests on it.

    python bench/judge_clients.py --calls 300
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import httpx
import litellm
import openai
from judge_throughput import Server, texts  # type: ignore[import-not-found]

from ragtrace.judges import JudgeRequest
from ragtrace.judges.llm.part import whole
from ragtrace.judges.llm.prompt import Prompting
from ragtrace.judges.llm.schema import response_format
from ragtrace.judges.llm.transport import TokenCounter
from ragtrace.scoring import Aspect, RagSample

Send = Callable[[dict[str, Any]], Awaitable[str]]
litellm.suppress_debug_info = True


def bodies(n: int) -> list[dict[str, Any]]:
    prompting = Prompting(TokenCounter("openai/judge-test"))
    out = []
    for i in range(n):
        query, contexts, response = texts(i, "clients")
        request = JudgeRequest(RagSample(query=query, contexts=contexts, response=response),
                               frozenset({Aspect.USEFULNESS, Aspect.RELEVANCE}))
        part = whole(request.aspects, len(contexts))
        messages = prompting.prompt(request, part, "json_schema", "v").messages
        out.append({"model": "judge-test", "messages": messages, "temperature": 0, "max_tokens": 300,
                    "response_format": response_format(part, "json_schema")})
    return out


def sse_text(chunks: list[dict[str, Any]]) -> str:
    return "".join((c.get("delta") or {}).get("content") or "" for chunk in chunks for c in chunk.get("choices") or [])


def clients(url: str) -> dict[str, Callable[[bool], Send]]:
    def with_litellm(stream: bool) -> Send:
        async def send(body: dict[str, Any]) -> str:
            options = {**body, "model": "openai/judge-test", "api_base": url, "api_key": "x", "max_retries": 0}
            if not stream:
                return str((await litellm.acompletion(**options)).choices[0].message.content)
            reply = await litellm.acompletion(stream=True, stream_options={"include_usage": True}, **options)
            return "".join([c.choices[0].delta.content or "" async for c in reply if c.choices])
        return send

    def with_openai(stream: bool) -> Send:
        client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0)

        async def send(body: dict[str, Any]) -> str:
            if not stream:
                return str((await client.chat.completions.create(**body)).choices[0].message.content)
            reply = await client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **body)
            return "".join([c.choices[0].delta.content or "" async for c in reply if c.choices])
        return send

    def with_httpx(stream: bool) -> Send:
        client = httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer x"}, timeout=30,
                                   limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))

        async def send(body: dict[str, Any]) -> str:
            if not stream:
                reply = await client.post("/chat/completions", json=body)
                return str(reply.json()["choices"][0]["message"]["content"])
            async with client.stream("POST", "/chat/completions", json={**body, "stream": True}) as reply:
                lines = [line async for line in reply.aiter_lines()]
            return sse_text([json.loads(x[6:]) for x in lines if x.startswith("data: {")])
        return send

    def with_aiohttp(stream: bool) -> Send:
        session: list[aiohttp.ClientSession] = []

        async def send(body: dict[str, Any]) -> str:
            if not session:
                session.append(aiohttp.ClientSession(headers={"Authorization": "Bearer x"},
                                                     connector=aiohttp.TCPConnector(limit=0)))
            async with session[0].post(url + "/chat/completions", json={**body, "stream": stream}) as reply:
                if not stream:
                    return str(json.loads(await reply.read())["choices"][0]["message"]["content"])
                lines = [line async for line in reply.content]
            return sse_text([json.loads(x[6:]) for x in lines if x.startswith(b"data: {")])
        return send

    return {"litellm": with_litellm, "openai": with_openai, "httpx": with_httpx, "aiohttp": with_aiohttp}


async def measure(send: Send, calls: list[dict[str, Any]]) -> dict[str, float]:
    await send(calls[0])  # outside the clock: imports, the first connection
    gate = asyncio.Semaphore(16)

    async def one(body: dict[str, Any]) -> str:
        async with gate:
            return await send(body)

    start, cpu = time.perf_counter(), time.process_time()
    answers = await asyncio.gather(*(one(b) for b in calls))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert all(json.loads(a) for a in answers)
    return {"calls_per_s": round(len(calls) / elapsed, 1), "cpu_ms_per_call": round(cpu * 1000 / len(calls), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    server = Server(0.2)
    try:
        calls = bodies(args.calls)
        found: dict[str, list[dict[str, float]]] = {}
        for _ in range(args.rounds):
            for name, make in clients(server.url + "/v1").items():
                for stream in (False, True):
                    result = asyncio.run(measure(make(stream), calls))
                    found.setdefault(f"{name}/stream={stream}", []).append(result)
    finally:
        server.stop()
    print(json.dumps({"calls": args.calls, "concurrency": 16, "results": found,
                      "load_average_1m": round(os.getloadavg()[0], 2)}, indent=1))


if __name__ == "__main__":
    main()
