"""`ragtrace align`: the LLM judge through litellm against the scripted OpenAI-compatible server, whose verdicts
are known in advance (useful = the context's first sentence is in the reference), so every figure is predictable."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ragtrace.cli import main
from ragtrace.offline.agreement import mcnemar_exact
from tests.servers.judge import Behaviour, Reply, oracle, parse_prompt

GOLD, TIN = "The gold is in the vault.", "Tin is cheap."
# (contexts, people's usefulness labels, people's context_precision label). The oracle calls GOLD useful and
# TIN not: it agrees with people on 6 of the 8 contexts (3 yes/yes, 1 yes/no, 1 no/yes, 3 no/no): kappa 0.5.
ITEMS = [
    ([GOLD, TIN], [1, 0], "pass"),
    ([TIN, GOLD], [0, 1], "fail"),
    ([GOLD, TIN], [0, 0], "fail"),
    ([TIN, GOLD], [1, 1], "pass"),
]


def rows(copies: int = 1) -> list[dict[str, Any]]:
    return [
        {"id": f"{n}-{k}", "query": "where is the gold?", "contexts": contexts, "response": GOLD,
         "context_labels": labels, "labels": {"context_precision": verdict}}
        for n in range(copies) for k, (contexts, labels, verdict) in enumerate(ITEMS)
    ]


def write(path: Path, data: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in data))
    return path


@dataclass
class Contrary(Behaviour):
    """The oracle's answer, with every usefulness verdict flipped for one model: a judge that is mostly wrong."""

    model: str = "judge-contrary"
    delay: float = 0.0

    def reply(self, body: dict[str, Any]) -> Reply:
        answer = oracle(parse_prompt(body))
        if self.model in str(body.get("model")):
            for verdict in answer.get("contexts", {}).values():
                if "useful" in verdict:
                    verdict["useful"] = not verdict["useful"]
        return Reply(content=json.dumps(answer))


@pytest.fixture
def llm(judge_server: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    return ["--api-base", judge_server.url + "/v1", "--quiet", "--concurrency", "2"]


def test_llm_judge_figures_and_gates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], judge_server: Any, llm: list[str]
) -> None:
    labels = write(tmp_path / "labels.jsonl", rows())
    base = ["align", str(labels), "--judge", "openai/judge-test", *llm]
    code = main([*base, "--json", "--min-kappa", "0.5", "--min-f1", "0.75", "--html", str(tmp_path / "a.html")])
    stdout, stderr = capsys.readouterr()
    assert code == 1, stderr  # the context_precision gates fail (below)
    report = json.loads(stdout)
    assert report["labelled"] == {"contexts": 8, "context_precision": 4}
    judge = report["judges"][0]
    # Items 3 and 4 repeat 1 and 2: served from the judge's cache unless judged at the same moment.
    assert len(judge_server.requests) == judge["usage"]["calls"] and 2 <= judge["usage"]["calls"] <= 4
    assert (judge["judge"], judge["model"]) == ("openai/judge-test", "openai/judge-test")
    contexts = judge["agreements"]["contexts"]
    assert contexts["units"] == 8 and contexts["confusion"] == {"tp": 3, "fp": 1, "fn": 1, "tn": 3}
    assert contexts["kappa"] == pytest.approx(0.5) and contexts["accuracy"] == 0.75
    assert contexts["yes"]["f1"] == pytest.approx(0.75) and contexts["auc_of"] == "verdict"
    assert contexts["auc"] == pytest.approx(0.75)  # a yes/no verdict's AUC is its balanced accuracy
    assert [(d["item"], d["context"], d["human"]) for d in contexts["disagreements"]] in (
        [("0-2", 0, False), ("0-3", 0, True)], [("0-3", 0, True), ("0-2", 0, False)])
    # context_precision: AP 1.0, 0.5, 1.0, 0.5, all pass; people said pass, fail, fail, pass.
    precision = judge["agreements"]["context_precision"]
    assert precision["confusion"] == {"tp": 2, "fp": 2, "fn": 0, "tn": 0} and precision["kappa"] == 0.0
    assert [g["passed"] for g in report["gates"]] == [True, True, False, False]  # kappa, f1 per label set
    assert report["exit_code"] == 1 and not report["passed"]
    page = (tmp_path / "a.html").read_text()
    assert "calibration" in page and "Cohen&#x27;s kappa" in page and "0-3" in page

    code = main([*base, "--scorers", "context_precision", "--min-kappa", "0.5"])
    out = capsys.readouterr().out
    assert code == 1 and "FAIL openai/judge-test context_precision kappa 0.000 (min 0.5)" in out
    assert "ok openai/judge-test contexts kappa 0.500 (min 0.5)" in out


def test_two_judges_side_by_side_with_a_paired_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], judge_server: Any, llm: list[str]
) -> None:
    judge_server.default = Contrary()
    labels = write(tmp_path / "labels.jsonl", rows(copies=3))
    code = main(["align", str(labels), "--judge", "openai/judge-test", "--judge", "openai/judge-contrary",
                 "--scorers", "context_precision", *llm, "--json"])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    report = json.loads(stdout)
    accuracy = {j["judge"]: j["agreements"]["contexts"]["accuracy"] for j in report["judges"]}
    assert accuracy == {"openai/judge-test": 0.75, "openai/judge-contrary": 0.25}
    test = next(t for t in report["comparisons"] if t["labels"] == "contexts")
    assert (test["units"], test["only_a"], test["only_b"]) == (24, 18, 6)
    assert test["p_value"] == pytest.approx(mcnemar_exact([True] * 18 + [False] * 6, [False] * 18 + [True] * 6).p_value)
    assert test["p_value"] < 0.05 and test["better"] == "openai/judge-test"


def test_bad_input_is_exit_2_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = write(tmp_path / "bad.jsonl", [{**rows()[0], "context_labels": [1]}])
    plain = write(tmp_path / "plain.jsonl", [{"query": "q", "contexts": ["c"]}])
    cases = [
        (["align", str(bad)], "bad.jsonl:1: field 'context_labels': 1 labels for 2 contexts"),
        (["align", str(plain)], "no row carries a label"),
        (["align", str(tmp_path / "missing.jsonl")], "no such file"),
        (["align"], "give a labels file or --phoenix URL"),
        (["align", str(bad), "--annotation", "ok"], "--annotation reads Phoenix span annotations"),
        (["align", "--phoenix", "http://127.0.0.1:9"], "--phoenix needs --annotation"),
        (["align", "--phoenix", "http://127.0.0.1:9", "--annotation", "thumbs"], "say which scorer it labels"),
        (["align", "--phoenix", "http://127.0.0.1:9", "--annotation", "ok=context_relevance"], "cannot reach Phoenix"),
        (["align", str(plain), "--judge", "locl"], "Did you mean 'local'?"),
        (["align", str(plain), "--judge", "local", "--judge", "local"], "names the same judge twice"),
    ]
    for argv, message in cases:
        code = main([*argv, "--json"])
        stdout, stderr = capsys.readouterr()
        assert code == 2, (argv, stderr)
        assert message in stderr and json.loads(stdout)["exit_code"] == 2, (argv, stderr)
