"""Capture: span conventions in, RagSamples out. Reads ReadableSpans; no I/O."""

from ragtrace.capture.pairing import extract_samples, opens_capture
from ragtrace.capture.readers import span_role
from ragtrace.capture.types import CapturedSample, CaptureStats, Extractor
from ragtrace.capture.values import DEFAULT_LIMITS, CaptureLimits

__all__ = [
    "DEFAULT_LIMITS",
    "CaptureLimits",
    "CaptureStats",
    "CapturedSample",
    "Extractor",
    "extract_samples",
    "opens_capture",
    "span_role",
]
