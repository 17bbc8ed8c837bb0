"""``flasheval sweep`` for checkpoints that run now (``[NAME=]gguf:FILE`` / ``[NAME=]hf:PATH_OR_ID``).

Registered through :mod:`flasheval.commands.sweep`. The reference must be one built by
``flasheval reference build``; it is checked as for a live ``place``
(:func:`flasheval.commands._place_live.prepare_live`). Every model is loaded once, up front, and
held in memory for the whole sweep; each gets its own request store folder under the run folder
(``models/<name>/``), and the sweep's example store (``scores.jsonl``) serves finished examples
on a rerun.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from flasheval.commands._place_live import prepare_live, slug
from flasheval.controller import Budget
from flasheval.errors import InputError
from flasheval.live import LiveScorer
from flasheval.reference import load_reference
from flasheval.reference_build import NamedModel, check_model_files, n_parameters, open_cached_backend, \
    parse_named_models
from flasheval.records import write_record
from flasheval.sweep import sweep
from flasheval.sweep_store import ResultsStore, StoredScorer

__all__ = ["run_live", "MODELS_DIR"]

MODELS_DIR = "models"
"""Folder of the run folder that holds one request store per live checkpoint."""


def _parse(specs: list[str]) -> tuple[NamedModel, ...]:
    models = parse_named_models(specs, field="--models")
    slugs = [slug(m.model_id) for m in models]
    clash = sorted({m.model_id for m, s in zip(models, slugs) if slugs.count(s) > 1})
    if clash:
        raise InputError(f"checkpoint names {clash} map to the same store folder; rename them with NAME=SPEC",
                         field="--models")
    check_model_files(models, field="--models")
    return models


def _open(models: tuple[NamedModel, ...], out: Path, store: ResultsStore, setup: Any,
          args: argparse.Namespace) -> tuple[dict[str, StoredScorer], dict[str, dict[str, Any]], list[Any]]:
    """Load every model once; returns the scorers, per-checkpoint facts and the request stores to close."""
    scorers, facts, stores = {}, {}, []
    try:
        for model in models:
            start = time.perf_counter()
            cached, request_store, backend = open_cached_backend(
                model, out / MODELS_DIR / slug(model.model_id), dtype=setup.dtype, device=args.device,
                batch_size=args.batch_size)
            stores.append(request_store)
            live = LiveScorer(cached, setup.tasks, seed=setup.seed, prefix_space=setup.settings.prefix_space,
                              n_parameters=n_parameters(backend))
            scorers[model.model_id] = StoredScorer(live, store, model.model_id)
            facts[model.model_id] = {"spec": model.text, "fingerprint": cached.fingerprint, "cached": cached,
                                     "live": live, "load_seconds": time.perf_counter() - start}
    except BaseException:
        for request_store in stores:
            request_store.close()
        raise
    return scorers, facts, stores


def _live_payload(facts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {m: {"spec": f["spec"], "fingerprint": f["fingerprint"], "load_seconds": f["load_seconds"],
                "requests_computed": f["cached"].n_computed,
                "asked": [{"task_name": t, "example_ids": list(ids)} for t, ids in f["live"].requests]}
            for m, f in facts.items()}


def run_live(args: argparse.Namespace, specs: list[str], budget: Budget, plan: Any) -> int:
    """Sweep live checkpoints against a built reference (the arguments of ``flasheval sweep``)."""
    from flasheval.commands import sweep as cmd

    models = _parse(specs)
    setup = prepare_live(load_reference(args.reference, missing=args.missing), seed=args.seed, dtype=args.dtype,
                         task_dir=args.task_dir)
    full = cmd.restrict(setup.reference, args.datasets)
    held = [m.model_id for m in models if m.model_id in full.model_ids]
    pool = full
    for model_id in held:
        pool = pool.without(model_id)
    if pool.n_models < 2:
        raise InputError(f"holding out {len(held)} checkpoints leaves fewer than 2 reference models", field="--models")
    cmd.check_token_budget(full, budget)
    out = cmd.run_folder(args, full)
    config = {"store_format": cmd.STORE_FORMAT, "reference": full.name, "datasets": list(full.dataset_names),
              "models": [f"{m.model_id}={m.text}" for m in models], "plan": plan.name, "seed": setup.seed,
              "dtype": setup.dtype, "aggregate": args.aggregate, "missing": args.missing, "low_rank": args.low_rank,
              "budget": [args.budget_examples, args.budget_tokens, args.budget_flops],
              "n_parameters": args.n_parameters}
    cmd.check_config(out, config)
    store = ResultsStore(out / cmd.STORE_FILE)
    start = time.perf_counter()
    scorers, facts, stores = _open(models, out, store, setup, args)
    print(f"sweeping {len(models)} live checkpoints ({setup.dtype}, all loaded in {time.perf_counter() - start:.0f} s"
          f"{', held out of the pool: ' + ', '.join(held) if held else ''}) on {full.name} ({pool.n_models} reference "
          f"models, plan {plan.name}, budget {budget.max_examples or budget.max_tokens or budget.max_flops}); results "
          f"store {out / cmd.STORE_FILE}" + (f" ({len(store)} scores already stored: resuming)" if len(store) else ""))
    n_params = None if args.n_parameters is None else int(args.n_parameters)
    try:
        result = sweep(pool, scorers, plan, budget=budget, seed=setup.seed, aggregate=args.aggregate,
                       low_rank=args.low_rank, n_parameters=n_params)
    finally:
        for request_store in stores:
            request_store.close()
    print(cmd.format_result(result))
    payload = cmd.build_payload(result, full, pool, args.aggregate)
    payload["live"] = {"dtype": setup.dtype, "task_dir": setup.task_dir, "checkpoints": _live_payload(facts)}
    path = write_record(out / cmd.RECORD_FILE, kind="sweep", payload=payload)
    print(f"{time.perf_counter() - start:.1f} s; record: {path}")
    return 0
