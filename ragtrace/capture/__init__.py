"""Capture: span conventions in, RagSamples out. Reads ReadableSpans; no I/O."""

from ragtrace.capture.pairing import CaptureStart, capture_start, extract_samples, holds_rollup, report_traces
from ragtrace.capture.readers import span_role
from ragtrace.capture.rules import DEFAULT_RULES, CaptureRules
from ragtrace.capture.types import CapturedSample, CaptureStats, Extractor, SpanVerdict, TraceReport
from ragtrace.capture.values import DEFAULT_LIMITS, CaptureLimits

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_RULES",
    "CaptureLimits",
    "CaptureRules",
    "CaptureStart",
    "CaptureStats",
    "CapturedSample",
    "Extractor",
    "SpanVerdict",
    "TraceReport",
    "capture_start",
    "extract_samples",
    "holds_rollup",
    "report_traces",
    "span_role",
]
