"""The two engines of a reference build, as :class:`~flasheval.reference.building.BuildSetup`\\ s.

* :class:`TaskFileBuild` (``--engine flasheval``): DCLM-format task files scored by flasheval's prompts and
  rules, the first ``n_examples`` of each task's seeded order; the manifest's ``build`` dict is
  :class:`~flasheval.reference.live.BuildSettings` (kind ``live``).
* :class:`LmEvalTaskBuild` (``--engine lm-eval``): lm-eval tasks scored through lm-eval's task code on
  flasheval's engine, the first ``n_examples`` docs of the same seeded order; the ``build`` dict is
  :class:`~flasheval.lmeval.settings.LmEvalSettings` (kind ``lm-eval``).

Both open a model as a placement on such a reference opens it
(:func:`~flasheval.reference.scoring.live.open_task_files`, :func:`~flasheval.reference.scoring.live.open_lmeval`)
and log every example's task, id, score and tokens.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.engine.specs import NamedModel
from flasheval.errors import InputError
from flasheval.reference.building import ReferenceText, ScoredModel
from flasheval.reference.scoring.live import LiveOptions, OpenedScorer, open_lmeval, open_task_files
from flasheval.reference.build import select_example_ids, task_file_settings
from flasheval.tasks import LiveTask, Suite

__all__ = ["TaskFileBuild", "LmEvalTaskBuild", "LmEvalTaskRun"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskFileBuild:
    """A build on DCLM-format task files (``reference build --engine flasheval``)."""

    suite: Suite
    tasks: tuple[LiveTask, ...]
    seed: int
    n_examples: int | None
    dtype: str
    prefix_space: bool = True
    task_dir: str = ""
    engine: str = "flasheval"

    @property
    def example_ids(self) -> dict[str, tuple[str, ...]]:
        """Per task, the examples every model is scored on (the first ``n_examples`` of the seeded order)."""
        return {t.name: select_example_ids(t, seed=self.seed, n_examples=self.n_examples) for t in self.tasks}

    def open(self, model: NamedModel, store_dir: Path, *, options: LiveOptions, state: Any = None,
             n_params: int | None = None) -> OpenedScorer:
        return open_task_files(model, store_dir, tasks=self.tasks, seed=self.seed, prefix_space=self.prefix_space,
                               dtype=self.dtype, options=options, state=state, n_params=n_params)

    def score_model(self, opened: OpenedScorer, *, where: str) -> ScoredModel:
        selected = self.example_ids
        for task in self.tasks:
            before, start = opened.requests_computed, time.perf_counter()
            opened.scorer.score(task.name, selected[task.name])
            logger.info("%s: %d examples in %.1f s (%d requests computed, the rest from the store)", task.name,
                        len(selected[task.name]), time.perf_counter() - start, opened.requests_computed - before)
        return ScoredModel(examples=tuple(opened.scorer.examples_json()))

    def settings(self, last: ScoredModel, models: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        return task_file_settings(self.tasks, self.example_ids, suite=self.suite.name, seed=self.seed,
                                  n_examples=self.n_examples, prefix_space=self.prefix_space, dtype=self.dtype,
                                  models=models, task_dir=self.task_dir).to_json()

    def reference_text(self, settings: Mapping[str, Any]) -> ReferenceText:
        """A suite aggregated by centered accuracy gets DCLM's v2 random baselines and the ``centered`` aggregate;
        any other suite the plain mean."""
        centered = self.suite.aggregate == "centered_mean"
        return ReferenceText(
            source="flasheval reference build (live scores)",
            metric="per-example accuracy under llm-foundry's rule (1 correct, 0 not)",
            aggregate="centered" if centered else "mean",
            random_baselines={t.name: t.spec.baseline_dclm_v2_pct / 100.0 for t in self.tasks} if centered else None,
            notes="Built by scoring models live; place live models with the same task files, seed and dtype.")

    def describe_tasks(self) -> str:
        return f"{len(self.tasks)} tasks"


class LmEvalTaskRun:
    """What an lm-eval build opens per model: the lm-eval model (:class:`~flasheval.lmeval.model.FlashevalLM`) that
    :meth:`LmEvalTaskBuild.score_model` runs whole tasks on, and its parameter count."""

    __slots__ = ("lm", "n_parameters")

    def __init__(self, lm: Any, *, n_parameters: int | None) -> None:
        self.lm = lm
        self.n_parameters = n_parameters


@dataclass(frozen=True, slots=True, kw_only=True)
class LmEvalTaskBuild:
    """A build on lm-eval tasks (``reference build --engine lm-eval``); make it with :meth:`create`."""

    task_names: tuple[str, ...]
    include_path: str | None
    num_fewshot: int | None
    fewshot_seed: int
    metric: str | None
    dtype: str
    manager: Any
    """lm-eval's ``TaskManager`` (with ``include_path``), one for every model."""
    selected: Mapping[str, tuple[int, ...]] | None
    """Per task, the doc ids every model answers (``None``: every doc)."""
    engine: str = "lm-eval"

    @classmethod
    def create(cls, task_names: Sequence[str], *, include_path: str | None, num_fewshot: int | None,
               fewshot_seed: int, n_examples: int | None, seed: int, metric: str | None,
               dtype: str) -> LmEvalTaskBuild:
        """lm-eval's task manager and each task's docs (the first ``n_examples`` of the seeded order); lm-eval must be
        installed. An unknown task name is refused in one line."""
        from flasheval.lmeval.tasks import make_task_manager
        from flasheval.reference.lmeval_live import select_docs

        manager = make_task_manager(include_path, task_names)
        known = set(manager.all_tasks)
        unknown = [t for t in task_names if t not in known]
        if unknown:  # before any model opens (lm-eval itself would raise a KeyError on --n-examples)
            raise InputError(f"unknown lm-eval task(s) {', '.join(unknown)} (custom tasks need --include_path; "
                             "'lm_eval ls tasks' lists the installed ones)", field="--tasks")
        selected = select_docs(task_names, manager, n_examples=n_examples, seed=seed)
        return cls(task_names=tuple(task_names), include_path=include_path, num_fewshot=num_fewshot,
                   fewshot_seed=fewshot_seed, metric=metric, dtype=dtype, manager=manager, selected=selected)

    def open(self, model: NamedModel, store_dir: Path, *, options: LiveOptions, state: Any = None,
             n_params: int | None = None) -> OpenedScorer:
        return open_lmeval(model, store_dir, dtype=self.dtype, options=options, state=state,
                           scorer=lambda lm, size: LmEvalTaskRun(lm, n_parameters=size if n_params is None
                                                                 else n_params))

    def score_model(self, opened: OpenedScorer, *, where: str) -> ScoredModel:
        """One lm-eval run of every task. Every prompt is built as in a full run of the task (lm-eval draws few-shot
        examples in doc order); with :attr:`selected` the model answers only those docs
        (:class:`~flasheval.lmeval.model.OnlyDocsLM`). Each doc's tokens are those the model ran for it."""
        from flasheval.lmeval.model import OnlyDocsLM
        from flasheval.lmeval.settings import pick_metric, prompt_hashes, settings_from_results
        from flasheval.lmeval.tasks import example_scores, run_tasks
        from flasheval.reference.scoring.lmeval import doc_tokens

        lm = opened.scorer.lm
        lm.doc_tokens.clear()  # this run's docs only
        answering = lm if self.selected is None else OnlyDocsLM(lm, {t: set(ids) for t, ids in self.selected.items()})
        results = run_tasks(answering, self.task_names, task_manager=self.manager, num_fewshot=self.num_fewshot,
                            fewshot_seed=self.fewshot_seed)
        if results is None:
            raise InputError(f"lm-eval returned no results for {where}")
        if self.selected is not None:
            for task in self.task_names:
                keep = {str(i) for i in self.selected[task]}
                results["samples"][task] = [r for r in results["samples"][task] if str(r["doc_id"]) in keep]
        metrics = {t: pick_metric(results["samples"][t][0], self.metric) or "" for t in self.task_names}
        run = settings_from_results(results, metrics, where=where, include_path=self.include_path or "")
        examples = []
        for task in self.task_names:
            scores = example_scores(results, task, metrics[task])
            tokens = doc_tokens(task, sorted(int(d) for d in scores), lm.doc_tokens)
            hashes = prompt_hashes(results["samples"][task])
            examples += [{"task_name": task, "example_id": doc, "score": score, "n_tokens": tokens[doc],
                          "prompt_hash": hashes.get(doc, "")} for doc, score in scores.items()]
        return ScoredModel(examples=tuple(examples), run_settings=run)

    def settings(self, last: ScoredModel, models: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        from flasheval.reference.lmeval_live import lmeval_build_settings

        return lmeval_build_settings(last.run_settings, models=models, dtype=self.dtype).to_json()

    def reference_text(self, settings: Mapping[str, Any]) -> ReferenceText:
        metrics = sorted({t["metric"] for t in settings["tasks"].values()})
        return ReferenceText(
            source=f"flasheval reference build --engine lm-eval (lm-eval {settings['lm_eval_version']})",
            metric=f"per-example lm-eval metric ({', '.join(metrics)})", aggregate="mean",
            notes="Built through lm-eval's task code; place live models with the same lm-eval version, tasks and "
                  "dtype.")

    def describe_tasks(self) -> str:
        return f"{len(self.task_names)} lm-eval tasks"
