"""The `ragtrace` command. Nothing imports this module; it imports everything."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def _run_demo(args: argparse.Namespace) -> int:
    from ragtrace.demo.run import run_demo

    return run_demo(requests=args.requests, judge=args.judge, sample_rate=args.sample_rate, worker=args.worker)


def build_parser() -> argparse.ArgumentParser:
    from ragtrace.cli_eval import add_eval_parser, add_replay_parser
    from ragtrace.cli_explain import add_explain_parser
    from ragtrace.gateway.cli import add_serve_parser

    parser = argparse.ArgumentParser(prog="ragtrace", description="Score RAG retrieval quality inside OpenTelemetry.")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="run a small instrumented RAG app under live scoring")
    demo.add_argument("--requests", "-n", type=int, default=18, help="number of requests to send (default 18)")
    demo.add_argument("--judge", default="local", help="'local' (default) or a litellm model string")
    demo.add_argument("--sample-rate", type=float, default=1.0, help="share of traces scored (default 1.0)")
    demo.add_argument("--worker", choices=("thread", "process"), default="thread",
                      help="score in a thread of the app (default) or in a scoring process of its own")
    demo.set_defaults(func=_run_demo)

    add_eval_parser(commands)
    add_replay_parser(commands)
    add_explain_parser(commands)
    add_serve_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
