"""The placement scorer for lm-eval references: a new model scored through lm-eval's own task code.

:class:`LmEvalScorer` implements :class:`~flasheval.placement.scorers.ExampleScorer`. Asked for
example ids (lm-eval doc ids) of a task, it runs ``simple_evaluate(..., samples={task: ids})``
with the reference's few-shot count and seed, on the model behind flasheval's engine
(:class:`~flasheval.lmeval.model.FlashevalLM`), and returns the reference's per-example metric
of each doc, in the order asked. Only the ids asked for are scored.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from flasheval.errors import InputError
from flasheval.lmeval.settings import LmEvalSettings
from flasheval.lmeval.tasks import example_scores, make_task_manager, run_tasks
from flasheval.placement.scorers import ScoredExamples

__all__ = ["LmEvalScorer"]

logger = logging.getLogger(__name__)


class LmEvalScorer:
    """Scores docs of lm-eval tasks for one model, as the reference's models were scored.

    Parameters
    ----------
    lm
        An lm-eval model (normally :class:`~flasheval.lmeval.model.FlashevalLM` behind a results store).
    settings
        The reference's lm-eval settings (per task: few-shot count and seed, metric).
    include_path
        Folder of the custom task YAMLs (``None``: installed tasks only).
    n_parameters
        Parameter count, for the FLOPs estimate.

    Attributes
    ----------
    requests
        Every ``(task_name, example_ids)`` asked for, in order.
    scored
        Every ``(task_name, example_id, score)``, in the order scored.
    """

    def __init__(self, lm: Any, settings: LmEvalSettings, *, include_path: str | None,
                 n_parameters: int | None = None) -> None:
        self._lm = lm
        self._settings = settings
        self._manager = make_task_manager(include_path)
        self.n_parameters = n_parameters
        self.requests: list[tuple[str, tuple[str, ...]]] = []
        self.scored: list[tuple[str, str, float]] = []

    def score(self, task_name: str, example_ids: Sequence[str]) -> ScoredExamples:
        """The reference metric of each doc of ``example_ids`` (same order), scored now."""
        task = self._settings.tasks.get(task_name)
        if task is None:
            raise InputError(f"task {task_name!r} has no lm-eval settings", field="task_name",
                             allowed=sorted(self._settings.tasks))
        self.requests.append((task_name, tuple(example_ids)))
        results = run_tasks(self._lm, [task_name], task_manager=self._manager, num_fewshot=task.num_fewshot,
                            samples={task_name: [int(i) for i in example_ids]},
                            fewshot_seed=task.fewshot_seed if task.fewshot_seed is not None else 1234)
        by_id = example_scores(results, task_name, task.metric)  # type: ignore[arg-type]
        missing = [i for i in example_ids if i not in by_id]
        if missing:
            raise InputError(f"lm-eval returned no score for docs {missing[:5]} of {task_name}", field="samples")
        self.scored += [(task_name, i, by_id[i]) for i in example_ids]
        logger.info("scored %d docs of %s through lm-eval", len(example_ids), task_name)
        return ScoredExamples(scores=np.array([by_id[i] for i in example_ids], dtype=np.float64))

    def asked_json(self) -> list[dict[str, Any]]:
        """:attr:`requests` as run records store them (``asked``)."""
        return [{"task_name": t, "example_ids": list(ids)} for t, ids in self.requests]
