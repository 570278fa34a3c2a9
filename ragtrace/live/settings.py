"""`RagtraceSettings`: the settings table. Each field is one row: its name is the `install()` keyword, the
`ScoringOptions` field and (spelled by `as_variable` / `as_flag`) the `RAGTRACE_*` variable and the CLI flag;
its default and description are the only ones written (`ScoringOptions` reads `DEFAULTS`, the CLI's flags and
docs/configuration.md are made from the rows, see `settings_rows.py`).

`scoring_options` turns settings (plus the judge and the keyword options of `install()` or `Gateway`) into
the arguments of `RagScoringSpanProcessor` / `RagScoringSpanExporter`: the one place overrides are merged,
and `default_worker` the one rule for the worker nobody chose.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from opentelemetry.metrics import MeterProvider
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from ragtrace._logs import ragtrace_logger
from ragtrace.capture import CaptureRules
from ragtrace.capture.rules import QuerySource
from ragtrace.judges.base import Judge
from ragtrace.judges.llm.tracing import JudgeTraces
from ragtrace.judges.resolve import is_local_judge, judge_spec_problem, resolve_judge
from ragtrace.live.drift import DriftMetrics, DriftMonitor
from ragtrace.live.drift.canary import Canary, load_canary
from ragtrace.live.metrics import RagtraceMetrics
from ragtrace.live.redaction import Redactor
from ragtrace.live.sampling import Sampler
from ragtrace.scoring import SCORERS, Scorer

logger = ragtrace_logger(__name__)

ENV_PREFIX = "RAGTRACE_"
# The local judge is CPU work (~0.35 s a sample) on the app's own cores: one sample at a time unless
# asked otherwise (the gateway, a process of its own, keeps the default).
LOCAL_JUDGE_CONCURRENCY = 1

Mode = Literal["enrich", "link"]
Target = Literal["retrieval", "generation", "root"]
WorkerKind = Literal["thread", "process"]
# Where each `gen_ai.evaluation.result` goes: span events (what trace UIs show), log records through the
# OpenTelemetry Logs API (where OpenTelemetry is taking span events), or both.
ResultsTo = Literal["events", "logs", "both"]
Placement = Literal["auto", "exporter", "processor"]
# Who builds the scoring: `install()` (and `scoring_batch_processor`), the `Gateway`, or the app's own code
# building a face (`RagScoringSpanProcessor(...)`, `ScoringOptions`) by hand.
BuiltBy = Literal["install", "gateway", "hand"]

# The judge_* rows and the LLMJudge keyword each one sets (unset: LLMJudge's own default).
LLM_JUDGE_KEYWORDS = {
    "judge_timeout": "timeout",
    "judge_max_retries": "max_retries",
    "judge_concurrency": "concurrency",
    "judge_max_tokens": "max_tokens",
    "judge_contexts_per_call": "contexts_per_call",
    "judge_context_window": "context_window",
}


class SettingsError(ValueError):
    """Settings that do not validate. Each problem is named as the user wrote it (`RAGTRACE_SAMPLE_RATE`,
    `--sample-rate` or `sample_rate`), with the value and what is wrong, the same way from every source."""


def as_variable(field: str) -> str:
    """How a settings field is spelled as an environment variable."""
    return ENV_PREFIX + field.upper()


def as_keyword(field: str) -> str:
    """How a settings field is spelled in Python (`install(sample_rate=...)`)."""
    return field


def as_flag(field: str) -> str:
    """How a settings field is spelled on the command line (`ragtrace serve --sample-rate`)."""
    return "--" + field.replace("_", "-")


def _settings_error(exc: ValidationError, values: Mapping[str, Any], spelled: Callable[[str], str]) -> SettingsError:
    problems = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else "?"
        message = str(error["msg"]).removeprefix("Value error, ")
        shown = f"={values[field]!r}" if field in values else ""
        problems.append(f"{spelled(field)}{shown}: {message}")
    return SettingsError("invalid ragtrace settings: " + "; ".join(problems))


class RagtraceSettings(BaseModel):
    """Live-scoring settings; `from_env()` reads each field from `RAGTRACE_<FIELD>` (e.g. RAGTRACE_SAMPLE_RATE)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(True, description="false: install() does nothing; the gateway forwards every span unscored")
    judge_api_base: str | None = Field(  # before `judge`, whose check reads it
        None, description="base URL of the litellm judge's server (self-hosted, OpenAI-compatible)"
    )
    judge: str = Field("local", min_length=1, description="'local' or a litellm model, e.g. openai/gpt-4o-mini")
    # LLM judge calls (a litellm judge only); unset keeps LLMJudge's defaults.
    judge_timeout: float | None = Field(None, gt=0, description="seconds per LLM judge call; cancelled past it")
    judge_max_retries: int | None = Field(
        None, ge=0, description="retries of a failed LLM judge call: 429, 5xx, connection"
    )
    judge_concurrency: int | None = Field(None, ge=1, description="LLM judge calls in flight at once")
    judge_max_tokens: int | None = Field(
        None, ge=1, description="cap on each LLM judge answer (unset: derived from what it asks)"
    )
    judge_contexts_per_call: int | None = Field(
        None, ge=1, description="contexts the LLM judge is asked about per call (unset: all that fit)"
    )
    judge_context_window: int | None = Field(
        None, ge=1, description="the judge model's context length, to split prompts that do not fit "
        "(unset: litellm's, when it knows the model)",
    )
    trace_judge: bool = Field(
        False, description="trace the LLM judge's own calls (spans on a tracer provider of ragtrace's own, exported "
        "over OTLP as OTEL_EXPORTER_OTLP_* say; messages only with OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT)"
    )
    sample_rate: float = Field(0.1, ge=0.0, le=1.0, description="share of traces scored, 0..1")
    mode: Mode = Field(
        "enrich", description="'enrich': scores on the evaluated span before it is exported; 'link': spans "
        "export at once, scores on separate `evaluation <scorer>` spans",
    )
    worker: WorkerKind | None = Field(
        None,
        description="'thread': score in a thread of the app's process; 'process': in a scoring process of its "
        "own (enrich mode only); unset: see `default_worker`",
    )
    placement: Placement = Field(
        "auto",
        description="install(): 'exporter' behind the provider's BatchSpanProcessor (the app's threads run no "
        "ragtrace code), 'processor' in front of its processors; 'auto': behind when it has exactly one",
    )
    target: Target = Field(
        "retrieval", description="the span that receives the scores: the retrieval, its generation, or the root"
    )
    scorers: tuple[str, ...] = Field(
        ("context_precision", "context_relevance", "context_recall"), description="comma-separated scorer names"
    )
    max_queue: int = Field(1000, ge=1, description="samples waiting for the judge; more are counted queue_full")
    max_held_spans: int = Field(50_000, ge=1, description="spans held for enrich mode; more export unscored")
    max_open_traces: int = Field(10_000, ge=1, description="traces collected at once; more export unscored")
    concurrency: int = Field(
        8, ge=1, description="samples judged at once (the local judge in install(): 1 unless set)"
    )
    score_deadline: float = Field(
        30.0, gt=0, description="seconds a sampled trace's spans may wait for scores; then forwarded, `timeout`"
    )
    max_trace_wait: float = Field(
        30.0, gt=0, description="seconds before a trace whose root never ends is closed"
    )
    evaluations_per_minute: float | None = Field(None, gt=0, description="cap on samples judged a minute")
    daily_token_budget: int | None = Field(None, ge=0, description="judge tokens a day; past it, not sampled")
    daily_usd_budget: float | None = Field(None, ge=0, description="judge spend a day in USD; past it, not sampled")
    redact: bool = Field(True, description="redact samples (keys, emails, ...) before the judge sees them")
    reason_max_chars: int = Field(500, ge=1, description="longest judge reason written on a span")
    evaluation_results: ResultsTo = Field(
        "both", description="where each gen_ai.evaluation.result goes: 'events' on the scored span, 'logs' as "
        "log records through the OTel Logs API (the app's LoggerProvider; correlated by trace and span id), or "
        "'both'",
    )
    session_exemplars: bool = Field(
        False, description="record each score's session id (ragtrace.session.id) on the score histogram's exemplars; "
        "needs a MeterProvider built with views=ragtrace.metric_views() (without them: not recorded, a warning); "
        "`ragtrace serve` turns it on, with the views, unless set",
    )
    drift: bool = Field(True, description="watch the scores for drift (`DriftMonitor`)")
    drift_interval: float = Field(30.0, gt=0, description="seconds between drift checks")
    canary: str = Field(
        "off", description="the judge canary (with drift on): 'off', 'default' (20 labelled HotpotQA items shipped "
        "in the package) or the path of a labels file as `ragtrace align` reads it (context_labels and/or labels)"
    )
    canary_size: int = Field(20, ge=1, description="labelled items the canary judges per run, at most")
    canary_interval: float = Field(3600.0, gt=0, description="seconds between scheduled canary runs")
    retrieval_tools: tuple[str, ...] = Field(
        (), description="tool names (or fnmatch patterns) whose calls are retrievals; '!name': never one"
    )
    tool_separator: str = Field(
        "\n\n", min_length=1, description="splits a named tool's plain-text result into documents"
    )
    query_source: QuerySource = Field(
        "user", description="'user': judge against the user's question; 'retrieval': the retrieval's own query"
    )

    @field_validator("judge")
    @classmethod
    def _known_judge(cls, value: str, info: ValidationInfo) -> str:
        problem = judge_spec_problem(value, info.data.get("judge_api_base"))
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("canary")
    @classmethod
    def _canary_source(cls, value: str) -> str:
        if value in ("off", "default"):
            return value
        path = Path(value).expanduser()
        if path.suffix.lower() not in (".jsonl", ".json", ".ndjson") or not path.is_file():
            raise ValueError("'off', 'default', or the path of an existing labels file")
        return str(path)

    @field_validator("scorers", "retrieval_tools", mode="before")
    @classmethod
    def _split_names(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("tool_separator", mode="before")
    @classmethod
    def _unescape_separator(cls, value: Any) -> Any:
        """An env var cannot hold a newline easily: `\\n` and `\\t` in it stand for them."""
        if isinstance(value, str):
            value = value.replace("\\n", "\n").replace("\\t", "\t")
        return value

    def capture_rules(self) -> CaptureRules:
        return CaptureRules(retrieval_tools=self.retrieval_tools, tool_separator=self.tool_separator,
                            query_source=self.query_source)

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
            if (value := env.get(as_variable(name))) is not None and value.strip()
        }
        return cls.checked(raw, as_variable)

    @classmethod
    def checked(cls, values: Mapping[str, Any], spelled: Callable[[str], str] = as_keyword) -> RagtraceSettings:
        """Settings from `values`; SettingsError (a ValueError) naming each bad one as `spelled` writes it:
        the one validator behind the variables, `serve`'s flags and Python's keywords."""
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise _settings_error(exc, values, spelled) from None

    def with_overrides(
        self, overrides: Mapping[str, Any], spelled: Callable[[str], str] = as_keyword
    ) -> RagtraceSettings:
        """These settings with some fields replaced, checked like the env vars are (errors name an
        override as `spelled` writes it)."""
        if not overrides:
            return self
        current = self.model_dump(exclude_unset=True)
        try:
            return type(self).model_validate({**current, **overrides})
        except ValidationError as exc:
            raise _settings_error(exc, {**current, **overrides}, spelled) from None

    def llm_judge_options(self) -> dict[str, Any]:
        """The `resolve_judge` keywords of the judge_* settings: `api_base`, and the LLMJudge call
        options that are set (as `llm_options`, which reach a litellm judge only)."""
        chosen = {
            keyword: value
            for name, keyword in LLM_JUDGE_KEYWORDS.items()
            if (value := getattr(self, name)) is not None
        }
        if self.trace_judge:
            chosen["traces"] = JudgeTraces(redact=Redactor().redact_text if self.redact else None)
        return {"api_base": self.judge_api_base, "llm_options": chosen}

    def processor_options(self) -> dict[str, Any]:
        """The `ScoringOptions` keyword arguments these settings stand for (judge and metrics excluded;
        `worker` only when chosen: `scoring_options` applies `default_worker`, and a `ScoringOptions` built
        without one keeps the thread)."""
        options: dict[str, Any] = {
            "scorers": [SCORERS[name]() for name in self.scorers],
            "sampler": Sampler(
                self.sample_rate,
                evaluations_per_minute=self.evaluations_per_minute,
                daily_token_budget=self.daily_token_budget,
                daily_usd_budget=self.daily_usd_budget,
            ),
            "mode": self.mode,
            "target": self.target,
            "max_trace_wait": self.max_trace_wait,
            "score_deadline": self.score_deadline,
            "max_queue": self.max_queue,
            "max_held_spans": self.max_held_spans,
            "max_open_traces": self.max_open_traces,
            "concurrency": self.concurrency,
            "redactor": Redactor() if self.redact else None,
            "reason_max_chars": self.reason_max_chars,
            "evaluation_results": self.evaluation_results,
            "capture_rules": self.capture_rules(),
        }
        if self.worker is not None:
            options["worker"] = self.worker
        return options

    def build_canary(self, judge: Judge, scorers: Sequence[Scorer], sampler: Sampler) -> Canary | None:
        """The judge canary these settings ask for (None when off), judged by the live judge with the live
        scorers and charged to the live sampler's budget."""
        if self.canary == "off" or not self.drift:
            return None
        items = load_canary(None if self.canary == "default" else self.canary, size=self.canary_size)
        return Canary(judge, items, scorers=scorers, sampler=sampler)

    def build_metrics(
        self, meter_provider: MeterProvider | None = None, canary: Canary | None = None
    ) -> RagtraceMetrics:
        """The processor's metrics; with `drift` on, they also feed a scheduled DriftMonitor (with `canary`)."""
        if not self.drift:
            return RagtraceMetrics(meter_provider, session_exemplars=self.session_exemplars)
        monitor = DriftMonitor(
            interval=self.drift_interval, meter_provider=meter_provider, canary=canary,
            canary_interval=self.canary_interval,
        )
        return DriftMetrics(meter_provider, monitor=monitor.start(), session_exemplars=self.session_exemplars)


