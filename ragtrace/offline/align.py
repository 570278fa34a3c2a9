"""`align()`: does a judge agree with people? One or several judges against the same human labels.

The judges score the labelled samples with the same scorers and `judge_and_score` step as `evaluate()` and
live scoring; the per-context usefulness verdicts (context_precision's) are compared with people's
`context_labels`, each scorer's pass/fail with people's `labels`. Every label set gets kappa, accuracy,
precision / recall / F1 of each label, the AUC and calibration of the judge's graded value, the confusion
matrix and the units it disagrees on most; two judges on the same units get McNemar's exact test.
The metrics themselves are pure (`ragtrace.offline.agreement`).
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ragtrace.judges import Judge, Judgement, JudgeRequest, judge_and_score
from ragtrace.judges.resolve import resolve_judge
from ragtrace.offline.agreement import Confusion, calibration, expected_calibration_error, mcnemar_exact, roc_auc
from ragtrace.offline.labels import LabelledItem, labelled_rows, load_labels
from ragtrace.scoring import SCORERS, Aspect, ContextPrecision, JudgeUsage, Scorer, ScoreResult, Verdicts

#: The label set of people's per-context usefulness labels (the others are named after their scorer).
CONTEXTS = "contexts"


# ---------------------------------------------------------------- what a judge said


@dataclass(frozen=True)
class JudgedItem:
    """One judge's answer on one labelled item: each scorer's result and, when usefulness was judged, the
    per-context (useful, confidence) verdicts."""

    results: dict[str, ScoreResult]
    usefulness: tuple[tuple[bool, float | None], ...] | None = None
    usage: JudgeUsage = field(default_factory=JudgeUsage)


@dataclass
class JudgeOutcome:
    """What one judge said on every item (None: not asked, the item carries no label)."""

    name: str
    model: str
    prompt_version: str
    judge_id: str | None
    items: list[JudgedItem | None]
    usage: JudgeUsage


def judge_id_of(judge: Judge) -> str | None:
    """The judge's identity digest (`ragtrace.judge.id`: `ragtrace.judges.judge_id`, issue 26 item 2), or None
    on a ragtrace without it. The one place align reads it: every output that names a judge (text, JSON,
    HTML) takes it from here, and Phoenix's recorded judge from the spans' `ragtrace.judge.id`."""
    identify = getattr(importlib.import_module("ragtrace.judges"), "judge_id", None)
    if callable(identify):
        value = identify(judge)
        return str(value) if value is not None else None
    return None


class _Recording:
    """A judge that keeps the usefulness verdicts it hands out (with their confidence, which the scorer's
    details leave out), by sample; it judges exactly as the judge it wraps."""

    def __init__(self, judge: Judge) -> None:
        self.inner = judge
        self.model, self.prompt_version, self.fused = judge.model, judge.prompt_version, judge.fused
        self.verdicts: dict[int, Verdicts] = {}

    async def judge(self, request: JudgeRequest) -> Judgement:
        judgement = await self.inner.judge(request)
        if Aspect.USEFULNESS in request.aspects:
            self.verdicts[id(request.sample)] = judgement.verdicts
        return judgement


async def run_judge(
    items: Sequence[LabelledItem], scorers: Sequence[Scorer], judge: Judge, *, name: str, concurrency: int = 4,
    on_item: Callable[[], None] | None = None,
) -> JudgeOutcome:
    """Score the labelled items with one judge; unlabelled items are not sent to it."""
    recording = _Recording(judge)
    gate = asyncio.Semaphore(concurrency)

    async def one(item: LabelledItem) -> JudgedItem | None:
        if not item.labelled:
            return None
        async with gate:
            scores = await judge_and_score(item.sample, scorers, recording)
        if on_item is not None:
            on_item()
        verdicts = recording.verdicts.pop(id(item.sample), None)
        usefulness = None
        if verdicts is not None and ContextPrecision.name in scores.by_name():
            usefulness = tuple((bool(v.useful), v.confidence) for v in verdicts.contexts)
        return JudgedItem(results=scores.by_name(), usefulness=usefulness, usage=scores.usage)

    judged = await asyncio.gather(*(one(item) for item in items))
    usage = sum((j.usage for j in judged if j is not None), JudgeUsage())
    return JudgeOutcome(name, judge.model, judge.prompt_version, judge_id_of(judge), list(judged), usage)


# ---------------------------------------------------------------- the report


class LabelStats(BaseModel):
    precision: float | None
    recall: float | None
    f1: float | None
    support: int


class CalibrationRow(BaseModel):
    low: float
    high: float
    count: int
    mean_score: float
    yes_rate: float


class Disagreement(BaseModel):
    """A unit where the judge and people differ, `score` being the judge's graded value in [0, 1]."""

    item: str
    context: int | None = None
    human: bool
    judge: bool
    score: float
    query: str
    text: str = Field(description="the context (per-context labels) or the judge's reason (per-sample labels)")


