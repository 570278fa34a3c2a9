"""What `eval` and `replay` share on the command line: the scoring, gate and output options, and their checks.

Each option group is added by a function of its own, so a subcommand (or a new flag) takes what it needs.
A bad option is a `UsageError`: printed as `ragtrace <cmd>: error: ...`, exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ragtrace.capture import CaptureRules
from ragtrace.judges import Judge
from ragtrace.judges.resolve import JudgeSpecError, is_local_judge, resolve_judge
from ragtrace.judges.resolve import check_judge_spec as check_judge
from ragtrace.offline.dataset import MAX_LINE_BYTES
from ragtrace.scoring import SCORERS, ContextPrecision, ContextRecall, ContextRelevance, Scorer

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """Bad input or options: printed as `ragtrace <cmd>: error: ...` and exit code 2."""


@dataclass
class Threshold:
    """A `--min SCORER=VALUE` gate; `mean` is filled in once the run is summarised."""

    scorer: str
    minimum: float
    mean: float | None = None

    @property
    def passed(self) -> bool:
        return self.mean is not None and self.mean >= self.minimum


# ---------------------------------------------------------------- the option groups


def add_scoring_options(parser: argparse.ArgumentParser) -> None:
    scoring = parser.add_argument_group("scoring")
    scoring.add_argument(
        "--scorers", default=",".join(SCORERS), help=f"comma-separated, from {', '.join(SCORERS)} (default: all)"
    )
    scoring.add_argument(
        "--judge", default="local",
        help="'local' (offline, default), a litellm model string such as 'openai/gpt-4o-mini', "
        "or 'python:module:attr' naming a Judge class or factory",
    )
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


def add_gate_options(parser: argparse.ArgumentParser) -> None:
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


def add_output_options(parser: argparse.ArgumentParser) -> None:
    output = parser.add_argument_group("output")
    output.add_argument("--out", metavar="FILE.jsonl", help="per-item results, one JSON line per item as it completes")
    output.add_argument("--resume", action="store_true", help="with --out: skip items already in the out file")
    output.add_argument("--html", metavar="REPORT.html", help="write a self-contained HTML report")
    output.add_argument("--json", action="store_true", help="print the summary as JSON on stdout (table to stderr)")
    output.add_argument("--quiet", action="store_true", help="no progress output")
    output.add_argument(
        "--by-session", action="store_true",
        help="also summarise per conversation (session.id / gen_ai.conversation.id of a trace, a dataset's "
        "session_id column); items without one are grouped under '-'",
    )
    output.add_argument(
        "--max-line-bytes", type=int, default=MAX_LINE_BYTES, help=f"longest input line (default {MAX_LINE_BYTES})"
    )


def add_capture_options(parser: argparse.ArgumentParser) -> None:
    """How spans are read (`ragtrace.capture.CaptureRules`): `replay` and `explain`."""
    capture = parser.add_argument_group("capture (as RAGTRACE_RETRIEVAL_TOOLS, _TOOL_SEPARATOR, _QUERY_SOURCE)")
    capture.add_argument("--retrieval-tools", default="", metavar="NAMES",
                         help="comma-separated tool names or patterns whose calls are retrievals; '!name': never")
    capture.add_argument("--tool-separator", default="\\n\\n",
                         help="splits a named tool's plain-text result into documents (default '\\n\\n'; "
                         "'\\n': one per line)")
    capture.add_argument("--query-source", choices=("user", "retrieval"), default="user",
                         help="judge against the user's question (default) or the retrieval's own query")


def capture_rules_of(args: argparse.Namespace) -> CaptureRules:
    try:
        return CaptureRules(
            retrieval_tools=tuple(t.strip() for t in args.retrieval_tools.split(",") if t.strip()),
            tool_separator=args.tool_separator.replace("\\n", "\n").replace("\\t", "\t"),
            query_source=args.query_source,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Every option a scoring run (`eval`, `replay`) reads."""
    add_scoring_options(parser)
    add_gate_options(parser)
    add_output_options(parser)


