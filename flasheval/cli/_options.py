"""Options more than one subcommand takes, declared once so their names, defaults and help agree."""

from __future__ import annotations

import argparse

__all__ = ["add_live_options", "add_lmeval_live_options"]


def add_live_options(parser: argparse.ArgumentParser) -> None:
    """``--task-dir``, ``--dtype``, ``--device``, ``--batch-size``: scoring live models against a built reference."""
    parser.add_argument("--task-dir", help="live: task files (default: the folder the reference was built from)")
    parser.add_argument("--dtype", help="live: default and only accepted value: the reference's")
    parser.add_argument("--device", default="auto", help="live: auto, cpu, cuda, cuda:N (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32, help="live: continuations per forward pass")


def add_lmeval_live_options(parser: argparse.ArgumentParser) -> None:
    """``--include-path``, ``--num-fewshot``: scoring live models against an lm-eval reference."""
    parser.add_argument("--include-path", "--include_path", dest="include_path",
                        help="live on an lm-eval reference: custom task YAMLs (default: the reference's)")
    parser.add_argument("--num-fewshot", "--num_fewshot", dest="num_fewshot", type=int,
                        help="live on an lm-eval reference: default and only accepted value: the reference's")
