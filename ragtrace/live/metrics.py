"""The metrics table of the span contract, recorded through the OpenTelemetry metrics SDK.

The SDK does the aggregation, temporality and export (OTLP, Prometheus, ...); this module only names the
instruments, keeps their attributes low-cardinality, and guarantees that a metrics problem never reaches
the scoring path: every method swallows and logs (once per method) whatever the SDK raises.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.sdk.metrics.view import View
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from ragtrace._logs import ragtrace_logger
from ragtrace._sdk import records_anywhere, views_keep_attribute
from ragtrace._version import __version__
from ragtrace.judges.identity import JUDGE_ID
from ragtrace.live.enrich import SESSION
from ragtrace.live.failures import FailureLog
from ragtrace.scoring.result import JudgeUsage, ScoreResult

__all__ = [
    "DURATION_BUCKETS",
    "SCORE_BUCKETS",
    "SCORE_METRIC",
    "SCORE_SERIES_KEYS",
    "RagtraceMetrics",
    "ScoredSpan",
    "scored_span_context",
    "views",
]

_logger = ragtrace_logger(__name__)

#: Score histogram boundaries 0.1 .. 1.0; meaningful for scores on the default scale of 1.
SCORE_BUCKETS: tuple[float, ...] = tuple(round(i / 10, 1) for i in range(1, 11))
#: Judge latency boundaries in seconds (the GenAI semantic conventions' advice for operation duration).
DURATION_BUCKETS: tuple[float, ...] = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip

SCORE_METRIC = "ragtrace.evaluation.score"
#: The attributes a score's series is labelled with; anything else recorded with a score (the session id)
#: is dropped from the series by `views()` and kept on the measurement's exemplar.
SCORE_SERIES_KEYS: tuple[str, ...] = ("gen_ai.evaluation.name", "ragtrace.retriever", "ragtrace.label", JUDGE_ID)


def views() -> list[View]:
    """The Views to build a MeterProvider with (`MeterProvider(views=ragtrace.metric_views())`) for the session
    on the score histogram's exemplars: the score series keep `SCORE_SERIES_KEYS` only, so the session id
    recorded with each score (`session_exemplars`) lands in the exemplar's filtered attributes, never in a
    series of its own. Harmless without `session_exemplars`: the series keep the keys they have."""
    return [View(instrument_name=SCORE_METRIC, meter_name="ragtrace", attribute_keys=set(SCORE_SERIES_KEYS))]


#: (trace id, span id) of the span a score is written on.
ScoredSpan = tuple[int, int]
# A metric call made in a scoring process, replayed in the app's: (method name, its arguments).
MetricCall = tuple[str, tuple[Any, ...]]


def scored_span_context(scored_span: ScoredSpan) -> SpanContext:
    """The scored span's context, for an exemplar or a link. Sampled: the spans of a trace ragtrace scores
    are exported."""
    trace_id, span_id = scored_span
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))


def _in_span(scored_span: ScoredSpan | None) -> Context | None:
    """A context whose current span is the scored one, so that the SDK's exemplar filter (trace-based by
    default) keeps the measurement as an exemplar of that trace. Scoring runs off the request's thread,
    long after its context is gone: the context holds that span and nothing of the recording thread's
    (built on an empty one, not a copy of the current)."""
    if scored_span is None:
        return None
    return trace.set_span_in_context(NonRecordingSpan(scored_span_context(scored_span)), Context())


_MAX_VALUE_LENGTH = 64
_MAX_DISTINCT_VALUES = 64
_OTHER = "other"


class _Cardinality:
    """Caps the distinct values an attribute may take, so a caller's bug cannot explode the series count."""

    def __init__(self) -> None:
        self._seen: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def bound(self, key: str, value: str) -> str:
        value = value[:_MAX_VALUE_LENGTH] if value else "unknown"
        seen = self._seen.get(key)
        if seen is not None and value in seen:  # the usual case needs no lock: a set of seen values only grows
            return value
        with self._lock:
            seen = self._seen.setdefault(key, set())
            if value in seen:
                return value
            if len(seen) >= _MAX_DISTINCT_VALUES:
                return _OTHER
            seen.add(value)
            return value


