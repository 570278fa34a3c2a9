"""`--compare`: the Wilcoxon test against brute force, pairing, the worst items, and the CI regression gate."""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.hotpotqa import load_items
from ragtrace.cli import main
from ragtrace.offline import compare as compare_module
from ragtrace.offline.compare import compare, load_results, wilcoxon_signed_rank
from tests.offline.gold import JUDGE, expected_precision_mean, make_rows, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
HOTPOT_ITEMS = int(os.environ.get("RAGTRACE_HOTPOT_ITEMS", "20"))


def average_ranks(values: list[float]) -> list[float]:
    """1-based ranks by their definition: the values below, plus the middle of the run of equal values."""
    return [sum(w < v for w in values) + (sum(w == v for w in values) + 1) / 2 for v in values]


def brute_force_p(diffs: list[float]) -> float:
    """Two-sided p by enumerating every sign assignment of the ranked non-zero differences."""
    nonzero = [d for d in diffs if d != 0]
    ranks = average_ranks([abs(d) for d in nonzero])
    observed = sum(r for r, d in zip(ranks, nonzero, strict=True) if d > 0)
    sums = [sum(r for r, s in zip(ranks, signs, strict=True) if s) for signs in
            itertools.product([False, True], repeat=len(nonzero))]
    lower = sum(1 for s in sums if s <= observed + 1e-9) / len(sums)
    upper = sum(1 for s in sums if s >= observed - 1e-9) / len(sums)
    return min(1.0, 2 * min(lower, upper))


@pytest.mark.parametrize("seed", range(12))
def test_exact_wilcoxon_matches_enumeration_with_ties_and_zeros(seed: int) -> None:
    rng = random.Random(seed)
    diffs = [rng.choice([-0.5, -0.25, 0.0, 0.25, 0.33, 0.5, 0.75]) for _ in range(rng.randint(3, 12))]
    test = wilcoxon_signed_rank(diffs)
    assert test.method == ("exact" if any(diffs) else "none")
    assert test.p_value == pytest.approx(brute_force_p(diffs), abs=1e-12)


def test_normal_approximation_is_close_to_exact_near_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    for shift in (0.0, 0.05, 0.12):
        diffs = [round(rng.gauss(shift, 0.2), 2) for _ in range(45)]
        exact = wilcoxon_signed_rank(diffs)
        monkeypatch.setattr(compare_module, "EXACT_LIMIT", 10)
        normal = wilcoxon_signed_rank(diffs)
        monkeypatch.setattr(compare_module, "EXACT_LIMIT", 50)
        assert exact.method == "exact" and normal.method == "normal"
        assert normal.p_value == pytest.approx(exact.p_value, abs=0.01)


def test_all_equal_is_no_evidence() -> None:
    test = wilcoxon_signed_rank([0.0, 0.0, 0.0])
    assert test.p_value == 1.0 and test.n == 0


def record(index: int, score: float | None, item_id: str | None = None, reason: str = "") -> dict[str, Any]:
    result = {"name": "context_precision", "score": score, "reason": reason}
    return {"index": index, "id": item_id, "query": f"query {index}", "results": {"context_precision": result}}


def test_compare_pairs_by_id_and_lists_the_items_that_dropped_most() -> None:
    baseline = [record(i, 1.0, f"q{i}") for i in range(20)] + [record(99, 0.2, "gone")]
    current = [record(i, 1.0 - (i % 4) * 0.25, f"q{i}", reason=f"r{i}") for i in range(20)] + [record(50, 1.0, "new")]
    result = compare(baseline, current, ["context_precision"], worst=3)
    c = result.scorers["context_precision"]
    assert (result.matched, result.only_baseline, result.only_current) == (20, 1, 1)
    assert c.paired == 20 and c.worsened == 15 and c.improved == 0
    assert c.regressed and c.test.p_value < 0.001
    assert [w.id for w in c.worst] == ["q3", "q7", "q11"] and c.worst[0].delta == -0.75
    assert c.worst[0].reason == "r3" and c.worst[0].query == "query 3"
    without_ids = compare([record(i, 0.5) for i in range(3)], [record(i, 0.5) for i in range(3)], ["context_precision"])
    assert without_ids.matched == 3 and not without_ids.scorers["context_precision"].regressed


