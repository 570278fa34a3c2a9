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

# Datasets, baseline comparison, HTML report and trace replay (the `ragtrace eval` / `replay` machinery), and
# agreement with human labels (`ragtrace align`).
from ragtrace.offline.align import AlignmentReport, aalign, align
from ragtrace.offline.compare import Comparison, load_results, wilcoxon_signed_rank
from ragtrace.offline.dataset import DatasetError, DatasetRow, FieldMap, load_dataset
from ragtrace.offline.report import ReportItem, render_report, write_report

__all__ += [
    "AlignmentReport",
    "Comparison",
    "DatasetError",
    "DatasetRow",
    "FieldMap",
    "ReportItem",
    "aalign",
    "align",
    "load_dataset",
    "load_results",
    "render_report",
    "wilcoxon_signed_rank",
    "write_report",
]
