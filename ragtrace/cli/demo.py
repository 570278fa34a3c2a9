"""`ragtrace demo`: a small instrumented RAG app under live scoring."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subcommands: Any) -> argparse.ArgumentParser:
    """Add `demo` to the `ragtrace` command's subcommands."""
    demo: argparse.ArgumentParser = subcommands.add_parser(
        "demo", help="run a small instrumented RAG app under live scoring"
    )
    demo.add_argument("--requests", "-n", type=int, default=18, help="number of requests to send (default 18)")
    demo.add_argument("--judge", default="local", help="'local' (default) or a litellm model string")
    demo.add_argument("--sample-rate", type=float, default=1.0, help="share of traces scored (default 1.0)")
    demo.add_argument("--worker", choices=("thread", "process"), default="thread",
                      help="score in a thread of the app (default) or in a scoring process of its own")
    demo.set_defaults(func=run)
    return demo


def run(args: argparse.Namespace) -> int:
    from ragtrace.demo.run import run_demo

    return run_demo(requests=args.requests, judge=args.judge, sample_rate=args.sample_rate, worker=args.worker)


__all__ = ["add_parser", "run"]