def _session_key(provider: MeterProvider, score: object) -> str | None:
    """`SESSION` when the provider's views keep it off the score series (then it only reaches exemplars),
    else None and a warning: a series per session must never happen."""
    kept = views_keep_attribute(provider, score, SESSION)
    if kept is False:
        return SESSION
    why = ("its views keep it on the score series" if kept else
           "ragtrace cannot read this MeterProvider's views (the OpenTelemetry SDK's MeterProvider is needed)")
    _logger.warning(
        "ragtrace: session_exemplars is on, but the session id is not recorded: %s. Build the MeterProvider "
        "with views=ragtrace.metric_views()", why,
    )
    return None


class RagtraceMetrics:
    """ragtrace's instruments on one meter (`ragtrace`); `None` means the global MeterProvider.

    All series attribute values are names from small sets (scorer, label, retriever, decision, model,
    outcome); never a trace id, a query or a score. `session_exemplars`: each score is also recorded with
    its session id (`ragtrace.session.id`) for the exemplar, but only when the provider's views drop that
    key from the score series (`views()`); otherwise a warning says so and the session is left out.
    """

    def __init__(self, meter_provider: MeterProvider | None = None, *, session_exemplars: bool = False) -> None:
        self._cardinality = _Cardinality()
        self._failures = FailureLog(_logger, "ragtrace metrics", "metrics may be incomplete")
        self._queue_depth: Callable[[], int] | None = None
        self._spans_held: Callable[[], int] | None = None
        self._session_key: str | None = None  # recorded with a score only where no series keeps it
        # The exemplar context of the span scored last: the scores of one span come one after another
        # (a trace's answer), so they share one context. One tuple, swapped whole: no lock needed.
        self._last_in_span: tuple[ScoredSpan | None, Context | None] = (None, None)
        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        try:
            self._create_instruments(provider)
            if session_exemplars:
                self._session_key = _session_key(provider, self._score)
        except Exception:  # a broken provider costs the metrics, not the host
            self._failures.failed("setup")
            self._create_instruments(metrics.NoOpMeterProvider())

    @property
    def session_exemplars(self) -> bool:
        """Whether scores carry their session id to the exemplars (asked for, and the views allow it)."""
        return self._session_key is not None

    def _create_instruments(self, provider: MeterProvider) -> None:
        meter = provider.get_meter("ragtrace", __version__)

        self._score = meter.create_histogram(
            SCORE_METRIC,
            unit="1",
            description="Scores of scored evaluations, by scorer, label and retriever.",
            explicit_bucket_boundaries_advisory=SCORE_BUCKETS,
        )
        self._decisions = meter.create_counter(
            "ragtrace.evaluation.decisions",
            unit="{decision}",
            description="What happened to each candidate evaluation: scored, not_sampled, throttled, ...",
        )
        self._tokens = meter.create_counter(
            "ragtrace.judge.tokens", unit="{token}", description="Tokens spent by the judge, by type and model."
        )
        self._cost = meter.create_counter(
            "ragtrace.judge.cost", unit="USD", description="Judge spend where the model's price is known."
        )
        self._duration = meter.create_histogram(
            "ragtrace.judge.duration",
            unit="s",
            description="Wall time of judge calls, by model and outcome.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        meter.create_observable_gauge(
            "ragtrace.queue.depth",
            callbacks=[self._observe_queue_depth],
            unit="{job}",
            description="Evaluation jobs waiting for the worker.",
        )
        meter.create_observable_gauge(
            "ragtrace.spans.held",
            callbacks=[self._observe_spans_held],
            unit="{span}",
            description="Spans of sampled traces ragtrace keeps: to read, or waiting for their scores before export.",
        )

    # -- recording ------------------------------------------------------------------------------------

    def decision(self, decision: str, n: int = 1) -> None:
        """Count `n` candidate evaluations that ended as `decision` (scored, not_sampled, queue_full, ...)."""
        try:
            if not records_anywhere(self._decisions):
                return
            self._decisions.add(n, {"decision": self._cardinality.bound("decision", decision)})
        except Exception:
            self._failures.failed("decision")

    def score(
        self, result: ScoreResult, retriever: str, scored_span: ScoredSpan | None = None, session: str | None = None
    ) -> None:
        """Record a scored result's raw score; skipped and failed results (score None) are not recorded.

        The histogram's buckets are 0.1 .. 1.0, so they only mean something for scores on scale 1; a scorer
        run with another scale still records its raw score, in the top bucket or above. `scored_span`, the
        span the score is written on, becomes the measurement's exemplar: a chart of low scores links to
        the traces that made them; with `session_exemplars`, the sample's `session` goes on that exemplar too.
        """
        try:
            self.record_score(
                result.name, result.score, result.label, result.skipped, retriever, scored_span,
                result.usage.judge_id, session,
            )
        except Exception:
            self._failures.failed("score")

    def record_score(
        self, scorer: str, score: float | None, label: str | None, skipped: str | None, retriever: str,
        scored_span: ScoredSpan | None = None, judge_id: str = "", session: str | None = None,
    ) -> None:
        """`score` in plain values. A scoring process's results are replayed through it (plain values cost
        the app's process a tenth of what a result object does), so a subclass that watches scores hooks
        here, not in `score`. `judge_id` (`ragtrace.judge.id`) labels the series: one value per judge.
        `session` is recorded only with `session_exemplars` (the views then keep it off the series)."""
        try:
            if score is None or not records_anywhere(self._score):  # no attributes or exemplar for a no-op
                return
            attributes: dict[str, str] = {
                "gen_ai.evaluation.name": self._cardinality.bound("gen_ai.evaluation.name", scorer),
                "ragtrace.retriever": self._cardinality.bound("ragtrace.retriever", retriever),
            }
            if label is not None:
                attributes["ragtrace.label"] = label
            if judge_id:
                attributes[JUDGE_ID] = self._cardinality.bound(JUDGE_ID, judge_id)
            if session and self._session_key is not None:
                attributes[self._session_key] = session
            self._score.record(score, attributes, context=self._context_of(scored_span))
        except Exception:
            self._failures.failed("score")

    def _context_of(self, scored_span: ScoredSpan | None) -> Context | None:
        """`_in_span`, built once for the scores of one span in a row."""
        last, context = self._last_in_span
        if scored_span != last or scored_span is None:
            context = _in_span(scored_span)
            self._last_in_span = (scored_span, context)
        return context

    def judge_call(self, usage: JudgeUsage, outcome: str, duration_s: float) -> None:
        """Record one judge call (or a fused call): its tokens, its cost when priced, and its duration."""
        try:
            self.record_judge_call(
                usage.model, usage.input_tokens, usage.output_tokens, usage.cost_usd, outcome, duration_s
            )
        except Exception:
            self._failures.failed("judge_call")

    def record_judge_call(
        self, model: str, input_tokens: int, output_tokens: int, cost_usd: float | None, outcome: str,
        duration_s: float,
    ) -> None:
        """`judge_call` in plain values (see `record_score`)."""
        try:
            if not records_anywhere(self._duration):  # the judge instruments share one meter
                return
            model = self._cardinality.bound("gen_ai.request.model", model)
            if input_tokens > 0:
                self._tokens.add(input_tokens, {"type": "input", "gen_ai.request.model": model})
            if output_tokens > 0:
                self._tokens.add(output_tokens, {"type": "output", "gen_ai.request.model": model})
            if cost_usd is not None and cost_usd >= 0:
                self._cost.add(cost_usd, {"gen_ai.request.model": model})
            self._duration.record(
                max(0.0, duration_s),
                {"gen_ai.request.model": model, "outcome": self._cardinality.bound("outcome", outcome)},
            )
        except Exception:
            self._failures.failed("judge_call")

    def replay(self, calls: Sequence[MetricCall]) -> None:
        """Make a scoring process's metric calls here, in order: `(name, args)` of `record_score` and
        `record_judge_call`. A subclass that takes many at once more cheaply overrides this."""
        for name, args in calls:
            try:
                getattr(self, name)(*args)
            except Exception:
                self._failures.failed(name)

    def shutdown(self) -> None:
        """Called once by the processor's shutdown; subclasses with background work stop it here."""

    def observe(self, queue_depth: Callable[[], int], spans_held: Callable[[], int]) -> None:
        """Register what the two gauges read at each collection (the latest registration wins)."""
        self._queue_depth = queue_depth
        self._spans_held = spans_held

    # -- gauge callbacks (run on the reader's thread) -------------------------------------------------

    def _observe_queue_depth(self, _options: CallbackOptions) -> Iterable[Observation]:
        return self._read("queue_depth", self._queue_depth)

    def _observe_spans_held(self, _options: CallbackOptions) -> Iterable[Observation]:
        return self._read("spans_held", self._spans_held)

    def _read(self, what: str, source: Callable[[], int] | None) -> list[Observation]:
        if source is None:
            return []
        try:
            return [Observation(int(source()))]
        except Exception:
            self._failures.failed(what)
            return []

