"""Labels files: eval's rows plus `context_labels` / `labels`, in JSONL, JSON and CSV; bad labels name the field."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from ragtrace.offline.dataset import DatasetError
from ragtrace.offline.labels import labelled_rows, load_labels, yes_or_no

HOTPOTQA = Path(__file__).resolve().parents[2] / "data" / "hotpotqa" / "hotpotqa_dev_500.jsonl"

ROWS = [
    {"id": "a", "query": "where is the gold?", "contexts": ["The gold is in the vault.", "Tin is cheap."],
     "response": "In the vault.", "context_labels": [1, 0], "labels": {"context_relevance": "pass"}},
    {"id": "b", "query": "who won?", "contexts": ["Nobody.", "Rain fell.", "A draw."],
     "context_labels": [True, None, "no"]},
    {"id": "c", "query": "unlabelled", "contexts": ["x"]},
]


def test_jsonl_json_and_csv_read_the_same_labels(tmp_path: Path) -> None:
    jsonl = tmp_path / "labels.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    as_json = tmp_path / "labels.json"
    as_json.write_text(json.dumps(ROWS, indent=2))
    as_csv = tmp_path / "labels.csv"
    with as_csv.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["id", "query", "contexts", "response", "context_labels", "labels"])
        writer.writeheader()
        for row in ROWS:
            writer.writerow({k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in row.items()})
    read = [load_labels(path) for path in (jsonl, as_json, as_csv)]
    for items in read:
        assert [i.key for i in items] == ["a", "b", "c"]
        assert items[0].context_labels == (True, False) and items[0].labels == {"context_relevance": True}
        assert items[1].context_labels == (True, None, False) and items[1].labels == {}
        assert not items[2].labelled and items[0].sample.response == "In the vault."


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"context_labels": [1]}, "field 'context_labels': 1 labels for 2 contexts"),
        ({"context_labels": [1, "maybe"]}, "item 1: 'maybe' is not a label"),
        ({"context_labels": "1,0"}, "expected a list of 1/0"),
        ({"labels": {"context_relevanse": "pass"}}, "unknown scorer 'context_relevanse'"),
        ({"labels": {"context_recall": "meh"}}, "context_recall: 'meh' is not a label"),
        ({"labels": ["pass"]}, "expected an object of scorer -> pass/fail"),
    ],
)
def test_a_bad_label_names_file_line_and_field(tmp_path: Path, change: dict[str, object], message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({**ROWS[0], **change}) + "\n")
    with pytest.raises(DatasetError, match=message.replace("(", r"\(")) as caught:
        load_labels(path)
    assert str(caught.value).startswith(f"{path}:1")


def test_a_file_without_any_label_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain.jsonl"
    path.write_text(json.dumps(ROWS[2]) + "\n")
    with pytest.raises(DatasetError, match="no row carries a label"):
        load_labels(path)


def test_hotpotqa_as_shipped_is_a_labels_file() -> None:
    """data/hotpotqa's rows carry people's per-paragraph labels under the name align reads."""
    items = load_labels(HOTPOTQA)
    assert len(items) == 500
    labels = [y for i in items for y in i.context_labels or ()]
    assert len(labels) == sum(len(i.sample.contexts) for i in items) and sum(labels) == 1000
    assert all(i.sample.response for i in items)  # its short `answer`, usefulness can be judged against it


def test_words_and_rows() -> None:
    assert [yes_or_no(v) for v in ("Pass", "FAIL", "yes", "No", 1, 0, True, "not useful", 2, "?")] == [
        True, False, True, False, True, False, True, False, None, None]
    items = labelled_rows([{"query": "q", "contexts": ["a", "b"], "context_labels": [0, 1], "id": 7}])
    assert items[0].key == "7" and items[0].context_labels == (False, True)
    with pytest.raises(ValueError, match="row 1: 1 labels for 2 contexts"):
        labelled_rows([{"query": "q", "contexts": ["a", "b"], "context_labels": [0]}])
