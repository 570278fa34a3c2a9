import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragtrace.scoring import formulas


@pytest.mark.parametrize(
    ("relevance", "expected"),
    [([1, 0, 1, 0], 0.83), ([1, 1, 0, 0], 1.0), ([0, 0, 1, 1], 0.42), ([0, 0, 0], 0.0), ([0, 1], 0.5)],
)
def test_average_precision_matches_spec_checks(relevance: list[int], expected: float) -> None:
    assert formulas.finalize(formulas.average_precision(relevance), 1.0) == expected


@pytest.mark.parametrize(("raw", "expected"), [(0.8333, 0.83), (0.835, 0.84), (0.125, 0.13), (1.7, 1.0), (-0.2, 0.0)])
def test_finalize_rounds_half_up_and_clamps(raw: float, expected: float) -> None:
    assert formulas.finalize(raw, 1.0) == expected


def test_finalize_applies_scale_after_clamp() -> None:
    assert formulas.finalize(5 / 6, 10) == 8.33
    assert formulas.finalize(1.4, 10) == 10.0


def test_relevance_spec_checks() -> None:
    assert formulas.relevance_score(["high"] * 3, [True] * 3, 0) == 1.0
    levels = ["none", "none", "none", "low", "high"]
    assert formulas.finalize(formulas.relevance_score(levels, [False, False, False, False, True], 0), 1) == 0.26
    levels = ["high", "high", "none", "none", "high"]
    used = [True, True, False, False, False]
    assert formulas.finalize(formulas.relevance_score(levels, used, 0), 1) == 0.5
    assert formulas.finalize(formulas.relevance_score(levels, used, 0, unused_high_penalty=0.05), 1) == 0.55


def test_missing_penalty_is_capped() -> None:
    assert formulas.relevance_score(["high"], [True], 2) == pytest.approx(0.7)
    assert formulas.relevance_score(["high"], [True], 10) == pytest.approx(0.5)
    assert formulas.relevance_score(["high"], [True], 10, max_missing_penalty=1.0) == 0.0


def test_ranked_views() -> None:
    views = formulas.ranked_views([0, 1, 0, 1, 0])
    assert views["precision_at_1"] == 0.0
    assert views["precision_at_3"] == pytest.approx(0.3333)
    assert views["reciprocal_rank"] == 0.5
    assert views["noise_share"] == 0.6
    assert 0 < views["ndcg"] < 1
    assert formulas.ranked_views([1, 1, 0])["ndcg"] == 1.0
    assert formulas.ranked_views([0, 0])["ndcg"] == 0.0


@given(st.lists(st.booleans(), min_size=1, max_size=30), st.floats(min_value=0.01, max_value=100))
def test_scores_stay_in_range(relevance: list[bool], scale: float) -> None:
    score = formulas.finalize(formulas.average_precision(relevance), scale)
    # Half-up to two decimals moves a score by at most 0.005 (1.625 -> 1.63, where round() gives 1.62).
    assert 0.0 <= score <= scale + 0.005 + 1e-9


def test_finalize_matches_decimal_half_up_on_a_grid() -> None:
    """The float arithmetic agrees with exact decimal half-up rounding of the 12-digit value."""
    from decimal import ROUND_HALF_UP, Decimal

    for numerator in range(0, 1001):
        for scale in (1.0, 1.625, 3.3, 10.0):
            clamped = min(max(numerator / 1000, 0.0), 1.0) * scale
            exact = float(Decimal(f"{clamped:.12f}").quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))
            assert formulas.finalize(numerator / 1000, scale) == exact


@given(st.lists(st.booleans(), min_size=2, max_size=30), st.data())
def test_moving_a_relevant_context_up_never_lowers_precision(relevance: list[bool], data: st.DataObject) -> None:
    positions = [i for i in range(1, len(relevance)) if relevance[i] and not relevance[i - 1]]
    if not positions:
        return
    i = data.draw(st.sampled_from(positions))
    swapped = list(relevance)
    swapped[i - 1], swapped[i] = swapped[i], swapped[i - 1]
    assert formulas.average_precision(swapped) >= formulas.average_precision(relevance)


levels_st = st.lists(st.sampled_from(["high", "medium", "low", "none"]), min_size=1, max_size=20)


@given(levels_st, st.data(), st.integers(min_value=0, max_value=5))
def test_an_unused_high_context_never_scores_above_a_used_one(
    levels: list[str], data: st.DataObject, missing: int
) -> None:
    """The usage-aware property the formula guarantees: leaving a high context unused never helps.

    The stronger wording "adding an unused high context never raises relevance" does not follow from the
    formula of scorers.md: appending a high context to [none] lifts base from 0 to 0.5, more than the 0.10
    penalty (see the explicit case below). The spec wins; this is the property that holds.
    """
    used = data.draw(st.lists(st.booleans(), min_size=len(levels), max_size=len(levels)))
    with_unused = formulas.relevance_score([*levels, "high"], [*used, False], missing)
    with_used = formulas.relevance_score([*levels, "high"], [*used, True], missing)
    assert with_unused <= with_used
    for i, level in enumerate(levels):
        if level == "high" and used[i]:
            flipped = [*used[:i], False, *used[i + 1 :]]
            assert formulas.relevance_score(levels, flipped, missing) <= formulas.relevance_score(
                levels, used, missing
            )


@given(levels_st, st.data(), st.integers(min_value=0, max_value=5))
def test_adding_an_irrelevant_context_never_raises_relevance(
    levels: list[str], data: st.DataObject, missing: int
) -> None:
    used = data.draw(st.lists(st.booleans(), min_size=len(levels), max_size=len(levels)))
    before = formulas.relevance_score(levels, used, missing)
    assert formulas.relevance_score([*levels, "none"], [*used, False], missing) <= before


def test_adding_an_unused_high_context_can_raise_a_low_base() -> None:
    assert formulas.relevance_score(["none"], [False], 0) == 0.0
    assert formulas.relevance_score(["none", "high"], [False, False], 0) == pytest.approx(0.4)
