"""``flasheval sweep`` of live checkpoints on an lm-eval reference (called by :mod:`flasheval.cli.sweep`).

The same sweep as on a built reference (:func:`flasheval.placement.sweep.sweep`, the sweep's example
store, one request store per checkpoint), with each checkpoint scored through lm-eval's task code by
an :class:`~flasheval.placement.lmeval_scorer.LmEvalScorer` after the reference's lm-eval settings
are checked (:func:`flasheval.reference.lmeval_live.prepare_lmeval_live`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

from flasheval.engine.specs import NamedModel
from flasheval.lmeval import require_lm_eval
from flasheval.placement.controller import Budget
from flasheval.placement.sweep import SweepResult, sweep
from flasheval.placement.sweep_run import (
    MODELS_DIR,
    RECORD_FILE,
    STORE_FILE,
    STORE_FORMAT,
    build_payload,
    check_config,
    check_token_budget,
    hold_out,
    restrict,
    run_folder,
)
from flasheval.placement.sweep_store import ResultsStore, StoredScorer
from flasheval.placement.tiers import TierPlan
from flasheval.records import slug, write_record
from flasheval.reference import ReferenceLeaderboard
from flasheval.reference.lmeval_live import prepare_lmeval_live

__all__ = ["run_lmeval_sweep"]


def run_lmeval_sweep(args: argparse.Namespace, models: Sequence[NamedModel], reference: ReferenceLeaderboard,
                     budget: Budget, plan: TierPlan, *, format_result: Callable[[SweepResult], str]) -> int:
    """Sweep live checkpoints on an lm-eval reference; returns the exit code."""
    require_lm_eval()
    from flasheval.lmeval.loading import open_lmeval_model
    from flasheval.placement.lmeval_scorer import LmEvalScorer

    setup = prepare_lmeval_live(reference, include_path=args.include_path, num_fewshot=args.num_fewshot)
    full = restrict(setup.reference, args.datasets)
    pool, held = hold_out(full, [m.model_id for m in models])
    check_token_budget(full, budget)
    out = run_folder(args.output, full)
    seed, dtype = args.seed or 0, args.dtype or "float32"
    check_config(out, {"store_format": STORE_FORMAT, "reference": full.name, "datasets": list(full.dataset_names),
                       "models": [f"{m.model_id}={m.text}" for m in models], "plan": plan.name, "seed": seed,
                       "dtype": dtype, "aggregate": args.aggregate, "missing": args.missing, "low_rank": args.low_rank,
                       "budget": [args.budget_examples, args.budget_tokens, args.budget_flops],
                       "n_parameters": args.n_parameters, "engine": "lm-eval"})
    store = ResultsStore(out / STORE_FILE)
    start = time.perf_counter()
    opened: list[Any] = []
    try:
        scorers = {}
        for model in models:
            opened.append(open_lmeval_model(model, out / MODELS_DIR / slug(model.model_id), dtype=dtype,
                                            device=args.device, batch_size=args.batch_size))
            live = LmEvalScorer(opened[-1].lm, setup.settings, include_path=setup.include_path,
                                n_parameters=opened[-1].n_parameters)
            scorers[model.model_id] = StoredScorer(live, store, model.model_id)
        print(f"sweeping {len(models)} live checkpoints through lm-eval {setup.settings.lm_eval_version} tasks "
              f"({dtype}, all loaded now: --max-loaded applies to DCLM-format references only) on {full.name} "
              f"({pool.n_models} reference models, plan {plan.name}); results store "
              f"{out / STORE_FILE}" + (f" ({len(store)} scores already stored: resuming)" if len(store) else ""))
        n_params = None if args.n_parameters is None else int(args.n_parameters)
        result = sweep(pool, scorers, plan, budget=budget, seed=seed, aggregate=args.aggregate,
                       low_rank=args.low_rank, n_parameters=n_params)
    finally:
        for item in opened:
            item.close()
    print(format_result(result))
    payload = build_payload(result, full, pool, args.aggregate)
    payload["live"] = {"engine": "lm-eval", "dtype": dtype, "include_path": setup.include_path,
                       "checkpoints": {m.model_id: {"spec": m.text, "fingerprint": o.cached.fingerprint,
                                                    "requests_computed": o.cached.n_computed,
                                                    "asked": s.inner.asked_json()}
                                       for m, o, s in zip(models, opened, scorers.values())}}
    path = write_record(out / RECORD_FILE, kind="sweep", payload=payload)
    print(f"{time.perf_counter() - start:.1f} s; record: {path}")
    return 0
