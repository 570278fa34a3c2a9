import pytest

from ragtrace.scoring import (
    ClaimVerdict,
    ContextPrecision,
    ContextRecall,
    ContextRelevance,
    ContextVerdict,
    InvalidVerdicts,
    RagSample,
    Verdicts,
    check_verdicts,
)
from ragtrace.scoring.verdicts import Aspect


def sample(n: int, response: str = "an answer", ground_truth: str | None = None) -> RagSample:
    return RagSample(
        query="q", contexts=[f"c{i}" for i in range(n)], response=response, ground_truth=ground_truth
    )


def useful(*flags: int) -> Verdicts:
    return Verdicts(contexts=[ContextVerdict(index=i, useful=bool(f)) for i, f in enumerate(flags)])


def graded(*pairs: tuple[str, bool]) -> Verdicts:
    return Verdicts(contexts=[ContextVerdict(index=i, level=lv, used=u) for i, (lv, u) in enumerate(pairs)])


def test_precision_result_carries_label_reason_and_views() -> None:
    result = ContextPrecision().score(sample(4), useful(1, 0, 1, 0))
    assert (result.score, result.label) == (0.83, "pass")
    assert result.reason == "2 of 4 contexts useful; first useful at rank 1 (useful at ranks 1, 3)"
    assert result.details["reciprocal_rank"] == 1.0
    assert result.details["reference"] == "response"
    assert [v["useful"] for v in result.details["verdicts"]] == [True, False, True, False]


def test_precision_scale_and_threshold() -> None:
    result = ContextPrecision(scale=10, threshold=0.9).score(sample(4), useful(0, 0, 1, 1))
    assert (result.score, result.label) == (4.17, "fail")


@pytest.mark.parametrize("scale", [0, -1, float("nan"), True])
def test_scale_must_be_positive(scale: float) -> None:
    with pytest.raises(ValueError, match="scale"):
        ContextPrecision(scale=scale)


@pytest.mark.parametrize("option", ["unused_high_penalty", "missing_per_item", "max_missing_penalty", "threshold"])
def test_fractions_are_validated(option: str) -> None:
    with pytest.raises(ValueError, match=option):
        ContextRelevance(**{option: 1.5})


def test_reference_selection() -> None:
    with_gt = sample(2, response="resp", ground_truth="truth")
    assert ContextPrecision().reference(with_gt) == "truth"
    assert ContextPrecision(reference_source="response").reference(with_gt) == "resp"
    no_response = sample(2, response="  ")
    assert ContextPrecision().skip_reason(no_response) == "no_response"
    assert ContextPrecision(reference_source="ground_truth").skip_reason(no_response) == "no_ground_truth"
    with pytest.raises(ValueError, match="reference"):
        ContextPrecision(reference_source="gold")  # type: ignore[arg-type]


def test_skips_have_no_score_and_machine_readable_reason() -> None:
    empty = sample(0)
    for scorer in (ContextPrecision(), ContextRelevance()):
        assert scorer.skip_reason(empty) == "no_context"
    assert ContextRecall().skip_reason(sample(3)) == "no_ground_truth"
    result = ContextRecall().skipped("no_ground_truth")
    assert result.score is None and result.label is None and result.status == "skipped"


def test_relevance_spec_examples() -> None:
    scorer = ContextRelevance()
    assert scorer.score(sample(3), graded(("high", True), ("high", True), ("high", True))).score == 1.0
    five = graded(("none", False), ("none", False), ("none", False), ("low", False), ("high", True))
    assert scorer.score(sample(5), five).score == 0.26
    unused = graded(("high", True), ("high", True), ("none", False), ("none", False), ("high", False))
    result = scorer.score(sample(5), unused)
    assert result.score == 0.5
    assert "1 highly relevant context not used" in result.reason
    assert ContextRelevance(unused_high_penalty=0.05).score(sample(5), unused).score == 0.55


def test_relevance_missing_info_and_empty_response() -> None:
    verdicts = graded(("high", False), ("medium", False)).model_copy(update={"missing": ["the date"]})
    result = ContextRelevance().score(sample(2, response=""), verdicts)
    # No response: usage is not judged, so no unused-high penalty; missing costs 0.15.
    assert result.score == pytest.approx(round(0.85 - 0.15, 2))
    assert "usage was not judged" in result.reason and "'the date'" in result.reason
    assert result.details["usage_judged"] is False


def test_recall() -> None:
    claims = [ClaimVerdict(claim=f"claim {i}", supported=i < 2, context_indices=[0] if i < 2 else []) for i in range(3)]
    result = ContextRecall().score(sample(2, ground_truth="gt"), Verdicts(claims=claims))
    assert result.score == 0.67
    assert result.reason == "2 of 3 ground-truth claims supported by the context; not found: 'claim 2'"
    assert ContextRecall().score(sample(2, ground_truth="gt"), Verdicts(claims=[])).skipped == "no_claims"


def test_check_verdicts_rejects_shifted_or_missing_positions() -> None:
    aspects = frozenset({Aspect.USEFULNESS})
    with pytest.raises(InvalidVerdicts, match=r"0\.\.2"):
        check_verdicts(Verdicts(contexts=[ContextVerdict(index=i, useful=True) for i in (1, 2, 3)]), 3, aspects)
    with pytest.raises(InvalidVerdicts, match="useful"):
        check_verdicts(Verdicts(contexts=[ContextVerdict(index=0)]), 1, aspects)
    with pytest.raises(InvalidVerdicts, match="claims"):
        check_verdicts(Verdicts(), 1, frozenset({Aspect.CLAIMS}))
    bad_claim = Verdicts(claims=[ClaimVerdict(claim="x", supported=True, context_indices=[5])])
    with pytest.raises(InvalidVerdicts, match="out of range"):
        check_verdicts(bad_claim, 2, frozenset({Aspect.CLAIMS}))
    shuffled = Verdicts(contexts=[ContextVerdict(index=i, useful=True) for i in (2, 0, 1)])
    assert [v.index for v in check_verdicts(shuffled, 3, aspects).contexts] == [0, 1, 2]


def test_sample_accepts_strings_and_documents() -> None:
    s = RagSample(query="q", contexts=["a", {"content": "b", "id": "d2", "score": 0.4}], ground_truth="  ")
    assert s.context_texts == ["a", "b"] and s.contexts[1].id == "d2"
    assert s.ground_truth is None
    with pytest.raises(ValueError):
        RagSample(query="q", contexts="not a list")
