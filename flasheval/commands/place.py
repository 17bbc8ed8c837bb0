"""``flasheval place``: place a model on a reference leaderboard for a fraction of a full run.

Model specs: ``replay:MODEL_ID`` replays a model recorded in the reference itself, held out
of the pool (the model is removed before ranking). With no ``--model`` the default replay
model of the reference is placed (``meta/llama-3-70b`` on ``helm_lite``: mid-table, needs
several stages). Live specs ``gguf:FILE`` / ``hf:PATH_OR_ID`` run the model now against a
reference built by ``flasheval reference build`` (:mod:`flasheval.commands._place_live`).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from flasheval.backends.replay import ReplayScorer
from flasheval.backtest import full_data_ranks
from flasheval.controller import Budget, PlacementResult, place
from flasheval.errors import InputError
from flasheval.records import write_record
from flasheval.reference import MISSING_POLICIES, load_reference
from flasheval.stats.ranking import AGGREGATES
from flasheval.tiers import load_tier_plan

__all__ = ["register", "run", "DEFAULT_REPLAY_MODEL", "format_summary"]

DEFAULT_REPLAY_MODEL = "meta/llama-3-70b"
"""Model placed by ``flasheval place`` with no arguments (held out of ``helm_lite``)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("place", help="place a model on a reference leaderboard (escalating subsamples)")
    parser.add_argument("--model", default=f"replay:{DEFAULT_REPLAY_MODEL}",
                        help="replay:MODEL_ID (a reference model, held out of the pool), or a live model "
                        "[NAME=]gguf:FILE / hf:PATH_OR_ID on a built reference; default: %(default)s")
    parser.add_argument("--reference", default="helm_lite", help="reference name or folder (default: %(default)s)")
    parser.add_argument("--tiers", default="default", help="tier plan file or name under tiers/ (default: %(default)s)")
    parser.add_argument("--seed", type=int, help="default: 0 (replay), the reference's build seed (live)")
    parser.add_argument("--aggregate", choices=AGGREGATES, help="default: the reference's")
    parser.add_argument("--missing", choices=MISSING_POLICIES, default="complete-models")
    parser.add_argument("--max-examples", type=int)
    parser.add_argument("--max-tokens", type=int)
    parser.add_argument("--max-flops", type=float)
    parser.add_argument("--n-parameters", type=float, help="model parameters, for the FLOPs estimate")
    parser.add_argument("--output", help="output folder (default: runs/place-<reference>-<model>/)")
    parser.add_argument("--task-dir", help="live: task files (default: the folder the reference was built from)")
    parser.add_argument("--dtype", help="live: default and only accepted value: the reference's")
    parser.add_argument("--device", default="auto", help="live: auto, cpu, cuda, cuda:N (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32, help="live: continuations per forward pass")
    parser.set_defaults(func=run)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


def format_summary(result: PlacementResult) -> str:
    """Readable multi-line summary of a placement."""
    c = result.compute
    res = "maximal" if result.resolution == 0 else f"+-{result.resolution}"
    lines = [
        f"{result.model_id} on {result.reference} ({result.n_models} reference models, plan {result.plan}, seed {result.seed})",
        f"  status: {result.status} ({result.reason})",
        f"  rank {result.rank} of {result.n_models + 1}, {result.confidence_level:.0%} interval "
        f"[{result.interval[0]}, {result.interval[1]}], tier {result.tier} ({res})",
        f"  examples: {c.n_examples} of {c.full_examples} ({c.saving:.1f}x saving)"
        + ("" if c.n_tokens is None else f"; tokens {c.n_tokens}")
        + ("" if c.flops is None else f"; ~{c.flops:.3g} FLOPs"),
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    kind, _, model_id = args.model.partition(":")
    if kind != "replay":
        from flasheval.commands._place_live import run_live

        return run_live(args)
    if not model_id:
        raise InputError(f"unsupported model spec {args.model!r}", field="--model", allowed=["replay:MODEL_ID"])
    reference = load_reference(args.reference, missing=args.missing)
    plan = load_tier_plan(args.tiers)
    n_params = None if args.n_parameters is None else int(args.n_parameters)
    scorer = ReplayScorer(reference, model_id, n_parameters=n_params)
    budget = Budget(max_examples=args.max_examples, max_tokens=args.max_tokens, max_flops=args.max_flops)
    print(f"placing {model_id} (replay, held out) on {reference.name} with plan {plan.name}:")
    result = place(reference.without(model_id), scorer, plan, model_id=model_id, seed=args.seed or 0, budget=budget,
                   aggregate=args.aggregate)
    for stage in result.stages:
        print(f"  {stage.log_line(len(plan.stages))}")
    out = Path(args.output or Path("runs") / f"place-{_slug(reference.name)}-{_slug(model_id)}")
    payload = result.to_json()
    # A replayed model is held out of a pool whose full data we have: show the answer placement estimated.
    full_rank = full_data_ranks(reference, args.aggregate)[model_id]
    payload["full_data_rank"] = full_rank
    path = write_record(out / "place.json", kind="place", payload=payload)
    print(format_summary(result))
    inside = "inside" if result.interval[0] <= full_rank <= result.interval[1] else "OUTSIDE"
    print(f"  full-data rank (every example scored): {full_rank}, {inside} the interval")
    print(f"  record: {path}")
    return 0
