"""The arithmetic of scorers.md, on plain lists. Nothing here knows about judges or spans."""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal

from ragtrace.scoring.verdicts import LEVEL_WEIGHTS


def finalize(raw: float, scale: float) -> float:
    """Clamp to [0, 1], multiply by scale, round half-up to two decimals (0.835 -> 0.84)."""
    clamped = min(max(raw, 0.0), 1.0) * scale
    # Go through a 12-digit decimal string first so float noise (0.8349999...) does not defeat half-up.
    return float(Decimal(f"{clamped:.12f}").quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


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
    top = relevance[:k]
    return sum(1 for r in top if r) / k if k > 0 else 0.0


def reciprocal_rank(relevance: Sequence[bool | int]) -> float:
    for k, rel in enumerate(relevance, start=1):
        if rel:
            return 1.0 / k
    return 0.0


def ndcg(gains: Sequence[float]) -> float:
    """nDCG of the list as ranked against its own ideal ordering; 0 when every gain is 0."""
    def dcg(values: Sequence[float]) -> float:
        return sum(g / math.log2(i + 2) for i, g in enumerate(values))

    ideal = dcg(sorted(gains, reverse=True))
    return dcg(gains) / ideal if ideal > 0 else 0.0


def noise_share(relevance: Sequence[bool | int]) -> float:
    return sum(1 for r in relevance if not r) / len(relevance) if relevance else 0.0


def ranked_views(relevance: Sequence[bool | int], gains: Sequence[float] | None = None) -> dict[str, float]:
    """The standard IR views of one ranked list, for `details`. They cost no judge call."""
    n = len(relevance)
    views: dict[str, float] = {
        f"precision_at_{k}": round(precision_at_k(relevance, k), 4) for k in (1, 3, 5) if k <= n
    }
    views["reciprocal_rank"] = round(reciprocal_rank(relevance), 4)
    views["noise_share"] = round(noise_share(relevance), 4)
    views["ndcg"] = round(ndcg(gains if gains is not None else [float(bool(r)) for r in relevance]), 4)
    return views
