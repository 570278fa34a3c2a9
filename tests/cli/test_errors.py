"""Errors that say what to do: `--version`, a misspelt `--judge`, and `--json` output that stays JSON when the
judge fails (the real litellm client against the scripted server, in a subprocess so that stdout is the
process's own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ragtrace._version import __version__
from ragtrace.cli import main
from tests.offline.gold import make_rows, write_jsonl
from tests.servers.judge import Status

ROOT = Path(__file__).resolve().parents[2]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"ragtrace {__version__}"


@pytest.mark.parametrize(
    ("spec", "suggestion"),
    [("lokal", "'local'"), ("opnai/gpt-4o-mini", "'openai/gpt-4o-mini'"), ("gpt4o-mini", "'gpt-4o-mini'")],
)
def test_misspelt_judge_is_refused_before_any_item_is_scored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, suggestion: str
) -> None:
    data = write_jsonl(tmp_path / "data.jsonl", make_rows(3))
    out = tmp_path / "out.jsonl"
    code = main(["eval", str(data), "--judge", spec, "--out", str(out), "--quiet"])
    stdout, stderr = capsys.readouterr()
    assert code == 2
    assert f"--judge {spec!r}" in stderr and f"Did you mean {suggestion}?" in stderr, stderr
    assert not out.exists(), "nothing is scored (or written) with a judge that cannot exist"
    assert stdout == ""


def test_a_judge_with_no_close_spelling_is_refused_with_the_valid_forms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_jsonl(tmp_path / "data.jsonl", make_rows(1))
    assert main(["eval", str(data), "--judge", "qqqqzzzz", "--quiet"]) == 2
    stderr = capsys.readouterr().err
    assert "Did you mean" not in stderr
    assert "'local'" in stderr and "provider/model" in stderr


def test_json_stdout_is_only_json_when_the_judge_fails(tmp_path: Path, judge_server: Any) -> None:
    judge_server.default = Status(400, message="the judge refuses")  # not retried: every call fails at once
    data = write_jsonl(tmp_path / "data.jsonl", make_rows(2))
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.run(
        [sys.executable, "-m", "ragtrace", "eval", str(data), "--judge", "openai/judge-test",
         "--api-base", judge_server.url + "/v1", "--scorers", "context_precision", "--json", "--quiet"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env,
    )
    assert judge_server.requests, "the judge was called"
    summary = json.loads(proc.stdout)  # the whole of stdout: one JSON document
    assert summary["scorers"]["context_precision"]["scored"] == 0
    assert sum(summary["scorers"]["context_precision"]["errors"].values()) == 2
    assert proc.returncode == 1  # every item ended in a judge error: over --max-error-rate
    assert "context_precision" in proc.stderr  # the table went to stderr


def test_a_refused_key_is_judge_auth_shown_once_with_what_to_do(tmp_path: Path, judge_server: Any) -> None:
    judge_server.default = Status(401, message="Incorrect API key provided: sk-wrong-123456")
    data = write_jsonl(tmp_path / "data.jsonl", make_rows(3))
    env = {**os.environ, "OPENAI_API_KEY": "sk-wrong-123456", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    args = [sys.executable, "-m", "ragtrace", "eval", str(data), "--judge", "openai/judge-test",
            "--api-base", judge_server.url + "/v1", "--scorers", "context_precision", "--quiet"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)

    assert len(judge_server.requests) == 3  # one call per item: a refused credential is never retried
    lines = [line for line in proc.stdout.splitlines() if line.startswith("judge error")]
    assert len(lines) == 1 and lines[0].startswith("judge error judge_auth on 3 of 3 items:"), proc.stdout
    assert "OPENAI_API_KEY" in lines[0]  # what to do
    assert "sk-wrong-123456" not in proc.stdout + proc.stderr  # the key the provider echoed is not repeated
    assert proc.returncode == 1

    as_json = subprocess.run([*args, "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    errors = json.loads(as_json.stdout)["judge_errors"]
    assert set(errors) == {"judge_auth"} and errors["judge_auth"]["items"] == 3


def test_json_bad_input_is_a_json_error_on_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_jsonl(tmp_path / "data.jsonl", make_rows(1))
    assert main(["eval", str(data), "--judge", "lokal", "--json", "--quiet"]) == 2
    stdout, stderr = capsys.readouterr()
    payload = json.loads(stdout)
    assert payload["exit_code"] == 2 and "Did you mean 'local'?" in payload["error"]
    assert payload["error"] in stderr
