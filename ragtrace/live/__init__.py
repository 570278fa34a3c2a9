"""Live scoring inside OpenTelemetry: the span processor or exporter, worker, sampling, metrics, redaction, setup."""

from ragtrace.live.drift import DriftConfig, DriftDetector, DriftMetrics, DriftMonitor
from ragtrace.live.enrich import Evaluation
from ragtrace.live.exporter import RagScoringSpanExporter, ScoringBatchSpanProcessor
from ragtrace.live.metrics import RagtraceMetrics
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.redaction import Redactor
from ragtrace.live.sampling import Sampler, SamplingRule
from ragtrace.live.setup import RagtraceSettings, auto_install, install, scoring_batch_processor

__all__ = [
    "DriftConfig",
    "DriftDetector",
    "DriftMetrics",
    "DriftMonitor",
    "Evaluation",
    "RagScoringSpanExporter",
    "RagScoringSpanProcessor",
    "RagtraceMetrics",
    "RagtraceSettings",
    "Redactor",
    "Sampler",
    "SamplingRule",
    "ScoringBatchSpanProcessor",
    "auto_install",
    "install",
    "scoring_batch_processor",
]
