"""``flasheval sweep``: place many checkpoints at once under one budget (racing, resumable).

Model specs are those of ``place``: ``replay:MODEL_ID`` replays a model recorded in the
reference; every replayed checkpoint is held out of the pool, and its full-data rank among the
pool is reported beside its placement (a backtest). ``--backtest N`` sweeps N reference
models spread evenly over the full-data ranking. Live specs ``[NAME=]gguf:FILE`` /
``[NAME=]hf:PATH_OR_ID`` run the models now against a reference built by ``flasheval reference
build`` (checked by :func:`flasheval.reference.live.prepare_live`, as for ``place``); one sweep
takes replay or live specs, not both. The run folder (:mod:`flasheval.placement.sweep_run`)
holds ``sweep-config.json`` (the settings), ``scores.jsonl`` (the results store) and
``sweep.json`` (the record); rerunning the same command after a crash resumes from the store.
Live checkpoints are loaded when a round first asks them for examples, at most ``--max-loaded``
at once (:class:`flasheval.placement.sweep_models.CheckpointPool`); live sweeps run data-parallel
under ``accelerate launch -m flasheval sweep ...`` as ``evaluate`` does (only the main process
writes the run folder).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from flasheval.cli._options import add_live_options, add_lmeval_live_options
from flasheval.engine import NamedModel, check_model_files, parse_named_models
from flasheval.engine.distributed import launch_state, shutdown
from flasheval.errors import InputError
from flasheval.placement.controller import Budget
from flasheval.placement.replay import ReplayScorer
from flasheval.placement.sweep import SweepResult, sweep
from flasheval.placement.sweep_models import CheckpointPool
from flasheval.placement.sweep_run import (
    RECORD_FILE,
    STORE_FILE,
    STORE_FORMAT,
    build_payload,
    check_token_budget,
    hold_out,
    open_run_folder,
    restrict,
    run_folder,
    separate_placements,
    spread_models,
    truth_ranks,
)
from flasheval.placement.sweep_store import StoredScorer
from flasheval.placement.tiers import TierPlan, load_tier_plan
from flasheval.records import slug, write_record
from flasheval.reference import MISSING_POLICIES, ReferenceLeaderboard, load_reference
from flasheval.reference.live import prepare_live
from flasheval.reference.lmeval_live import is_lmeval_reference
from flasheval.stats.ranking import AGGREGATES

__all__ = ["register", "run", "run_live", "format_result"]

_SPECS = ("replay:MODEL_ID", "[NAME=]gguf:FILE", "[NAME=]hf:PATH_OR_ID")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sweep", help="place many checkpoints at once under one budget (resumable)")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--models", nargs="+", metavar="SPEC",
                       help="checkpoint specs: replay:MODEL_ID, or live [NAME=]gguf:FILE / [NAME=]hf:PATH_OR_ID "
                            "(live models are loaded when a round needs them, at most --max-loaded at once)")
    group.add_argument("--models-from", metavar="FILE", help="file with one spec per line (# comments)")
    group.add_argument("--backtest", type=int, metavar="N", help="sweep N reference models spread over the ranking")
    parser.add_argument("--reference", default="helm_lite", help="reference name or folder (default: %(default)s)")
    parser.add_argument("--budget-examples", type=int, help="total examples over all checkpoints")
    parser.add_argument("--budget-tokens", type=int, help="total tokens (needs scorers that report tokens)")
    parser.add_argument("--budget-flops", type=float, help="total FLOPs (needs --n-parameters and tokens)")
    parser.add_argument("--n-parameters", type=float, help="parameters per checkpoint, for FLOPs")
    parser.add_argument("--tiers", default="default", help="tier plan file or name (default: %(default)s)")
    parser.add_argument("--datasets", nargs="+", metavar="NAME", help="datasets the sweep needs (default: all)")
    parser.add_argument("--low-rank", type=int, help="racing: stop checkpoints whose interval lies at or below this "
                                                     "rank (default: first rank of the plan's last tier)")
    parser.add_argument("--seed", type=int, help="default: 0 (replay), the reference's build seed (live; no other)")
    parser.add_argument("--aggregate", choices=AGGREGATES, help="default: the reference's")
    parser.add_argument("--missing", choices=MISSING_POLICIES, default="complete-models")
    parser.add_argument("--output", help="run folder (default: runs/sweep-<reference>/)")
    add_live_options(parser)
    parser.add_argument("--max-loaded", type=int, default=1, metavar="N",
                        help="live: most checkpoints held in memory at once; the least recently used is unloaded "
                             "(finished examples are never recomputed) (default: %(default)s)")
    add_lmeval_live_options(parser)
    parser.set_defaults(func=run)


def _read_specs(args: argparse.Namespace, reference: ReferenceLeaderboard | None) -> list[str]:
    if args.backtest is not None and reference is not None:
        return [f"replay:{m}" for m in spread_models(reference, args.backtest)]
    if args.models:
        return list(args.models)
    path = Path(args.models_from)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", path=path) from None
    specs = [ln.split("#", 1)[0].strip() for ln in lines]
    if not any(specs):
        raise InputError("no model specs in the file", path=path)
    return [s for s in specs if s]


def _parse_specs(specs: list[str], reference: ReferenceLeaderboard) -> list[str]:
    model_ids = []
    for spec in specs:
        kind, _, model_id = spec.partition(":")
        if kind != "replay" or not model_id:
            raise InputError(f"unsupported model spec {spec!r}", field="--models", allowed=_SPECS)
        reference.index(model_id)  # unknown model: one line listing the known ones
        model_ids.append(model_id)
    if len(set(model_ids)) != len(model_ids):
        dup = next(m for m in model_ids if model_ids.count(m) > 1)
        raise InputError(f"checkpoint {dup!r} given twice", field="--models")
    if reference.n_models - len(model_ids) < 2:
        raise InputError(f"holding out {len(model_ids)} checkpoints leaves fewer than 2 reference models",
                         field="--models")
    return model_ids


def _budget(args: argparse.Namespace) -> Budget:
    if args.budget_examples is None and args.budget_tokens is None and args.budget_flops is None:
        raise InputError("a sweep needs a budget", field="--budget-examples",
                         allowed=["--budget-examples", "--budget-tokens", "--budget-flops"])
    for name in ("budget_examples", "budget_tokens", "budget_flops"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise InputError(f"must be > 0, got {value}", field=f"--{name.replace('_', '-')}")
    if args.budget_flops is not None and args.n_parameters is None:
        raise InputError("a FLOPs budget needs --n-parameters", field="--budget-flops")
    return Budget(max_examples=args.budget_examples, max_tokens=args.budget_tokens, max_flops=args.budget_flops)


def format_result(result: SweepResult) -> str:
    """One line per checkpoint, the order among them, and the total saving."""
    truth = result.truth
    lines = [f"{'checkpoint':<40} {'rank':>4} {'interval':>10} {'tier':>5} {'status':<20} {'examples':>8} {'saving':>7}"
             + (f" {'full-data':>9}" if truth else "")]
    for c in sorted(result.checkpoints, key=lambda c: (c.rank or 10**9, c.model_id)):
        lines.append(f"{c.model_id:<40} {c.rank or '-':>4} {str(list(c.interval)):>10} {c.tier or '-':>5} {c.status:<20} "
                     f"{c.n_examples:>8} {c.saving:>6.1f}x" + (f" {truth.get(c.model_id, '-'):>9}" if truth else ""))
    lines.append(f"total: {result.n_examples} examples of {result.full_examples} for full runs of all "
                 f"{len(result.checkpoints)} (total saving {result.saving:.1f}x, median {result.median_saving:.1f}x), "
                 f"{result.n_rounds} rounds"
                 + (f"; {result.n_computed} computed now, the rest from the store" if result.n_computed < result.n_examples else ""))
    if result.order:
        lines.append("order among the checkpoints: " + ", ".join(
            f"{o.rank}. {o.model_id} [{o.interval[0]}, {o.interval[1]}]" for o in result.order))
    return "\n".join(lines)


def _is_live(specs: list[str]) -> bool:
    """Whether the specs are live ones; a mix of replay and live specs is refused."""
    replay = [s.startswith("replay:") for s in specs]
    if any(replay) and not all(replay):
        raise InputError("one sweep takes replay:MODEL_ID specs or live specs, not both", field="--models",
                         allowed=_SPECS)
    return not any(replay)


def run(args: argparse.Namespace) -> int:
    budget = _budget(args)
    plan = load_tier_plan(args.tiers)
    if args.backtest is None:
        specs = _read_specs(args, None)
        if _is_live(specs):
            return run_live(args, specs, budget, plan)
    for name in ("task_dir", "dtype"):
        if getattr(args, name) is not None:
            raise InputError("applies to live specs only", field=f"--{name.replace('_', '-')}")
    args.seed = 0 if args.seed is None else args.seed
    full = restrict(load_reference(args.reference, missing=args.missing), args.datasets)
    model_ids = _parse_specs(_read_specs(args, full), full)
    pool = full
    for model_id in model_ids:
        pool = pool.without(model_id)
    out = run_folder(args.output, full)
    check_token_budget(full, budget)
    config = {"store_format": STORE_FORMAT, "reference": full.name, "datasets": list(full.dataset_names), "models": model_ids, "plan": plan.name,
              "seed": args.seed, "aggregate": args.aggregate, "missing": args.missing, "low_rank": args.low_rank,
              "budget": [args.budget_examples, args.budget_tokens, args.budget_flops], "n_parameters": args.n_parameters}
    store = open_run_folder(out, config)
    n_params = None if args.n_parameters is None else int(args.n_parameters)
    scorers = {m: StoredScorer(ReplayScorer(full, m, n_parameters=n_params), store, m) for m in model_ids}
    print(f"sweeping {len(model_ids)} checkpoints on {full.name} ({pool.n_models} reference models, plan {plan.name}, "
          f"budget {budget.max_examples or budget.max_tokens or budget.max_flops}); results store {out / STORE_FILE}"
          + (f" ({len(store)} scores already stored: resuming)" if len(store) else ""))
    start = time.perf_counter()
    result = sweep(pool, scorers, plan, budget=budget, seed=args.seed, aggregate=args.aggregate,
                   low_rank=args.low_rank, n_parameters=n_params)
    result = replace(result, truth=truth_ranks(full, pool, model_ids, args.aggregate))
    print(format_result(result))
    separate = separate_placements(full, pool, model_ids, plan, seed=args.seed, aggregate=args.aggregate)
    print(f"backtest: placing the {len(model_ids)} checkpoints one by one with `place` would spend {separate} examples "
          f"({separate / max(result.n_examples, 1):.2f}x the sweep)")
    path = write_record(out / RECORD_FILE, kind="sweep", payload=build_payload(result, full, pool, args.aggregate, separate))
    print(f"{time.perf_counter() - start:.1f} s; record: {path}")
    return 0


def _parse_live(specs: list[str]) -> tuple[NamedModel, ...]:
    models = parse_named_models(specs, field="--models")
    slugs = [slug(m.model_id) for m in models]
    clash = sorted({m.model_id for m, s in zip(models, slugs) if slugs.count(s) > 1})
    if clash:
        raise InputError(f"checkpoint names {clash} map to the same store folder; rename them with NAME=SPEC",
                         field="--models")
    check_model_files(models, field="--models")
    return models


def run_live(args: argparse.Namespace, specs: list[str], budget: Budget, plan: TierPlan) -> int:
    """Sweep live checkpoints against a built reference (the arguments of ``flasheval sweep``).

    Each model is loaded when a round first asks it for examples and unloaded, least recently
    used first, to keep at most ``--max-loaded`` in memory; each has its own request store
    folder under the run folder (``models/<name>/``), and the sweep's example store
    (``scores.jsonl``) serves finished examples on a rerun. Under ``accelerate launch`` every
    process runs the same rounds; only the main process writes the run folder and prints.
    """
    if args.max_loaded < 1:
        raise InputError(f"must be >= 1, got {args.max_loaded}", field="--max-loaded")
    models = _parse_live(specs)
    loaded = load_reference(args.reference, missing=args.missing)
    if is_lmeval_reference(loaded):
        from flasheval.cli._lmeval_sweep import run_lmeval_sweep

        return run_lmeval_sweep(args, models, loaded, budget, plan, format_result=format_result)
    setup = prepare_live(loaded, seed=args.seed, dtype=args.dtype, task_dir=args.task_dir)
    full = restrict(setup.reference, args.datasets)
    pool, held = hold_out(full, [m.model_id for m in models])
    check_token_budget(full, budget)
    out = run_folder(args.output, full)
    config = {"store_format": STORE_FORMAT, "reference": full.name, "datasets": list(full.dataset_names),
              "models": [f"{m.model_id}={m.text}" for m in models], "plan": plan.name, "seed": setup.seed,
              "dtype": setup.dtype, "aggregate": args.aggregate, "missing": args.missing, "low_rank": args.low_rank,
              "budget": [args.budget_examples, args.budget_tokens, args.budget_flops],
              "n_parameters": args.n_parameters}
    state = launch_state()
    store = open_run_folder(out, config, state)
    is_main = state is None or state.is_main_process
    if is_main:
        print(f"sweeping {len(models)} live checkpoints ({setup.dtype}, at most {args.max_loaded} in memory"
              f"{', held out of the pool: ' + ', '.join(held) if held else ''}) on {full.name} ({pool.n_models} "
              f"reference models, plan {plan.name}, budget {budget.max_examples or budget.max_tokens or budget.max_flops})"
              f"; results store {out / STORE_FILE}" + (f" ({len(store)} scores already stored: resuming)" if len(store) else ""))
    start = time.perf_counter()
    n_params = None if args.n_parameters is None else int(args.n_parameters)
    with CheckpointPool(models, out, setup, device=args.device, batch_size=args.batch_size,
                        max_loaded=args.max_loaded, state=state) as checkpoints:
        scorers = {m: StoredScorer(live, store, m) for m, live in checkpoints.scorers.items()}
        result = sweep(pool, scorers, plan, budget=budget, seed=setup.seed, aggregate=args.aggregate,
                       low_rank=args.low_rank, n_parameters=n_params)
    if is_main:
        print(format_result(result))
        payload = build_payload(result, full, pool, args.aggregate)
        payload["live"] = {"dtype": setup.dtype, "task_dir": setup.task_dir, "max_loaded": args.max_loaded,
                           "world_size": 1 if state is None else state.num_processes,
                           "checkpoints": {m.model_id: checkpoints.checkpoint_json(m.model_id) for m in models}}
        path = write_record(out / RECORD_FILE, kind="sweep", payload=payload)
        print(f"{time.perf_counter() - start:.1f} s; record: {path}")
    shutdown(state)  # not after a failure: the others may be stuck in another collective; the launcher ends them
    return 0
