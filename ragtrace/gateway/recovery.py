"""The spool's side of a running gateway: replay at start, resend on failure, and the marks in between.

At start, what a previous run acknowledged but never forwarded is handed on as it arrived: to scoring while
its trace is within `score_deadline` of its arrival, else forwarded saying why it has no score. While
running, each batch going out is marked in the spool, forwarded spans leave it, and a batch the next hop's
exporter gave up on is handed to it again `RESEND_DELAY` later (still stored, so a crash meanwhile loses
nothing either).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan

from ragtrace._logs import ragtrace_logger
from ragtrace.gateway.convert import received_spans
from ragtrace.gateway.next_hop import NextHop
from ragtrace.gateway.room import NextHopRoom
from ragtrace.gateway.settling import RootSettler
from ragtrace.gateway.spool import Spool, span_key
from ragtrace.live.enrich import EvalStatus
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.sampling import Sampler

logger = ragtrace_logger("ragtrace.gateway.server")

# A batch the next hop's exporter gave up on (after its own retries) is handed to it again this much later.
RESEND_DELAY = 1.0
# What a replayed sample whose score deadline passed while the gateway was down says on its retrieval span.
REPLAYED_LATE: tuple[EvalStatus, str] = ("timeout", "gateway_restarted")


def received_key(span: ReadableSpan) -> bytes:
    """A received span's row in the spool."""
    ctx = span.context
    assert ctx is not None  # received spans all have valid ids
    return span_key(ctx.trace_id, ctx.span_id)


class SpoolRecovery:
    """Replays the spool at `start`, resends failed batches until `stop`; `exported` is the next hop's
    listener. `closing` says the gateway is shutting down (a failed batch is then left for the next start)."""

    def __init__(
        self, spool: Spool, exporting: NextHop, room: NextHopRoom, settler: RootSettler,
        processor: RagScoringSpanProcessor, sampler: Sampler, closing: Callable[[], bool],
    ) -> None:
        self._spool, self._exporting, self._room = spool, exporting, room
        self._settler, self._processor, self._sampler = settler, processor, sampler
        self._closing = closing
        self._resend: deque[tuple[float, Sequence[ReadableSpan]]] = deque()
        self._stop = threading.Event()
        self._pump: threading.Thread | None = None
        self._lock = threading.Lock()
        self._replayed = self._replayed_late = self._maybe_delivered = 0
        exporting.listen(self.exported)

    def start(self) -> None:
        if self._pump is not None:
            return
        found = self._spool.stats()
        if found["spans"]:
            logger.info(
                "ragtrace gateway: replaying %d spans (%d requests) from the spool %s",
                found["spans"], found["requests"], self._spool.path,
            )
        self._pump = threading.Thread(target=self._run, name="ragtrace-spool", daemon=True)
        self._pump.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._pump is not None:
            self._pump.join(timeout)

    def exported(self, spans: Sequence[ReadableSpan], ok: bool | None) -> None:
        """A batch going out is marked; forwarded spans leave the spool; a failed batch is resent later."""
        if ok is None:
            self._spool.sending(received_key(span) for span in spans)
        elif ok:
            self._spool.forwarded(received_key(span) for span in spans)
        else:
            self._spool.sending((received_key(span) for span in spans), False)
            if not self._closing():
                self._resend.append((time.monotonic() + RESEND_DELAY, spans))

    def _run(self) -> None:
        try:
            self._replay()
        except Exception:
            logger.exception("ragtrace gateway: replaying the spool failed; the rest is replayed at the next start")
        while not self._stop.wait(0.1):
            try:
                self._resend_due()
            except Exception:
                logger.exception("ragtrace gateway: sending spans again failed")

    def _replay(self) -> None:
        """Hand the spool's spans on as they arrived: to scoring while their trace is within `score_deadline`
        of its arrival, else forwarded with `ragtrace.eval.status = timeout`, `ragtrace.eval.error =
        gateway_restarted` on the retrieval spans of sampled traces."""
        deadline = self._processor.scoring.options.score_deadline
        for stored in self._spool.stored():
            request = ExportTraceServiceRequest.FromString(stored.body)
            spans = [span for span in received_spans(request) if received_key(span) in stored.pending]
            if not self._room.wait_for(len(spans), self._stop):
                return
            late = time.time() - stored.received >= deadline
            try:
                if late:
                    self._forward_late(spans)
                else:
                    for span in spans:
                        self._settler.on_end(span)
            finally:
                self._room.release(len(spans))
            with self._lock:
                self._replayed += len(spans)
                self._maybe_delivered += len(stored.sending)
                if late:
                    self._replayed_late += len(spans)
        if self._replayed:
            logger.info(
                "ragtrace gateway: replayed %d spans from the spool (%d past the score deadline, forwarded "
                "with status timeout / gateway_restarted; %d were being exported when the gateway stopped, "
                "so the next hop may get them twice)", self._replayed, self._replayed_late, self._maybe_delivered,
            )

    def _forward_late(self, spans: list[ReadableSpan]) -> None:
        """Spans whose score deadline passed while the gateway was down: forwarded now, each retrieval span
        of a trace that may be sampled saying why it has no score (on the worker, like every release)."""
        scoring = self._processor.scoring
        pipeline = scoring.pipeline
        sampled = [s for s in spans if s.context is not None and self._sampler.might_sample(s.context.trace_id)]
        others = [s for s in spans if s.context is None or not self._sampler.might_sample(s.context.trace_id)]

        def release() -> None:
            pipeline.forward(others)
            pipeline.forward(sampled, REPLAYED_LATE)

        if not scoring.worker.call(release, timeout=30.0):
            logger.warning("ragtrace gateway: the scoring worker did not take %d replayed spans in 30 s", len(spans))

    def _resend_due(self) -> None:
        while self._resend and self._resend[0][0] <= time.monotonic():
            spans = self._resend[0][1]
            if not self._room.reserve(len(spans)):
                return
            self._resend.popleft()
            try:
                for span in spans:
                    self._exporting.on_end(span)
            finally:
                self._room.release(len(spans))

    def health(self) -> dict[str, Any]:
        """The spool's part of `GET /healthz`."""
        with self._lock:
            replayed, replayed_late, maybe_delivered = self._replayed, self._replayed_late, self._maybe_delivered
        return {
            **self._spool.stats(),
            "replayed_spans": replayed,
            "replayed_late_spans": replayed_late,
            # Replayed spans whose export batch was out when the gateway stopped: duplicates if the
            # next hop had taken it (at least once), counted here since the gateway cannot know.
            "replayed_maybe_delivered_spans": maybe_delivered,
            "resending_spans": sum(len(spans) for _, spans in list(self._resend)),
        }


__all__ = ["REPLAYED_LATE", "RESEND_DELAY", "SpoolRecovery", "received_key"]
