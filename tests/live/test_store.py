"""SpanStore: the drain signal force_flush waits on instead of polling; the memory of closed traces."""

from __future__ import annotations

import threading

from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import TraceFlags

from ragtrace.live.enrich import Evaluation
from ragtrace.live.store import PendingTrace, SampleRef, SpanStore
from ragtrace.scoring import JudgeUsage


def _pending(trace_id: int, deadline: float = 1e18) -> PendingTrace:
    return PendingTrace(
        trace_id=trace_id, spans=[], deadline=deadline, resource=Resource.get_empty(),
        trace_flags=TraceFlags(1), waiting={0: SampleRef(target=1, names=("context_precision",), retriever="r")},
    )


def test_wait_drained_is_true_at_once_when_nothing_is_pending() -> None:
    assert SpanStore(max_held_spans=10, max_open_traces=10).wait_drained(0.0)


def test_wait_drained_times_out_while_a_trace_waits_for_scores() -> None:
    store = SpanStore(max_held_spans=10, max_open_traces=10)
    assert store.put_pending(7, _pending(7))
    assert not store.wait_drained(0.01)


def test_the_last_recorded_score_wakes_the_waiter() -> None:
    store = SpanStore(max_held_spans=10, max_open_traces=10)
    assert store.put_pending(7, _pending(7))
    woke = threading.Event()

    def wait() -> None:
        if store.wait_drained(30.0):
            woke.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    recorded = store.record(7, 0, Evaluation(results=(), usage=JudgeUsage()))
    waiter.join(30.0)
    assert recorded is not None and recorded[2]  # it was the trace's last job
    assert woke.is_set()


def test_expiry_and_close_wake_the_waiter_too() -> None:
    store = SpanStore(max_held_spans=10, max_open_traces=10)
    store.put_pending(1, _pending(1, deadline=0.0))
    assert [p.trace_id for p in store.pop_expired(1.0)] == [1]
    assert store.wait_drained(0.0)
    store.put_pending(2, _pending(2))
    store.close()
    assert store.wait_drained(0.0)


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
