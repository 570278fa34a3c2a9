"""Redaction: a table of what must and must not be redacted, properties, the hook failing closed."""

from __future__ import annotations

import logging
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ragtrace.live.redaction import CARD, EMAIL, FAILED, IBAN, PHONE, REDACTED, SECRET, SSN, Redactor
from ragtrace.scoring import Document, RagSample

R = Redactor()

POSITIVE = [
    # e-mail
    ("write to john.doe+rag@example.co.uk today", f"write to {EMAIL} today"),
    ("<a.b_c%d@sub-domain.example.org>", f"<{EMAIL}>"),
    # phones
    ("call +1 (555) 123-4567 now", f"call {PHONE} now"),
    ("call +44 20 7946 0958", f"call {PHONE}"),
    ("tel: +33612345678", f"tel: {PHONE}"),
    ("(555) 123-4567", PHONE),
    ("555-123-4567 or 555.123.4567", f"{PHONE} or {PHONE}"),
    ("1-800-555-1234", PHONE),
    ("020 7946 0958", PHONE),
    ("06 12 34 56 78", PHONE),
    # cards (Luhn-valid test numbers)
    ("visa 4111 1111 1111 1111.", f"visa {CARD}."),
    ("4111-1111-1111-1111", CARD),
    ("mc 5555555555554444 exp 12/29", f"mc {CARD} exp 12/29"),
    ("amex 3782 822463 10005", f"amex {CARD}"),
    ("amex 378282246310005", f"amex {CARD}"),
    # secrets
    ("OPENAI_API_KEY sk-proj-abc123DEF456ghi789JKL012mno", f"OPENAI_API_KEY {SECRET}"),
    ("sk-ant-api03-AbCdEf0123456789GhIjKl", SECRET),
    ("aws AKIAIOSFODNN7EXAMPLE", f"aws {SECRET}"),
    ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", SECRET),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnop", SECRET),
    ("xoxb-123456789012-abcdefghijkl", SECRET),
    ("Authorization: Bearer abc.DEF-123_456~789+xyz/=", f"Authorization: Bearer {SECRET}"),
    ("bearer QWxhZGRpbjpvcGVuIHNlc2FtZQQWxhZGRpbjpv", f"bearer {SECRET}"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abcDEF123456", f"jwt {SECRET}"),
    ("url?api_key=9f8e7d6c5b4a39281706f5e4d3c2b1a0&x=1", f"url?api_key={SECRET}&x=1"),
    ("token=ZXhhbXBsZS10b2tlbi12YWx1ZQ==", f"token={SECRET}"),
    ('"secret": "Ab1Cd2Ef3Gh4Ij5Kl6Mn7"', f'"secret": "{SECRET}"'),
    ("x-api-key: 7fA9kQ2mZ8pL4vN1xR6t", f"x-api-key: {SECRET}"),
    ("password=hunter2 ok", f"password={SECRET} ok"),
    ("PWD: 1234", f"PWD: {SECRET}"),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAK\n-----END RSA PRIVATE KEY-----\nrest",
        f"{SECRET}\nrest",
    ),
]

NEGATIVE = [
    "order 12345678901234 shipped",  # not Luhn-valid
    "4111111111111112",  # Luhn-invalid
    "1234567812345670",  # Luhn-valid but no issuer starts with 1
    "on 2024-01-15 at 10:30",
    "ip 192.168.100.200",
    "version 1.2.3 and 10.20.30.40.50",
    "pi is 3.14159265358979",
    "ISBN 978-3-16-148410-0",
    "page 12, line 345",
    "year 2024 and 1999",
    "555-1234",  # too short to tell from other numbers
    "10 20 30 40 50",
    "The bearer of bad news.",
    "The key: understanding the domain.",
    "monkey=bananas1234567890ABCdef",
    "token=short",
    "secret: abcdefghijklmnopqrstuvwxyz",  # a word, not a credential
    "scikit sk-learn-is-a-library-for-ml",
    "see task-abcdefghijklmnop1234567890",
    "email at example dot com",
    "user@localhost",
    "a tensor of shape 1024 x 768",
    # near misses of the SSN, IBAN, AWS and bare-phone rules: years, prices, order numbers, ids survive
    "000-12-3456 and 666-12-3456 and 912-34-5678",  # never issued
    "123-00-4567 and 123-45-0000",
    "part 123-45-6789-01",
    "dates 2024-01-15 and 2023-12-31",
    "DE89 3704 0044 0532 0130 01",  # check digits wrong
    "GB82WEST12345698765433",
    "ABCD1234EFGH5678",  # shape of nothing
    "commit 3f786850e387550fdab836ed7e6dc881de23001b",  # SHA-1, lower case
    "SHA 3F786850E387550FDAB836ED7E6DC881DE23001B",  # SHA-1, upper case
    "getUserAccountSettingsFromDatabaseById42",  # a camelCase name of 40 characters
    "docs/getting-started/installation/python",
    "order 4829301746 shipped",
    "invoice #4829301746",
    "order no. 7182930456",
    "tracking id: 9405511899",
    "total $4829301746 and 4829301746.50",
    "unix time 1733058000",  # area code cannot start with 1
    "ref 0123456789",
    "prices 19.99, 1,299.00 and 2024",
    "",
]


