"""Retrieval quality as a test assertion, public as `ragtrace.testing`: `assert_retrieval(samples, min_precision=0.7)`.

The failure message is written for the person reading a red CI run: which scorer, its mean against the
threshold, and the worst items with the judge's reasons, so the fix can start without re-running anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ragtrace._text import shorten
from ragtrace.judges import Judge
from ragtrace.offline.evaluate import EvaluationReport, aevaluate
from ragtrace.scoring import ContextPrecision, ContextRecall, ContextRelevance, RagSample, Scorer

WORST = 3


def _plan(
    min_precision: float | None, min_relevance: float | None, min_recall: float | None, scale: float
) -> list[tuple[Scorer, float]]:
    plan: list[tuple[Scorer, float]] = []
    for scorer, minimum in (
        (ContextPrecision(scale=scale), min_precision),
        (ContextRelevance(scale=scale), min_relevance),
        (ContextRecall(scale=scale), min_recall),
    ):
        if minimum is None:
            continue
        if not 0 <= minimum <= scale:
            raise ValueError(f"threshold for {scorer.name} must be between 0 and {scale:g}, got {minimum!r}")
        plan.append((scorer, minimum))
    if not plan:
        raise ValueError("give at least one of min_precision, min_relevance, min_recall")
    return plan


def failure_message(report: EvaluationReport, thresholds: Mapping[str, float], samples: Sequence[RagSample]) -> str:
    """Empty when every mean holds; otherwise one paragraph per failing scorer."""
    parts = []
    for name, minimum in thresholds.items():
        summary = report.summaries[name]
        if summary.mean is not None and summary.mean >= minimum:
            continue
        counts = f"{summary.scored} scored of {summary.count}"
        if summary.skipped:
            counts += ", skipped " + ", ".join(f"{k} {v}" for k, v in summary.skipped.items())
        if summary.errors:
            counts += ", errors " + ", ".join(f"{k} {v}" for k, v in summary.errors.items())
        if summary.mean is None:
            parts.append(f"{name}: no item could be scored, min {minimum:g} ({counts})")
            continue
        parts.append(f"{name}: mean {summary.mean:.3f} < min {minimum:g} ({counts})")
        scored = [i for i in report.items if i.results[name].score is not None]
        for item in sorted(scored, key=lambda i: (i.results[name].score, i.index))[:WORST]:
            result = item.results[name]
            label = item.id if item.id is not None else f"#{item.index}"
            parts.append(
                f"  {label} {result.score:.2f} {shorten(samples[item.index].query, 70)!r}: "
                f"{shorten(result.reason, 110)}"
            )
    return "\n".join(parts)


def _samples(samples: Iterable[RagSample | Mapping[str, Any]]) -> tuple[list[Any], list[RagSample]]:
    from ragtrace.offline.evaluate import as_sample

    rows = list(samples)
    return rows, [as_sample(r) for r in rows]


async def aassert_retrieval(
    samples: Iterable[RagSample | Mapping[str, Any]],
    *,
    judge: str | Judge = "local",
    min_precision: float | None = None,
    min_relevance: float | None = None,
    min_recall: float | None = None,
    scale: float = 1.0,
    concurrency: int = 4,
) -> EvaluationReport:
    """Async form of `assert_retrieval`, for tests that already run an event loop."""
    plan = _plan(min_precision, min_relevance, min_recall, scale)
    rows, parsed = _samples(samples)
    report = await aevaluate(rows, scorers=[s for s, _ in plan], judge=judge, concurrency=concurrency)
    message = failure_message(report, {s.name: m for s, m in plan}, parsed)
    if message:
        raise AssertionError("retrieval quality below threshold\n" + message)
    return report


def assert_retrieval(
    samples: Iterable[RagSample | Mapping[str, Any]],
    *,
    judge: str | Judge = "local",
    min_precision: float | None = None,
    min_relevance: float | None = None,
    min_recall: float | None = None,
    scale: float = 1.0,
    concurrency: int = 4,
) -> EvaluationReport:
    """Score the samples and raise AssertionError when a scorer's MEAN is under its threshold.

    Only the scorers given a threshold run. Returns the report, for further assertions.
    """
    return asyncio.run(
        aassert_retrieval(
            samples, judge=judge, min_precision=min_precision, min_relevance=min_relevance,
            min_recall=min_recall, scale=scale, concurrency=concurrency,
        )
    )


__all__ = ["aassert_retrieval", "assert_retrieval", "failure_message"]
