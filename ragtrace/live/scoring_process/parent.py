"""The app's side of `worker="process"`: the scoring process, and the judging that sends traces to it.

In CPython the scoring thread's Python work holds the app's GIL (see docs/overhead.md). With
`worker="process"` the app's process keeps only what must stay there: it holds the spans of sampled traces,
sends each closed RAG trace to a child process as plain data, and turns the child's answers into the
verdicts the pipeline writes onto the spans it releases. Capture, per-scorer sampling, admission,
redaction, judging and scoring run in the child (`child.py`, the same `TraceJudging` as the thread
worker's), under a GIL of its own.

The child is `python -m ragtrace.live.scoring_process.child`, not a multiprocessing child: the spawn
method re-imports the app's main module, and fork copies a threaded process.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from opentelemetry.sdk.trace import ReadableSpan

from ragtrace._logs import ragtrace_logger
from ragtrace.live.modes import INTERNAL_ERROR, JUDGE_TIMED_OUT, QUEUE_FULL, Outcome, Verdict
from ragtrace.live.options import ScoringOptions
from ragtrace.live.scoring_process.protocol import (
    APP_SDK_SWITCH,
    HEADER,
    Answers,
    ChildSettings,
    events_of,
    frame,
    importable_pickle,
    plain_traces,
)
from ragtrace.live.store import PendingTrace
from ragtrace.live.worker import ScoringWorker

logger = ragtrace_logger(__name__)

# The app's process gives the scoring process this long beyond `score_deadline` (after which the child
# answers with a timeout itself) before it releases a trace unscored.
GRACE_S = 2.0
# A scoring process that exits is started again after 1 s, then after twice as long each time it fails
# again, up to this (a judge that cannot be imported should not cost a process start every tick).
RESTART_MAX_S = 60.0
# What the spans of a child's traces say when the child is gone, or killed for answering nothing.
LOST: Outcome = ("error", "scoring_process_lost")
UNRESPONSIVE: Outcome = ("timeout", "scoring_process_unresponsive")
# Shipped traces the pipe has not taken (the child reads slower than traces close) are bounded: beyond
# this many bytes, newly closed traces are released unjudged, as queue_full.
MAX_BACKLOG_BYTES = 64 << 20


def _child_environment() -> dict[str, str]:
    """The app's environment, with the app's own path (so that `-m` finds the same ragtrace; sys.path
    itself follows), and with tracing off: the scoring process is not an app to trace or score, and an
    `opentelemetry-instrument` hook there would install ragtrace, which would start a scoring process."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "RAGTRACE_ENABLED": "false",
        "OTEL_SDK_DISABLED": "true",
        APP_SDK_SWITCH: os.environ.get("OTEL_SDK_DISABLED", ""),
    }


