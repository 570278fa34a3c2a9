"""Load a dataset of samples from JSONL or CSV, with field mapping and errors that name file, line and field.

A CI job that fails on a bad row should say exactly which row and why, before any judge call is paid for.
Lines are read with a size limit so that a corrupt multi-gigabyte line cannot exhaust memory.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
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


@dataclass(frozen=True)
class FieldMap:
    """Which column holds what. `query=None` means `query`, falling back to `question`."""

    query: str | None = None
    contexts: str = "contexts"
    response: str = "response"
    ground_truth: str = "ground_truth"
    id: str = "id"


@dataclass(frozen=True)
class DatasetRow:
    """One sample and where it came from: `index` counts samples from 0, `line` is the 1-based file line."""

    index: int
    line: int
    id: str | None
    sample: RagSample


def _contexts(value: Any, fail: Any) -> tuple[Document, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        fail(f"expected a list of strings or {{'content': ...}} objects, got {type(value).__name__}")
    docs = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            docs.append(Document(content=item))
        elif isinstance(item, dict) and isinstance(item.get("content"), str):
            try:
                docs.append(Document.model_validate({k: item[k] for k in ("content", "id", "score") if k in item}))
            except ValidationError as exc:
                fail(f"item {i}: {exc.errors()[0]['msg']}")
        else:
            fail(f"item {i} must be a string or an object with a string 'content', got {type(item).__name__}")
    return tuple(docs)


def row_to_sample(
    row: dict[str, Any], fields: FieldMap, path: str, line: int, *, csv_row: bool = False
) -> tuple[str | None, RagSample]:
    """Validate one row into (id, sample), raising DatasetError that names the field."""

    def fail(field: str) -> Any:
        def raise_(message: str) -> None:
            raise DatasetError(path, message, line, field)

        return raise_

    query_field = fields.query or ("query" if "query" in row or "question" not in row else "question")
    if query_field not in row:
        hint = "" if fields.query else " (or 'question')"
        raise DatasetError(path, f"missing field '{query_field}'{hint}; map another with --query-field", line)
    query = row[query_field]
    if not isinstance(query, str):
        fail(query_field)(f"expected a string, got {type(query).__name__}")
    if not query.strip():
        fail(query_field)("is empty")
    if fields.contexts not in row:
        raise DatasetError(path, f"missing field '{fields.contexts}'; map another with --contexts-field", line)
    raw_contexts = row[fields.contexts]
    if csv_row and isinstance(raw_contexts, str):
        try:
            raw_contexts = json.loads(raw_contexts) if raw_contexts.strip() else []
        except json.JSONDecodeError as exc:
            fail(fields.contexts)(f"expected a JSON list in the CSV cell ({exc.msg} at column {exc.colno})")
    contexts = _contexts(raw_contexts, fail(fields.contexts))
    texts: dict[str, str | None] = {}
    for name in (fields.response, fields.ground_truth):
        value = row.get(name)
        if value is not None and not isinstance(value, str):
            fail(name)(f"expected a string or null, got {type(value).__name__}")
        texts[name] = value
    raw_id = row.get(fields.id)
    if raw_id is not None and (isinstance(raw_id, bool) or not isinstance(raw_id, str | int)):
        fail(fields.id)(f"expected a string or integer, got {type(raw_id).__name__}")
    item_id = str(raw_id) if raw_id not in (None, "") else None
    sample = RagSample(
        query=query,
        contexts=contexts,
        response=texts[fields.response] or "",
        ground_truth=texts[fields.ground_truth],
        metadata={"id": item_id} if item_id is not None else {},
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


def _jsonl(path: Path, fields: FieldMap, max_line_bytes: int) -> list[DatasetRow]:
    name = str(path)
    rows: list[DatasetRow] = []
    for number, text in read_lines(path, max_line_bytes):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            hint = "; expected JSON Lines (one object per line), this looks like a JSON array" if (
                not rows and text.lstrip().startswith("[")
            ) else ""
            raise DatasetError(name, f"not valid JSON ({exc.msg} at column {exc.colno}){hint}", number) from None
        if not isinstance(row, dict):
            raise DatasetError(name, f"expected a JSON object per line, got {type(row).__name__}", number)
        item_id, sample = row_to_sample(row, fields, name, number)
        rows.append(DatasetRow(index=len(rows), line=number, id=item_id, sample=sample))
    return rows


def _csv(path: Path, fields: FieldMap, max_line_bytes: int) -> list[DatasetRow]:
    name = str(path)
    text = "".join(t for _, t in read_lines(path, max_line_bytes))
    csv.field_size_limit(max_line_bytes)
    reader = csv.DictReader(io.StringIO(text, newline=""))
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
            rows.append(DatasetRow(index=len(rows), line=line, id=item_id, sample=sample))
    except csv.Error as exc:
        raise DatasetError(name, f"not valid CSV ({exc})", reader.line_num) from None
    return rows


def load_dataset(
    path: str | Path,
    *,
    fields: FieldMap | None = None,
    format: str = "auto",
    max_line_bytes: int = MAX_LINE_BYTES,
) -> list[DatasetRow]:
    """Every sample of a JSONL (`.jsonl`, `.json`, `.ndjson`) or CSV (`.csv`) file, validated up front."""
    path = Path(path)
    fields = fields or FieldMap()
    if not path.exists():
        raise DatasetError(str(path), "no such file")
    if path.is_dir():
        raise DatasetError(str(path), "is a directory, not a dataset file")
    kind = format if format != "auto" else ("csv" if path.suffix.lower() in (".csv", ".tsv") else "jsonl")
    if kind not in ("jsonl", "csv"):
        raise DatasetError(str(path), f"unknown format {format!r}; use jsonl or csv")
    rows = _csv(path, fields, max_line_bytes) if kind == "csv" else _jsonl(path, fields, max_line_bytes)
    if not rows:
        raise DatasetError(str(path), "file is empty: no samples to evaluate")
    seen: dict[str, int] = {}
    for row in rows:
        if row.id is not None:
            if row.id in seen:
                raise DatasetError(str(path), f"duplicate id {row.id!r} (first on line {seen[row.id]})", row.line)
            seen[row.id] = row.line
    return rows
