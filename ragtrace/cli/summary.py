"""What a scoring run prints: the table for people and CI logs, and the JSON summary for machines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragtrace._text import format_number
from ragtrace.cli.options import Threshold
from ragtrace.offline.compare import Comparison
from ragtrace.offline.evaluate import ItemResult, ScorerSummary
from ragtrace.scoring import JudgeUsage


def format_counts(counts: dict[str, int]) -> str:
    """`{"no_context": 2, "no_claims": 1}` as `no_claims 1, no_context 2`; `0` when empty."""
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "0"


def _aligned(rows: list[list[str]]) -> list[str]:
    """Rows as text columns (the first left-aligned, the rest right-aligned), a rule under the header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def format_table(summaries: dict[str, ScorerSummary], usage: JudgeUsage, thresholds: Sequence[Threshold]) -> str:
    """The human summary: one row per scorer, then what the judge spent."""
    by_name = {t.scorer: t for t in thresholds}
    header = ["scorer", "mean", "p10", "p50", "p90", "pass", "scored", "skipped", "errors", "min"]
    rows = [header]
    for name, s in summaries.items():
        gate = by_name.get(name)
        verdict = "-" if gate is None else f"{gate.minimum:g} {'ok' if gate.passed else 'FAIL'}"
        rows.append([
            name, format_number(s.mean), format_number(s.p10), format_number(s.p50), format_number(s.p90),
            format_number(s.pass_rate, pct=True), f"{s.scored}/{s.count}", format_counts(s.skipped),
            format_counts(s.errors), verdict,
        ])
    lines = _aligned(rows)
    cost = "n/a" if usage.cost_usd is None else f"${usage.cost_usd:.4f}"
    lines.append(
        f"judge {usage.model or '?'} (id {usage.judge_id or '?'}): {usage.calls} calls, "
        f"{usage.input_tokens} input + {usage.output_tokens} "
        f"output tokens, cost {cost}, {usage.cache_hits} cache hits"
    )
    return "\n".join(lines)


def format_sessions(sessions: dict[str, dict[str, ScorerSummary]]) -> str:
    """`--by-session`: one row per conversation, its item count and each scorer's mean and pass rate."""
    names = list(next(iter(sessions.values()), {}))
    header = ["session", "items", *(f"{n} mean/pass" for n in names)]
    rows = [header]
    for session, summaries in sessions.items():
        count = max((s.count for s in summaries.values()), default=0)
        rows.append([session, str(count), *(
            f"{format_number(summaries[n].mean)}/{format_number(summaries[n].pass_rate, pct=True)}" for n in names)])
    lines = _aligned(rows)
    return "\n".join(lines)


def summary_json(
    *,
    command: str,
    source: str,
    items: Sequence[ItemResult],
    summaries: dict[str, ScorerSummary],
    usage: JudgeUsage,
    thresholds: Sequence[Threshold],
    comparison: Comparison | None,
    evaluated: int,
    resumed: int,
    interrupted: bool,
    elapsed: float,
    exit_code: int,
    sessions: dict[str, dict[str, ScorerSummary]] | None = None,
) -> dict[str, Any]:
    by_name = {t.scorer: t for t in thresholds}
    scorers: dict[str, Any] = {}
    for name, s in summaries.items():
        entry = s.model_dump(mode="json")
        if name in by_name:
            entry["min"] = by_name[name].minimum
            entry["passed"] = by_name[name].passed
        scorers[name] = entry
    return {
        "command": command,
        "source": source,
        "items": len(items),
        "evaluated": evaluated,
        "resumed": resumed,
        "interrupted": interrupted,
        "elapsed_s": round(elapsed, 3),
        "judge": usage.model_dump(mode="json"),
        "scorers": scorers,
        "thresholds": [{"scorer": t.scorer, "min": t.minimum, "mean": t.mean, "passed": t.passed} for t in thresholds],
        "compare": comparison.model_dump(mode="json") if comparison is not None else None,
        "exit_code": exit_code,
        **({"sessions": {session: {name: s.model_dump(mode="json") for name, s in summaries.items()}
                         for session, summaries in sessions.items()}} if sessions is not None else {}),
    }


__all__ = ["format_counts", "format_sessions", "format_table", "summary_json"]
