"""``flasheval place`` for a live model on an lm-eval reference (called by :mod:`flasheval.cli.place`).

The reference's lm-eval settings are checked first (:func:`flasheval.reference.lmeval_live.prepare_lmeval_live`:
installed lm-eval version, task configs and few-shot settings; a mismatch is refused in one
line), then the model is loaded behind a results store in the output folder and each stage's new
doc ids are scored through lm-eval's task code (:class:`flasheval.placement.lmeval_scorer.LmEvalScorer`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flasheval.engine.specs import NamedModel
from flasheval.lmeval import require_lm_eval
from flasheval.placement.controller import Budget, PlacementResult, place
from flasheval.placement.tiers import TierPlan, load_tier_plan
from flasheval.records import slug
from flasheval.reference import ReferenceLeaderboard
from flasheval.reference.lmeval_live import prepare_lmeval_live

__all__ = ["run_lmeval_live"]


def run_lmeval_live(args: argparse.Namespace, model: NamedModel, reference: ReferenceLeaderboard, *,
                    report: Callable[[PlacementResult, TierPlan, Path, dict[str, Any]], int]) -> int:
    """Place ``model`` (live) on the lm-eval reference ``reference``; returns the exit code.

    ``report`` prints and records the result (``flasheval.cli.place.report_live``, passed in
    because that module imports this one).
    """
    require_lm_eval()
    from flasheval.lmeval.loading import open_lmeval_model
    from flasheval.placement.lmeval_scorer import LmEvalScorer

    setup = prepare_lmeval_live(reference, include_path=args.include_path, num_fewshot=args.num_fewshot)
    if model.model_id in reference.model_ids:
        print(f"{model.model_id} is in reference {reference.name}: held out of the pool")
        reference = reference.without(model.model_id)
    plan = load_tier_plan(args.tiers)
    out = Path(args.output or Path("runs") / f"place-{slug(reference.name)}-{slug(model.model_id)}")
    dtype = args.dtype or "float32"
    start = time.perf_counter()
    opened = open_lmeval_model(model, out / "store", dtype=dtype, device=args.device, batch_size=args.batch_size)
    load_seconds = time.perf_counter() - start
    n_params = int(args.n_parameters) if args.n_parameters is not None else opened.n_parameters
    scorer = LmEvalScorer(opened.lm, setup.settings, include_path=setup.include_path, n_parameters=n_params)
    budget = Budget(max_examples=args.max_examples, max_tokens=args.max_tokens, max_flops=args.max_flops)
    print(f"placing {model.model_id} (live through lm-eval {setup.settings.lm_eval_version} tasks, {dtype}, loaded in "
          f"{load_seconds:.0f} s) on {reference.name} with plan {plan.name}:")
    try:
        result = place(reference, scorer, plan, model_id=model.model_id, seed=args.seed or 0, budget=budget,
                       aggregate=args.aggregate)
    finally:
        opened.close()
    return report(result, plan, out, {
        "engine": "lm-eval", "spec": model.text, "fingerprint": opened.cached.fingerprint, "dtype": dtype,
        "include_path": setup.include_path, "lm_eval_version": setup.settings.lm_eval_version,
        "load_seconds": load_seconds, "seconds": time.perf_counter() - start,
        "requests_computed": opened.cached.n_computed, "asked": scorer.asked_json(),
        "examples": [{"task_name": t, "example_id": i, "score": s} for t, i, s in scorer.scored],
    })
