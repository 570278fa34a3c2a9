"""The three retrieval scorers: given a sample and validated verdicts, a score and a reason.

A scorer never calls a judge. It says which verdicts it needs (`aspects`), whether it applies at all
(`skip_reason`), and turns verdicts into a `ScoreResult` (`score`). Judging is done once, elsewhere, for
every scorer that needs it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from ragtrace._checks import fractions, positive
from ragtrace.scoring import formulas, reasons
from ragtrace.scoring.result import JudgeUsage, ScoreResult, SkipReason
from ragtrace.scoring.sample import RagSample
from ragtrace.scoring.verdicts import LEVEL_WEIGHTS, Aspect, Verdicts

Reference = Literal["auto", "ground_truth", "response"]
_NO_USAGE = JudgeUsage()  # frozen: one shared instance for results that report no judge cost


@dataclass(frozen=True)
class Scorer(ABC):
    """Common options: `scale` multiplies the score, `threshold` (a fraction of scale) sets the label."""

    name: ClassVar[str]
    aspect: ClassVar[Aspect]

    scale: float = 1.0
    threshold: float = 0.5

    def __post_init__(self) -> None:
        positive(self, "scale")
        fractions(self, "threshold")

    def skip_reason(self, sample: RagSample) -> SkipReason | None:
        """Why this scorer cannot apply to the sample, or None. Checked before any judge call."""
        return "no_context" if not sample.contexts else None

    def reference(self, sample: RagSample) -> str | None:
        """The answer usefulness is judged against, for scorers that need one."""
        return None

    @abstractmethod
    def score(self, sample: RagSample, verdicts: Verdicts, usage: JudgeUsage | None = None) -> ScoreResult:
        """Turn validated verdicts into a result."""

    def skipped(self, reason: SkipReason) -> ScoreResult:
        return ScoreResult(name=self.name, skipped=reason, reason=reasons.SKIP_REASONS[reason])

    def failed(self, code: str, message: str, usage: JudgeUsage | None = None) -> ScoreResult:
        return ScoreResult(
            name=self.name,
            error=code,
            error_message=message,
            reason=f"not scored: {message}",
            usage=usage or _NO_USAGE,
        )

    def _result(
        self, raw: float, reason: str, details: dict[str, Any], usage: JudgeUsage | None
    ) -> ScoreResult:
        score = formulas.finalize(raw, self.scale)
        label: Literal["pass", "fail"] = "pass" if score >= self.threshold * self.scale else "fail"
        return ScoreResult(
            name=self.name, score=score, label=label, reason=reason, details=details, usage=usage or _NO_USAGE
        )


@dataclass(frozen=True)
class ContextPrecision(Scorer):
    """Are the useful contexts ranked first? Mean average precision over binary usefulness."""

    name: ClassVar[str] = "context_precision"
    aspect: ClassVar[Aspect] = Aspect.USEFULNESS

    reference_source: Reference = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.reference_source not in ("auto", "ground_truth", "response"):
            raise ValueError(
                f"reference must be 'auto', 'ground_truth' or 'response', got {self.reference_source!r}"
            )

    def reference_kind(self, sample: RagSample) -> Literal["ground_truth", "response"] | None:
        """Which answer usefulness is judged against for this sample, if any."""
        has_truth = sample.ground_truth is not None
        has_response = bool(sample.response.strip())
        if self.reference_source == "ground_truth" or (self.reference_source == "auto" and has_truth):
            return "ground_truth" if has_truth else None
        return "response" if has_response else None

    def reference(self, sample: RagSample) -> str | None:
        kind = self.reference_kind(sample)
        return sample.ground_truth if kind == "ground_truth" else sample.response if kind == "response" else None

    def skip_reason(self, sample: RagSample) -> SkipReason | None:
        if not sample.contexts:
            return "no_context"
        if self.reference(sample) is None:
            return "no_ground_truth" if self.reference_source == "ground_truth" else "no_response"
        return None

    def score(self, sample: RagSample, verdicts: Verdicts, usage: JudgeUsage | None = None) -> ScoreResult:
        relevance = [bool(v.useful) for v in verdicts.contexts]
        reference = self.reference_kind(sample)
        details: dict[str, Any] = {
            "reference": reference,
            "verdicts": [
                {"index": v.index, "useful": v.useful, "reason": v.reason} for v in verdicts.contexts
            ],
            **formulas.ranked_views(relevance),
        }
        return self._result(
            formulas.average_precision(relevance), reasons.precision(relevance, reference), details, usage
        )


@dataclass(frozen=True)
class ContextRelevance(Scorer):
    """How relevant is what was retrieved, was the best of it used, and was anything missing?"""

    name: ClassVar[str] = "context_relevance"
    aspect: ClassVar[Aspect] = Aspect.RELEVANCE

    unused_high_penalty: float = 0.10
    missing_per_item: float = 0.15
    max_missing_penalty: float = 0.50

    def __post_init__(self) -> None:
        super().__post_init__()
        fractions(self, "unused_high_penalty", "missing_per_item", "max_missing_penalty")

    def score(self, sample: RagSample, verdicts: Verdicts, usage: JudgeUsage | None = None) -> ScoreResult:
        levels = [v.level or "none" for v in verdicts.contexts]
        usage_judged = bool(sample.response.strip())
        # With no response, usage cannot be judged: every context counts as used (and the reason says so).
        used = [bool(v.used) if usage_judged else True for v in verdicts.contexts]
        unused_high = sum(1 for lv, u in zip(levels, used, strict=True) if lv == "high" and not u)
        raw = formulas.relevance_score(
            levels,
            used,
            len(verdicts.missing),
            unused_high_penalty=self.unused_high_penalty,
            missing_per_item=self.missing_per_item,
            max_missing_penalty=self.max_missing_penalty,
        )
        relevant = [level != "none" for level in levels]
        details: dict[str, Any] = {
            "verdicts": [
                {"index": v.index, "level": lv, "used": u, "reason": v.reason}
                for v, lv, u in zip(verdicts.contexts, levels, used, strict=True)
            ],
            "missing": list(verdicts.missing),
            "base": round(formulas.relevance_base(levels), 4),
            "unused_high": unused_high,
            "unused_high_penalty": round(self.unused_high_penalty * unused_high, 4),
            "missing_penalty": round(
                min(self.missing_per_item * len(verdicts.missing), self.max_missing_penalty), 4
            ),
            "usage_judged": usage_judged,
            **formulas.ranked_views(relevant, [LEVEL_WEIGHTS[level] for level in levels]),
        }
        reason = reasons.relevance(levels, unused_high, verdicts.missing, usage_judged)
        return self._result(raw, reason, details, usage)


@dataclass(frozen=True)
class ContextRecall(Scorer):
    """Does the retrieved context contain every claim of the ground truth?"""

    name: ClassVar[str] = "context_recall"
    aspect: ClassVar[Aspect] = Aspect.CLAIMS

    def skip_reason(self, sample: RagSample) -> SkipReason | None:
        if sample.ground_truth is None:
            return "no_ground_truth"
        return super().skip_reason(sample)

    def score(self, sample: RagSample, verdicts: Verdicts, usage: JudgeUsage | None = None) -> ScoreResult:
        claims = verdicts.claims or []
        if not claims:
            return self.skipped("no_claims")
        supported = sum(1 for c in claims if c.supported)
        details: dict[str, Any] = {
            "claims": [c.model_dump() for c in claims],
            "supported": supported,
            "total": len(claims),
        }
        reason = reasons.recall([c.claim for c in claims if not c.supported], supported, len(claims))
        return self._result(supported / len(claims), reason, details, usage)


SCORERS: dict[str, type[Scorer]] = {
    cls.name: cls for cls in (ContextPrecision, ContextRelevance, ContextRecall)
}


def default_scorers() -> list[Scorer]:
    return [ContextPrecision(), ContextRelevance(), ContextRecall()]
