"""The settings table (`RagtraceSettings`) read row by row: the command line's flags and the table in
docs/configuration.md are made from it, so that a setting's name, variable, flag, default and help are
written once. `python -m ragtrace.live.settings_rows` prints that table.
"""

from __future__ import annotations

import argparse
import inspect
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic.fields import FieldInfo

from ragtrace.live.settings import LLM_JUDGE_KEYWORDS, RagtraceSettings, as_flag, as_keyword, as_variable

# Earlier spellings of a row's flag, still accepted (deprecated; docs/configuration.md lists them).
DEPRECATED_FLAGS: dict[str, tuple[str, ...]] = {
    "judge_max_retries": ("--judge-retries",),
    "judge_api_base": ("--api-base",),
}
# The rows each command takes as flags: `serve` (the gateway) and the offline runs (`eval`, `replay`).
SERVE_FLAGS = (
    "judge", "judge_api_base", *LLM_JUDGE_KEYWORDS, "sample_rate", "mode", "target", "scorers", "concurrency",
    "score_deadline", "max_trace_wait", "max_queue", "max_held_spans", "max_open_traces",
)
RUN_FLAGS = ("judge_api_base", *LLM_JUDGE_KEYWORDS)


@dataclass(frozen=True)
class SettingRow:
    """One setting, each way it is spelled."""

    name: str
    default: Any
    help: str
    choices: tuple[str, ...] | None  # a Literal's values
    kind: type  # what argparse converts a flag's text to

    @property
    def keyword(self) -> str:
        return as_keyword(self.name)

    @property
    def variable(self) -> str:
        return as_variable(self.name)

    @property
    def flag(self) -> str:
        return as_flag(self.name)

    @property
    def deprecated_flags(self) -> tuple[str, ...]:
        return DEPRECATED_FLAGS.get(self.name, ())

    @property
    def commands(self) -> tuple[str, ...]:
        """The subcommands that take this row as a flag."""
        serve = ("serve",) if self.name in SERVE_FLAGS else ()
        return (*serve, *(("eval", "replay") if self.name in RUN_FLAGS else ()))

    @property
    def shown_default(self) -> str:
        """The default as a reader writes it; an unset judge_* row shows LLMJudge's own default."""
        value = self.default
        if value is None and self.name in LLM_JUDGE_KEYWORDS:
            value = _llm_judge_default(LLM_JUDGE_KEYWORDS[self.name])
        if value is None:
            return "unset"
        if isinstance(value, tuple):
            return ",".join(value) if value else "none"
        if isinstance(value, bool):
            return str(value).lower()
        return str(value).encode("unicode_escape").decode()


def _llm_judge_default(keyword: str) -> Any:
    from ragtrace.judges.llm import LLMJudge

    return inspect.signature(LLMJudge.__init__).parameters[keyword].default


def _row(name: str, field: FieldInfo) -> SettingRow:
    annotation: Any = field.annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    choices = tuple(typing.get_args(annotation)) if typing.get_origin(annotation) is typing.Literal else None
    kind = annotation if annotation in (int, float) else str
    return SettingRow(name, field.default, field.description or "", choices, kind)


def setting_rows() -> list[SettingRow]:
    """Every row of the table, in its order."""
    return [_row(name, field) for name, field in RagtraceSettings.model_fields.items()]


def setting_row(name: str) -> SettingRow:
    return _row(name, RagtraceSettings.model_fields[name])


def add_setting_flags(group: argparse._ArgumentGroup, names: Iterable[str], *, env: bool) -> None:
    """A flag for each named row (dest = the row's name, default None: not given), its help the row's;
    `env`: the command reads the row's variable when the flag is not given (`serve`)."""
    for name in names:
        row = setting_row(name)
        default = f"{row.variable}, else {row.shown_default}" if env else row.shown_default
        aliases = f"; {', '.join(row.deprecated_flags)} is a deprecated spelling" if row.deprecated_flags else ""
        group.add_argument(
            row.flag, *row.deprecated_flags, dest=row.name, type=row.kind, choices=row.choices, default=None,
            help=f"{row.help} (default {default}{aliases})".replace("%", "%%"),
        )


def markdown_table() -> str:
    """The rows as the Markdown table of docs/configuration.md."""
    lines = [
        "| `install()` keyword | variable | flag (commands) | default | what it does |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in setting_rows():
        flag = ""
        if row.commands:
            spellings = [f"`{row.flag}`", *(f"`{f}` (deprecated)" for f in row.deprecated_flags)]
            flag = f"{', '.join(spellings)} ({', '.join(row.commands)})"
        help_text = row.help.replace("|", "\\|")
        lines.append(f"| `{row.keyword}` | `{row.variable}` | {flag} | `{row.shown_default}` | {help_text} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
