"""Shortened texts and numbers for people (CLI tables, CI logs, the HTML report)."""

import pytest

from ragtrace._text import format_number, shorten


def test_shorten_puts_text_on_one_line_and_cuts_with_an_ellipsis() -> None:
    assert shorten("a\n b\t c", 10) == "a b c"
    assert shorten("abcdefghij", 5) == "abcd…"
    assert len(shorten("x" * 100, 20)) == 20


@pytest.mark.parametrize(
    ("value", "options", "text"),
    [(0.5, {}, "0.500"), (-0.25, {"signed": True}, "-0.250"), (0.25, {"signed": True}, "+0.250"),
     (0.456, {"pct": True}, "46%"), (None, {}, "-"), (None, {"missing": "–"}, "–")],
)
def test_format_number(value: float | None, options: dict[str, object], text: str) -> None:
    assert format_number(value, **options) == text  # type: ignore[arg-type]


def test_shorten_at_a_word_never_cuts_inside_one() -> None:
    """Issue 30, item 11: the demo's why column stopped at 60 characters mid-word."""
    from ragtrace._text import shorten

    reason = "2 of 5 contexts useful; first useful at rank 3 (useful at ranks 3, 5); the answer leans on context 3"
    cut = shorten(reason, 60, at_word=True)
    assert len(cut) <= 60 and cut.endswith("…")
    assert reason.startswith(cut[:-1]) and reason[len(cut) - 1] == " "  # the next character was a space
    assert shorten(reason, 60) == reason[:59] + "…"  # the default keeps its old cut
    assert shorten("short", 60, at_word=True) == "short"
