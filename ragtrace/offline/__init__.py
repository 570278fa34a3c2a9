"""Offline evaluation: datasets, `evaluate()`, and the seed-compatible scorer factories."""

from ragtrace.offline.evaluate import EvaluationReport, ItemResult, ScorerSummary, aevaluate, evaluate
from ragtrace.offline.factories import (
    RetrievalScorer,
    ScorerOptions,
    create_context_precision_scorer,
    create_context_recall_scorer,
    create_context_relevance_scorer,
)

__all__ = [
    "EvaluationReport",
    "ItemResult",
    "RetrievalScorer",
    "ScorerOptions",
    "ScorerSummary",
    "aevaluate",
    "create_context_precision_scorer",
    "create_context_recall_scorer",
    "create_context_relevance_scorer",
    "evaluate",
]
