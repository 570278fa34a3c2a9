"""Capture: span conventions in, RagSamples out. Reads ReadableSpans; no I/O."""

from ragtrace.capture.pairing import CaptureStart, capture_start, extract_samples
from ragtrace.capture.readers import span_role
from ragtrace.capture.types import CapturedSample, CaptureStats, Extractor
from ragtrace.capture.values import DEFAULT_LIMITS, CaptureLimits

__all__ = [
    "DEFAULT_LIMITS",
    "CaptureLimits",
    "CaptureStart",
    "CaptureStats",
    "CapturedSample",
    "Extractor",
    "capture_start",
    "extract_samples",
    "span_role",
]
