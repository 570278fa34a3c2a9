"""install(), scoring_batch_processor() and RAGTRACE_* settings: wrapping a real provider's processors,
env parsing, clear errors."""

from __future__ import annotations

import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from ragtrace.live import BatchedScoring, RagtraceSettings, install, installed, scoring_batch_processor
from ragtrace.live.exporter import ScoringBatchSpanProcessor
from ragtrace.live.processor import RagScoringSpanProcessor
from tests.live.fakes import CountingExporter, CountingProcessor, ScriptedJudge, rag_trace


def test_settings_defaults_and_env() -> None:
    assert RagtraceSettings.from_env({}) == RagtraceSettings()
    s = RagtraceSettings.from_env({
        "RAGTRACE_ENABLED": "true", "RAGTRACE_JUDGE": "openai/gpt-4o-mini",
        "RAGTRACE_JUDGE_API_BASE": "http://127.0.0.1:9/v1", "RAGTRACE_SAMPLE_RATE": "0.25",
        "RAGTRACE_MODE": "link", "RAGTRACE_TARGET": "root", "RAGTRACE_SCORERS": "context_precision, context_recall",
        "RAGTRACE_MAX_QUEUE": "50", "RAGTRACE_SCORE_DEADLINE": "2.5", "RAGTRACE_EVALUATIONS_PER_MINUTE": "30",
        "RAGTRACE_DAILY_TOKEN_BUDGET": "100000", "RAGTRACE_DAILY_USD_BUDGET": "", "OTHER": "x",
        "RAGTRACE_WORKER": "process",
    })
    assert s.judge == "openai/gpt-4o-mini" and s.judge_api_base == "http://127.0.0.1:9/v1"
    assert s.sample_rate == 0.25 and s.mode == "link" and s.target == "root"
    assert s.scorers == ("context_precision", "context_recall")
    assert s.max_queue == 50 and s.score_deadline == 2.5 and s.evaluations_per_minute == 30
    assert s.daily_token_budget == 100_000 and s.daily_usd_budget is None
    assert s.worker == "process" and s.processor_options()["worker"] == "process"
    assert RagtraceSettings.from_env({"RAGTRACE_ENABLED": "0"}).enabled is False


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("RAGTRACE_SAMPLE_RATE", "2", "less than or equal to 1"),
        ("RAGTRACE_SAMPLE_RATE", "ten", "valid number"),
        ("RAGTRACE_MODE", "both", "'enrich' or 'link'"),
        ("RAGTRACE_TARGET", "leaf", "'retrieval', 'generation' or 'root'"),
        ("RAGTRACE_SCORERS", "context_precision,faithfulness", "unknown scorer"),
        ("RAGTRACE_MAX_QUEUE", "0", "greater than or equal to 1"),
        ("RAGTRACE_SCORE_DEADLINE", "-1", "greater than 0"),
        ("RAGTRACE_ENABLED", "maybe", "valid boolean"),
        ("RAGTRACE_DAILY_TOKEN_BUDGET", "1.5", "valid integer"),
        ("RAGTRACE_WORKER", "fork", "'thread' or 'process'"),
    ],
)
def test_bad_env_values_name_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        RagtraceSettings.from_env({name: value})
    text = str(info.value)
    assert f"{name}={value!r}" in text and message in text


def test_install_wraps_every_existing_processor() -> None:
    first, second = CountingProcessor(), CountingProcessor()
    provider = TracerProvider()
    provider.add_span_processor(first)
    provider.add_span_processor(second)
    settings = RagtraceSettings(sample_rate=1.0, redact=False)
    proc = install(provider, judge=ScriptedJudge(), settings=settings, tick_interval=0.01)
    assert isinstance(proc, RagScoringSpanProcessor)
    assert provider._active_span_processor._span_processors == (proc,)
    assert install(provider, judge=ScriptedJudge(), settings=settings) is proc  # idempotent
    ids = rag_trace(provider.get_tracer("t"))
    end = time.monotonic() + 5
    while len(second.spans) < len(ids) and time.monotonic() < end:
        time.sleep(0.01)
    for out in (first, second):
        assert sorted(out.ids()) == sorted(ids)
        (retrieval,) = out.by_name("retrieve")
        assert (retrieval.attributes or {})["ragtrace.eval.status"] == "scored"
    provider.shutdown()
    assert first.shutdowns == 1 and second.shutdowns == 1


def test_install_reads_env_and_options_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGTRACE_SAMPLE_RATE", "0")
    monkeypatch.setenv("RAGTRACE_MODE", "link")
    out = CountingProcessor()
    provider = TracerProvider()
    provider.add_span_processor(out)
    proc = install(provider, judge=ScriptedJudge(), mode="enrich")
    assert proc is not None
    ids = rag_trace(provider.get_tracer("t"))
    assert sorted(out.ids()) == sorted(ids)  # rate 0 from env: forwarded at once
    assert proc.decisions == {"not_sampled": 1}
    provider.shutdown()


