"""The agreement metrics against textbook values (and sklearn / scipy when they happen to be installed)."""

from __future__ import annotations

import math
import random

import pytest

from ragtrace.offline.agreement import (
    Confusion,
    calibration,
    cohen_kappa,
    expected_calibration_error,
    mcnemar_exact,
    roc_auc,
)


def table(yes_yes: int, yes_no: int, no_yes: int, no_no: int) -> tuple[list[bool], list[bool]]:
    """Rater A's and rater B's labels from a 2x2 table (A's answer first)."""
    a = [True] * (yes_yes + yes_no) + [False] * (no_yes + no_no)
    b = [True] * yes_yes + [False] * yes_no + [True] * no_yes + [False] * no_no
    return a, b


@pytest.mark.parametrize(
    ("cells", "kappa"),
    [
        # Wikipedia, "Cohen's kappa": 50 proposals read by two readers: p_o = 0.7, p_e = 0.5.
        ((20, 5, 10, 15), 0.4),
        # Its two tables with equal agreement (60 %) and different kappa.
        ((45, 15, 25, 15), 0.1304),
        ((25, 35, 5, 35), 0.2593),
    ],
)
def test_kappa_textbook_tables(cells: tuple[int, int, int, int], kappa: float) -> None:
    a, b = table(*cells)
    assert Confusion.of(a, b).kappa() == pytest.approx(kappa, abs=5e-5)
    assert cohen_kappa(a, b) == pytest.approx(kappa, abs=5e-5)


def test_kappa_is_undefined_when_both_give_one_label_and_one_when_they_agree() -> None:
    assert Confusion.of([True] * 4, [True] * 4).kappa() is None
    assert Confusion.of([True, False, True], [True, False, True]).kappa() == 1.0
    assert Confusion.of([True, False], [False, True]).kappa() == -1.0


def test_precision_recall_f1_of_each_label() -> None:
    confusion = Confusion.of(*table(20, 5, 10, 15))  # judge = A, people = B
    assert (confusion.tp, confusion.fp, confusion.fn, confusion.tn) == (20, 5, 10, 15)
    yes = confusion.label_scores(positive=True)
    assert (yes.precision, yes.recall, yes.support) == (0.8, 20 / 30, 30)
    assert yes.f1 == pytest.approx(2 * 0.8 * (2 / 3) / (0.8 + 2 / 3))
    no = confusion.label_scores(positive=False)
    assert (no.precision, no.recall, no.support) == (0.6, 0.75, 20)
    assert confusion.accuracy == 0.7
    nothing_predicted = Confusion.of([False, False], [True, False]).label_scores(positive=True)
    assert nothing_predicted.precision is None and nothing_predicted.recall == 0.0 and nothing_predicted.f1 is None


def test_auc_textbook_and_ties() -> None:
    # scikit-learn's roc_auc_score docstring example.
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == 0.75
    assert roc_auc([0.5, 0.5], [True, False]) == 0.5  # a tie counts half
    assert roc_auc([1.0, 0.0, 1.0], [True, False, False]) == 0.75  # a binary verdict: balanced accuracy
    assert roc_auc([0.2, 0.9], [True, True]) is None


def test_auc_equals_the_pairwise_definition() -> None:
    rng = random.Random(7)
    scores = [round(rng.random(), 1) for _ in range(300)]  # many ties
    labels = [rng.random() < s for s in scores]
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    pairwise = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))
    assert roc_auc(scores, labels) == pytest.approx(pairwise)


def test_mcnemar_exact_by_hand() -> None:
    # 1 unit only A got right, 7 only B: P(X <= 1 | n=8, 1/2) = 9/256, two-sided 18/256.
    a = [True] + [False] * 7 + [True] * 5
    b = [False] + [True] * 7 + [True] * 5
    test = mcnemar_exact(a, b)
    assert (test.only_a, test.only_b) == (1, 7)
    assert test.p_value == 18 / 256
    assert mcnemar_exact(b, a).p_value == 18 / 256
    assert mcnemar_exact([True, False], [True, False]).p_value == 1.0  # no discordant pair
    assert mcnemar_exact([True] * 3 + [False] * 3, [False] * 3 + [True] * 3).p_value == 1.0  # capped at 1


def test_calibration_table() -> None:
    scores = [0.05, 0.15, 0.95, 1.0, 0.92, 0.5]
    labels = [False, False, True, True, False, True]
    bins = calibration(scores, labels, bins=10)
    assert [(b.low, b.count) for b in bins] == [(0.0, 1), (0.1, 1), (0.5, 1), (0.9, 3)]
    top = bins[-1]
    assert top.mean_score == pytest.approx((0.95 + 1.0 + 0.92) / 3) and top.yes_rate == pytest.approx(2 / 3)
    ece = expected_calibration_error(bins)
    assert ece == pytest.approx((0.05 + 0.15 + 0.5 + 3 * abs(top.mean_score - 2 / 3)) / 6)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        calibration([1.5], [True])


def test_against_sklearn_and_scipy_when_installed() -> None:
    metrics = pytest.importorskip("sklearn.metrics", reason="scikit-learn is not a dependency; checked if present")
    stats = pytest.importorskip("scipy.stats", reason="scipy is not a dependency; checked if present")
    rng = random.Random(3)
    actual = [rng.random() < 0.3 for _ in range(200)]
    scores = [min(1.0, max(0.0, rng.gauss(0.6 if y else 0.4, 0.2))) for y in actual]
    predicted = [s >= 0.5 for s in scores]
    confusion = Confusion.of(predicted, actual)
    assert confusion.kappa() == pytest.approx(metrics.cohen_kappa_score(actual, predicted))
    assert confusion.label_scores(True).f1 == pytest.approx(metrics.f1_score(actual, predicted))
    assert roc_auc(scores, actual) == pytest.approx(metrics.roc_auc_score(actual, scores))
    other = [rng.random() < 0.7 for _ in actual]
    test = mcnemar_exact(predicted, other)
    expected = stats.binomtest(min(test.only_a, test.only_b), test.only_a + test.only_b, 0.5).pvalue
    assert math.isclose(test.p_value, min(1.0, expected), rel_tol=1e-9)
