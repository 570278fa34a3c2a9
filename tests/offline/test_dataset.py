"""The dataset loader: formats, column names, and errors that point at the line."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ragtrace
from ragtrace.offline import DatasetError, DatasetRow, FieldMap, load_dataset
from ragtrace.offline.dataset import read_json_documents

ROWS: list[dict[str, Any]] = [
    {"id": "a", "query": "Who wrote Dune?", "contexts": ["Dune is a novel by Frank Herbert.", "Paris"],
     "response": "Frank Herbert.", "ground_truth": "Frank Herbert wrote Dune."},
    {"id": "b", "query": "Capital of France?", "contexts": ["Paris is the capital of France."],
     "response": "Paris.", "ground_truth": None},
]


def loaded(rows: list[DatasetRow]) -> list[tuple[str | None, str, tuple[str, ...], str, str | None]]:
    return [
        (r.id, r.sample.query, tuple(d.content for d in r.sample.contexts), r.sample.response, r.sample.ground_truth)
        for r in rows
    ]


EXPECTED = [
    ("a", "Who wrote Dune?", ("Dune is a novel by Frank Herbert.", "Paris"), "Frank Herbert.",
     "Frank Herbert wrote Dune."),
    ("b", "Capital of France?", ("Paris is the capital of France.",), "Paris.", None),
]


def renamed(names: dict[str, str]) -> list[dict[str, object]]:
    return [{names.get(k, k): v for k, v in row.items()} for row in ROWS]


@pytest.mark.parametrize(
    "names",
    [
        {"query": "question", "response": "answer"},
        {"query": "user_input", "contexts": "retrieved_contexts", "ground_truth": "reference"},
    ],
    ids=["ragas-0.1", "ragas-0.2"],
)
def test_the_common_schemas_load_without_a_mapping(tmp_path: Path, names: dict[str, str]) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in renamed(names)), encoding="utf-8")
    assert loaded(load_dataset(data)) == EXPECTED


def test_two_names_for_one_field_are_refused_and_a_mapping_chooses(tmp_path: Path) -> None:
    """Which of `response` and `answer` holds the response would be a guess (evaluate() refuses it too)."""
    data = tmp_path / "data.jsonl"
    row = {"query": "q", "contexts": ["c"], "response": "mine", "answer": "theirs", "final": "mapped"}
    data.write_text(json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="'response' and 'answer' both name the response"):
        load_dataset(data)
    assert load_dataset(data, fields=FieldMap(response="final"))[0].sample.response == "mapped"


def test_a_missing_column_names_the_names_looked_for(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"query": "q", "passages": ["c"]}\n', encoding="utf-8")
    with pytest.raises(DatasetError) as error:
        load_dataset(data)
    assert str(error.value) == (
        f"{data}:1: missing field 'contexts' (or 'retrieved_contexts'); map another with --contexts-field"
    )
    with pytest.raises(DatasetError) as error:
        load_dataset(data, fields=FieldMap(contexts="docs"))
    assert str(error.value) == f"{data}:1: missing field 'docs'"
    assert loaded(load_dataset(data, fields=FieldMap(contexts="passages")))[0][2] == ("c",)


def test_a_json_array_loads_and_each_row_keeps_the_line_its_object_starts_on(tmp_path: Path) -> None:
    data = tmp_path / "data.json"
    data.write_text("\ufeff" + json.dumps(ROWS, indent=2) + "\n", encoding="utf-8")
    rows = load_dataset(data)
    assert loaded(rows) == EXPECTED
    text = data.read_text(encoding="utf-8-sig").splitlines()
    assert [text[r.line - 1].strip() for r in rows] == ["{", "{"]
    assert text[rows[1].line].strip() == '"id": "b",'


def test_a_json_file_of_json_lines_loads_too(tmp_path: Path) -> None:
    data = tmp_path / "data.json"
    data.write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    assert loaded(load_dataset(data)) == EXPECTED


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[\n  {"query": "q", "contexts": []},\n  {"query": 3, "contexts": []}\n]',
         "3: field 'query': expected a string"),
        ('[\n  {"query": "q", "contexts": []},\n  "q2"\n]', "3: expected a JSON object per array item, got str"),
        ('[\n  {"query": "q", "contexts": []}\n  {"query": "q2", "contexts": []}\n]',
         "3: not valid JSON (Expecting ',' delimiter or ']' at column 3)"),
        ('[\n  {"query": "q", "contexts": [}\n]', "2: not valid JSON (Expecting value at column 31)"),
        ('[{"query": "q", "contexts": []}]\n{"query": "q2"}\n',
         "2: not valid JSON (Extra data after the array at column 1)"),
        ('[{"query": "q", "contexts": []},', "1: not valid JSON (Expecting value at column 33)"),
        ("[\n]\n", ": file is empty: no samples to evaluate"),
    ],
    ids=["bad-field", "not-an-object", "missing-comma", "bad-value", "extra-data", "truncated", "empty"],
)
def test_a_bad_json_array_names_the_line(tmp_path: Path, content: str, message: str) -> None:
    data = tmp_path / "data.json"
    data.write_text(content, encoding="utf-8")
    with pytest.raises(DatasetError) as error:
        load_dataset(data)
    assert str(error.value).startswith(f"{data}:{message}" if message[0] != ":" else f"{data}{message}")


def test_a_json_array_in_a_jsonl_file_is_refused_with_a_hint(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps(ROWS, indent=2), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"1: a JSON array, not JSON Lines .*: name the file .json or use --format"):
        load_dataset(data)
    assert loaded(load_dataset(data, format="json")) == EXPECTED


@pytest.mark.parametrize(("suffix", "delimiter"), [(".csv", ","), (".tsv", "\t")])
def test_csv_and_tsv_hold_contexts_as_a_json_list(tmp_path: Path, suffix: str, delimiter: str) -> None:
    data = tmp_path / f"data{suffix}"
    with data.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(["id", "question", "contexts", "answer", "reference"])
        for row in ROWS:
            writer.writerow([row["id"], row["query"], json.dumps(row["contexts"]), row["response"],
                             row["ground_truth"] or ""])
    rows = load_dataset(data)
    assert [(i, q, c, r) for i, q, c, r, _ in loaded(rows)] == [e[:4] for e in EXPECTED]
    assert [r.sample.ground_truth for r in rows] == ["Frank Herbert wrote Dune.", None]
    assert [r.line for r in rows] == [2, 3]


def test_an_unknown_format_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps(ROWS[0]) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="unknown format 'parquet'; use one of jsonl, json, csv, tsv"):
        load_dataset(data, format="parquet")


def test_json_lines_may_spread_an_object_over_lines_and_a_broken_line_stays_on_its_own(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row, indent=2) + "\n" for row in ROWS), encoding="utf-8")
    rows = load_dataset(data)
    assert loaded(rows) == EXPECTED
    assert [r.line for r in rows] == [1, 1 + json.dumps(ROWS[0], indent=2).count("\n") + 1]
    data.write_text('{"query": "q", "contexts": []}\n{"query": "q2", "contexts": [}\n' + json.dumps(ROWS[0]) + "\n")
    with pytest.raises(DatasetError, match=r"data.jsonl:2: not valid JSON \(Expecting value at column 30\)"):
        load_dataset(data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.sampled_from('ab{}[]",:\\ \t\u00e9')),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(documents=st.lists(json_values, min_size=1, max_size=5), indent=st.sampled_from([None, 1, 2, "\t"]))
def test_json_documents_come_back_whole_however_they_are_printed(
    tmp_path: Path, documents: list[Any], indent: int | str | None
) -> None:
    path = tmp_path / "documents.json"
    path.write_text("".join(json.dumps(d, indent=indent) + "\n" for d in documents), encoding="utf-8")
    read = list(read_json_documents(path, 1 << 20))
    assert [json.loads(text) for _, text in read] == documents
    lines = path.read_text(encoding="utf-8").splitlines()
    assert all(lines[number - 1] == text.splitlines()[0] for number, text in read)


def test_context_objects_may_hold_their_text_as_content_page_content_or_text(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    contexts = [
        {"content": "a", "id": "1"}, {"page_content": "b", "metadata": {"source": "x"}}, {"text": "c", "score": 0.5}
    ]
    data.write_text(json.dumps({"query": "q", "contexts": contexts}) + "\n", encoding="utf-8")
    docs = load_dataset(data)[0].sample.contexts
    assert [(d.content, d.id, d.score) for d in docs] == [("a", "1", None), ("b", None, None), ("c", None, 0.5)]
    data.write_text(json.dumps({"query": "q", "contexts": [{"body": "a"}]}) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="item 0 must be a string or an object with a string 'content' / 'page_"):
        load_dataset(data)


# ---------------------------------------------------------------- issue 30, item 15


def test_a_csv_written_by_pandas_with_a_python_list_in_the_contexts_cell_loads(tmp_path: Path) -> None:
    path = tmp_path / "pandas.csv"
    with path.open("w", newline="") as handle:  # what DataFrame.to_csv writes for a column of lists
        csv.writer(handle).writerows([["query", "contexts", "response"],
                                      ["q?", repr(["Paris is in France.", "It's big."]), "Paris"]])
    [row] = load_dataset(path)
    assert [d.content for d in row.sample.contexts] == ["Paris is in France.", "It's big."]


def test_a_cell_that_is_no_list_in_either_syntax_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text('query,contexts\nq?,"[\'unclosed"\n')
    with pytest.raises(DatasetError, match="Python list as pandas writes it"):
        load_dataset(path)


@pytest.mark.parametrize(("delimiter", "kind"), [(",", "csv"), ("\t", "tsv")])
def test_csv_in_a_txt_file_gets_a_format_hint(tmp_path: Path, delimiter: str, kind: str) -> None:
    path = tmp_path / "data.txt"
    path.write_text(delimiter.join(["query", "contexts"]) + "\n" + delimiter.join(["q?", '["c"]']) + "\n")
    with pytest.raises(DatasetError, match=f"--format {kind}"):
        load_dataset(path)
    assert len(load_dataset(path, format=kind)) == 1


def test_a_context_column_gets_did_you_mean_contexts(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps({"query": "q?", "context": ["c"]}) + "\n")
    with pytest.raises(DatasetError, match="the row has 'context': did you mean 'contexts'"):
        load_dataset(path)


def test_a_row_with_both_query_and_question_is_refused_as_evaluate_refuses_it(tmp_path: Path) -> None:
    row = {"query": "q?", "question": "other?", "contexts": ["c"]}
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(DatasetError, match="'query' and 'question' both name the query"):
        load_dataset(path)
    with pytest.raises(ValueError, match="question"):
        ragtrace.evaluate([row], judge="local")