class Agreement(BaseModel):
    """One judge against people on one label set (`contexts`, or a scorer's pass/fail)."""

    labels: str
    units: int
    unjudged: dict[str, int] = Field(default_factory=dict)
    human_yes: int = 0
    accuracy: float | None = None
    kappa: float | None = None
    yes: LabelStats | None = None
    no: LabelStats | None = None
    auc: float | None = None
    auc_of: str = Field(default="", description="confidence, score, or verdict (a yes/no: AUC = balanced accuracy)")
    confusion: dict[str, int] = Field(default_factory=dict)
    calibration: list[CalibrationRow] = Field(default_factory=list)
    ece: float | None = None
    disagreements: list[Disagreement] = Field(default_factory=list)


class JudgeAlignment(BaseModel):
    judge: str
    model: str
    prompt_version: str
    judge_id: str | None = None
    usage: JudgeUsage
    agreements: dict[str, Agreement]


class PairedTest(BaseModel):
    """McNemar's exact test of two judges on the units both judged (correct = agrees with people)."""

    labels: str
    a: str
    b: str
    units: int
    a_accuracy: float | None
    b_accuracy: float | None
    only_a: int
    only_b: int
    p_value: float
    better: str | None = Field(description="the judge that agrees significantly more often (p < alpha), or None")


class GateResult(BaseModel):
    judge: str
    labels: str
    metric: str
    minimum: float
    value: float | None
    passed: bool


class AlignmentReport(BaseModel):
    source: str
    items: int
    labelled: dict[str, int]
    judges: list[JudgeAlignment]
    comparisons: list[PairedTest] = Field(default_factory=list)
    gates: list[GateResult] = Field(default_factory=list)
    alpha: float = 0.05
    warnings: list[str] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)


# ---------------------------------------------------------------- measuring


@dataclass(frozen=True)
class Unit:
    """One labelled thing both sides answered: people's label, the judge's verdict and graded value."""

    item: int
    context: int | None
    human: bool
    judge: bool
    score: float


def units_of(items: Sequence[LabelledItem], outcome: JudgeOutcome, labels: str,
             scales: Mapping[str, float]) -> tuple[list[Unit], Counter[str], str]:
    """The units of one label set, why labelled ones went unjudged, and what the graded value is."""
    units: list[Unit] = []
    unjudged: Counter[str] = Counter()
    graded = {"confidence": 0, "verdict": 0}
    for index, (item, judged) in enumerate(zip(items, outcome.items, strict=True)):
        wanted = _wanted(item, labels)
        if not wanted:
            continue
        result = judged.results.get(ContextPrecision.name if labels == CONTEXTS else labels) if judged else None
        if labels == CONTEXTS:
            if judged is None or judged.usefulness is None:
                unjudged[_why_not(result, labels)] += len(wanted)
                continue
            for i, human in wanted:
                useful, confidence = judged.usefulness[i]
                graded["confidence" if confidence is not None else "verdict"] += 1
                score = confidence if confidence is not None else float(useful)
                units.append(Unit(index, i, human, useful, score))
        elif result is None or result.score is None:
            unjudged[_why_not(result, labels)] += 1
        else:
            scale = scales.get(labels, 1.0)
            score = min(1.0, max(0.0, result.score / scale))
            units.append(Unit(index, None, wanted[0][1], result.label == "pass", score))
    auc_of = "score" if labels != CONTEXTS else ("confidence" if not graded["verdict"] else "verdict")
    return units, unjudged, auc_of