def test_disabled_leaves_the_provider_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGTRACE_ENABLED", "false")
    out = CountingProcessor()
    provider = TracerProvider()
    provider.add_span_processor(out)
    assert install(provider, judge=ScriptedJudge()) is None
    assert provider._active_span_processor._span_processors == (out,)


def test_judge_string_becomes_an_llm_judge() -> None:
    provider = TracerProvider()
    provider.add_span_processor(CountingProcessor())
    settings = RagtraceSettings(judge="openai/gpt-4o-mini", judge_api_base="http://127.0.0.1:9/v1")
    proc = install(provider, settings=settings)
    assert proc is not None
    assert proc.scoring.options.judge.model == "openai/gpt-4o-mini"
    provider.shutdown()


def test_install_on_a_concurrent_multi_span_processor() -> None:
    from opentelemetry.sdk.trace import ConcurrentMultiSpanProcessor

    out = CountingProcessor()
    provider = TracerProvider(active_span_processor=ConcurrentMultiSpanProcessor(2))
    provider.add_span_processor(out)
    proc = install(provider, judge=ScriptedJudge(), settings=RagtraceSettings(sample_rate=1.0), tick_interval=0.01)
    assert proc is not None and provider._active_span_processor._span_processors == (proc,)
    ids = rag_trace(provider.get_tracer("t"))
    assert provider.force_flush(2000)
    assert sorted(out.ids()) == sorted(ids)
    (retrieval,) = out.by_name("retrieve")
    assert (retrieval.attributes or {})["ragtrace.eval.status"] == "scored"
    provider.shutdown()


def test_keyword_settings_reach_the_sampler_and_the_judge() -> None:
    provider = TracerProvider()
    provider.add_span_processor(CountingProcessor())
    processor = install(
        provider, judge="openai/judge-x", judge_api_base="http://127.0.0.1:9/v1", sample_rate=1.0,
        settings=RagtraceSettings(),
    )
    assert processor is not None
    try:
        assert processor.scoring.options.judge._api_base == "http://127.0.0.1:9/v1"  # type: ignore[attr-defined]
        assert processor.scoring.options.sampler.might_sample(1)
        with pytest.raises(ValueError, match="sample_rate"):
            install(TracerProvider(), sample_rate=2.0, settings=RagtraceSettings())
    finally:
        processor.shutdown()


def test_install_runs_drift_detection_until_shutdown() -> None:
    from ragtrace.live.drift import DriftMetrics

    provider = TracerProvider()
    provider.add_span_processor(CountingProcessor())
    processor = install(provider, judge=ScriptedJudge(), settings=RagtraceSettings(drift_interval=5.0))
    assert processor is not None
    metrics = processor.scoring.options.metrics
    assert isinstance(metrics, DriftMetrics) and metrics.monitor._scheduler is not None
    processor.shutdown()
    assert metrics.monitor._scheduler is None  # the scheduler thread stops with the processor
    off = install(TracerProvider(), judge=ScriptedJudge(), settings=RagtraceSettings(drift=False))
    assert off is not None and not isinstance(off.scoring.options.metrics, DriftMetrics)
    off.shutdown()


def test_the_local_judge_scores_one_sample_at_a_time_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local judge is CPU work under the app's GIL: in-process it defaults to one sample at a time,
    while an explicit concurrency (env or keyword) and the LLM judges' I/O-bound default are kept."""
    def concurrency(**kwargs: object) -> int:
        provider = TracerProvider()
        provider.add_span_processor(CountingProcessor())
        proc = install(provider, **kwargs)  # type: ignore[arg-type]
        assert proc is not None
        try:
            return proc.scoring.options.concurrency
        finally:
            provider.shutdown()

    assert concurrency(judge="local", settings=RagtraceSettings()) == 1
    assert concurrency(judge="local", settings=RagtraceSettings(), concurrency=3) == 3
    assert concurrency(settings=RagtraceSettings(judge="local", concurrency=2)) == 2
    monkeypatch.setenv("RAGTRACE_CONCURRENCY", "4")
    assert concurrency(judge="local") == 4
    monkeypatch.delenv("RAGTRACE_CONCURRENCY")
    assert concurrency(judge="openai/judge-x", judge_api_base="http://127.0.0.1:9/v1",
                       settings=RagtraceSettings()) == RagtraceSettings().concurrency


def test_scoring_batch_processor_reads_env_and_options_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGTRACE_SAMPLE_RATE", "0")
    monkeypatch.setenv("RAGTRACE_MODE", "link")
    out = CountingExporter()
    batching = scoring_batch_processor(out, judge=ScriptedJudge(), sample_rate=1.0, mode="enrich",
                                       tick_interval=0.01, batch_options={"schedule_delay_millis": 10})
    assert isinstance(batching, ScoringBatchSpanProcessor)
    provider = TracerProvider()
    provider.add_span_processor(batching)
    ids = rag_trace(provider.get_tracer("t"))
    assert provider.force_flush(5000)
    assert sorted(out.ids()) == sorted(ids)
    (retrieval,) = out.by_name("retrieve")
    assert (retrieval.attributes or {})["ragtrace.eval.status"] == "scored"  # rate 1.0 and enrich from options
    provider.shutdown()
    assert out.shutdowns == 1


