"""`install()` and `scoring_batch_processor()`: put scoring into a TracerProvider's pipeline; `RAGTRACE_*` settings.

`scoring_batch_processor()` builds a BatchSpanProcessor whose exporter scores (`RagScoringSpanExporter`):
the app's threads then run no ragtrace code. Use it where you build the pipeline yourself.

`install()` puts a `RagScoringSpanProcessor` in front of the processors a provider already has. The SDK
has no public way to insert a processor *in front of* others (`add_span_processor` only appends), yet
enrich mode must see a span before the exporter does. So `install` replaces the processors inside the
provider's active multi-span-processor by one `RagScoringSpanProcessor` that wraps them all. This touches
`TracerProvider._active_span_processor` and its `_span_processors` tuple (private since SDK 1.0, stable in
practice); it is done under that processor's own lock, by swapping the tuple exactly as
`add_span_processor` does. Processors added after `install` are not wrapped: they see spans unscored, at
once.

`OTEL_EXPORTER_OTLP_*` and the rest of the exporter configuration are left to the SDK.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.trace import SpanProcessor, SynchronousMultiSpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ragtrace.judges.base import Judge
from ragtrace.judges.resolve import is_local_judge, resolve_judge
from ragtrace.live.drift import DriftMetrics, DriftMonitor
from ragtrace.live.exporter import RagScoringSpanExporter, ScoringBatchSpanProcessor
from ragtrace.live.metrics import RagtraceMetrics
from ragtrace.live.otlp import otlp_span_exporter
from ragtrace.live.processor import Mode, RagScoringSpanProcessor, Target, WorkerKind
from ragtrace.live.redaction import Redactor
from ragtrace.live.sampling import Sampler
from ragtrace.scoring import SCORERS

logger = logging.getLogger(__name__)

ENV_PREFIX = "RAGTRACE_"


LOCAL_JUDGE_CONCURRENCY = 1


class RagtraceSettings(BaseModel):
    """Live-scoring settings; `from_env()` reads each field from `RAGTRACE_<FIELD>` (e.g. RAGTRACE_SAMPLE_RATE)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    judge: str = Field("local", min_length=1, description="'local' or a litellm model, e.g. openai/gpt-4o-mini")
    judge_api_base: str | None = None
    # LLM judge calls (a litellm judge only); unset keeps LLMJudge's defaults.
    judge_timeout: float | None = Field(None, gt=0, description="seconds per judge call; cancelled past it")
    judge_max_retries: int | None = Field(None, ge=0, description="retries of a 429/5xx/connection failure")
    judge_concurrency: int | None = Field(None, ge=1, description="judge calls in flight at once")
    judge_max_tokens: int | None = Field(None, ge=1, description="cap on each answer (default: derived)")
    judge_contexts_per_call: int | None = Field(None, ge=1, description="contexts asked about per call")
    judge_context_window: int | None = Field(None, ge=1, description="the judge model's context length")
    sample_rate: float = Field(0.1, ge=0.0, le=1.0)
    mode: Mode = "enrich"
    worker: WorkerKind = Field(
        "thread", description="score in a thread of the app's process, or in a scoring process of its own"
    )
    target: Target = "retrieval"
    scorers: tuple[str, ...] = ("context_precision", "context_relevance", "context_recall")
    max_queue: int = Field(1000, ge=1)
    max_held_spans: int = Field(50_000, ge=1)
    max_open_traces: int = Field(10_000, ge=1)
    concurrency: int = Field(8, ge=1)
    score_deadline: float = Field(30.0, gt=0)
    max_trace_wait: float = Field(30.0, gt=0)
    evaluations_per_minute: float | None = Field(None, gt=0)
    daily_token_budget: int | None = Field(None, ge=0)
    daily_usd_budget: float | None = Field(None, ge=0)
    redact: bool = True
    reason_max_chars: int = Field(500, ge=1)
    drift: bool = True
    drift_interval: float = Field(30.0, gt=0, description="seconds between drift checks")

    @field_validator("scorers", mode="before")
    @classmethod
    def _split_scorers(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("scorers")
    @classmethod
    def _known_scorers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [v for v in value if v not in SCORERS]
        if unknown:
            raise ValueError(f"unknown scorer(s) {unknown}; choose from {sorted(SCORERS)}")
        if not value:
            raise ValueError(f"at least one scorer is needed; choose from {sorted(SCORERS)}")
        return value

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RagtraceSettings:
        """Read `RAGTRACE_*` variables (unset or empty means the default). Raises ValueError naming the
        variable, the problem and the value for anything that does not parse."""
        env = os.environ if environ is None else environ
        raw = {
            name: value.strip()
            for name in cls.model_fields
            if (value := env.get(ENV_PREFIX + name.upper())) is not None and value.strip()
        }
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            problems = []
            for error in exc.errors():
                field = str(error["loc"][0]) if error["loc"] else "?"
                shown = raw.get(field, "")
                problems.append(f"{ENV_PREFIX}{field.upper()}={shown!r}: {error['msg']}")
            raise ValueError("invalid ragtrace settings: " + "; ".join(problems)) from None

    def llm_judge_options(self) -> dict[str, Any]:
        """The `resolve_judge` keywords of the judge_* settings: `api_base`, and the LLMJudge call
        options that are set (as `llm_options`, which reach a litellm judge only)."""
        options = {
            "timeout": self.judge_timeout,
            "max_retries": self.judge_max_retries,
            "concurrency": self.judge_concurrency,
            "max_tokens": self.judge_max_tokens,
            "contexts_per_call": self.judge_contexts_per_call,
            "context_window": self.judge_context_window,
        }
        chosen = {name: value for name, value in options.items() if value is not None}
        return {"api_base": self.judge_api_base, "llm_options": chosen}

    def processor_options(self) -> dict[str, Any]:
        """The RagScoringSpanProcessor keyword arguments these settings stand for (judge excluded)."""
        return {
            "scorers": [SCORERS[name]() for name in self.scorers],
            "sampler": Sampler(
                self.sample_rate,
                evaluations_per_minute=self.evaluations_per_minute,
                daily_token_budget=self.daily_token_budget,
                daily_usd_budget=self.daily_usd_budget,
            ),
            "mode": self.mode,
            "worker": self.worker,
            "target": self.target,
            "max_trace_wait": self.max_trace_wait,
            "score_deadline": self.score_deadline,
            "max_queue": self.max_queue,
            "max_held_spans": self.max_held_spans,
            "max_open_traces": self.max_open_traces,
            "concurrency": self.concurrency,
            "redactor": Redactor() if self.redact else None,
            "reason_max_chars": self.reason_max_chars,
        }

    def build_metrics(self, meter_provider: MeterProvider | None = None) -> RagtraceMetrics:
        """The processor's metrics; with `drift` on, they also feed a scheduled DriftMonitor."""
        if not self.drift:
            return RagtraceMetrics(meter_provider)
        monitor = DriftMonitor(interval=self.drift_interval, meter_provider=meter_provider)
        return DriftMetrics(meter_provider, monitor=monitor.start())


def _default_exporting() -> SpanProcessor:
    """What a provider with no processor would normally get: OTLP export, configured by OTEL_* env."""
    return BatchSpanProcessor(otlp_span_exporter())


def _sdk_provider(tracer_provider: TracerProvider | None) -> TracerProvider:
    if tracer_provider is not None:
        return tracer_provider
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    provider = TracerProvider()  # no SDK provider yet (plain API): make one, exporting over OTLP
    provider.add_span_processor(_default_exporting())
    trace.set_tracer_provider(provider)
    return provider


def _settings_with(settings: RagtraceSettings | None, options: dict[str, Any]) -> tuple[RagtraceSettings, bool]:
    """Settings (default: `RAGTRACE_*` env vars) with the RagtraceSettings fields among `options` (taken
    out of it) applied, checked like the env vars; and whether `concurrency` was chosen."""
    settings = settings if settings is not None else RagtraceSettings.from_env()
    overrides = {name: options.pop(name) for name in list(options) if name in RagtraceSettings.model_fields}
    concurrency_chosen = "concurrency" in settings.model_fields_set or "concurrency" in overrides
    if overrides:  # e.g. install(provider, sample_rate=1.0): a setting, checked like the env var would be
        settings = RagtraceSettings.model_validate({**settings.model_dump(), **overrides})
    if not settings.enabled:
        logger.info("ragtrace: disabled by settings (RAGTRACE_ENABLED=false)")
    return settings, concurrency_chosen


def _scoring_options(
    settings: RagtraceSettings,
    concurrency_chosen: bool,
    judge: str | Judge | None,
    meter_provider: MeterProvider | None,
    options: dict[str, Any],
) -> dict[str, Any]:
    """The scoring keyword arguments, judge and metrics included; `options` (scoring arguments) last."""
    spec = settings.judge if judge is None else judge
    kwargs = settings.processor_options()
    kwargs["judge"] = resolve_judge(spec, **settings.llm_judge_options())
    if is_local_judge(spec) and not concurrency_chosen:
        # The local judge is CPU work (~0.35 s a sample) on the app's own cores: one sample at a time in
        # the app's process unless asked otherwise (the gateway, a process of its own, keeps the default).
        kwargs["concurrency"] = LOCAL_JUDGE_CONCURRENCY
    kwargs["metrics"] = settings.build_metrics(meter_provider)
    kwargs.update(options)
    return kwargs


def install(
    tracer_provider: TracerProvider | None = None,
    *,
    judge: str | Judge | None = None,
    settings: RagtraceSettings | None = None,
    meter_provider: MeterProvider | None = None,
    **options: Any,
) -> RagScoringSpanProcessor | None:
    """Score RAG traces of `tracer_provider` (default: the global SDK provider) before they are exported.

    Settings come from `RAGTRACE_*` env vars unless `settings` is given; `judge` and keyword `options`
    (any RagtraceSettings field such as `sample_rate`, or any RagScoringSpanProcessor argument)
    override them. Returns the processor, or None when
    RAGTRACE_ENABLED is false. Installing twice on one provider returns the first processor.
    With the local judge, `concurrency` defaults to 1 rather than 8: it is CPU work in the app's process.
    Its processor looks at every span on the app's thread; where you build the pipeline yourself,
    `scoring_batch_processor()` does the same work off it.
    """
    settings, concurrency_chosen = _settings_with(settings, options)
    if not settings.enabled:
        return None
    provider = _sdk_provider(tracer_provider)
    active = provider._active_span_processor
    existing = getattr(active, "_span_processors", None)
    if not isinstance(existing, tuple):
        raise TypeError(
            f"cannot install ragtrace in front of {type(active).__name__}: expected the SDK's "
            "SynchronousMultiSpanProcessor or ConcurrentMultiSpanProcessor"
        )
    for processor in existing:
        if isinstance(processor, RagScoringSpanProcessor):
            logger.warning("ragtrace: already installed on this TracerProvider")
            return processor
    kwargs = _scoring_options(settings, concurrency_chosen, judge, meter_provider, options)
    with active._lock:
        wrapped_processors = active._span_processors
        exporting: SpanProcessor
        if len(wrapped_processors) == 1:
            exporting = wrapped_processors[0]
        elif wrapped_processors:
            exporting = SynchronousMultiSpanProcessor()  # type: ignore[no-untyped-call]
            for processor in wrapped_processors:
                exporting.add_span_processor(processor)
        else:
            exporting = _default_exporting()
        scoring = RagScoringSpanProcessor(exporting, **kwargs)
        active._span_processors = (scoring,)
    return scoring


def scoring_batch_processor(
    exporter: SpanExporter | None = None,
    *,
    judge: str | Judge | None = None,
    settings: RagtraceSettings | None = None,
    meter_provider: MeterProvider | None = None,
    batch_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> BatchSpanProcessor:
    """A BatchSpanProcessor that scores RAG traces on their way to `exporter` (default: OTLP, configured by
    `OTEL_EXPORTER_OTLP_*`): the cheapest way in, since the app's threads then run no ragtrace code.

    Settings, `judge` and `options` as for `install()`; `batch_options` are the BatchSpanProcessor's
    (`schedule_delay_millis`, ...). When RAGTRACE_ENABLED is false it is a plain BatchSpanProcessor.
    """
    exporter = exporter if exporter is not None else otlp_span_exporter()
    settings, concurrency_chosen = _settings_with(settings, options)
    if not settings.enabled:
        return BatchSpanProcessor(exporter, **(batch_options or {}))
    kwargs = _scoring_options(settings, concurrency_chosen, judge, meter_provider, options)
    return ScoringBatchSpanProcessor(RagScoringSpanExporter(exporter, **kwargs), **(batch_options or {}))


def auto_install() -> None:
    """Entry point for `opentelemetry-instrument` (group `opentelemetry_post_instrument`), which runs it
    after the SDK configurator set the global TracerProvider: install in front of that provider's
    exporter, from `RAGTRACE_*` env vars, when RAGTRACE_ENABLED is true. Opt-in, because every
    auto-instrumented app with ragtrace installed runs this hook. Never raises into the app's startup."""
    if not os.environ.get(ENV_PREFIX + "ENABLED", "").strip():
        return
    try:
        settings = RagtraceSettings.from_env()
        if settings.enabled and install(settings=settings) is not None:
            logger.info("ragtrace: installed by opentelemetry-instrument (judge %s)", settings.judge)
    except Exception:
        logger.exception("ragtrace: auto-install from RAGTRACE_* settings failed; traces are exported unscored")
