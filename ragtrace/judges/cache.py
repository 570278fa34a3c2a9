"""Verdicts already paid for: the same retrieval for the same question is not judged twice.

Keyed by everything that shapes the judge's prompt (model, prompt version, aspects, the texts and a hash
of the contexts in order), so a hit is exactly the answer a new call would have been asked for.
Bounded (least recently used goes first) and thread-safe: the live worker and offline runs may share one.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ragtrace._state import PerProcessState
from ragtrace.scoring import Aspect, Verdicts


@dataclass(frozen=True)
class CachedVerdicts:
    verdicts: Verdicts
    truncated: tuple[int, ...] = ()


def contexts_digest(contexts: Sequence[str]) -> str:
    """A hash of the contexts in rank order (a reordering is a different retrieval)."""
    h = hashlib.sha256()
    for text in contexts:
        data = text.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def cache_key(
    *,
    model: str,
    prompt_version: str,
    aspects: Iterable[Aspect],
    query: str,
    reference: str | None,
    response: str | None,
    ground_truth: str | None,
    contexts: Sequence[str],
    extra: str = "",
) -> str:
    """One key for one judge question; `extra` carries judge settings that change the prompt."""
    parts = [
        model,
        prompt_version,
        sorted(str(a) for a in aspects),
        query,
        reference,
        response,
        ground_truth,
        contexts_digest(contexts),
        extra,
    ]
    return hashlib.sha256(json.dumps(parts).encode("utf-8", "surrogatepass")).hexdigest()


class VerdictCache(PerProcessState):
    """An in-memory LRU of at most `maxsize` judged samples."""

    def __init__(self, maxsize: int = 4096) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize!r}")
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[str, CachedVerdicts] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> CachedVerdicts | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item

    def put(self, key: str, value: CachedVerdicts) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.maxsize:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items