def test_scoring_batch_processor_disabled_is_a_plain_batch_processor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGTRACE_ENABLED", "false")
    out = CountingExporter()
    batching = scoring_batch_processor(out, judge=ScriptedJudge())
    assert type(batching) is BatchSpanProcessor
    provider = TracerProvider()
    provider.add_span_processor(batching)
    ids = rag_trace(provider.get_tracer("t"))
    provider.shutdown()
    assert sorted(out.ids()) == sorted(ids)
    assert not any("ragtrace.eval.status" in (s.attributes or {}) for s in out.spans)


def test_scoring_batch_processor_checks_settings_like_the_env_vars() -> None:
    with pytest.raises(ValueError, match="less than or equal to 1"):
        scoring_batch_processor(CountingExporter(), judge=ScriptedJudge(), sample_rate=2.0,
                                settings=RagtraceSettings())


def test_install_scores_behind_the_one_batch_processor_of_a_provider() -> None:
    """The README's first snippet: the app's thread keeps the SDK's own on_end, a flush of the provider
    waits for the scoring, and the scoring runs in a process of its own."""
    out = CountingExporter()
    batching = BatchSpanProcessor(out, schedule_delay_millis=20)
    provider = TracerProvider()
    provider.add_span_processor(batching)
    installed_ = install(provider, judge=ScriptedJudge(), sample_rate=1.0, tick_interval=0.01)
    assert isinstance(installed_, BatchedScoring)
    assert installed(provider) is installed_ and install(provider, judge=ScriptedJudge()) is installed_
    assert installed_.scoring.options.worker == "process"
    assert installed_.on_end == batching.on_end  # the app's thread calls the SDK's own on_end, nothing more
    assert batching.span_exporter is installed_.exporter
    ids = rag_trace(provider.get_tracer("t"))
    assert provider.force_flush(20_000)
    assert sorted(out.ids()) == sorted(ids)
    (retrieval,) = out.by_name("retrieve")
    assert (retrieval.attributes or {})["ragtrace.eval.status"] == "scored"
    assert installed_.decisions == {"scored": 2} and installed_.held_spans == 0
    provider.shutdown()


def test_install_placement_names_where_ragtrace_sits() -> None:
    one_batching = TracerProvider()
    one_batching.add_span_processor(BatchSpanProcessor(CountingExporter()))
    in_front = install(one_batching, judge=ScriptedJudge(), placement="processor", worker="thread")
    assert isinstance(in_front, RagScoringSpanProcessor) and installed(one_batching) is in_front
    one_batching.shutdown()
    two = TracerProvider()
    two.add_span_processor(BatchSpanProcessor(CountingExporter()))
    two.add_span_processor(CountingProcessor())
    with pytest.raises(ValueError, match="placement='exporter'"):
        install(two, judge=ScriptedJudge(), placement="exporter")
    assert installed(two) is None
    behind_default = install(two, judge=ScriptedJudge(), mode="link")  # several processors: in front of them
    assert isinstance(behind_default, RagScoringSpanProcessor)
    assert behind_default.scoring.options.worker == "thread"  # link mode scores in a thread
    two.shutdown()


def test_llm_judge_call_settings_come_from_the_environment() -> None:
    env = {
        "RAGTRACE_JUDGE": "openai/judge-x",
        "RAGTRACE_JUDGE_TIMEOUT": "240",
        "RAGTRACE_JUDGE_MAX_RETRIES": "1",
        "RAGTRACE_JUDGE_CONCURRENCY": "2",
        "RAGTRACE_JUDGE_MAX_TOKENS": "512",
        "RAGTRACE_JUDGE_CONTEXTS_PER_CALL": "3",
        "RAGTRACE_JUDGE_CONTEXT_WINDOW": "4096",
    }
    settings = RagtraceSettings.from_env(env)
    provider = TracerProvider()
    provider.add_span_processor(CountingProcessor())
    processor = install(provider, settings=settings)
    assert processor is not None
    try:
        judge = processor.scoring.options.judge
        assert (judge.timeout, judge.max_retries, judge.concurrency) == (240.0, 1, 2)  # type: ignore[attr-defined]
        assert (judge.max_tokens, judge.contexts_per_call, judge.context_window) == (  # type: ignore[attr-defined]
            512, 3, 4096
        )
    finally:
        provider.shutdown()
    with pytest.raises(ValueError, match="RAGTRACE_JUDGE_TIMEOUT='0'"):
        RagtraceSettings.from_env({"RAGTRACE_JUDGE_TIMEOUT": "0"})
