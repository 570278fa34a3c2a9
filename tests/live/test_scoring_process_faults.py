"""worker="process" under faults of the scoring process itself: stopped (SIGSTOP), killed (SIGKILL), or
never answering. Nothing blocks past its deadline, every span leaves once, and each sampled retrieval span
says what became of it."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator

import pytest

from ragtrace.live.scoring_process.parent import GRACE_S
from tests.live.fakes import Rig, open_rag_trace, rag_trace


def retrieval_status(r: Rig) -> dict[int, tuple[object, object]]:
    return r.retrieval_status()


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, what
        time.sleep(0.01)
    return time.monotonic() - start


@pytest.fixture
def stopped() -> Iterator[list[int]]:
    """Pids the test stopped: continued (and so killable by the pipeline's own stop) afterwards."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def started(r: Rig) -> int:
    """Wait until the scoring process has scored a trace; its pid."""
    ids = rag_trace(r.tracer)
    r.settle(len(ids))
    assert retrieval_status(r)[ids[1]] == ("scored", None)
    pid = r.proc.scoring.judging.process.pid
    assert pid is not None
    return pid


@pytest.mark.parametrize("placement", ["processor", "exporter"])
def test_a_stopped_scoring_process_times_out_its_traces_and_is_replaced(
    rig: Callable[..., Rig], stopped: list[int], placement: str
) -> None:
    """SIGSTOP: the pipe to the child fills up (some MB of traces), the worker thread never blocks on it,
    the traces time out within score_deadline + grace, and a new child scores what comes next."""
    deadline = 0.5
    r = rig(placement=placement, worker="process", score_deadline=deadline, max_queue=10_000)
    old_pid = started(r)
    os.kill(old_pid, signal.SIGSTOP)
    stopped.append(old_pid)
    big = ("good doc " * 2000, "bad doc " * 2000)  # ~35 kB a trace: the 64 kB pipe is full after two
    sent = time.monotonic()
    ids = [i for n in range(100) for i in rag_trace(r.tracer, query=f"fast: q{n}", docs=big)]
    retrievals = ids[1::4]
    recovered = wait_for(
        lambda: all(i in retrieval_status(r) for i in retrievals), deadline + GRACE_S + 5, "not timed out in time"
    )
    assert time.monotonic() - sent < deadline + GRACE_S + 5
    status = retrieval_status(r)
    assert {status[i] for i in retrievals} == {("timeout", "scoring_process_unresponsive")}
    assert r.proc.decisions["timeout"] == len(retrievals)
    process = r.proc.scoring.judging.process
    wait_for(lambda: process.alive and process.pid not in (None, old_pid), 10, "no new scoring process")
    after = rag_trace(r.tracer)
    r.settle(len(ids) + len(after) + 4)
    assert retrieval_status(r)[after[1]] == ("scored", None)
    r.assert_exactly_once(r.out.ids()[:4] + ids + after)
    assert recovered < deadline + GRACE_S + 5


@pytest.mark.parametrize("placement", ["processor", "exporter"])
def test_a_late_tick_says_unresponsive_too(rig: Callable[..., Rig], stopped: list[int], placement: str) -> None:
    """Issue 30, item 16: on a loaded machine a tick can start just before the trace's deadline (the
    silence check sees nothing overdue) and release the trace just after it: the trace said judge_timeout
    where an idle machine says scoring_process_unresponsive. The trace's release now asks the same
    question; this drives that order on the worker thread itself, with no tick in between."""
    r = rig(placement=placement, worker="process", score_deadline=0.5)
    pid = started(r)
    os.kill(pid, signal.SIGSTOP)
    stopped.append(pid)
    scoring = r.proc.scoring
    ids = rag_trace(r.tracer)
    wait_for(lambda: scoring.store.pending_traces > 0, 10, "the trace was not shipped")

    def release_after_the_deadline() -> None:
        deadline = scoring.store.first_deadline()
        assert deadline is not None
        time.sleep(max(deadline - time.monotonic(), 0.0) + 0.01)
        for pending in scoring.store.pop_expired(time.monotonic()):
            scoring.pipeline.time_out(pending)

    assert scoring.worker.call(release_after_the_deadline, 0.5 + GRACE_S + 5)
    r.settle(len(ids) + 4)
    assert retrieval_status(r)[ids[1]] == ("timeout", "scoring_process_unresponsive")
    assert r.proc.decisions["timeout"] == 1


@pytest.mark.parametrize("placement", ["processor", "exporter"])
def test_flush_and_shutdown_return_in_time_with_a_stopped_scoring_process(
    rig: Callable[..., Rig], stopped: list[int], placement: str
) -> None:
    deadline = 1.0
    r = rig(placement=placement, worker="process", score_deadline=deadline)
    pid = started(r)
    os.kill(pid, signal.SIGSTOP)
    stopped.append(pid)
    ids = rag_trace(r.tracer)
    start = time.monotonic()
    r.flush(300)
    assert time.monotonic() - start < 0.3 + 0.5  # the flush's own timeout, and a little
    assert retrieval_status(r)[ids[1]] == ("timeout", "judge_timeout")
    more = rag_trace(r.tracer)
    start = time.monotonic()
    r.close()
    assert time.monotonic() - start < deadline + 1.0  # score_deadline, and stopping the child
    assert retrieval_status(r)[more[1]][0] == "timeout"
    r.assert_exactly_once(r.out.ids()[:4] + ids + more)


@pytest.mark.parametrize("placement", ["processor", "exporter"])
def test_a_killed_scoring_process_leaves_a_status_on_its_retrieval_spans(
    rig: Callable[..., Rig], placement: str
) -> None:
    r = rig(placement=placement, worker="process", score_deadline=30.0)
    old_pid = started(r)
    hung = [i for n in range(5) for i in rag_trace(r.tracer, query=f"hang: q{n}")]
    wait_for(lambda: r.proc.queue_depth == 5, 5, "the traces did not reach the scoring process")
    os.kill(old_pid, signal.SIGKILL)
    wait_for(lambda: all(i in retrieval_status(r) for i in hung[1::4]), 5, "the killed child's traces are held")
    status = retrieval_status(r)
    assert {status[i] for i in hung[1::4]} == {("error", "scoring_process_lost")}


@pytest.mark.parametrize("worker", ["thread", "process"])
@pytest.mark.parametrize("placement", ["processor", "exporter"])
def test_a_flush_that_gives_up_says_timeout_on_the_retrieval_spans(
    rig: Callable[..., Rig], worker: str, placement: str
) -> None:
    r = rig(placement=placement, worker=worker, score_deadline=30.0)
    started_ids = rag_trace(r.tracer)
    r.settle(len(started_ids))
    ids = rag_trace(r.tracer, query="hang: q", retrievals=2)
    r.flush(200)
    status = retrieval_status(r)
    assert {status[ids[1]], status[ids[3]]} == {("timeout", "judge_timeout")}
    r.assert_exactly_once(started_ids + ids)


@pytest.mark.parametrize("worker", ["thread", "process"])
def test_retrieval_spans_of_a_full_queue_say_so(rig: Callable[..., Rig], worker: str) -> None:
    r = rig(worker=worker, score_deadline=30.0, max_queue=1, tick_interval=0.2)
    started_ids = rag_trace(r.tracer)
    r.settle(len(started_ids))
    ids = [rag_trace(r.tracer, query=f"hang: q{n}") for n in range(3)]
    wait_for(lambda: sum(1 for s in retrieval_status(r).values() if s == ("skipped", "queue_full")) >= 2, 5,
             "no queue_full status")
    r.flush(100)
    status = retrieval_status(r)
    assert sorted(status[t[1]] for t in ids) == [
        ("skipped", "queue_full"), ("skipped", "queue_full"), ("timeout", "judge_timeout")
    ]


@pytest.mark.parametrize("placement", ["processor", "exporter"])
def test_retrieval_spans_the_limits_turn_away_say_so(rig: Callable[..., Rig], placement: str) -> None:
    """max_held_spans reached: the next traces' spans go on unheld, their retrieval spans saying why."""
    r = rig(placement=placement, max_held_spans=3, score_deadline=30.0)
    held, _ = open_rag_trace(r.tracer, query="fast: q", plain=0)  # root open: its 2 spans stay held
    turned_away = [rag_trace(r.tracer, query=f"fast: q{n}", retrievals=2) for n in range(3)]
    held.end()
    r.flush(2000)
    status = retrieval_status(r)
    assert {status[t[i]] for t in turned_away for i in (1, 3)} == {("skipped", "queue_full")}
    r.assert_exactly_once(r.out.ids())
    assert r.proc.held_spans == 0
