"""`install()` and `scoring_batch_processor()`: put live scoring into a TracerProvider's pipeline.

`install()` puts the scoring behind the provider's batching when the provider exports through one
`BatchSpanProcessor` (what the SDK's own setup and `opentelemetry-instrument` build): that processor's
exporter is wrapped by a `RagScoringSpanExporter`, so the app's threads keep running the SDK's `on_end`
and nothing else, and a `BatchedScoring` after it makes the provider's flush wait for the scoring.
Otherwise (several processors, or `placement="processor"`) it puts one `RagScoringSpanProcessor` in
front of them all: enrich mode must see a span before any exporter does. Processors added after
`install` see spans unscored, at once.

`scoring_batch_processor()` builds the same behind-the-batching pipeline for those who build their own.
`OTEL_EXPORTER_OTLP_*` and the rest of the exporter configuration are left to the SDK.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.trace import SpanProcessor, SynchronousMultiSpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from ragtrace._logs import ragtrace_logger
from ragtrace._sdk import destination, replace_span_processors, span_processors
from ragtrace.judges.base import Judge
from ragtrace.live.announce import say, setup_line
from ragtrace.live.exporter import BatchedScoring, RagScoringSpanExporter, ScoringBatchSpanProcessor
from ragtrace.live.otlp import otlp_span_exporter
from ragtrace.live.processor import RagScoringSpanProcessor
from ragtrace.live.settings import ENV_PREFIX, RagtraceSettings, scoring_options

logger = ragtrace_logger(__name__)

Installed = BatchedScoring | RagScoringSpanProcessor


def _sdk_provider(tracer_provider: TracerProvider | None) -> TracerProvider:
    if tracer_provider is not None:
        return tracer_provider
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    provider = TracerProvider()  # no SDK provider yet (plain API): make one, exporting over OTLP
    provider.add_span_processor(_default_batching("no global SDK TracerProvider was set"))
    trace.set_tracer_provider(provider)
    return provider


def _default_batching(why: str) -> BatchSpanProcessor:
    """The OTLP exporting install() makes when there is none, said as a warning: an app that meant to add
    its own exporter after install() would otherwise see only the OTLP exporter's connection errors."""
    batching = BatchSpanProcessor(otlp_span_exporter())
    logger.warning(
        "ragtrace: %s, so install() added a BatchSpanProcessor exporting to %s (OTEL_EXPORTER_OTLP_* "
        "configure it); to export elsewhere, add your span processor to the provider before install()",
        why, destination(batching),
    )
    return batching


def install(
    tracer_provider: TracerProvider | None = None,
    *,
    judge: str | Judge | None = None,
    settings: RagtraceSettings | None = None,
    meter_provider: MeterProvider | None = None,
    **options: Any,
) -> Installed | None:
    """Score RAG traces of `tracer_provider` (default: the global SDK provider) before they are exported.

    Settings come from `RAGTRACE_*` env vars unless `settings` is given; `judge` and keyword `options`
    (any RagtraceSettings field such as `sample_rate` or `placement`, or any `ScoringOptions` argument)
    override them. By default the scoring runs behind the provider's BatchSpanProcessor, in a scoring
    process of its own (see the module's docstring). Returns what was installed (its `decisions`,
    `held_spans`, `force_flush`), or None when RAGTRACE_ENABLED is false. Installing twice on one
    provider returns the first.
    """
    settings, kwargs = scoring_options(settings, judge, meter_provider, options)
    if not settings.enabled:
        return None
    provider = _sdk_provider(tracer_provider)
    if (already := installed(provider)) is not None:
        logger.warning("ragtrace: already installed on this TracerProvider")
        return already
    put: list[Installed] = []
    where: list[tuple[str, str]] = []

    def put_in(current: tuple[SpanProcessor, ...]) -> tuple[SpanProcessor, ...]:
        if not current:
            current = (_default_batching("the TracerProvider has no span processor yet"),)
        batching = current[0]
        if settings.placement != "processor" and len(current) == 1 and type(batching) is BatchSpanProcessor:
            scores_to = destination(batching)
            behind = BatchedScoring.behind(batching, RagScoringSpanExporter(batching.span_exporter, **kwargs))
            put.append(behind)
            where.append(("behind the provider's BatchSpanProcessor (placement=exporter)", scores_to))
            return (behind,)
        if settings.placement == "exporter":
            raise ValueError(
                "placement='exporter' puts ragtrace behind the provider's one BatchSpanProcessor; this provider "
                f"has {[type(p).__name__ for p in current]}: use scoring_batch_processor() or placement='processor'"
            )
        exporting: SpanProcessor = current[0]
        if len(current) > 1:
            exporting = SynchronousMultiSpanProcessor()  # type: ignore[no-untyped-call]
            for processor in current:
                exporting.add_span_processor(processor)
        in_front = RagScoringSpanProcessor(exporting, **kwargs)
        put.append(in_front)
        where.append(("in front of the provider's span processors (placement=processor)", destination(exporting)))
        return (in_front,)

    replace_span_processors(provider, put_in)
    _say_setup(where[0][0], where[0][1], kwargs)
    return put[0]


def _say_setup(placement: str, scores_to: str, kwargs: Mapping[str, Any]) -> None:
    """The setup line (announce.py): what install() or scoring_batch_processor() put in, once."""
    rate = kwargs["sampler"].rate
    say(setup_line(placement=placement, worker=kwargs["worker"], judge=kwargs["judge"], sample_rate=rate,
                   scores_to=scores_to))


def installed(tracer_provider: TracerProvider | None = None) -> Installed | None:
    """What `install()` put into `tracer_provider` (default: the global one), or None."""
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        return None
    return next((p for p in span_processors(provider) if isinstance(p, BatchedScoring | RagScoringSpanProcessor)), None)


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
    `OTEL_EXPORTER_OTLP_*`), for those who build the pipeline themselves: what `install()` puts in.

    Settings, `judge` and `options` as for `install()`; `batch_options` are the BatchSpanProcessor's
    (`schedule_delay_millis`, ...). When RAGTRACE_ENABLED is false it is a plain BatchSpanProcessor.
    """
    exporter = exporter if exporter is not None else otlp_span_exporter()
    settings, kwargs = scoring_options(settings, judge, meter_provider, options)
    if not settings.enabled:
        return BatchSpanProcessor(exporter, **(batch_options or {}))
    batching = ScoringBatchSpanProcessor(RagScoringSpanExporter(exporter, **kwargs), **(batch_options or {}))
    _say_setup("behind its own BatchSpanProcessor (scoring_batch_processor)", destination(exporter), kwargs)
    return batching


def auto_install() -> None:
    """Entry point for `opentelemetry-instrument` (group `opentelemetry_post_instrument`), which runs it
    after the SDK configurator set the global TracerProvider: install behind that provider's batching,
    from `RAGTRACE_*` env vars, when RAGTRACE_ENABLED is true. Opt-in, because every auto-instrumented
    app with ragtrace installed runs this hook. Never raises into the app's startup."""
    if not os.environ.get(ENV_PREFIX + "ENABLED", "").strip():
        return
    try:
        settings = RagtraceSettings.from_env()
        if settings.enabled and install(settings=settings) is not None:
            logger.info("ragtrace: installed by opentelemetry-instrument (judge %s)", settings.judge)
    except Exception:
        logger.exception("ragtrace: auto-install from RAGTRACE_* settings failed; traces are exported unscored")
