"""The scoring gateway (`ragtrace serve`): OTLP in -> the live scoring pipeline -> OTLP out.

receivers.py decodes OTLP/gRPC and OTLP/HTTP (listening.py binds them), settling.py holds trace roots so late
children join their trace, next_hop.py builds the exporting processor and reports what the next hop accepted,
room.py keeps requests within its queue, spool.py keeps acknowledged spans on disk until then (`--spool-dir`;
recovery.py replays and resends them), server.py composes them around the scoring processor. Decoding OTLP
itself is `ragtrace.otlp`'s.
"""

from ragtrace.gateway.next_hop import otlp_exporting
from ragtrace.gateway.server import Gateway, request_of
from ragtrace.gateway.settling import RootSettler

__all__ = ["Gateway", "RootSettler", "otlp_exporting", "request_of"]
