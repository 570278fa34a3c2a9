"""`ragtrace demo`: what ragtrace is for, in half a minute. Live traffic through the demo app; part-way its
retriever's index is swapped for a stale snapshot; the table shows every scored trace with pass/fail labels,
the drift detector says when retrieval quality left its baseline and which traces to open, and a closing
paragraph says what was seen and where the scores went.

The drift detector is the production one (`ragtrace.live.drift`) with windows sized for a few dozen
requests; the scores reach it through the processor's metrics, exactly as with `install(..., drift=True)`.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult

from ragtrace._text import shorten
from ragtrace.demo.app import BM25Retriever, DemoApp, Question, load_corpus, load_questions, stale_snapshot
from ragtrace.judges import Judge
from ragtrace.live.drift import DriftConfig, DriftMetrics, DriftMonitor, DriftState
from ragtrace.scoring import SCORERS

if TYPE_CHECKING:
    from ragtrace.live.settings import WorkerKind

SHORT = {"context_precision": "precision", "context_relevance": "relevance", "context_recall": "recall"}

LEGEND = """\
Each row is one request's retrieval, scored on a background worker by the {judge} judge (0 = bad, 1 = good):
  precision  are the passages that answer the question ranked first?       (context_precision)
  relevance  how much of what was retrieved is relevant, and was it used?  (context_relevance)
  recall     does the retrieved text hold every claim of the reference?    (context_recall; golden questions)
  pass = score >= {threshold}, FAIL below; '-' = not scored (no reference answer, or not sampled)."""

#: The production detector with windows for a few dozen requests (production: baseline 300, window 100).
#: min_std: a baseline of identical scores (recall is 1.00 on every golden question here) would otherwise make
#: one low score a drift on its own.
DEMO_DRIFT = DriftConfig(
    baseline_size=12, window=10, min_recent=5, threshold=3.0, min_delta=0.1, cusum_h=5.0, min_std=0.25
)

#: Failing trace ids listed with a drift alert.
TRACES_TO_OPEN = 3
# The table's "why" column: the lowest score's reason, cut at a word.
WHY_WIDTH = 100
# The failing retrievals in Phoenix's span filter syntax (a Python expression: `==` and a quoted string).
PHOENIX_FILTER = "ragtrace.context_precision.label == 'fail'"


@dataclass
class Row:
    request: int
    trace_id: int
    scores: dict[str, float]
    labels: dict[str, str]
    degraded: bool
    error: str | None  # the evaluation's error code (judge_timeout, judge_unavailable, ...) when it failed
    message: str | None = None  # and what the span says about it (the judge's own words, secrets cut)


@dataclass
class Alert:
    request: int
    state: DriftState
    failing: list[int] = field(default_factory=list)


class ScoreTable(SpanExporter):
    """Prints one row per retrieval span as it is exported (scored, or passed over by sampling), and after
    each scored row asks the drift monitor whether a series changed, printing an alert when one did."""

    def __init__(self, out: TextIO, monitor: DriftMonitor, requests: dict[int, tuple[int, bool]]) -> None:
        self.out = out
        self.monitor = monitor
        self.requests = requests  # trace id -> (request number, retriever degraded)
        self.current = (0, False)  # the request in flight: a trace scored before its id is known is this one
        self.rows: list[Row] = []
        self.alerts: list[Alert] = []
        self.exported = 0  # retrieval spans seen
        self._changed = threading.Condition()
        # The monitor's drift span comes back through this exporter while a check runs: re-entrant lock.
        self._lock = threading.RLock()

    def header(self) -> None:
        names = "  ".join(f"{SHORT[n]:<9}" for n in SCORERS)
        self._print(f"{'req':>3}  {'trace':<8}  {'query':<38}  {names}  why (the lowest score)")

    def _print(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            attrs = span.attributes or {}
            if attrs.get("gen_ai.operation.name") != "retrieval" or span.context is None:
                continue
            with self._lock:
                if "ragtrace.eval.status" in attrs:
                    self._row(span.context.trace_id, attrs)
                    self._check_drift()
            with self._changed:
                self.exported += 1
                self._changed.notify_all()
        return SpanExportResult.SUCCESS

    def _row(self, trace_id: int, attrs: Mapping[str, Any]) -> None:
        get = attrs.get
        request, degraded = self.requests.get(trace_id, self.current)
        scores = {n: float(v) for n in SCORERS if isinstance(v := get(f"ragtrace.{n}.score"), int | float)}
        labels = {n: str(get(f"ragtrace.{n}.label", "")) for n in scores}
        error = get("ragtrace.eval.error")
        message = next((str(m) for n in SCORERS if (m := get(f"ragtrace.{n}.reason"))), None) if error else None
        self.rows.append(Row(request, trace_id, scores, labels, degraded, str(error) if error else None, message))
        cells = "  ".join(
            f"{scores[n]:.2f} {'pass' if labels[n] == 'pass' else 'FAIL':<4}" if n in scores else f"{'-':<9}"
            for n in SCORERS
        )
        worst = min(scores, key=lambda n: scores[n]) if scores else None
        if worst:
            why = str(get(f"ragtrace.{worst}.reason", ""))
        else:
            why = f"not scored: {error}" if error else str(get("ragtrace.eval.status", ""))
        query = str(get("gen_ai.retrieval.query.text", ""))
        query = query if len(query) <= 38 else query[:37] + "…"
        why = shorten(why, WHY_WIDTH, at_word=True)
        self._print(f"{request:>3}  {trace_id:032x}"[:13] + f"  {query:<38}  {cells}  {why}")

    def _check_drift(self) -> None:
        for state in self.monitor.check().values():
            if not state.changed:
                continue
            request = self.rows[-1].request if self.rows else 0
            failing = [r.trace_id for r in self.rows if r.labels.get(state.scorer) == "fail"][-TRACES_TO_OPEN:]
            self.alerts.append(Alert(request, state, failing if state.detected else []))
            self._print(format_alert(state, failing))

    def wait_for(self, exported: int, timeout: float) -> None:
        """Until `exported` retrieval spans went out (or `timeout` seconds): paces traffic to the scoring."""
        with self._changed:
            self._changed.wait_for(lambda: self.exported >= exported, timeout=timeout)

    def shutdown(self) -> None:
        return None


def format_alert(state: DriftState, failing: Sequence[int]) -> str:
    if not state.detected:
        return (
            f"     drift ended: {state.scorer} on {state.retriever} is back to {state.recent_mean:.2f} "
            f"(baseline {state.baseline_mean:.2f})"
        )
    lines = [
        f"  >> DRIFT {state.scorer} on retriever {state.retriever!r}: mean of the last {state.recent_n} "
        f"{state.recent_mean:.2f} vs baseline {state.baseline_mean:.2f} ({state.delta:+.2f}; flagged by {state.by})",
    ]
    if failing:
        lines.append("     failing traces to open: " + ", ".join(f"{t:032x}" for t in failing))
    return "\n".join(lines)


def _otlp_endpoint() -> str | None:
    return os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")


def _otlp_processor() -> BatchSpanProcessor | None:
    """Export over OTLP only when the standard OTel variables ask for it (protocol from them too)."""
    if not _otlp_endpoint():
        return None
    from ragtrace.live.otlp import otlp_span_exporter

    return BatchSpanProcessor(otlp_span_exporter())


def traffic(questions: Sequence[Question], requests: int, seed: int = 3) -> list[Question]:
    """`requests` questions: the set over and over, each round in its own shuffled order."""
    rng = random.Random(seed)
    out: list[Question] = []
    while len(out) < requests:
        round_ = list(questions)
        rng.shuffle(round_)
        out.extend(round_)
    return out[:requests]


def _mean(values: Sequence[float]) -> str:
    return f"{sum(values) / len(values):.2f}" if values else "-"


def summary(
    table: ScoreTable, requests: int, degrade_at: int, elapsed: float, endpoint: str | None, stale: str
) -> str:
    """The closing paragraph: what happened to the scores, what the detector said, where the scores went."""
    before = [r for r in table.rows if not r.degraded]
    after = [r for r in table.rows if r.degraded]

    def phase(rows: list[Row]) -> str:
        parts = []
        for name in SCORERS:
            scored = [r for r in rows if name in r.scores]
            failed = sum(1 for r in scored if r.labels[name] == "fail")
            if scored:
                parts.append(f"{SHORT[name]} {_mean([r.scores[name] for r in scored])} ({failed}/{len(scored)} FAIL)")
        return ", ".join(parts) or "nothing scored"

    started = [a for a in table.alerts if a.state.detected]
    if started:
        first: dict[str, int] = {}
        for alert in started:
            first.setdefault(alert.state.scorer, alert.request)
        flagged = ", ".join(
            f"{SHORT.get(name, name)} at request {request} (request {request - degrade_at + 1} on the stale index)"
            for name, request in sorted(first.items(), key=lambda item: item[1])
        )
        detected = f"The drift detector flagged {flagged}"
        to_open = list(dict.fromkeys(t for a in started for t in a.failing))[:TRACES_TO_OPEN]
        if to_open:
            traces = ", ".join(f"{t:032x}" for t in to_open)
            detected += (f"; open trace {traces} in your trace UI to see why" if endpoint
                         else f"; the rows of trace {traces} above say why")
        detected += "."
    elif after:
        detected = "The drift detector did not flag a change (more requests give it more to go on)."
    else:
        detected = ""
    if endpoint:
        where = (
            f"Every scored span was also exported over OTLP to {endpoint}, with ragtrace.<scorer>.score, "
            f".label and .reason on its retrieval span: in Phoenix, clear the pre-filled `parent_id is None` (the "
            f"scores are on a child span) and filter with {PHOENIX_FILTER}."
        )
    else:
        where = (
            "The scores went to this console only; set OTEL_EXPORTER_OTLP_ENDPOINT (e.g. http://localhost:4317) "
            f"to send the scored spans to a collector or trace UI, where the filter {PHOENIX_FILTER} (Phoenix's "
            "syntax; clear its pre-filled `parent_id is None` first) finds the failing retrievals."
        )
    scored = sum(1 for r in table.rows if r.scores)
    errors = Counter(r.error for r in table.rows if r.error)
    failed = (
        f" {sum(errors.values())} evaluation(s) ended in a judge error ({', '.join(sorted(errors))}): "
        "no score for those, see the rows above." if errors else ""
    )
    healthy = f"Requests 1-{degrade_at - 1}" if degrade_at > 2 else "Request 1"
    return (
        f"What you saw: {requests} requests in {elapsed:.0f} s, {scored} scored.{failed} {healthy} ran on the full "
        f"index: {phase(before)}. From request {degrade_at} the index was a stale snapshot ({stale}): "
        f"{phase(after)}. {detected} {where}"
    ).replace("  ", " ")


def run_demo(
    requests: int = 40,
    judge: str | Judge = "local",
    sample_rate: float = 1.0,
    out: TextIO = sys.stdout,
    worker: WorkerKind = "thread",
    degrade_at: int | None = None,
) -> int:
    """Run the demo; exit code 0, or 1 when no trace could be scored (every evaluation failed)."""
    from ragtrace.live import install

    if requests < 1:
        raise ValueError(f"requests must be >= 1, got {requests}")
    degrade_at = degrade_at if degrade_at is not None else max(2, (requests * 2) // 5 + 1)
    provider = TracerProvider(resource=Resource.create({"service.name": "ragtrace-demo"}))
    otlp = _otlp_processor()
    if otlp is not None:
        provider.add_span_processor(otlp)
    monitor = DriftMonitor(DEMO_DRIFT, interval=3600, tracer_provider=provider)  # checked after each row
    numbers: dict[int, tuple[int, bool]] = {}
    table = ScoreTable(out, monitor, numbers)
    provider.add_span_processor(SimpleSpanProcessor(table))
    threshold = min(s().threshold * s().scale for s in SCORERS.values())
    judge_name = judge if isinstance(judge, str) else judge.model
    print(LEGEND.format(judge=judge_name, threshold=f"{threshold:.2f}"), file=out)
    print(f"Traffic: {requests} requests; at request {degrade_at} the retriever's index is swapped for a stale "
          "snapshot (ragtrace is not told).\n", file=out, flush=True)
    install(provider, judge=judge, sample_rate=sample_rate, worker=worker, drift=False,
            metrics=DriftMetrics(monitor=monitor))

    corpus = load_corpus()
    stale = stale_snapshot(corpus)
    stale_note = f"{len(corpus) - len(stale)} of {len(corpus)} passages missing"
    app = DemoApp(provider.get_tracer("ragtrace.demo"), BM25Retriever(corpus))
    table.header()
    started = time.perf_counter()
    for number, question in enumerate(traffic(load_questions(), requests), start=1):
        if number == degrade_at:
            app.retriever = BM25Retriever(stale)
            print(f"---- request {number}: the index is now a stale snapshot ({stale_note}) ----", file=out, flush=True)
        table.current = (number, number >= degrade_at)
        numbers[app.answer(question).trace_id] = table.current
        table.wait_for(number, timeout=60.0)
    provider.force_flush(timeout_millis=120_000)
    provider.shutdown()
    monitor.shutdown(wait=False)
    elapsed = time.perf_counter() - started
    print("\n" + summary(table, requests, degrade_at, elapsed, _otlp_endpoint(), stale_note), file=out)
    if not any(r.scores for r in table.rows):
        codes = ", ".join(sorted({r.error for r in table.rows if r.error})) or "no evaluation came back"
        print(f"ragtrace demo: no trace was scored ({codes}); check the judge ({judge_name})", file=sys.stderr)
        if first := next((r for r in table.rows if r.message), None):  # once, in the judge's words
            print(f"ragtrace demo: {first.error}: {first.message}", file=sys.stderr)
        return 1
    return 0
