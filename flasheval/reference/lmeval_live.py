"""lm-eval references: build one by scoring models on lm-eval tasks, and check that a live run
reproduces one.

A reference whose manifest ``build`` dict is :class:`~flasheval.lmeval.settings.LmEvalSettings`
(kind ``lm-eval``) comes from ``reference import --format lm-eval-samples`` (lm-eval's own logs,
any backend) or from ``reference build --engine lm-eval`` (every model through flasheval's engine behind
lm-eval's task code, resumable through the results store: the docs of :func:`select_docs`, the
settings of :func:`lmeval_build_settings`, the loop :func:`flasheval.reference.building.build_models`).
:func:`prepare_lmeval_live` is the one check before a live placement on it: the installed
lm-eval version, every task's config (digest) and few-shot setting must equal the reference's,
or it refuses in one line.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flasheval.errors import InputError
from flasheval.lmeval.settings import LMEVAL_KIND, LmEvalSettings
from flasheval.reference.leaderboard import ReferenceLeaderboard
from flasheval.stats.sampling import example_order, nested_prefix

__all__ = ["is_lmeval_reference", "LmEvalLiveSetup", "prepare_lmeval_live", "select_docs", "lmeval_build_settings"]

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
                             "would not be paired (omit --num-fewshot)", field="--num-fewshot")
    include = include_path or settings.include_path or None
    used = LmEvalSettings(tasks={n: settings.tasks[n] for n in reference.dataset_names},
                          lm_eval_version=settings.lm_eval_version, include_path=settings.include_path,
                          dtype=settings.dtype)
    check_installed(used, include_path=include, where=reference.name)
    return LmEvalLiveSetup(reference=reference, settings=used, include_path=include)


def select_docs(task_names: Sequence[str], manager: Any, *, n_examples: int | None,
                seed: int) -> dict[str, tuple[int, ...]] | None:
    """Per task, the first ``n_examples`` doc ids of the seeded order, sorted (``None``: every doc).

    ``manager`` is lm-eval's ``TaskManager`` (:func:`flasheval.lmeval.tasks.make_task_manager`).
    """
    if n_examples is None:
        return None
    loaded = manager.load(list(task_names))["tasks"]
    selected = {}
    for name in task_names:
        ids = [str(i) for i in range(len(loaded[name].eval_docs))]
        order = example_order(ids, seed=seed, task_name=name)
        selected[name] = tuple(sorted(int(i) for i in nested_prefix(order, n_examples)))
    return selected


def lmeval_build_settings(run: LmEvalSettings, *, models: Mapping[str, Mapping[str, Any]],
                          dtype: str) -> LmEvalSettings:
    """The ``build`` dict of a reference built through lm-eval: the task settings one model's run logged (``run``,
    :func:`~flasheval.lmeval.settings.settings_from_results`), every model's spec, fingerprint and size, and the
    dtype every model was scored in (pinned)."""
    return LmEvalSettings(tasks=run.tasks, lm_eval_version=run.lm_eval_version, include_path=run.include_path,
                          models={k: dict(v) for k, v in models.items()}, dtype=dtype)
