"""``flasheval sweep``: place many checkpoints at once under one budget (racing, resumable).

Model specs are those of ``place``: ``replay:MODEL_ID`` replays a model recorded in the
reference; every replayed checkpoint is held out of the pool, and its full-data rank among the
pool is reported beside its placement (a backtest). ``--backtest N`` sweeps N reference
models spread evenly over the full-data ranking. Live specs ``[NAME=]gguf:FILE`` /
``[NAME=]hf:PATH_OR_ID`` run the models now against a reference built by ``flasheval reference
build`` (:mod:`flasheval.commands._sweep_live`); one sweep takes replay or live specs, not both.
The run folder holds ``sweep-config.json`` (the settings), ``scores.jsonl`` (the results store)
and ``sweep.json`` (the record); rerunning the same command after a crash resumes from the store.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from flasheval.backends.replay import ReplayScorer
from flasheval.controller import Budget
from flasheval.errors import InputError, UnknownNameError
from flasheval.records import atomic_write_text, write_record
from flasheval.reference import MISSING_POLICIES, ReferenceLeaderboard, load_reference
from flasheval.stats.ranking import AGGREGATES, rank_among
from flasheval.sweep import SweepResult, sweep
from flasheval.sweep_store import ResultsStore, StoredScorer
from flasheval.tiers import load_tier_plan

__all__ = ["register", "run", "format_result", "spread_models", "restrict", "check_config", "check_token_budget",
           "run_folder", "build_payload"]

CONFIG_FILE = "sweep-config.json"
STORE_FILE = "scores.jsonl"
STORE_FORMAT = 1
"""Version of the run folder layout (config + results store); a folder of another version is refused."""
RECORD_FILE = "sweep.json"
_SPECS = ("replay:MODEL_ID", "[NAME=]gguf:FILE", "[NAME=]hf:PATH_OR_ID")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sweep", help="place many checkpoints at once under one budget (resumable)")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--models", nargs="+", metavar="SPEC",
                       help="checkpoint specs: replay:MODEL_ID, or live [NAME=]gguf:FILE / [NAME=]hf:PATH_OR_ID "
                            "(all live models are loaded up front and held in memory together)")
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
    parser.add_argument("--task-dir", help="live: task files (default: the folder the reference was built from)")
    parser.add_argument("--dtype", help="live: default and only accepted value: the reference's")
    parser.add_argument("--device", default="auto", help="live: auto, cpu, cuda, cuda:N (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32, help="live: continuations per forward pass")
    parser.set_defaults(func=run)


def spread_models(reference: ReferenceLeaderboard, n: int) -> list[str]:
    """``n`` reference models spread evenly over the full-data ranking (best and worst included).

    Examples
    --------
    >>> from flasheval.reference import load_reference
    >>> spread_models(load_reference("helm_lite"), 2)[0]
    'anthropic/claude-3-5-sonnet-20240620'
    """
    if not 1 <= n <= reference.n_models - 2:
        raise InputError(f"--backtest needs 1 to {reference.n_models - 2} models (2 must stay in the pool), got {n}",
                         field="--backtest")
    ranking = [r.model_id for r in reference.ranking()]
    picks = np.unique(np.round(np.linspace(0, len(ranking) - 1, n)).astype(int))
    return [ranking[i] for i in picks]


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


def restrict(reference: ReferenceLeaderboard, datasets: list[str] | None) -> ReferenceLeaderboard:
    if not datasets:
        return reference
    from dataclasses import replace

    keep = []
    for name in datasets:
        if name not in reference.dataset_names:
            raise UnknownNameError(f"dataset in reference {reference.name!r}", name, reference.dataset_names,
                                   field="--datasets")
        keep.append(reference.dataset_names.index(name))
    return replace(reference, dataset_names=tuple(reference.dataset_names[i] for i in keep),
                   example_ids=tuple(reference.example_ids[i] for i in keep),
                   scores=tuple(reference.scores[i] for i in keep), n_tokens=tuple(reference.n_tokens[i] for i in keep))


def check_config(out: Path, config: dict[str, Any]) -> None:
    """Write the settings on a fresh run; on a resume refuse different settings in one line."""
    path = out / CONFIG_FILE
    if not path.exists():
        if (out / STORE_FILE).exists():
            raise InputError(f"results store without {CONFIG_FILE}; use a new --output", path=out / STORE_FILE)
        atomic_write_text(path, json.dumps(config, indent=2, sort_keys=True) + "\n")
        return
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc})", path=path) from None
    if not isinstance(saved, dict) or saved.get("store_format") != STORE_FORMAT:
        found = saved.get("store_format") if isinstance(saved, dict) else None
        raise InputError(f"run folder from an incompatible flasheval (sweep store format {found!r}, this flasheval "
                         f"reads {STORE_FORMAT}); use a new --output", path=path, field="store_format")
    for key in sorted(set(config) | set(saved)):
        if saved.get(key) != config.get(key):
            raise InputError(f"this run folder holds a sweep with other settings ({saved.get(key)!r} here, "
                             f"{config.get(key)!r} now); rerun with the same arguments to resume, or use a new --output",
                             path=path, field=key)


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


def _truth(full: ReferenceLeaderboard, pool: ReferenceLeaderboard, model_ids: list[str], aggregate: str | None) -> dict[str, int]:
    values, pool_values = full.aggregate_values(aggregate), pool.aggregate_values(aggregate)
    direction = full.ranking_higher_is_better(aggregate)
    return {m: int(math.floor(float(rank_among(values[full.index(m)], pool_values, higher_is_better=direction)) + 0.5))
            for m in model_ids}


def format_result(result: SweepResult) -> str:
    """One line per checkpoint, the order among them, and the total saving."""
    truth = result.truth
    lines = [f"{'checkpoint':<40} {'rank':>4} {'interval':>10} {'tier':>5} {'status':<20} {'examples':>8} {'saving':>7}"
             + (f" {'full-data':>9}" if truth else "")]
    for c in sorted(result.checkpoints, key=lambda c: (c.rank or 10**9, c.model_id)):
        lines.append(f"{c.model_id:<40} {c.rank or '-':>4} {str(list(c.interval)):>10} {c.tier or '-':>5} {c.status:<20} "
                     f"{c.n_examples:>8} {c.saving:>6.1f}x" + (f" {truth.get(c.model_id, '-'):>9}" if truth else ""))
    lines.append(f"total: {result.n_examples} examples of {result.full_examples} for full runs of all "
                 f"{len(result.checkpoints)} ({result.saving:.1f}x saving), {result.n_rounds} rounds"
                 + (f"; {result.n_computed} computed now, the rest from the store" if result.n_computed < result.n_examples else ""))
    if result.order:
        lines.append("order among the checkpoints: " + ", ".join(
            f"{o.rank}. {o.model_id} [{o.interval[0]}, {o.interval[1]}]" for o in result.order))
    return "\n".join(lines)


def run_folder(args: argparse.Namespace, reference: ReferenceLeaderboard) -> Path:
    """``--output``, or ``runs/sweep-<reference>/``."""
    return Path(args.output or Path("runs") / f"sweep-{re.sub(r'[^A-Za-z0-9._-]+', '-', reference.name)}")


def check_token_budget(reference: ReferenceLeaderboard, budget: Budget) -> None:
    """Refuse a token or FLOPs budget on a reference without token counts."""
    if budget.max_tokens is not None or budget.max_flops is not None:
        if any(t is None for t in reference.n_tokens):
            raise InputError(f"reference {reference.name!r} records no token counts, so a token or FLOPs budget "
                             "cannot be checked; use --budget-examples", field="--budget-tokens")


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
            from flasheval.commands._sweep_live import run_live

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
    out = run_folder(args, full)
    check_token_budget(full, budget)
    config = {"store_format": STORE_FORMAT, "reference": full.name, "datasets": list(full.dataset_names), "models": model_ids, "plan": plan.name,
              "seed": args.seed, "aggregate": args.aggregate, "missing": args.missing, "low_rank": args.low_rank,
              "budget": [args.budget_examples, args.budget_tokens, args.budget_flops], "n_parameters": args.n_parameters}
    check_config(out, config)
    store = ResultsStore(out / STORE_FILE)
    n_params = None if args.n_parameters is None else int(args.n_parameters)
    scorers = {m: StoredScorer(ReplayScorer(full, m, n_parameters=n_params), store, m) for m in model_ids}
    print(f"sweeping {len(model_ids)} checkpoints on {full.name} ({pool.n_models} reference models, plan {plan.name}, "
          f"budget {budget.max_examples or budget.max_tokens or budget.max_flops}); results store {out / STORE_FILE}"
          + (f" ({len(store)} scores already stored: resuming)" if len(store) else ""))
    start = time.perf_counter()
    result = sweep(pool, scorers, plan, budget=budget, seed=args.seed, aggregate=args.aggregate,
                   low_rank=args.low_rank, n_parameters=n_params)
    from dataclasses import replace

    result = replace(result, truth=_truth(full, pool, model_ids, args.aggregate))
    print(format_result(result))
    separate = _separate_placements(full, pool, model_ids, plan, args)
    print(f"backtest: placing the {len(model_ids)} checkpoints one by one with `place` would spend {separate} examples "
          f"({separate / max(result.n_examples, 1):.2f}x the sweep)")
    path = write_record(out / RECORD_FILE, kind="sweep", payload=build_payload(result, full, pool, args.aggregate, separate))
    print(f"{time.perf_counter() - start:.1f} s; record: {path}")
    return 0


def _separate_placements(full: ReferenceLeaderboard, pool: ReferenceLeaderboard, model_ids: list[str], plan: Any,
                         args: argparse.Namespace) -> int:
    """Examples that independent ``place`` runs of the replayed checkpoints spend (no budget, no racing)."""
    from flasheval.controller import place

    return sum(place(pool, ReplayScorer(full, m), plan, model_id=m, seed=args.seed, aggregate=args.aggregate)
               .compute.n_examples for m in model_ids)


def build_payload(result: SweepResult, full: ReferenceLeaderboard, pool: ReferenceLeaderboard, aggregate: str | None,
             separate: int | None = None) -> dict[str, Any]:
    payload = result.to_json()
    payload["leaderboard"] = [{"model_id": r.model_id, "value": r.value} for r in pool.ranking(aggregate)]
    truth = result.truth
    if truth:
        rows = [c for c in result.checkpoints if c.rank is not None]
        plan_ok = [abs(c.rank - truth[c.model_id]) <= (c.resolution or 0) for c in rows if c.status == "resolved"]
        payload["backtest"] = {
            "covered": float(np.mean([c.interval[0] <= truth[c.model_id] <= c.interval[1] for c in rows])),
            "resolved_within_resolution": float(np.mean(plan_ok)) if plan_ok else None,
            "n_resolved": len(plan_ok),
            "separate_placements_examples": separate,
        }
        if result.order:
            from flasheval.stats.dior import kendall_tau_b

            placed = np.array([-o.value for o in result.order])
            true = np.array([float(truth[o.model_id]) for o in result.order])
            payload["backtest"]["order_kendall_tau"] = float(kendall_tau_b(true, placed[None, :])[0])
    return payload
