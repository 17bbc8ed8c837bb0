"""The placement scorer for lm-eval references: a new model scored through lm-eval's own task code.

:class:`LmEvalScorer` implements :class:`~flasheval.reference.scoring.scorers.ExampleScorer`. Asked for
example ids (lm-eval doc ids) of a task, it runs ``simple_evaluate`` with the reference's few-shot
count and seed on the model behind flasheval's engine (:class:`~flasheval.lmeval.model.FlashevalLM`)
and returns the reference's per-example metric of each doc, in the order asked. Only the ids
asked for are scored by the model:

* 0-shot tasks: ``simple_evaluate(..., samples={task: ids})`` (ids sorted: lm-eval maps logged doc
  ids back by position in that list);
* few-shot tasks: lm-eval draws every doc's shots from one random stream in doc order, so a
  subset run would prompt with other shots than the reference's full run. The whole task's
  prompts are built (cheap: text only) and :class:`~flasheval.lmeval.model.OnlyDocsLM` lets the
  model answer only the asked docs.

Each scored doc's ``prompt_hash`` is compared with the reference's: a prompt that differs is
refused in one line (the comparison would not be paired).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from flasheval.errors import BackendError, InputError
from flasheval.lmeval.model import OnlyDocsLM
from flasheval.lmeval.settings import LmEvalSettings, prompt_hashes
from flasheval.lmeval.tasks import example_scores, make_task_manager, run_tasks
from flasheval.reference.scoring.scorers import OneTask, ScoredExamples

__all__ = ["LmEvalScorer", "doc_tokens"]

logger = logging.getLogger(__name__)


def doc_tokens(task_name: str, wanted: Sequence[int], counts: Mapping[tuple[str, str], int]) -> dict[str, int]:
    """Tokens the model ran for each asked doc of ``task_name`` (requests served by the store count: the cost of a run).

    ``counts`` is :attr:`~flasheval.lmeval.model.FlashevalLM.doc_tokens` of one run. A ``samples=`` run hands the
    model its docs numbered by position in the sorted id list (lm-eval 0.4.13); a whole-task run by their own ids.
    Either numbering is read; anything else, or a doc that ran nothing, is an error, never a zero.
    """
    seen = {doc for task, doc in counts if task == task_name}
    own = {str(i) for i in wanted}
    if seen == own:
        return {str(i): counts[(task_name, str(i))] for i in wanted}
    if seen == {str(k) for k in range(len(wanted))}:
        return {str(i): counts[(task_name, str(k))] for k, i in enumerate(wanted)}
    raise BackendError(f"task {task_name}: lm-eval ran requests for docs {sorted(seen)[:5]}, not the {len(wanted)} "
                       f"asked ({sorted(own)[:5]}...): cannot tell each doc's tokens")


class LmEvalScorer(OneTask):
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
        Every ``(task_name, example_id, score, n_tokens)``, in the order scored.
    """

    def __init__(self, lm: Any, settings: LmEvalSettings, *, include_path: str | None,
                 n_parameters: int | None = None) -> None:
        self._lm = lm
        self._settings = settings
        self._manager = make_task_manager(include_path, sorted(settings.tasks))
        self.n_parameters = n_parameters
        self.requests: list[tuple[str, tuple[str, ...]]] = []
        self.scored: list[tuple[str, str, float, int]] = []

    def score_many(self, asks: Sequence[tuple[str, Sequence[str]]]) -> list[ScoredExamples]:
        """The reference metric of each doc of each ``(task_name, example_ids)`` of ``asks`` (same order), scored now.

        One lm-eval run per task: a task's few-shot count and seed are settings of the whole run
        (``simple_evaluate``), so tasks are not merged into one run.
        """
        return [self._score_task(task_name, example_ids) for task_name, example_ids in asks]

    def _score_task(self, task_name: str, example_ids: Sequence[str]) -> ScoredExamples:
        task = self._settings.tasks.get(task_name)
        if task is None:
            raise InputError(f"task {task_name!r} has no lm-eval settings", field="task_name",
                             allowed=sorted(self._settings.tasks))
        self.requests.append((task_name, tuple(example_ids)))
        wanted = sorted(int(i) for i in example_ids)
        lm, samples = self._lm, {task_name: wanted}
        counts = getattr(self._lm, "doc_tokens", None)
        if counts is None:
            raise InputError(f"the lm-eval model {type(self._lm).__name__} reports no token counts", field="model")
        counts.clear()  # this run's docs only (0-shot runs number their docs from 0 again)
        if task.num_fewshot > 0:
            lm, samples = OnlyDocsLM(self._lm, {task_name: set(wanted)}), None
        results = run_tasks(lm, [task_name], task_manager=self._manager, num_fewshot=task.num_fewshot, samples=samples,
                            fewshot_seed=task.fewshot_seed if task.fewshot_seed is not None else 1234)
        by_id = example_scores(results, task_name, task.metric)  # type: ignore[arg-type]
        missing = [i for i in example_ids if i not in by_id]
        if missing:
            raise InputError(f"lm-eval returned no score for docs {missing[:5]} of {task_name}", field="samples")
        built = prompt_hashes(results["samples"][task_name])  # type: ignore[index]
        self._check_prompts(task_name, set(example_ids), built)
        per_doc = doc_tokens(task_name, wanted, counts)
        tokens = [per_doc[str(i)] for i in example_ids]
        self.scored += [(task_name, i, by_id[i], n) for i, n in zip(example_ids, tokens)]
        logger.info("scored %d docs of %s through lm-eval", len(example_ids), task_name)
        return ScoredExamples(scores=np.array([by_id[i] for i in example_ids], dtype=np.float64),
                              n_tokens=np.array(tokens, dtype=np.int64))

    def _check_prompts(self, task_name: str, asked: set[str], hashes: dict[str, str]) -> None:
        pinned = self._settings.tasks[task_name].prompt_hashes
        changed = sorted((d for d in asked if d in pinned and hashes.get(d) != pinned[d]), key=int)
        if changed:
            raise InputError(f"task {task_name}: the prompts lm-eval built now for docs {changed[:5]} differ from the "
                             "reference's (other few-shot examples or prompt text); the scores would not be paired",
                             field="--reference")

    def examples_json(self) -> list[dict[str, Any]]:
        """Every scored doc, as run records store them (``examples``)."""
        return [{"task_name": t, "example_id": i, "score": s, "n_tokens": n} for t, i, s, n in self.scored]

    def asked_json(self) -> list[dict[str, Any]]:
        """:attr:`requests` as run records store them (``asked``)."""
        return [{"task_name": t, "example_ids": list(ids)} for t, ids in self.requests]
