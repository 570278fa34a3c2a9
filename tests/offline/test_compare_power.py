"""`--compare` on few items: a warning when the test cannot reach significance, the effect size regardless."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from ragtrace.cli import main
from ragtrace.offline.compare import (
    compare,
    format_comparison,
    pairs_needed,
    rank_biserial,
    smallest_p_value,
    wilcoxon_signed_rank,
)
from tests.offline.gold import JUDGE, make_rows, write_jsonl


def record(key: str, score: float) -> dict[str, object]:
    return {"id": key, "query": f"q {key}", "results": {"context_precision": {"score": score, "reason": "r"}}}


@pytest.mark.parametrize("n", range(1, 9))
def test_smallest_p_value_is_what_the_exact_test_gives_when_every_pair_moves_one_way(n: int) -> None:
    assert wilcoxon_signed_rank([-0.1 * (i + 1) for i in range(n)]).p_value == pytest.approx(smallest_p_value(n))
    # and no other sign pattern of the same differences gets lower
    diffs = [0.1 * (i + 1) for i in range(n)]
    lowest = min(
        wilcoxon_signed_rank([d if s else -d for d, s in zip(diffs, signs, strict=True)]).p_value
        for signs in itertools.product([False, True], repeat=n)
    )
    assert lowest == pytest.approx(smallest_p_value(n))


@pytest.mark.parametrize(("alpha", "needed"), [(0.05, 6), (0.01, 8), (0.2, 4), (0.5, 3)])
def test_pairs_needed(alpha: float, needed: int) -> None:
    assert pairs_needed(alpha) == needed
    assert smallest_p_value(needed) < alpha <= smallest_p_value(needed - 1)


def test_rank_biserial_spans_minus_one_to_one() -> None:
    assert rank_biserial(wilcoxon_signed_rank([-0.5, -0.2, -0.1])) == -1.0
    assert rank_biserial(wilcoxon_signed_rank([0.5, 0.2, 0.1])) == 1.0
    assert rank_biserial(wilcoxon_signed_rank([0.1, -0.1])) == 0.0
    assert rank_biserial(wilcoxon_signed_rank([])) is None


def test_five_items_four_much_worse_warns_and_still_reports_effect_and_worst_items() -> None:
    baseline = [record(f"k{i}", 1.0) for i in range(5)]
    current = [record("k0", 0.1), record("k1", 0.2), record("k2", 0.0), record("k3", 0.1), record("k4", 1.0)]
    comparison = compare(baseline, current, ["context_precision"], alpha=0.05)
    result = comparison.scorers["context_precision"]
    assert result.underpowered and not result.significant
    assert result.effect_size == -1.0  # every changed pair dropped
    assert [c.id for c in result.worst] == ["k2", "k0", "k3", "k1"]
    text = format_comparison(comparison)
    assert "too few pairs to test" in text and "no significant change" not in text
    assert "warning: 4 changed pairs" in text and "at least 6" in text
    assert "effect size -1.000" in text


def test_enough_pairs_is_not_underpowered() -> None:
    baseline = [record(f"k{i}", 1.0) for i in range(8)]
    current = [record(f"k{i}", 0.2) for i in range(8)]
    result = compare(baseline, current, ["context_precision"]).scorers["context_precision"]
    assert not result.underpowered and result.regressed
    assert "warning" not in format_comparison(compare(baseline, current, ["context_precision"]))


def test_cli_compare_on_five_items_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = make_rows(5, gold_at=lambda i: 0)
    baseline = tmp_path / "baseline.jsonl"
    assert main(["eval", str(write_jsonl(tmp_path / "a.jsonl", rows)), "--judge", JUDGE, "--out", str(baseline),
                 "--quiet"]) == 0
    worse = make_rows(5, gold_at=lambda i: 0 if i == 4 else 2)  # 4 of 5 items now rank the gold last
    capsys.readouterr()
    code = main(["eval", str(write_jsonl(tmp_path / "b.jsonl", worse)), "--judge", JUDGE, "--compare",
                 str(baseline), "--fail-on-regression", "--quiet"])
    out = capsys.readouterr().out
    assert code == 0  # not significant: the gate cannot fail on it, and says why
    assert "warning: 4 changed pairs" in out, out
    assert "effect size -1.000" in out
    assert out.count("q3") >= 1 and "q4" not in out.split("compared with")[1]


@pytest.mark.parametrize(
    ("current", "verdict"),
    [([0.1, 0.2, 0.0, 0.1, 1.0], "too few pairs to test"),
     ([0.9, 0.8, 0.9, 0.7, 0.9, 0.8, 0.9, 0.8, 1.0, 1.0], "no significant change")],
)
def test_the_html_report_gives_the_cli_verdict(current: list[float], verdict: str) -> None:
    """Issue 30, item 9: the HTML report said "no significant change" where the CLI said "too few pairs"."""
    from ragtrace.offline.report import render_report

    baseline = [record(f"k{i}", 0.9 if i % 2 else 0.8) for i in range(len(current))]
    comparison = compare(baseline, [record(f"k{i}", s) for i, s in enumerate(current)], ["context_precision"],
                         alpha=0.05)
    assert comparison.scorers["context_precision"].verdict == verdict
    assert f"-> {verdict}" in format_comparison(comparison)
    html = render_report(title="t", items=[], summaries={}, comparison=comparison)
    assert f"<td>{verdict}</td>" in html
    other = ({"too few pairs to test", "no significant change"} - {verdict}).pop()
    assert other not in html
