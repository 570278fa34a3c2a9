"""OTLP in: trace export requests (protobuf, or one OTLP/JSON document) as SDK `ReadableSpan`s.

Below both `ragtrace.gateway` (what its receivers decode) and `ragtrace.offline` (what `replay` and `explain`
read from files): neither imports the other. OTLP out (exporters, file writing) is `ragtrace.live`'s.
"""

from ragtrace.otlp.json_request import NotOtlpTraces, console_span, parse_json_line
from ragtrace.otlp.spans import any_value, attributes, spans_of

__all__ = ["NotOtlpTraces", "any_value", "attributes", "console_span", "parse_json_line", "spans_of"]
