"""What capture hands to the live pipeline: a sample plus where in the trace it came from."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace.scoring import RagSample


@dataclass(frozen=True)
class CapturedSample:
    """One retrieval of a trace, paired with the generation that consumed it.

    Span ids let the live pipeline write scores back to the retrieval, generation or root span.
    `retriever` is a low-cardinality name (span name or vector store) for metric attributes.
    """

    sample: RagSample
    trace_id: int
    retrieval_span_id: int
    generation_span_id: int | None = None
    root_span_id: int | None = None
    convention: str = "custom"  # genai | openinference | openllmetry | haystack | custom
    retriever: str = ""
    # How the generation was chosen: "contexts" or "query" (its input quotes them), "time" (the fallback).
    pairing: str = ""
    # The agent run the retrieval belongs to (the nearest invoke_agent / AGENT span above it; the root when
    # the trace searched several times for one question with no agent span): where the roll-up is written.
    agent_span_id: int | None = None
    # The conversation (session.id, gen_ai.conversation.id), when the trace says.
    session_id: str | None = None


@dataclass
class CaptureStats:
    """Why spans were or were not turned into samples; feeds the decision counter."""

    counts: Counter[str] = field(default_factory=Counter)

    def count(self, reason: str, n: int = 1) -> None:
        self.counts[reason] += n


@dataclass(frozen=True)
class SpanVerdict:
    """How capture classified one span of a trace and what it did with it, in words."""

    span_id: int
    parent_id: int | None
    name: str
    role: str | None  # "retrieval", "generation" or None
    convention: str | None
    verdict: str


@dataclass
class TraceReport:
    """What capture decided for one trace: every span's verdict, the samples built, the counts of why not."""

    trace_id: int
    spans: list[SpanVerdict] = field(default_factory=list)
    samples: list[CapturedSample] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)


# A user's own span shapes: all ended spans of one trace in, samples out. Takes precedence over readers.
Extractor = Callable[[Sequence[ReadableSpan]], Sequence[CapturedSample]]
