"""``flasheval reference import|build|show``: build a reference from results users have or by scoring
models live (:mod:`flasheval.commands._reference_build`); print a ranking."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from flasheval._reference_import import IMPORT_FORMATS, read_lm_eval_samples, read_long_parquet
from flasheval.commands._reference_build import add_build_parser, run_build
from flasheval.errors import InputError
from flasheval.reference import MISSING_POLICIES, load_reference, repo_root, write_reference
from flasheval.stats.ranking import AGGREGATES

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("reference", help="import, build or show a reference leaderboard")
    sub = parser.add_subparsers(dest="reference_command", metavar="ACTION", required=True)
    imp = sub.add_parser("import", help="build a reference from a long parquet file or lm-eval --log_samples output")
    imp.add_argument("source_path", metavar="FILE_OR_DIR")
    imp.add_argument("--format", required=True, choices=IMPORT_FORMATS)
    imp.add_argument("--name", required=True, help="reference name (folder name)")
    imp.add_argument("--suite", help="long-parquet: keep only rows with this 'suite' value")
    imp.add_argument("--metric", help="lm-eval-samples: per-sample metric key (default: acc, exact_match, acc_norm)")
    imp.add_argument("--output-dir", help="where NAME/ is written (default: $FLASHEVAL_REFERENCES or <repo>/reference_rankings)")
    imp.add_argument("--source", default="", help="where the numbers come from (stored in the manifest)")
    imp.add_argument("--licence", default="unknown")
    imp.add_argument("--metric-description", default="", help="what the score measures (manifest 'metric')")
    imp.add_argument("--lower-is-better", action="store_true")
    imp.add_argument("--aggregate", default="mean", choices=AGGREGATES)
    imp.add_argument("--random-baselines", help="JSON file {dataset: chance score} for the centered aggregate")
    imp.add_argument("--notes", default="")
    imp.add_argument("--force", action="store_true", help="overwrite an existing reference folder")
    imp.set_defaults(func=run)
    add_build_parser(sub).set_defaults(func=run)
    show = sub.add_parser("show", help="print a reference's full ranking")
    show.add_argument("name", metavar="NAME")
    show.add_argument("--aggregate", choices=AGGREGATES, help="default: the manifest's")
    show.add_argument("--missing", choices=MISSING_POLICIES, default="complete-models")
    show.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.reference_command == "build":
        return run_build(args)
    return _import(args) if args.reference_command == "import" else _show(args)


def _import(args: argparse.Namespace) -> int:
    if args.format == "long-parquet":
        frame = read_long_parquet(args.source_path, suite=args.suite)
    else:
        frame = read_lm_eval_samples(args.source_path, metric=args.metric)
    baselines = None
    if args.random_baselines:
        try:
            baselines = json.loads(Path(args.random_baselines).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"cannot read random baselines ({exc})", path=args.random_baselines) from None
    root = Path(args.output_dir or os.environ.get("FLASHEVAL_REFERENCES") or repo_root() / "reference_rankings")
    out = root / args.name
    if (out / "manifest.json").exists() and not args.force:
        raise InputError("reference already exists (use --force to overwrite)", path=out)
    built = f"flasheval reference import --format {args.format} {Path(args.source_path).name}" + (
        f" --suite {args.suite}" if args.suite else "") + (f" --metric {args.metric}" if args.metric else "")
    write_reference(out, frame, name=args.name, source=args.source or str(args.source_path), licence=args.licence,
                    metric=args.metric_description or args.metric or "score", higher_is_better=not args.lower_is_better,
                    aggregate=args.aggregate, random_baselines=baselines, built_with=built, notes=args.notes)
    ref = load_reference(out)
    print(f"wrote {out}: {ref.n_models} models, {len(ref.dataset_names)} datasets, "
          f"{sum(len(e) for e in ref.example_ids)} examples; excluded {len(ref.excluded)}")
    return 0


def _show(args: argparse.Namespace) -> int:
    ref = load_reference(args.name, missing=args.missing)
    kind = args.aggregate or ref.manifest.aggregate
    m = ref.manifest
    print(f"reference {ref.name}: {ref.n_models} models x {len(ref.dataset_names)} datasets "
          f"({sum(len(e) for e in ref.example_ids)} examples); metric: {m.metric}; aggregate: {kind}"
          f"{' (HELM compatibility; pool-dependent)' if kind == 'win_rate' else ''}; missing-data policy: {ref.missing_policy}")
    print(f"source: {m.source}; licence: {m.licence}")
    short = [d.rsplit("/", 1)[-1][:10] for d in ref.dataset_names]
    print(f"{'rank':>4}  {'model':<44} {kind:>9}  " + " ".join(f"{s:>10}" for s in short))
    for row in ref.ranking(kind):
        print(f"{row.rank:>4}  {row.model_id:<44} {row.value:>9.4f}  " + " ".join(f"{v:>10.3f}" for v in row.dataset_means))
    if ref.excluded:
        print(f"excluded by the '{ref.missing_policy}' policy ({len(ref.excluded)}):")
        for what, why in ref.excluded:
            print(f"  {what}: {why}")
    return 0
