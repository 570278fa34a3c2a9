"""`ragtrace eval`: exit codes, thresholds, bad files, field mapping, resume and Ctrl-C, with a scripted judge.

The judge is named on the command line as `python:tests.offline.gold:GoldJudge`, the same hook a user's
custom judge goes through, so these tests run the real CLI path end to end without a model.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ragtrace.cli import main
from tests.offline.gold import JUDGE, expected_precision_mean, make_rows, write_jsonl

ROOT = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["eval", *argv, "--judge", JUDGE])
    out, err = capsys.readouterr()
    return code, out, err


def test_thresholds_json_summary_and_out_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = make_rows(9)
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    out = tmp_path / "out.jsonl"
    mean = expected_precision_mean(rows)
    code, stdout, stderr = run(capsys, str(data), "--out", str(out), "--json", "--min", f"context_precision={mean}")
    assert code == 0, stderr
    summary = json.loads(stdout)
    precision = summary["scorers"]["context_precision"]
    assert precision["mean"] == mean and precision["passed"] is True
    assert precision["p10"] <= precision["p50"] <= precision["p90"]
    assert summary["scorers"]["context_recall"]["mean"] == 1.0
    assert summary["judge"]["calls"] == 9 and summary["judge"]["input_tokens"] == 450
    assert "context_precision" in stderr and "mean" in stderr  # the table goes to stderr with --json
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == sorted(r["id"] for r in rows)
    first = next(r for r in records if r["id"] == "q1")
    assert first["scores"]["context_precision"] == 0.5 and first["line"] == 2
    assert first["results"]["context_precision"]["reason"]

    code, stdout, _ = run(capsys, str(data), "--min", f"context_precision={mean + 0.01:.4f}", "--quiet")
    assert code == 1
    assert f"FAIL context_precision: mean {mean:.3f} < min {mean + 0.01:.4g}" in stdout


def test_table_and_non_tty_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_jsonl(tmp_path / "data.jsonl", make_rows(20))
    code, stdout, stderr = run(capsys, str(data), "--scorers", "context_precision")
    assert code == 0
    assert stdout.splitlines()[0].split()[:6] == ["scorer", "mean", "p10", "p50", "p90", "pass"]
    assert re.search(r"judge test/gold \(id [0-9a-f]{12}\): 20 calls", stdout), stdout  # the judge, by its id
    progress = [line for line in stderr.splitlines() if line.startswith("ragtrace: ")]
    assert progress[-1].startswith("ragtrace: 20/20 (100%)") and 2 <= len(progress) <= 12


def test_judge_errors_are_counted_and_gate_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = make_rows(4)
    rows[0]["query"] = "timeout please"
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    code, stdout, _ = run(capsys, str(data), "--json")
    summary = json.loads(stdout)
    assert summary["scorers"]["context_precision"]["errors"] == {"judge_timeout": 1}
    assert code == 1 and summary["error_rate_exceeded"]["context_precision"] == 0.25
    code, _, _ = run(capsys, str(data), "--max-error-rate", "0.3", "--quiet")
    assert code == 0


BAD_FILES: list[tuple[str, str, str]] = [
    ("missing_field", '{"query": "q", "contexts": ["a"]}\n{"query": "q2"}\n', "data.jsonl:2: missing field 'contexts'"),
    ("wrong_type", '{"query": "q", "contexts": "just one string"}\n',
     "data.jsonl:1: field 'contexts': expected a list of strings or {'content': ...} objects, got str"),
    ("query_not_str", '{"query": 42, "contexts": []}\n', "data.jsonl:1: field 'query': expected a string, got int"),
    ("response_not_str", '{"query": "q", "contexts": [], "response": ["x"]}\n',
     "data.jsonl:1: field 'response': expected a string or null, got list"),
    ("empty", "\n\n", "data.jsonl: file is empty: no samples to evaluate"),
    ("not_json", '{"query": "q", "contexts": []}\n\n{query: q}\n', "data.jsonl:3: not valid JSON"),
    ("not_object", '["q", []]\n', "data.jsonl:1: expected a JSON object per line, got list"),
    ("json_array", '[\n  {"query": "q", "contexts": []}\n]\n',
     "data.jsonl:1: a JSON array, not JSON Lines (one object per line): name the file .json or use --format json"),
    ("bad_context_item", '{"query": "q", "contexts": ["a", 3]}\n',
     "data.jsonl:1: field 'contexts': item 1 must be a string"),
    ("duplicate_id", '{"id": 1, "query": "q", "contexts": []}\n{"id": "1", "query": "q", "contexts": []}\n',
     "data.jsonl:2: duplicate id '1' (first on line 1)"),
]


@pytest.mark.parametrize(("content", "message"), [(c, m) for _, c, m in BAD_FILES], ids=[n for n, _, _ in BAD_FILES])
def test_bad_files_exit_2_naming_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text(content, encoding="utf-8")
    code, stdout, stderr = run(capsys, str(data))
    assert code == 2
    assert f"ragtrace eval: error: {tmp_path / message}" in stderr
    assert stdout == ""


def test_huge_line_is_refused_at_the_default_10_mb_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data.jsonl"
    with data.open("w") as handle:
        handle.write(json.dumps(make_rows(1)[0]) + "\n")
        handle.write('{"query": "q", "contexts": ["' + "x" * (10 * 1024 * 1024 + 10) + '"]}\n')
    code, _, stderr = run(capsys, str(data))
    assert code == 2 and f"{data}:2: line is longer than the 10485760 byte limit" in stderr
    code, _, stderr = run(capsys, str(data), "--max-line-bytes", "100")
    assert code == 2 and f"{data}:1: line is longer than the 100 byte limit" in stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--min", "context_precision"], "bad --min 'context_precision': expected SCORER=VALUE"),
        (["--min", "context_precision=high"], "bad --min 'context_precision=high': 'high' is not a number"),
        (["--min", "precision=0.5"], "unknown scorer 'precision'"),
        (["--min", "context_precision=1.5"], "must be between 0 and the scale (1)"),
        (["--scorers", "context_precision", "--min", "context_recall=0.5"], "context_recall is not in --scorers"),
        (["--scorers", "context_precision,faithfulness"], "unknown scorer 'faithfulness' in --scorers"),
        (["--scale", "0"], "scale must be a number > 0"),
        (["--unused-high-penalty", "2"], "unused_high_penalty must be a number in [0, 1]"),
        (["--resume"], "--resume needs --out"),
        (["--fail-on-regression"], "--fail-on-regression needs --compare"),
        (["--concurrency", "0"], "--concurrency must be >= 1"),
    ],
)
def test_bad_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    data = write_jsonl(tmp_path / "data.jsonl", make_rows(2))
    code, _, stderr = run(capsys, str(data), *argv)
    assert code == 2 and message in stderr, stderr


def test_unimportable_judge_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_jsonl(tmp_path / "data.jsonl", make_rows(2))
    code = main(["eval", str(data), "--judge", "python:no_such_module_xyz:Judge"])
    assert code == 2 and "cannot import" in capsys.readouterr().err


def test_csv_with_field_mapping(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = make_rows(5, gold_at=lambda i: 2 - i % 3)
    data = tmp_path / "data.csv"
    with data.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["key", "question", "passages", "answer"])
        for r in rows:
            writer.writerow([r["id"], r["query"], json.dumps(r["contexts"]), r["response"]])
    code, stdout, stderr = run(
        capsys, str(data), "--id-field", "key", "--contexts-field", "passages", "--response-field", "answer",
        "--scorers", "context_precision,context_recall", "--json", "--quiet",
    )
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["scorers"]["context_precision"]["mean"] == expected_precision_mean(rows)
    assert summary["scorers"]["context_recall"]["skipped"] == {"no_ground_truth": 5}

    bad = tmp_path / "bad.csv"
    bad.write_text('question,contexts\nq1,"[""a""]"\nq2,not json\n', encoding="utf-8")
    code, _, stderr = run(capsys, str(bad))
    assert code == 2 and (
        f"{bad}:3: field 'contexts': expected a JSON list (or a Python list as pandas writes it) in the CSV cell"
    ) in stderr
    code, _, stderr = run(capsys, str(data), "--query-field", "prompt")
    assert code == 2 and f"{data}:2: missing field 'prompt'" in stderr


def test_resume_skips_items_already_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = make_rows(10)
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    out = tmp_path / "out.jsonl"
    write_jsonl(tmp_path / "first.jsonl", rows[:4])
    assert run(capsys, str(tmp_path / "first.jsonl"), "--out", str(out), "--quiet")[0] == 0
    with out.open("a") as handle:  # a run killed mid-write leaves a torn last line
        handle.write('{"index": 4, "id": "q4", "resu')
    code, stdout, stderr = run(capsys, str(data), "--out", str(out), "--resume", "--json")
    assert code == 0
    summary = json.loads(stdout)
    assert summary["resumed"] == 4 and summary["evaluated"] == 6 and summary["items"] == 10
    assert summary["judge"]["calls"] == 10  # usage of resumed items is carried over, not paid twice
    assert "resuming, 4 of 10 items already in" in stderr
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert sorted(ids) == sorted(r["id"] for r in rows)
    assert summary["scorers"]["context_precision"]["mean"] == expected_precision_mean(rows)


def test_resume_without_ids_uses_the_line_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{k: v for k, v in r.items() if k != "id"} for r in make_rows(6)]
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    out = tmp_path / "out.jsonl"
    write_jsonl(out, [])
    assert run(capsys, str(write_jsonl(tmp_path / "head.jsonl", rows[:2])), "--out", str(out), "--quiet")[0] == 0
    code, stdout, _ = run(capsys, str(data), "--out", str(out), "--resume", "--json", "--quiet")
    assert code == 0 and json.loads(stdout)["evaluated"] == 4
    assert sorted(json.loads(line)["index"] for line in out.read_text().splitlines()) == list(range(6))


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT delivery")
def test_ctrl_c_keeps_results_and_prints_a_partial_summary(tmp_path: Path) -> None:
    rows = make_rows(200)
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    out = tmp_path / "out.jsonl"
    env = {**os.environ, "RAGTRACE_TEST_JUDGE_DELAY": "0.02", "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "ragtrace", "eval", str(data), "--judge", JUDGE, "--out", str(out),
            "--concurrency", "1"]
    # A shell starts a background job with SIGINT ignored, and an ignored signal stays ignored across exec:
    # give the child the default disposition, as a terminal would, so that the test holds wherever it runs.
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not out.exists() or out.read_text().count("\n") < 5):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert 5 <= len(written) < 200
    assert f"interrupted: partial summary over {len(written)} of 200 items" in stdout
    assert "context_precision" in stdout

    resumed = subprocess.run(
        [*argv, "--resume", "--json", "--quiet"], cwd=ROOT, env={**env, "RAGTRACE_TEST_JUDGE_DELAY": "0"},
        capture_output=True, text=True, timeout=60,
    )
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["resumed"] == len(written) and summary["evaluated"] == 200 - len(written)
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert len(ids) == 200 and len(set(ids)) == 200


def test_litellm_judge_through_api_base(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], judge_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--judge <litellm model> --api-base URL` reaches an OpenAI-compatible server (the scripted one)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    truth = "The gold is in the vault. It is heavy."
    rows = [
        {"id": "a", "query": "where is the gold?", "contexts": ["The gold is in the vault.", "Tin is cheap."],
         "response": "In the vault.", "ground_truth": truth},
        {"id": "b", "query": "where is the gold?", "contexts": ["Tin is cheap.", "The gold is in the vault."],
         "response": "In the vault.", "ground_truth": truth},
    ]
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    code = main(["eval", str(data), "--judge", "openai/judge-test", "--api-base", judge_server.url + "/v1",
                 "--scorers", "context_precision,context_recall", "--json", "--quiet", "--concurrency", "1"])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["scorers"]["context_precision"]["mean"] == round((1.0 + 0.5) / 2, 4)
    assert summary["scorers"]["context_recall"]["mean"] == 0.5  # "It is heavy." is in no context
    assert summary["judge"]["model"] == "openai/judge-test"
    assert summary["judge"]["calls"] == len(judge_server.requests) == 2
    # The judge by its identity: the endpoint is not part of it, the model and settings are.
    from ragtrace.judges import LLMJudge, judge_id

    assert summary["judge"]["judge_id"] == judge_id(LLMJudge("openai/judge-test"))


def test_llm_judge_call_options_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], judge_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--judge-max-tokens and --judge-contexts-per-call shape each call; --judge-timeout bounds it."""
    from tests.servers.judge import Hang

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    rows = [{"id": "a", "query": "where is the gold?", "contexts": ["The gold is in the vault.", "Tin is cheap.",
             "Lead is grey."], "response": "In the vault.", "ground_truth": "The gold is in the vault."}]
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    base = ["eval", str(data), "--judge", "openai/judge-test", "--api-base", judge_server.url + "/v1",
            "--scorers", "context_precision", "--json", "--quiet"]
    code = main([*base, "--judge-max-tokens", "321", "--judge-contexts-per-call", "2"])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    assert json.loads(stdout)["scorers"]["context_precision"]["mean"] == 1.0
    assert [b["max_tokens"] for b in judge_server.requests] == [321, 321]
    asked = [list(b["response_format"]["json_schema"]["schema"]["properties"]["contexts"]["properties"])
             for b in judge_server.requests]
    assert asked == [["0", "1"], ["2"]]

    judge_server.default = Hang(10.0)
    started = time.perf_counter()
    code = main([*base, "--judge-timeout", "0.5", "--judge-retries", "0", "--out", str(tmp_path / "out.jsonl")])
    capsys.readouterr()
    assert time.perf_counter() - started < 8.0
    (result,) = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert "judge_timeout" in json.dumps(result)

    assert main(["eval", str(data), "--judge", "local", "--judge-timeout", "5", "--quiet"]) == 2
    assert "apply to a litellm judge" in capsys.readouterr().err


