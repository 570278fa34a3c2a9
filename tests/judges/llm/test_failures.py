"""Failure classification: what each error a client raises means for the judge."""

from __future__ import annotations

import email.utils
import os
from datetime import UTC, datetime, timedelta

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
import pytest

from ragtrace.judges.llm.failures import MAX_BACKOFF, Failure, Scrubber, backoff, classify, retry_after
from tests.judges.llm.fakes import StatusError


def test_a_timeout_is_a_timeout_whatever_else_it_says() -> None:
    assert classify(TimeoutError(), format_requested=True) is Failure.TIMEOUT
    exc = litellm.Timeout(message="response_format timed out", model="m", llm_provider="openai")
    assert classify(exc, format_requested=True) is Failure.TIMEOUT


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (500, "Unrecognized response_format.type"),
        (400, "response_format type must be one of json_object, json_schema"),
        (400, "guided decoding with this JSON schema is not supported"),
        (422, "invalid schema"),
    ],
)
def test_a_refusal_of_the_structured_output_is_a_format_refusal(status: int, message: str) -> None:
    assert classify(StatusError(status, message), format_requested=True) is Failure.FORMAT_REFUSED


def test_a_format_refusal_needs_a_format_in_the_request() -> None:
    """Plain text asked for no format: a 500 naming one is an outage, retried, not a step down."""
    assert classify(StatusError(500, "response_format broke"), format_requested=False) is Failure.UNAVAILABLE


@pytest.mark.parametrize("status", [401, 403, 404, 408, 429])
def test_statuses_that_are_never_about_the_format(status: int) -> None:
    assert classify(StatusError(status, "json_schema"), format_requested=True) is not Failure.FORMAT_REFUSED


@pytest.mark.parametrize(
    ("exc", "failure"),
    [
        (StatusError(401, "no"), Failure.AUTH),
        (StatusError(403, "no"), Failure.AUTH),
        (StatusError(500, "Incorrect API key provided"), Failure.AUTH),
        (ValueError("The api_key client option must be set"), Failure.AUTH),
        (StatusError(429, "slow down"), Failure.RATE_LIMITED),
        (StatusError(503, "overloaded"), Failure.UNAVAILABLE),
        (StatusError(408, "request timeout"), Failure.UNAVAILABLE),
        (litellm.APIConnectionError(message="refused", llm_provider="openai", model="m"), Failure.UNAVAILABLE),
        (StatusError(404, "no such model"), Failure.OTHER),
        (StatusError(400, "bad temperature"), Failure.OTHER),
        (ValueError("the server's reply holds no answer (no choices)"), Failure.OTHER),
    ],
)
def test_each_failure_is_classified(exc: BaseException, failure: Failure) -> None:
    assert classify(exc, format_requested=True) is failure
    assert failure.retryable == (failure in (Failure.RATE_LIMITED, Failure.UNAVAILABLE))


def test_a_400_that_names_the_key_is_not_an_auth_failure() -> None:
    """Only a 401/403, a client's own auth error, or a status-less or 5xx error naming the key is one."""
    assert classify(StatusError(400, "api_key field is deprecated"), format_requested=False) is Failure.OTHER


def test_retry_after_reads_milliseconds_seconds_and_dates() -> None:
    assert retry_after(StatusError(429, "x", {"retry-after-ms": "1500"})) == 1.5
    assert retry_after(StatusError(429, "x", {"retry-after": "3"})) == 3.0
    when = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    asked = retry_after(StatusError(429, "x", {"retry-after": when}))
    assert asked is not None and 25 <= asked <= 30
    assert retry_after(StatusError(429, "x", {"retry-after": "soon"})) is None
    assert retry_after(StatusError(429, "x")) is None
    assert retry_after(StatusError(429, "x", {"retry-after": "-5"})) == 0.0


def test_backoff_follows_the_server_else_grows_with_jitter_under_a_ceiling() -> None:
    assert backoff(5, 2.0, 0.5) == 2.0
    assert backoff(0, 1000.0, 0.5) == MAX_BACKOFF
    for attempt in range(4):
        assert 0.5 * 2**attempt / 2 <= backoff(attempt, None, 0.5) <= 0.5 * 2**attempt
    assert backoff(30, None, 0.5) <= MAX_BACKOFF


def test_the_scrubber_hides_configured_secrets_and_shortens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_PROVIDER_TOKEN", "tok-from-the-environment")
    scrub = Scrubber("sk-configured-key", {"extra_headers": {"X-Custom": "header-secret-value"}})
    exc = StatusError(401, "bad sk-configured-key / tok-from-the-environment / header-secret-value " + "x" * 400)
    text = scrub(exc)
    assert "sk-configured-key" not in text and "tok-from-the-environment" not in text
    assert "header-secret-value" not in text and text.count("[SECRET]") == 3
    assert len(text) <= 300 and text.endswith("...")
