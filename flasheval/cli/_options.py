"""Options more than one subcommand takes, declared once so their names, defaults and help agree."""

from __future__ import annotations

import argparse

from flasheval.placement.results import Budget

__all__ = ["add_live_options", "add_lmeval_live_options", "budget_from"]


def add_live_options(parser: argparse.ArgumentParser) -> None:
    """``--task-dir``, ``--dtype``, ``--device``, ``--batch-size``: scoring live models against a built reference.

    Their defaults are ``None`` ("not given"), so an option given where it does not apply (a replayed
    model) is refused rather than ignored.
    """
    parser.add_argument("--task-dir", help="live: task files (default: the folder the reference was built from)")
    parser.add_argument("--dtype", help="live: default and only accepted value: the reference's")
    parser.add_argument("--device", help="live: auto, cpu, cuda, cuda:N (default: auto)")
    parser.add_argument("--batch-size", type=int, help="live: continuations per forward pass (default: 32)")


def add_lmeval_live_options(parser: argparse.ArgumentParser) -> None:
    """``--include-path``, ``--num-fewshot``: scoring live models against an lm-eval reference."""
    parser.add_argument("--include-path", "--include_path", dest="include_path",
                        help="live on an lm-eval reference: custom task YAMLs (default: the reference's)")
    parser.add_argument("--num-fewshot", "--num_fewshot", dest="num_fewshot", type=int,
                        help="live on an lm-eval reference: default and only accepted value: the reference's")


def budget_from(max_examples: int | None, max_tokens: int | None, max_flops: float | None) -> Budget:
    """The :class:`~flasheval.placement.results.Budget` of three options (validated where it is made)."""
    return Budget(max_examples=max_examples, max_tokens=max_tokens, max_flops=max_flops)
