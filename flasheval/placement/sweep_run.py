"""A sweep's run folder and what a sweep run reports around the racing loop of :mod:`flasheval.placement.sweep`.

A run folder holds ``sweep-config.json`` (the settings, :func:`check_config`), ``scores.jsonl``
(the results store, :class:`~flasheval.placement.sweep_store.ResultsStore`) and ``sweep.json``
(the record, :func:`build_payload`); rerunning the same command after a crash resumes from the
store, and other settings in the same folder are refused in one line. Replay sweeps are
backtests: :func:`truth_ranks` gives each held-out checkpoint's full-data rank and
:func:`separate_placements` the cost of placing them one by one. Live sweeps open every
checkpoint behind its own request store (:class:`~flasheval.placement.sweep_models.CheckpointPool`).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from flasheval.engine.distributed import main_decides
from flasheval.errors import InputError, UnknownNameError
from flasheval.placement.controller import place, plan_looks
from flasheval.placement.replay import ReplayScorer
from flasheval.placement.results import Budget
from flasheval.placement.sweep import SweepResult
from flasheval.placement.sweep_store import ResultsStore
from flasheval.placement.tiers import TierPlan
from flasheval.records import atomic_write_text, slug
from flasheval.reference.leaderboard import ReferenceLeaderboard
from flasheval.stats.dior import kendall_tau_b
from flasheval.stats.ranking import rank_among

__all__ = ["CONFIG_FILE", "STORE_FILE", "STORE_FORMAT", "RECORD_FILE", "MODELS_DIR", "spread_models", "restrict",
           "check_config", "check_token_budget", "run_folder", "truth_ranks", "separate_placements", "build_payload",
           "open_run_folder", "hold_out"]

CONFIG_FILE = "sweep-config.json"
STORE_FILE = "scores.jsonl"
STORE_FORMAT = 1
"""Version of the run folder layout (config + results store); a folder of another version is refused."""
RECORD_FILE = "sweep.json"
MODELS_DIR = "models"
"""Folder of the run folder that holds one request store per live checkpoint."""


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


def restrict(reference: ReferenceLeaderboard, datasets: list[str] | None) -> ReferenceLeaderboard:
    """``reference`` with only ``datasets`` (in that order; all when ``None``); an unknown name is refused."""
    if not datasets:
        return reference
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


def check_token_budget(reference: ReferenceLeaderboard, budget: Budget) -> None:
    """Refuse a token or FLOPs budget on a reference without token counts."""
    if budget.max_tokens is not None or budget.max_flops is not None:
        if any(t is None for t in reference.n_tokens):
            raise InputError(f"reference {reference.name!r} records no token counts, so a token or FLOPs budget "
                             "cannot be checked; use --budget-examples",
                             field="--budget-tokens" if budget.max_tokens is not None else "--budget-flops")


def run_folder(output: str | None, reference: ReferenceLeaderboard) -> Path:
    """``output`` (``--output``), or ``runs/sweep-<reference>/``."""
    return Path(output or Path("runs") / f"sweep-{slug(reference.name)}")


def truth_ranks(full: ReferenceLeaderboard, pool: ReferenceLeaderboard, model_ids: list[str],
                aggregate: str | None) -> dict[str, int]:
    """Each held-out checkpoint's full-data rank among ``pool`` (the answer a replay sweep estimates)."""
    values, pool_values = full.aggregate_values(aggregate), pool.aggregate_values(aggregate)
    direction = full.ranking_higher_is_better(aggregate)
    return {m: int(math.floor(float(rank_among(values[full.index(m)], pool_values, higher_is_better=direction)) + 0.5))
            for m in model_ids}


def separate_placements(full: ReferenceLeaderboard, pool: ReferenceLeaderboard, model_ids: list[str], plan: TierPlan,
                        *, seed: int, aggregate: str | None) -> int:
    """Examples that independent ``place`` runs of the replayed checkpoints spend (no budget, no racing);
    they share one pool, so its looks are computed once."""
    looks = plan_looks(pool, plan, aggregate=aggregate)
    return sum(place(pool, ReplayScorer(full, m), plan, model_id=m, seed=seed, aggregate=aggregate, looks=looks)
               .compute.n_examples for m in model_ids)


def build_payload(result: SweepResult, full: ReferenceLeaderboard, pool: ReferenceLeaderboard, aggregate: str | None,
                  separate: int | None = None) -> dict[str, Any]:
    """The sweep record's payload: the result, the pool's leaderboard and, for a backtest, how it did."""
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
            placed = np.array([-o.value for o in result.order])
            true = np.array([float(truth[o.model_id]) for o in result.order])
            payload["backtest"]["order_kendall_tau"] = float(kendall_tau_b(true, placed[None, :])[0])
    return payload


def open_run_folder(out: Path, config: dict[str, Any], state: Any = None) -> ResultsStore:
    """Check the run folder's settings (:func:`check_config`) and open its results store.

    Under ``accelerate launch`` (``state`` of several processes) only the main process reads and
    writes the folder: it checks the settings and loads the store, and hands the other processes
    its verdict and the stored scores (their copies never touch a file), so every process runs
    the same rounds even without a shared filesystem.
    """
    opened: list[ResultsStore] = []

    def read() -> dict[tuple[str, str, str], tuple[float, int | None]]:
        check_config(out, config)
        opened.append(ResultsStore(out / STORE_FILE))
        return opened[0].rows

    rows = main_decides(state, read, what="reading the sweep's run folder")
    return opened[0] if opened else ResultsStore(out / STORE_FILE, writer=False, rows=rows)


def hold_out(full: ReferenceLeaderboard, model_ids: list[str]) -> tuple[ReferenceLeaderboard, list[str]]:
    """The pool without the swept checkpoints that are reference models, and those checkpoints.

    A sweep compares every checkpoint with the same pool, so a checkpoint that is also a
    reference model leaves it; at least 2 reference models must remain (one line otherwise).
    """
    held = [m for m in model_ids if m in full.model_ids]
    pool = full.without(*held) if held else full
    if pool.n_models < 2:
        raise InputError(f"holding out {len(held)} checkpoints leaves fewer than 2 reference models", field="--models")
    return pool, held
