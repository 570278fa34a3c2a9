"""A scoring run, as `eval` and `replay` do it: load, resume, score, summarise, gate, report.

Exit codes: 0 every `--min` threshold holds (and no significant regression with `--fail-on-regression`),
1 a threshold, the judge-error rate or the regression check failed, 2 bad input (the message names file,
line and field), 130 interrupted (results so far are kept in `--out` and a partial summary is printed).

Per-item results go to `--out` as JSON lines, one per item as it completes, flushed, so a killed run loses
nothing it paid for and `--resume` can pick up where it stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ragtrace.cli.options import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Threshold,
    UsageError,
    build_scorers,
    check_judge_spec,
    check_run_options,
    llm_judge_options,
    load_judge,
    parse_thresholds,
)
from ragtrace.cli.progress import Progress
from ragtrace.cli.records import EvalItem, item_record, item_result, open_out_file, read_out_file, write_record
from ragtrace.cli.summary import format_sessions, format_table, summary_json
from ragtrace.judges import Judge
from ragtrace.offline.compare import Comparison, compare, format_comparison, load_results, record_key
from ragtrace.offline.dataset import DatasetError
from ragtrace.offline.evaluate import ItemResult, ScorerSummary, aevaluate
from ragtrace.scoring import JudgeUsage, Scorer

#: Reads the items to score (a dataset, exported traces); raises UsageError or DatasetError on bad input.
ItemLoader = Callable[[], list[EvalItem]]


@dataclass
class Run:
    """What the options and the input ask for, checked: the output of the load step."""

    command: str
    source: str
    scorers: list[Scorer]
    thresholds: list[Threshold]
    judge: Judge
    items: list[EvalItem]
    baseline: list[dict[str, Any]] | None
    out: Path | None
    previous: list[dict[str, Any]]  # the out file's records, with --resume
    started: float

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.scorers]


@dataclass
class Resumed:
    """The results an earlier run wrote that still count, and the items left to score."""

    results: dict[str, ItemResult]
    todo: list[EvalItem]
    done: int


@dataclass
class Summary:
    """Every result of the run (resumed and new) in input order, summarised per scorer."""

    ordered: list[tuple[EvalItem, ItemResult]]
    summaries: dict[str, ScorerSummary]
    usage: JudgeUsage
    comparison: Comparison | None
    evaluated: int
    resumed: int
    interrupted: bool
    # With --by-session: per conversation, per scorer (items without one under NO_SESSION).
    sessions: dict[str, dict[str, ScorerSummary]] | None = None

    @property
    def results(self) -> list[ItemResult]:
        return [r for _, r in self.ordered]

    def judge_errors(self) -> dict[str, tuple[int, str]]:
        """Each judge error code once: on how many items it happened, and its first message."""
        found: dict[str, tuple[int, str]] = {}
        for result in self.results:
            errors = {r.error: r.error_message or "" for r in result.results.values() if r.error}
            for code, message in errors.items():
                items, first = found.get(code, (0, message))
                found[code] = (items + 1, first)
        return found


@dataclass
class Verdict:
    """The exit code, and the scorers whose judge-error rate is over `--max-error-rate`."""

    code: int
    too_many_errors: dict[str, float]


# ---------------------------------------------------------------- the steps


def load(args: argparse.Namespace, command: str, source: str, load_items: ItemLoader) -> Run:
    """Check the options, then read the baseline, the items, the out file to resume and the judge."""
    started = time.monotonic()
    scorers = build_scorers(args)
    thresholds = parse_thresholds(args.min, scorers, args.scale)
    check_run_options(args)
    check_judge_spec(str(args.judge), args.judge_api_base)
    out = Path(args.out) if args.out else None
    if out is not None:
        _refuse_to_overwrite(out, {"the input": source, "the --compare baseline": args.compare})
    baseline = load_results(args.compare, max_line_bytes=args.max_line_bytes) if args.compare else None
    items = load_items()
    previous = read_out_file(out, args.max_line_bytes) if out is not None and args.resume else []
    judge = load_judge(args.judge, args.judge_api_base, llm_judge_options(args))
    return Run(command, source, scorers, thresholds, judge, items, baseline, out, previous, started)


def _refuse_to_overwrite(out: Path, inputs: dict[str, str | None]) -> None:
    """--out is written from its first line: naming a file the run reads would destroy it."""
    for role, name in inputs.items():
        if name is not None and _same_file(out, Path(name)):
            raise UsageError(f"--out {str(out)!r} is {role}: it would be overwritten with results; write elsewhere")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return a.resolve() == b.resolve()


def resume(run: Run, args: argparse.Namespace, stderr: TextIO) -> Resumed:
    """Keep the earlier results of items still in the input that have every scorer asked for now."""
    by_key = {item.key: item for item in run.items}
    kept = [r for r in run.previous if record_key(r) in by_key]
    done = {record_key(r) for r in kept}
    todo = [item for item in run.items if item.key not in done]
    results: dict[str, ItemResult] = {}
    for record in kept:
        if all(n in record["results"] for n in run.names):
            results[record_key(record)] = item_result(record)
        else:  # scored with other scorers: score it again
            todo.append(by_key[record_key(record)])
            done.discard(record_key(record))
    todo.sort(key=lambda i: i.index)
    if args.resume and not args.quiet:
        stderr.write(f"ragtrace {run.command}: resuming, {len(done)} of {len(run.items)} items already in {run.out}\n")
    return Resumed(results, todo, len(done))


def score(run: Run, resumed: Resumed, args: argparse.Namespace, stderr: TextIO) -> tuple[dict[str, ItemResult], bool]:
    """Score the items left, each written to the out file as it completes; Ctrl-C stops with what is done.

    Returns the new results by item key, and whether the run was interrupted.
    """
    handle = open_out_file(run.out, append=args.resume) if run.out is not None else None
    progress = Progress(len(run.items), stderr, enabled=not args.quiet, done=resumed.done)
    new: dict[str, ItemResult] = {}

    def on_item(result: ItemResult) -> None:
        item = resumed.todo[result.index]
        fixed = result.model_copy(update={"index": item.index})
        new[item.key] = fixed
        if handle is not None:
            write_record(handle, item, fixed)
        progress.update()

    samples = [i.sample for i in resumed.todo]
    try:
        if samples:
            asyncio.run(
                aevaluate(samples, scorers=run.scorers, judge=run.judge, concurrency=args.concurrency,
                          on_item_complete=on_item)
            )
    except KeyboardInterrupt:
        return new, True
    finally:
        progress.close()
        if handle is not None:
            handle.close()
    return new, False


def summarise(
    run: Run, resumed: Resumed, new: dict[str, ItemResult], interrupted: bool, args: argparse.Namespace
) -> Summary:
    """Summarise every result per scorer and, with --compare, compare them with the baseline."""
    everything = {**resumed.results, **new}
    ordered = [(item, everything[item.key]) for item in run.items if item.key in everything]
    results = [r for _, r in ordered]
    summaries = {s.name: ScorerSummary.of([r.results[s.name] for r in results]) for s in run.scorers}
    usage = sum((r.usage for r in results), JudgeUsage())
    comparison = None
    if run.baseline is not None:
        current = [item_record(item, r) for item, r in ordered]
        comparison = compare(
            run.baseline, current, run.names, baseline_name=args.compare, alpha=args.alpha, worst=args.worst
        )
    sessions = by_session(ordered, run.names) if getattr(args, "by_session", False) else None
    return Summary(ordered, summaries, usage, comparison, len(new), len(resumed.results), interrupted, sessions)


NO_SESSION = "-"


def by_session(ordered: list[tuple[EvalItem, ItemResult]], names: list[str]) -> dict[str, dict[str, ScorerSummary]]:
    """Each conversation's items summarised per scorer, conversations in order of first appearance."""
    groups: dict[str, list[ItemResult]] = {}
    for item, result in ordered:
        session = item.sample.metadata.get("session_id")
        groups.setdefault(session if isinstance(session, str) and session else NO_SESSION, []).append(result)
    return {session: {name: ScorerSummary.of([r.results[name] for r in results if name in r.results])
                      for name in names}
            for session, results in groups.items()}


