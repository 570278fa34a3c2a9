"""`evaluate()`: score a dataset with the same scorers and judges as the live pipeline."""

from __future__ import annotations

import asyncio
import difflib
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ragtrace._logs import ragtrace_logger
from ragtrace.judges import Judge, judge_and_score, judge_id
from ragtrace.judges.resolve import resolve_judge
from ragtrace.offline.dataset import KNOWN_NAMES, NEAR_NAMES, FieldMap
from ragtrace.scoring import SCORERS, JudgeUsage, RagSample, Scorer, ScoreResult, default_scorers

logger = ragtrace_logger(__name__)


class ItemResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    index: int
    id: str | None = None
    results: dict[str, ScoreResult]
    usage: JudgeUsage


class ScorerSummary(BaseModel):
    """Distribution of one scorer's scores over a dataset. Percentiles are over scored items only."""

    count: int = 0
    scored: int = 0
    mean: float | None = None
    p10: float | None = None
    p50: float | None = None
    p90: float | None = None
    pass_rate: float | None = None
    skipped: dict[str, int] = Field(default_factory=dict)
    errors: dict[str, int] = Field(default_factory=dict)

    @classmethod
    def of(cls, results: Sequence[ScoreResult]) -> ScorerSummary:
        scores = [r.score for r in results if r.score is not None]
        summary = cls(
            count=len(results),
            scored=len(scores),
            skipped=dict(Counter(r.skipped for r in results if r.skipped)),
            errors=dict(Counter(r.error for r in results if r.error)),
        )
        if not scores:
            return summary
        if len(scores) == 1:
            p10 = p50 = p90 = scores[0]
        else:
            deciles = statistics.quantiles(scores, n=10, method="inclusive")
            p10, p50, p90 = deciles[0], deciles[4], deciles[8]
        passed = sum(1 for r in results if r.label == "pass")
        return summary.model_copy(
            update={
                "mean": round(statistics.fmean(scores), 4),
                "p10": round(p10, 4),
                "p50": round(p50, 4),
                "p90": round(p90, 4),
                "pass_rate": round(passed / len(scores), 4),
            }
        )


class EvaluationReport(BaseModel):
    items: list[ItemResult]
    summaries: dict[str, ScorerSummary]
    usage: JudgeUsage


#: A row's own keys. Each field is also read under its other known names (`KNOWN_NAMES`: the ragas schemas),
#: as in a dataset file.
ROW_KEYS = ("query", "contexts", "response", "ground_truth", "metadata", "id")

#: Names a row may use that ragtrace does not read: refused with the name to use instead. A known name
#: is refused too when the row also has the field's first name (`answer` beside `response` would go unread).
KNOWN_ALIASES = {
    **{alias: field for field, names in KNOWN_NAMES.items() for alias in names[1:]},
    **NEAR_NAMES,
}


def _unknown_key_error(unknown: Sequence[str]) -> ValueError:
    hints = []
    for key in unknown:
        near = KNOWN_ALIASES.get(key) or next(iter(difflib.get_close_matches(key, ROW_KEYS, n=1)), None)
        hints.append(f"{key!r} (did you mean {near!r}?)" if near else repr(key))
    others = ", ".join(f"{name!r} for {field!r}" for field, names in KNOWN_NAMES.items() for name in names[1:])
    return ValueError(
        f"unknown key(s) {', '.join(hints)}; a row's keys are {', '.join(ROW_KEYS)}, or {others} (anything "
        "else goes under 'metadata')"
    )


def as_sample(item: RagSample | Mapping[str, Any]) -> RagSample:
    """A dataset row as a sample, its fields found by name as in a dataset file. A key ragtrace does not
    read is an error, not a silent skip: `context` or `answer` left unread would score a different sample."""
    if isinstance(item, RagSample):
        return item
    row = dict(item)
    names = FieldMap()
    columns = {field: names.column(field, row) for field in ("query", "contexts", "response", "ground_truth")}
    unknown = [str(k) for k in row if k not in ("metadata", "id", *columns.values())]
    if unknown:
        raise _unknown_key_error(unknown)
    values = {field: row[column] for field, column in columns.items() if column in row}
    if "metadata" in row:
        values["metadata"] = row["metadata"]
    return RagSample.model_validate(values)


def _scorers(scorers: Sequence[Scorer | str] | None) -> list[Scorer]:
    if scorers is None:
        return default_scorers()
    resolved = []
    for s in scorers:
        if isinstance(s, str):
            if s not in SCORERS:
                raise ValueError(f"unknown scorer {s!r}; choose from {', '.join(SCORERS)}")
            resolved.append(SCORERS[s]())
        else:
            resolved.append(s)
    return resolved


async def aevaluate(
    samples: Iterable[RagSample | Mapping[str, Any]],
    *,
    scorers: Sequence[Scorer | str] | None = None,
    judge: str | Judge = "local",
    concurrency: int = 4,
    on_item_complete: Callable[[ItemResult], None] | None = None,
) -> EvaluationReport:
    """Score every sample; judge failures become typed errors in the results, never exceptions."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    active_scorers = _scorers(scorers)
    active_judge = resolve_judge(judge)
    rows = list(samples)
    parsed = []
    for index, row in enumerate(rows):  # bad rows fail here, before any judge call
        try:
            parsed.append(as_sample(row))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"sample {index}: {exc}") from exc
    gate = asyncio.Semaphore(concurrency)
    # Once for the run (the local judge's digests its model files); loads what the first sample would.
    identity = await asyncio.to_thread(judge_id, active_judge)

    async def one(index: int, sample: RagSample, row: Any) -> ItemResult:
        async with gate:
            scores = await judge_and_score(sample, active_scorers, active_judge, judge_id=identity)
        item_id = row.get("id") if isinstance(row, Mapping) else sample.metadata.get("id")
        item = ItemResult(
            index=index,
            id=str(item_id) if item_id is not None else None,
            results=scores.by_name(),
            usage=scores.usage,
        )
        if on_item_complete is not None:
            try:
                on_item_complete(item)
            except Exception:
                logger.exception("on_item_complete raised for item %d; evaluation goes on", index)
        return item

    items = await asyncio.gather(*(one(i, s, r) for i, (s, r) in enumerate(zip(parsed, rows, strict=True))))
    usage = sum((item.usage for item in items), JudgeUsage()).model_copy(update={"judge_id": identity})
    summaries = {s.name: ScorerSummary.of([item.results[s.name] for item in items]) for s in active_scorers}
    return EvaluationReport(items=list(items), summaries=summaries, usage=usage)


def evaluate(
    samples: Iterable[RagSample | Mapping[str, Any]],
    *,
    scorers: Sequence[Scorer | str] | None = None,
    judge: str | Judge = "local",
    concurrency: int = 4,
    on_item_complete: Callable[[ItemResult], None] | None = None,
) -> EvaluationReport:
    """Blocking form of `aevaluate`, for scripts and CI."""
    return asyncio.run(
        aevaluate(samples, scorers=scorers, judge=judge, concurrency=concurrency, on_item_complete=on_item_complete)
    )
