"""The canary: a small labelled set the live judge answers again and again, so that a judge that changed
(another model, another prompt, a provider's silent update) shows as a moved canary while the same judge
over changed retrieval leaves it where it was.

Labels are the rows `eval` reads (JSONL or JSON) with `context_labels: [1, 0, ...]` (which contexts are
useful; compared with the judge's usefulness verdicts) and/or `labels: {"<scorer>": "pass" | "fail"}`
(compared with the scorer's label). The default set is drawn from the shipped `data/hotpotqa` (its gold
paragraphs are the useful contexts). Agreement is the share of labels the judge's answers match; the
score means are each scorer's mean over the set. A run is bounded: at most `size` items, each admitted by
the pipeline's sampler and charged to its budget like any judging, and none once the budget is spent.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from opentelemetry import context as otel_context
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from ragtrace._untraced import suppress_tracing
from ragtrace.judges.base import Judge
from ragtrace.judges.identity import JUDGE_ID, judge_identity
from ragtrace.judges.run import judge_and_score
from ragtrace.live.sampling import Sampler
from ragtrace.offline.labels import load_labels
from ragtrace.scoring import JudgeUsage, RagSample, Scorer, ScoreResult, default_scorers

__all__ = ["DEFAULT_CANARY", "Canary", "CanaryItem", "CanaryRun", "load_canary"]

logger = logging.getLogger("ragtrace.drift")

#: The default canary, shipped in the package (an installed ragtrace has no data/ folder): 20 items drawn
#: evenly from data/hotpotqa/hotpotqa_dev_500.jsonl (every 25th row; HotpotQA dev, CC BY-SA 4.0, see
#: data/hotpotqa/README.md), people's `context_labels` with each.
DEFAULT_CANARY = Path(__file__).with_name("canary_hotpotqa.jsonl")


@dataclass(frozen=True)
class CanaryItem:
    """One labelled sample: which contexts people found useful, and/or the label per scorer."""

    sample: RagSample
    context_labels: tuple[bool | None, ...] | None = None  # None: that context was not labelled
    labels: Mapping[str, str] = field(default_factory=dict)


def load_canary(path: str | Path | None = None, *, size: int = 20) -> list[CanaryItem]:
    """At most `size` labelled items of a labels file (JSONL, JSON, CSV or TSV, read as `ragtrace align` reads
    it; default: the shipped HotpotQA set), taken evenly across the file so the canary covers it, not only
    its first rows. Rows without a label are left out; a bad label is refused with its file and line."""
    if size < 1:
        raise ValueError(f"the canary size must be >= 1, got {size!r}")
    labelled = [item for item in load_labels(path if path is not None else DEFAULT_CANARY) if item.labelled]
    step = max(1, len(labelled) // size)
    return [
        CanaryItem(
            item.sample,
            item.context_labels,
            {name: "pass" if said else "fail" for name, said in item.labels.items()},
        )
        for item in labelled[::step][:size]
    ]


@dataclass(frozen=True)
class CanaryRun:
    """One pass of the judge over the canary: agreement with people, each scorer's mean, what it cost."""

    judge_id: str
    agreement: float | None  # share of labels matched; None when no label could be compared
    compared: int  # labels compared
    means: Mapping[str, float]
    judged: int  # items judged (fewer than the set when the budget stopped the run)
    usage: JudgeUsage
    at: float  # time.time()

    def describe(self) -> str:
        agreement = "n/a" if self.agreement is None else f"{self.agreement:.2f}"
        means = ", ".join(f"{k} {v:.2f}" for k, v in sorted(self.means.items()))
        return f"agreement {agreement} ({self.compared} labels), means {means} [judge {self.judge_id}]"


def _agreements(item: CanaryItem, results: Mapping[str, ScoreResult]) -> list[bool]:
    matches: list[bool] = []
    precision = results.get("context_precision")
    if item.context_labels is not None and precision is not None and precision.score is not None:
        useful = {v["index"]: bool(v["useful"]) for v in precision.details.get("verdicts", [])}
        matches += [useful[i] == label for i, label in enumerate(item.context_labels)
                    if label is not None and i in useful]
    for scorer, label in item.labels.items():
        result = results.get(scorer)
        if result is not None and result.label is not None:
            matches.append(result.label == label)
    return matches


