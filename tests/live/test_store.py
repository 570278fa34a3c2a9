"""SpanStore: `held` counts what the store holds, and only the store changes it; the memory of closed traces."""

from __future__ import annotations

from ragtrace.live.store import PendingTrace, SpanStore


def _add_trace(store: SpanStore, trace_id: int, n: int) -> None:
    span = object()  # the store never looks inside a span
    for i in range(n):
        assert store.add(span, trace_id, is_root=i == n - 1, is_retrieval=True) == "held"  # type: ignore[arg-type]


def test_held_follows_the_spans_from_open_to_pending_to_gone() -> None:
    store = SpanStore(max_held_spans=10, max_open_traces=10)
    _add_trace(store, 7, 3)
    assert store.held == 3
    [closed] = store.take_closing(30.0)
    assert (closed.trace_id, len(closed.spans), closed.has_retrieval) == (7, 3, True)
    assert store.held == 0  # out of the store: no longer counted
    assert store.put_pending(PendingTrace(7, closed.spans, closed.targets, deadline=1e18, counted=3))
    assert store.held == 3  # parked while judged (enrich mode)
    [taken] = store.take_pending_many([7])
    assert taken is not None and taken.spans == closed.spans
    assert store.held == 0 and store.take_pending_many([7]) == [None]  # once


def test_a_link_mode_pending_trace_keeps_its_spans_uncounted() -> None:
    store = SpanStore(max_held_spans=10, max_open_traces=10)
    _add_trace(store, 7, 2)
    [closed] = store.take_closing(30.0)
    assert store.put_pending(PendingTrace(7, closed.spans, closed.targets, deadline=0.0, counted=0))
    assert store.held == 0 and store.pending_traces == 1
    assert [p.trace_id for p in store.pop_expired(1.0)] == [7]
    assert store.held == 0


def test_a_parked_trace_id_is_parked_once_and_nothing_after_shutdown() -> None:
    store = SpanStore(max_held_spans=10, max_open_traces=10)
    assert store.put_pending(PendingTrace(1, [], [], deadline=0.0, counted=0))
    assert not store.put_pending(PendingTrace(1, [], [], deadline=0.0, counted=0))
    _add_trace(store, 2, 2)
    open_traces, pending = store.shut_down()
    assert [t.trace_id for t in open_traces] == [2] and [p.trace_id for p in pending] == [1]
    assert store.held == 0
    assert not store.put_pending(PendingTrace(3, [], [], deadline=0.0, counted=0))
    assert store.add(object(), 4, is_root=True) == "late"  # type: ignore[arg-type]


def test_closed_trace_ids_are_remembered_oldest_out() -> None:
    """A late span of a recently closed trace passes straight through; the memory keeps the newest
    4 x max_open_traces ids."""
    store = SpanStore(max_held_spans=100, max_open_traces=2)
    span = object()  # the store never looks inside a span
    for trace_id in range(20):  # traces that end with nothing held: their ids are remembered
        assert store.add(span, trace_id, is_root=True, opens=False) == "passed"  # type: ignore[arg-type]
    for trace_id in range(12, 20):
        assert store.add(span, trace_id, is_root=False) == "late"  # type: ignore[arg-type]
    for trace_id in range(12):  # forgotten: their spans are taken as a new trace's
        assert store.add(span, trace_id, is_root=True, opens=False) == "passed"  # type: ignore[arg-type]
