"""Compare a run against a baseline run: difference of means, a paired test, and what got worse.

A CI job needs more than "the mean fell by 0.03": it needs to know whether that is noise (a Wilcoxon
signed-rank test over the items both runs scored) and which items moved, with the new reason, so a reviewer
can open them. scipy is not a dependency, so the test is written here: exact for up to 50 non-zero
differences (conditional on ties, by counting sign assignments), normal approximation with tie correction
above that.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from ragtrace._text import format_number, shorten
from ragtrace.offline.agreement import mid_ranks
from ragtrace.offline.dataset import MAX_LINE_BYTES, DatasetError

EXACT_LIMIT = 50


class SignedRankTest(BaseModel):
    """Two-sided Wilcoxon signed-rank test on paired differences (zeros dropped, as Wilcoxon did)."""

    n: int
    statistic: float
    p_value: float
    method: Literal["exact", "normal", "none"]


def wilcoxon_signed_rank(differences: Sequence[float]) -> SignedRankTest:
    """W+ (sum of ranks of positive differences) and its two-sided p-value."""
    diffs = [round(d, 9) for d in differences if round(d, 9) != 0.0]
    n = len(diffs)
    if n == 0:
        return SignedRankTest(n=0, statistic=0.0, p_value=1.0, method="none")
    ranks = mid_ranks([abs(d) for d in diffs])
    w_plus = sum(r for r, d in zip(ranks, diffs, strict=True) if d > 0)
    if n <= EXACT_LIMIT:
        doubled = [round(2 * r) for r in ranks]  # average ranks are halves: doubling makes them integers
        counts = [0] * (sum(doubled) + 1)
        counts[0] = 1
        for r in doubled:
            for s in range(len(counts) - 1, r - 1, -1):
                counts[s] += counts[s - r]
        observed = round(2 * w_plus)
        total = 2**n
        lower = sum(counts[: observed + 1]) / total
        upper = sum(counts[observed:]) / total
        return SignedRankTest(n=n, statistic=w_plus, p_value=min(1.0, 2 * min(lower, upper)), method="exact")
    mean = n * (n + 1) / 4
    tie_sizes: dict[float, int] = {}
    for rank in ranks:
        tie_sizes[rank] = tie_sizes.get(rank, 0) + 1
    variance: float = n * (n + 1) * (2 * n + 1) / 24 - sum(t**3 - t for t in tie_sizes.values()) / 48
    if variance <= 0:
        return SignedRankTest(n=n, statistic=w_plus, p_value=1.0, method="normal")
    z = max(abs(w_plus - mean) - 0.5, 0.0) / math.sqrt(variance)  # continuity correction
    return SignedRankTest(n=n, statistic=w_plus, p_value=min(1.0, math.erfc(z / math.sqrt(2))), method="normal")


def smallest_p_value(n: int) -> float:
    """The smallest two-sided p-value the exact test can give on `n` non-zero pairs: every pair moving
    the same way, 2 / 2**n. When it is not below alpha, no change of any size can be significant."""
    return 1.0 if n == 0 else min(1.0, 2.0 ** (1 - n))


def pairs_needed(alpha: float) -> int:
    """The fewest non-zero pairs with which the test can reach p < alpha."""
    n = 1
    while smallest_p_value(n) >= alpha:
        n += 1
    return n


def rank_biserial(test: SignedRankTest) -> float | None:
    """Matched-pairs rank-biserial correlation, (W+ - W-) / (W+ + W-): the effect size of the signed-rank
    test, in [-1, 1]; -1 when every pair dropped, 0 when drops and gains balance. None without pairs."""
    if test.n == 0:
        return None
    total = test.n * (test.n + 1) / 2
    return round((2 * test.statistic - total) / total, 4)


class ItemChange(BaseModel):
    """One item scored by both runs."""

    key: str
    id: str | None
    query: str
    old: float
    new: float
    delta: float
    reason: str


class ScorerComparison(BaseModel):
    scorer: str
    baseline_mean: float | None
    current_mean: float | None
    delta: float | None
    paired: int
    paired_delta: float | None
    improved: int
    worsened: int
    test: SignedRankTest
    effect_size: float | None  # rank-biserial correlation of the paired changes (negative: scores dropped)
    underpowered: bool  # too few non-zero pairs for the test to ever reach p < alpha
    significant: bool
    regressed: bool
    worst: list[ItemChange]

    @property
    def verdict(self) -> str:
        """The one verdict the CLI and the HTML report both print."""
        if self.regressed:
            return "regressed"
        if self.significant:
            return "improved"
        return "too few pairs to test" if self.underpowered else "no significant change"


class Comparison(BaseModel):
    baseline: str
    alpha: float
    matched: int
    only_baseline: int
    only_current: int
    scorers: dict[str, ScorerComparison]

    @property
    def regressed(self) -> list[str]:
        return [name for name, c in self.scorers.items() if c.regressed]


def record_key(record: Mapping[str, Any]) -> str:
    """Items pair by id, else by their position in the dataset."""
    item_id = record.get("id")
    return f"id:{item_id}" if item_id is not None else f"index:{record.get('index')}"


def load_results(path: str | Path, *, max_line_bytes: int = MAX_LINE_BYTES) -> list[dict[str, Any]]:
    """The per-item records of a previous `--out` file. A torn last line (an interrupted run) is skipped."""
    path = Path(path)
    name = str(path)
    if not path.is_file():
        raise DatasetError(name, "no such results file")
    records: list[dict[str, Any]] = []
    with path.open("rb") as handle:
        raw_lines: list[bytes] = []
        while True:
            raw = handle.readline(max_line_bytes + 1)
            if not raw:
                break
            if len(raw) > max_line_bytes:
                raise DatasetError(name, f"line is longer than the {max_line_bytes} byte limit", len(raw_lines) + 1)
            raw_lines.append(raw)
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            if number == len(raw_lines) and not raw.endswith(b"\n"):
                continue  # the line being written when a run was killed
            raise DatasetError(name, f"not a results line ({exc})", number) from None
        if not isinstance(record, dict) or not isinstance(record.get("results"), dict):
            raise DatasetError(name, "not a ragtrace results line (no 'results' object)", number)
        records.append(record)
    return records


def _score(record: Mapping[str, Any], scorer: str) -> float | None:
    result = record.get("results", {}).get(scorer)
    score = result.get("score") if isinstance(result, dict) else None
    return float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def _changes(
    old_by_key: Mapping[str, Mapping[str, Any]], new_by_key: Mapping[str, Mapping[str, Any]], shared: Sequence[str],
    scorer: str,
) -> list[ItemChange]:
    """The items scored in both runs, each with its change, in the current run's order."""
    changes: list[ItemChange] = []
    for key in shared:
        old, new = _score(old_by_key[key], scorer), _score(new_by_key[key], scorer)
        if old is None or new is None:
            continue
        record = new_by_key[key]
        result = record.get("results", {}).get(scorer, {})
        changes.append(
            ItemChange(
                key=key,
                id=record.get("id"),
                query=str(record.get("query", "")),
                old=old,
                new=new,
                delta=round(new - old, 4),
                reason=str(result.get("reason", "")),
            )
        )
    return changes


