"""`LiveScoring`: one live scoring pipeline and what runs it, behind either face.

It assembles the pieces (the store, the counts, admission, the pipeline, the worker thread, and the
judging: jobs on that thread or a scoring process) and owns their life: flush, shutdown, and a fresh
start in a forked child. The faces (`RagScoringSpanProcessor`, `RagScoringSpanExporter`) give it spans
and a sink, and show its counts (`ScoringFace`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref

from ragtrace._logs import ragtrace_logger
from ragtrace.live.admission import Admission
from ragtrace.live.announce import nothing_scored_line, say
from ragtrace.live.counts import Counts
from ragtrace.live.evaluation_logs import EvaluationResults
from ragtrace.live.jobs import ThreadJudging
from ragtrace.live.modes import Enrich, Link, Mode
from ragtrace.live.options import ScoringOptions
from ragtrace.live.pipeline import Judging, Pipeline, Sink
from ragtrace.live.scoring_process.parent import ProcessJudging
from ragtrace.live.store import SpanStore
from ragtrace.live.worker import ScoringWorker

logger = ragtrace_logger(__name__)


class LiveScoring:
    """Admission for the spans, the pipeline for closed traces, a worker to run it; counts to read."""

    def __init__(self, options: ScoringOptions, sink: Sink) -> None:
        self.options = options
        self.store = SpanStore(max_held_spans=options.max_held_spans, max_open_traces=options.max_open_traces)
        self.counts = Counts()
        self.sink = sink
        # Enrich or link, chosen here once: admission and the pipeline ask the mode, never the options.
        self.mode: Mode = (Enrich if options.enrich else Link)(
            reason_max_chars=options.reason_max_chars, model=options.model,
            prompt_version=options.prompt_version, rules=options.capture_rules,
            results=EvaluationResults(options.evaluation_results, options.logger_provider),
        )
        self.admission = Admission(
            self.store, self.counts, trace_id_bound=options.sampler.trace_id_bound, mode=self.mode,
            hold_every_span=options.extractor is not None,
            every_span_a_target=options.target != "retrieval" or options.hold_whole_trace, rules=options.capture_rules,
        )
        self._shutdown = False
        self._shutdown_lock = threading.Lock()
        self.worker, self.judging, self.pipeline = self._start()
        if hasattr(os, "register_at_fork"):  # like the SDK's BatchSpanProcessor: a fresh worker per child
            after_fork = weakref.WeakMethod(self._after_fork_in_child)
            os.register_at_fork(after_in_child=lambda: (method := after_fork()) and method())
        if options.metrics is not None:
            try:
                options.metrics.observe(lambda: self.judging.depth, lambda: self.store.held)
            except Exception:
                logger.exception("ragtrace: metrics.observe failed")

    def _start(self) -> tuple[ScoringWorker, Judging, Pipeline]:
        options = self.options
        ticks: list[Pipeline] = []  # the worker ticks the pipeline, which is built with the worker's judging
        worker = ScoringWorker(
            options.judge, concurrency=options.concurrency, max_queue=options.max_queue,
            on_tick=lambda: ticks[0].tick() if ticks else True, tick_interval=options.tick_interval,
        )
        judging: Judging
        if options.worker == "process":
            try:
                judging = ProcessJudging(options, worker, shutting_down=lambda: self._shutdown)
            except BaseException:
                worker.stop()
                raise
        else:
            judging = ThreadJudging(options, worker)
        pipeline = Pipeline(options, self.store, self.counts, self.sink, judging, self.mode)
        ticks.append(pipeline)
        worker.start()
        return worker, judging, pipeline

    def _after_fork_in_child(self) -> None:
        """The worker thread does not survive fork, and the parent releases what it held: start empty."""
        self.store.reset()
        self.counts.after_fork()
        self.sink.after_fork()
        self._shutdown_lock = threading.Lock()
        if isinstance(self.judging, ProcessJudging):
            self.judging.abandon()
        if not self._shutdown:
            self.worker, self.judging, self.pipeline = self._start()

    # --- flush and shutdown ---------------------------------------------------------------------------

    def flush(self, timeout_millis: int) -> bool:
        """Score what can be scored within the timeout, release everything held, flush the sink; False when
        some of it did not go within the timeout."""
        deadline = time.monotonic() + timeout_millis / 1000
        settled = True
        try:
            if not self._shutdown:
                settled = self.pipeline.settle(deadline, self.worker.call)
        except Exception:
            settled = False
            logger.exception("ragtrace: force_flush failed")
        remaining = max(int((deadline - time.monotonic()) * 1000), 0)
        try:
            return bool(self.sink.flush(remaining)) and settled
        except Exception:
            logger.exception("ragtrace: flushing the wrapped processor or exporter failed")
            return False

    def shutdown(self) -> None:
        """Settle (waiting at most `score_deadline`), stop the worker and the judging within what is left
        of it, shut the sink down."""
        with self._shutdown_lock:
            if self._shutdown:
                return
            self._shutdown = True
        self.admission.stop_holding()
        deadline = time.monotonic() + self.options.score_deadline
        try:
            self.pipeline.settle(deadline, self.worker.call)
            if (line := nothing_scored_line(self.counts.decisions(), self.options.sampler.rate)) is not None:
                say(line, logging.WARNING)  # a problem to fix, seen at an app's default WARNING level too
            self.worker.stop(_left(deadline))
            self.pipeline.shut_down()
            # Settling released everything: what the judging still does has no trace left to go to.
            self.judging.stop(min(_left(deadline), STOP_MAX_S))
            if self.options.metrics is not None:
                self.options.metrics.shutdown()
        except Exception:
            logger.exception("ragtrace: shutdown failed")
        try:
            self.sink.shutdown()
        except Exception:
            logger.exception("ragtrace: shutting the wrapped processor or exporter down failed")


# Stopping the worker or the scoring process gets at least this long, even when settling used the whole
# deadline: a thread or process that does not stop in time is left (a daemon thread) or killed.
STOP_MIN_S = 0.5
# A scoring process gets at most this long to exit after the settling, then it is killed.
STOP_MAX_S = 2.0


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), STOP_MIN_S)


class ScoringFace:
    """What both faces show of their `scoring`: the counts, for tests, health checks and benches."""

    scoring: LiveScoring

    @property
    def decisions(self) -> dict[str, int]:
        """Decision counts so far (the same numbers as the `ragtrace.evaluation.decisions` counter)."""
        return self.scoring.counts.decisions()

    @property
    def capture_counts(self) -> dict[str, int]:
        """Why spans could not be read (`invalid_documents_json`, ...), as counted by capture."""
        return self.scoring.counts.capture()

    @property
    def held_spans(self) -> int:
        return self.scoring.store.held

    @property
    def open_traces(self) -> int:
        return self.scoring.store.open_traces

    @property
    def queue_depth(self) -> int:
        """Jobs queued or running; with worker="process", traces out at the scoring process."""
        return self.scoring.judging.depth
