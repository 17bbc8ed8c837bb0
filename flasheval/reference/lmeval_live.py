"""lm-eval references: build one by scoring models on lm-eval tasks, and check that a live run
reproduces one.

A reference whose manifest ``build`` dict is :class:`~flasheval.lmeval.settings.LmEvalSettings`
(kind ``lm-eval``) comes from ``reference import --format lm-eval-samples`` (lm-eval's own logs,
any backend) or from :func:`build_lmeval_reference` (``reference build --engine lm-eval``: every
model through flasheval's engine behind lm-eval's task code, resumable through the results
store). :func:`prepare_lmeval_live` is the one check before a live placement on it: the installed
lm-eval version, every task's config (digest) and few-shot setting must equal the reference's,
or it refuses in one line.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from flasheval.engine.device_map import DeviceMap
from flasheval.engine.specs import NamedModel, check_model_files
from flasheval.errors import InputError
from flasheval.lmeval.settings import LMEVAL_KIND, LmEvalSettings, pick_metric, settings_from_results
from flasheval.reference.leaderboard import ReferenceLeaderboard
from flasheval.stats.sampling import example_order, nested_prefix

__all__ = ["is_lmeval_reference", "LmEvalLiveSetup", "prepare_lmeval_live", "LmEvalBuild", "build_lmeval_reference"]

logger = logging.getLogger(__name__)


def is_lmeval_reference(reference: ReferenceLeaderboard) -> bool:
    """Whether ``reference`` records lm-eval task settings (placed through lm-eval's task code)."""
    build = reference.manifest.build
    return bool(build) and build.get("kind") == LMEVAL_KIND


@dataclass(frozen=True, slots=True, kw_only=True)
class LmEvalLiveSetup:
    """A checked lm-eval reference, ready for live scoring."""

    reference: ReferenceLeaderboard
    settings: LmEvalSettings
    include_path: str | None
    """Where custom task YAMLs are read (``None``: installed tasks only)."""


def prepare_lmeval_live(reference: ReferenceLeaderboard, *, include_path: str | None,
                        num_fewshot: int | None = None) -> LmEvalLiveSetup:
    """Check that a live model can be scored on ``reference``'s lm-eval tasks as its models were.

    ``include_path`` defaults to the one recorded in the reference; ``num_fewshot``, when given,
    must equal every task's recorded count. The installed lm-eval version and task configs are
    compared with the reference's (:func:`flasheval.lmeval.tasks.check_installed`).
    """
    from flasheval.lmeval.tasks import check_installed

    settings = LmEvalSettings.from_json(reference.manifest.build, where=reference.name)
    missing = [d for d in reference.dataset_names if d not in settings.tasks]
    if missing:
        raise InputError(f"reference {reference.name!r} records no lm-eval settings for {', '.join(missing)}",
                         field="--reference")
    for name in reference.dataset_names:
        pinned = settings.tasks[name].num_fewshot
        if num_fewshot is not None and num_fewshot != pinned:
            raise InputError(f"reference {reference.name!r} scored {name} {pinned}-shot; placing it {num_fewshot}-shot "
                             "would not be paired (omit --num_fewshot)", field="--num_fewshot")
    include = include_path or settings.include_path or None
    used = LmEvalSettings(tasks={n: settings.tasks[n] for n in reference.dataset_names},
                          lm_eval_version=settings.lm_eval_version, include_path=settings.include_path,
                          dtype=settings.dtype)
    check_installed(used, include_path=include, where=reference.name)
    return LmEvalLiveSetup(reference=reference, settings=used, include_path=include)


@dataclass(frozen=True, slots=True, kw_only=True)
class LmEvalBuild:
    """What :func:`build_lmeval_reference` produced."""

    settings: LmEvalSettings
    frame: pd.DataFrame
    """Long table: ``model``, ``dataset``, ``example_id``, ``score``."""
    seconds: Mapping[str, float]
    computed: Mapping[str, int]
    """Per model, requests computed now (the rest came from the store)."""


def _selected_docs(task_names: Sequence[str], include_path: str | None, *, n_examples: int | None,
                   seed: int) -> dict[str, list[int]] | None:
    """Per task, the first ``n_examples`` doc ids of the seeded order (``None``: every doc)."""
    if n_examples is None:
        return None
    from flasheval.lmeval.tasks import make_task_manager

    loaded = make_task_manager(include_path).load(list(task_names))["tasks"]
    selected = {}
    for name in task_names:
        ids = [str(i) for i in range(len(loaded[name].eval_docs))]
        order = example_order(ids, seed=seed, task_name=name)
        selected[name] = sorted(int(i) for i in nested_prefix(order, n_examples))
    return selected


def build_lmeval_reference(models: Sequence[NamedModel], task_names: Sequence[str], *, include_path: str | None,
                           num_fewshot: int | None, fewshot_seed: int, n_examples: int | None, seed: int,
                           metric: str | None, dtype: str, store_dir: Path, device: str = "auto",
                           batch_size: int = 32, state: Any = None,
                           on_model: Callable[[str, int, int, float, int], None] | None = None,
                           device_map: DeviceMap | None = None) -> LmEvalBuild:
    """Score every model on the tasks' docs through lm-eval's task code and flasheval's engine.

    Every model goes through one results store (a killed build resumes); all models are scored
    on the same docs with the same settings and dtype, which the returned :class:`LmEvalSettings`
    pins. ``state`` is the launch's process state (``None`` for one process). ``on_model``: as
    :data:`flasheval.reference.build.OnModel`, called as each model is scored. ``device_map``: see
    :mod:`flasheval.engine.device_map`.
    """
    from flasheval.lmeval.loading import open_lmeval_model
    from flasheval.lmeval.model import OnlyDocsLM
    from flasheval.lmeval.tasks import example_scores, make_task_manager, run_tasks

    check_model_files(models)
    manager = make_task_manager(include_path)
    samples = _selected_docs(task_names, include_path, n_examples=n_examples, seed=seed)
    rows: list[dict[str, Any]] = []
    seconds, computed, fingerprints = {}, {}, {}
    settings: LmEvalSettings | None = None
    for model in models:
        start = time.perf_counter()
        opened = open_lmeval_model(model, store_dir, dtype=dtype, device=device, batch_size=batch_size, state=state,
                                   progress_bar=False, device_map=device_map)
        # Every prompt as in a full run of the task (lm-eval draws few-shot examples in doc order);
        # with --n-examples the model answers only the selected docs.
        lm = opened.lm if samples is None else OnlyDocsLM(opened.lm, {t: set(ids) for t, ids in samples.items()})
        try:
            results = run_tasks(lm, task_names, task_manager=manager, num_fewshot=num_fewshot,
                                fewshot_seed=fewshot_seed)
        finally:
            opened.close()
        if results is None:
            raise InputError(f"lm-eval returned no results for {model.model_id}")
        selected = None if samples is None else {t: {str(i) for i in ids} for t, ids in samples.items()}
        for task in task_names:
            results["samples"][task] = [r for r in results["samples"][task]
                                        if selected is None or str(r["doc_id"]) in selected[task]]
        metrics = {t: pick_metric(results["samples"][t][0], metric) or "" for t in task_names}
        settings = settings_from_results(results, metrics, where=model.model_id, include_path=include_path or "")
        for task in task_names:
            rows += [{"model": model.model_id, "dataset": task, "example_id": doc, "score": score}
                     for doc, score in example_scores(results, task, metrics[task]).items()]
        fingerprints[model.model_id] = {"spec": model.text, "fingerprint": opened.cached.fingerprint,
                                        "n_parameters": opened.n_parameters}
        computed[model.model_id] = opened.cached.n_computed
        seconds[model.model_id] = time.perf_counter() - start
        del opened
        gc.collect()
        logger.info("%s: scored in %.1f s", model.model_id, seconds[model.model_id])
        if on_model is not None:
            on_model(model.model_id, len(seconds), len(models), seconds[model.model_id], computed[model.model_id])
    if settings is None:
        raise InputError("no model to score", field="--models")
    settings = LmEvalSettings(tasks=settings.tasks, lm_eval_version=settings.lm_eval_version,
                              include_path=settings.include_path, models=fingerprints, dtype=dtype)
    return LmEvalBuild(settings=settings, frame=pd.DataFrame(rows), seconds=seconds, computed=computed)
