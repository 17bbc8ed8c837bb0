"""``flasheval dior``: how reliable is a benchmark design decision (Perlitz et al.'s DIoR)."""

from __future__ import annotations

import argparse
import time

from flasheval.api.dior import MAX_DATASET_COUNT, dior
from flasheval.analysis.dior import DEFAULT_SIZES, DiorReport
from flasheval.records.run_record import default_run_folder
from flasheval.reference import MISSING_POLICIES, load_reference
from flasheval.stats.dior import DECISIONS
from flasheval.stats.ranking import AGGREGATES

__all__ = ["register", "run", "format_report"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("dior", help="reliability of benchmark design decisions (DIoR)")
    parser.add_argument("--reference", default="helm_lite", help="reference name or folder (default: %(default)s)")
    parser.add_argument("--decision", nargs="+", choices=DECISIONS, default=list(DECISIONS),
                        help="decisions to instantiate (default: all three)")
    parser.add_argument("--sizes", nargs="+", type=int,
                        help="examples per dataset for the examples decision; sizes past the largest dataset are tried "
                        f"as its size (default: {' '.join(map(str, DEFAULT_SIZES))}, up to the largest dataset)")
    parser.add_argument("--dataset-counts", nargs="+", type=int,
                        help="datasets drawn with replacement for the datasets decision, each from 1 to "
                        f"{MAX_DATASET_COUNT:,} (default: as many as the reference has)")
    parser.add_argument("--aggregate", choices=AGGREGATES, help="default: the reference's")
    parser.add_argument("--missing", choices=MISSING_POLICIES, default="complete-models")
    parser.add_argument("--n-instantiations", type=int, default=1000)
    parser.add_argument("--confidence-level", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", help="output folder (default: runs/dior-<reference>/)")
    parser.add_argument("--force", action="store_true",
                        help="replace a record in the output folder that another command, or other settings, wrote")
    parser.set_defaults(func=run)


def format_report(report: DiorReport) -> str:
    """The tables and findings printed by the command (the report module renders the same record)."""
    lvl = f"{report.confidence_level:.0%}"
    lines = [f"DIoR on {report.reference}: {len(report.model_ids)} models x {len(report.dataset_names)} datasets, "
             f"aggregate {report.aggregate}, {report.n_instantiations} instantiations, seed {report.seed}; "
             f"reliability = lower bound of the {lvl} interval of Kendall tau vs the full-data ranking"]
    for title, rows, label in (("examples: S random examples per dataset", report.examples, "S"),
                               ("datasets: k datasets resampled with replacement", report.datasets, "k"),
                               ("aggregate: random half sub-pools vs the full pool", report.pool, "")):
        if not rows:
            continue
        lines.append(f"  {title}")
        lines.append(f"    {'':>14} {'tau lower':>9} {'median':>7} {'top-2 swap':>10}")
        for s in rows:
            name = f"{s.aggregate}" if title.startswith("aggregate") else f"{label}={s.size}"
            lines.append(f"    {name:>14} {s.tau_lower:>9.3f} {s.tau_median:>7.3f} {s.top_two_swap_rate:>10.1%}")
    f = report.findings
    if "examples_equivalent_of_datasets" in f:
        eq = f["examples_equivalent_of_datasets"]
        lines.append(f"  finding 1: resampling the datasets (tau lower {f['datasets_tau_lower']:.3f}) is "
                     + (f"less reliable than keeping only {eq} random examples per dataset" if eq is not None
                        else "more reliable than every number of examples per dataset tried"))
    if "flattening_size" in f:
        flat = f["flattening_size"]
        lines.append("  finding 2: " + (f"reliability flattens after {flat} examples per dataset (100 more add "
                                          f"< {f['flat_gain_per_100']} to tau's lower bound)" if flat else
                                          "reliability still grows at the largest size tried"))
    if "win_rate_leader_change_found" in f:
        if report.leader_changes:
            c = report.leader_changes[0]
            ids = report.model_ids
            rank = report.findings.get("weak_rank", {}).get(ids[c.added])
            lines.append(f"  finding 3: mean win rate CAN change the leader: {len(report.leader_changes)} cases in "
                         f"{report.n_pools_tried} pools; e.g. in a pool of {len(c.pool)} models adding the weak "
                         f"{ids[c.added]} (rank {rank} of {len(ids)} by {report.aggregate}) moves the lead from "
                         f"{ids[c.leader_before]} to {ids[c.leader_after]}")
        else:
            lines.append(f"  finding 3: no leader change by adding one weak model found in {report.n_pools_tried} pools")
    if report.aggregate_tau:
        lines.append("  full-data tau vs " + report.aggregate + ": "
                     + ", ".join(f"{a} {t:.3f}" for a, t in report.aggregate_tau.items()))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    reference = load_reference(args.reference, missing=args.missing)
    out = args.output if args.output is not None else default_run_folder("dior", reference.name)
    start = time.perf_counter()
    outcome = dior(reference, decisions=args.decision, sizes=args.sizes, dataset_counts=args.dataset_counts,
                   aggregate=args.aggregate, n_instantiations=args.n_instantiations,
                   confidence_level=args.confidence_level, seed=args.seed, output=out, force=args.force)
    print(format_report(outcome.report))
    print(f"  {time.perf_counter() - start:.0f} s; record: {outcome.record_path}")
    return 0
