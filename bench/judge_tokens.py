"""How many judge tokens and calls does one HotpotQA item cost? Prints JSON.

The real `LLMJudge` (real litellm client, real HTTP) judges the first N items of
data/hotpotqa/hotpotqa_dev_500.jsonl (10 contexts each; ground truth = the gold paragraphs;
response = "The answer is <answer>.") with all three scorers, against the scripted OpenAI-compatible
server of tests/servers/judge.py started in this process. Every request body the server received is
re-counted with litellm's offline `token_counter` on the exact messages sent; the json_schema sent in
`response_format` is counted separately (`response_format_schema_tokens`), because providers bill it
in their own way.

Runs, all in the same process on the same items:
- `fused` (the default): one call per item, json_schema accepted by the endpoint;
- `fused_schema_in_prompt`: the endpoint refuses response_format, so the schema rides in the prompt;
- `per_scorer`: `fused=False`, one call per scorer (three per item): the baseline the fusion saves on.

    python bench/judge_tokens.py [--limit N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm

from bench.hotpotqa import DATA
from ragtrace.judges import LLMJudge, judge_and_score
from ragtrace.scoring import RagSample, default_scorers
from tests.servers.judge import JudgeServer, parse_prompt

MODEL = "openai/judge-test"


def load(limit: int) -> list[RagSample]:
    samples = []
    with DATA.open() as f:
        for line, _ in zip(f, range(limit), strict=False):
            row = json.loads(line)
            samples.append(
                RagSample(
                    query=row["question"],
                    contexts=row["contexts"],
                    response=f"The answer is {row['answer']}.",
                    ground_truth=row["ground_truth"],
                )
            )
    return samples


def percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))])


def run(samples: list[RagSample], *, fused: bool, reject: set[str]) -> dict[str, Any]:
    server = JudgeServer().start()
    server.reject_formats = reject
    judge = LLMJudge(MODEL, api_base=server.url + "/v1", api_key="sk-bench", fused=fused, cache=False)
    truncated = errors = 0
    started = time.perf_counter()

    async def one(sample: RagSample, gate: asyncio.Semaphore) -> None:
        nonlocal truncated, errors
        async with gate:
            result = await judge_and_score(sample, default_scorers(), judge)
        # truncation shows on each scorer's details; count each context once
        truncated += len({i for r in result.results for i in r.details.get("truncated_contexts", [])})
        errors += sum(1 for r in result.results if r.error)

    async def go() -> None:
        gate = asyncio.Semaphore(8)
        await asyncio.gather(*(one(s, gate) for s in samples))

    try:
        asyncio.run(go())
    finally:
        server.stop()
    # Attribute every request to its item by the query in its prompt (the 100 questions are distinct).
    index = {s.query: i for i, s in enumerate(samples)}
    per_item_tokens = [0] * len(samples)
    per_item_calls = [0] * len(samples)
    schema_tokens: list[int] = []
    for body in server.requests:
        item = index[parse_prompt(body).query]
        per_item_calls[item] += 1
        if (body.get("response_format") or {}).get("type") in reject:
            continue  # a refused probe (first calls only): a call, but no billed prompt
        per_item_tokens[item] += litellm.token_counter(model=MODEL, messages=body["messages"])
        if "response_format" in body:
            schema_tokens.append(litellm.token_counter(model=MODEL, text=json.dumps(body["response_format"])))
    n_contexts = sum(len(s.contexts) for s in samples)
    return {
        "median_input_tokens_per_item": statistics.median(per_item_tokens),
        "p90_input_tokens_per_item": percentile(per_item_tokens, 0.9),
        "max_input_tokens_per_item": max(per_item_tokens),
        "calls_per_item": statistics.mean(per_item_calls),
        "response_format_schema_tokens": statistics.median(schema_tokens) if schema_tokens else 0,
        "truncated_contexts_share": round(truncated / n_contexts, 4),
        "scorer_errors": errors,
        "mode": judge.mode,
        "seconds": round(time.perf_counter() - started, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=100)
    args = parser.parse_args()
    litellm.suppress_debug_info = True  # litellm prints help banners on stdout after errors (the probes)
    samples = load(args.limit)

    fused = run(samples, fused=True, reject=set())
    in_prompt = run(samples, fused=True, reject={"json_schema", "json_object"})
    per_scorer = run(samples, fused=False, reject=set())
    out = {
        "items": len(samples),
        "judge": MODEL,
        "context_token_budget": 400,
        "median_input_tokens_per_item": fused["median_input_tokens_per_item"],
        "p90_input_tokens_per_item": fused["p90_input_tokens_per_item"],
        "calls_per_item": fused["calls_per_item"],
        "truncated_contexts_share": fused["truncated_contexts_share"],
        "response_format_schema_tokens": fused["response_format_schema_tokens"],
        "target": {"calls_per_item": 1, "median_input_tokens_per_item": 2500},
        "meets_target": fused["calls_per_item"] == 1 and fused["median_input_tokens_per_item"] <= 2500,
        "schema_in_prompt_median_input_tokens_per_item": in_prompt["median_input_tokens_per_item"],
        "schema_in_prompt_p90_input_tokens_per_item": in_prompt["p90_input_tokens_per_item"],
        "baseline_per_scorer_median_input_tokens_per_item": per_scorer["median_input_tokens_per_item"],
        "baseline_per_scorer_calls_per_item": per_scorer["calls_per_item"],
        "fused_vs_per_scorer_token_ratio": round(
            fused["median_input_tokens_per_item"] / per_scorer["median_input_tokens_per_item"], 3
        ),
        "runs": {"fused": fused, "fused_schema_in_prompt": in_prompt, "per_scorer": per_scorer},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
