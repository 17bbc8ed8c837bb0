"""Command-line entry point: ``flasheval SUBCOMMAND ...``; one module per subcommand.

Thin by design: parse arguments, configure logging, call one API function (:mod:`flasheval.api`,
which validates every value), print its result, and print one line per error. Each subcommand module exposes ``register(subparsers)``, which adds its parser and
sets ``func=run`` (``run(args) -> int`` returns the exit code). Nothing in the package imports
the CLI. Every :class:`~flasheval.errors.FlashevalError` becomes ``flasheval: error: MESSAGE``
on stderr and exit code 1, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from flasheval.version import __version__
from flasheval.errors import FlashevalError

__all__ = ["main", "build_parser"]

# Subcommand modules of this package, in the order `--help` lists them.
_COMMAND_MODULES: tuple[str, ...] = (
    "tasks", "aggregate", "evaluate", "lm_eval", "reference", "tiers", "place", "backtest", "sweep", "dior", "report", "scaling",
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="flasheval",
        description="Place a language-model checkpoint on a reference leaderboard for a fraction of a full run.",
    )
    parser.add_argument("--version", action="version", version=f"flasheval {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(f"flasheval.cli.{name}").register(subparsers)
    return parser


def _configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except FlashevalError as exc:
        print(f"flasheval: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("flasheval: interrupted; finished results are kept and a rerun resumes", file=sys.stderr)
        return 130
