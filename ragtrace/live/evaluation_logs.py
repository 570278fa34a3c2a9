"""Evaluation results as OpenTelemetry log records.

The GenAI conventions attach `gen_ai.evaluation.result` to the evaluated span, and OpenTelemetry is moving
span events to log records (events as logs, correlated by trace and span id). Each result ragtrace writes as a
span event is also emitted here, through the Logs API, as a log record with the same name, attributes and
time, in the context of the span it evaluates: a logs backend joins it to the trace as it would an event.
Without an SDK `LoggerProvider` (the API's default) nothing is built: this costs nothing unless the app
exports logs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from opentelemetry._logs import Logger, LoggerProvider, SeverityNumber, get_logger_provider
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from ragtrace._sdk import emits_anywhere
from ragtrace._version import __version__
from ragtrace.live.settings import ResultsTo

logger = logging.getLogger(__name__)

EVENT_NAME = "gen_ai.evaluation.result"


class EvaluationLog:
    """Emits each `gen_ai.evaluation.result` of an evaluated span as a log record tied to that span."""

    def __init__(self, provider: LoggerProvider | None = None) -> None:
        # The global provider is a proxy until the app sets one: records reach the app's provider once set.
        self._logger: Logger = (provider or get_logger_provider()).get_logger(
            "ragtrace", __version__, schema_url=None
        )

    def emit(self, trace_id: int, span_id: int, trace_flags: int, events: Iterable[Event]) -> int:
        """Emit the evaluation results among `events`, in the context of span `span_id`; how many went out.

        Never raises: a failing logs pipeline must not cost the app its scored spans."""
        emitted = 0
        if not emits_anywhere(self._logger):
            return emitted
        context = None
        for event in events:
            if event.name != EVENT_NAME:
                continue
            if context is None:
                span = NonRecordingSpan(SpanContext(trace_id, span_id, is_remote=False,
                                                    trace_flags=TraceFlags(trace_flags)))
                context = set_span_in_context(span, Context())  # the span's, none of this thread's
            try:
                self._logger.emit(
                    timestamp=event.timestamp,
                    context=context,
                    severity_number=SeverityNumber.INFO,
                    severity_text="INFO",
                    attributes=event.attributes,
                    event_name=EVENT_NAME,
                )
                emitted += 1
            except Exception:
                logger.exception("ragtrace: emitting an evaluation result as a log record failed")
        return emitted


class EvaluationResults:
    """Routes the evaluation results of a scored span: kept as its span events, emitted as log records, or
    both, as the `evaluation_results` setting says. The attributes on the span are written either way."""

    def __init__(self, to: ResultsTo = "both", provider: LoggerProvider | None = None) -> None:
        if to not in ("events", "logs", "both"):
            raise ValueError(f"evaluation_results must be 'events', 'logs' or 'both', got {to!r}")
        self.as_events = to != "logs"
        self._log = EvaluationLog(provider) if to != "events" else None

    def route(self, trace_id: int, span_id: int, trace_flags: int, events: Sequence[Event]) -> Sequence[Event]:
        """Emit the results among `events` as log records of span `span_id` (when logs are on); the events
        the span keeps."""
        if self._log is not None:
            self._log.emit(trace_id, span_id, trace_flags, events)
        if self.as_events:
            return events
        return [event for event in events if event.name != EVENT_NAME]
