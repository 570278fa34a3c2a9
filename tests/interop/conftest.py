"""Fixtures for the interop tests: the offline local judge (skipped where its weights are not installed)."""

from __future__ import annotations

import pytest

from ragtrace.judges.base import Judge


@pytest.fixture(scope="session")
def local_judge() -> Judge:
    """One LocalJudge for the session: loading the encoder once keeps these tests quick."""
    try:
        from ragtrace.judges.local import LocalJudge

        return LocalJudge()
    except Exception as exc:  # numpy / tokenizers / the model weights are an optional extra
        pytest.skip(f"local judge unavailable: {exc}")
