"""``flasheval backtest``: leave-one-out (or ``--held-out K``) placement of reference models, three methods compared."""

from __future__ import annotations

import argparse

from flasheval.api.backtest import backtest
from flasheval.api.progress import Progress
from flasheval.cli._options import add_progress_options, changed_settings, remember_defaults, step_printer
from flasheval.records.run_record import default_run_folder
from flasheval.analysis.backtest import ALL_METHODS, METHODS, BacktestResult, SeedSummary, parse_seeds
from flasheval.placement.tiers import load_tier_plan
from flasheval.reference import MISSING_POLICIES, load_reference
from flasheval.stats.ranking import AGGREGATES

__all__ = ["register", "run", "format_table", "format_seeds"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("backtest", help="leave-one-out backtest of placement on a reference")
    parser.add_argument("--reference", default="helm_lite")
    parser.add_argument("--tiers", default="default", help="tier plan of the adaptive method (default: %(default)s)")
    parser.add_argument("--flash-helm-tiers", default="flash_helm", help="plan of the fixed schedule compared against")
    parser.add_argument("--seed", type=int, default=0, help="one seed (default: %(default)s)")
    parser.add_argument("--seeds", help="several seeds, e.g. 0-4 or 0,2,7: one table per seed, then mean and min")
    parser.add_argument("--aggregate", choices=AGGREGATES)
    parser.add_argument("--missing", choices=MISSING_POLICIES, default="complete-models")
    parser.add_argument("--methods", default=",".join(METHODS),
                        help=f"comma-separated methods out of {', '.join(ALL_METHODS)} (default: %(default)s; "
                             "adaptive always runs, it sets the others' cost)")
    parser.add_argument("--held-out", type=int, metavar="K",
                        help="hold out K models spread over the ranking (seeded) together and place each against the "
                             "rest, instead of every model in turn (large pools; shares with standard errors from K)")
    parser.add_argument("--per-model", action="store_true", help="also print one line per model")
    parser.add_argument("--output", help="record file (default: runs/backtest-<reference>.json; 8 hex digits "
                        "of the settings appended when an option that decides the result is not its default)")
    parser.add_argument("--force", action="store_true", help="replace an --output file that is not a backtest record")
    add_progress_options(parser)
    remember_defaults(parser, "tiers", "flash_helm_tiers", "seed", "seeds", "aggregate", "missing", "methods",
                      "held_out")
    parser.set_defaults(func=run)


def format_table(result: BacktestResult) -> str:
    """Summary table, one line per method (held-out sets: each share with its standard error from K)."""
    if result.held_out:
        lines = [f"{'method':<11} {'models':>6} {'within res. (SE)':>17} {'coverage (SE)':>15} {'median saving':>13} "
                 f"{'mean saving':>11} {'total saving':>12} {'mean examples':>13}"]
        for s in result.summaries:
            within = f"{s.share_within:.1%} ({s.share_within_se:.1%})"
            covered = f"{s.coverage:.1%} ({s.coverage_se:.1%})"
            lines.append(f"{s.method:<11} {s.n_models:>6} {within:>17} {covered:>15} {s.median_saving:>12.1f}x "
                         f"{s.mean_saving:>10.1f}x {s.total_saving:>11.1f}x {s.mean_examples:>13.0f}")
        return "\n".join(lines)
    lines = [f"{'method':<11} {'models':>6} {'within res.':>11} {'coverage':>9} {'median saving':>13} "
             f"{'mean saving':>11} {'total saving':>12} {'mean examples':>13}"]
    for s in result.summaries:
        lines.append(f"{s.method:<11} {s.n_models:>6} {s.share_within:>11.1%} {s.coverage:>9.1%} "
                     f"{s.median_saving:>12.1f}x {s.mean_saving:>10.1f}x {s.total_saving:>11.1f}x {s.mean_examples:>13.0f}")
    return "\n".join(lines)


def _per_model(result: BacktestResult) -> str:
    lines = [f"{'model':<44} {'full':>4} {'placed':>6} {'interval':>10} {'tier':>5} {'ok':>3} {'examples':>8} {'saving':>7}"]
    for r in result.rows["adaptive"]:
        lines.append(f"{r.model_id:<44} {r.full_rank:>4} {r.placed_rank:>6} {str(list(r.interval)):>10} {r.tier:>5} "
                     f"{'yes' if r.within else 'NO':>3} {r.n_examples:>8} {r.saving:>6.1f}x")
    return "\n".join(lines)


def format_seeds(summaries: tuple[SeedSummary, ...]) -> str:
    """Per method: every seed's figures, then their mean and minimum."""
    seeds = summaries[0].seeds
    lines = [f"over seeds {', '.join(map(str, seeds))}:",
             f"{'method':<11} {'figure':<14} " + " ".join(f"{'seed ' + str(s):>8}" for s in seeds) + f" {'mean':>8} {'min':>8}"]
    for s in summaries:
        for field, label, fmt in (("share_within", "within res.", "{:.1%}"), ("coverage", "coverage", "{:.1%}"),
                                  ("median_saving", "median saving", "{:.1f}x"),
                                  ("total_saving", "total saving", "{:.1f}x")):
            values = [fmt.format(v) for v in getattr(s, field)] + [fmt.format(s.mean(field)), fmt.format(s.min(field))]
            lines.append(f"{s.method:<11} {label:<14} " + " ".join(f"{v:>8}" for v in values))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    seeds = parse_seeds(args.seeds) if args.seeds is not None else (args.seed,)
    reference = load_reference(args.reference, missing=args.missing)
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    plan = load_tier_plan(args.tiers)

    models = step_printer(args)

    def show(step: Progress) -> None:  # a line per held-out model (not with --quiet); each seed's table when done
        if step.step != "seed":
            if models is not None:
                models(step)
            return
        result: BacktestResult = step.detail  # type: ignore[assignment]
        if args.per_model:
            print(_per_model(result))
        design = (f"{reference.n_models} models left out in turn" if not result.held_out else
                  f"{len(result.held_out)} models held out together, pool of {result.pool_size}")
        print(f"backtest on {reference.name}: {design}; plan {plan.name} "
              f"({plan.confidence_level:.0%} intervals, correction {plan.correction}), seed {result.seed}; "
              f"{step.seconds:.0f} s")
        print(format_table(result), flush=True)

    folder = default_run_folder("backtest", reference.name, settings=changed_settings(args))
    out = args.output if args.output is not None else f"{folder}.json"
    outcome = backtest(reference, plan, compare_plan=args.flash_helm_tiers, seeds=seeds, methods=methods,
                       aggregate=args.aggregate, output=out, progress=show, held_out=args.held_out,
                       force=args.force)
    if len(outcome.results) > 1:
        print(format_seeds(outcome.over_seeds))
    print(f"record: {outcome.record_path}")
    return 0
