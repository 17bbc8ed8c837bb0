"""What a reference built on DCLM-format task files pins (``flasheval reference build``): its examples and settings.

Every model is scored on the same examples (:func:`select_example_ids`: the first ``n_examples`` of
each task's seeded order, :func:`flasheval.stats.sampling.example_order`) with the same prompts
(:mod:`flasheval.tasks`). The manifest's ``build`` dict (:func:`task_file_settings`,
:class:`~flasheval.reference.live.BuildSettings`) records everything a placement must reproduce; a
live placement refuses a reference whose settings it cannot match
(:func:`flasheval.reference.live.prepare_live`). The loop that scores the models, the same for
both engines, is :func:`flasheval.reference.building.build_models`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flasheval.reference.live import BuildSettings, prompt_digests
from flasheval.stats.sampling import example_order, nested_prefix
from flasheval.tasks import LiveTask

__all__ = ["select_example_ids", "task_file_settings"]


def select_example_ids(task: LiveTask, *, seed: int, n_examples: int | None) -> tuple[str, ...]:
    """The first ``n_examples`` ids of the task's seeded order (all when ``None``)."""
    return nested_prefix(example_order(task.example_ids, seed=seed, task_name=task.name), n_examples)


def task_file_settings(tasks: Sequence[LiveTask], example_ids: Mapping[str, Sequence[str]], *, suite: str, seed: int,
                       n_examples: int | None, prefix_space: bool, dtype: str,
                       models: Mapping[str, Mapping[str, Any]], task_dir: str) -> BuildSettings:
    """The ``build`` dict of a reference whose models were scored on ``example_ids`` of ``tasks``.

    ``models``: per model its ``spec``, ``fingerprint`` and ``n_parameters``.
    """
    return BuildSettings(
        suite=suite, tasks=tuple(t.name for t in tasks), seed=seed, n_examples=n_examples, prefix_space=prefix_space,
        dtype=dtype, task_sha256={t.name: t.sha256 for t in tasks},
        prompt_digests=prompt_digests(tasks, example_ids, seed=seed, prefix_space=prefix_space),
        models={k: dict(v) for k, v in models.items()}, task_dir=task_dir)
