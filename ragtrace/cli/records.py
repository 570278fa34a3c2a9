"""The items a scoring run scores and the out file they go to: one JSON line per item, flushed as it completes.

A killed run loses nothing it paid for, and `--resume` reads the lines back to pick up where it stopped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ragtrace.offline.compare import load_results, record_key
from ragtrace.offline.evaluate import ItemResult
from ragtrace.scoring import JudgeUsage, RagSample, ScoreResult


@dataclass
class EvalItem:
    """A sample to score, its identity for resume/compare, and extra fields for the out file."""

    index: int
    id: str | None
    sample: RagSample
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return record_key({"id": self.id, "index": self.index})


def item_record(item: EvalItem, result: ItemResult) -> dict[str, Any]:
    """One line of the out file: identity, query, every scorer's full result and the usage."""
    return {
        "index": item.index,
        "id": item.id,
        **item.extra,
        "query": item.sample.query,
        "scores": {name: r.score for name, r in result.results.items()},
        "results": {name: r.as_dict() for name, r in result.results.items()},
        "usage": result.usage.model_dump(mode="json"),
    }


def item_result(record: dict[str, Any]) -> ItemResult:
    """An out-file line read back: the results as they were scored."""
    return ItemResult(
        index=int(record.get("index", 0)),
        id=record.get("id"),
        results={k: ScoreResult.model_validate(v) for k, v in record["results"].items()},
        usage=JudgeUsage.model_validate(record.get("usage") or {}),
    )


def read_out_file(out: Path, max_line_bytes: int) -> list[dict[str, Any]]:
    """The records an earlier run wrote to `out` (none when it does not exist yet)."""
    if not out.exists():
        return []
    return load_results(out, max_line_bytes=max_line_bytes)


def open_out_file(out: Path, *, append: bool) -> IO[str]:
    """`out` for writing; appending drops a half-written last line (a killed run) first, so that appended
    lines start on a line of their own."""
    if append and out.exists():
        data = out.read_bytes()
        if data and not data.endswith(b"\n"):
            out.write_bytes(data[: data.rfind(b"\n") + 1])
    out.parent.mkdir(parents=True, exist_ok=True)
    return out.open("a" if append else "w", encoding="utf-8")


def write_record(handle: IO[str], item: EvalItem, result: ItemResult) -> None:
    handle.write(json.dumps(item_record(item, result), ensure_ascii=False) + "\n")
    handle.flush()


__all__ = ["EvalItem", "item_record", "item_result", "open_out_file", "read_out_file", "write_record"]
