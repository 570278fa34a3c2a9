"""What a failed judge call means, and what to do about it.

`classify` sorts an exception from the transport into one `Failure`: a timeout, a refusal of the
structured-output request (step down a mode), refused credentials (no retry helps), a rate limit or an
outage (retry with backoff), or anything else (give up). `retry_after` reads how long the server asked
us to wait, `backoff` how long to wait, and `Scrubber` keeps configured secrets out of error texts.
"""

from __future__ import annotations

import email.utils
import enum
import os
import random
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp

from ragtrace.judges.llm.transport import load_litellm

MAX_BACKOFF = 60.0
AUTH_HINT = (
    "set the provider's API key in the environment (for example OPENAI_API_KEY or ANTHROPIC_API_KEY), "
    "or pass api_key= to the judge"
)

# What servers say when they refuse the structured-output request, whatever the status: llama-cpp-python
# answers 500 naming `response_format.type`, llama.cpp's server 500/400 ("response_format type must
# be ..."), vLLM 400 ("... JSON schema ... not supported ..."), Ollama 400/500 about the format's schema.
_FORMAT_WORDS = (
    "response_format", "response format", "json_schema", "json schema", "json_object", "structured output",
    "grammar", "guided",
)
# Statuses that are never about the request's format: auth, routing, rate, timeout.
_NOT_FORMAT = frozenset({401, 403, 404, 408, 429})
# How providers and their clients word a missing or refused credential (litellm reports some of them as
# InternalServerError, OpenAI's client raises before sending when no key is set).
_AUTH_WORDS = re.compile(
    r"api[ _-]?key|credential|unauthori[sz]ed|authenticat|permission denied|forbidden|access denied",
    re.IGNORECASE,
)
_SECRET_NAME = re.compile(r"key|token|secret|password|auth", re.IGNORECASE)


class Failure(enum.Enum):
    TIMEOUT = "timeout"  # the call ran past its timeout
    FORMAT_REFUSED = "format_refused"  # the endpoint refused the structured-output request
    AUTH = "auth"  # credentials refused or missing
    RATE_LIMITED = "rate_limited"  # 429: retry after a wait
    UNAVAILABLE = "unavailable"  # 5xx, 408 or no connection: retry after a wait
    OTHER = "other"  # anything else: no retry can help

    @property
    def retryable(self) -> bool:
        return self in (Failure.RATE_LIMITED, Failure.UNAVAILABLE)


def classify(exc: BaseException, *, format_requested: bool) -> Failure:
    """What `exc` means. A format refusal is only one when the call asked for a structured output."""
    litellm = load_litellm()
    errors = litellm.exceptions  # litellm's top level exports PermissionDeniedError only from about 1.7x on
    if isinstance(exc, TimeoutError | errors.Timeout):
        return Failure.TIMEOUT
    status = getattr(exc, "status_code", None)
    if format_requested and _rejects_format(exc, status):
        return Failure.FORMAT_REFUSED
    if _auth_failure(exc, status, errors):
        return Failure.AUTH
    if status == 429:
        return Failure.RATE_LIMITED
    if isinstance(exc, errors.APIConnectionError | aiohttp.ClientConnectionError | aiohttp.ClientPayloadError):
        return Failure.UNAVAILABLE
    if status is not None and (status >= 500 or status == 408):
        return Failure.UNAVAILABLE
    return Failure.OTHER


def _rejects_format(exc: BaseException, status: int | None) -> bool:
    """A 4xx/5xx whose message is about the structured-output request (not an outage: that names none)."""
    if status is None or not 400 <= status < 600 or status in _NOT_FORMAT:
        return False
    text = str(exc).lower()
    return any(word in text for word in _FORMAT_WORDS) or (status in (400, 422) and "schema" in text)


def _auth_failure(exc: BaseException, status: int | None, errors: Any) -> bool:
    if isinstance(exc, errors.AuthenticationError | errors.PermissionDeniedError) or status in (401, 403):
        return True
    # A missing key is often reported without a status (raised before sending) or as a 500 by a proxy.
    return (status is None or status >= 500) and bool(_AUTH_WORDS.search(str(exc)))


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (Retry-After / retry-after-ms), when it said so."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or getattr(
        exc, "litellm_response_headers", None
    )
    if not headers:
        return None
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return max(0.0, float(ms) / 1000.0)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, (when - datetime.now(UTC)).total_seconds())
    except (TypeError, ValueError, AttributeError):
        return None


def backoff(attempt: int, asked: float | None, base: float) -> float:
    """Seconds before retry `attempt` (from 0): what the server asked, else jittered exponential."""
    if asked is not None:
        return min(asked, MAX_BACKOFF)
    ceiling = min(MAX_BACKOFF, base * 2**attempt)
    return random.uniform(ceiling / 2, ceiling)


def short(exc: BaseException | str, limit: int = 300) -> str:
    """An error's text on one line, at most `limit` characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Scrubber:
    """Makes an error's text safe to show: short, and without any secret the judge was configured with.
    A provider's error can echo the key it refused, and this text ends up in span attributes and logs."""

    def __init__(self, api_key: str | None, litellm_kwargs: Mapping[str, Any]) -> None:
        self._api_key = api_key
        self._kwargs = litellm_kwargs

    def __call__(self, exc: BaseException) -> str:
        text = short(exc)
        for secret in self._secrets():
            text = text.replace(secret, "[SECRET]")
        return text

    def _secrets(self) -> list[str]:
        found = [self._api_key] if self._api_key else []
        # litellm takes keys from the environment too (OPENAI_API_KEY, AZURE_API_KEY, ...).
        found += [value for name, value in os.environ.items() if _SECRET_NAME.search(name) and len(value) >= 8]
        for name, value in self._kwargs.items():
            if isinstance(value, dict):  # extra_headers / headers: every value may be a credential
                found += [v for v in value.values() if isinstance(v, str)]
            elif isinstance(value, str) and _SECRET_NAME.search(name):
                found.append(value)
        # Longest first, and only values long enough not to blank ordinary words out of the message.
        return sorted({s for s in found if len(s) >= 6}, key=len, reverse=True)