def test_load_results_skips_a_torn_last_line_and_rejects_other_garbage(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text(json.dumps(record(0, 1.0)) + "\n" + '{"index": 1, "res')
    assert len(load_results(path)) == 1
    path.write_text("not json\n" + json.dumps(record(0, 1.0)) + "\n")
    with pytest.raises(ValueError, match=r"out.jsonl:1: not a results line"):
        load_results(path)


def test_cli_compare_flags_the_regression(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_jsonl(tmp_path / "good.jsonl", make_rows(30, gold_at=lambda i: 0))
    bad_rows = make_rows(30, gold_at=lambda i: 0 if i % 3 else 2)
    bad = write_jsonl(tmp_path / "bad.jsonl", bad_rows)
    new_mean = expected_precision_mean(bad_rows)
    baseline = tmp_path / "baseline.jsonl"
    assert main(["eval", str(good), "--judge", JUDGE, "--out", str(baseline), "--quiet"]) == 0
    capsys.readouterr()

    argv = ["eval", str(bad), "--judge", JUDGE, "--compare", str(baseline), "--scorers", "context_precision",
            "--worst", "2"]
    assert main([*argv, "--quiet"]) == 0  # a regression is reported, but only gates with --fail-on-regression
    text = capsys.readouterr().out
    assert f"context_precision: 1.000 -> {new_mean:.3f} ({new_mean - 1:+.3f})" in text and "REGRESSED" in text
    assert "q0: 1.00 -> 0.33  'where is the gold 0?'" in text
    assert "q3: 1.00 -> 0.33" in text and "q6:" not in text  # --worst 2

    assert main([*argv, "--fail-on-regression", "--json", "--quiet"]) == 1
    summary = json.loads(capsys.readouterr().out)
    c = summary["compare"]["scorers"]["context_precision"]
    assert c["regressed"] and c["paired"] == 30 and c["worsened"] == 10 and c["test"]["method"] == "exact"

    same = main(["eval", str(good), "--judge", JUDGE, "--compare", str(baseline), "--fail-on-regression", "--quiet"])
    assert same == 0


def test_cli_compare_bad_baseline_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(2))
    assert main(["eval", str(data), "--judge", JUDGE, "--compare", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl: no such results file" in capsys.readouterr().err


def hotpot_rows(n: int, gold_first: bool) -> list[dict[str, Any]]:
    rows = []
    for item in load_items(n):
        pairs = list(zip(item["contexts"], item["context_labels"], strict=True))
        gold = [c for c, label in pairs if label == 1]
        other = [c for c, label in pairs if label != 1]
        rows.append({
            "id": item["id"], "query": item["question"],
            "contexts": gold + other if gold_first else other + gold,
            # The response is the reference for precision; the dataset's ground_truth is the gold
            # paragraphs themselves, so it is left out on purpose.
            "response": f"The answer is {item['answer']}.",
        })
    return rows


@functools.cache
def shared_local_judge() -> Any:
    """One LocalJudge for both runs of the CI test: the rankings hold the same texts, so the second run is
    served from the judge's embedding cache."""
    from ragtrace.judges.local import LocalJudge

    return LocalJudge()


TWO_RUNS = """
import json, sys
from ragtrace.cli import main
codes = [main(json.loads(argv)) for argv in sys.argv[1:]]
sys.exit(codes[0] * 10 + codes[1])
"""


def run_twice(first: list[str], second: list[str]) -> tuple[int, int, list[Any], str]:
    """Both CLI runs in one child process with one BLAS thread: on a shared 2-core box, numpy's default
    thread pool oversubscribes the CPU and the local judge runs several times slower."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", TWO_RUNS, json.dumps(first), json.dumps(second)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    decoder, outputs, pos = json.JSONDecoder(), [], 0
    while pos < len(done.stdout.rstrip()):
        value, end = decoder.raw_decode(done.stdout, pos)
        outputs.append(value)
        pos = end + 1
    return done.returncode // 10, done.returncode % 10, outputs, done.stderr


@pytest.mark.slow
def test_hotpotqa_ci_run_gold_last_regresses_against_gold_first(tmp_path: Path) -> None:
    pytest.importorskip("ragtrace.judges.local")
    first = write_jsonl(tmp_path / "gold_first.jsonl", hotpot_rows(HOTPOT_ITEMS, gold_first=True))
    last = write_jsonl(tmp_path / "gold_last.jsonl", hotpot_rows(HOTPOT_ITEMS, gold_first=False))
    baseline = tmp_path / "baseline.jsonl"
    common = ["--judge", "python:tests.offline.test_compare:shared_local_judge", "--scorers", "context_precision",
              "--quiet", "--json", "--concurrency", "2"]
    code_first, code_last, outputs, stderr = run_twice(
        ["eval", str(first), *common, "--out", str(baseline)],
        ["eval", str(last), *common, "--compare", str(baseline), "--fail-on-regression", "--worst", "3",
         "--html", str(tmp_path / "report.html")],
    )
    assert code_first == 0 and len(outputs) == 2, stderr
    before, summary = outputs
    c = summary["compare"]["scorers"]["context_precision"]
    assert summary["judge"]["model"].startswith("local")
    assert summary["scorers"]["context_precision"]["mean"] < before["scorers"]["context_precision"]["mean"]
    assert c["regressed"] and c["test"]["p_value"] < 0.05 and c["worsened"] > c["improved"], c
    assert code_last == 1, stderr
    assert len(c["worst"]) == 3 and all(w["new"] < w["old"] and w["reason"] for w in c["worst"])
    assert "REGRESSED" in stderr and c["worst"][0]["id"] in stderr
    assert "Against the baseline" in (tmp_path / "report.html").read_text()
