"""`ragtrace eval DATA`: score a dataset file and gate CI on thresholds (exit codes: pipeline.py)."""

from __future__ import annotations

import argparse
from typing import Any

from ragtrace.cli.options import UsageError, add_run_options
from ragtrace.cli.pipeline import score_items
from ragtrace.cli.records import EvalItem
from ragtrace.offline.dataset import FORMATS, KNOWN_NAMES, FieldMap, load_dataset


def add_parser(subcommands: Any) -> argparse.ArgumentParser:
    """Add `eval` to the `ragtrace` command's subcommands."""
    parser: argparse.ArgumentParser = subcommands.add_parser(
        "eval",
        help="score a dataset (JSON Lines, JSON, CSV or TSV) and gate CI on thresholds",
        description="Score a dataset of RAG samples. Exit 0 when every --min holds, 1 when one fails, 2 on bad input.",
    )
    parser.add_argument(
        "data", help="JSON Lines, a JSON array (.json), CSV or TSV (contexts as a JSON list in its cell) of samples"
    )
    add_field_options(parser)
    add_run_options(parser)
    parser.set_defaults(func=run)
    return parser


def add_field_options(parser: argparse.ArgumentParser) -> None:
    """`--query-field` ... `--id-field` and `--format`: how a dataset file's columns are read (`eval`, `align`)."""
    fields = parser.add_argument_group(
        "field mapping", "each column is found by its first known name unless mapped: " + "; ".join(
            f"{field}: {', '.join(repr(name) for name in names)}" for field, names in KNOWN_NAMES.items()
        )
    )
    for field in KNOWN_NAMES:
        fields.add_argument("--" + field.replace("_", "-") + "-field", metavar="NAME")
    fields.add_argument("--format", choices=("auto", *FORMATS), default="auto", help="default: by extension")


def field_map(args: argparse.Namespace) -> FieldMap:
    """The `--*-field` options as a FieldMap."""
    return FieldMap(
        query=args.query_field, contexts=args.contexts_field, response=args.response_field,
        ground_truth=args.ground_truth_field, id=args.id_field,
    )


def run(args: argparse.Namespace) -> int:
    """`ragtrace eval DATA`: the dataset's rows, scored by the shared pipeline."""

    def load() -> list[EvalItem]:
        if args.max_line_bytes < 1:
            raise UsageError("--max-line-bytes must be >= 1")
        rows = load_dataset(args.data, fields=field_map(args), format=args.format, max_line_bytes=args.max_line_bytes)
        return [EvalItem(index=r.index, id=r.id, sample=r.sample, extra={"line": r.line}) for r in rows]

    return score_items(args, "eval", args.data, load)


__all__ = ["add_field_options", "add_parser", "field_map", "run"]
