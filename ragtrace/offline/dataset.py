"""Load a dataset of samples from JSON Lines, a JSON array, CSV or TSV, with errors that name file, line and field.

A CI job that fails on a bad row should say exactly which row and why, before any judge call is paid for.
Lines are read with a size limit so that a corrupt multi-gigabyte line cannot exhaust memory.
Columns are found by name: ragtrace's own (`query`, `contexts`, `response`, `ground_truth`), else the names
of the two common evaluation schemas (`question` / `answer`, `user_input` / `retrieved_contexts` /
`reference`), so an exported dataset loads without a mapping and a row is never scored with its response
silently missing.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragtrace.scoring import Document, RagSample

MAX_LINE_BYTES = 10 * 1024 * 1024


class DatasetError(ValueError):
    """A dataset that cannot be read. `str()` is the message to show: file, line, field and what is wrong."""

    def __init__(self, path: str, message: str, line: int | None = None, field: str | None = None) -> None:
        self.path, self.line, self.field, self.message = path, line, field, message
        where = path if line is None else f"{path}:{line}"
        what = f"field '{field}': {message}" if field else message
        super().__init__(f"{where}: {what}")


# Per field, the names looked for when no column is mapped, first match wins: ragtrace's own name, then
# the 0.1 (`question`, `answer`) and 0.2 (`user_input`, `retrieved_contexts`, `reference`) ragas schemas.
KNOWN_NAMES: dict[str, tuple[str, ...]] = {
    "query": ("query", "question", "user_input"),
    "contexts": ("contexts", "retrieved_contexts"),
    "response": ("response", "answer"),
    "ground_truth": ("ground_truth", "reference"),
    "id": ("id",),
}
FORMATS = ("jsonl", "json", "csv", "tsv")
# Names people give a field that ragtrace does not read as it: said as "did you mean" in errors.
NEAR_NAMES: dict[str, str] = {
    "context": "contexts",
    "documents": "contexts",
    "output": "response",
    "ground_truths": "ground_truth",
    "expected_output": "ground_truth",
    "input": "query",
}


@dataclass(frozen=True)
class FieldMap:
    """Which column holds what. A field left None is found by its known names (`KNOWN_NAMES`)."""

    query: str | None = None
    contexts: str | None = None
    response: str | None = None
    ground_truth: str | None = None
    id: str | None = None
    #: Columns kept as they are on `DatasetRow.extra`, beside the sample (`align` reads its labels there).
    keep: tuple[str, ...] = ()

    def kept(self, row: dict[str, Any]) -> dict[str, Any]:
        return {name: row[name] for name in self.keep if name in row}

    def column(self, field: str, row: dict[str, Any]) -> str:
        """The column that holds `field` in this row: the mapped one, else the first known name present."""
        mapped: str | None = getattr(self, field)
        if mapped is not None:
            return mapped
        names = KNOWN_NAMES[field]
        return next((name for name in names if name in row), names[0])

    def missing(self, field: str, column: str, row: dict[str, Any] | None = None) -> str:
        """The message for a required column that is not in the row (with the row's near name, if any)."""
        option = "--" + field.replace("_", "-") + "-field"
        if getattr(self, field) is not None:
            return f"missing field '{column}'"
        others = KNOWN_NAMES[field][1:]
        alternatives = " (or " + ", ".join(f"'{name}'" for name in others) + ")" if others else ""
        near = next((key for key in row or {} if NEAR_NAMES.get(key) == field), None)
        hint = f"; the row has '{near}': did you mean '{field}'?" if near else ""
        return f"missing field '{column}'{alternatives}{hint}; map another with {option}"

    def check_one_name(self, row: dict[str, Any]) -> str | None:
        """The message when an unmapped field is named twice in a row (`query` and `question`): which one
        holds it would be a guess, and `evaluate()` refuses the same row."""
        for field, names in KNOWN_NAMES.items():
            present = [name for name in names if name in row]
            if getattr(self, field) is None and len(present) > 1:
                option = "--" + field.replace("_", "-") + "-field"
                named = " and ".join(f"'{name}'" for name in present)
                return f"{named} both name the {field}; keep one, or choose one with {option}"
        return None


@dataclass(frozen=True)
class DatasetRow:
    """One sample and where it came from: `index` counts samples from 0, `line` is the 1-based file line.
    `extra` holds the columns `FieldMap.keep` names, as read (a CSV cell as its text)."""

    index: int
    line: int
    id: str | None
    sample: RagSample
    extra: dict[str, Any] = dataclass_field(default_factory=dict)


# The key of a context object's text: ragtrace's, LangChain's `Document`, and the plain `text` most stores use.
CONTENT_KEYS = ("content", "page_content", "text")


def _contexts(value: Any, fail: Any) -> tuple[Document, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        fail(f"expected a list of strings or {{'content': ...}} objects, got {type(value).__name__}")
    docs = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            docs.append(Document(content=item))
            continue
        key = next((k for k in CONTENT_KEYS if isinstance(item, dict) and isinstance(item.get(k), str)), None)
        if key is None:
            keys = " / ".join(f"'{k}'" for k in CONTENT_KEYS)
            fail(f"item {i} must be a string or an object with a string {keys}, got {type(item).__name__}")
        try:
            fields = {"content": item[key], **{k: item[k] for k in ("id", "score") if k in item}}
            docs.append(Document.model_validate(fields))
        except ValidationError as exc:
            fail(f"item {i}: {exc.errors()[0]['msg']}")
    return tuple(docs)


def _list_cell(text: str, fail: Any) -> Any:
    """A CSV cell holding a list: JSON, or a Python list literal as pandas writes one (`['a', 'b']`)."""
    if not text.strip():
        return []
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        problem = f"{exc.msg} at column {exc.colno}"
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        value = None
    if isinstance(value, list):
        return value
    fail(f"expected a JSON list (or a Python list as pandas writes it) in the CSV cell ({problem})")
    return None


def row_to_sample(
    row: dict[str, Any], fields: FieldMap, path: str, line: int, *, csv_row: bool = False
) -> tuple[str | None, RagSample]:
    """Validate one row into (id, sample), raising DatasetError that names the field."""

    def fail(field: str) -> Any:
        def raise_(message: str) -> None:
            raise DatasetError(path, message, line, field)

        return raise_

    if (twice := fields.check_one_name(row)) is not None:
        raise DatasetError(path, twice, line)
    query_field = fields.column("query", row)
    if query_field not in row:
        raise DatasetError(path, fields.missing("query", query_field, row), line)
    query = row[query_field]
    if not isinstance(query, str):
        fail(query_field)(f"expected a string, got {type(query).__name__}")
    if not query.strip():
        fail(query_field)("is empty")
    contexts_field = fields.column("contexts", row)
    if contexts_field not in row:
        raise DatasetError(path, fields.missing("contexts", contexts_field, row), line)
    raw_contexts = row[contexts_field]
    if csv_row and isinstance(raw_contexts, str):
        raw_contexts = _list_cell(raw_contexts, fail(contexts_field))
    contexts = _contexts(raw_contexts, fail(contexts_field))
    texts: dict[str, str | None] = {}
    for field in ("response", "ground_truth"):
        name = fields.column(field, row)
        value = row.get(name)
        if value is not None and not isinstance(value, str):
            fail(name)(f"expected a string or null, got {type(value).__name__}")
        texts[field] = value
    id_field = fields.column("id", row)
    raw_id = row.get(id_field)
    if raw_id is not None and (isinstance(raw_id, bool) or not isinstance(raw_id, str | int)):
        fail(id_field)(f"expected a string or integer, got {type(raw_id).__name__}")
    item_id = str(raw_id) if raw_id not in (None, "") else None
    metadata: dict[str, Any] = {"id": item_id} if item_id is not None else {}
    session = row.get("session_id")  # groups the summary with --by-session
    if isinstance(session, str | int) and not isinstance(session, bool) and str(session).strip():
        metadata["session_id"] = str(session)
    sample = RagSample(
        query=query,
        contexts=contexts,
        response=texts["response"] or "",
        ground_truth=texts["ground_truth"],
        metadata=metadata,
    )
    return item_id, sample


def read_lines(path: Path, max_line_bytes: int) -> Iterator[tuple[int, str]]:
    name = str(path)
    with path.open("rb") as handle:
        number = 0
        while True:
            raw = handle.readline(max_line_bytes + 1)
            if not raw:
                return
            number += 1
            if len(raw) > max_line_bytes:
                raise DatasetError(name, f"line is longer than the {max_line_bytes} byte limit", number)
            try:
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(name, f"not UTF-8 text (byte {exc.start})", number) from None


# A JSON string (closed or not) or a bracket: the tokens that decide where a multi-line document ends.
_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"?|[][{}]')


def read_json_documents(path: Path, max_bytes: int) -> Iterator[tuple[int, str]]:
    """The JSON documents of a file (`json_documents`), read line by line."""
    return json_documents(read_lines(path, max_bytes), str(path), max_bytes)


def json_documents(lines: Iterable[tuple[int, str]], name: str, max_bytes: int) -> Iterator[tuple[int, str]]:
    """JSON values one per line, or spread over lines as a pretty-printer writes them: (first line, text).

    A line whose last character cannot end a JSON value (`{`, `[`, `,`, `:`) starts a document that runs
    until its brackets close; any other line is a document of its own, so a broken one-line record is
    reported on its own line instead of swallowing the lines after it.
    """
    parts: list[str] = []
    first = depth = size = 0
    for number, text in lines:
        if not parts:
            stripped = text.rstrip()
            if not stripped:
                continue
            if stripped[-1] not in "{[,:":
                yield number, text
                continue
            first, depth, size = number, 0, 0
        parts.append(text)
        size += len(text)
        if size > max_bytes:
            raise DatasetError(name, f"the JSON document starting here is longer than the {max_bytes} byte limit",
                               first)
        for token in _BRACKETS.findall(text):
            depth += 1 if token in ("{", "[") else -1 if token in ("}", "]") else 0
        if depth <= 0:
            yield first, "".join(parts)
            parts = []
    if parts:
        yield first, "".join(parts)


def _row(name: str, number: int, row: Any, fields: FieldMap, index: int, what: str) -> DatasetRow:
    if not isinstance(row, dict):
        raise DatasetError(name, f"expected a JSON object {what}, got {type(row).__name__}", number)
    item_id, sample = row_to_sample(row, fields, name, number)
    return DatasetRow(index=index, line=number, id=item_id, sample=sample, extra=fields.kept(row))


def _jsonl(name: str, documents: Iterable[tuple[int, str]], fields: FieldMap) -> list[DatasetRow]:
    rows: list[DatasetRow] = []
    for number, text in documents:
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(
                name, f"not valid JSON ({exc.msg} at column {exc.colno})", number + exc.lineno - 1
            ) from None
        if not rows and isinstance(row, list) and row and all(isinstance(item, dict) for item in row):
            raise DatasetError(
                name, "a JSON array, not JSON Lines (one object per line): name the file .json or use --format json",
                number,
            )
        rows.append(_row(name, number, row, fields, len(rows), "per line"))
    return rows


class _Cursor:
    """A position in a JSON text, with the line it is on counted as it moves (one pass, not one per row)."""

    def __init__(self, name: str, text: str) -> None:
        self.name, self.text, self.at = name, text, 0
        self._line, self._counted = 1, 0

    def line(self, position: int | None = None) -> int:
        position = self.at if position is None else position
        self._line += self.text.count("\n", self._counted, position)
        self._counted = position
        return self._line

    def skip_space(self) -> str:
        """Move past whitespace; the next character, or "" at the end."""
        while self.at < len(self.text) and self.text[self.at] in " \t\r\n":
            self.at += 1
        return self.text[self.at : self.at + 1]

    def error(self, message: str, position: int | None = None) -> DatasetError:
        position = self.at if position is None else position
        column = position - self.text.rfind("\n", 0, position)
        return DatasetError(self.name, f"not valid JSON ({message} at column {column})", self.line(position))


def _json(path: Path, max_bytes: int, fields: FieldMap) -> list[DatasetRow]:
    """A `.json` file: an array of objects (a row's line is where its object starts), else JSON Lines."""
    name = str(path)
    lines = list(read_lines(path, max_bytes))
    cursor = _Cursor(name, "".join(text for _, text in lines))
    if cursor.skip_space() != "[":
        return _jsonl(name, json_documents(lines, name, max_bytes), fields)
    decoder = json.JSONDecoder()
    rows: list[DatasetRow] = []
    cursor.at += 1
    if cursor.skip_space() == "]":
        cursor.at += 1
    else:
        while True:
            try:
                row, end = decoder.raw_decode(cursor.text, cursor.at)
            except json.JSONDecodeError as exc:
                raise cursor.error(exc.msg, exc.pos) from None
            rows.append(_row(name, cursor.line(), row, fields, len(rows), "per array item"))
            cursor.at = end
            following = cursor.skip_space()
            if following not in (",", "]"):
                raise cursor.error("Expecting ',' delimiter or ']'")
            cursor.at += 1
            if following == "]":
                break
            cursor.skip_space()
    if cursor.skip_space():
        raise cursor.error("Extra data after the array")
    return rows


def _csv(path: Path, fields: FieldMap, max_line_bytes: int, delimiter: str) -> list[DatasetRow]:
    name = str(path)
    text = "".join(t for _, t in read_lines(path, max_line_bytes))
    csv.field_size_limit(max_line_bytes)
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows: list[DatasetRow] = []
    try:
        for row in reader:
            line = reader.line_num
            if None in row:
                raise DatasetError(name, "more cells than header columns", line)
            cleaned = {k: v for k, v in row.items() if v is not None}
            if not any(v.strip() for v in cleaned.values()):
                continue
            item_id, sample = row_to_sample(cleaned, fields, name, line, csv_row=True)
            rows.append(DatasetRow(index=len(rows), line=line, id=item_id, sample=sample, extra=fields.kept(cleaned)))
    except csv.Error as exc:
        raise DatasetError(name, f"not valid CSV ({exc})", reader.line_num) from None
    return rows


def _with_format_hint(exc: DatasetError, path: Path, format: str) -> DatasetError:
    """A file read as JSON Lines by default whose first line is a CSV or TSV header: say --format."""
    if format != "auto" or exc.line != 1 or not exc.message.startswith("not valid JSON"):
        return exc
    with path.open(encoding="utf-8", errors="replace") as handle:
        header = handle.readline(4096)
    for kind, delimiter in (("tsv", "\t"), ("csv", ",")):
        columns = {c.strip().strip('"') for c in header.split(delimiter)}
        if any(name in columns for names in KNOWN_NAMES.values() for name in names):
            return DatasetError(exc.path, f"{exc.message}; its first line looks like a {kind.upper()} header: "
                                f"pass --format {kind} (or name the file .{kind})", exc.line)
    return exc


def load_dataset(
    path: str | Path,
    *,
    fields: FieldMap | None = None,
    format: str = "auto",
    max_line_bytes: int = MAX_LINE_BYTES,
) -> list[DatasetRow]:
    """Every sample of a dataset file, validated up front.

    `format="auto"` goes by the extension: `.csv`, `.tsv`, `.json` (an array of objects, or JSON Lines),
    anything else JSON Lines.
    """
    path = Path(path)
    fields = fields or FieldMap()
    if not path.exists():
        raise DatasetError(str(path), "no such file")
    if path.is_dir():
        raise DatasetError(str(path), "is a directory, not a dataset file")
    suffix = path.suffix.lower().lstrip(".")
    kind = format if format != "auto" else (suffix if suffix in FORMATS else "jsonl")
    if kind == "csv" or kind == "tsv":
        rows = _csv(path, fields, max_line_bytes, delimiter="," if kind == "csv" else "\t")
    elif kind == "json":
        rows = _json(path, max_line_bytes, fields)
    elif kind == "jsonl":
        try:
            rows = _jsonl(str(path), read_json_documents(path, max_line_bytes), fields)
        except DatasetError as exc:
            raise _with_format_hint(exc, path, format) from None
    else:
        raise DatasetError(str(path), f"unknown format {format!r}; use one of {', '.join(FORMATS)}")
    if not rows:
        raise DatasetError(str(path), "file is empty: no samples to evaluate")
    seen: dict[str, int] = {}
    for row in rows:
        if row.id is not None:
            if row.id in seen:
                raise DatasetError(str(path), f"duplicate id {row.id!r} (first on line {seen[row.id]})", row.line)
            seen[row.id] = row.line
    return rows
