"""The verdict cache: what counts as the same question, LRU bounds, and thread safety."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ragtrace.judges.cache import CachedVerdicts, VerdictCache, cache_key, contexts_digest
from ragtrace.scoring import Aspect, ContextVerdict, Verdicts

BASE: dict[str, Any] = {
    "model": "openai/judge",
    "prompt_version": "fused-v1",
    "aspects": frozenset({Aspect.USEFULNESS, Aspect.CLAIMS}),
    "query": "q",
    "reference": "r",
    "response": "a",
    "ground_truth": "g",
    "contexts": ["one", "two"],
}


def entry(i: int) -> CachedVerdicts:
    return CachedVerdicts(Verdicts(contexts=[ContextVerdict(index=0, useful=bool(i % 2))]), (i,))


def test_same_question_same_key_and_aspect_order_does_not_matter() -> None:
    again = {**BASE, "aspects": [Aspect.CLAIMS, Aspect.USEFULNESS]}
    assert cache_key(**BASE) == cache_key(**again)


@pytest.mark.parametrize(
    "field,value",
    [
        ("model", "openai/other"),
        ("prompt_version", "fused-v2"),
        ("aspects", frozenset({Aspect.USEFULNESS})),
        ("query", "q2"),
        ("reference", None),
        ("response", "b"),
        ("ground_truth", "h"),
        ("contexts", ["two", "one"]),  # the same documents in another order
        ("contexts", ["one", "two", ""]),
        ("contexts", ["onetwo"]),  # concatenation must not collide
    ],
)
def test_any_difference_is_a_different_key(field: str, value: Any) -> None:
    assert cache_key(**BASE) != cache_key(**{**BASE, field: value})


def test_contexts_digest_is_boundary_safe() -> None:
    assert contexts_digest(["ab", "c"]) != contexts_digest(["a", "bc"])


def test_lru_evicts_the_least_recently_used() -> None:
    cache = VerdictCache(maxsize=2)
    cache.put("a", entry(1))
    cache.put("b", entry(2))
    assert cache.get("a") == entry(1)  # a is now the most recent
    cache.put("c", entry(3))
    assert "b" not in cache and "a" in cache and "c" in cache
    assert len(cache) == 2
    assert (cache.hits, cache.misses) == (1, 0)
    assert cache.get("b") is None and cache.misses == 1


def test_rejects_a_zero_bound() -> None:
    with pytest.raises(ValueError):
        VerdictCache(maxsize=0)


def test_bounded_and_consistent_under_threads() -> None:
    cache = VerdictCache(maxsize=50)
    failures: list[str] = []

    def work(offset: int) -> None:
        for i in range(500):
            key = f"k{(offset + i) % 120}"
            cache.put(key, entry(i))
            got = cache.get(key)
            if got is not None and not isinstance(got, CachedVerdicts):
                failures.append(key)

    threads = [threading.Thread(target=work, args=(n * 7,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert len(cache) == 50