@pytest.mark.parametrize(("text", "expected"), POSITIVE)
def test_redacted(text: str, expected: str) -> None:
    assert R.redact_text(text) == expected


@pytest.mark.parametrize("text", NEGATIVE)
def test_left_alone(text: str) -> None:
    assert R.redact_text(text) == text


# -- properties ----------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises_and_is_idempotent(text: str) -> None:
    once = R.redact_text(text)
    assert isinstance(once, str)
    assert R.redact_text(once) == once


digits_and_separators = st.text(alphabet="0123456789 -+.()/:=@abcxyzKEY_", max_size=80)


@settings(max_examples=300, deadline=None)
@given(digits_and_separators)
def test_idempotent_on_number_soup(text: str) -> None:
    once = R.redact_text(text)
    assert R.redact_text(once) == once


def luhn_complete(prefix: str) -> str:
    for check in "0123456789":
        digits = prefix + check
        total = 0
        for i, ch in enumerate(reversed(digits)):
            d = int(ch) * (2 if i % 2 else 1)
            total += d - 9 if d > 9 else d
        if total % 10 == 0:
            return digits
    raise AssertionError("unreachable")


words = st.text(alphabet="abcdefghij ,.", max_size=20).map(lambda s: f" {s} ")


@settings(max_examples=60)
@given(st.from_regex(r"4[0-9]{14}", fullmatch=True), words, words)
def test_any_valid_visa_number_is_redacted(prefix: str, before: str, after: str) -> None:
    number = luhn_complete(prefix)
    out = R.redact_text(before + number + after)
    assert number not in out and CARD in out


local = st.from_regex(r"[a-z0-9][a-z0-9._+]{0,15}", fullmatch=True)
domain = st.from_regex(r"[a-z0-9]{1,10}(\.[a-z0-9]{1,10}){0,2}\.[a-z]{2,6}", fullmatch=True)


@settings(max_examples=60)
@given(local, domain, words, words)
def test_any_plain_email_is_redacted(user: str, host: str, before: str, after: str) -> None:
    address = f"{user}@{host}"
    out = R.redact_text(before + address + after)
    assert address not in out and EMAIL in out


# -- hook, user patterns, samples ---------------------------------------------------------------------


def test_hook_runs_after_builtins() -> None:
    seen: list[str] = []

    def hook(text: str) -> str:
        seen.append(text)
        return text.replace("Acme", "[ORG]")

    redactor = Redactor(hook)
    assert redactor.redact_text("Acme: ops@acme.io") == f"[ORG]: {EMAIL}"
    assert seen == [f"Acme: {EMAIL}"]


def test_failing_hook_fails_closed_and_logs_without_the_text(caplog: pytest.LogCaptureFixture) -> None:
    def hook(text: str) -> str:
        raise ValueError(f"cannot handle {text}")

    redactor = Redactor(hook)
    with caplog.at_level(logging.DEBUG, logger="ragtrace.live.redaction"):
        assert redactor.redact_text("the patient John Smith") == FAILED
        assert redactor.redact_text("another secret thing") == FAILED
    assert redactor.failures == 2
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "ValueError" in errors[0].getMessage()
    assert not any("John" in r.getMessage() or r.exc_info for r in caplog.records)


def test_hook_returning_non_string_fails_closed() -> None:
    assert Redactor(lambda t: None).redact_text("x") == FAILED  # type: ignore[arg-type,return-value]
    assert Redactor().redact_text(None) == FAILED  # type: ignore[arg-type]


def test_user_patterns_and_builtin_off() -> None:
    employee = re.compile(r"\bEMP-\d{5}\b")
    both = Redactor(patterns=[employee])
    assert both.redact_text("EMP-12345 a@b.co") == f"{REDACTED} {EMAIL}"
    only = Redactor(builtin=False, patterns=[employee])
    assert only.redact_text("EMP-12345 a@b.co") == f"{REDACTED} a@b.co"
    assert Redactor(builtin=False).redact_text("a@b.co") == "a@b.co"
    assert Redactor(builtin=False, patterns=[re.compile(r"x*")]).redact_text("axxb") == f"a{REDACTED}b"