def _wanted(item: LabelledItem, labels: str) -> list[tuple[int, bool]]:
    if labels == CONTEXTS:
        return [(i, y) for i, y in enumerate(item.context_labels or ()) if y is not None]
    return [(0, item.labels[labels])] if labels in item.labels else []


def _why_not(result: ScoreResult | None, labels: str) -> str:
    if result is None:
        return "context_precision not scored" if labels == CONTEXTS else "scorer not run"
    return result.error or result.skipped or "no verdicts"


def agreement_of(items: Sequence[LabelledItem], outcome: JudgeOutcome, labels: str, options: Settings) -> Agreement:
    units, unjudged, auc_of = units_of(items, outcome, labels, options.scales)
    result = Agreement(labels=labels, units=len(units), unjudged=dict(unjudged), auc_of=auc_of)
    if not units:
        return result
    human = [u.human for u in units]
    verdicts = [u.judge for u in units]
    scores = [u.score for u in units]
    confusion = Confusion.of(verdicts, human)
    table = calibration(scores, human, options.bins)
    return result.model_copy(update={
        "human_yes": sum(human),
        "accuracy": confusion.accuracy,
        "kappa": confusion.kappa(),
        "yes": LabelStats(**confusion.label_scores(True).__dict__),
        "no": LabelStats(**confusion.label_scores(False).__dict__),
        "auc": roc_auc(scores, human),
        "confusion": {"tp": confusion.tp, "fp": confusion.fp, "fn": confusion.fn, "tn": confusion.tn},
        "calibration": [CalibrationRow(**row.__dict__) for row in table],
        "ece": expected_calibration_error(table),
        "disagreements": _disagreements(items, outcome, units, labels, options.worst),
    })


def _disagreements(items: Sequence[LabelledItem], outcome: JudgeOutcome, units: Sequence[Unit], labels: str,
                   worst: int) -> list[Disagreement]:
    """The wrong verdicts, the most confidently wrong first (score farthest from people's label)."""
    wrong = sorted((u for u in units if u.judge != u.human), key=lambda u: -abs(u.score - float(u.human)))
    chosen = []
    for unit in wrong[:worst]:
        item = items[unit.item]
        if unit.context is not None:
            text = item.sample.contexts[unit.context].content
        else:
            judged = outcome.items[unit.item]
            text = judged.results[labels].reason if judged is not None else ""
        chosen.append(Disagreement(item=item.key, context=unit.context, human=unit.human, judge=unit.judge,
                                   score=round(unit.score, 4), query=item.sample.query, text=text[:700]))
    return chosen


