"""One judge-spec check behind every entry point: a misspelt judge is refused at setup with the closest
valid spelling, from Python, from a variable and from every CLI command, never at the first judge call."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

import ragtrace
from ragtrace.cli.main import main
from ragtrace.judges import JudgeSpecError, check_judge_spec
from ragtrace.live.settings import RagtraceSettings, SettingsError

SAMPLE = {"query": "q?", "contexts": ["Paris is in France."], "response": "Paris."}


@pytest.mark.parametrize(
    ("spec", "suggestion"),
    [("locl", "local"), ("locale", "local"), ("lokal", "local"), ("opneai/gpt-4o-mini", "openai/gpt-4o-mini"),
     ("gpt-4o-minii", "gpt-4o-mini")],
)
def test_the_check_offers_the_closest_valid_spelling(spec: str, suggestion: str) -> None:
    with pytest.raises(JudgeSpecError, match=f"Did you mean '{suggestion}'\\?"):
        check_judge_spec(spec)


@pytest.mark.parametrize("spec", ["local", "local/minilm", "openai/gpt-4o-mini", "anthropic/claude-3-5-haiku-20241022",
                                  "hosted_vllm/any-model-name", " local "])
def test_specs_that_name_a_judge_pass(spec: str) -> None:
    check_judge_spec(spec)


PYTHON_ENTRY_POINTS: dict[str, Callable[[str], object]] = {
    "install": lambda spec: ragtrace.install(TracerProvider(), judge=spec),
    "install settings": lambda spec: ragtrace.install(TracerProvider(), settings=RagtraceSettings(), judge=spec),
    "scoring_batch_processor": lambda spec: ragtrace.scoring_batch_processor(judge=spec),
    "evaluate": lambda spec: ragtrace.evaluate([SAMPLE], judge=spec),
    "factory": lambda spec: ragtrace.create_context_recall_scorer(model=spec, options={"context": ["c"]}),
}


@pytest.mark.parametrize("entry", sorted(PYTHON_ENTRY_POINTS))
def test_every_python_entry_point_refuses_a_misspelt_judge(entry: str) -> None:
    with pytest.raises(ValueError, match=r"judge 'locl'.*Did you mean 'local'\?"):
        PYTHON_ENTRY_POINTS[entry]("locl")


def test_the_variable_is_refused_with_its_name() -> None:
    with pytest.raises(SettingsError, match=r"RAGTRACE_JUDGE='locl': .*Did you mean 'local'\?"):
        RagtraceSettings.from_env({"RAGTRACE_JUDGE": "locl"})


def test_install_from_the_variable_refuses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGTRACE_JUDGE", "locale")
    with pytest.raises(SettingsError, match=r"RAGTRACE_JUDGE='locale'.*Did you mean 'local'\?"):
        ragtrace.install(TracerProvider())


def _export(tmp_path: Path) -> Path:
    path = tmp_path / "traces.json"
    path.write_text(json.dumps({"resourceSpans": []}) + "\n")
    return path


def _dataset(tmp_path: Path) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(SAMPLE) + "\n")
    return path


@pytest.mark.parametrize("command", ["eval", "replay", "demo", "serve"])
def test_every_command_refuses_a_misspelt_judge(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = {
        "eval": ["eval", str(_dataset(tmp_path)), "--judge", "locl"],
        "replay": ["replay", str(_export(tmp_path)), "--judge", "locl"],
        "demo": ["demo", "--judge", "locl"],
        "serve": ["serve", "--judge", "locl", "--grpc-port", "0", "--http-port", "0"],
    }[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "'locl'" in err and "Did you mean 'local'?" in err, err
    assert "Traceback" not in err and "pydantic.dev" not in err
