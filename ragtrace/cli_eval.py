"""`ragtrace eval DATA` and `ragtrace replay FILE`: score a dataset or exported traces, for CI.

Exit codes: 0 every `--min` threshold holds (and no significant regression with `--fail-on-regression`),
1 a threshold or the regression check failed, 2 bad input (the message names file, line and field),
130 interrupted (results so far are kept in `--out` and a partial summary is printed).

Per-item results go to `--out` as JSON lines, one per item as it completes, flushed, so a killed run loses
nothing it paid for and `--resume` can pick up where it stopped.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import importlib
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TextIO

from ragtrace.judges import Judge
from ragtrace.judges.resolve import resolve_judge
from ragtrace.offline.compare import Comparison, compare, format_comparison, load_results, record_key
from ragtrace.offline.dataset import MAX_LINE_BYTES, DatasetError, FieldMap, load_dataset
from ragtrace.offline.evaluate import ItemResult, ScorerSummary, aevaluate
from ragtrace.scoring import (
    SCORERS,
    ContextPrecision,
    ContextRecall,
    ContextRelevance,
    JudgeUsage,
    RagSample,
    Scorer,
    ScoreResult,
)

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """Bad input or options: printed as `ragtrace <cmd>: error: ...` and exit code 2."""


@dataclass
class EvalItem:
    """A sample to score, its identity for resume/compare, and extra fields for the out file."""

    index: int
    id: str | None
    sample: RagSample
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return record_key({"id": self.id, "index": self.index})


@dataclass
class Threshold:
    scorer: str
    minimum: float
    mean: float | None = None

    @property
    def passed(self) -> bool:
        return self.mean is not None and self.mean >= self.minimum


# ---------------------------------------------------------------- options


def _add_scoring_options(parser: argparse.ArgumentParser) -> None:
    scoring = parser.add_argument_group("scoring")
    scoring.add_argument(
        "--scorers", default=",".join(SCORERS), help=f"comma-separated, from {', '.join(SCORERS)} (default: all)"
    )
    scoring.add_argument(
        "--judge", default="local",
        help="'local' (offline, default), a litellm model string such as 'openai/gpt-4o-mini', "
        "or 'python:module:attr' naming a Judge class or factory",
    )
    scoring.add_argument("--api-base", help="base URL for a litellm judge (e.g. a local OpenAI-compatible server)")
    _add_llm_judge_options(parser)
    scoring.add_argument("--concurrency", type=int, default=4, help="samples judged at once (default 4)")
    scoring.add_argument("--scale", type=float, default=1.0, help="multiply every score (default 1)")
    scoring.add_argument(
        "--threshold", type=float, default=0.5, help="per-item pass/fail label, a fraction of scale (default 0.5)"
    )
    scoring.add_argument(
        "--reference", choices=("auto", "ground_truth", "response"), default="auto",
        help="what context_precision judges usefulness against (default: ground truth, else response)",
    )
    scoring.add_argument("--unused-high-penalty", type=float, default=0.10, help="context_relevance (default 0.10)")
    scoring.add_argument("--missing-per-item", type=float, default=0.15, help="context_relevance (default 0.15)")
    scoring.add_argument("--max-missing-penalty", type=float, default=0.50, help="context_relevance (default 0.50)")

    gate = parser.add_argument_group("CI gate")
    gate.add_argument(
        "--min", action="append", default=[], metavar="SCORER=VALUE",
        help="fail (exit 1) when the scorer's MEAN over the data is below VALUE; repeatable",
    )
    gate.add_argument(
        "--max-error-rate", type=float, default=0.1,
        help="fail (exit 1) when more than this share of a scorer's items ended in a judge error (default 0.1)",
    )
    gate.add_argument("--compare", metavar="BASELINE.jsonl", help="a previous --out file to compare against")
    gate.add_argument(
        "--fail-on-regression", action="store_true",
        help="with --compare: exit 1 when a scorer dropped significantly (paired Wilcoxon, p < --alpha)",
    )
    gate.add_argument("--alpha", type=float, default=0.05, help="significance level for --compare (default 0.05)")
    gate.add_argument("--worst", type=int, default=5, help="items to list per scorer in --compare (default 5)")

    output = parser.add_argument_group("output")
    output.add_argument("--out", metavar="FILE.jsonl", help="per-item results, one JSON line per item as it completes")
    output.add_argument("--resume", action="store_true", help="with --out: skip items already in the out file")
    output.add_argument("--html", metavar="REPORT.html", help="write a self-contained HTML report")
    output.add_argument("--json", action="store_true", help="print the summary as JSON on stdout (table to stderr)")
    output.add_argument("--quiet", action="store_true", help="no progress output")
    output.add_argument(
        "--max-line-bytes", type=int, default=MAX_LINE_BYTES, help=f"longest input line (default {MAX_LINE_BYTES})"
    )


def add_eval_parser(subparsers: Any) -> argparse.ArgumentParser:
    """The `eval` subcommand, for `ragtrace.cli`."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "eval",
        help="score a dataset (JSONL or CSV) and gate CI on thresholds",
        description="Score a dataset of RAG samples. Exit 0 when every --min holds, 1 when one fails, 2 on bad input.",
    )
    parser.add_argument("data", help="JSONL (one object per line) or CSV (contexts as a JSON list) of samples")
    fields = parser.add_argument_group("field mapping")
    fields.add_argument("--query-field", help="default: 'query', else 'question'")
    fields.add_argument("--contexts-field", default="contexts")
    fields.add_argument("--response-field", default="response")
    fields.add_argument("--ground-truth-field", default="ground_truth")
    fields.add_argument("--id-field", default="id")
    fields.add_argument("--format", choices=("auto", "jsonl", "csv"), default="auto", help="default: by extension")
    _add_scoring_options(parser)
    parser.set_defaults(func=run_eval)
    return parser


