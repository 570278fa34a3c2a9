"""The real servers the tests run against live in tests/servers/; their fixtures are registered here, with a
guard every test gets against an instrumentation patch an earlier test left behind."""

import os
import sys

import pytest
from hypothesis import settings

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# No example database: a run must not replay (or depend on) what an earlier run left in .hypothesis/.
# No deadline: the suite times nothing (benches do), and a shared machine's pause failed a 200 ms deadline.
settings.register_profile("ragtrace", database=None, deadline=None)
settings.load_profile("ragtrace")

pytest_plugins = ["tests.servers.collector", "tests.servers.judge", "tests.servers.otlp", "tests.servers.phoenix"]


@pytest.fixture(autouse=True)
def fresh_repeat_filter() -> None:
    """ragtrace's loggers drop a line repeated within 20 s (`ragtrace._logs`): a test that expects a line
    must not lose it to another test that logged the same one a moment before."""
    from ragtrace._logs import REPEATS

    REPEATS.forget()


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
