"""``flasheval tiers validate FILE``: check a tier plan and print what it means."""

from __future__ import annotations

import argparse

from flasheval.placement.tiers import load_tier_plan

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tiers", help="validate a tier plan")
    sub = parser.add_subparsers(dest="tiers_command", metavar="ACTION", required=True)
    val = sub.add_parser("validate", help="validate a tier plan file (or a plan name under tiers/)")
    val.add_argument("plan", metavar="FILE")
    val.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    plan = load_tier_plan(args.plan)
    stages = ", ".join("all" if s is None else str(s) for s in plan.stages)
    # the looks on datasets larger than every stage; a reference's own sizes change them a little (look_plan)
    levels = plan.look_levels([1.0 / s for s in plan.stages if s is not None] + [0.0])
    first = f"first look at {levels[0]:.4f} on datasets larger than the last stage"
    if plan.correction == "calibrated":
        first = (f"every look at most {levels[0]:.4f} (Pocock's, on datasets larger than the last stage); "
                 "calibrated on each reference's pool")
    print(f"{plan.name}: valid; stop rule {plan.stop_rule}; stages {stages}; confidence {plan.confidence_level} "
          f"(correction {plan.correction}: {first}); {plan.n_resamples} resamples")
    for tier in plan.tiers:
        res = "maximal" if tier.resolution == 0 else f"+-{tier.resolution}"
        stop = "" if plan.stop_rule != "flash_helm" else f", stops at {'all' if tier.stop_stage is None else tier.stop_stage}"
        print(f"  ranks {tier.label:<6} resolution {res}{stop}")
    if plan.pool_scale is not None:
        print(f"  written for a pool of {plan.pool_scale} ranks; larger pools scale every tier's last rank and "
              f"resolution by n / {plan.pool_scale} (200 ranks: "
              + ", ".join(f"{t.label} {'maximal' if t.resolution == 0 else f'+-{t.resolution}'}"
                          for t in plan.for_pool(200).tiers) + ")")
    if plan.allocation != "uniform":
        print(f"  allocation {plan.allocation}: each look's cost split across datasets (docs/placement.md)")
    return 0
