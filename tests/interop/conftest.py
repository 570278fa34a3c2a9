"""Fixtures for the interop tests: the offline local judge (skipped where its weights are not installed)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

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


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str, *requires: str) -> ModuleType:
    """Import examples/<name>.py (skipped when a library it needs is not installed)."""
    for module in requires:
        pytest.importorskip(module)
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))  # the examples import their siblings (_pipeline, langchain_app)
    return importlib.import_module(name)


@pytest.fixture(autouse=True)
def no_leaked_openllmetry_patch() -> None:
    """Undo an OpenLLMetry LangChain patch another test left behind: opentelemetry-instrumentation-langchain
    0.62.4's uninstrument() does not unwrap it, and a stale handler would send our spans to its provider."""
    callbacks = sys.modules.get("langchain_core.callbacks")
    if callbacks is None:
        return
    manager = callbacks.BaseCallbackManager
    init = original = manager.__dict__["__init__"]
    while type(getattr(init, "_self_wrapper", None)).__name__ == "_BaseCallbackManagerInitWrapper":
        init = init.__wrapped__
    if init is not original:
        manager.__init__ = init
