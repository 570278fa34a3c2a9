"""One settings validator: a bad value reads the same from a variable, a `serve` flag and Python, each named
as the user wrote it, with the value and the problem, and no pydantic dump or documentation URL."""

from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry.sdk.trace import TracerProvider

import ragtrace
from ragtrace.cli.main import build_parser
from ragtrace.cli.serve import settings_of
from ragtrace.live.settings import RagtraceSettings, SettingsError


def _message(call: object) -> str:
    with pytest.raises(SettingsError) as caught:
        call()  # type: ignore[operator]
    return str(caught.value)


@pytest.mark.parametrize(
    ("field", "bad", "problem"),
    [("sample_rate", "10", "less than or equal to 1"), ("score_deadline", "-1", "greater than 0"),
     ("scorers", "context_precison", "unknown scorer"), ("max_queue", "0", "greater than or equal to 1")],
)
def test_a_bad_value_reads_the_same_from_every_source(field: str, bad: str, problem: str) -> None:
    variable = _message(lambda: RagtraceSettings.from_env({"RAGTRACE_" + field.upper(): bad}))
    flag = _message(
        lambda: settings_of(build_parser().parse_args(["serve", "--" + field.replace("_", "-"), bad]))
    )
    python = _message(lambda: ragtrace.install(TracerProvider(), **{field: bad}))
    for message, name in ((variable, "RAGTRACE_" + field.upper()), (flag, "--" + field.replace("_", "-")),
                          (python, field)):
        assert message.startswith(f"invalid ragtrace settings: {name}="), message
        assert problem in message and "pydantic.dev" not in message and "validation error" not in message
    # the same words after the name and value
    tails = {m.split(": ", 2)[2] for m in (variable, flag, python)}
    assert len(tails) == 1, tails


def test_serve_with_a_sample_rate_of_10_says_what_is_wrong() -> None:
    """Issue 30, item 13: `serve --sample-rate 10` printed a raw pydantic error ending in a URL."""
    done = subprocess.run(
        [sys.executable, "-m", "ragtrace", "serve", "--sample-rate", "10", "--grpc-port", "0", "--http-port", "0"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "ragtrace serve: invalid ragtrace settings: --sample-rate=10.0: Input should be less than or equal to 1"
    ), done.stderr
