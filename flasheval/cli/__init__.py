"""Command-line entry point: ``flasheval SUBCOMMAND ...``; one module per subcommand.

Thin by design: parse arguments, configure logging, call one API function (:mod:`flasheval.api`,
which validates every value), print its result, and print one line per error. Each subcommand module exposes ``register(subparsers)``, which adds its parser and
sets ``func=run`` (``run(args) -> int`` returns the exit code) and ``runs_models=True`` when the command
scores models: under ``accelerate launch`` / ``torchrun`` it then runs on every process with
``distributed="all"`` (``args.distributed``; :mod:`flasheval.cli.launch`). Nothing in the package imports
the CLI. Every :class:`~flasheval.errors.FlashevalError` becomes ``flasheval: error: MESSAGE``
on stderr and exit code 1, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from flasheval.cli.launch import launch
from flasheval.version import __version__
from flasheval.errors import FlashevalError

__all__ = ["main", "build_parser"]

# Subcommand modules of this package, in the order `--help` lists them.
_COMMAND_MODULES: tuple[str, ...] = (
    "tasks", "aggregate", "evaluate", "lm_eval", "reference", "tiers", "place", "watch", "backtest", "sweep", "dior",
    "report", "scaling",
)


class _Parser(argparse.ArgumentParser):
    """argparse's parser with a malformed command line reported in one line (exit code 2), like every other
    error, instead of the whole usage block; the subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every subcommand registered."""
    parser = _Parser(
        prog="flasheval",
        description="Place a language-model checkpoint on a reference leaderboard for a fraction of a full run.",
    )
    parser.add_argument("--version", action="version", version=f"flasheval {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(f"flasheval.cli.{name}").register(subparsers)
    return parser


class _CommandFormatter(logging.Formatter):
    """flasheval's own warnings as the command's lines (``flasheval: note: ...``); anything else, and every
    record under ``-v``, with its level and logger."""

    def __init__(self, verbosity: int) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")
        self._plain = verbosity == 0

    def format(self, record: logging.LogRecord) -> str:
        if self._plain and record.levelno == logging.WARNING and record.name.split(".")[0] == "flasheval":
            return f"flasheval: {record.getMessage()}"
        return super().format(record)


def _configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_CommandFormatter(verbosity))
    logging.basicConfig(level=level, handlers=[handler])


_QUIET_ENV = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}
"""``--quiet``, or a stderr that is not a terminal (a log file, a pipe), also turns off huggingface_hub's and
transformers' download / weight-loading bars, and every tqdm bar whose caller leaves ``disable`` at its default
(tqdm reads ``TQDM_*`` defaults from the environment), for the command's duration."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    quiet = getattr(args, "quiet", False) or not _is_terminal(sys.stderr)
    before = {key: os.environ.get(key) for key in _QUIET_ENV}
    if quiet:
        os.environ.update({key: before[key] or value for key, value in _QUIET_ENV.items()})
    try:
        return _run(args)
    finally:
        if quiet:  # as it was: main() may be called in-process, by a test or a notebook
            for key, value in before.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _is_terminal(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _run(args: argparse.Namespace) -> int:
    """Call the subcommand; every error it raises becomes one line."""
    try:
        with launch(enabled=getattr(args, "runs_models", False)) as distributed:  # "all" under accelerate / torchrun
            args.distributed = distributed
            code = int(args.func(args))
        sys.stdout.flush()  # lines still buffered meet a closed pipe here, not at exit
        return code
    except FlashevalError as exc:
        print(f"flasheval: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("flasheval: interrupted; finished results are kept and a rerun resumes", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _stdout_closed()
    except OSError as exc:  # an I/O error no layer below turned into a FlashevalError: still one line
        if args.verbose >= 2:
            raise
        where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
        print(f"flasheval: error: {where + ': ' if where else ''}{exc.strerror or exc} (-vv shows where)",
              file=sys.stderr)
        return 1


def _stdout_closed() -> int:
    """The reader of stdout went away (``flasheval ... | head``): stop quietly, exit code 141 (128 + SIGPIPE).

    As Python's documentation advises (the "Note on SIGPIPE" in the :mod:`signal` docs), stdout is
    pointed at ``/dev/null`` so that the flush at interpreter exit does not fail a second time.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # a stdout without a file descriptor (captured in-process): nothing to point
        pass
    return 141
