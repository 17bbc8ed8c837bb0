"""``flasheval.backtest``: leave reference models out, place them, compare with their full-data ranks.

The one path behind ``flasheval backtest``: each reference model is replayed against the others
(leave-one-out), or K models spread over the ranking are held out together and each replayed
against the rest (``held_out=K``, for large pools), under each method (the adaptive plan, and the
baselines it is compared with), for one seed or several; the figures of several seeds are given
for every seed, never only the best.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.api.progress import ProgressCallback, Reporter, check_progress
from flasheval.api.resolve import (check_plan_arg, check_pool_options, check_reference_arg, resolve_plan,
                                   resolve_reference)
from flasheval.errors import InputError
from flasheval.analysis.backtest import (ALL_METHODS, MAX_SEEDS, METHODS, BacktestResult, BacktestRow, SeedSummary, held_out_models,
                                          summarize_seeds)
from flasheval.analysis.backtest import backtest as run_backtest
from flasheval.checks import check_count, check_flag, check_output, check_seed, name_list
from flasheval.records.run_record import prepare_output, write_record

__all__ = ["BacktestRun", "backtest"]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class BacktestRun:
    """What :func:`backtest` returns."""

    results: tuple[BacktestResult, ...]
    """One per seed, in the order given: per method, every model's row and the summary."""
    seeds: tuple[int, ...]
    seconds: tuple[float, ...]
    """Wall seconds of each seed."""
    over_seeds: tuple[SeedSummary, ...] = ()
    """Several seeds: per method, every seed's figures (with their mean and minimum)."""
    record_path: Path | None = None

    def to_json(self) -> dict[str, Any]:
        """The record's payload (one seed: its result; several: ``{"seeds": [...]}``)."""
        return self.results[0].to_json() if len(self.results) == 1 else {"seeds": [r.to_json() for r in self.results]}


def _model_reporter(report: Reporter, seed: int, index: int, n_seeds: int) -> Any:
    """The backtest's ``on_model``: a ``model`` event per held-out model (the adaptive method's placement).

    The event's ``done``/``total`` count the held-out models of every seed (``index``: seeds before this
    one), so that they measure the whole call; the message counts within the seed."""
    last = time.perf_counter()

    def on_model(row: BacktestRow, done: int, total: int) -> None:
        nonlocal last
        now = time.perf_counter()
        where = f"seed {seed}: " if n_seeds > 1 else ""
        report("model", f"{where}model {done}/{total} {row.model_id} held out: placed {row.placed_rank} "
                        f"[{row.interval[0]}, {row.interval[1]}], full-data {row.full_rank}, {row.n_examples} examples",
               done=index * total + done, total=n_seeds * total, seconds=now - last, detail=row)
        last = now

    return on_model


