"""Capture: span conventions in, RagSamples out. Reads ReadableSpans; no I/O."""

from ragtrace.capture.types import CapturedSample, CaptureStats, Extractor

__all__ = ["CaptureStats", "CapturedSample", "Extractor"]
