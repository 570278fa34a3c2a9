"""The `ragtrace` command: one parser, one module per subcommand. Nothing in the package imports the CLI.

A subcommand is a module with `add_parser(subcommands)`, which adds its arguments and sets `func` (called
with the parsed arguments, returning the exit code); adding one is a line in `SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from ragtrace._version import __version__
from ragtrace.cli.align import add_parser as add_align
from ragtrace.cli.demo import add_parser as add_demo
from ragtrace.cli.eval import add_parser as add_eval
from ragtrace.cli.explain import add_parser as add_explain
from ragtrace.cli.replay import add_parser as add_replay
from ragtrace.cli.serve import add_parser as add_serve

SUBCOMMANDS: tuple[Callable[[Any], argparse.ArgumentParser], ...] = (
    add_demo, add_eval, add_align, add_replay, add_explain, add_serve
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragtrace", description="Score RAG retrieval quality inside OpenTelemetry.")
    parser.add_argument("--version", action="version", version=f"ragtrace {__version__}")
    subcommands = parser.add_subparsers(dest="command", required=True)
    for add_parser in SUBCOMMANDS:
        add_parser(subcommands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; argparse errors exit 2."""
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code
