"""``flasheval place`` for a model that runs now (``gguf:FILE`` / ``hf:PATH_OR_ID``).

Registered through :mod:`flasheval.commands.place`. The reference must be one built by
``flasheval reference build``: the model is scored with the reference's seed, prompt settings,
task files and dtype (each checked; a mismatch is refused in one line), through a results
store in the output folder, by :class:`flasheval.live.LiveScorer`.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from flasheval.controller import Budget, place
from flasheval.errors import InputError
from flasheval.live import LiveScorer, LiveTask, load_live_tasks
from flasheval.records import write_record
from flasheval.reference import ReferenceLeaderboard, load_reference
from flasheval.reference_build import (
    BuildSettings,
    check_model_files,
    check_prompts,
    check_task_files,
    n_parameters,
    open_cached_backend,
    parse_named_models,
)
from flasheval.tiers import load_tier_plan

__all__ = ["run_live", "check_live_settings", "prepare_live", "LiveSetup", "slug"]


def check_live_settings(settings: BuildSettings, *, seed: int | None, dtype: str | None, where: str) -> tuple[int, str]:
    """The seed and dtype to use: the reference's; an explicit different value is refused."""
    if seed is not None and seed != settings.seed:
        raise InputError(f"reference {where!r} was built with seed {settings.seed}; placing with seed {seed} would "
                         "change the few-shot sets and the example order (omit --seed)", field="--seed")
    if dtype is not None and dtype != settings.dtype:
        raise InputError(f"reference {where!r} was built in {settings.dtype}; placing in {dtype} would not be "
                         "comparable (omit --dtype)", field="--dtype")
    return settings.seed, settings.dtype


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveSetup:
    """What scoring live models against a built reference needs, checked against the reference."""

    reference: ReferenceLeaderboard
    settings: BuildSettings
    """The reference's build settings."""
    seed: int
    """The reference's seed (few-shot sets and example order)."""
    dtype: str
    """The reference's dtype."""
    task_dir: str
    tasks: tuple[LiveTask, ...]
    """The reference's tasks, loaded from ``task_dir`` (files and prompts checked)."""


def prepare_live(reference: ReferenceLeaderboard, *, seed: int | None, dtype: str | None,
                 task_dir: str | None) -> LiveSetup:
    """Check that live models can be scored against ``reference`` as it was built; refuse in one line.

    The reference must come from ``flasheval reference build``; ``seed``/``dtype`` (``None``: the
    reference's) must equal its own; the task files in ``task_dir`` (``None``: the folder it was
    built from) must hash as they did and rebuild the same prompts.
    """
    settings = BuildSettings.from_json(reference.manifest.build, where=reference.name)
    seed, dtype = check_live_settings(settings, seed=seed, dtype=dtype, where=reference.name)
    task_dir = task_dir or settings.task_dir
    if not task_dir:
        raise InputError("the reference records no task directory; pass --task-dir", field="--task-dir")
    tasks = load_live_tasks(reference.dataset_names, task_dir)
    check_task_files(settings, tasks, where=reference.name)
    check_prompts(settings, tasks, dict(zip(reference.dataset_names, reference.example_ids)), where=reference.name)
    return LiveSetup(reference=reference, settings=settings, seed=seed, dtype=dtype, task_dir=str(task_dir),
                     tasks=tuple(tasks))


def run_live(args: argparse.Namespace) -> int:
    from flasheval.commands.place import format_summary

    model = parse_named_models([args.model], field="--model")[0]
    check_model_files([model], field="--model")
    setup = prepare_live(load_reference(args.reference, missing=args.missing), seed=args.seed, dtype=args.dtype,
                         task_dir=args.task_dir)
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
    if int(os.environ.get("RANK", "0")) != 0:
        return 0  # under accelerate launch only the main process reports
    for stage in result.stages:
        print(f"  {stage.log_line(len(plan.stages))}")
    payload = result.to_json()
    payload["live"] = {
        "spec": model.text, "fingerprint": cached.fingerprint, "dtype": dtype, "task_dir": str(task_dir),
        "load_seconds": load_seconds, "seconds": time.perf_counter() - start, "requests_computed": cached.n_computed,
        "asked": [{"task_name": t, "example_ids": list(ids)} for t, ids in scorer.requests],
        "examples": [o.to_json() for o in scorer.outcomes],
    }
    path = write_record(out / "place.json", kind="place", payload=payload)
    print(format_summary(result))
    print(f"  wall time {payload['live']['seconds']:.0f} s (model load {load_seconds:.0f} s); record: {path}")
    return 0
