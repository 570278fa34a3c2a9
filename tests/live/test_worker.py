"""The scoring worker's loop outlives whatever a job raises, in the thread and in a scoring process."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from ragtrace.scoring import ContextPrecision, JudgeUsage, RagSample, ScoreResult, Verdicts
from tests.live.fakes import Rig, rag_trace
from tests.live.test_processor import wait_until


@pytest.mark.parametrize("worker", ["thread", "process"])
@pytest.mark.parametrize("behaviour", ["exit", "interrupt"])
def test_a_judge_raising_system_exit_or_keyboard_interrupt_costs_its_score_not_the_worker(
    rig: Callable[..., Rig], worker: str, behaviour: str
) -> None:
    # SystemExit and KeyboardInterrupt are no Exception: asyncio re-raises them out of the worker's loop,
    # which would end it, and every trace held after that would wait for a flush.
    r = rig(worker=worker, score_deadline=30.0)
    failing = rag_trace(r.tracer, query=f"{behaviour}: q")
    assert wait_until(lambda: len(r.out.spans) == len(failing), timeout=20)
    scored = rag_trace(r.tracer, query="fast: what is good?")
    assert wait_until(lambda: len(r.out.spans) == len(failing) + len(scored), timeout=20)  # no flush
    assert r.exported_once(failing + scored)
    statuses = sorted(r.retrieval_status().values(), key=str)
    assert statuses == [("error", "judge_error"), ("scored", None)]
    assert r.proc.decisions == {"error": 2, "scored": 2}


@dataclass(frozen=True)
class ExitingPrecision(ContextPrecision):
    """A scorer with a bug of the worst kind: it calls sys.exit() where it should raise."""

    def score(self, sample: RagSample, verdicts: Verdicts, usage: JudgeUsage | None = None) -> ScoreResult:
        raise SystemExit(2)


@pytest.mark.parametrize("worker", ["thread", "process"])
def test_a_scorer_raising_system_exit_costs_its_score_not_the_worker(rig: Callable[..., Rig], worker: str) -> None:
    r = rig(worker=worker, scorers=[ExitingPrecision()], score_deadline=30.0)
    first = rag_trace(r.tracer)
    assert wait_until(lambda: len(r.out.spans) == len(first), timeout=20)
    second = rag_trace(r.tracer)
    assert wait_until(lambda: len(r.out.spans) == len(first) + len(second), timeout=20)  # no flush
    assert r.exported_once(first + second)
    assert set(r.retrieval_status().values()) == {("error", "internal_error")}
    assert r.proc.decisions == {"error": 2}
