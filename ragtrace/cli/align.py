"""`ragtrace align LABELS`: does each judge agree with people? Gates CI on kappa and F1.

Exit codes: 0 every `--min-kappa` / `--min-f1` gate holds, 1 a gate failed, 2 bad input (labels file,
options, a judge that cannot be loaded, Phoenix unreachable), 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TextIO

from ragtrace.cli.align_text import format_alignment
from ragtrace.cli.eval import add_field_options, field_map
from ragtrace.cli.options import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    UsageError,
    add_scoring_options,
    build_scorers,
    check_judge_spec,
    llm_judge_options,
    load_judge,
)
from ragtrace.cli.progress import Progress
from ragtrace.judges import Judge
from ragtrace.offline.align import (
    JudgeOutcome,
    Settings,
    answer_key_warning,
    label_sets_of,
    measure,
    run_judge,
    scorers_for,
)
from ragtrace.offline.dataset import MAX_LINE_BYTES, DatasetError
from ragtrace.offline.labels import LabelledItem, load_labels
from ragtrace.offline.phoenix import PhoenixClient, PhoenixError, read_phoenix_labels
from ragtrace.scoring import SCORERS, Scorer


def add_parser(subcommands: Any) -> argparse.ArgumentParser:
    """Add `align` to the `ragtrace` command's subcommands."""
    parser: argparse.ArgumentParser = subcommands.add_parser(
        "align", conflict_handler="resolve",
        help="measure judges against human labels (kappa, F1, AUC, calibration) and gate CI on them",
        description="Score labelled samples with each --judge and compare the verdicts with people's labels "
        "(docs/align.md). Exit 0 when every gate holds, 1 when one fails, 2 on bad input.",
    )
    parser.add_argument("labels", nargs="?", help="a labels file: eval's rows (JSON Lines, JSON, CSV, TSV) with "
                        "'context_labels' (1/0 per context) and/or 'labels' ({scorer: pass/fail})")
    add_field_options(parser)
    add_scoring_options(parser)
    judges = parser.add_argument_group("judges")
    judges.add_argument("--scorers", default=None, help="comma-separated (default: those the labels need: "
                        "context_precision for context_labels, and each scorer named in labels)")
    judges.add_argument(
        "--judge", action="append", default=None, metavar="SPEC",
        help="a judge as eval --judge takes it ('local', a litellm model, 'python:module:attr'); repeat to "
        "compare judges side by side (default: local; with --phoenix: only the scores recorded on the spans)",
    )
    phoenix = parser.add_argument_group("labels from Arize Phoenix span annotations")
    phoenix.add_argument("--phoenix", metavar="URL", help="Phoenix's base URL, e.g. http://localhost:6006")
    phoenix.add_argument("--annotation", action="append", default=[], metavar="NAME[=SCORER]",
                         help="the span annotation holding people's pass/fail for SCORER (default: the scorer "
                         "NAME names); repeatable")
    phoenix.add_argument("--project", default="default", help="the Phoenix project (default: default)")
    phoenix.add_argument("--annotator-kind", choices=("HUMAN", "LLM", "CODE", "any"), default="HUMAN",
                         help="whose annotations are labels (default HUMAN)")
    phoenix.add_argument("--phoenix-api-key", default=None, help="a Phoenix API key, when auth is on")
    gate = parser.add_argument_group("CI gate")
    gate.add_argument("--min-kappa", type=float, metavar="K", help="fail (exit 1) when a judge's kappa on a label "
                      "set is below K (or undefined)")
    gate.add_argument("--min-f1", type=float, metavar="F", help="fail (exit 1) when a judge's F1 of the yes label "
                      "(useful / pass) on a label set is below F (or undefined)")
    gate.add_argument("--alpha", type=float, default=0.05, help="significance of the paired test (default 0.05)")
    output = parser.add_argument_group("output")
    output.add_argument("--json", action="store_true", help="print the report as JSON on stdout (text to stderr)")
    output.add_argument("--html", metavar="REPORT.html", help="write a self-contained HTML report")
    output.add_argument("--worst", type=int, default=10, help="disagreements listed per judge and label set")
    output.add_argument("--quiet", action="store_true", help="no progress output")
    output.add_argument("--max-line-bytes", type=int, default=MAX_LINE_BYTES,
                        help=f"longest input line (default {MAX_LINE_BYTES})")
    parser.set_defaults(func=run)
    return parser


@dataclass
class Job:
    """What the options and the labels ask for, checked before any judge is paid for."""

    source: str
    items: list[LabelledItem]
    scorers: list[Scorer]
    judges: list[tuple[str, Judge]]
    recorded: JudgeOutcome | None = None
    skipped: Counter[str] = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)


