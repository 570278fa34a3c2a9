"""Drift of live scores: the pure detector (`detector.py`) and the scheduled monitor (`monitor.py`)."""

from ragtrace.live.drift.detector import DriftConfig, DriftDetector, DriftState
from ragtrace.live.drift.monitor import DRIFT_INSTRUMENTS, DriftMetrics, DriftMonitor

__all__ = [
    "DRIFT_INSTRUMENTS",
    "DriftConfig",
    "DriftDetector",
    "DriftMetrics",
    "DriftMonitor",
    "DriftState",
]