def paired_tests(items: Sequence[LabelledItem], outcomes: Sequence[JudgeOutcome], label_sets: Sequence[str],
                 scales: Mapping[str, float], alpha: float) -> list[PairedTest]:
    """McNemar's exact test for every pair of judges on every label set, on the units both judged."""
    tests = []
    for a, b in itertools.combinations(outcomes, 2):
        for labels in label_sets:
            units_a = {(u.item, u.context): u for u in units_of(items, a, labels, scales)[0]}
            units_b = {(u.item, u.context): u for u in units_of(items, b, labels, scales)[0]}
            common = [key for key in units_a if key in units_b]
            if not common:
                continue
            right_a = [units_a[k].judge == units_a[k].human for k in common]
            right_b = [units_b[k].judge == units_b[k].human for k in common]
            test = mcnemar_exact(right_a, right_b)
            better = None
            if test.p_value < alpha and test.only_a != test.only_b:
                better = a.name if test.only_a > test.only_b else b.name
            tests.append(PairedTest(
                labels=labels, a=a.name, b=b.name, units=len(common), a_accuracy=sum(right_a) / len(common),
                b_accuracy=sum(right_b) / len(common), only_a=test.only_a, only_b=test.only_b,
                p_value=test.p_value, better=better,
            ))
    return tests


def gates_of(judges: Sequence[JudgeAlignment], min_kappa: float | None, min_f1: float | None) -> list[GateResult]:
    """`min_kappa` / `min_f1` (F1 of the yes label: useful, pass) for every judge on every label set."""
    gates = []
    for judge in judges:
        for labels, found in judge.agreements.items():
            for metric, minimum, value in (("kappa", min_kappa, found.kappa),
                                           ("f1", min_f1, found.yes.f1 if found.yes else None)):
                if minimum is not None:
                    gates.append(GateResult(judge=judge.judge, labels=labels, metric=metric, minimum=minimum,
                                            value=value, passed=value is not None and value >= minimum))
    return gates


def answer_key_warning(items: Sequence[LabelledItem], scorers: Sequence[Scorer]) -> str | None:
    """A warning when the reference usefulness is judged against quotes the contexts people labelled useful
    (HotpotQA's gold paragraphs as ground truth): the judge is handed the labels, and agrees for free."""
    precision = next((s for s in scorers if isinstance(s, ContextPrecision)), None)
    if precision is None:
        return None
    labelled = quoting = 0
    for item in items:
        useful = [i for i, y in enumerate(item.context_labels or ()) if y]
        if not useful:
            continue
        labelled += 1
        by_truth = precision.reference_kind(item.sample) == "ground_truth"
        reference = precision.reference(item.sample) if by_truth else None
        if reference and all(item.sample.contexts[i].content in reference for i in useful):
            quoting += 1
    if labelled and quoting * 2 > labelled:
        return (f"in {quoting} of {labelled} items the ground truth quotes every context people labelled useful: "
                "context_precision judges usefulness against it, which hands the judge the labels; judge against "
                "the response instead (--reference response, or ContextPrecision(reference_source='response'))")
    return None


def label_sets_of(items: Sequence[LabelledItem]) -> dict[str, int]:
    """The label sets the items carry, and how many labels each has."""
    counts: Counter[str] = Counter()
    for item in items:
        counts[CONTEXTS] += sum(1 for y in item.context_labels or () if y is not None)
        counts.update(item.labels.keys())
    return {name: counts[name] for name in (CONTEXTS, *SCORERS) if counts[name]}


def scorers_for(label_sets: Iterable[str]) -> list[Scorer]:
    """The scorers that answer the label sets: context_precision for per-context labels, and each labelled one."""
    names = {ContextPrecision.name if name == CONTEXTS else name for name in label_sets}
    return [SCORERS[name]() for name in SCORERS if name in names]


@dataclass(frozen=True)
class Settings:
    """How `measure` reads the outcomes and what it gates."""

    scales: Mapping[str, float]
    alpha: float = 0.05
    bins: int = 10
    worst: int = 10
    min_kappa: float | None = None
    min_f1: float | None = None


