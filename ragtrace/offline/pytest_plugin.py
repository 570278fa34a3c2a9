"""pytest fixtures for retrieval-quality tests; registered through the `pytest11` entry point.

    def test_faq_retrieval(assert_retrieval, faq_samples):
        assert_retrieval(faq_samples, min_precision=0.7)

The judge is built once per session (`--ragtrace-judge`, else $RAGTRACE_JUDGE, else "local"), so the
local model loads once however many tests use it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest

from ragtrace.judges import Judge
from ragtrace.judges.resolve import resolve_judge
from ragtrace.offline.evaluate import EvaluationReport
from ragtrace.scoring import RagSample


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ragtrace")
    group.addoption(
        "--ragtrace-judge",
        default=None,
        help="judge for ragtrace fixtures: 'local' (default) or a litellm model string; env RAGTRACE_JUDGE",
    )


@pytest.fixture(scope="session")
def ragtrace_judge(pytestconfig: pytest.Config) -> Judge:
    """The session's judge, resolved once."""
    name = pytestconfig.getoption("--ragtrace-judge") or os.environ.get("RAGTRACE_JUDGE") or "local"
    return resolve_judge(str(name))


@pytest.fixture
def assert_retrieval(ragtrace_judge: Judge) -> Callable[..., EvaluationReport]:
    """`ragtrace.testing.assert_retrieval` (`offline.assertions`) bound to the session's judge."""
    from ragtrace.offline.assertions import assert_retrieval as check

    def bound(samples: Iterable[RagSample | Mapping[str, Any]], **thresholds: Any) -> EvaluationReport:
        thresholds.setdefault("judge", ragtrace_judge)
        return check(samples, **thresholds)

    return bound