def test_redact_sample() -> None:
    sample = RagSample(
        query="my card is 4111 1111 1111 1111, mail me at a@b.co",
        contexts=[Document(content="call 555-123-4567", id="doc-1", score=0.9), "key sk-abc123def456ghi789jkl012"],
        response="Sure, a@b.co",
        ground_truth="password=hunter2",
        metadata={"retriever": "kb"},
    )
    out = Redactor().redact_sample(sample)
    assert out.query == f"my card is {CARD}, mail me at {EMAIL}"
    assert out.context_texts == [f"call {PHONE}", f"key {SECRET}"]
    assert out.contexts[0].id == "doc-1" and out.contexts[0].score == 0.9
    assert out.response == f"Sure, {EMAIL}"
    assert out.ground_truth == f"password={SECRET}"
    assert out.metadata == {"retriever": "kb"}
    assert sample.query.startswith("my card is 4111")  # the input is untouched
    assert Redactor().redact_sample(RagSample(query="q")).ground_truth is None


def test_sample_with_failing_hook_withholds_every_field() -> None:
    def hook(text: str) -> str:
        raise RuntimeError

    out = Redactor(hook).redact_sample(RagSample(query="q", contexts=["c"], response="r", ground_truth="g"))
    assert (out.query, out.context_texts, out.response, out.ground_truth) == (FAILED, [FAILED], FAILED, FAILED)


def with_iban_check_digits(country: str, bban: str) -> str:
    """ISO 13616: check digits that make the rearranged number 1 mod 97."""
    number = int("".join(str(int(c, 36)) for c in bban + country + "00"))
    return f"{country}{98 - number % 97:02d}{bban}"


@settings(max_examples=100, deadline=None)
@given(
    st.from_regex(r"[A-Z]{2}", fullmatch=True), st.from_regex(r"[0-9A-Z]{12,26}", fullmatch=True),
    st.booleans(), words, words,
)
@example("AA", "0000000000080", False, " ", " ")  # its digits pass Luhn: once redacted as a card
def test_any_checksummed_iban_is_redacted(country: str, bban: str, grouped: bool, before: str, after: str) -> None:
    iban = with_iban_check_digits(country, bban)
    text = " ".join(iban[i : i + 4] for i in range(0, len(iban), 4)) if grouped else iban
    assert R.redact_text(before + text + after) == before + IBAN + after


@settings(max_examples=100, deadline=None)
@given(st.from_regex(r"[1-8][0-9]{2}", fullmatch=True), st.integers(1, 99), st.integers(1, 9999),
       st.sampled_from(["-", " "]), words, words)
def test_any_issuable_ssn_is_redacted(area: str, group: int, serial: int, sep: str, before: str, after: str) -> None:
    if area == "666":
        return
    ssn = f"{area}{sep}{group:02d}{sep}{serial:04d}"
    assert R.redact_text(before + ssn + after) == before + SSN + after


def _scanned_everywhere(text: str) -> str:
    """The built-in rules as they read: every pattern run on every text, without its leading lookahead."""
    from ragtrace.live.redaction import _BUILTIN_RULES, _MAX_PASSES

    plain = [(re.compile(re.sub(r"^\(\?=(?:\\d|\[[^\]]*\])\)", "", r.pattern.pattern), r.pattern.flags), r.replace)
             for r in _BUILTIN_RULES]
    for _ in range(_MAX_PASSES):
        before = text
        for pattern, replace in plain:
            text = pattern.sub(replace, text)
        if text == before:
            break
    return text


# Pieces that make the rules' gates and first characters matter: secret names in odd cases (the long s and
# the Kelvin sign fold to s and k), prefixes of tokens, digits in every grouping, placeholders.
_PIECES = st.sampled_from([
    "api_key", "API-KEY", "ſecret", "\u212aey", "token", "PassWord", "pwd", "client_secret", "aws_secret_access_key",
    "Bearer", "BEARER", "bearer", "sk-", "sk-proj-", "AKIA", "ghp_", "github_pat_", "xoxb-", "AIza", "eyJ", ".eyJ",
    "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "@", "a.b", "example.com", "DE89", "GB82",
    "WEST", "1234", "5678", "4111", "000", "+44", "(212)", "555", "-", " ", ".", "=", ":", "\"", "'", "/", "+",
    "x", "Q", "9", "٣", "[SECRET]", "\n", "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789+/ab",
])


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=30).map("".join))
@example("github_pat_api_keyapi_keyapi_keyapi_keyapi_key")  # no "gh" in it: github_pat_ is a need of its own
@example("ſecret=Zx9Qw3Er5Ty7Ui1Op")
def test_gates_and_lookaheads_change_no_outcome(text: str) -> None:
    assert Redactor().redact_text(text) == _scanned_everywhere(text)