def test_by_session_summarises_each_conversation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = make_rows(6)
    for i, row in enumerate(rows):
        if i < 4:
            row["session_id"] = "conv-a" if i % 2 == 0 else "conv-b"
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    code, stdout, stderr = run(capsys, str(data), "--by-session", "--json", "--scorers", "context_precision")
    assert code == 0, stderr
    sessions = json.loads(stdout)["sessions"]
    assert {name: s["context_precision"]["count"] for name, s in sessions.items()} == {
        "conv-a": 2, "conv-b": 2, "-": 2}
    expected = expected_precision_mean([rows[0], rows[2]])
    assert sessions["conv-a"]["context_precision"]["mean"] == expected
    assert "session" in stderr and "conv-b" in stderr  # the table (on stderr with --json)


@pytest.mark.parametrize("flag", ["data", "compare"])
def test_out_naming_a_file_the_run_reads_is_refused(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 30, item 4: `eval native.jsonl --out native.jsonl` overwrote the dataset with result lines."""
    data = tmp_path / "native.jsonl"
    data.write_text(json.dumps({"query": "q?", "contexts": ["c"], "response": "r"}) + "\n")
    before = data.read_bytes()
    argv = ["eval", str(data), "--out", str(data), "--quiet"]
    if flag == "compare":
        baseline = tmp_path / "baseline.jsonl"
        baseline.write_text("")
        argv = ["eval", str(data), "--compare", str(baseline), "--out", str(tmp_path / "." / "baseline.jsonl")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "would be overwritten" in err, err
    assert data.read_bytes() == before
