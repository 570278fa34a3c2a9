"""ragtrace: score the retrieval quality of RAG applications on live traffic, inside OpenTelemetry.

    ragtrace.install(tracer_provider, judge="local")        # live, behind your provider's batching
    ragtrace.evaluate(samples, judge="local")               # offline, on a dataset
    ragtrace.align("labels.jsonl", ["local", "openai/gpt-4o-mini"])   # does each judge agree with people?
    ragtrace.create_context_precision_scorer(model=..., options={"context": [...]}).run(run)

Where you build the pipeline yourself: `scoring_batch_processor(exporter)` (behind the batching), or the
two faces `RagScoringSpanExporter` (behind) and `RagScoringSpanProcessor` (in front of the exporting
processor). `OtlpJsonFileSpanExporter` writes spans to a file `ragtrace explain` reads. `RagtraceSettings`,
`Sampler` and `Redactor` are what `install(**options)` takes; `metric_views()` are the Views of a MeterProvider
whose score exemplars carry the session (`session_exemplars`). The scoring
types live in `ragtrace.scoring`, the judges in `ragtrace.judges`.

Everything is imported on first use, so `import ragtrace` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ragtrace._version import __version__

if TYPE_CHECKING:
    from ragtrace.live import (
        OtlpJsonFileSpanExporter,
        RagScoringSpanExporter,
        RagScoringSpanProcessor,
        RagtraceSettings,
        Redactor,
        Sampler,
        install,
        metric_views,
        scoring_batch_processor,
    )
    from ragtrace.offline import (
        aalign,
        aevaluate,
        align,
        create_context_precision_scorer,
        create_context_recall_scorer,
        create_context_relevance_scorer,
        evaluate,
    )

_LAZY = {
    "install": "ragtrace.live",
    "OtlpJsonFileSpanExporter": "ragtrace.live",
    "scoring_batch_processor": "ragtrace.live",
    "RagScoringSpanProcessor": "ragtrace.live",
    "RagScoringSpanExporter": "ragtrace.live",
    "RagtraceSettings": "ragtrace.live",
    "Sampler": "ragtrace.live",
    "Redactor": "ragtrace.live",
    "metric_views": "ragtrace.live",
    "evaluate": "ragtrace.offline",
    "align": "ragtrace.offline",
    "aalign": "ragtrace.offline",
    "aevaluate": "ragtrace.offline",
    "create_context_precision_scorer": "ragtrace.offline",
    "create_context_relevance_scorer": "ragtrace.offline",
    "create_context_recall_scorer": "ragtrace.offline",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ragtrace' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "OtlpJsonFileSpanExporter",
    "RagScoringSpanExporter",
    "RagScoringSpanProcessor",
    "RagtraceSettings",
    "Redactor",
    "Sampler",
    "__version__",
    "aalign",
    "aevaluate",
    "align",
    "create_context_precision_scorer",
    "create_context_recall_scorer",
    "create_context_relevance_scorer",
    "evaluate",
    "install",
    "metric_views",
    "scoring_batch_processor",
]
