"""The Python API: one function per job, each the one path behind its command.

One job per module:

* :mod:`~flasheval.api.place`    — :func:`place` one model on a reference (replayed, from files, or in memory);
* :mod:`~flasheval.api.sweep`    — :func:`sweep` many checkpoints under one budget (racing, resumable);
* :mod:`~flasheval.api.runs`     — :func:`place_checkpoint` a training run's checkpoint into its run folder,
  :func:`read_run` the folder back;
* :mod:`~flasheval.api.watch`    — :func:`watch` a folder of saved checkpoints and place each into a run folder;
* :mod:`~flasheval.api.evaluate` — :func:`evaluate` a model on tasks and suites (the workflow is
  :mod:`flasheval.evaluation.workflow`);
* :mod:`~flasheval.api.backtest` — :func:`backtest` placement on a reference by leaving each model out;
* :mod:`~flasheval.api.build`    — :func:`build_reference` by scoring real models on the same examples;
* :mod:`~flasheval.api.lm_eval`  — :func:`lm_eval`: lm-eval tasks with flasheval's engine as the model;
* :mod:`~flasheval.api.importing` — :func:`import_reference` from a long parquet file, lm-eval sample logs or Every
  Eval Ever records; :func:`export` of results as Every Eval Ever records;
* :mod:`~flasheval.api.dior`     — :func:`dior`: how reliable each benchmark design decision is;
* :mod:`~flasheval.api.rank_intervals` — :func:`rank_intervals`: every reference model's rank interval, and groups;
* :mod:`~flasheval.api.report`   — :func:`render_report` of run records (Markdown, HTML, figures);
* :mod:`~flasheval.api.scaling`  — :func:`fit_scaling`: scaling laws fitted on small runs, large ones predicted;
* :mod:`~flasheval.api.aggregate` — :func:`aggregate`: suite aggregates from score tables;
* :mod:`~flasheval.api.tasks`    — :func:`check_tasks`: a folder's task files found, read and counted;
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
from flasheval.api.aggregate import AggregateRun, aggregate
from flasheval.api.dior import DiorRun, dior
from flasheval.api.rank_intervals import RankIntervals, rank_intervals
from flasheval.api.importing import ExportedRecords, export, import_reference
from flasheval.api.report import render_report
from flasheval.api.runs import RunCheckpoint, RunHistory, place_checkpoint, read_run
from flasheval.api.watch import watch
from flasheval.api.scaling import ScalingFit, fit_scaling
from flasheval.api.tasks import TaskFileCheck, check_tasks

__all__ = ["place", "PlaceRun", "LivePlacement", "sweep", "SweepRun", "evaluate", "EvaluationRun",
           "EvaluationSummary", "TaskScore", "backtest", "BacktestRun", "build_reference", "BuiltReference",
           "import_reference", "export", "ExportedRecords", "dior", "DiorRun", "render_report", "aggregate", "AggregateRun", "check_tasks",
           "TaskFileCheck", "fit_scaling", "ScalingFit", "lm_eval", "LmEvalRun", "EngineOptions", "Progress",
           "ReplayModel", "place_checkpoint", "read_run", "RunHistory", "RunCheckpoint", "watch", "rank_intervals",
           "RankIntervals"]
