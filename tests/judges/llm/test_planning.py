"""Call planning: which calls a request takes to fit the model's context window."""

from __future__ import annotations

import pytest

from ragtrace.judges import JudgeRequest
from ragtrace.judges.llm.part import Part
from ragtrace.judges.llm.planning import Planner
from ragtrace.judges.llm.prompt import Prompting
from ragtrace.scoring import Aspect, RagSample

ALL = frozenset(Aspect)
SAMPLE = RagSample(
    query="Which rivers cross the city?",
    contexts=[f"Context {i} talks about river number {i} and the bridges that cross it." for i in range(6)],
    response="Several rivers cross it.",
    ground_truth="The Seine crosses the city. The Bievre used to.",
)
REQUEST = JudgeRequest(SAMPLE, ALL)


def words(text: str) -> int:
    return len(text.split())


def planner(window: int | None = None, contexts_per_call: int | None = None) -> tuple[Planner, list[str]]:
    notes: list[str] = []
    plan = Planner(
        "openai/judge-test", Prompting(words), context_window=window, contexts_per_call=contexts_per_call,
        note=notes.append,
    )
    return plan, notes


def covered(parts: list[Part], aspect: Aspect) -> list[int]:
    return sorted(i for p in parts if aspect in p.per_context for i in p.indices)


def test_a_request_that_fits_is_one_call() -> None:
    plan, notes = planner(window=None)
    assert plan.plan(REQUEST, "v", "json_schema") == [Part(frozenset({Aspect.USEFULNESS, Aspect.RELEVANCE}),
                                                           tuple(range(6)), missing=True, claims=True)]
    assert notes == []


def test_contexts_per_call_forces_chunks_and_one_sample_level_call() -> None:
    plan, notes = planner(contexts_per_call=4)
    per_context = frozenset({Aspect.USEFULNESS, Aspect.RELEVANCE})
    assert plan.plan(REQUEST, "v", "json_schema") == [
        Part(per_context, (0, 1, 2, 3)), Part(per_context, (4, 5)), Part(frozenset(), (), missing=True, claims=True)
    ]
    assert notes == ["chunked_requests"]


@pytest.mark.parametrize("window", [260, 320, 400, 600])
def test_a_request_too_long_is_split_per_aspect_then_chunked_until_each_call_fits(window: int) -> None:
    plan, notes = planner(window=window)
    assert not plan.fits(REQUEST, Part(frozenset({Aspect.USEFULNESS, Aspect.RELEVANCE}), tuple(range(6)), True, True),
                         "v", "json_schema")
    parts = plan.plan(REQUEST, "v", "json_schema")
    assert notes[0] == "split_per_aspect"
    # A per-context call fits, or asks one context (no smaller call exists); a sample-level call shows
    # every context whatever the window, so it is never chunked.
    assert all(plan.fits(REQUEST, p, "v", "json_schema") or len(p.indices) == 1 for p in parts if p.per_context)
    assert all(not p.indices for p in parts if p.sample_level)
    assert all(len(p.per_context) <= 1 for p in parts)  # one aspect a call
    for aspect in (Aspect.USEFULNESS, Aspect.RELEVANCE):
        assert covered(parts, aspect) == list(range(6))  # every context once per aspect
    assert sum(p.missing for p in parts) == 1 and sum(p.claims for p in parts) == 1


def test_a_smaller_window_never_takes_fewer_calls() -> None:
    sizes = [len(planner(window=w)[0].plan(REQUEST, "v", "json_schema")) for w in (2000, 600, 400, 300)]
    assert sizes == sorted(sizes)


def test_a_sample_without_contexts_asks_only_the_sample_level_fields() -> None:
    plan, _ = planner()
    request = JudgeRequest(RagSample(query="q", contexts=[], response="r", ground_truth="g"), ALL)
    assert plan.plan(request, "v", "text") == [Part(frozenset(), (), missing=True, claims=True)]