DEFAULTS = RagtraceSettings.model_construct()  # every row's default (not validated: they are the defaults)


def default_worker(mode: Mode, built_by: BuiltBy) -> WorkerKind:
    """The worker nobody chose, the one rule: `install()` in enrich mode scores in a process of its own
    (scoring then leaves the app's GIL); link mode (which the scoring process does not do), the gateway
    (already a process of its own) and a face built by hand (`ScoringOptions`) score in a thread."""
    return "process" if built_by == "install" and mode == "enrich" else "thread"


def scoring_options(
    settings: RagtraceSettings | None,
    judge: str | Judge | None,
    meter_provider: MeterProvider | None,
    options: dict[str, Any],
    built_by: BuiltBy = "install",
) -> tuple[RagtraceSettings, dict[str, Any]]:
    """Settings (default: `RAGTRACE_*`) with the RagtraceSettings fields among `options` applied, and the
    scoring keyword arguments they stand for: judge, metrics, then the other `options` (scoring arguments
    such as `sampler` or `tick_interval`) last.

    Where install() and the gateway differ, it is said here: disabled settings make install() build
    nothing while the gateway still forwards, sampling none; install()'s local judge runs one sample at a
    time on the app's cores unless `concurrency` is set; the gateway builds its own metrics only for a
    given meter provider (else the processor's defaults); the worker is `default_worker`'s."""
    settings = settings if settings is not None else RagtraceSettings.from_env()
    overrides = {name: options.pop(name) for name in list(options) if name in RagtraceSettings.model_fields}
    concurrency_chosen = "concurrency" in settings.model_fields_set or "concurrency" in overrides
    settings = settings.with_overrides(overrides)  # e.g. sample_rate=1.0, checked like the env var
    if not settings.enabled and built_by == "install":
        logger.info("ragtrace: disabled by settings (RAGTRACE_ENABLED=false)")
        return settings, {}
    spec = settings.judge if judge is None else judge
    kwargs = settings.processor_options()
    kwargs["worker"] = settings.worker or default_worker(settings.mode, built_by)
    kwargs["judge"] = resolve_judge(spec, **settings.llm_judge_options())
    if built_by == "install" and is_local_judge(spec) and not concurrency_chosen:
        kwargs["concurrency"] = LOCAL_JUDGE_CONCURRENCY
    if not settings.enabled:  # the gateway: forward everything, score nothing
        kwargs["sampler"] = Sampler(0.0)
    kwargs.update(options)
    if "metrics" not in options and (built_by == "install" or meter_provider is not None):
        canary = settings.build_canary(kwargs["judge"], kwargs["scorers"], kwargs["sampler"])
        kwargs["metrics"] = settings.build_metrics(meter_provider, canary)
    return settings, kwargs
