"""Command-line entry point: ``flasheval SUBCOMMAND ...``; one module per subcommand.

Thin by design: parse arguments, configure logging, call one API function (:mod:`flasheval.api`,
which validates every value), print its result, and print one line per error. Each subcommand module exposes ``register(subparsers)``, which adds its parser and
sets ``func=run`` (``run(args) -> int`` returns the exit code) and ``runs_models=True`` when the command
scores models: under ``accelerate launch`` / ``torchrun`` it then runs on every process with
``distributed="all"`` (``args.distributed``; :mod:`flasheval.cli.launch`). Nothing in the package imports
the CLI. Every :class:`~flasheval.errors.FlashevalError` becomes ``flasheval: error: MESSAGE``
on stderr and exit code 1, never a traceback, naming an option spelled two ways (``--fewshot_seed``,
``--fewshot-seed``) as the user typed it. An option that takes a value given twice is a malformed command line
(exit code 2, one line), as argparse's own errors are; repeatable options (``action="append"``) stay repeatable.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from flasheval.cli.launch import launch
from flasheval.version import __version__
from flasheval.errors import FlashevalError

__all__ = ["main", "build_parser"]

# Subcommand modules of this package, in the order `--help` lists them.
_COMMAND_MODULES: tuple[str, ...] = (
    "tasks", "aggregate", "evaluate", "lm_eval", "reference", "tiers", "place", "watch", "backtest", "sweep", "dior",
    "report", "scaling", "export",
)


_TYPED = "_flasheval_typed"
"""The namespace attribute where the options' actions record each option given: ``dest -> (the spelling typed,
every spelling)``; :func:`main` takes it off the namespace and names options in errors as typed."""


def _record(action: argparse.Action, namespace: argparse.Namespace, option_string: str | None) -> None:
    if option_string is not None:
        namespace.__dict__.setdefault(_TYPED, {})[action.dest] = (option_string, tuple(action.option_strings))


class _StoreOnce(argparse._StoreAction):
    """argparse's ``store`` (every option that takes a value and is not ``append``), given at most once: a second
    ``--model`` (under any of its spellings) would silently keep the last value, so it is refused in one line."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        typed = getattr(namespace, _TYPED, {})
        if option_string is not None and self.dest in typed:
            first, value = typed[self.dest][0], getattr(namespace, self.dest, None)
            parser.error(f"argument {option_string}: given twice ({first} {value!r}, then {option_string} "
                         f"{values!r}); give it once")
        _record(self, namespace, option_string)
        super().__call__(parser, namespace, values, option_string)


class _StoreTrue(argparse._StoreTrueAction):
    """argparse's ``store_true``, the spelling typed recorded (a flag given twice is harmless)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        _record(self, namespace, option_string)
        super().__call__(parser, namespace, values, option_string)


class _Parser(argparse.ArgumentParser):
    """argparse's parser with a malformed command line reported in one line (exit code 2), like every other
    error, instead of the whole usage block, and every value-taking option given at most once (:class:`_StoreOnce`,
    registered as the ``store`` action, so argument groups get it too); the subcommands' parsers are of this class
    too (argparse makes subparsers of the parent's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)
        self.register("action", "store_true", _StoreTrue)

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
    typed = vars(args).pop(_TYPED, {})
    _configure_logging(args.verbose)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    quiet = getattr(args, "quiet", False) or not _is_terminal(sys.stderr)
    before = {key: os.environ.get(key) for key in _QUIET_ENV}
    if quiet:
        os.environ.update({key: before[key] or value for key, value in _QUIET_ENV.items()})
    try:
        return _run(args, typed)
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


def _as_typed(message: str, typed: dict[str, tuple[str, tuple[str, ...]]]) -> str:
    """``message`` with each option the user typed under one of its other spellings named as typed: the API names
    ``fewshot_seed`` ``--fewshot-seed`` (flasheval's spelling), a user of lm-eval's ``--fewshot_seed`` reads that."""
    for spelling, every in typed.values():
        for other in every:
            if other != spelling:
                message = re.sub(rf"(?<![\w-]){re.escape(other)}(?![\w-])", spelling, message)
    return message


def _run(args: argparse.Namespace, typed: dict[str, tuple[str, tuple[str, ...]]]) -> int:
    """Call the subcommand; every error it raises becomes one line (options named as ``typed``: dest -> (the
    spelling typed, every spelling))."""
    try:
        with launch(enabled=getattr(args, "runs_models", False)) as distributed:  # "all" under accelerate / torchrun
            args.distributed = distributed
            code = int(args.func(args))
        sys.stdout.flush()  # lines still buffered meet a closed pipe here, not at exit
        return code
    except FlashevalError as exc:
        print(f"flasheval: error: {_as_typed(str(exc), typed)}", file=sys.stderr)
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
