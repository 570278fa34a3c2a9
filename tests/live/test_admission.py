"""Admission, span by span, on a real store: what is held, what goes on now, what is counted."""

from __future__ import annotations

from ragtrace.capture import DEFAULT_RULES
from ragtrace.live.admission import Admission
from ragtrace.live.counts import Counts
from ragtrace.live.modes import Enrich, Link, Mode
from ragtrace.live.sampling import Sampler
from ragtrace.live.store import SpanStore
from tests.live.seams import ended_spans


def admission(rate: float = 1.0, kind: type[Mode] = Enrich, **store: int) -> tuple[Admission, SpanStore, Counts]:
    spans_store = SpanStore(max_held_spans=store.get("max_held_spans", 100), max_open_traces=10)
    counts = Counts()
    mode = kind(reason_max_chars=500, model="m", prompt_version="v", rules=DEFAULT_RULES)
    held = Admission(spans_store, counts, trace_id_bound=Sampler(rate=rate).trace_id_bound, mode=mode,
                     hold_every_span=False, rules=DEFAULT_RULES)
    return held, spans_store, counts


def test_a_sampled_trace_is_held_from_its_retrieval_on() -> None:
    adm, store, _ = admission()
    spans = ended_spans()  # retrieve, chat, step 0, rag request (ended in that order)
    held = [adm.holds(span) for span in spans]
    assert [s.name for s, h in zip(spans, held, strict=True) if h] == ["retrieve", "chat", "step 0", "rag request"]
    assert store.held == 4 and store.open_traces == 1
    [closed] = store.take_closing(30.0)
    assert closed.has_retrieval


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
