"""The real servers the tests run against live in tests/servers/; their fixtures are registered here."""

import os

from hypothesis import settings

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# No example database: a run must not replay (or depend on) what an earlier run left in .hypothesis/.
settings.register_profile("ragtrace", database=None)
settings.load_profile("ragtrace")

pytest_plugins = ["tests.servers.judge", "tests.servers.otlp"]
