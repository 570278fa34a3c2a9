"""How numbers and texts are shortened for people: CLI tables, CI logs, the HTML report, test failures."""

from __future__ import annotations


def shorten(text: str, width: int, *, at_word: bool = False) -> str:
    """`text` on one line (runs of whitespace become one space), cut to `width` characters with "…";
    `at_word`: at the last word boundary that keeps most of it, not inside a word."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    if at_word and (space := cut.rfind(" ")) > width // 2:
        cut = cut[:space].rstrip(",;:")
    return cut + "…"


def format_number(value: float | None, *, pct: bool = False, signed: bool = False, missing: str = "-") -> str:
    """A score to three decimals (`signed`: with its sign), or a share as a whole percentage (`pct`)."""
    if value is None:
        return missing
    if pct:
        return f"{100 * value:.0f}%"
    return f"{value:+.3f}" if signed else f"{value:.3f}"
