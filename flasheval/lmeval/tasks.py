"""Run lm-eval tasks through lm-eval's own task code, and read per-example scores out of the run.

:func:`run_tasks` is ``lm_eval.simple_evaluate`` with the arguments flasheval passes on
(``samples={task: [doc ids]}`` scores only chosen examples: placement asks only for new ids).
:func:`example_scores` reads ``{doc id: score}`` from the logged samples. :func:`installed_settings`
loads the installed tasks as a run would (few-shot count and seed applied) and
:func:`check_installed` refuses, in one line, tasks whose config, few-shot setting or lm-eval
version differ from what a reference pinned.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from flasheval.engine.coordination.distributed import from_main
from flasheval.errors import InputError
from flasheval.lmeval._install import installed_lm_eval_version, require_lm_eval
from flasheval.lmeval.settings import LmEvalSettings, config_digest, differing_keys, pick_metric

__all__ = ["DEFAULT_FEWSHOT_SEED", "make_task_manager", "run_tasks", "example_scores", "installed_configs",
           "check_installed"]

logger = logging.getLogger(__name__)

DEFAULT_FEWSHOT_SEED = 1234
"""lm-eval's default few-shot sampler seed."""


def make_task_manager(include_path: str | None, task_names: Sequence[str] = ()) -> Any:
    """lm-eval's ``TaskManager`` with ``include_path`` (custom task YAMLs) added.

    When every name of ``task_names`` is a task (not a group or tag) of ``include_path`` itself, only
    ``include_path`` is indexed: lm-eval's own task folder holds about 15,000 configs and indexing them costs
    15-20 s on two cores. The tasks loaded are the same: lm-eval lets a task of ``include_path`` override an
    installed one of the same name, and building a task reads only its own YAML. Otherwise (or with no
    ``task_names``) the installed tasks are indexed too.
    """
    require_lm_eval()
    from lm_eval.tasks import TaskManager

    own = _own_task_manager(include_path, task_names)
    return own if own is not None else TaskManager(include_path=include_path or None)


def _own_task_manager(include_path: str | None, task_names: Sequence[str]) -> Any:
    """A ``TaskManager`` of ``include_path`` alone if it holds every name of ``task_names`` as a task, else ``None``."""
    if not include_path or not task_names:
        return None
    from lm_eval.tasks import TaskManager

    own = TaskManager(include_path=include_path, include_defaults=False)
    return own if set(task_names) <= set(own.all_subtasks) else None


def _check_task_names(task_names: Sequence[str], manager: Any) -> None:
    known = set(manager.all_tasks)
    unknown = [t for t in task_names if t not in known]
    if unknown:
        raise InputError(f"unknown lm-eval task(s) {', '.join(unknown)} (custom tasks need --include_path; "
                         "'lm_eval ls tasks' lists the installed ones)", field="--tasks")


def run_tasks(lm: Any, task_names: Sequence[str], *, task_manager: Any = None, include_path: str | None = None,
              num_fewshot: int | None = None, limit: float | None = None,
              samples: Mapping[str, Sequence[int]] | None = None, fewshot_seed: int = DEFAULT_FEWSHOT_SEED,
              log_samples: bool = True, evaluation_tracker: Any = None, model_args: str = "") -> dict[str, Any] | None:
    """``lm_eval.simple_evaluate`` on ``lm``; every process scoring together gets the main process's results.

    ``lm``'s ``processes`` (a :class:`~flasheval.lmeval.model.FlashevalLM`'s, or a wrapper's): the processes of
    ``distributed="all"`` (``None``: this process alone); the main process's results are broadcast so that every
    process (each runs the same placement loop) sees the same scores. Bootstrap standard
    errors are skipped (``bootstrap_iters=0``): flasheval's own statistics use the per-example scores.
    """
    lm_eval = require_lm_eval()
    manager = task_manager or make_task_manager(include_path, task_names)
    _check_task_names(task_names, manager)
    results = lm_eval.simple_evaluate(
        model=lm, model_args=model_args, tasks=list(task_names), task_manager=manager, num_fewshot=num_fewshot,
        limit=limit, samples=None if samples is None else {k: list(map(int, v)) for k, v in samples.items()},
        fewshot_random_seed=fewshot_seed, log_samples=log_samples, bootstrap_iters=0,
        evaluation_tracker=evaluation_tracker)
    return from_main(getattr(lm, "processes", None), results, what="broadcasting lm-eval's results")


def example_scores(results: Mapping[str, Any], task_name: str, metric: str | None) -> dict[str, float]:
    """``{doc id: score}`` of one task from a run's logged samples (first filter's row of each doc).

    ``metric`` names the per-example metric; ``None`` takes the first of acc / exact_match / acc_norm.
    """
    scores: dict[str, float] = {}
    for row in results["samples"][task_name]:
        doc_id = str(row["doc_id"])
        if doc_id in scores:
            continue
        name = pick_metric(row, metric)
        value = row.get(name) if name else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            present = sorted(k for k, v in row.items() if isinstance(v, (int, float)) and k != "doc_id")
            wanted = metric or "acc/exact_match/acc_norm"
            raise InputError(f"task {task_name}: doc {doc_id} has no numeric metric {wanted}",
                             field="metric", allowed=present)
        scores[doc_id] = float(value)
    return scores


def installed_configs(task_names: Sequence[str], *, include_path: str | None, num_fewshot: Mapping[str, int],
                      fewshot_seed: int | None) -> dict[str, dict[str, Any]]:
    """The installed tasks' configs as a run would log them (``num_fewshot`` and seed applied as
    ``simple_evaluate`` applies them)."""
    require_lm_eval()
    from lm_eval.utils import handle_non_serializable

    manager = make_task_manager(include_path, task_names)
    _check_task_names(task_names, manager)
    loaded = manager.load(list(task_names))["tasks"]
    configs = {}
    for name in task_names:
        task = loaded[name]
        shots = num_fewshot.get(name)
        if shots is not None and task.get_config("num_fewshot") != 0:
            task.set_config(key="num_fewshot", value=shots)
        elif task.get_config("num_fewshot") is None:
            task.set_config(key="num_fewshot", value=0)
        task.set_fewshot_seed(seed=fewshot_seed)
        configs[name] = json.loads(json.dumps(dict(task.dump_config()), default=handle_non_serializable))
    return configs


def check_installed(settings: LmEvalSettings, *, include_path: str | None, where: str) -> None:
    """Refuse in one line when the installed lm-eval or tasks would not score as the reference did."""
    version = installed_lm_eval_version()
    if version != settings.lm_eval_version:
        raise InputError(f"reference {where!r} was scored with lm-eval {settings.lm_eval_version}; installed is "
                         f"{version} (install lm-eval=={settings.lm_eval_version})", field="--reference")
    names = sorted(settings.tasks)
    seeds = {t.fewshot_seed for t in settings.tasks.values()}
    if len(seeds) > 1:
        raise InputError(f"reference {where!r} mixes few-shot seeds {sorted(seeds, key=str)}", field="--reference")
    installed = installed_configs(names, include_path=include_path,
                                  num_fewshot={n: t.num_fewshot for n, t in settings.tasks.items()},
                                  fewshot_seed=seeds.pop())
    for name in names:
        pinned = settings.tasks[name]
        if config_digest(installed[name]) != pinned.config_digest:
            keys = differing_keys(installed[name], pinned.config)
            raise InputError(f"task {name}: the installed task config differs from reference {where!r}'s "
                             f"(keys {', '.join(keys) or '?'}); use the task files it was scored with "
                             "(--include-path) or rebuild the reference", field="--reference")