def gate(run: Run, summary: Summary, args: argparse.Namespace) -> Verdict:
    """The exit code: thresholds on the means, the judge-error rate, and with --fail-on-regression the comparison."""
    for threshold in run.thresholds:
        threshold.mean = summary.summaries[threshold.scorer].mean
    regressed = summary.comparison is not None and args.fail_on_regression and bool(summary.comparison.regressed)
    too_many_errors = {
        name: round(sum(s.errors.values()) / s.count, 4)
        for name, s in summary.summaries.items()
        if s.count and sum(s.errors.values()) / s.count > args.max_error_rate
    }
    if summary.interrupted:
        code = EXIT_INTERRUPTED
    elif regressed or too_many_errors or not all(t.passed for t in run.thresholds):
        code = EXIT_FAILED
    else:
        code = EXIT_OK
    return Verdict(code, too_many_errors)


def report(
    run: Run, summary: Summary, verdict: Verdict, args: argparse.Namespace, *, stdout: TextIO, stderr: TextIO
) -> None:
    """The table and the failures (on stderr with --json), then the HTML report and the JSON summary."""
    text = stderr if args.json else stdout
    judge_errors = summary.judge_errors()
    _write_text(text, run, summary, verdict, args, judge_errors)
    if args.html:
        _write_html(run, summary, args)
        text.write(f"HTML report: {args.html}\n")
    if args.json:
        payload = summary_json(
            command=run.command, source=run.source, items=summary.results, summaries=summary.summaries,
            usage=summary.usage, thresholds=run.thresholds, comparison=summary.comparison,
            evaluated=summary.evaluated, resumed=summary.resumed, interrupted=summary.interrupted,
            sessions=summary.sessions,
            elapsed=time.monotonic() - run.started, exit_code=verdict.code,
        )
        payload["error_rate_exceeded"] = verdict.too_many_errors
        payload["judge_errors"] = {
            code: {"items": items, "message": message} for code, (items, message) in judge_errors.items()
        }
        stdout.write(json.dumps(payload, indent=2) + "\n")
    stdout.flush()