class Canary:
    """Judges `items` with `judge` and `scorers` (default: the default scorers) when asked (`run`).

    `sampler` admits and is charged for each item, as the pipeline's own judgings are: a spent budget
    stops a run. `tolerance` is how far agreement or a score mean may move before the canary counts as
    moved. The first run is the reference the later ones are compared with (`moved`).
    """

    def __init__(
        self,
        judge: Judge,
        items: Sequence[CanaryItem],
        *,
        scorers: Sequence[Scorer] | None = None,
        sampler: Sampler | None = None,
        tolerance: float = 0.1,
        concurrency: int = 4,
    ) -> None:
        if not items:
            raise ValueError("the canary needs at least one labelled item")
        if not 0 < tolerance <= 1:
            raise ValueError(f"tolerance must be in (0, 1], got {tolerance!r}")
        self.judge = judge
        self.items = tuple(items)
        self.scorers = tuple(scorers) if scorers is not None else tuple(default_scorers())
        self.sampler = sampler
        self.tolerance = tolerance
        self.concurrency = concurrency
        self.reference: CanaryRun | None = None
        self.latest: CanaryRun | None = None
        self._lock = threading.Lock()

    def register(self, meter: Meter) -> None:
        """The canary's gauges on `meter`: `ragtrace.judge.canary.agreement` and `ragtrace.judge.canary.score`
        (each scorer's mean over the canary) of the latest run, labelled by its judge's id. A new judge's
        run replaces the old judge's series, which then goes stale: the alert compares with the last day."""
        meter.create_observable_gauge(
            "ragtrace.judge.canary.agreement", callbacks=[self._observe_agreement], unit="",
            description="Share of the canary's human labels the judge agreed with, at its latest run, per judge.",
        )
        meter.create_observable_gauge(
            "ragtrace.judge.canary.score", callbacks=[self._observe_means], unit="",
            description="Mean score of the canary set at its latest run, per judge and scorer.",
        )

    def _observe_agreement(self, _options: CallbackOptions) -> list[Observation]:
        run = self.latest
        if run is None or run.agreement is None:
            return []
        return [Observation(run.agreement, {JUDGE_ID: run.judge_id})]

    def _observe_means(self, _options: CallbackOptions) -> list[Observation]:
        run = self.latest
        if run is None:
            return []
        return [
            Observation(mean, {JUDGE_ID: run.judge_id, "gen_ai.evaluation.name": scorer})
            for scorer, mean in sorted(run.means.items())
        ]

    def run(self) -> CanaryRun | None:
        """Judge the canary now (blocking; one run at a time), with tracing suppressed: the judge's calls
        never enter the app's pipeline. None when the budget admitted no item."""
        with self._lock:
            token = suppress_tracing()
            try:
                run = asyncio.run(self._judge_all())
            finally:
                otel_context.detach(token)  # type: ignore[arg-type]
            if run is None:
                return None
            if self.reference is None:
                self.reference = run
            self.latest = run
        logger.info("ragtrace canary: %s", run.describe())
        return run

    def _admitted(self) -> bool:
        return self.sampler is None or self.sampler.admit() == "ok"

    async def _judge_all(self) -> CanaryRun | None:
        identity = judge_identity(self.judge).id
        gate = asyncio.Semaphore(self.concurrency)

        async def one(item: CanaryItem) -> tuple[CanaryItem, Mapping[str, ScoreResult], JudgeUsage] | None:
            async with gate:
                if not self._admitted():
                    return None
                scores = await judge_and_score(item.sample, self.scorers, self.judge, judge_id=identity)
            if self.sampler is not None:
                self.sampler.charge(scores.usage)
            return item, scores.by_name(), scores.usage

        done = [r for r in await asyncio.gather(*(one(i) for i in self.items)) if r is not None]
        if not done:
            return None
        matches = [m for item, results, _ in done for m in _agreements(item, results)]
        by_scorer: dict[str, list[float]] = {}
        for _, results, _ in done:
            for name, result in results.items():
                if result.score is not None and math.isfinite(result.score):
                    by_scorer.setdefault(name, []).append(float(result.score))
        return CanaryRun(
            judge_id=identity,
            agreement=sum(matches) / len(matches) if matches else None,
            compared=len(matches),
            means={name: sum(v) / len(v) for name, v in by_scorer.items()},
            judged=len(done),
            usage=sum((u for _, _, u in done), JudgeUsage()),
            at=time.time(),
        )

    def moved(self) -> str | None:
        """How the latest run differs from the reference by more than `tolerance` (None: it held, or
        there is no second run to compare)."""
        reference, latest = self.reference, self.latest
        if reference is None or latest is None or latest is reference:
            return None
        changes: list[str] = []
        before_agreement, agreement = reference.agreement, latest.agreement
        if before_agreement is not None and agreement is not None and (
            abs(agreement - before_agreement) >= self.tolerance
        ):
            changes.append(f"agreement {reference.agreement:.2f} -> {latest.agreement:.2f}")
        for name, before in sorted(reference.means.items()):
            after = latest.means.get(name)
            if after is not None and abs(after - before) >= self.tolerance:
                changes.append(f"{name} mean {before:.2f} -> {after:.2f}")
        return "; ".join(changes) or None
