"""``flasheval place``: place a model on a reference leaderboard for a fraction of a full run.

Model specs: ``replay:MODEL_ID`` replays a model recorded in the reference itself, held out
of the pool (the model is removed before ranking). With no ``--model`` the default replay
model of the reference is placed (``meta/llama-3-70b`` on ``helm_lite``: mid-table, needs
several stages). Live specs ``gguf:FILE`` / ``hf:PATH_OR_ID`` run the model now against a
reference built by ``flasheval reference build``: the reference's seed, prompt settings, task
files and dtype are checked by :func:`flasheval.reference.live.prepare_live` (a mismatch is
refused in one line) and the model is scored through a results store in the output folder by
:class:`flasheval.placement.scorers.LiveScorer`.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from flasheval.cli._options import add_live_options, add_lmeval_live_options
from flasheval.engine import check_model_files, n_parameters, open_cached_backend, parse_named_models
from flasheval.errors import InputError
from flasheval.placement.backtest import full_data_ranks
from flasheval.placement.controller import Budget, PlacementResult, place
from flasheval.placement.replay import ReplayScorer
from flasheval.placement.scorers import LiveScorer
from flasheval.placement.tiers import TierPlan, load_tier_plan
from flasheval.records import slug, write_record
from flasheval.reference import MISSING_POLICIES, load_reference
from flasheval.reference.live import prepare_live
from flasheval.reference.lmeval_live import is_lmeval_reference
from flasheval.stats.ranking import AGGREGATES

__all__ = ["register", "run", "run_live", "DEFAULT_REPLAY_MODEL", "format_summary", "check_numbers", "report_live"]

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
    parser.add_argument("--max-examples", type=int, help="budget: examples scored in total (> 0)")
    parser.add_argument("--max-tokens", type=int, help="budget: tokens processed in total (> 0)")
    parser.add_argument("--max-flops", type=float, help="budget: estimated FLOPs (> 0)")
    parser.add_argument("--n-parameters", type=float, help="model parameters, for the FLOPs estimate (> 0)")
    parser.add_argument("--output", help="output folder (default: runs/place-<reference>-<model>/)")
    add_live_options(parser)
    add_lmeval_live_options(parser)
    parser.set_defaults(func=run)


def format_summary(result: PlacementResult) -> str:
    """Readable multi-line summary of a placement."""
    c = result.compute
    res = "maximal" if result.resolution == 0 else f"+-{result.resolution}"
    lines = [
        f"{result.model_id} on {result.reference} ({result.n_models} reference models, plan {result.plan}, seed {result.seed})",
        f"  status: {result.status} ({result.reason})",
        f"  rank {result.rank} of {result.n_models + 1}, {result.confidence_level:.0%} interval "
        f"[{result.interval[0]}, {result.interval[1]}], tier {result.tier} ({res})",
        f"  examples: {c.n_examples} of {c.full_examples} ({c.example_saving:.1f}x saving)"
        + ("" if c.n_tokens is None else f"; tokens {c.n_tokens}"
           + ("" if c.token_saving is None else f" ({c.token_saving:.1f}x saving)"))
        + ("" if c.flops is None else f"; ~{c.flops:.3g} FLOPs"),
    ]
    return "\n".join(lines)


def check_numbers(args: argparse.Namespace) -> None:
    """Refuse, in one line naming the option, a budget or size that is not a positive finite number."""
    import math

    for option in ("max_examples", "max_tokens", "max_flops", "n_parameters", "batch_size"):
        value = getattr(args, option, None)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise InputError(f"must be a positive number, got {value}", field="--" + option.replace("_", "-"))
    if args.seed is not None and args.seed < 0:
        raise InputError(f"must be an integer >= 0, got {args.seed}", field="--seed")


def run(args: argparse.Namespace) -> int:
    check_numbers(args)
    kind, _, model_id = args.model.partition(":")
    if kind != "replay":
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
    out = Path(args.output or Path("runs") / f"place-{slug(reference.name)}-{slug(model_id)}")
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


def run_live(args: argparse.Namespace) -> int:
    """``place`` for a model that runs now (``gguf:FILE`` / ``hf:PATH_OR_ID``) on a built reference."""
    model = parse_named_models([args.model], field="--model")[0]
    check_model_files([model], field="--model")
    loaded = load_reference(args.reference, missing=args.missing)
    if is_lmeval_reference(loaded):
        from flasheval.cli._lmeval_place import run_lmeval_live

        return run_lmeval_live(args, model, loaded, report=report_live)
    setup = prepare_live(loaded, seed=args.seed, dtype=args.dtype, task_dir=args.task_dir)
    reference, settings, seed, dtype = setup.reference, setup.settings, setup.seed, setup.dtype
    tasks, task_dir = setup.tasks, setup.task_dir
    if model.model_id in reference.model_ids:
        print(f"{model.model_id} is in reference {reference.name}: held out of the pool")
        reference = reference.without(model.model_id)
    plan = load_tier_plan(args.tiers)
    out = Path(args.output or Path("runs") / f"place-{slug(reference.name)}-{slug(model.model_id)}")
    start = time.perf_counter()
    cached, store, backend = open_cached_backend(model, out / "store", dtype=dtype, device=args.device,
                                                 batch_size=args.batch_size)
    load_seconds = time.perf_counter() - start
    n_params = int(args.n_parameters) if args.n_parameters is not None else n_parameters(backend)
    scorer = LiveScorer(cached, tasks, seed=seed, prefix_space=settings.prefix_space, n_parameters=n_params)
    budget = Budget(max_examples=args.max_examples, max_tokens=args.max_tokens, max_flops=args.max_flops)
    print(f"placing {model.model_id} (live, {dtype}, loaded in {load_seconds:.0f} s) on {reference.name} "
          f"with plan {plan.name}:")
    try:
        result = place(reference, scorer, plan, model_id=model.model_id, seed=seed, budget=budget,
                       aggregate=args.aggregate)
    finally:
        store.close()
    return report_live(result, plan, out, {
        "spec": model.text, "fingerprint": cached.fingerprint, "dtype": dtype, "task_dir": str(task_dir),
        "load_seconds": load_seconds, "seconds": time.perf_counter() - start, "requests_computed": cached.n_computed,
        "asked": scorer.asked_json(),
        "examples": [o.to_json() for o in scorer.outcomes],
    })


def report_live(result: PlacementResult, plan: TierPlan, out: Path, live: dict[str, Any]) -> int:
    """Print a live placement's stages and summary and write its record (main process only)."""
    if int(os.environ.get("RANK", "0")) != 0:
        return 0  # under accelerate launch only the main process reports
    for stage in result.stages:
        print(f"  {stage.log_line(len(plan.stages))}")
    payload = result.to_json()
    payload["live"] = live
    path = write_record(out / "place.json", kind="place", payload=payload)
    print(format_summary(result))
    print(f"  wall time {live['seconds']:.0f} s (model load {live['load_seconds']:.0f} s); record: {path}")
    return 0
