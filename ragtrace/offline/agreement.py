"""How well a judge's yes/no verdicts agree with people's: pure functions over paired lists, stdlib only.

`align` feeds these with one unit per labelled thing (a context people marked useful or not, a sample people
marked pass or fail); they know nothing of samples, judges or files, so each is checked against textbook
values in the tests. Conventions: `True` is the positive label (useful, pass); a metric that is undefined on
the data (no positive item for recall, one class only for AUC) is None, never a made-up 0 or 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Confusion:
    """The 2x2 table of judge (predicted) against people (actual), positive = True."""

    tp: int
    fp: int
    fn: int
    tn: int

    @classmethod
    def of(cls, predicted: Sequence[bool], actual: Sequence[bool]) -> Confusion:
        _same_length(predicted, actual)
        tp = sum(1 for p, a in zip(predicted, actual, strict=True) if p and a)
        fp = sum(1 for p, a in zip(predicted, actual, strict=True) if p and not a)
        fn = sum(1 for p, a in zip(predicted, actual, strict=True) if not p and a)
        return cls(tp, fp, fn, len(actual) - tp - fp - fn)

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def accuracy(self) -> float | None:
        return (self.tp + self.tn) / self.n if self.n else None

    def kappa(self) -> float | None:
        """Cohen's kappa, (p_o - p_e) / (1 - p_e); None when chance agreement is total (p_e = 1: both sides
        gave one and the same label to everything, where kappa is 0/0)."""
        if not self.n:
            return None
        n = self.n
        observed = (self.tp + self.tn) / n
        expected = ((self.tp + self.fp) * (self.tp + self.fn) + (self.fn + self.tn) * (self.fp + self.tn)) / n**2
        if expected >= 1.0:
            return None
        return (observed - expected) / (1.0 - expected)

    def label_scores(self, positive: bool) -> LabelScores:
        """Precision, recall and F1 of one label (True: the positive label; False: the negative one)."""
        hit, false_alarm, miss = (self.tp, self.fp, self.fn) if positive else (self.tn, self.fn, self.fp)
        precision = hit / (hit + false_alarm) if hit + false_alarm else None
        recall = hit / (hit + miss) if hit + miss else None
        f1 = None
        if precision is not None and recall is not None:
            f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return LabelScores(precision=precision, recall=recall, f1=f1, support=hit + miss)


@dataclass(frozen=True)
class LabelScores:
    """One label's precision (of the judge's calls), recall (of people's) and F1; `support`: people's count."""

    precision: float | None
    recall: float | None
    f1: float | None
    support: int


def _same_length(*lists: Sequence[object]) -> None:
    if len({len(x) for x in lists}) > 1:
        raise ValueError(f"paired lists differ in length: {[len(x) for x in lists]}")


def cohen_kappa(a: Sequence[object], b: Sequence[object]) -> float | None:
    """Cohen's kappa between two raters over any categories (the 2x2 case is `Confusion.kappa`)."""
    _same_length(a, b)
    n = len(a)
    if not n:
        return None
    observed = sum(1 for x, y in zip(a, b, strict=True) if x == y) / n
    categories = set(a) | set(b)
    expected = sum((list(a).count(c) / n) * (list(b).count(c) / n) for c in categories)
    if expected >= 1.0:
        return None
    return (observed - expected) / (1.0 - expected)


def mid_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def roc_auc(scores: Sequence[float], actual: Sequence[bool]) -> float | None:
    """ROC AUC: the chance that a random positive scores above a random negative, ties counting half
    (Mann-Whitney U / (n_pos * n_neg), from mid-ranks). None when one class is absent."""
    _same_length(scores, actual)
    positives = sum(1 for a in actual if a)
    negatives = len(actual) - positives
    if not positives or not negatives:
        return None
    ranks = mid_ranks(scores)
    rank_sum = sum(r for r, a in zip(ranks, actual, strict=True) if a)
    u = rank_sum - positives * (positives + 1) / 2
    return u / (positives * negatives)


@dataclass(frozen=True)
class CalibrationBin:
    """Judge scores in [low, high) (the last bin includes 1): how many, their mean, and how often people said yes."""

    low: float
    high: float
    count: int
    mean_score: float
    yes_rate: float


def calibration(scores: Sequence[float], actual: Sequence[bool], bins: int = 10) -> list[CalibrationBin]:
    """Scores in [0, 1] in `bins` equal bins; empty bins are left out. A well calibrated judge's bins have
    `yes_rate` close to `mean_score`."""
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    _same_length(scores, actual)
    grouped: dict[int, list[tuple[float, bool]]] = {}
    for score, label in zip(scores, actual, strict=True):
        if not 0.0 <= score <= 1.0 or math.isnan(score):
            raise ValueError(f"calibration needs scores in [0, 1], got {score}")
        grouped.setdefault(min(bins - 1, int(score * bins)), []).append((score, label))
    return [
        CalibrationBin(
            low=round(b / bins, 6), high=round((b + 1) / bins, 6), count=len(pairs),
            mean_score=sum(s for s, _ in pairs) / len(pairs), yes_rate=sum(1 for _, y in pairs if y) / len(pairs),
        )
        for b, pairs in sorted(grouped.items())
    ]


def expected_calibration_error(table: Sequence[CalibrationBin]) -> float | None:
    """The count-weighted mean gap between each bin's mean score and its yes rate."""
    total = sum(b.count for b in table)
    if not total:
        return None
    return sum(b.count * abs(b.mean_score - b.yes_rate) for b in table) / total


@dataclass(frozen=True)
class McNemar:
    """McNemar's exact test on paired correct/incorrect: `only_a` units only judge A got right, `only_b` only
    B; `p_value` two-sided, from the binomial(only_a + only_b, 1/2) the null hypothesis gives."""

    only_a: int
    only_b: int
    p_value: float


def mcnemar_exact(a_correct: Sequence[bool], b_correct: Sequence[bool]) -> McNemar:
    """Does A agree with people more often than B, on the same units? Only the discordant pairs count."""
    _same_length(a_correct, b_correct)
    only_a = sum(1 for a, b in zip(a_correct, b_correct, strict=True) if a and not b)
    only_b = sum(1 for a, b in zip(a_correct, b_correct, strict=True) if b and not a)
    n = only_a + only_b
    if n == 0:
        return McNemar(0, 0, 1.0)
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2**n
    return McNemar(only_a, only_b, min(1.0, 2 * tail))


__all__ = [
    "CalibrationBin",
    "Confusion",
    "LabelScores",
    "McNemar",
    "calibration",
    "cohen_kappa",
    "expected_calibration_error",
    "mcnemar_exact",
    "mid_ranks",
    "roc_auc",
]