def add_replay_parser(subparsers: Any) -> argparse.ArgumentParser:
    """The `replay` subcommand, for `ragtrace.cli`."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "replay",
        help="score traces exported as OTLP (collector file exporter JSON, or protobuf)",
        description="Extract RAG samples from exported OTLP traces with the live capture code, and score them.",
    )
    parser.add_argument("file", help="OTLP JSON lines (one ExportTraceServiceRequest per line) or protobuf")
    parser.add_argument(
        "--format", choices=("auto", "json", "proto"), default="auto",
        help="json: one request per line; proto: one message or length-delimited messages (default: sniff)",
    )
    _add_scoring_options(parser)
    parser.set_defaults(func=run_replay)
    return parser


def build_scorers(args: argparse.Namespace) -> list[Scorer]:
    names = [n.strip() for n in str(args.scorers).split(",") if n.strip()]
    if not names:
        raise UsageError("--scorers is empty")
    unknown = [n for n in names if n not in SCORERS]
    if unknown:
        raise UsageError(f"unknown scorer {unknown[0]!r} in --scorers; choose from {', '.join(SCORERS)}")
    if len(set(names)) != len(names):
        raise UsageError("--scorers names a scorer twice")
    scorers: list[Scorer] = []
    try:
        for name in names:
            if name == ContextPrecision.name:
                scorers.append(ContextPrecision(args.scale, args.threshold, reference_source=args.reference))
            elif name == ContextRelevance.name:
                scorers.append(
                    ContextRelevance(
                        args.scale, args.threshold, args.unused_high_penalty, args.missing_per_item,
                        args.max_missing_penalty,
                    )
                )
            else:
                scorers.append(ContextRecall(args.scale, args.threshold))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return scorers


def parse_thresholds(values: Sequence[str], scorers: Sequence[Scorer], scale: float) -> list[Threshold]:
    """`--min context_precision=0.7` (repeatable); the value is on the score's scale."""
    active = [s.name for s in scorers]
    thresholds: dict[str, Threshold] = {}
    for text in values:
        name, sep, raw = text.partition("=")
        name, raw = name.strip(), raw.strip()
        if not sep or not name or not raw:
            raise UsageError(f"bad --min {text!r}: expected SCORER=VALUE, e.g. context_precision=0.7")
        if name not in SCORERS:
            raise UsageError(f"bad --min {text!r}: unknown scorer {name!r}; choose from {', '.join(SCORERS)}")
        if name not in active:
            raise UsageError(f"bad --min {text!r}: {name} is not in --scorers ({', '.join(active)})")
        try:
            minimum = float(raw)
        except ValueError:
            raise UsageError(f"bad --min {text!r}: {raw!r} is not a number") from None
        if not 0.0 <= minimum <= scale:
            raise UsageError(f"bad --min {text!r}: must be between 0 and the scale ({scale:g})")
        thresholds[name] = Threshold(name, minimum)
    return list(thresholds.values())


