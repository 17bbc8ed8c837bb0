"""``flasheval export --format every-eval-ever SOURCE --output DIR``: a placement, an evaluation, a run's checkpoints or
an lm-eval output folder as Every Eval Ever records (:func:`flasheval.export`)."""

from __future__ import annotations

import argparse

from flasheval.api.importing import EXPORT_FORMATS, export

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("export", help="write a placement, an evaluation, a run's checkpoints or an lm-eval "
                                   "output folder as Every Eval Ever records")
    parser.add_argument("source", metavar="RECORD_OR_RUN",
                        help="a place or evaluate record (or its folder), a run folder, or an lm-eval output folder")
    parser.add_argument("--format", required=True, choices=EXPORT_FORMATS)
    parser.add_argument("--output", required=True, help="folder the records go to (data/BENCHMARK/DEVELOPER/MODEL/)")
    parser.add_argument("--reference", help="the reference a replayed placement was made on, where its name alone "
                        "does not find it (a folder)")
    parser.add_argument("--organization", default="unknown",
                        help="who provides the records (source_metadata.source_organization_name)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    done = export(args.source, format=args.format, output=args.output, reference=args.reference,
                  organization=args.organization)
    print(f"wrote {len(done.logs)} Every Eval Ever log{'s' if len(done.logs) != 1 else ''} ({len(done.model_ids)} "
          f"model{'s' if len(done.model_ids) != 1 else ''}, {done.n_examples} instance records) under {done.output}")
    for path in done.logs:
        print(f"  {path}")
    return 0
