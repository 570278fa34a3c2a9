"""`evaluate()` reads the row keys it knows and refuses the others, naming the key to use instead."""

from __future__ import annotations

import pytest

from ragtrace.judges import Judgement, JudgeRequest
from ragtrace.offline.evaluate import ROW_KEYS, evaluate
from tests.offline.gold import GoldJudge, make_rows


class CountingJudge(GoldJudge):
    def __init__(self) -> None:
        self.calls = 0

    async def judge(self, request: JudgeRequest) -> Judgement:
        self.calls += 1
        return await super().judge(request)


@pytest.mark.parametrize(
    ("key", "instead"),
    [("context", "contexts"), ("answer", "response"), ("reference", "ground_truth"), ("qurey", "query")],
)
def test_an_unknown_key_is_refused_naming_the_key_to_use(key: str, instead: str) -> None:
    judge = CountingJudge()
    rows = make_rows(2)
    rows[1][key] = "x"
    with pytest.raises(ValueError) as error:
        evaluate(rows, judge=judge)
    message = str(error.value)
    assert message.startswith("sample 1: ")
    assert f"{key!r} (did you mean {instead!r}?)" in message
    assert all(k in message for k in ROW_KEYS)  # the accepted keys are listed
    assert judge.calls == 0  # refused before any item is scored


def test_a_key_with_no_close_name_is_still_refused() -> None:
    rows = make_rows(1)
    rows[0]["zzz_unrelated"] = 1
    with pytest.raises(ValueError, match=r"unknown key\(s\) 'zzz_unrelated'; a row's keys are"):
        evaluate(rows, judge=GoldJudge())


def test_every_accepted_key_is_read() -> None:
    row = {**make_rows(1)[0], "id": "a", "metadata": {"team": "x"}}
    report = evaluate([row], judge=GoldJudge())
    assert report.items[0].id == "a"
    assert report.items[0].results["context_precision"].score is not None


@pytest.mark.parametrize(
    "names",
    [
        {"query": "question", "response": "answer"},
        {"query": "user_input", "contexts": "retrieved_contexts", "ground_truth": "reference"},
    ],
    ids=["ragas-0.1", "ragas-0.2"],
)
def test_the_common_schemas_score_like_ragtraces_own_names(names: dict[str, str]) -> None:
    rows = make_rows(3)
    for row in rows:
        row["ground_truth"] = row["response"]
    renamed = [{names.get(k, k): v for k, v in row.items()} for row in rows]
    own, theirs = evaluate(rows, judge=GoldJudge()), evaluate(renamed, judge=GoldJudge())
    assert [i.results for i in theirs.items] == [i.results for i in own.items]


def test_a_second_name_for_a_field_would_go_unread_and_is_refused() -> None:
    row = {**make_rows(1)[0], "question": "another question"}
    with pytest.raises(ValueError, match=r"'question' \(did you mean 'query'\?\)"):
        evaluate([row], judge=GoldJudge())
