"""The Python API: one function per job, each the one path behind its command.

One job per module:

* :mod:`~flasheval.api.place`    — :func:`place` one model on a reference (replayed, from files, or in memory);
* :mod:`~flasheval.api.sweep`    — :func:`sweep` many checkpoints under one budget (racing, resumable);
* :mod:`~flasheval.api.evaluate` — :func:`evaluate` a model on tasks and suites (the workflow is
  :mod:`flasheval.evaluation.workflow`);
* :mod:`~flasheval.api.backtest` — :func:`backtest` placement on a reference by leaving each model out;
* :mod:`~flasheval.api.build`    — :func:`build_reference` by scoring real models on the same examples;
* :mod:`~flasheval.api.lm_eval`  — :func:`lm_eval`: lm-eval tasks with flasheval's engine as the model;
* :mod:`~flasheval.api.tools`    — :func:`import_reference`, :func:`dior`, :func:`render_report`;
* :mod:`~flasheval.api.tables`   — :func:`aggregate`, :func:`check_tasks`, :func:`fit_scaling`;
* :mod:`~flasheval.api.options`  — :class:`EngineOptions`, the device options of every live call;
* :mod:`~flasheval.api.models`   — the ``model`` argument: spec string, flasheval model object, transformers model;
* :mod:`~flasheval.api.resolve`  — references, plans and budgets named or given, checked at the entry;
* :mod:`~flasheval.api.progress` — the events a ``progress`` callback receives.

Everything is re-exported by :mod:`flasheval` itself; the command line (:mod:`flasheval.cli`) is a
thin shell over these functions. Importing this package does not import torch.
"""

from __future__ import annotations

from flasheval.api.backtest import BacktestRun, backtest
from flasheval.api.build import BuiltReference, build_reference
from flasheval.api.evaluate import EvaluationRun, EvaluationSummary, TaskScore, evaluate
from flasheval.api.lm_eval import LmEvalRun, lm_eval
from flasheval.api.models import ReplayModel
from flasheval.api.options import EngineOptions
from flasheval.api.place import LivePlacement, PlaceRun, place
from flasheval.api.progress import Progress
from flasheval.api.sweep import SweepRun, sweep
from flasheval.api.tables import AggregateRun, ScalingFit, TaskFileCheck, aggregate, check_tasks, fit_scaling
from flasheval.api.tools import DiorRun, dior, import_reference, render_report

__all__ = ["place", "PlaceRun", "LivePlacement", "sweep", "SweepRun", "evaluate", "EvaluationRun",
           "EvaluationSummary", "TaskScore", "backtest", "BacktestRun", "build_reference", "BuiltReference",
           "import_reference", "dior", "DiorRun", "render_report", "aggregate", "AggregateRun", "check_tasks",
           "TaskFileCheck", "fit_scaling", "ScalingFit", "lm_eval", "LmEvalRun", "EngineOptions", "Progress",
           "ReplayModel"]