def _readable(fd: int, timeout: float) -> bool:
    """Whether `fd` has data (or end of file) within `timeout` seconds. poll(), not select(): an app with
    many open files gives the pipe a descriptor above select()'s limit of 1024."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


def _poll(read_fd: int, write_fd: int | None, timeout: float) -> tuple[bool, bool]:
    """(readable, writable) within `timeout` seconds: answers to read, or room in the pipe to the child."""
    poller = select.poll()
    poller.register(read_fd, select.POLLIN)
    if write_fd is not None:
        poller.register(write_fd, select.POLLOUT)
    readable = writable = False
    for fd, events in poller.poll(timeout * 1000):
        if fd == read_fd:
            readable = True
        elif events & (select.POLLOUT | select.POLLERR | select.POLLHUP):
            writable = True
    return readable, writable


class ScoringProcess:
    """The child process and its pipes, seen from the app. `send` ships traces; `receive` returns the
    answers that arrived. Both run on the processor's worker thread, at its ticks: the app's process has
    no thread of its own waiting on the child, since each wake-up of a thread costs the app CPU and GIL.
    `alive` turns False for good when the child exits or a pipe breaks.

    The pipe to the child is non-blocking: a child that stops reading (stopped, wedged) must never hold
    the worker thread. What the pipe does not take waits in `backlog` and goes out as the child reads,
    at the next `send` or `receive`. `last_heard` is when the child last wrote anything."""

    def __init__(self, settings: ChildSettings, command: Sequence[str] | None = None) -> None:
        """`command` runs the child, which gets its two pipes' descriptors as its last two arguments
        (default: this interpreter running `ragtrace.live.scoring_process.child`)."""
        self._settings = importable_pickle(settings)
        self._command = list(command or (sys.executable, "-m", "ragtrace.live.scoring_process.child"))
        self._process: subprocess.Popen[bytes] | None = None
        # Plain file descriptors, no file objects: a forked copy of the app closes its copies without
        # flushing anything into the parent's pipe.
        self._to_child: int | None = None
        self._from_child: int | None = None
        self._received = bytearray()
        self._outgoing = bytearray()
        self._stopping = False
        self.alive = False
        self.last_heard = time.monotonic()

    def start(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            self._process = subprocess.Popen(
                [*self._command, str(to_child_r), str(from_child_w)],
                pass_fds=(to_child_r, from_child_w),
                stdin=subprocess.DEVNULL,
                env=_child_environment(),
            )
        except BaseException:
            for fd in (to_child_w, from_child_r):
                os.close(fd)
            raise
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        os.set_blocking(to_child_w, False)
        self._to_child, self._from_child = to_child_w, from_child_r
        self.alive = True
        self.last_heard = time.monotonic()
        # sys.path first, so that the settings (your judge's class, say) unpickle in the child
        if not (self._send(pickle.dumps(list(sys.path))) and self._send(pickle.dumps(self._settings))):
            raise RuntimeError(f"ragtrace: the scoring process did not start (exit code {self.code})")

    def send(self, traces: Sequence[Sequence[ReadableSpan]]) -> bool:
        """Ship closed traces; False when the child is gone (the caller forwards them unscored). Raises
        when a trace does not pickle, before anything is written."""
        if not self.alive:
            return False
        return self._send(pickle.dumps(plain_traces(traces), protocol=pickle.HIGHEST_PROTOCOL))

    @property
    def backlog(self) -> int:
        """Bytes shipped that the pipe has not taken yet (the child is not reading)."""
        return len(self._outgoing)

    def _send(self, data: bytes) -> bool:
        if self._to_child is None:
            return False
        self._outgoing += frame(data)
        return self._write()

    def _write(self) -> bool:
        """Write what the pipe takes now, never waiting; False when the child is gone (broken pipe)."""
        fd, outgoing = self._to_child, self._outgoing
        if fd is None:
            return False
        try:
            while outgoing:
                del outgoing[: os.write(fd, outgoing)]
        except BlockingIOError:  # the pipe is full: the rest goes at the next send or receive
            pass
        except OSError:  # the child exited (broken pipe)
            self._lost()
            return False
        return True

    def receive(self, timeout: float = 0.0) -> list[Answers]:
        """The answers that arrived, waiting up to `timeout` seconds for the first; meanwhile the pipe
        to the child takes what it can of the backlog."""
        fd = self._from_child
        if fd is None:
            return []
        answers: list[Answers] = []
        end = time.monotonic() + max(timeout, 0.0)
        while True:
            wait = max(end - time.monotonic(), 0.0) if not answers else 0.0
            try:
                ready, writable = _poll(fd, self._to_child if self._outgoing else None, wait)
                if writable and not self._write():
                    return answers
                chunk = os.read(fd, 1 << 20) if ready else b""
            except (OSError, ValueError):
                chunk, ready = b"", True
            if not ready:
                if writable and wait > 0:  # the pipe took more: go on waiting for answers
                    continue
                return answers
            if not chunk:  # end of file: the child exited
                self._lost()
                return answers
            self.last_heard = time.monotonic()
            self._received += chunk
            try:
                answers.extend(self._complete_frames())
            except Exception:  # a garbled stream: this child cannot be trusted any more
                logger.exception("ragtrace: an answer of the scoring process could not be read")
                self.kill("wrote what cannot be read")
                return answers
            end = time.monotonic()  # then take whatever else is there already, without waiting

    def _complete_frames(self) -> list[Answers]:
        frames: list[Answers] = []
        buffer = self._received
        while len(buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(buffer)
            if len(buffer) < HEADER.size + size:
                break
            frames.append(pickle.loads(bytes(buffer[HEADER.size : HEADER.size + size])))
            del buffer[: HEADER.size + size]
        return frames

    def _lost(self) -> None:
        if self.alive and not self._stopping:
            if self._process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._process.wait(0.5)  # for its exit code
            logger.error("ragtrace: the scoring process exited (code %s); its traces are forwarded unscored",
                         self.code)
        self.alive = False

    def kill(self, why: str) -> None:
        """End a child that cannot be trusted or does not answer; SIGKILL ends a stopped process too."""
        if self.alive and not self._stopping:
            logger.error("ragtrace: the scoring process %s; it is killed and its traces forwarded unscored", why)
        self.alive = False
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(0.5)

    def restart(self) -> None:
        """Let the old child go (killed if it still runs) and start a new one with the same settings."""
        self.stop(timeout=1.0)
        self._received = bytearray()
        self._outgoing = bytearray()
        self._stopping = False
        self.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def answers_fd(self) -> int | None:
        """The descriptor the answers arrive on (polled, so it may be above select()'s 1024)."""
        return self._from_child

    @property
    def code(self) -> int | None:
        return self._process.poll() if self._process is not None else None

    def stop(self, timeout: float = 5.0) -> None:
        """Close the pipe (the child finishes what it holds and exits); kill it after `timeout`. Answers
        that still arrive are read and dropped, so that the child never blocks writing them."""
        self._stopping = True
        self.alive = False
        to_child, self._to_child = self._to_child, None
        if to_child is not None:
            os.close(to_child)
        process, from_child = self._process, self._from_child
        deadline = time.monotonic() + timeout
        while process is not None and process.poll() is None and time.monotonic() < deadline:
            if from_child is not None:
                try:
                    if _readable(from_child, 0.05) and not os.read(from_child, 1 << 20):
                        from_child = None  # the child closed its end
                except OSError:
                    from_child = None
            else:
                time.sleep(0.05)
        if process is not None and process.poll() is None:
            process.kill()  # a stopped child too
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(1.0)
        fd, self._from_child = self._from_child, None
        if fd is not None:
            os.close(fd)

    def abandon(self) -> None:
        """In a forked copy of the app: let go of the parent's child without writing to it or stopping it."""
        for fd in (self._from_child, self._to_child):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._to_child = self._from_child = self._process = None
        self.alive = False


class ProcessJudging:
    """`Judging` in the scoring process: it sends the traces taken at a tick in one message, and turns the
    answers it receives into verdicts. A lost child's traces get a verdict saying so (counted as errors)
    and a new child is started, backing off while starts keep failing. A child that owes answers and has
    said nothing for `score_deadline` + grace (stopped, wedged) is killed: its traces time out, and it is
    replaced the same way."""

    def __init__(self, options: ScoringOptions, worker: ScoringWorker, *, shutting_down: Callable[[], bool]) -> None:
        self._options = options
        self._worker = worker
        self._shutting_down = shutting_down
        self.patience = options.score_deadline + GRACE_S
        self._outbox: list[PendingTrace] = []  # traces taken at this tick, for its message (worker thread only)
        self._out: dict[int, float] = {}  # trace id -> deadline, of the traces sent and not answered, oldest first
        self._arrived: list[Verdict] = []
        self._lock = threading.Lock()  # `_out` and `_arrived`: `collect` and `time_out` may run on another thread
        self._restart_at, self._backoff = 0.0, 1.0
        self._lost_as: Outcome = LOST  # what the traces of a child that is gone say
        settings = ChildSettings.of(options)
        try:
            self.process = ScoringProcess(settings)
        except Exception as exc:
            raise ValueError(
                "worker='process' sends the judge, scorers, sampler, redactor and extractor to the scoring "
                f"process, and they must pickle: {type(exc).__name__}: {exc}"
            ) from exc
        self.process.start()

    @property
    def depth(self) -> int:
        return len(self._out) + len(self._outbox)

    def take(self, pending: PendingTrace) -> Verdict | None:
        """Put a parked trace in this tick's message to the scoring process."""
        if self.depth >= self._options.max_queue:
            return Verdict.unjudged(pending.trace_id, QUEUE_FULL, "queue_full")
        self._outbox.append(pending)
        return None

    def ship(self) -> list[Verdict]:
        """Send this tick's traces in one message; the verdicts of those that could not go. While the
        child does not read, what was sent waits in the pipe's backlog, up to a bound."""
        if not self._outbox:
            return []
        outbox, self._outbox = self._outbox, []
        if self.process.backlog > MAX_BACKLOG_BYTES:
            return [Verdict.unjudged(p.trace_id, QUEUE_FULL, "queue_full") for p in outbox]
        given_up: list[Verdict] = []
        try:
            sent = outbox if self.process.send([pending.spans for pending in outbox]) else []
        except Exception:  # a trace that does not encode (a foreign span, say): find it, send the others
            sent = []
            for pending in outbox:
                try:
                    if self.process.send([pending.spans]):
                        sent.append(pending)
                except Exception as exc:
                    logger.warning("ragtrace: a trace could not be sent for scoring (%s: %s); forwarded unscored",
                                   type(exc).__name__, exc)
                    given_up.append(Verdict.unjudged(pending.trace_id, INTERNAL_ERROR, "error"))
        with self._lock:
            for pending in sent:
                self._out[pending.trace_id] = pending.deadline
        done = {v.trace_id for v in given_up} | {p.trace_id for p in sent}
        given_up += [Verdict.unjudged(p.trace_id, self._lost_as, "error") for p in outbox if p.trace_id not in done]
        return given_up

    def tick(self) -> bool:
        """Receive the scoring process's answers; kill it if it owes answers and says nothing. If it is
        gone, its traces get their verdicts and a new one is started. True while the process is lost."""
        process = self.process
        for answers in process.receive():
            self._answers(answers)
        self._kill_if_unresponsive()
        if process.alive:
            return False
        self._give_up_out()
        now = time.monotonic()
        if self._shutting_down() or now < self._restart_at:
            return True
        self._restart_at = now + self._backoff
        self._backoff = min(self._backoff * 2, RESTART_MAX_S)
        try:
            process.restart()
            self._lost_as = LOST
            logger.warning("ragtrace: started a new scoring process")
        except Exception:
            logger.exception("ragtrace: starting a new scoring process failed")
        return True

    def _give_up_out(self) -> None:
        """The child is gone: each trace it had gets a verdict saying why, counted once."""
        outcome = self._lost_as
        decision = "timeout" if outcome[0] == "timeout" else "error"
        with self._lock:
            out, self._out = self._out, {}
            self._arrived += [Verdict.unjudged(trace_id, outcome, decision) for trace_id in out]

    def collect(self) -> list[Verdict]:
        with self._lock:
            arrived, self._arrived = self._arrived, []
        return arrived

    def _kill_if_unresponsive(self, overdue: float | None = None) -> None:
        """A healthy child answers every trace within `score_deadline` (timeouts included); one that owes
        an answer past its trace's deadline (`overdue`: a trace being timed out; default: the oldest one
        out) and has written nothing for as long is stopped or wedged."""
        process = self.process
        if not process.alive:
            return
        now = time.monotonic()
        first = next(iter(self._out.values()), None) if overdue is None else overdue
        silent = now - process.last_heard
        if first is not None and first <= now and silent > self._options.score_deadline + GRACE_S:
            self._lost_as = UNRESPONSIVE
            process.kill(f"answered nothing for {silent:.1f} s")

    def wait(self, deadline: float) -> None:
        self._worker.call(lambda: self._drain(deadline), deadline - time.monotonic())

    def _drain(self, deadline: float) -> None:
        """Flush (worker thread): receive the scoring process's answers until none is owed or `deadline`."""
        while self._out and self.process.alive and (left := deadline - time.monotonic()) > 0:
            for answers in self.process.receive(min(left, 0.05)):
                self._answers(answers)
            self._kill_if_unresponsive()
        if not self.process.alive:
            self._give_up_out()

    def _answers(self, answers: Answers) -> None:
        """The scoring process answered (worker thread): replay its metrics calls; each trace still out
        gets its verdict (one that went on already, at its deadline or a flush, was counted then)."""
        self._backoff = 1.0  # it works: a later loss restarts it soon again
        traces, metric_calls = answers
        metrics = self._options.metrics
        if metrics is not None and metric_calls:
            try:
                metrics.replay(metric_calls)
            except Exception:
                logger.exception("ragtrace: replaying the scoring process's metrics failed")
        with self._lock:
            for trace_id, decisions, capture, span_writes in traces:
                if self._out.pop(trace_id, None) is None:
                    continue
                writes = {span_id: (attrs, events_of(events)) for span_id, attrs, events in span_writes}
                self._arrived.append(Verdict(trace_id, decisions, capture, writes=writes))

    def time_out(self, pending: PendingTrace) -> Verdict:
        """A trace out at the scoring process: its samples are not known here, it counts one timeout, and
        its retrieval spans say so."""
        # Timed out at its deadline, which is the deadline the silence check uses: the evidence (has the
        # child said anything for that long?) decides why, not which of the two a tick happened to see
        # first, so a loaded machine gets the same answer as an idle one.
        self._kill_if_unresponsive(pending.deadline)
        outcome = self._lost_as if not self.process.alive else JUDGE_TIMED_OUT
        with self._lock:
            self._out.pop(pending.trace_id, None)
            for verdict in self._arrived:  # answered, and not collected yet
                if verdict.trace_id == pending.trace_id:
                    self._arrived.remove(verdict)
                    return verdict
        return Verdict.unjudged(pending.trace_id, outcome, "timeout" if outcome[0] == "timeout" else "error")

    def stop(self, timeout: float = 5.0) -> None:
        self.process.stop(timeout)

    def abandon(self) -> None:
        """In a forked copy of the app: the parent's scoring process answers the parent only."""
        self.process.abandon()
