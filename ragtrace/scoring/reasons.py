"""One short human sentence per result, built from the verdicts (no extra judge call)."""

from __future__ import annotations

from collections.abc import Sequence

SKIP_REASONS = {
    "no_context": "not scored: the retrieval returned no context",
    "no_ground_truth": "not scored: no ground truth is known for this query",
    "no_claims": "not scored: the ground truth holds no checkable claim",
    "no_response": "not scored: no response or ground truth to judge usefulness against",
}


def _quote(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return f"'{text[: limit - 1]}…'" if len(text) > limit else f"'{text}'"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def precision(relevance: Sequence[bool], reference: str | None = "ground_truth") -> str:
    """`reference`: what usefulness was judged against (`ground_truth` or `response`), named as such."""
    n = len(relevance)
    useful = sum(relevance)
    if useful == 0:
        against = "the answer given" if reference == "response" else "the reference answer"
        return f"none of {_plural(n, 'context')} useful for {against}"
    first = relevance.index(True) + 1
    ranks = [k for k, r in enumerate(relevance, start=1) if r]
    tail = "" if ranks == list(range(1, useful + 1)) else f" (useful at ranks {', '.join(map(str, ranks[:6]))})"
    return f"{useful} of {n} contexts useful; first useful at rank {first}{tail}"


def relevance(levels: Sequence[str], unused_high: int, missing: Sequence[str], usage_judged: bool) -> str:
    n = len(levels)
    counts = {lv: sum(1 for x in levels if x == lv) for lv in ("high", "medium", "low")}
    relevant = sum(counts.values())
    parts = [
        f"{relevant} of {n} contexts relevant"
        + (
            " (" + ", ".join(f"{c} {lv}" for lv, c in counts.items() if c) + ")"
            if relevant
            else ""
        )
    ]
    if unused_high:
        parts.append(f"{_plural(unused_high, 'highly relevant context')} not used by the response")
    if missing:
        parts.append(f"missing: {', '.join(_quote(m, 40) for m in missing[:3])}")
    if not usage_judged:
        parts.append("no response, so usage was not judged")
    return "; ".join(parts)


def recall(unsupported: Sequence[str], supported: int, total: int) -> str:
    head = f"{supported} of {_plural(total, 'ground-truth claim')} supported by the context"
    if unsupported:
        return f"{head}; not found: {_quote(unsupported[0])}" + (
            f" and {len(unsupported) - 1} more" if len(unsupported) > 1 else ""
        )
    return head
