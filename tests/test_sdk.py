"""The field reads agree with the SDK's properties, on its own spans and on a subclass that takes the slow path."""

from __future__ import annotations

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
