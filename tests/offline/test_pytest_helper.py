"""`ragtrace.testing.assert_retrieval` and the pytest plugin's fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from ragtrace.testing import assert_retrieval
from tests.offline.gold import GoldJudge, average_precision, make_rows

ROOT = Path(__file__).resolve().parents[2]


def precision_mean(rows: list[dict[str, Any]]) -> float:
    scores = [round(average_precision(["gold" in c for c in r["contexts"]]), 2) for r in rows]
    return round(sum(scores) / len(scores), 4)


def test_passes_and_returns_the_report() -> None:
    rows = make_rows(6)
    report = assert_retrieval(rows, judge=GoldJudge(), min_precision=precision_mean(rows), min_recall=1.0)
    assert set(report.summaries) == {"context_precision", "context_recall"}  # only thresholded scorers run


def test_failure_names_scorer_mean_threshold_and_worst_items() -> None:
    rows = make_rows(6)
    mean = precision_mean(rows)
    with pytest.raises(AssertionError) as caught:
        assert_retrieval(rows, judge=GoldJudge(), min_precision=0.9, min_recall=1.0)
    message = str(caught.value)
    lines = message.splitlines()
    assert lines[0] == "retrieval quality below threshold"
    assert lines[1] == f"context_precision: mean {mean:.3f} < min 0.9 (6 scored of 6)"
    assert lines[2].startswith("  q2 0.33 'where is the gold 2?': 1 of 3 contexts useful; first useful at rank 3")
    assert lines[3].startswith("  q5 0.33") and lines[4].startswith("  q1 0.50")
    assert len(lines) == 5  # recall held, so it is not mentioned


def test_unscorable_data_fails_rather_than_passes() -> None:
    rows = [{k: v for k, v in r.items() if k != "ground_truth"} for r in make_rows(3)]
    with pytest.raises(AssertionError, match=r"context_recall: no item could be scored, min 0.5 .*no_ground_truth 3"):
        assert_retrieval(rows, judge=GoldJudge(), min_recall=0.5)


def test_needs_a_threshold_in_range() -> None:
    with pytest.raises(ValueError, match="at least one"):
        assert_retrieval(make_rows(1), judge=GoldJudge())
    with pytest.raises(ValueError, match="between 0 and 1"):
        assert_retrieval(make_rows(1), judge=GoldJudge(), min_relevance=1.5)


def test_pytest_plugin_fixture(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(textwrap.dedent("""
        from tests.offline.gold import make_rows

        def test_good(assert_retrieval, ragtrace_judge):
            assert ragtrace_judge.model == "test/gold"
            assert_retrieval(make_rows(3, gold_at=lambda i: 0), min_precision=1.0)

        def test_bad(assert_retrieval):
            assert_retrieval(make_rows(3, gold_at=lambda i: 2), min_precision=0.5)
    """))
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        import pytest
        from tests.offline.gold import GoldJudge

        @pytest.fixture(scope="session")
        def ragtrace_judge():
            return GoldJudge()
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",  # the plugin loads by its pytest11 entry point
         "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert "1 failed, 1 passed" in done.stdout, done.stdout + done.stderr
    assert "context_precision: mean 0.330 < min 0.5 (3 scored of 3)" in done.stdout
