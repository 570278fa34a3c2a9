"""Live scoring inside OpenTelemetry: `install()` or the two faces (a span processor in front of the
exporting processor, a span exporter behind the batching), over one pipeline (`core.LiveScoring`)."""

from ragtrace.live.drift import DriftConfig, DriftDetector, DriftMetrics, DriftMonitor
from ragtrace.live.enrich import Evaluation
from ragtrace.live.exporter import BatchedScoring, RagScoringSpanExporter, ScoringBatchSpanProcessor
from ragtrace.live.file_exporter import OtlpJsonFileSpanExporter
from ragtrace.live.metrics import RagtraceMetrics
from ragtrace.live.metrics import views as metric_views
from ragtrace.live.options import ScoringOptions
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.redaction import Redactor
from ragtrace.live.sampling import Sampler, SamplingRule
from ragtrace.live.settings import RagtraceSettings, SettingsError
from ragtrace.live.setup import auto_install, install, installed, scoring_batch_processor

__all__ = [
    "BatchedScoring",
    "DriftConfig",
    "DriftDetector",
    "DriftMetrics",
    "DriftMonitor",
    "Evaluation",
    "OtlpJsonFileSpanExporter",
    "RagScoringSpanExporter",
    "RagScoringSpanProcessor",
    "RagtraceMetrics",
    "RagtraceSettings",
    "Redactor",
    "Sampler",
    "SamplingRule",
    "ScoringBatchSpanProcessor",
    "ScoringOptions",
    "SettingsError",
    "auto_install",
    "install",
    "installed",
    "metric_views",
    "scoring_batch_processor",
]
