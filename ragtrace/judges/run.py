"""Judge once, score many: the step shared by the live worker and offline evaluation."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from ragtrace.judges.base import Judge, Judgement, JudgeRequest
from ragtrace.judges.errors import JudgeError
from ragtrace.judges.identity import judge_id as identify
from ragtrace.scoring import JudgeUsage, RagSample, Scorer, ScoreResult


@dataclass(frozen=True)
class SampleScores:
    """Every scorer's result for one sample, and what the judge spent on it in total."""

    results: tuple[ScoreResult, ...]
    usage: JudgeUsage

    def by_name(self) -> dict[str, ScoreResult]:
        return {r.name: r for r in self.results}


def _request(sample: RagSample, scorers: Sequence[Scorer]) -> JudgeRequest:
    reference = next((r for s in scorers if (r := s.reference(sample)) is not None), None)
    return JudgeRequest(sample=sample, aspects=frozenset(s.aspect for s in scorers), reference=reference)


def _apply(scorer: Scorer, sample: RagSample, judgement: Judgement) -> ScoreResult:
    result = scorer.score(sample, judgement.verdicts, judgement.usage)
    if judgement.truncated and result.score is not None:
        details = {**result.details, "truncated_contexts": list(judgement.truncated)}
        result = result.model_copy(update={"details": details})
    return result


async def _judge_group(judge: Judge, sample: RagSample, group: Sequence[Scorer]) -> list[ScoreResult]:
    try:
        judgement = await judge.judge(_request(sample, group))
    except JudgeError as exc:
        return [s.failed(exc.code, str(exc), exc.usage) for s in group]
    except (asyncio.CancelledError, GeneratorExit):  # the score deadline, the worker stopping, the coroutine closed
        raise
    except BaseException as exc:  # a judge bug must cost a score, never the caller: sys.exit() in a library too
        return [s.failed("judge_error", f"{type(exc).__name__}: {exc}") for s in group]
    return [_apply(s, sample, judgement) for s in group]


def _stamped(result: ScoreResult, judge_id: str) -> ScoreResult:
    return result.model_copy(update={"usage": result.usage.model_copy(update={"judge_id": judge_id})})


async def judge_and_score(
    sample: RagSample, scorers: Sequence[Scorer], judge: Judge, *, judge_id: str | None = None
) -> SampleScores:
    """Skip what cannot apply, ask the judge (once when fused), and score. Never raises a JudgeError.

    Every result the judge answered carries its `judge_id` in its usage (`ragtrace.judge.id`): pass it
    when judging many samples with one judge, else it is worked out here (`judge_identity`)."""
    by_name: dict[str, ScoreResult] = {}
    active: list[Scorer] = []
    for scorer in scorers:
        reason = scorer.skip_reason(sample)
        if reason is None:
            active.append(scorer)
        else:
            by_name[scorer.name] = scorer.skipped(reason)
    groups = [active] if judge.fused else [[s] for s in active]
    usage: JudgeUsage | None = None
    for group in groups:
        if not group:
            continue
        results = await _judge_group(judge, sample, group)
        if judge_id is None:
            judge_id = identify(judge)
        results = [_stamped(r, judge_id) for r in results]
        usage = results[0].usage if usage is None else usage + results[0].usage
        by_name.update((r.name, r) for r in results)
    return SampleScores(results=tuple(by_name[s.name] for s in scorers), usage=usage or JudgeUsage())
