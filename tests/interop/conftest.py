"""Fixtures for the interop tests: the offline local judge (skipped where its weights are not installed)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ragtrace.judges.base import Judge

# Haystack's product telemetry (posthog, on by default) must not leave loopback.
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")


@pytest.fixture(scope="session")
def local_judge() -> Judge:
    """One LocalJudge for the session: loading the encoder once keeps these tests quick."""
    try:
        from ragtrace.judges.local import LocalJudge

        return LocalJudge()
    except Exception as exc:  # numpy / tokenizers / the model weights are an optional extra
        pytest.skip(f"local judge unavailable: {exc}")


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str, *requires: str) -> ModuleType:
    """Import examples/<name>.py (skipped when a library it needs is not installed)."""
    for module in requires:
        pytest.importorskip(module)
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))  # the examples import their siblings (_pipeline, langchain_app)
    return importlib.import_module(name)
