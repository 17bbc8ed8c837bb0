"""``flasheval tasks list`` and ``flasheval tasks check DIR``."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from flasheval.api.tasks import check_tasks
from flasheval.tasks import load_suite, suite_names, task_names, task_spec

__all__ = ["register", "run"]

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``tasks`` subcommand."""
    parser = subparsers.add_parser("tasks", help="list the known tasks and suites, or check a task directory")
    actions = parser.add_subparsers(dest="tasks_action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="tasks with type, shots, baselines, categories and suites")
    listing.add_argument("--suite", help=f"only this suite's tasks ({', '.join(suite_names())})")
    check = actions.add_parser("check", help="validate every task file found in DIR and count its examples")
    check.add_argument("task_dir", metavar="DIR",
                       help="a task directory (local_data/, reconstructed/, gpqa/) or an llm-foundry local_data dir")
    check.add_argument("--suite", help="only this suite's tasks")
    parser.set_defaults(func=run)


def _selected(suite: str | None) -> tuple[str, ...]:
    return task_names() if suite is None else load_suite(suite).task_names


def _membership() -> dict[str, list[str]]:
    member: dict[str, list[str]] = {name: [] for name in task_names()}
    for suite in suite_names():
        for name in load_suite(suite).task_names:
            member[name].append(suite)
    return member


def _list(suite: str | None) -> int:
    member = _membership()
    header = f"{'task':34} {'icl_type':28} {'shots':>5} {'v1%':>5} {'v2%':>5} {'cats':>4} {'data':13} suites"
    print(header)
    for name in _selected(suite):
        spec = task_spec(name)
        print(f"{name:34} {spec.icl_type:28} {spec.n_shots:>5} {spec.baseline_dclm_v1_pct:>5g} "
              f"{spec.baseline_dclm_v2_pct:>5g} {'yes' if spec.has_categories else 'no':>4} {spec.data_status:13} "
              f"{','.join(member[name])}")
    for name in suite_names() if suite is None else (suite,):
        loaded = load_suite(name)
        print(f"suite {name}: {len(loaded.task_names)} tasks, {loaded.aggregate}: {loaded.description}")
    return 0


def _check(task_dir: str, suite: str | None) -> int:
    rows = check_tasks(task_dir, suite=suite)
    print(f"{'task':34} {'examples':>8} {'categories':>10}  file")
    for row in rows:
        if row.status == "missing":
            print(f"{row.task_name:34} {'missing':>8} {'':>10}  {row.dataset_uri}")
        elif row.status == "error":
            print(f"{row.task_name:34} {'ERROR':>8} {'':>10}  {row.error}")
        else:
            note = "" if row.expected is None or row.n_examples == row.expected else \
                f"  (the known copy has {row.expected})"
            print(f"{row.task_name:34} {row.n_examples:>8} {row.n_categories or '':>10}  {row.source}{note}")
    missing = [r.task_name for r in rows if r.status == "missing"]
    n_errors = sum(r.status == "error" for r in rows)
    print(f"{sum(r.status == 'ok' for r in rows)} tasks valid, {len(missing)} missing"
          + (f" ({', '.join(missing)})" if missing else "") + f", {n_errors} with errors")
    return 1 if n_errors else 0


def run(args: argparse.Namespace) -> int:
    """Run ``tasks list`` or ``tasks check``; returns the exit code (1 when a file has errors)."""
    if args.suite is not None:
        load_suite(args.suite)  # unknown suite: one-line error listing the allowed names
    if args.tasks_action == "list":
        return _list(args.suite)
    return _check(args.task_dir, args.suite)
