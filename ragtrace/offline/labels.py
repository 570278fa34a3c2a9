"""Human labels beside the samples of a dataset: what `ragtrace align` measures a judge against.

A labels file is a dataset `eval` reads (JSON Lines, a JSON array, CSV or TSV) whose rows also carry
- `context_labels`: people's usefulness verdict per context, in the row's context order (`[1, 0, null]`:
  1/0, true/false or yes/no; null where nobody labelled that context), and/or
- `labels`: people's pass/fail per scorer (`{"context_relevance": "fail"}`; pass/fail, yes/no, true/false, 1/0).
In CSV each is a JSON value in its cell, as `contexts` is. A bad label is an error naming file, line and field,
raised before any judge is paid for.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragtrace.offline.dataset import MAX_LINE_BYTES, DatasetError, DatasetRow, FieldMap, load_dataset
from ragtrace.scoring import SCORERS, RagSample

CONTEXT_LABELS, LABELS = "context_labels", "labels"
YES_WORDS = frozenset({"pass", "yes", "true", "1", "useful", "relevant", "good", "correct", "y"})
NO_WORDS = frozenset({"fail", "no", "false", "0", "not_useful", "irrelevant", "bad", "incorrect", "n"})


@dataclass(frozen=True)
class LabelledItem:
    """A sample and people's labels on it. `key` names it in reports: its id, else its 1-based row."""

    key: str
    sample: RagSample
    context_labels: tuple[bool | None, ...] | None = None
    labels: dict[str, bool] = field(default_factory=dict)
    line: int | None = None
    # Where the item came from beyond the file (Phoenix: trace and span id), for the report.
    origin: dict[str, Any] = field(default_factory=dict)

    @property
    def labelled(self) -> bool:
        has_context = self.context_labels is not None and any(v is not None for v in self.context_labels)
        return has_context or bool(self.labels)


def yes_or_no(value: Any) -> bool | None:
    """A label as True (yes / pass / useful), False, or None when it is not one (a bool, 0/1, or a word)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower().replace(" ", "_").replace("-", "_")
        if word in YES_WORDS:
            return True
        if word in NO_WORDS:
            return False
    return None


def _decoded(value: Any, fail: Any, cell: bool) -> Any:
    """A CSV cell's text as the JSON it holds; other values as they are."""
    if not cell or not isinstance(value, str):
        return value
    if not value.strip():
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        fail(f"expected JSON in the CSV cell ({exc.msg} at column {exc.colno})")
    return None


def parse_context_labels(
    value: Any, n_contexts: int, fail: Any, *, cell: bool = False
) -> tuple[bool | None, ...] | None:
    value = _decoded(value, fail, cell)
    if value is None:
        return None
    if not isinstance(value, list):
        fail(f"expected a list of 1/0 (one per context), got {type(value).__name__}")
    if len(value) != n_contexts:
        fail(f"{len(value)} labels for {n_contexts} contexts: one label per context, in the same order")
    parsed: list[bool | None] = []
    for i, item in enumerate(value):
        label = None if item is None else yes_or_no(item)
        if item is not None and label is None:
            fail(f"item {i}: {item!r} is not a label; use 1/0, true/false, yes/no (null: not labelled)")
        parsed.append(label)
    return tuple(parsed)


def parse_sample_labels(value: Any, fail: Any, *, cell: bool = False) -> dict[str, bool]:
    value = _decoded(value, fail, cell)
    if value is None:
        return {}
    if not isinstance(value, dict):
        fail(f"expected an object of scorer -> pass/fail, e.g. {{\"context_relevance\": \"fail\"}}, "
             f"got {type(value).__name__}")
    labels: dict[str, bool] = {}
    for name, raw in value.items():
        if name not in SCORERS:
            fail(f"unknown scorer {name!r}; labels are per scorer: {', '.join(SCORERS)}")
        if raw is None:
            continue
        label = yes_or_no(raw)
        if label is None:
            fail(f"{name}: {raw!r} is not a label; use pass/fail (or yes/no, true/false, 1/0)")
        labels[name] = bool(label)
    return labels


def labelled_item(row: DatasetRow, path: str, *, cells: bool = False) -> LabelledItem:
    """One dataset row with its labels checked (DatasetError naming the field on a bad one); `cells`: a CSV
    or TSV row, whose labels are JSON text in their cells."""

    def fail(name: str) -> Any:
        def raise_(message: str) -> None:
            raise DatasetError(path, message, row.line, name)

        return raise_

    context_labels = parse_context_labels(
        row.extra.get(CONTEXT_LABELS), len(row.sample.contexts), fail(CONTEXT_LABELS), cell=cells
    )
    labels = parse_sample_labels(row.extra.get(LABELS), fail(LABELS), cell=cells)
    key = row.id if row.id is not None else f"row {row.index + 1}"
    return LabelledItem(key=key, sample=row.sample, context_labels=context_labels, labels=labels, line=row.line)


def load_labels(
    path: str | Path, *, fields: FieldMap | None = None, format: str = "auto", max_line_bytes: int = MAX_LINE_BYTES
) -> list[LabelledItem]:
    """Every row of a labels file with its labels; DatasetError when no row carries a label."""
    base = fields or FieldMap()
    fields = FieldMap(**{**base.__dict__, "keep": (*base.keep, CONTEXT_LABELS, LABELS)})
    rows = load_dataset(path, fields=fields, format=format, max_line_bytes=max_line_bytes)
    kind = format if format != "auto" else Path(path).suffix.lower().lstrip(".")
    items = [labelled_item(row, str(path), cells=kind in ("csv", "tsv")) for row in rows]
    if not any(item.labelled for item in items):
        raise DatasetError(
            str(path), f"no row carries a label: add '{CONTEXT_LABELS}' (1/0 per context) or '{LABELS}' "
            "(pass/fail per scorer) to the rows (docs/align.md)"
        )
    return items


def labelled_rows(rows: Iterable[Mapping[str, Any]]) -> list[LabelledItem]:
    """In-memory rows (dicts as `evaluate()` takes them, with `context_labels` / `labels`) as labelled items."""
    from ragtrace.offline.evaluate import as_sample

    items = []
    for index, row in enumerate(rows):
        name = f"row {index + 1}"

        def fail(message: str, name: str = name) -> None:
            raise ValueError(f"{name}: {message}")

        plain = {k: v for k, v in row.items() if k not in (CONTEXT_LABELS, LABELS)}
        sample = as_sample(plain)
        item_id = row.get("id")
        items.append(LabelledItem(
            key=str(item_id) if item_id is not None else name, sample=sample,
            context_labels=parse_context_labels(row.get(CONTEXT_LABELS), len(sample.contexts), fail),
            labels=parse_sample_labels(row.get(LABELS), fail),
        ))
    return items


__all__ = ["CONTEXT_LABELS", "LABELS", "LabelledItem", "labelled_item", "labelled_rows", "load_labels", "yes_or_no"]
