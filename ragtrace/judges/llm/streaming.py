"""Whether a call streams: only where it buys something, since a streamed answer costs CPU per chunk.

Streaming lets a cancelled call stop the model: the server sees the connection close while it writes.
That matters for a model server of your own (Ollama, vLLM, llama.cpp: a timed-out call would otherwise
keep a GPU busy for nothing), and little for a hosted API. So `stream=None` (the judge's default) streams
when the endpoint is a local model server (a loopback or private api_base, or a provider that only runs
locally), or once a call to that endpoint has timed out in this process; `True`/`False` force it.
"""

from __future__ import annotations

import functools
import ipaddress
import threading
from urllib.parse import urlsplit

__all__ = ["LOCAL_PROVIDERS", "is_local_endpoint", "note_timeout", "streams"]

# litellm providers that are always a model server of one's own (their default api_base is localhost).
LOCAL_PROVIDERS = frozenset(
    {"ollama", "ollama_chat", "hosted_vllm", "vllm", "lm_studio", "llamafile", "xinference", "oobabooga", "triton"}
)

_TIMED_OUT: set[tuple[str, str]] = set()
_LOCK = threading.Lock()


def note_timeout(endpoint: tuple[str, str]) -> None:
    """Remember that a call to `endpoint` (api_base, model) timed out: its later calls stream."""
    with _LOCK:
        _TIMED_OUT.add(endpoint)


def streams(choice: bool | None, endpoint: tuple[str, str]) -> bool:
    """Whether a call to `endpoint` (api_base or "", model) streams, given the judge's `stream` setting."""
    if choice is not None:
        return choice
    return endpoint in _TIMED_OUT or is_local_endpoint(*endpoint)


@functools.lru_cache(maxsize=256)
def is_local_endpoint(api_base: str, model: str) -> bool:
    """A model server of one's own: a local-only provider, or an api_base on a loopback or private address."""
    provider = model.split("/", 1)[0] if "/" in model else ""
    if provider in LOCAL_PROVIDERS:
        return True
    if not api_base:
        return False
    host = urlsplit(api_base if "//" in api_base else "//" + api_base).hostname or ""
    if host == "localhost" or host.endswith(".localhost") or host.endswith(".local"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # a name: a hosted endpoint, unless it has timed out
        return False
    return address.is_loopback or address.is_private or address.is_link_local
