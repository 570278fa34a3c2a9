"""Admission, span by span, on a real store: what is held, what goes on now, what is counted."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragtrace.capture import DEFAULT_RULES
from ragtrace.live.admission import Admission
from ragtrace.live.counts import Counts
from ragtrace.live.modes import Enrich, Link, Mode
from ragtrace.live.sampling import Sampler
from ragtrace.live.store import SpanStore
from tests.live.seams import ended_spans


def admission(
    rate: float = 1.0, kind: type[Mode] = Enrich, every_span_a_target: bool = False, **store: int
) -> tuple[Admission, SpanStore, Counts]:
    spans_store = SpanStore(max_held_spans=store.get("max_held_spans", 100), max_open_traces=10)
    counts = Counts()
    mode = kind(reason_max_chars=500, model="m", prompt_version="v", rules=DEFAULT_RULES)
    held = Admission(spans_store, counts, trace_id_bound=Sampler(rate=rate).trace_id_bound, mode=mode,
                     hold_every_span=False, every_span_a_target=every_span_a_target, rules=DEFAULT_RULES)
    return held, spans_store, counts


def _names(spans: list[ReadableSpan]) -> list[str]:
    return [s.name for s in spans]


def test_a_sampled_trace_is_kept_from_its_retrieval_on_and_only_its_retrieval_waits() -> None:
    adm, store, _ = admission()
    spans = ended_spans()  # retrieve, chat, step 0, rag request (ended in that order)
    waiting = [adm.holds(span) for span in spans]
    assert [s.name for s, w in zip(spans, waiting, strict=True) if w] == ["retrieve"]
    assert store.held == 4 and store.open_traces == 1  # kept for the readers, waiting or not
    [closed] = store.take_closing(30.0)
    assert closed.has_retrieval
    assert _names(closed.spans) == ["retrieve", "chat", "step 0", "rag request"]
    assert _names(closed.targets) == ["retrieve"]


def test_scores_for_the_generation_or_the_root_make_every_kept_span_wait() -> None:
    adm, store, _ = admission(every_span_a_target=True)
    spans = ended_spans()
    assert [adm.holds(span) for span in spans] == [True] * 4
    [closed] = store.take_closing(30.0)
    assert closed.targets == closed.spans


def _agent_trace(retrievals: int, agent: bool) -> list[ReadableSpan]:
    """A root (an agent's run, or a plain request) above `retrievals` retrieval spans and one chat span."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("run") as root:
        if agent:
            root.set_attribute("gen_ai.operation.name", "invoke_agent")
        for i in range(retrievals):
            with tracer.start_as_current_span(f"search {i}") as r:
                r.set_attribute("gen_ai.operation.name", "retrieval")
                r.set_attribute("gen_ai.retrieval.documents", '[{"content": "a passage"}]')
        with tracer.start_as_current_span("chat") as g:
            g.set_attribute("gen_ai.operation.name", "chat")
    provider.shutdown()
    return list(exporter.get_finished_spans())


@pytest.mark.parametrize(
    ("retrievals", "agent", "waiting"),
    [
        (1, False, ["search 0"]),
        (2, False, ["search 0", "search 1", "run"]),  # the root may get the searches' roll-up
        (1, True, ["search 0", "run"]),  # an agent's run gets its searches' roll-up
    ],
)
def test_the_spans_a_roll_up_may_be_written_on_wait_too(retrievals: int, agent: bool, waiting: list[str]) -> None:
    adm, store, _ = admission()
    spans = _agent_trace(retrievals, agent)
    assert [s.name for s in spans if adm.holds(s)] == waiting
    [closed] = store.take_closing(30.0)
    assert _names(closed.targets) == waiting and len(closed.spans) == retrievals + 2


def test_an_unsampled_trace_goes_on_and_its_root_is_counted() -> None:
    adm, store, counts = admission(rate=0.0)
    assert not any(adm.holds(span) for span in ended_spans())
    assert store.held == 0 and counts.decisions() == {"not_sampled": 1}


def test_a_trace_with_nothing_to_read_is_never_held() -> None:
    adm, store, counts = admission()
    assert not any(adm.holds(span) for span in ended_spans("plain"))
    assert store.held == 0 and counts.decisions() == {"not_rag": 1}


def test_link_mode_keeps_a_reference_and_lets_the_span_go_on() -> None:
    adm, store, _ = admission(kind=Link)
    assert not any(adm.holds(span) for span in ended_spans())
    assert store.held == 4


def test_after_stop_holding_every_span_goes_on() -> None:
    adm, store, _ = admission()
    adm.stop_holding()
    assert not any(adm.holds(span) for span in ended_spans())
    assert store.held == 0


def test_a_retrieval_span_over_the_limits_goes_on_at_the_next_tick_saying_why() -> None:
    adm, store, counts = admission(max_held_spans=0)
    spans = ended_spans()
    assert adm.holds(spans[0])  # the retrieval: kept to say queue_full on it at the next tick
    assert [why for _, why in store.take_refused()] == ["overflow"]
    assert counts.decisions() == {"queue_full": 1}
    assert adm.admit(spans[1:]) == spans[1:]  # its trace was turned away: the rest goes on now