# --- LLM judge options (issue 18): flag -> LLMJudge keyword ------------------------------------------------

LLM_JUDGE_FLAGS: dict[str, tuple[str, type, str]] = {
    "judge_timeout": ("timeout", float, "seconds per LLM judge call; a call past it is cancelled (default 30)"),
    "judge_retries": ("max_retries", int, "retries of a failed LLM judge call: 429, 5xx, connection (default 3)"),
    "judge_concurrency": ("concurrency", int, "LLM judge calls in flight at once (default 8)"),
    "judge_max_tokens": ("max_tokens", int, "cap on each LLM judge answer (default: derived from what it asks)"),
    "judge_contexts_per_call": (
        "contexts_per_call", int, "ask the LLM judge about this many contexts per call (default: all that fit)",
    ),
    "judge_context_window": (
        "context_window", int, "the judge model's context length, to split prompts that do not fit "
        "(default: litellm's, when it knows the model)",
    ),
}


def _add_llm_judge_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("LLM judge (a litellm --judge only)")
    for dest, (_, kind, help_text) in LLM_JUDGE_FLAGS.items():
        group.add_argument("--" + dest.replace("_", "-"), dest=dest, type=kind, default=None, help=help_text)


def llm_judge_options(args: argparse.Namespace) -> dict[str, Any]:
    """The LLMJudge keywords the --judge-* flags set; a value out of range is a usage error."""
    options: dict[str, Any] = {}
    for dest, (keyword, _, _) in LLM_JUDGE_FLAGS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        if value < 0 or (value == 0 and keyword != "max_retries"):
            raise UsageError(f"--{dest.replace('_', '-')} must be {'>= 0' if keyword == 'max_retries' else '> 0'}")
        options[keyword] = value
    return options


def load_judge(spec: str | Judge, api_base: str | None, llm_options: dict[str, Any] | None = None) -> Judge:
    """'local', a litellm model string, or 'python:module:attr' (a Judge class/factory, for custom judges)."""
    if not isinstance(spec, str):
        return spec
    if spec.startswith("python:"):
        module_name, _, attr = spec[len("python:"):].partition(":")
        try:
            target = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise UsageError(f"--judge {spec!r}: cannot import ({exc})") from None
        made = target() if isinstance(target, type) or (not isinstance(target, Judge) and callable(target)) else target
        if not isinstance(made, Judge):
            raise UsageError(f"--judge {spec!r}: {type(made).__name__} is not a Judge")
        return made
    options: dict[str, Any] = {}
    is_local = spec.strip() == "local" or spec.strip().startswith("local/")
    if api_base and not is_local:
        options["api_base"] = api_base
    if llm_options and is_local:
        raise UsageError(f"--judge-* options ({', '.join(sorted(llm_options))}) apply to a litellm judge, not {spec!r}")
    options.update(llm_options or {})
    try:
        return resolve_judge(spec, **options)
    except ImportError as exc:
        hint = " (install it with: pip install 'ragtrace[local]')" if is_local else ""
        raise UsageError(f"cannot load judge {spec!r}: {exc}{hint}") from None
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--judge {spec!r}: {exc}") from None


# ---------------------------------------------------------------- progress