def _check_backtest(reference: Any, plan: Any, *, compare_plan: Any, seeds: Any, methods: Any, aggregate: Any,
                    missing: Any, output: Any, progress: Any, held_out: Any,
                    force: Any) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Every argument of :func:`backtest` checked, nothing read or written (scipy's ``_bootstrap_iv`` shape):
    returns the seeds and the methods. What needs the reference (``held_out`` against its size, the aggregate on
    it) is checked once it is read, still before the record's folder is made."""
    check_reference_arg(reference)
    check_plan_arg(plan)
    check_plan_arg(compare_plan)
    check_pool_options(aggregate, missing)
    check_progress(progress)
    check_flag(force, field="force")
    if held_out is not None:
        check_count(held_out, field="--held-out")
    check_output(output)
    if isinstance(seeds, (int, str)) or not isinstance(seeds, Sequence) or not seeds:
        raise InputError(f"give a non-empty list of seeds, got {seeds!r}", field="--seeds")
    for seed in seeds:
        if seed is None:
            raise InputError("must be an integer >= 0, got None", field="--seed")
        check_seed(seed)
    if len(seeds) > MAX_SEEDS:
        raise InputError(f"{len(seeds)} seeds: at most {MAX_SEEDS} (each seed is a whole backtest)", field="--seeds")
    if len(set(seeds)) != len(seeds):
        raise InputError(f"a seed listed twice in {list(seeds)[:20]!r}", field="--seeds")
    if isinstance(methods, str) or not methods:
        raise InputError(f"give a non-empty list of methods, got {methods!r}", field="--methods")
    methods = name_list(list(methods) if isinstance(methods, Sequence) else methods, field="--methods",
                        what="method")
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown:
        raise InputError(f"unknown backtest method {unknown[0]!r}", field="--methods", allowed=ALL_METHODS)
    return tuple(seeds), methods


def backtest(
    reference: Any = "helm_lite",
    plan: Any = "default",
    *,
    compare_plan: Any = "flash_helm",
    seeds: Sequence[int] = (0,),
    methods: Sequence[str] = METHODS,
    aggregate: str | None = None,
    missing: str = "complete-models",
    output: str | Path | None = None,
    progress: ProgressCallback | None = None,
    held_out: int | None = None,
    force: bool = False,
) -> BacktestRun:
    """Placement of every model of ``reference`` against the others (or of ``held_out`` of them) under ``methods``.

    Parameters
    ----------
    reference
        Name, folder or :class:`~flasheval.reference.ReferenceLeaderboard`.
    plan
        The adaptive method's tier plan (name, file or :class:`~flasheval.placement.tiers.TierPlan`).
    compare_plan
        The fixed schedule of the ``flash_helm`` method (loaded only when that method runs).
    seeds
        Seeds to run (each a table; several also get per-seed figures with their mean and minimum).
    methods
        Out of :data:`flasheval.analysis.backtest.ALL_METHODS`; ``adaptive`` always runs (it sets the others' cost).
    aggregate, missing
        Aggregate over datasets (default: the reference's) and the missing-data policy.
    output
        Record file to write (``None``: none).
    progress
        Called with a :class:`~flasheval.api.progress.Progress` as every held-out model's placements finish
        (step ``model``, its adaptive :class:`~flasheval.analysis.backtest.BacktestRow` as ``detail``) and
        after every seed (step ``seed``, its :class:`~flasheval.analysis.backtest.BacktestResult`).
    held_out
        ``None``: leave-one-out (every model in turn). ``K``: K models spread over the ranking
        (:func:`~flasheval.analysis.backtest.held_out_models`, drawn per seed) leave the pool together and
        are each placed against the rest: one pool, one calibration, K placements, for pools of
        thousands; shares come with their standard errors from K.
    force
        Replace an ``output`` file that is not a backtest record, or one written with other settings (plan, seeds,
        methods, aggregate, missing-data policy, held-out count; refused without it).
    """
    seeds, methods = _check_backtest(reference, plan, compare_plan=compare_plan, seeds=seeds, methods=methods,
                                     aggregate=aggregate, missing=missing, output=output, progress=progress,
                                     held_out=held_out, force=force)  # every argument, before anything is read
    report = Reporter(progress)
    ref = resolve_reference(reference, missing=missing)
    ref.aggregate_options(aggregate)  # on this reference (centered needs its baselines), before the record's folder
    if held_out is not None:
        held_out_models(ref, held_out, seed=seeds[0], aggregate=aggregate)  # a bad K: one line, before any work
    plan_ = resolve_plan(plan)
    fixed = resolve_plan(compare_plan) if "flash_helm" in methods else None
    settings = {"reference": ref.name, "plan": plan_.name, "compare_plan": None if fixed is None else fixed.name,
                "seeds": list(seeds), "methods": list(methods), "aggregate": aggregate, "missing": missing,
                "held_out": held_out}
    if output is not None:  # a record file: its folder is checked before the seeds run
        if Path(output).is_dir():
            raise InputError("is a folder; give the record's file name (e.g. backtest.json)", path=output,
                             field="--output")
        prepare_output(Path(output).parent, record=Path(output).name, kind="backtest", force=force, settings=settings)
    results, seconds, looks = [], [], {}  # each pool's looks, computed at the first seed and reused
    design = (f"{ref.n_models} models held out in turn" if held_out is None else
              f"{held_out} models spread over the ranking held out together, each placed against the other "
              f"{ref.n_models - held_out}")
    report("start", f"backtesting plan {plan_.name} on {ref.name}: {design}, {len(seeds)} seed(s), "
                    f"methods {', '.join(methods)}")
    for done, seed in enumerate(seeds, 1):
        start = time.perf_counter()
        results.append(run_backtest(ref, plan_, fixed, seed=seed, aggregate=aggregate, methods=tuple(methods),
                                    looks=looks, on_model=_model_reporter(report, seed, done - 1, len(seeds)),
                                    held_out=held_out))
        seconds.append(time.perf_counter() - start)
        left_out = f"{ref.n_models} models left out in turn" if held_out is None else f"{held_out} models held out"
        report("seed", f"seed {seed}: {left_out} in {seconds[-1]:.0f} s", done=done,
               total=len(seeds), seconds=seconds[-1], detail=results[-1])
    run = BacktestRun(results=tuple(results), seeds=tuple(seeds), seconds=tuple(seconds),
                      over_seeds=summarize_seeds(results) if len(results) > 1 else ())
    if output is not None:
        path = write_record(Path(output), kind="backtest", payload=run.to_json(), settings=settings)
        run = BacktestRun(results=run.results, seeds=run.seeds, seconds=run.seconds, over_seeds=run.over_seeds,
                          record_path=path)
    return run
