"""``flasheval reference import|build|show``: build a reference from results users have
(:func:`flasheval.import_reference`) or by scoring models live (:func:`flasheval.build_reference`, one loop for
both engines in :mod:`flasheval.reference.building`); print a ranking, or with ``--intervals`` every model's
rank interval and the groups of models it cannot tell apart (:func:`flasheval.rank_intervals`)."""

from __future__ import annotations

import argparse
import sys
import time

from flasheval.cli._built import print_built
from flasheval.cli._options import (add_device_map_options, add_executor_options, add_progress_options, engine_from,
                                   executor_from, step_printer, without_executor_options)
from flasheval.cli.lm_eval import add_lm_eval_task_options
from flasheval.api.build import build_reference
from flasheval.checks import DTYPES
from flasheval.errors import InputError, shown_name
from flasheval.reference import IMPORT_FORMATS, MANIFEST_FILE, MISSING_POLICIES, load_reference
from flasheval.reference.leaderboard import reference_folder
from flasheval.api.importing import import_reference
from flasheval.api.rank_intervals import RankIntervals, rank_intervals
from flasheval.reference.importing import ImportedReference
from flasheval.stats.ranking import AGGREGATES

__all__ = ["register", "run", "format_intervals"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("reference", help="import, build or show a reference leaderboard")
    sub = parser.add_subparsers(dest="reference_command", metavar="ACTION", required=True)
    imp = sub.add_parser("import", help="build a reference from a long parquet file, lm-eval --log_samples output or "
                         "Every Eval Ever records")
    imp.add_argument("source_path", metavar="FILE_OR_DIR")
    imp.add_argument("--format", required=True, choices=IMPORT_FORMATS)
    imp.add_argument("--name", required=True, help="reference name (folder name)")
    imp.add_argument("--suite", help="long-parquet: keep only rows with this 'suite' value")
    imp.add_argument("--metric", help="lm-eval-samples: per-sample metric key (default: acc, exact_match, acc_norm); "
                     "every-eval-ever: import only the results of this metric_id")
    imp.add_argument("--missing", choices=MISSING_POLICIES,
                     help="every-eval-ever: leave out results without instance-level data (the model lacks that "
                     "dataset) under this missing-data policy (default: refuse them)")
    imp.add_argument("--output", "--output-dir", dest="output", help="where NAME/ is written (default: $FLASHEVAL_REFERENCES, else reference_rankings/ of the checkout, or of the working folder for an installed package)")
    imp.add_argument("--source", default="", help="where the numbers come from (stored in the manifest)")
    imp.add_argument("--licence", default="unknown")
    imp.add_argument("--metric-description", default="",
                     help="what the score measures (manifest 'metric'); a score outside [0, 1] is refused for a 0/1 "
                     "or accuracy metric (a 'metric' column, or words like 0/1 or accuracy here, or a table of 0s and "
                     "1s) unless this says 'continuous'")
    imp.add_argument("--lower-is-better", action="store_true")
    imp.add_argument("--aggregate", default="mean", choices=AGGREGATES)
    imp.add_argument("--random-baselines", help="JSON file {dataset: chance score} for the centered aggregate")
    imp.add_argument("--include-path", "--include_path", dest="include_path",
                     help="lm-eval-samples: folder of the custom task YAMLs the logs were made with (recorded as "
                     "the default for live placement)")
    imp.add_argument("--notes", default="")
    imp.add_argument("--force", action="store_true", help="overwrite an existing reference folder")
    imp.set_defaults(func=run)
    _add_build_parser(sub).set_defaults(func=run, runs_models=True)
    show = sub.add_parser("show", help="print a reference's full ranking")
    show.add_argument("name", metavar="NAME")
    show.add_argument("--aggregate", choices=AGGREGATES, help="default: the manifest's")
    show.add_argument("--missing", choices=MISSING_POLICIES, default="complete-models")
    show.add_argument("--intervals", action="store_true",
                      help="every model's rank interval (paired bootstrap of examples, simultaneous over all models) "
                      "and the groups of models the reference cannot tell apart")
    show.add_argument("--level", type=float, default=0.95, help="--intervals: confidence level (default: %(default)s)")
    show.add_argument("--per-model", action="store_true",
                      help="--intervals: each model's own interval at --level instead of all at once")
    show.add_argument("--n-resamples", type=int, default=1000, help="--intervals: bootstrap replicates (default: %(default)s)")
    show.add_argument("--seed", type=int, default=0, help="--intervals: bootstrap seed (default: %(default)s)")
    show.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.reference_command == "build":
        return _build(args)
    return _import(args) if args.reference_command == "import" else _show(args)


def _add_build_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``build`` action to ``flasheval reference`` (the caller sets its ``func``)."""
    p = sub.add_parser("build", help="score real models on a task suite and write a reference from them")
    p.add_argument("--models", nargs="+", required=True, metavar="[NAME=]SPEC",
                   help="gguf:FILE or hf:PATH_OR_ID, optionally named NAME=SPEC")
    p.add_argument("--harness", "--engine", dest="harness", choices=("flasheval", "lm-eval"), default="flasheval",
                   help="which harness scores the tasks (--engine: its older name): flasheval: DCLM-format task "
                   "suites; lm-eval: lm-evaluation-harness tasks (--tasks, --include_path, --num_fewshot) scored "
                   "through flasheval's engine (default: %(default)s)")
    p.add_argument("--suite", help="task suite (flasheval tasks list), e.g. dclm-core (harness flasheval)")
    p.add_argument("--task-dir", help="folder holding the task files (llm-foundry local_data layout; harness flasheval)")
    p.add_argument("--tasks", help="comma-separated subset of the suite's tasks (default: all of them); "
                   "harness lm-eval: the lm-eval task names")
    add_lm_eval_task_options(p)
    p.add_argument("--metric", help="harness lm-eval: per-sample metric (default: acc, exact_match, acc_norm)")
    p.add_argument("--n-examples", type=int, help="examples per task: the first N of the seeded order (default: all)")
    p.add_argument("--seed", type=int, default=1234, help="fixes example order and few-shot sets (default: %(default)s)")
    p.add_argument("--dtype", default="float32", choices=DTYPES, help="pinned in the reference (default: %(default)s)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N (default: %(default)s)")
    add_device_map_options(p)
    p.add_argument("--batch-size", type=int, help="continuations per forward pass (default: chosen for the device)")
    p.add_argument("--no-prefix-space", action="store_true",
                   help="do not prepend a space to continuations (SentencePiece-only pools; default: prefix space)")
    p.add_argument("--name", required=True, help="reference name (folder name)")
    p.add_argument("--output", "--output-root", dest="output", help="where NAME/ is written (default: $FLASHEVAL_REFERENCES, else reference_rankings/ of the checkout, or of the working folder for an installed package)")
    p.add_argument("--work-dir", help="results store and build log (default: runs/reference-build-NAME)")
    p.add_argument("--force", action="store_true", help="overwrite an existing reference folder")
    add_executor_options(p)
    add_progress_options(p)
    return p


def _build(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    built = build_reference(
        args.models, name=args.name, harness=args.harness, suite=args.suite, tasks=args.tasks, task_dir=args.task_dir,
        include_path=args.include_path, num_fewshot=args.num_fewshot, fewshot_seed=args.fewshot_seed,
        metric=args.metric, n_examples=args.n_examples, seed=args.seed, engine=engine_from(args),
        prefix_space=not args.no_prefix_space,
        output=args.output,
        work_dir=args.work_dir, force=args.force, argv=without_executor_options(sys.argv[1:]),
        progress=step_printer(args), distributed=args.distributed, executor=executor_from(args))
    if built.reference is None:  # the other processes of a launch: the main process wrote and prints
        return 0
    lm_eval = args.harness == "lm-eval"
    print_built(built.path, built.reference, start=start, seconds=built.seconds, computed=built.computed,
                datasets="lm-eval tasks" if lm_eval else "tasks", value_label="mean" if lm_eval else None,
                footer=f"build log: {built.log_path}; results store: {built.store_dir}")  # both engines write the log
    return 0


def _import(args: argparse.Namespace) -> int:
    imported = import_reference(
        args.source_path, format=args.format, name=args.name, output=args.output, suite=args.suite,
        metric=args.metric, source=args.source, licence=args.licence, metric_description=args.metric_description,
        higher_is_better=not args.lower_is_better, aggregate=args.aggregate, random_baselines=args.random_baselines,
        include_path=args.include_path, notes=args.notes, force=args.force, missing=args.missing)
    for line in _import_summary(imported, lm_eval=args.format == "lm-eval-samples"):
        print(line)
    return 0


_SHOWN_NAMES = 10


def _import_summary(imported: ImportedReference, *, lm_eval: bool = False) -> list[str]:
    """What ``reference import`` prints: the pool written, then the models dropped for missing results, by name."""
    w, settings = imported.written, imported.settings
    note = ""
    if lm_eval:
        note = (f"; lm-eval {settings.lm_eval_version} task settings recorded: live models can be placed" if settings
                else f"; no task settings ({imported.no_settings}): replay only")
    if w.missing_policy != "complete-models":
        note += "; load it with --missing common-datasets (not every model has every dataset)"
    lines = [f"wrote {w.path}: {w.n_models} models, {len(w.dataset_names)} datasets, {w.n_examples} examples; "
             f"excluded {len(w.excluded)}{note}"]
    dropped = [d.model_id for d in w.dropped_models]
    if dropped and w.missing_policy == "complete-models":
        more = (f" ... and {len(dropped) - _SHOWN_NAMES} more (all listed in {MANIFEST_FILE})"
                if len(dropped) > _SHOWN_NAMES else "")
        lines.append(f"dropped {len(dropped)} model{'s' if len(dropped) > 1 else ''} with missing results: "
                     f"{', '.join(dropped[:_SHOWN_NAMES])}{more}")
    return lines


def _show(args: argparse.Namespace) -> int:
    args.name = str(reference_folder(args.name, field="NAME"))  # named as show names it (a positional)
    if args.intervals:
        return _show_intervals(args)
    given = [flag for flag, on in (("--level", args.level != 0.95), ("--per-model", args.per_model),
                                   ("--n-resamples", args.n_resamples != 1000), ("--seed", args.seed != 0)) if on]
    if given:
        raise InputError("only with --intervals", field=given[0])
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
        print(f"{row.rank:>4}  {shown_name(row.model_id):<44} {row.value:>9.4f}  " + " ".join(f"{v:>10.3f}" for v in row.dataset_means))
    if ref.excluded:
        print(f"excluded by the '{ref.missing_policy}' policy ({len(ref.excluded)}):")
        for what, why in ref.excluded:
            print(f"  {what}: {why}")
    return 0


def _show_intervals(args: argparse.Namespace) -> int:
    """``reference show NAME --intervals``: every model's rank interval, its group, then the groups and a summary."""
    res = rank_intervals(args.name, confidence_level=args.level, simultaneous=not args.per_model,
                         aggregate=args.aggregate, missing=args.missing, n_resamples=args.n_resamples, seed=args.seed)
    for line in format_intervals(res):
        print(line)
    return 0


def format_intervals(res: RankIntervals) -> list[str]:
    """The lines ``reference show --intervals`` prints."""
    how = "simultaneous over all models" if res.simultaneous else "each model on its own"
    n = res.n_models
    lines = [f"reference {res.reference}: {n} models; aggregate {res.aggregate}; {res.confidence_level:.0%} rank "
             f"intervals, {how} (paired bootstrap of examples within each dataset, {res.n_resamples} resamples, "
             f"seed {res.seed})",
             f"{'rank':>4}  {'interval':>10}  {'group':>5}  {'model':<44} {res.aggregate:>9}"]
    lines += [f"{m.rank:>4}  {f'[{m.interval[0]}, {m.interval[1]}]':>10}  {m.group:>5}  {shown_name(m.model_id):<44} "
              f"{m.value:>9.4f}"
              for m in res.models]
    lines.append(f"groups ({res.n_groups}): blocks of consecutive models whose intervals stay inside the block; the "
                 "blocks are ordered, the models within one are not (docs/leaderboards.md):")
    start = 1
    for g, members in enumerate(res.groups, start=1):
        end = start + len(members) - 1
        span = f"rank {start}" if start == end else f"ranks {start}-{end}"
        shown = ", ".join(map(shown_name, members[:4])) + (f" and {len(members) - 4} more" if len(members) > 4 else "")
        lines.append(f"  {g}: {span} ({len(members)} model{'s' if len(members) > 1 else ''}): {shown}")
        start = end + 1
    w = res.widest
    lines.append(f"adjacent pairs separable: {res.n_separable_adjacent} of {n - 1}; groups: {res.n_groups}; widest "
                 f"interval: {shown_name(w.model_id)} rank {w.rank} [{w.interval[0]}, {w.interval[1]}] ({w.width + 1} ranks)")
    return lines