def _annotations(values: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for text in values:
        name, _, scorer = text.partition("=")
        name, scorer = name.strip(), (scorer.strip() or name.strip())
        if scorer not in SCORERS:
            raise UsageError(f"--annotation {text!r}: say which scorer it labels, as NAME=SCORER "
                             f"(scorers: {', '.join(SCORERS)})")
        found[name] = scorer
    return found


def _check(args: argparse.Namespace) -> None:
    if bool(args.labels) == bool(args.phoenix):
        raise UsageError("give a labels file or --phoenix URL (one of them)")
    if args.phoenix and not args.annotation:
        raise UsageError("--phoenix needs --annotation NAME (the span annotation that holds people's labels)")
    if args.annotation and not args.phoenix:
        raise UsageError("--annotation reads Phoenix span annotations: give --phoenix URL too")
    if args.concurrency < 1 or args.worst < 0:
        raise UsageError("--concurrency must be >= 1 and --worst >= 0")
    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha must be in (0, 1), got {args.alpha}")
    for name in ("min_kappa", "min_f1"):
        value = getattr(args, name)
        if value is not None and not -1.0 <= value <= 1.0:
            raise UsageError(f"--{name.replace('_', '-')} must be in [-1, 1], got {value}")


def load(args: argparse.Namespace) -> Job:
    """Check the options, read the labels (file or Phoenix) and load each judge."""
    _check(args)
    specs = list(args.judge or ([] if args.phoenix else ["local"]))
    if len(set(specs)) != len(specs):
        raise UsageError(f"--judge names the same judge twice: {specs}")
    for spec in specs:
        check_judge_spec(spec, args.judge_api_base)
    job = Job(source=args.labels or args.phoenix, items=[], scorers=[], judges=[])
    if args.phoenix:
        client = PhoenixClient(args.phoenix, project=args.project, api_key=args.phoenix_api_key)
        kinds = frozenset() if args.annotator_kind == "any" else frozenset({args.annotator_kind})
        found = read_phoenix_labels(client, _annotations(args.annotation), kinds=kinds)
        if not found.items:
            why = "; ".join(f"{n} {w}" for w, n in found.skipped.items()) or "no annotation of that name on them"
            raise UsageError(f"{args.phoenix}: no labelled scored span in project {args.project!r} ({why})")
        job.items, job.recorded, job.skipped = found.items, found.recorded, found.skipped
    else:
        job.items = load_labels(args.labels, fields=field_map(args), format=args.format,
                                max_line_bytes=args.max_line_bytes)
    if args.scorers is None:
        args.scorers = ",".join(s.name for s in scorers_for(label_sets_of(job.items)))
    job.scorers = build_scorers(args)
    options = llm_judge_options(args)
    job.judges = [(spec, load_judge(spec, args.judge_api_base, options)) for spec in specs]
    if job.judges and (warning := answer_key_warning(job.items, job.scorers)):
        job.warnings.append(warning)
    return job


def judge_all(job: Job, args: argparse.Namespace, stderr: TextIO) -> list[JudgeOutcome]:
    """Each judge in turn over the labelled items (the recorded scores first, when read from Phoenix)."""
    outcomes = [job.recorded] if job.recorded is not None else []
    labelled = sum(1 for item in job.items if item.labelled)
    for name, judge in job.judges:
        progress = Progress(labelled, stderr, enabled=not args.quiet)
        if not args.quiet:
            stderr.write(f"ragtrace align: judge {name}\n")
        try:
            outcomes.append(asyncio.run(run_judge(job.items, job.scorers, judge, name=name,
                                                  concurrency=args.concurrency, on_item=progress.update)))
        finally:
            progress.close()
    return outcomes


def run(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """`ragtrace align`: the exit code (see the module docstring)."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    with contextlib.redirect_stdout(stderr) if args.json else contextlib.nullcontext():
        try:
            job = load(args)
        except (UsageError, DatasetError, PhoenixError) as exc:
            stderr.write(f"ragtrace align: error: {exc}\n")
            if args.json:
                stdout.write(json.dumps({"command": "align", "error": str(exc), "exit_code": EXIT_BAD_INPUT}) + "\n")
            return EXIT_BAD_INPUT
        for warning in job.warnings:  # before the judges are paid for
            stderr.write(f"ragtrace align: warning: {warning}\n")
        try:
            outcomes = judge_all(job, args, stderr)
        except KeyboardInterrupt:
            stderr.write("ragtrace align: interrupted\n")
            return EXIT_INTERRUPTED
        settings = Settings({s.name: s.scale for s in job.scorers}, args.alpha, 10, args.worst, args.min_kappa,
                            args.min_f1)
        report = measure(job.source, job.items, outcomes, settings).model_copy(update={"warnings": job.warnings})
    code = EXIT_OK if report.passed else EXIT_FAILED
    text = stderr if args.json else stdout
    text.write(format_alignment(report, job.skipped) + "\n")
    if args.html:
        from ragtrace.offline.align_report import write_alignment_report

        write_alignment_report(args.html, report)
        text.write(f"HTML report: {args.html}\n")
    if args.json:
        payload = {"command": "align", **report.model_dump(mode="json"), "passed": report.passed,
                   "skipped": dict(job.skipped), "exit_code": code}
        stdout.write(json.dumps(payload, indent=2) + "\n")
    stdout.flush()
    return code


__all__ = ["Job", "add_parser", "judge_all", "load", "run"]