class Progress:
    """A bar redrawn in place on a TTY; elsewhere (CI logs) a line every 10% or 10 seconds."""

    def __init__(self, total: int, stream: TextIO, *, enabled: bool = True, done: int = 0) -> None:
        self.total, self.stream, self.enabled = total, stream, enabled
        self.done = self.start_done = done
        self.started = time.monotonic()
        self.tty = enabled and bool(getattr(stream, "isatty", lambda: False)())
        self.step = max(1, total // 10)
        self.last_line = self.started

    def _text(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = (self.done - self.start_done) / elapsed
        left = self.total - self.done
        eta = f"{left / rate:.0f}s" if rate > 0 else "?"
        pct = 100 * self.done / self.total if self.total else 100.0
        return f"{self.done}/{self.total} ({pct:.0f}%) {rate:.1f} items/s, eta {eta}"

    def update(self) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self.tty:
            width = 30
            filled = int(width * self.done / self.total) if self.total else width
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self._text()}   ")
            self.stream.flush()
            return
        now = time.monotonic()
        if self.done == self.total or self.done % self.step == 0 or now - self.last_line >= 10:
            self.last_line = now
            self.stream.write(f"ragtrace: {self._text()}\n")
            self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


# ---------------------------------------------------------------- output


def item_record(item: EvalItem, result: ItemResult) -> dict[str, Any]:
    """One line of the out file: identity, query, every scorer's full result and the usage."""
    return {
        "index": item.index,
        "id": item.id,
        **item.extra,
        "query": item.sample.query,
        "scores": {name: r.score for name, r in result.results.items()},
        "results": {name: r.as_dict() for name, r in result.results.items()},
        "usage": result.usage.model_dump(mode="json"),
    }


def _item_result(record: dict[str, Any]) -> ItemResult:
    return ItemResult(
        index=int(record.get("index", 0)),
        id=record.get("id"),
        results={k: ScoreResult.model_validate(v) for k, v in record["results"].items()},
        usage=JudgeUsage.model_validate(record.get("usage") or {}),
    )


def _fmt(value: float | None, pct: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:.0f}%" if pct else f"{value:.3f}"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "0"


def format_table(summaries: dict[str, ScorerSummary], usage: JudgeUsage, thresholds: Sequence[Threshold]) -> str:
    """The human summary: one row per scorer, then what the judge spent."""
    by_name = {t.scorer: t for t in thresholds}
    header = ["scorer", "mean", "p10", "p50", "p90", "pass", "scored", "skipped", "errors", "min"]
    rows = [header]
    for name, s in summaries.items():
        gate = by_name.get(name)
        verdict = "-" if gate is None else f"{gate.minimum:g} {'ok' if gate.passed else 'FAIL'}"
        rows.append([
            name, _fmt(s.mean), _fmt(s.p10), _fmt(s.p50), _fmt(s.p90), _fmt(s.pass_rate, True),
            f"{s.scored}/{s.count}", _counts(s.skipped), _counts(s.errors), verdict,
        ])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    cost = "n/a" if usage.cost_usd is None else f"${usage.cost_usd:.4f}"
    lines.append(
        f"judge {usage.model or '?'}: {usage.calls} calls, {usage.input_tokens} input + {usage.output_tokens} "
        f"output tokens, cost {cost}, {usage.cache_hits} cache hits"
    )
    return "\n".join(lines)


def summary_json(
    *,
    command: str,
    source: str,
    items: Sequence[ItemResult],
    summaries: dict[str, ScorerSummary],
    usage: JudgeUsage,
    thresholds: Sequence[Threshold],
    comparison: Comparison | None,
    evaluated: int,
    resumed: int,
    interrupted: bool,
    elapsed: float,
    exit_code: int,
) -> dict[str, Any]:
    by_name = {t.scorer: t for t in thresholds}
    scorers: dict[str, Any] = {}
    for name, s in summaries.items():
        entry = s.model_dump(mode="json")
        if name in by_name:
            entry["min"] = by_name[name].minimum
            entry["passed"] = by_name[name].passed
        scorers[name] = entry
    return {
        "command": command,
        "source": source,
        "items": len(items),
        "evaluated": evaluated,
        "resumed": resumed,
        "interrupted": interrupted,
        "elapsed_s": round(elapsed, 3),
        "judge": usage.model_dump(mode="json"),
        "scorers": scorers,
        "thresholds": [{"scorer": t.scorer, "min": t.minimum, "mean": t.mean, "passed": t.passed} for t in thresholds],
        "compare": comparison.model_dump(mode="json") if comparison is not None else None,
        "exit_code": exit_code,
    }


# ---------------------------------------------------------------- the run


def _read_resume(out: Path, max_line_bytes: int) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    return load_results(out, max_line_bytes=max_line_bytes)


def _trim_torn_line(out: Path) -> None:
    """Drop a half-written last line (a killed run) so appended lines start on their own line."""
    data = out.read_bytes()
    if data and not data.endswith(b"\n"):
        out.write_bytes(data[: data.rfind(b"\n") + 1])


def score_items(
    args: argparse.Namespace,
    command: str,
    source: str,
    load: Any,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """The part `eval` and `replay` share: options, resume, scoring, summary, gate, compare, report."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    started = time.monotonic()
    try:
        scorers = build_scorers(args)
        thresholds = parse_thresholds(args.min, scorers, args.scale)
        if args.concurrency < 1:
            raise UsageError(f"--concurrency must be >= 1, got {args.concurrency}")
        if args.resume and not args.out:
            raise UsageError("--resume needs --out (the file to resume)")
        if not 0 <= args.max_error_rate <= 1:
            raise UsageError(f"--max-error-rate must be in [0, 1], got {args.max_error_rate}")
        if not 0 < args.alpha < 1:
            raise UsageError(f"--alpha must be in (0, 1), got {args.alpha}")
        if args.fail_on_regression and not args.compare:
            raise UsageError("--fail-on-regression needs --compare BASELINE.jsonl")
        baseline = load_results(args.compare, max_line_bytes=args.max_line_bytes) if args.compare else None
        items: list[EvalItem] = load()
        out = Path(args.out) if args.out else None
        previous = _read_resume(out, args.max_line_bytes) if out is not None and args.resume else []
        judge = load_judge(args.judge, args.api_base, llm_judge_options(args))
    except (UsageError, DatasetError) as exc:
        stderr.write(f"ragtrace {command}: error: {exc}\n")
        return EXIT_BAD_INPUT

    keys = {item.key for item in items}
    kept_previous = [r for r in previous if record_key(r) in keys]
    done = {record_key(r) for r in kept_previous}
    todo = [item for item in items if item.key not in done]
    names = [s.name for s in scorers]
    prior_results: dict[str, ItemResult] = {}
    for record in kept_previous:
        if all(n in record["results"] for n in names):
            prior_results[record_key(record)] = _item_result(record)
        else:  # scored with other scorers: score it again
            todo.append(next(i for i in items if i.key == record_key(record)))
            done.discard(record_key(record))
    todo.sort(key=lambda i: i.index)
    if args.resume and not args.quiet:
        stderr.write(f"ragtrace {command}: resuming, {len(done)} of {len(items)} items already in {out}\n")

    handle: IO[str] | None = None
    if out is not None:
        if args.resume and out.exists():
            _trim_torn_line(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        handle = out.open("a" if args.resume else "w", encoding="utf-8")
    progress = Progress(len(items), stderr, enabled=not args.quiet, done=len(done))
    new_results: dict[str, ItemResult] = {}

    def on_item(result: ItemResult) -> None:
        item = todo[result.index]
        fixed = result.model_copy(update={"index": item.index})
        new_results[item.key] = fixed
        if handle is not None:
            handle.write(json.dumps(item_record(item, fixed), ensure_ascii=False) + "\n")
            handle.flush()
        progress.update()

    interrupted = False
    try:
        if todo:
            asyncio.run(
                aevaluate(
                    [i.sample for i in todo], scorers=scorers, judge=judge,
                    concurrency=args.concurrency, on_item_complete=on_item,
                )
            )
    except KeyboardInterrupt:
        interrupted = True
    finally:
        progress.close()
        if handle is not None:
            handle.close()

    all_results = {**prior_results, **new_results}
    ordered = [(item, all_results[item.key]) for item in items if item.key in all_results]
    results = [r for _, r in ordered]
    summaries = {s.name: ScorerSummary.of([r.results[s.name] for r in results]) for s in scorers}
    usage = sum((r.usage for r in results), JudgeUsage())
    for gate in thresholds:
        gate.mean = summaries[gate.scorer].mean
    comparison = None
    if baseline is not None:
        current = [item_record(item, r) for item, r in ordered]
        comparison = compare(baseline, current, names, baseline_name=args.compare, alpha=args.alpha, worst=args.worst)

    regressed = comparison is not None and args.fail_on_regression and bool(comparison.regressed)
    too_many_errors = {
        name: round(sum(s.errors.values()) / s.count, 4)
        for name, s in summaries.items()
        if s.count and sum(s.errors.values()) / s.count > args.max_error_rate
    }
    if interrupted:
        code = EXIT_INTERRUPTED
    elif regressed or too_many_errors or not all(t.passed for t in thresholds):
        code = EXIT_FAILED
    else:
        code = EXIT_OK

    text = stderr if args.json else stdout
    if interrupted:
        text.write(f"interrupted: partial summary over {len(results)} of {len(items)} items"
                   f"{f' (results kept in {out})' if out else ''}\n")
    text.write(format_table(summaries, usage, thresholds) + "\n")
    for gate in thresholds:
        if not gate.passed:
            mean = "no scored items" if gate.mean is None else f"mean {gate.mean:.3f}"
            text.write(f"FAIL {gate.scorer}: {mean} < min {gate.minimum:g}\n")
    for name, rate in too_many_errors.items():
        text.write(f"FAIL {name}: {rate:.0%} of items ended in a judge error (max {args.max_error_rate:.0%})\n")
    if comparison is not None:
        text.write(format_comparison(comparison) + "\n")
    if args.html:
        from ragtrace.offline.report import ReportItem, write_report

        report_items = [
            ReportItem(key=item.key, id=item.id, index=item.index, sample=item.sample, results=r.results,
                       time_ns=item.extra.get("start_time_unix_nano"))
            for item, r in ordered
        ]
        write_report(
            args.html, title=f"ragtrace {command}: {Path(source).name}", items=report_items,
            summaries=summaries, usage=usage, thresholds=[(t.scorer, t.minimum, t.passed) for t in thresholds],
            comparison=comparison, over_time=command == "replay", scale=args.scale,
        )
        text.write(f"HTML report: {args.html}\n")
    if args.json:
        payload = summary_json(
            command=command, source=source, items=results, summaries=summaries, usage=usage,
            thresholds=thresholds, comparison=comparison, evaluated=len(new_results), resumed=len(prior_results),
            interrupted=interrupted, elapsed=time.monotonic() - started, exit_code=code,
        )
        payload["error_rate_exceeded"] = too_many_errors
        stdout.write(json.dumps(payload, indent=2) + "\n")
    stdout.flush()
    return code


def run_eval(args: argparse.Namespace) -> int:
    """`ragtrace eval DATA`: see the module docstring for exit codes."""

    def load() -> list[EvalItem]:
        if args.max_line_bytes < 1:
            raise UsageError("--max-line-bytes must be >= 1")
        fields = FieldMap(
            query=args.query_field, contexts=args.contexts_field, response=args.response_field,
            ground_truth=args.ground_truth_field, id=args.id_field,
        )
        rows = load_dataset(args.data, fields=fields, format=args.format, max_line_bytes=args.max_line_bytes)
        return [EvalItem(index=r.index, id=r.id, sample=r.sample, extra={"line": r.line}) for r in rows]

    return score_items(args, "eval", args.data, load)


def run_replay(args: argparse.Namespace) -> int:
    """`ragtrace replay FILE`: exported traces through the capture code, then scored like `eval`."""
    from ragtrace.offline.replay import ReplayError, replay_file

    def load() -> list[EvalItem]:
        try:
            replayed = replay_file(args.file, format=args.format, max_line_bytes=args.max_line_bytes)
        except ReplayError as exc:
            raise UsageError(str(exc)) from None
        if not args.quiet:
            sys.stderr.write(
                f"ragtrace replay: {replayed.spans} spans in {replayed.traces} traces"
                f" -> {len(replayed.samples)} samples"
                + (f" (skipped: {_counts(replayed.skipped)})" if replayed.skipped else "") + "\n"
            )
        if not replayed.samples:
            raise UsageError(f"{args.file}: no retrieval samples found in {replayed.spans} spans")
        return [
            EvalItem(index=i, id=s.key, sample=s.sample, extra=s.record_fields())
            for i, s in enumerate(replayed.samples)
        ]

    return score_items(args, "replay", args.file, load)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragtrace", description="Offline evaluation of RAG retrieval quality.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_eval_parser(subparsers)
    add_replay_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m ragtrace.cli_eval eval|replay ...`; argparse errors exit 2."""
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
