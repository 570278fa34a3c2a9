"""Seed-compatible entry points: `create_context_*_scorer(model=..., options=...)` with `run` / `arun`.

They accept a `RagSample` or the agent-run shape, and return the result as a dict (`score`, `reason`, ...).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ragtrace.judges import Judge, judge_and_score
from ragtrace.judges.resolve import resolve_judge
from ragtrace.offline.agent_run import query_of, response_of
from ragtrace.scoring import ContextPrecision, ContextRecall, ContextRelevance, RagSample, Scorer

ContextExtractor = Callable[[Any, Any], Sequence[str]]


class Penalties(BaseModel):
    """Relevance penalties; the seed's camelCase names are accepted too."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    unused_high_penalty: float = Field(0.10, alias="unusedHighRelevanceContext", ge=0, le=1)
    missing_per_item: float = Field(0.15, alias="missingContextPerItem", ge=0, le=1)
    max_missing_penalty: float = Field(0.50, alias="maxMissingContextPenalty", ge=0, le=1)


class ScorerOptions(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid", arbitrary_types_allowed=True)

    context: list[str] | None = None
    context_extractor: ContextExtractor | None = Field(None, alias="contextExtractor")
    scale: float = Field(1.0, gt=0)
    threshold: float = Field(0.5, ge=0, le=1)
    penalties: Penalties = Field(default_factory=Penalties)
    reference: str = "auto"

    @model_validator(mode="after")
    def _context_source(self) -> ScorerOptions:
        if self.context_extractor is None and not self.context:
            raise ValueError(
                "options need 'context' (a non-empty list of strings) or 'context_extractor' "
                "(a function of (input, output) returning the contexts)"
            )
        return self


class RetrievalScorer:
    """One scorer bound to a judge and to where its contexts come from."""

    def __init__(self, scorer: Scorer, judge: Judge, options: ScorerOptions) -> None:
        self.scorer = scorer
        self.judge = judge
        self.options = options

    @property
    def name(self) -> str:
        return self.scorer.name

    def sample_of(self, run: RagSample | Mapping[str, Any]) -> RagSample:
        if isinstance(run, RagSample):
            return run
        if not isinstance(run, Mapping):
            raise TypeError(f"run must be a RagSample or an agent-run mapping, got {type(run).__name__}")
        run_input, run_output = run.get("input"), run.get("output")
        extractor = self.options.context_extractor
        contexts = list(extractor(run_input, run_output)) if extractor else list(self.options.context or [])
        ground_truth = run.get("groundTruth", run.get("ground_truth"))
        return RagSample(
            query=query_of(run_input),
            contexts=contexts,
            response=response_of(run_output),
            ground_truth=ground_truth if isinstance(ground_truth, str) else None,
        )

    async def arun(self, run: RagSample | Mapping[str, Any]) -> dict[str, Any]:
        scores = await judge_and_score(self.sample_of(run), [self.scorer], self.judge)
        return scores.results[0].as_dict()

    def run(self, run: RagSample | Mapping[str, Any]) -> dict[str, Any]:
        """Blocking form of `arun`. Inside a running event loop, await `arun` instead."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.arun(run))
        raise RuntimeError("run() was called inside an event loop; use `await scorer.arun(...)` instead")


def _build(kind: str, model: str | Judge, options: ScorerOptions | Mapping[str, Any] | None) -> RetrievalScorer:
    opts = options if isinstance(options, ScorerOptions) else ScorerOptions.model_validate(options or {})
    scorer: Scorer
    if kind == "precision":
        scorer = ContextPrecision(scale=opts.scale, threshold=opts.threshold, reference_source=opts.reference)  # type: ignore[arg-type]
    elif kind == "relevance":
        p = opts.penalties
        scorer = ContextRelevance(
            scale=opts.scale,
            threshold=opts.threshold,
            unused_high_penalty=p.unused_high_penalty,
            missing_per_item=p.missing_per_item,
            max_missing_penalty=p.max_missing_penalty,
        )
    else:
        scorer = ContextRecall(scale=opts.scale, threshold=opts.threshold)
    return RetrievalScorer(scorer, resolve_judge(model), opts)


def create_context_precision_scorer(
    *, model: str | Judge, options: ScorerOptions | Mapping[str, Any] | None = None
) -> RetrievalScorer:
    return _build("precision", model, options)


def create_context_relevance_scorer(
    *, model: str | Judge, options: ScorerOptions | Mapping[str, Any] | None = None
) -> RetrievalScorer:
    return _build("relevance", model, options)


def create_context_recall_scorer(
    *, model: str | Judge, options: ScorerOptions | Mapping[str, Any] | None = None
) -> RetrievalScorer:
    return _build("recall", model, options)