def _compare_scorer(
    scorer: str, old_scores: Sequence[float], new_scores: Sequence[float], changes: Sequence[ItemChange],
    alpha: float, worst: int,
) -> ScorerComparison:
    """The means, their difference, the paired test over `changes`, and the `worst` items."""
    test = wilcoxon_signed_rank([c.delta for c in changes])
    paired_delta = _mean([c.delta for c in changes])
    old_mean, new_mean = _mean(old_scores), _mean(new_scores)
    significant = test.method != "none" and test.p_value < alpha
    dropped = sorted((c for c in changes if c.delta < 0), key=lambda c: c.delta)  # stable: data order
    return ScorerComparison(
        scorer=scorer,
        baseline_mean=old_mean,
        current_mean=new_mean,
        delta=round(new_mean - old_mean, 4) if old_mean is not None and new_mean is not None else None,
        paired=len(changes),
        paired_delta=paired_delta,
        improved=sum(1 for c in changes if c.delta > 0),
        worsened=sum(1 for c in changes if c.delta < 0),
        test=test,
        effect_size=rank_biserial(test),
        underpowered=smallest_p_value(test.n) >= alpha,
        significant=significant,
        regressed=significant and paired_delta is not None and paired_delta < 0,
        worst=dropped[:worst],
    )


def compare(
    baseline: Sequence[Mapping[str, Any]],
    current: Sequence[Mapping[str, Any]],
    scorers: Sequence[str],
    *,
    baseline_name: str = "baseline",
    alpha: float = 0.05,
    worst: int = 5,
) -> Comparison:
    """Per scorer: means, their difference, the paired test, and the `worst` items that dropped most."""
    old_by_key = {record_key(r): r for r in baseline}
    new_by_key = {record_key(r): r for r in current}
    shared = [k for k in new_by_key if k in old_by_key]
    results = {
        scorer: _compare_scorer(
            scorer,
            [s for r in baseline if (s := _score(r, scorer)) is not None],
            [s for r in current if (s := _score(r, scorer)) is not None],
            _changes(old_by_key, new_by_key, shared, scorer),
            alpha,
            worst,
        )
        for scorer in scorers
    }
    return Comparison(
        baseline=baseline_name,
        alpha=alpha,
        matched=len(shared),
        only_baseline=len(old_by_key.keys() - new_by_key.keys()),
        only_current=len(new_by_key.keys() - old_by_key.keys()),
        scorers=results,
    )


def format_comparison(comparison: Comparison) -> str:
    """The text a CI log shows: one line per scorer, then the items that dropped most."""
    lines = [
        f"compared with {comparison.baseline}: {comparison.matched} items in both"
        f" ({comparison.only_baseline} only in baseline, {comparison.only_current} only in this run)"
    ]
    for name, c in comparison.scorers.items():
        verdict = c.verdict.upper() if c.regressed else c.verdict
        lines.append(
            f"  {name}: {format_number(c.baseline_mean)} -> {format_number(c.current_mean)} "
            f"({format_number(c.delta, signed=True)}); "
            f"paired n={c.paired}, {c.worsened} worse, {c.improved} better, "
            f"effect size {format_number(c.effect_size, signed=True)} (rank-biserial), "
            f"Wilcoxon p={c.test.p_value:.3g} ({c.test.method}) -> {verdict}"
        )
        if c.underpowered:
            lines.append(
                f"    warning: {c.test.n} changed pairs; the smallest p-value the test can reach with them is "
                f"{smallest_p_value(c.test.n):.3g}, not below alpha {comparison.alpha:g}, so no change can be "
                f"significant (it needs at least {pairs_needed(comparison.alpha)}). Judge by the effect size "
                "and the items below, or compare on more items."
            )
        for change in c.worst:
            label = change.id if change.id is not None else change.key
            lines.append(
                f"      {label}: {change.old:.2f} -> {change.new:.2f}  {shorten(change.query, 60)!r}"
                f"  | {shorten(change.reason, 90)}"
            )
    return "\n".join(lines)
