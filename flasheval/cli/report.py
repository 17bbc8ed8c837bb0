"""``flasheval report RUN_DIR``: render run records as Markdown and one self-contained HTML page."""

from __future__ import annotations

import argparse

from flasheval.api.report import render_report

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="render run records (*.json) as report.md and report.html")
    parser.add_argument("path", metavar="RUN_DIR", help="a run folder (every *.json record in it) or one record file")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    files = render_report(args.path)
    print(f"rendered {len(files.kinds)} record(s) ({', '.join(files.kinds)}) with {len(files.figures)} figure(s): "
          f"{files.markdown} and {files.html}")
    return 0
