"""`ScoringOptions`: what one live scoring pipeline is asked to do, checked once, shared by every piece."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from opentelemetry._logs import LoggerProvider

from ragtrace import _checks as checks
from ragtrace.capture import DEFAULT_RULES, CaptureRules, Extractor
from ragtrace.capture.explain import DecisionLog
from ragtrace.judges.base import Judge
from ragtrace.live.metrics import RagtraceMetrics
from ragtrace.live.redaction import Redactor
from ragtrace.live.sampling import Sampler
from ragtrace.live.settings import DEFAULTS, Mode, ResultsTo, Target, WorkerKind, default_worker
from ragtrace.live.worker import DEFAULT_TICK_S
from ragtrace.scoring import SCORERS, Scorer


@dataclass(frozen=True)
class ScoringOptions:
    """The scoring arguments of `RagScoringSpanProcessor` and `RagScoringSpanExporter`.

    Where a field shares its name with a `RagtraceSettings` field it takes that row's default (`DEFAULTS`).

    judge / scorers: who gives verdicts and what is scored (default precision, relevance, and recall
        for samples that carry a ground truth). sampler: which traces and scorers (default 10 %).
    mode: "enrich" writes scores onto the evaluated span before it is exported (spans of a sampled
        trace wait up to `score_deadline`); "link" exports at once and adds `evaluation <scorer>` spans.
    target: the span that receives the scores (retrieval, its generation, or the trace's root).
    max_trace_wait: a trace whose local root never ends is closed after this many seconds.
    score_deadline: held spans are forwarded with status `timeout` if scoring takes longer.
    max_queue / max_held_spans / max_open_traces: the bounds on memory; overflow forwards spans
        unscored and is counted (`queue_full`).
    concurrency: judge calls at once. redactor: applied to every sample before the judge sees it.
    extractor: your own span shapes -> samples (see ragtrace.capture). metrics: RagtraceMetrics.
    tick_interval: how often a busy worker closes, ships and releases traces (seconds; see
        `worker.DEFAULT_TICK_S` for why 0.2).
    worker: "thread" scores in a thread of this process; "process" in a scoring process of its own,
        out of this process's GIL (enrich mode only). Unset: `settings.default_worker` (the thread here).
    decision_log: keeps the last traces closed, to ask why they were (not) scored
        (`ragtrace.capture.explain.DecisionLog`).
    capture_rules: which tools are retrievals, which query is judged (`ragtrace.capture.CaptureRules`).
    evaluation_results: each `gen_ai.evaluation.result` as a span event, a log record, or both;
        logger_provider: where the log records go (default: the global one, a no-op until the app sets it).
    hold_whole_trace: in enrich mode, every span of a sampled trace from its first retrieval on waits for
        the scores, not only the spans they are written on (a gateway with a spool: after a crash it
        replays a trace whole, and scores it at once, only if none of its spans had gone on).
    """

    judge: Judge
    scorers: Sequence[Scorer] | None = None
    sampler: Sampler = field(default_factory=lambda: Sampler(DEFAULTS.sample_rate))
    mode: Mode = DEFAULTS.mode
    target: Target = DEFAULTS.target
    max_trace_wait: float = DEFAULTS.max_trace_wait
    score_deadline: float = DEFAULTS.score_deadline
    max_queue: int = DEFAULTS.max_queue
    max_held_spans: int = DEFAULTS.max_held_spans
    max_open_traces: int = DEFAULTS.max_open_traces
    concurrency: int = DEFAULTS.concurrency
    redactor: Redactor | None = None
    extractor: Extractor | None = None
    metrics: RagtraceMetrics | None = None
    reason_max_chars: int = DEFAULTS.reason_max_chars
    tick_interval: float = DEFAULT_TICK_S
    worker: WorkerKind | None = None  # set in __post_init__: never None after it
    decision_log: DecisionLog | None = None
    capture_rules: CaptureRules = DEFAULT_RULES
    evaluation_results: ResultsTo = DEFAULTS.evaluation_results
    logger_provider: LoggerProvider | None = None
    hold_whole_trace: bool = False

    def __post_init__(self) -> None:
        if self.worker is None:
            object.__setattr__(self, "worker", default_worker(self.mode, "hand"))
        if self.mode not in ("enrich", "link"):
            raise ValueError(f"mode must be 'enrich' or 'link', got {self.mode!r}")
        if self.worker not in ("thread", "process"):
            raise ValueError(f"worker must be 'thread' or 'process', got {self.worker!r}")
        if self.worker == "process" and self.mode != "enrich":
            raise ValueError("worker='process' writes scores in enrich mode only; use worker='thread' for link mode")
        if self.evaluation_results not in ("events", "logs", "both"):
            raise ValueError(
                f"evaluation_results must be 'events', 'logs' or 'both', got {self.evaluation_results!r}"
            )
        if self.target not in ("retrieval", "generation", "root"):
            raise ValueError(f"target must be 'retrieval', 'generation' or 'root', got {self.target!r}")
        checks.positive(self, "max_trace_wait", "score_deadline", "tick_interval", unit=" seconds")
        checks.counts(self, "max_queue", "max_held_spans", "max_open_traces", "concurrency", "reason_max_chars")
        scorers = tuple(self.scorers) if self.scorers is not None else tuple(SCORERS[n]() for n in DEFAULTS.scorers)
        object.__setattr__(self, "scorers", scorers)
        if self.sampler is None:
            object.__setattr__(self, "sampler", Sampler(DEFAULTS.sample_rate))

    @property
    def enrich(self) -> bool:
        return self.mode == "enrich"

    @property
    def model(self) -> str:
        return str(getattr(self.judge, "model", ""))

    @property
    def prompt_version(self) -> str:
        return str(getattr(self.judge, "prompt_version", ""))
