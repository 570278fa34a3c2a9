"""`ragtrace replay FILE`: exported traces through the live capture code, then scored like `eval`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ragtrace.cli.options import UsageError, add_capture_options, add_run_options, capture_rules_of
from ragtrace.cli.pipeline import score_items
from ragtrace.cli.records import EvalItem
from ragtrace.cli.summary import format_counts


def add_parser(subcommands: Any) -> argparse.ArgumentParser:
    """Add `replay` to the `ragtrace` command's subcommands."""
    parser: argparse.ArgumentParser = subcommands.add_parser(
        "replay",
        help="score traces exported as OTLP (collector file exporter JSON, or protobuf)",
        description="Extract RAG samples from exported OTLP traces with the live capture code, and score them.",
    )
    parser.add_argument(
        "file", help="OTLP JSON (one ExportTraceServiceRequest per line: the Collector's file exporter, ragtrace's "
        "OtlpJsonFileSpanExporter), the SDK's ConsoleSpanExporter output, or OTLP protobuf",
    )
    parser.add_argument(
        "--format", choices=("auto", "json", "proto"), default="auto",
        help="json: one request per line; proto: one message or length-delimited messages (default: sniff)",
    )
    add_run_options(parser)
    add_capture_options(parser)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """`ragtrace replay FILE`: the samples the capture code finds in the file, scored by the shared pipeline."""
    from ragtrace.offline.replay import ReplayError, replay_file

    def load() -> list[EvalItem]:
        try:
            replayed = replay_file(args.file, format=args.format, max_line_bytes=args.max_line_bytes,
                                   rules=capture_rules_of(args))
        except ReplayError as exc:
            raise UsageError(str(exc)) from None
        if not args.quiet:
            skipped = f" (skipped: {format_counts(replayed.skipped)})" if replayed.skipped else ""
            sys.stderr.write(
                f"ragtrace replay: {replayed.spans} spans in {replayed.traces} traces"
                f" -> {len(replayed.samples)} samples{skipped}\n"
            )
        if not replayed.samples:
            raise UsageError(f"{args.file}: no retrieval samples found in {replayed.spans} spans")
        return [
            EvalItem(index=i, id=s.key, sample=s.sample, extra=s.record_fields())
            for i, s in enumerate(replayed.samples)
        ]

    return score_items(args, "replay", args.file, load)


__all__ = ["add_parser", "run"]
