"""ragtrace: score the retrieval quality of RAG applications on live traffic, inside OpenTelemetry."""

from ragtrace.scoring import (
    ContextPrecision,
    ContextRecall,
    ContextRelevance,
    Document,
    JudgeUsage,
    RagSample,
    ScoreResult,
)

__version__ = "0.1.0"

__all__ = [
    "ContextPrecision",
    "ContextRecall",
    "ContextRelevance",
    "Document",
    "JudgeUsage",
    "RagSample",
    "ScoreResult",
    "__version__",
]
