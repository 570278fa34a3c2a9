"""Failures of ragtrace's own telemetry (metrics, drift checks), logged once per kind.

A broken instrument or a failing callback must neither reach the host nor flood its log once per span:
the first failure of each kind is a warning with its traceback, later ones are debug lines.
"""

from __future__ import annotations

import logging


class FailureLog:
    """Call `failed(kind)` from an `except` block; `consequence` says what the user loses."""

    def __init__(self, logger: logging.Logger, component: str, consequence: str) -> None:
        self._logger = logger
        self._component = component
        self._consequence = consequence
        self._seen: set[str] = set()

    def failed(self, kind: str) -> None:
        if kind in self._seen:
            self._logger.debug("%s: %s failed again", self._component, kind, exc_info=True)
            return
        self._seen.add(kind)
        self._logger.warning(
            "%s: %s failed; %s", self._component, kind, self._consequence, exc_info=True
        )
