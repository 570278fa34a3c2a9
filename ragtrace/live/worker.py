"""The background worker: an asyncio loop in its own daemon thread that runs scoring jobs.

Judging is slow (an LLM call) and the app must never wait for it, so every job runs here, under a
concurrency limit and a deadline. The loop also runs the processor's periodic `tick` (closing traces,
releasing expired ones). Instrumentation is suppressed in this thread so the judge's own HTTP calls are
not traced back into the pipeline they serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from ragtrace._logs import ragtrace_logger
from ragtrace._untraced import suppress_tracing
from ragtrace.judges.base import Judge
from ragtrace.judges.identity import judge_identity
from ragtrace.judges.run import judge_and_score
from ragtrace.live.enrich import Evaluation
from ragtrace.scoring import JudgeUsage, RagSample, Scorer, ScoreResult, timed_out

logger = ragtrace_logger(__name__)

# How often a busy worker closes traces and ships or schedules them. Each tick has costs of its own (a
# pass of the loop, a message each way to a scoring process), so fewer ticks with more traces each cost
# the app less: at 10 % sampling, 0.2 s against 0.05 s gives the app 1.5 % more throughput with the
# scoring process and 2-3 % with the thread (bench/tick_interval.py, two runs). A sampled trace waits up
# to a tick longer for export, a small part of the 5 s a BatchSpanProcessor waits by default.
DEFAULT_TICK_S = 0.2

# An idle worker (its tick found nothing held and no job runs) ticks half as often each time, down to
# once a second: each wake-up of the thread costs the app's process CPU, holding or not.
IDLE_TICK_MAX_S = 1.0


@dataclass(frozen=True, slots=True)
class ScoreJob:
    """One sample to judge before `deadline` (time.monotonic); `on_done` runs on the worker thread."""

    sample: RagSample
    scorers: tuple[Scorer, ...]
    deadline: float
    on_done: Callable[[Evaluation, float], None]  # (evaluation, judge duration in seconds)


def _results_at_deadline(job: ScoreJob) -> tuple[ScoreResult, ...]:
    results: list[ScoreResult] = []
    for scorer in job.scorers:
        reason = scorer.skip_reason(job.sample)
        results.append(
            scorer.skipped(reason) if reason else timed_out(scorer.name)
        )
    return tuple(results)


class ScoringWorker:
    """Runs `ScoreJob`s with at most `concurrency` at once and at most `max_queue` queued or running."""

    def __init__(
        self,
        judge: Judge,
        *,
        concurrency: int = 8,
        max_queue: int = 1000,
        on_tick: Callable[[], bool] | None = None,
        tick_interval: float = DEFAULT_TICK_S,
    ) -> None:
        self._judge = judge
        self._model = str(getattr(judge, "model", ""))
        self._prompt_version = str(getattr(judge, "prompt_version", ""))
        self._judge_id: str | None = None  # worked out on the loop's thread, at the first job
        self._concurrency = concurrency
        self.max_queue = max_queue
        self._on_tick = on_tick
        self._tick_interval = tick_interval
        self._next_tick = tick_interval
        self.ticks = 0  # ticks run so far
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sem: asyncio.Semaphore | None = None
        self._ready = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._main, name="ragtrace-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(5.0)

    @property
    def depth(self) -> int:
        """Jobs queued or running."""
        return len(self._tasks)

    @property
    def on_loop(self) -> bool:
        return threading.current_thread() is self._thread

    # --- called on the loop thread ----------------------------------------------------------------

    def submit(self, job: ScoreJob) -> bool:
        """Queue a job (loop thread only). False when the queue is full or the worker stopped."""
        loop = self._loop
        if loop is None or self._stopped or len(self._tasks) >= self.max_queue:
            return False
        task = loop.create_task(self._run(job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _run(self, job: ScoreJob) -> None:
        started = time.monotonic()
        expired = False
        results: tuple[ScoreResult, ...] = ()
        usage = JudgeUsage()
        try:
            async with asyncio.timeout(max(job.deadline - started, 0.0)):
                assert self._sem is not None
                async with self._sem:
                    scores = await judge_and_score(job.sample, job.scorers, self._judge, judge_id=self.judge_id)
            results, usage = scores.results, scores.usage
        except (TimeoutError, asyncio.CancelledError):
            expired = True
            results = _results_at_deadline(job)
        except GeneratorExit:  # the coroutine is being closed: it must not go on
            raise
        except BaseException as exc:
            # A scorer bug costs the score, never the worker: asyncio re-raises a SystemExit or a
            # KeyboardInterrupt out of the loop, which would end it and leave every held trace waiting.
            logger.exception("ragtrace: scoring failed")
            results = tuple(s.failed("internal_error", f"{type(exc).__name__}: {exc}") for s in job.scorers)
        evaluation = Evaluation(
            results, usage, expired, self._model, self._prompt_version, judge_id=self._judge_id or ""
        )
        try:
            job.on_done(evaluation, time.monotonic() - started)
        except Exception:
            logger.exception("ragtrace: handling a score failed")

    @property
    def judge_id(self) -> str:
        """`ragtrace.judge.id` of this worker's judge, worked out once (the local judge digests its model
        files; they are read once per process) and logged, so a log says which judge scored from here on."""
        if self._judge_id is None:
            try:
                identity = judge_identity(self._judge)
            except Exception:  # a judge whose identity cannot be read still scores, without an id
                logger.exception("ragtrace: the judge's identity could not be worked out")
                self._judge_id = ""
            else:
                self._judge_id = identity.id
                logger.info("ragtrace: scoring with judge %s", identity.describe())
        return self._judge_id

    def _tick(self) -> None:
        """Run `on_tick` (which says whether anything is still in progress) and schedule the next."""
        busy = True
        self.ticks += 1
        if self._on_tick is not None:
            try:
                busy = self._on_tick()
            except Exception:
                logger.exception("ragtrace: worker tick failed")
        if busy or self._tasks:
            self._next_tick = self._tick_interval
        else:
            self._next_tick = min(self._next_tick * 2, max(IDLE_TICK_MAX_S, self._tick_interval))
        if self._loop is not None and not self._stopped:
            self._loop.call_later(self._next_tick, self._tick)

    def _main(self) -> None:
        suppress_tracing()  # for good: this thread only judges and forwards
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._sem = asyncio.Semaphore(self._concurrency)
        loop.call_soon(self._tick)
        self._ready.set()
        try:
            loop.run_forever()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                loop.run_until_complete(asyncio.wait(list(self._tasks), timeout=1.0))
            loop.run_until_complete(loop.shutdown_asyncgens())  # as asyncio.run: judges' HTTP sessions close
        except Exception:
            logger.exception("ragtrace: worker loop failed")
        finally:
            loop.close()

    # --- called from any thread -------------------------------------------------------------------

    def call(self, fn: Callable[[], object], timeout: float) -> bool:
        """Run `fn` on the loop thread and wait for it; False if it did not finish in time."""
        if self.on_loop:
            fn()
            return True
        loop = self._loop
        if loop is None or self._stopped or not self._thread.is_alive():
            return False

        async def _call() -> None:
            fn()

        try:
            asyncio.run_coroutine_threadsafe(_call(), loop).result(max(timeout, 0.0))
        except FutureTimeout:
            return False
        except Exception:
            logger.exception("ragtrace: call on the worker failed")
            return False
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel what is running and end the thread. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        loop = self._loop
        if loop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(loop.stop)
            if not self.on_loop:
                self._thread.join(timeout)
