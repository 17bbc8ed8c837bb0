"""The Python API: one function per job, each the one path behind its command.

One job per module:

* :mod:`~flasheval.api.place`    — :func:`place` one model on a reference (replayed, from files, or in memory);
* :mod:`~flasheval.api.sweep`    — :func:`sweep` many checkpoints under one budget (racing, resumable);
* :mod:`~flasheval.api.evaluate` — :func:`evaluate` a model on tasks and suites (DCLM's and Gadre's metrics);
* :mod:`~flasheval.api.backtest` — :func:`backtest` placement on a reference by leaving each model out;
* :mod:`~flasheval.api.build`    — :func:`build_reference` by scoring real models on the same examples;
* :mod:`~flasheval.api.models`   — the ``model`` argument: spec string, flasheval model object, transformers model;
* :mod:`~flasheval.api.resolve`  — references, plans and budgets named or given, checked at the entry;
* :mod:`~flasheval.api.progress` — the events a ``progress`` callback receives.

Everything is re-exported by :mod:`flasheval` itself; the command line (:mod:`flasheval.cli`) is a
thin shell over these functions. Importing this package does not import torch.
"""

from __future__ import annotations

from flasheval.api.backtest import BacktestRun, backtest
from flasheval.api.build import BuiltReference, build_reference
from flasheval.api.evaluate import EvaluationRun, evaluate
from flasheval.api.models import ReplayModel
from flasheval.api.place import PlaceRun, place
from flasheval.api.progress import Progress
from flasheval.api.sweep import SweepRun, sweep

__all__ = ["place", "PlaceRun", "sweep", "SweepRun", "evaluate", "EvaluationRun", "backtest", "BacktestRun",
           "build_reference", "BuiltReference", "Progress", "ReplayModel"]
