"""The HotpotQA subset that ships with the repository (`data/hotpotqa/`, CC BY-SA 4.0): one loader for the
benchmarks and the tests, so that nothing reads a path outside the checkout."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data" / "hotpotqa" / "hotpotqa_dev_500.jsonl"


def load_items(limit: int | None = None, path: Path = DATA) -> list[dict[str, Any]]:
    """The first `limit` items (all when None), in file order."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in itertools.islice(handle, limit) if line.strip()]
