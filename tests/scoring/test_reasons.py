"""The reasons written on spans: they say what the verdicts were judged against."""

from __future__ import annotations


def test_a_precision_reason_names_what_usefulness_was_judged_against() -> None:
    """Issue 30, item 11: a question without a reference answer was told 'useful for the reference answer'."""
    from ragtrace.scoring import ContextPrecision, RagSample
    from ragtrace.scoring.verdicts import ContextVerdict, Verdicts

    verdicts = Verdicts(contexts=[ContextVerdict(index=0, useful=False), ContextVerdict(index=1, useful=False)])
    no_truth = RagSample(query="q?", contexts=["a", "b"], response="r")
    with_truth = RagSample(query="q?", contexts=["a", "b"], response="r", ground_truth="g")
    assert ContextPrecision().score(no_truth, verdicts).reason == "none of 2 contexts useful for the answer given"
    assert ContextPrecision().score(with_truth, verdicts).reason == "none of 2 contexts useful for the reference answer"
