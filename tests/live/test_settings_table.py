"""One settings table: `RagtraceSettings`' rows give every consumer its names, defaults and help, and the
docs list every row as the table renders it."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re
from pathlib import Path

import pytest

import ragtrace
from ragtrace.cli.main import build_parser
from ragtrace.cli.options import UsageError, llm_judge_options
from ragtrace.live.enrich import SCOPE
from ragtrace.live.options import ScoringOptions
from ragtrace.live.scoring_process.protocol import ChildSettings
from ragtrace.live.settings import DEFAULTS, RagtraceSettings, default_worker
from ragtrace.live.settings_rows import SERVE_FLAGS, markdown_table, setting_rows
from tests.live.fakes import ScriptedJudge

DOCS = Path(__file__).parents[2] / "docs" / "configuration.md"


def test_docs_list_every_row_as_the_table_renders_it() -> None:
    text = DOCS.read_text()
    block = re.search(r"do not edit by hand -->\n(.*?)<!-- end of settings-table -->", text, re.S)
    assert block is not None, "docs/configuration.md lost its generated settings table"
    assert block.group(1) == markdown_table(), "regenerate: python -m ragtrace.live.settings_rows"
    for row in setting_rows():
        assert f"`{row.variable}`" in block.group(1) and row.help


def test_scoring_options_take_the_tables_defaults() -> None:
    options = ScoringOptions(judge=ScriptedJudge())
    shared = [f.name for f in dataclasses.fields(ScoringOptions) if f.name in RagtraceSettings.model_fields]
    assert len(shared) >= 9
    for name in shared:
        if name not in ("judge", "worker", "scorers"):  # required; default_worker's; objects vs names
            assert getattr(options, name) == getattr(DEFAULTS, name), name
    assert [s.name for s in options.scorers or ()] == list(DEFAULTS.scorers)
    assert options.sampler.rate == DEFAULTS.sample_rate
    assert options.capture_rules == DEFAULTS.capture_rules()


def test_the_childs_settings_are_the_scoring_options_less_what_stays_in_the_app() -> None:
    options = ScoringOptions(judge=ScriptedJudge(), max_queue=7, worker="process", reason_max_chars=9)
    child = ChildSettings.of(options)
    assert isinstance(child, ScoringOptions)
    assert (child.max_queue, child.reason_max_chars, child.judge) == (7, 9, options.judge)
    assert child.metrics is None and child.decision_log is None and child.record_metrics is False


@pytest.mark.parametrize(
    ("mode", "built_by", "worker"),
    [("enrich", "install", "process"), ("link", "install", "thread"), ("enrich", "gateway", "thread"),
     ("enrich", "hand", "thread")],
)
def test_one_rule_for_the_worker_nobody_chose(mode: str, built_by: str, worker: str) -> None:
    assert default_worker(mode, built_by) == worker  # type: ignore[arg-type]
    if built_by == "hand":
        assert ScoringOptions(judge=ScriptedJudge(), mode=mode).worker == worker  # type: ignore[arg-type]


def test_a_deprecated_flag_sets_the_same_row() -> None:
    parser = build_parser()
    old = parser.parse_args(["eval", "data.jsonl", "--judge-retries", "2", "--api-base", "http://x"])
    new = parser.parse_args(["eval", "data.jsonl", "--judge-max-retries", "2", "--judge-api-base", "http://x"])
    assert llm_judge_options(old) == llm_judge_options(new) == {"max_retries": 2}
    assert old.judge_api_base == new.judge_api_base == "http://x"
    with pytest.raises(UsageError, match=r"--judge-timeout=0\.0: Input should be greater than 0"):
        llm_judge_options(parser.parse_args(["eval", "data.jsonl", "--judge-timeout", "0"]))


def test_every_serve_flag_is_a_row_spelled_as_the_table_spells_it() -> None:
    serve = build_parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    flags = {opt for action in serve._actions for opt in action.option_strings}
    for row in setting_rows():
        assert (row.flag in flags) == (row.name in SERVE_FLAGS), row.name


def test_the_version_is_written_once() -> None:
    assert SCOPE.version == ragtrace.__version__ == importlib.metadata.version("ragtrace")
    version = re.compile("[\"']" + re.escape(ragtrace.__version__) + "[\"']")
    package = Path(ragtrace.__file__).parent
    assert [p.name for p in package.rglob("*.py") if version.search(p.read_text())] == ["_version.py"]
