"""The field reads agree with the SDK's properties, on its own spans and on a subclass that takes the slow path."""

from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from ragtrace._sdk import SDK_SPAN, is_local_root


class OwnSpan(ReadableSpan):
    """Not the SDK's exact type: read through its properties."""


def test_the_sdk_span_takes_the_field_path() -> None:
    assert SDK_SPAN is ReadableSpan


@pytest.mark.parametrize("kind", [ReadableSpan, OwnSpan])
@pytest.mark.parametrize(
    ("parent", "root"),
    [
        (None, True),
        (SpanContext(0xABC, 0x1, is_remote=True, trace_flags=TraceFlags(1)), True),
        (SpanContext(0xABC, 0x1, is_remote=False, trace_flags=TraceFlags(1)), False),
    ],
)
def test_is_local_root(kind: type[ReadableSpan], parent: SpanContext | None, root: bool) -> None:
    span = kind(name="s", context=SpanContext(0xABC, 0x2, is_remote=False), parent=parent)
    assert is_local_root(span) is root


def test_no_provider_means_nowhere_until_the_app_sets_one() -> None:
    """The API's proxies go nowhere until a global provider is set, then to its real instrument or logger;
    a no-op provider's go nowhere; an SDK provider's go somewhere."""
    code = """
from opentelemetry import _logs, metrics
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from ragtrace._sdk import emits_anywhere, records_anywhere
histogram = metrics.get_meter_provider().get_meter("t").create_histogram("h")
logger = _logs.get_logger_provider().get_logger("t")
seen = [records_anywhere(histogram), emits_anywhere(logger),
        records_anywhere(metrics.NoOpMeterProvider().get_meter("t").create_counter("c")),
        emits_anywhere(_logs.NoOpLoggerProvider().get_logger("t"))]
metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
_logs.set_logger_provider(LoggerProvider())
seen += [records_anywhere(histogram), emits_anywhere(logger)]
print(seen)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[False, False, False, False, True, True]"
