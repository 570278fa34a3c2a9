"""The scoring gateway (`ragtrace serve`): OTLP in -> the live scoring pipeline -> OTLP out."""

from ragtrace.gateway.server import Gateway, RootSettler, otlp_exporting, request_of

__all__ = ["Gateway", "RootSettler", "otlp_exporting", "request_of"]
