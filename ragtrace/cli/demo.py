"""`ragtrace demo`: a small instrumented RAG app under live scoring."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any


def add_parser(subcommands: Any) -> argparse.ArgumentParser:
    """Add `demo` to the `ragtrace` command's subcommands."""
    demo: argparse.ArgumentParser = subcommands.add_parser(
        "demo", help="run a small instrumented RAG app under live scoring"
    )
    demo.add_argument("--requests", "-n", type=int, default=40, help="number of requests to send (default 40)")
    demo.add_argument("--degrade-at", type=int, metavar="N",
                      help="request at which the retriever's index goes stale (default: 40%% of the way in)")
    demo.add_argument("--judge", default="local", help="'local' (default) or a litellm model string")
    demo.add_argument("--sample-rate", type=float, default=1.0, help="share of traces scored (default 1.0)")
    demo.add_argument("--worker", choices=("thread", "process"), default="thread",
                      help="score in a thread of the app (default) or in a scoring process of its own")
    demo.set_defaults(func=run)
    return demo


def run(args: argparse.Namespace) -> int:
    from ragtrace.cli.options import UsageError, check_judge_spec
    from ragtrace.demo.run import run_demo

    try:
        if args.requests < 1:
            raise UsageError(f"--requests must be >= 1, got {args.requests}")
        if args.degrade_at is not None and not 1 <= args.degrade_at <= args.requests:
            raise UsageError(f"--degrade-at must be between 1 and --requests ({args.requests}), got {args.degrade_at}")
        check_judge_spec(args.judge)
    except UsageError as exc:
        print(f"ragtrace demo: error: {exc}", file=sys.stderr)
        return 2
    # The demo prints drift alerts itself, with the traces to open: the monitor's log line would repeat them.
    logging.getLogger("ragtrace.drift").addHandler(logging.NullHandler())
    try:
        return run_demo(requests=args.requests, judge=args.judge, sample_rate=args.sample_rate, worker=args.worker,
                        degrade_at=args.degrade_at)
    except ImportError as exc:  # the local judge's model package: the message says how to install it
        print(f"ragtrace demo: error: cannot load judge {args.judge!r}: {exc}", file=sys.stderr)
        return 2


__all__ = ["add_parser", "run"]
