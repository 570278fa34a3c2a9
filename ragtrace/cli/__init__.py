"""The `ragtrace` command line: `demo`, `eval`, `replay`, `explain`, `serve` (main.py builds the one parser)."""

from ragtrace.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