def measure(source: str, items: Sequence[LabelledItem], outcomes: Sequence[JudgeOutcome],
            settings: Settings) -> AlignmentReport:
    """Every judge against people on every label set, the paired tests and the gates."""
    label_sets = label_sets_of(items)
    judges = [
        JudgeAlignment(
            judge=o.name, model=o.model, prompt_version=o.prompt_version, judge_id=o.judge_id, usage=o.usage,
            agreements={labels: agreement_of(items, o, labels, settings) for labels in label_sets},
        )
        for o in outcomes
    ]
    return AlignmentReport(
        source=source, items=len(items), labelled=label_sets, judges=judges, alpha=settings.alpha,
        comparisons=paired_tests(items, outcomes, list(label_sets), settings.scales, settings.alpha),
        gates=gates_of(judges, settings.min_kappa, settings.min_f1),
    )


# ---------------------------------------------------------------- the entry points


def _items(labels: str | Path | Iterable[Mapping[str, Any] | LabelledItem]) -> tuple[str, list[LabelledItem]]:
    if isinstance(labels, str | Path):
        return str(labels), load_labels(labels)
    rows = list(labels)
    if all(isinstance(row, LabelledItem) for row in rows):
        return "rows", [row for row in rows if isinstance(row, LabelledItem)]
    return "rows", labelled_rows([row for row in rows if isinstance(row, Mapping)])


def _judge_name(spec: str | Judge) -> str:
    return spec.strip() if isinstance(spec, str) else f"{type(spec).__name__}({spec.model})"


async def aalign(
    labels: str | Path | Iterable[Mapping[str, Any] | LabelledItem],
    judges: str | Judge | Sequence[str | Judge] = "local",
    *,
    scorers: Sequence[Scorer | str] | None = None,
    concurrency: int = 4,
    api_base: str | None = None,
    alpha: float = 0.05,
    min_kappa: float | None = None,
    min_f1: float | None = None,
    worst: int = 10,
) -> AlignmentReport:
    """Score the labelled samples with each judge and measure its agreement with people (see `align`)."""
    source, items = _items(labels)
    specs = [judges] if isinstance(judges, str | Judge) else list(judges)
    if not specs:
        raise ValueError("align needs at least one judge")
    names = [_judge_name(s) for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"a judge is named twice: {names}")
    active = scorers_for(label_sets_of(items)) if scorers is None else [
        SCORERS[s]() if isinstance(s, str) else s for s in scorers
    ]
    resolved = [resolve_judge(s, api_base=api_base) for s in specs]
    outcomes = [await run_judge(items, active, judge, name=name, concurrency=concurrency)
                for judge, name in zip(resolved, names, strict=True)]
    settings = Settings({s.name: s.scale for s in active}, alpha, 10, worst, min_kappa, min_f1)
    report = measure(source, items, outcomes, settings)
    warning = answer_key_warning(items, active)
    return report.model_copy(update={"warnings": [warning]}) if warning else report


def align(
    labels: str | Path | Iterable[Mapping[str, Any] | LabelledItem],
    judges: str | Judge | Sequence[str | Judge] = "local",
    *,
    scorers: Sequence[Scorer | str] | None = None,
    concurrency: int = 4,
    api_base: str | None = None,
    alpha: float = 0.05,
    min_kappa: float | None = None,
    min_f1: float | None = None,
    worst: int = 10,
) -> AlignmentReport:
    """How well each judge agrees with human labels: a labels file (JSONL, JSON, CSV: `eval`'s rows plus
    `context_labels` and / or `labels`, docs/align.md) or rows. Scorers default to those the labels need.
    `report.passed` is False when a `min_kappa` / `min_f1` gate fails."""
    return asyncio.run(aalign(labels, judges, scorers=scorers, concurrency=concurrency, api_base=api_base,
                              alpha=alpha, min_kappa=min_kappa, min_f1=min_f1, worst=worst))


__all__ = [
    "CONTEXTS",
    "Agreement",
    "AlignmentReport",
    "Disagreement",
    "GateResult",
    "JudgeAlignment",
    "JudgeOutcome",
    "JudgedItem",
    "PairedTest",
    "Settings",
    "aalign",
    "align",
    "judge_id_of",
    "label_sets_of",
    "measure",
    "run_judge",
    "scorers_for",
]
