"""Failures of ragtrace's own telemetry (metrics, drift checks), logged as warnings, each kind its own line.

A broken instrument or a failing callback must neither reach the host nor flood its log once per span:
each kind is a line of its own (its words are in the message, not in the arguments), so the repeat filter
of ragtrace's loggers (`ragtrace._logs`) lets the first through with its traceback and then one per
window, saying how many it dropped.
"""

from __future__ import annotations

import logging


class FailureLog:
    """Call `failed(kind)` from an `except` block; `consequence` says what the user loses."""

    def __init__(self, logger: logging.Logger, component: str, consequence: str) -> None:
        self._logger = logger
        self._component = component
        self._consequence = consequence

    def failed(self, kind: str) -> None:
        words = f"{self._component}: {kind} failed; {self._consequence}".replace("%", "%%")
        self._logger.warning(words, exc_info=True)