# ---------------------------------------------------------------- checks


def check_run_options(args: argparse.Namespace) -> None:
    """The checks between options that argparse cannot express."""
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


def _scorer_names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError("--scorers is empty")
    unknown = [n for n in names if n not in SCORERS]
    if unknown:
        raise UsageError(f"unknown scorer {unknown[0]!r} in --scorers; choose from {', '.join(SCORERS)}")
    if len(set(names)) != len(names):
        raise UsageError("--scorers names a scorer twice")
    return names


def build_scorers(args: argparse.Namespace) -> list[Scorer]:
    """The scorers `--scorers` names, configured by the scoring options."""
    scorers: list[Scorer] = []
    try:
        for name in _scorer_names(str(args.scorers)):
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


def _import_judge(spec: str) -> Judge:
    """`python:module:attr`: a Judge, or a Judge class or factory called without arguments."""
    module_name, _, attr = spec[len("python:"):].partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise UsageError(f"--judge {spec!r}: cannot import ({exc})") from None
    made = target() if isinstance(target, type) or (not isinstance(target, Judge) and callable(target)) else target
    if not isinstance(made, Judge):
        raise UsageError(f"--judge {spec!r}: {type(made).__name__} is not a Judge")
    return made


def check_judge_spec(spec: str, api_base: str | None = None) -> None:
    """The library's judge-spec check (`ragtrace.judges.check_judge_spec`), as a usage error naming --judge;
    `python:module:attr` (a CLI-only spec) is checked when it is imported."""
    if spec.strip().startswith("python:"):
        return
    try:
        check_judge(spec, api_base, name="--judge")
    except JudgeSpecError as exc:
        raise UsageError(str(exc)) from None


def _add_llm_judge_options(parser: argparse.ArgumentParser) -> None:
    """--judge-api-base and the --judge-* call options: the settings table's rows (`RUN_FLAGS`)."""
    from ragtrace.live.settings_rows import RUN_FLAGS, add_setting_flags

    add_setting_flags(parser.add_argument_group("LLM judge (a litellm --judge only)"), RUN_FLAGS, env=False)


def llm_judge_options(args: argparse.Namespace) -> dict[str, Any]:
    """The LLMJudge keywords the --judge-* flags set, checked by the settings table's validator (a value
    out of range is a usage error naming the flag)."""
    from ragtrace.live.settings import LLM_JUDGE_KEYWORDS, RagtraceSettings, SettingsError, as_flag

    given = {name: value for name in LLM_JUDGE_KEYWORDS if (value := getattr(args, name, None)) is not None}
    try:
        options: dict[str, Any] = RagtraceSettings.checked(given, as_flag).llm_judge_options()["llm_options"]
    except SettingsError as exc:
        raise UsageError(str(exc)) from None
    return options


def load_judge(spec: str | Judge, api_base: str | None, llm_options: dict[str, Any] | None = None) -> Judge:
    """'local', a litellm model string, or 'python:module:attr' (a Judge class/factory, for custom judges)."""
    if not isinstance(spec, str):
        return spec
    if spec.startswith("python:"):
        return _import_judge(spec)
    if llm_options and is_local_judge(spec):
        raise UsageError(f"--judge-* options ({', '.join(sorted(llm_options))}) apply to a litellm judge, not {spec!r}")
    check_judge_spec(spec, api_base)
    try:
        return resolve_judge(spec, api_base=api_base, llm_options=llm_options)
    except ImportError as exc:  # the local judge's message holds the commands that install what it lacks
        raise UsageError(f"cannot load judge {spec!r}: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--judge {spec!r}: {exc}") from None


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "Threshold",
    "UsageError",
    "add_gate_options",
    "add_output_options",
    "add_run_options",
    "add_scoring_options",
    "build_scorers",
    "check_judge_spec",
    "check_run_options",
    "llm_judge_options",
    "load_judge",
    "parse_thresholds",
]
