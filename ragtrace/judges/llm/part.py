"""What one judge call asks (a `Part` of a sample's verdicts) and the bounds of its answer.

One call asks for some aspects, for some context indices, with or without the sample-level fields
(`missing`, `claims`). The prompt, the schema, the output budget and the reading of the answer are all
built from the same `Part`, so they agree on what is asked.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragtrace.scoring import Aspect

FUSED_VERSION = "fused-v2"
PER_ASPECT_VERSION = "per-aspect-v2"
ASPECT_VERSIONS: dict[Aspect, str] = {
    Aspect.USEFULNESS: "usefulness-v2",
    Aspect.RELEVANCE: "relevance-v2",
    Aspect.CLAIMS: "claims-v2",
}

LEVELS = ("high", "medium", "low", "none")
PER_CONTEXT = frozenset({Aspect.USEFULNESS, Aspect.RELEVANCE})
REASON_CHARS = 80
MAX_MISSING = 5
MAX_CLAIMS = 12
CLAIM_CHARS = 200


def version_for(aspects: frozenset[Aspect], fused: bool) -> str:
    """The prompt version a call is labelled with: one fused version, or the single aspect's."""
    if fused or len(aspects) != 1:
        return FUSED_VERSION
    return ASPECT_VERSIONS[next(iter(aspects))]


@dataclass(frozen=True)
class Part:
    """What one call asks: verdicts of the `per_context` aspects for the contexts `indices`, and the
    sample-level fields `missing` (relevance) and `claims`. A sample-level call shows every context;
    a per-context one only the contexts it asks about."""

    per_context: frozenset[Aspect]
    indices: tuple[int, ...]
    missing: bool = False
    claims: bool = False

    @property
    def sample_level(self) -> bool:
        return self.missing or self.claims

    @property
    def aspects(self) -> frozenset[Aspect]:
        extra = ({Aspect.RELEVANCE} if self.missing else set()) | ({Aspect.CLAIMS} if self.claims else set())
        return self.per_context | extra

    def shown(self, n_contexts: int) -> tuple[int, ...]:
        return tuple(range(n_contexts)) if self.sample_level else self.indices


def whole(aspects: frozenset[Aspect], n_contexts: int) -> Part:
    """Everything a request needs, in one call."""
    per_context = aspects & PER_CONTEXT if n_contexts else frozenset()
    indices = tuple(range(n_contexts)) if per_context else ()
    return Part(per_context, indices, Aspect.RELEVANCE in aspects, Aspect.CLAIMS in aspects)


def asks(part: Part) -> bool:
    """Whether the part asks anything at all (a part of no contexts and no sample-level field does not)."""
    return bool(part.indices) or part.sample_level


def shown_keys(indices: tuple[int, ...]) -> str:
    """The keys an answer must have, as the prompt and the errors name them (a long run elided)."""
    shown = [f'"{i}"' for i in indices]
    return ", ".join(shown) if len(shown) <= 6 else ", ".join(shown[:3]) + ", ..., " + shown[-1]
