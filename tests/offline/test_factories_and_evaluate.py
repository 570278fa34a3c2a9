"""The seed-compatible factories and evaluate(), with a scripted judge (the real judges have their own tests)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ragtrace.judges import Judgement, JudgeRequest, JudgeTimeout
from ragtrace.offline import (
    create_context_precision_scorer,
    create_context_recall_scorer,
    create_context_relevance_scorer,
    evaluate,
)
from ragtrace.scoring import Aspect, ClaimVerdict, ContextVerdict, JudgeUsage, RagSample, Verdicts


class KeywordJudge:
    """Marks a context useful/high/used when it contains the word 'gold'; fails on queries with 'timeout'."""

    model = "test/keyword"
    prompt_version = "kw-1"
    fused = True

    def __init__(self) -> None:
        self.requests: list[JudgeRequest] = []

    async def judge(self, request: JudgeRequest) -> Judgement:
        self.requests.append(request)
        if "timeout" in request.sample.query:
            raise JudgeTimeout("judge did not answer within 1.0 s", JudgeUsage(calls=1, model=self.model))
        contexts = [
            ContextVerdict(
                index=i, useful="gold" in c.content, level="high" if "gold" in c.content else "none",
                used="gold" in c.content,
            )
            for i, c in enumerate(request.sample.contexts)
        ]
        claims = None
        if Aspect.CLAIMS in request.aspects and request.sample.ground_truth:
            text = " ".join(request.sample.context_texts)
            claims = [
                ClaimVerdict(claim=part, supported=part in text)
                for part in request.sample.ground_truth.split(". ")
            ]
        usage = JudgeUsage(calls=1, input_tokens=100, output_tokens=20, model=self.model)
        return Judgement(verdicts=Verdicts(contexts=contexts, claims=claims), usage=usage)


AGENT_RUN: dict[str, Any] = {
    "input": {"inputMessages": [{"id": "1", "role": "user", "content": "Where is the gold?"}]},
    "output": [{"id": "2", "role": "assistant", "content": "In the vault."}],
    "groundTruth": "gold is in the vault. gold is heavy",
}


def test_factory_runs_on_agent_run_shape_with_static_context() -> None:
    scorer = create_context_precision_scorer(
        model=KeywordJudge(), options={"context": ["tin", "gold in the vault", "gold is heavy"], "scale": 10}
    )
    result = scorer.run(AGENT_RUN)
    # Reference is the ground truth; relevance [0, 1, 1] -> AP = (1/2 + 2/3) / 2 = 0.5833.
    assert result["score"] == 5.83 and result["name"] == "context_precision"
    assert result["reason"].startswith("2 of 3 contexts useful; first useful at rank 2")


def test_context_extractor_wins_over_context() -> None:
    seen: list[tuple[Any, Any]] = []

    def extractor(run_input: Any, run_output: Any) -> list[str]:
        seen.append((run_input, run_output))
        return ["gold in the vault"]

    scorer = create_context_relevance_scorer(
        model=KeywordJudge(),
        options={"context": ["tin"], "contextExtractor": extractor, "penalties": {"unusedHighRelevanceContext": 0.2}},
    )
    assert scorer.run(AGENT_RUN)["score"] == 1.0
    assert seen and seen[0][0] == AGENT_RUN["input"]
    assert scorer.scorer.unused_high_penalty == 0.2  # type: ignore[attr-defined]


def test_recall_factory_and_async_run() -> None:
    judge = KeywordJudge()
    scorer = create_context_recall_scorer(model=judge, options={"context": ["gold is in the vault"]})
    result = asyncio.run(scorer.arun(AGENT_RUN))
    assert result["score"] == 0.5 and "1 of 2 ground-truth claims" in result["reason"]
    no_truth = {**AGENT_RUN, "groundTruth": None}
    assert scorer.run(no_truth)["skipped"] == "no_ground_truth"
    assert len(judge.requests) == 1  # a skip never calls the judge


@pytest.mark.parametrize("options", [None, {}, {"context": []}, {"scale": 2}])
def test_missing_context_source_is_a_clear_error(options: Any) -> None:
    with pytest.raises(ValueError, match="context_extractor"):
        create_context_precision_scorer(model=KeywordJudge(), options=options)


def test_bad_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="scale"):
        create_context_precision_scorer(model=KeywordJudge(), options={"context": ["a"], "scale": 0})
    with pytest.raises(ValueError):
        create_context_relevance_scorer(
            model=KeywordJudge(), options={"context": ["a"], "penalties": {"missingContextPerItem": 2}}
        )
    with pytest.raises(TypeError, match="judge"):
        create_context_precision_scorer(model=42, options={"context": ["a"]})  # type: ignore[arg-type]


def test_evaluate_summaries_callbacks_and_typed_errors() -> None:
    samples: list[Any] = [
        RagSample(query="q1", contexts=["gold", "tin"], response="r", ground_truth="gold"),
        {"question": "q2", "contexts": ["tin", "gold"], "response": "r", "id": "row-2"},
        {"query": "timeout please", "contexts": ["gold"], "response": "r"},
        {"query": "q4", "contexts": [], "response": "r"},
    ]
    seen: list[int] = []
    report = evaluate(samples, judge=KeywordJudge(), concurrency=2, on_item_complete=lambda i: seen.append(i.index))
    assert sorted(seen) == [0, 1, 2, 3]
    assert [i.index for i in report.items] == [0, 1, 2, 3] and report.items[1].id == "row-2"
    precision = report.summaries["context_precision"]
    assert precision.scored == 2 and precision.mean == 0.75 and precision.pass_rate == 1.0
    assert precision.errors == {"judge_timeout": 1} and precision.skipped == {"no_context": 1}
    assert report.summaries["context_recall"].skipped == {"no_ground_truth": 3}
    assert report.items[2].results["context_relevance"].error == "judge_timeout"
    assert report.usage.calls == 3  # one fused call per judged item, the timeout's included


def test_evaluate_names_the_bad_row() -> None:
    with pytest.raises(ValueError, match="sample 1"):
        evaluate([{"query": "ok", "contexts": []}, {"contexts": ["x"]}], judge=KeywordJudge())
