"""The LLM judge against a real instruction-tuned model on a local server, on HotpotQA items with gold
labels. Prints JSON. Run by hand (minutes per item on a CPU); not part of CI.

Each item's 10 paragraphs (2 gold) are judged for usefulness against "The answer is <answer>." (the
reference, as in bench/local_judge_quality.py). Reported:
- `share_scored`: items whose judgement completed (every context got a verdict), and the errors by code;
- `calls_per_item`, `input_tokens_per_item`, `output_tokens_per_item` (litellm's count when the
  server reports none, as llama-cpp-python does when streaming), `s_per_item` (mean, median, max);
- `auc_useful`: per-item ROC AUC of the binary `useful` verdicts against the gold labels, averaged over
  scored items; `bm25.auc` the same for BM25 of query + answer, on all items and on the scored ones;
- `paths`: how often each path of the judge was taken (format step-down, follow-ups, retries, ...).

Start a server first, e.g. llama-cpp-python's (bench/serve_llama_cpp.py), then:

    python bench/llm_judge_real.py --api-base http://127.0.0.1:8080/v1 --model openai/judge \\
        --limit 20 --timeout 600 --context-window 4096 [--data FILE] [--out rows.jsonl]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.hotpotqa import DATA, load_items
from bench.local_judge_quality import auc, mean  # the same per-item AUC as the local judge's bench
from ragtrace.judges import JudgeError, JudgeRequest, LLMJudge
from ragtrace.judges.lexical import bm25_scores, content_tokens, tokens
from ragtrace.scoring import Aspect, RagSample


async def judge_item(judge: LLMJudge, item: dict[str, Any]) -> dict[str, Any]:
    response = f"The answer is {item['answer']}."
    sample = RagSample(query=item["question"], contexts=item["contexts"], response=response)
    request = JudgeRequest(sample, frozenset({Aspect.USEFULNESS}), reference=response)
    docs = [tokens(c) for c in item["contexts"]]
    row: dict[str, Any] = {
        "id": item["id"],
        "labels": item["context_labels"],
        "bm25": bm25_scores(content_tokens(f"{item['question']} {response}"), docs),
    }
    started = time.perf_counter()
    try:
        judgement = await judge.judge(request)
    except JudgeError as exc:
        row.update(error=exc.code, message=str(exc)[:300], usage=exc.usage.model_dump())
    else:
        row.update(error=None, useful=[bool(v.useful) for v in judgement.verdicts.contexts],
                   usage=judgement.usage.model_dump())
    row["seconds"] = round(time.perf_counter() - started, 2)
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    scored = [r for r in rows if r["error"] is None]
    errors: dict[str, int] = {}
    for r in rows:
        if r["error"] is not None:
            errors[r["error"]] = errors.get(r["error"], 0) + 1
    seconds = [r["seconds"] for r in rows]
    per_item = len(rows) or 1
    useful_auc = [a for r in scored if (a := auc([float(u) for u in r["useful"]], r["labels"])) is not None]
    return {
        "items": len(rows),
        "share_scored": round(len(scored) / per_item, 4),
        "errors": errors,
        "calls_per_item": round(sum(r["usage"]["calls"] for r in rows) / per_item, 2),
        "input_tokens_per_item": round(sum(r["usage"]["input_tokens"] for r in rows) / per_item),
        "output_tokens_per_item": round(sum(r["usage"]["output_tokens"] for r in rows) / per_item),
        "s_per_item": {
            "mean": round(statistics.fmean(seconds), 1) if seconds else None,
            "median": round(statistics.median(seconds), 1) if seconds else None,
            "max": max(seconds, default=None),
        },
        "auc_useful": mean(useful_auc),
        "useful_share": mean([sum(r["useful"]) / len(r["useful"]) for r in scored]),
        "bm25": {
            "auc_all_items": mean([a for r in rows if (a := auc(r["bm25"], r["labels"])) is not None]),
            "auc_scored_items": mean([a for r in scored if (a := auc(r["bm25"], r["labels"])) is not None]),
        },
    }


async def run(args: argparse.Namespace, items: list[dict[str, Any]]) -> tuple[LLMJudge, list[dict[str, Any]]]:
    judge = LLMJudge(
        args.model,
        api_base=args.api_base,
        api_key=args.api_key,
        timeout=args.timeout,
        max_tokens=args.max_tokens,
        contexts_per_call=args.contexts_per_call,
        context_window=args.context_window,
        reason_chars=args.reason_chars,
        concurrency=1,
        cache=False,
    )
    rows = []
    out = args.out.open("w") if args.out else None
    try:
        for n, item in enumerate(items, 1):
            row = await judge_item(judge, item)
            rows.append(row)
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()
            print(f"[{n}/{len(items)}] {row['seconds']:.0f}s {row['error'] or 'scored'} "
                  f"calls={row['usage']['calls']} paths={judge.path_counts()}", file=sys.stderr, flush=True)
    finally:
        if out:
            out.close()
    return judge, rows


async def cancel_check(args: argparse.Namespace, item: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Is a timed-out call cancelled on the server? Judge one item with a `timeout` shorter than the
    call needs, then time a one-token request: the server answers one request at a time, so it answers
    soon only if it stopped generating the abandoned answer. Streamed (the default) and not."""
    import litellm

    out: dict[str, Any] = {"timeout_s": timeout}
    for stream in (True, False):
        judge = LLMJudge(args.model, api_base=args.api_base, api_key=args.api_key, timeout=timeout,
                         max_retries=0, cache=False, stream=stream, context_window=args.context_window)
        row = await judge_item(judge, item)
        started = time.perf_counter()
        await litellm.acompletion(model=args.model, api_base=args.api_base, api_key=args.api_key, max_tokens=1,
                                  messages=[{"role": "user", "content": "Say OK."}], timeout=1800)
        out["stream" if stream else "no_stream"] = {
            "judged": row["error"] or "scored",
            "seconds_until_the_server_answers_again": round(time.perf_counter() - started, 1),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA, help="HotpotQA JSONL (default: the repo's subset)")
    parser.add_argument("--limit", type=int, default=20, help="the first N items (default 20)")
    parser.add_argument("--api-base", required=True, help="the server's OpenAI-compatible base URL (.../v1)")
    parser.add_argument("--model", default="openai/judge", help="litellm model string (default openai/judge)")
    parser.add_argument("--api-key", default="unused")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per call (default 600)")
    parser.add_argument("--max-tokens", type=int, default=None, help="per call (default: derived)")
    parser.add_argument("--contexts-per-call", type=int, default=None)
    parser.add_argument("--context-window", type=int, default=None, help="the server's n_ctx")
    parser.add_argument("--reason-chars", type=int, default=80)
    parser.add_argument("--out", type=Path, default=None, help="per-item rows as JSON lines")
    parser.add_argument("--cancel-check", type=float, default=None, metavar="TIMEOUT",
                        help="only check that a call timed out after TIMEOUT seconds stops on the server")
    args = parser.parse_args()
    items = load_items(args.limit, args.data)
    if args.cancel_check is not None:
        print(json.dumps(asyncio.run(cancel_check(args, items[-1], args.cancel_check)), indent=2))
        return
    started = time.perf_counter()
    judge, rows = asyncio.run(run(args, items))
    report = {
        "model": args.model,
        "api_base": args.api_base,
        "settings": {k: v for k, v in vars(args).items() if k not in ("api_key", "out", "data")},
        "data": args.data.name,
        "mode": judge.mode,
        "wall_s": round(time.perf_counter() - started, 1),
        **summarize(rows),
        "paths": judge.path_counts(),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
