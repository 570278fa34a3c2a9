"""A scripted judge and the datasets it scores exactly, for tests of the offline stack (CLI, pytest helper).

The CLI names the judge as `python:tests.offline.gold:GoldJudge` (JUDGE), the same hook a user's custom
judge goes through, so the tests run the real CLI path end to end without a model.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from ragtrace.judges import Judgement, JudgeRequest, JudgeTimeout
from ragtrace.scoring import Aspect, ClaimVerdict, ContextVerdict, JudgeUsage, Verdicts

JUDGE = "python:tests.offline.gold:GoldJudge"


class GoldJudge:
    """A context is useful, highly relevant and used iff it contains 'gold'. Claims: ground-truth sentences
    found verbatim in the contexts. Sleeps RAGTRACE_TEST_JUDGE_DELAY seconds per call; 'timeout' queries fail."""

    model = "test/gold"
    prompt_version = "gold-1"
    fused = True

    async def judge(self, request: JudgeRequest) -> Judgement:
        delay = float(os.environ.get("RAGTRACE_TEST_JUDGE_DELAY", "0"))
        if delay:
            await asyncio.sleep(delay)
        if "timeout" in request.sample.query:
            raise JudgeTimeout("no answer within 1 s", JudgeUsage(calls=1, model=self.model))
        contexts = [
            ContextVerdict(
                index=i, useful="gold" in c.content, level="high" if "gold" in c.content else "none",
                used="gold" in c.content, reason="mentions gold" if "gold" in c.content else "no gold",
            )
            for i, c in enumerate(request.sample.contexts)
        ]
        claims = None
        if Aspect.CLAIMS in request.aspects and request.sample.ground_truth:
            text = " ".join(request.sample.context_texts)
            claims = [ClaimVerdict(claim=p, supported=p in text) for p in request.sample.ground_truth.split(". ")]
        usage = JudgeUsage(calls=1, input_tokens=50, output_tokens=5, model=self.model)
        return Judgement(verdicts=Verdicts(contexts=contexts, claims=claims), usage=usage)


def average_precision(relevant: list[bool]) -> float:
    hits, total = 0, 0.0
    for k, rel in enumerate(relevant, start=1):
        if rel:
            hits += 1
            total += hits / k
    return total / hits if hits else 0.0


def make_rows(n: int, gold_at: Any = lambda i: i % 3) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        contexts = ["tin ore", "lead pipe", "iron gate"]
        contexts[gold_at(i)] = f"gold bar {i}"
        rows.append({"id": f"q{i}", "query": f"where is the gold {i}?", "contexts": contexts,
                     "response": "In the vault.", "ground_truth": f"gold bar {i}"})
    return rows


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def expected_precision_mean(rows: list[dict[str, Any]]) -> float:
    scores = [round(average_precision(["gold" in c for c in r["contexts"]]), 2) for r in rows]
    return round(sum(scores) / len(scores), 4)
