"""`ragtrace explain FILE`: what capture makes of each exported trace, span by span, and why a trace was
not scored. Reads what `replay` reads; scores nothing, calls no judge."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def run(args: argparse.Namespace) -> int:
    """`ragtrace explain FILE`: the capture code's report on each trace of the file, as text."""
    from ragtrace.capture.explain import explain, render
    from ragtrace.cli.options import UsageError, capture_rules_of
    from ragtrace.offline.replay import ReplayError, read_spans

    try:
        spans = read_spans(args.file, format=args.format)
        rules = capture_rules_of(args)
    except (ReplayError, UsageError) as exc:
        sys.stderr.write(f"ragtrace explain: {exc}\n")
        return 2
    reports = explain(spans, rules=rules)
    if args.trace:
        wanted = args.trace.lower()
        reports = [r for r in reports if f"{r.trace_id:032x}".startswith(wanted)]
        if not reports:
            sys.stderr.write(f"ragtrace explain: no trace id starting with {args.trace!r} in {args.file}\n")
            return 2
    scored = sum(1 for r in reports if r.samples)
    sys.stdout.write(render(reports, max_chars=args.width))
    sys.stdout.write(f"{len(reports)} trace(s), {scored} with samples, {len(reports) - scored} without\n")
    return 0


def add_parser(subcommands: Any) -> argparse.ArgumentParser:
    """Add `explain` to the `ragtrace` command's subcommands."""
    parser: argparse.ArgumentParser = subcommands.add_parser(
        "explain",
        help="say how each span of exported traces was read, and why a trace was or was not scored",
        description="For each trace of an OTLP export: how each span was classified and by which convention, "
        "the samples built (query, contexts, response, paired generation and the evidence), and why a trace "
        "gave no sample. Nothing is scored.",
    )
    parser.add_argument(
        "file", help="OTLP JSON (one ExportTraceServiceRequest per line: the Collector's file exporter, ragtrace's "
        "OtlpJsonFileSpanExporter), the SDK's ConsoleSpanExporter output, or OTLP protobuf",
    )
    parser.add_argument("--format", choices=("auto", "json", "proto"), default="auto",
                        help="json: one request per line; proto: one message or length-delimited messages")
    parser.add_argument("--trace", help="only the trace whose hex id starts with this")
    parser.add_argument("--width", type=int, default=200, help="cut texts longer than this (default 200)")
    from ragtrace.cli.options import add_capture_options

    add_capture_options(parser)
    parser.set_defaults(func=run)
    return parser


__all__ = ["add_parser", "run"]
