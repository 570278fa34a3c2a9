"""The steps of a scoring run on their own: what resume keeps, and how the gate picks the exit code."""

from __future__ import annotations

import io
from pathlib import Path

from ragtrace.cli import build_parser
from ragtrace.cli.options import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from ragtrace.cli.pipeline import Resumed, gate, load, resume, summarise
from ragtrace.cli.records import EvalItem, open_out_file, write_record
from ragtrace.offline.evaluate import ItemResult
from ragtrace.scoring import JudgeUsage, RagSample, ScoreResult, timed_out
from tests.offline.gold import JUDGE


def items(n: int) -> list[EvalItem]:
    return [EvalItem(index=i, id=f"q{i}", sample=RagSample(query=f"q{i}", contexts=["gold"])) for i in range(n)]


def scored(item: EvalItem, names: list[str], score: float = 1.0) -> ItemResult:
    results = {n: ScoreResult(name=n, score=score, label="pass") for n in names}
    return ItemResult(index=item.index, id=item.id, results=results, usage=JudgeUsage(calls=1))


def test_resume_keeps_items_scored_with_every_scorer_and_scores_the_others_again(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    data = items(4)
    with open_out_file(out, append=False) as handle:
        write_record(handle, data[0], scored(data[0], ["context_precision", "context_recall"]))
        write_record(handle, data[1], scored(data[1], ["context_precision"]))  # an earlier run with fewer scorers
        write_record(handle, EvalItem(9, "gone", RagSample(query="x")), scored(data[0], ["context_precision"]))
    args = build_parser().parse_args(
        ["eval", "unused.jsonl", "--judge", JUDGE, "--scorers", "context_precision,context_recall",
         "--out", str(out), "--resume"]
    )
    run = load(args, "eval", "unused.jsonl", lambda: data)
    stderr = io.StringIO()
    resumed = resume(run, args, stderr)
    assert list(resumed.results) == [data[0].key] and resumed.done == 1
    assert [i.index for i in resumed.todo] == [1, 2, 3]
    assert "resuming, 1 of 4 items already in" in stderr.getvalue()


def test_gate_exit_codes() -> None:
    data = items(4)
    args = build_parser().parse_args(
        ["eval", "unused.jsonl", "--judge", JUDGE, "--scorers", "context_precision", "--min", "context_precision=0.5"]
    )
    run = load(args, "eval", "unused.jsonl", lambda: data)
    good = {i.key: scored(i, ["context_precision"]) for i in data}
    nothing_resumed = Resumed(results={}, todo=data, done=0)
    assert gate(run, summarise(run, nothing_resumed, good, False, args), args).code == EXIT_OK
    assert gate(run, summarise(run, nothing_resumed, good, True, args), args).code == EXIT_INTERRUPTED
    low = {i.key: scored(i, ["context_precision"], 0.2) for i in data}
    assert gate(run, summarise(run, nothing_resumed, low, False, args), args).code == EXIT_FAILED
    one_timeout = dict(good)
    late = {"context_precision": timed_out("context_precision")}
    one_timeout[data[0].key] = ItemResult(index=0, id="q0", results=late, usage=JudgeUsage())
    verdict = gate(run, summarise(run, nothing_resumed, one_timeout, False, args), args)
    assert verdict.code == EXIT_FAILED and verdict.too_many_errors == {"context_precision": 0.25}
