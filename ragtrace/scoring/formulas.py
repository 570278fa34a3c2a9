"""The arithmetic of scorers.md, on plain lists. Nothing here knows about judges or spans."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from ragtrace.scoring.verdicts import LEVEL_WEIGHTS


def finalize(raw: float, scale: float) -> float:
    """Clamp to [0, 1], multiply by scale, round half-up to two decimals (0.835 -> 0.84)."""
    clamped = min(max(raw, 0.0), 1.0) * scale
    # Round away float noise first (0.835 is stored as 0.83499999999999996), then half-up.
    return math.floor(round(clamped * 100, 9) + 0.5) / 100


def average_precision(relevance: Sequence[bool | int]) -> float:
    """AP over a ranked list of binary relevance; 0 when nothing is relevant."""
    hits = 0
    total = 0.0
    for k, rel in enumerate(relevance, start=1):
        if rel:
            hits += 1
            total += hits / k
    return total / hits if hits else 0.0


def relevance_base(levels: Sequence[str]) -> float:
    return sum(LEVEL_WEIGHTS[level] for level in levels) / len(levels) if levels else 0.0


def relevance_score(
    levels: Sequence[str],
    used: Sequence[bool],
    missing_count: int,
    *,
    unused_high_penalty: float = 0.10,
    missing_per_item: float = 0.15,
    max_missing_penalty: float = 0.50,
) -> float:
    """base - unused-high penalty - capped missing penalty, clamped to [0, 1] (before scale)."""
    unused_high = sum(1 for level, u in zip(levels, used, strict=True) if level == "high" and not u)
    missing = min(missing_per_item * missing_count, max_missing_penalty)
    return min(max(relevance_base(levels) - unused_high_penalty * unused_high - missing, 0.0), 1.0)


def precision_at_k(relevance: Sequence[bool | int], k: int) -> float:
    return sum(1 for r in relevance[:k] if r) / k if k > 0 else 0.0


def reciprocal_rank(relevance: Sequence[bool | int]) -> float:
    for k, rel in enumerate(relevance, start=1):
        if rel:
            return 1.0 / k
    return 0.0


@functools.lru_cache(maxsize=256)
def _discounts(n: int) -> tuple[float, ...]:
    return tuple(1.0 / math.log2(i + 2) for i in range(n))


def ndcg(gains: Sequence[float]) -> float:
    """nDCG of the list as ranked against its own ideal ordering; 0 when every gain is 0."""
    discounts = _discounts(len(gains))
    ideal = sum(g * d for g, d in zip(sorted(gains, reverse=True), discounts, strict=True))
    return sum(g * d for g, d in zip(gains, discounts, strict=True)) / ideal if ideal > 0 else 0.0


def noise_share(relevance: Sequence[bool | int]) -> float:
    return sum(1 for r in relevance if not r) / len(relevance) if relevance else 0.0


_CUTOFFS = (1, 3, 5)


def ranked_views(relevance: Sequence[bool | int], gains: Sequence[float] | None = None) -> dict[str, float]:
    """The standard IR views of one ranked list, for `details`. They cost no judge call.

    One pass over the list: this runs for every scored sample on the live worker.
    """
    views: dict[str, float] = {}
    hits = 0
    first_hit = 0
    for k, rel in enumerate(relevance, start=1):
        if rel:
            hits += 1
            first_hit = first_hit or k
        if k in _CUTOFFS:
            views[f"precision_at_{k}"] = round(hits / k, 4)
    n = len(relevance)
    views["reciprocal_rank"] = round(1.0 / first_hit, 4) if first_hit else 0.0
    views["noise_share"] = round((n - hits) / n, 4) if n else 0.0
    views["ndcg"] = round(ndcg(gains if gains is not None else [1.0 if r else 0.0 for r in relevance]), 4)
    return views