def _write_text(
    text: TextIO, run: Run, summary: Summary, verdict: Verdict, args: argparse.Namespace,
    judge_errors: dict[str, tuple[int, str]],
) -> None:
    if summary.interrupted:
        kept = f" (results kept in {run.out})" if run.out else ""
        text.write(f"interrupted: partial summary over {len(summary.ordered)} of {len(run.items)} items{kept}\n")
    text.write(format_table(summary.summaries, summary.usage, run.thresholds) + "\n")
    if summary.sessions is not None:
        text.write(format_sessions(summary.sessions) + "\n")
    for threshold in run.thresholds:
        if not threshold.passed:
            mean = "no scored items" if threshold.mean is None else f"mean {threshold.mean:.3f}"
            text.write(f"FAIL {threshold.scorer}: {mean} < min {threshold.minimum:g}\n")
    for name, rate in verdict.too_many_errors.items():
        text.write(f"FAIL {name}: {rate:.0%} of items ended in a judge error (max {args.max_error_rate:.0%})\n")
    for code, (items, message) in judge_errors.items():  # once each, not once per item
        text.write(f"judge error {code} on {items} of {len(summary.ordered)} items: {message}\n")
    if summary.comparison is not None:
        text.write(format_comparison(summary.comparison) + "\n")


def _write_html(run: Run, summary: Summary, args: argparse.Namespace) -> None:
    from ragtrace.offline.report import ReportItem, write_report

    report_items = [
        ReportItem(key=item.key, id=item.id, index=item.index, sample=item.sample, results=r.results,
                   time_ns=item.extra.get("start_time_unix_nano"))
        for item, r in summary.ordered
    ]
    write_report(
        args.html, title=f"ragtrace {run.command}: {Path(run.source).name}", items=report_items,
        summaries=summary.summaries, usage=summary.usage,
        thresholds=[(t.scorer, t.minimum, t.passed) for t in run.thresholds],
        comparison=summary.comparison, over_time=run.command == "replay", scale=args.scale,
    )


# ---------------------------------------------------------------- the run


def score_items(
    args: argparse.Namespace,
    command: str,
    source: str,
    load_items: ItemLoader,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the steps on the items `load_items` reads; returns the exit code (see the module docstring)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    # With --json, stdout carries the JSON summary alone: whatever a judge's library prints while the run
    # loads and scores goes to stderr instead.
    with contextlib.redirect_stdout(stderr) if args.json else contextlib.nullcontext():
        try:
            run = load(args, command, source, load_items)
        except (UsageError, DatasetError) as exc:
            stderr.write(f"ragtrace {command}: error: {exc}\n")
            if args.json:  # a consumer of the JSON gets the error in JSON too
                stdout.write(json.dumps({"command": command, "source": source, "error": str(exc),
                                         "exit_code": EXIT_BAD_INPUT}) + "\n")
            return EXIT_BAD_INPUT
        resumed = resume(run, args, stderr)
        new, interrupted = score(run, resumed, args, stderr)
        summary = summarise(run, resumed, new, interrupted, args)
        verdict = gate(run, summary, args)
    report(run, summary, verdict, args, stdout=stdout, stderr=stderr)
    return verdict.code


__all__ = ["ItemLoader", "Resumed", "Run", "Summary", "Verdict", "gate", "load", "report", "resume", "score",
           "score_items", "summarise"]
