"""The real servers the tests run against live in tests/servers/; their fixtures are registered here."""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

pytest_plugins = ["tests.servers.judge", "tests.servers.otlp"]
