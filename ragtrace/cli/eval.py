"""`ragtrace eval DATA`: score a dataset (JSONL or CSV) and gate CI on thresholds (exit codes: pipeline.py)."""

from __future__ import annotations

import argparse
from typing import Any

from ragtrace.cli.options import UsageError, add_run_options
from ragtrace.cli.pipeline import score_items
from ragtrace.cli.records import EvalItem
from ragtrace.offline.dataset import FieldMap, load_dataset


def add_parser(subcommands: Any) -> argparse.ArgumentParser:
    """Add `eval` to the `ragtrace` command's subcommands."""
    parser: argparse.ArgumentParser = subcommands.add_parser(
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
    add_run_options(parser)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """`ragtrace eval DATA`: the dataset's rows, scored by the shared pipeline."""

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


__all__ = ["add_parser", "run"]
