"""ragtrace: score the retrieval quality of RAG applications on live traffic, inside OpenTelemetry.

    ragtrace.install(tracer_provider, judge="local")        # live, in front of your exporter
    provider.add_span_processor(ragtrace.scoring_batch_processor(exporter))   # live, behind the batching
    ragtrace.evaluate(samples, judge="local")               # offline, on a dataset
    ragtrace.create_context_precision_scorer(model=..., options={"context": [...]}).run(run)

The live and offline entry points are imported on first use, so `import ragtrace` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ragtrace.scoring import (
    ContextPrecision,
    ContextRecall,
    ContextRelevance,
    Document,
    JudgeUsage,
    RagSample,
    ScoreResult,
)

if TYPE_CHECKING:
    from ragtrace.judges.llm import LLMJudge
    from ragtrace.judges.local import LocalJudge
    from ragtrace.live import (
        RagScoringSpanExporter,
        RagScoringSpanProcessor,
        ScoringBatchSpanProcessor,
        install,
        scoring_batch_processor,
    )
    from ragtrace.offline import (
        aevaluate,
        create_context_precision_scorer,
        create_context_recall_scorer,
        create_context_relevance_scorer,
        evaluate,
    )

__version__ = "0.1.0"

_LAZY = {
    "install": "ragtrace.live",
    "RagScoringSpanProcessor": "ragtrace.live",
    "RagScoringSpanExporter": "ragtrace.live",
    "ScoringBatchSpanProcessor": "ragtrace.live",
    "scoring_batch_processor": "ragtrace.live",
    "evaluate": "ragtrace.offline",
    "aevaluate": "ragtrace.offline",
    "create_context_precision_scorer": "ragtrace.offline",
    "create_context_relevance_scorer": "ragtrace.offline",
    "create_context_recall_scorer": "ragtrace.offline",
    "LLMJudge": "ragtrace.judges.llm",
    "LocalJudge": "ragtrace.judges.local",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ragtrace' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "ContextPrecision",
    "ContextRecall",
    "ContextRelevance",
    "Document",
    "JudgeUsage",
    "LLMJudge",
    "LocalJudge",
    "RagSample",
    "RagScoringSpanExporter",
    "RagScoringSpanProcessor",
    "ScoreResult",
    "ScoringBatchSpanProcessor",
    "__version__",
    "aevaluate",
    "create_context_precision_scorer",
    "create_context_recall_scorer",
    "create_context_relevance_scorer",
    "evaluate",
    "install",
    "scoring_batch_processor",
]
