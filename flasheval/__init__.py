"""flasheval: place a language-model checkpoint on a reference leaderboard cheaply.

One function per job (keyword-only options, one result object each, ``progress=`` for long calls):

* ``place(model, reference, *, plan="default", budget=None, seed=None, ...) -> PlaceRun`` — where one model
  stands, from escalating nested subsamples, with its rank's interval and the compute saved;
* ``sweep(models, reference, *, budget, ...) -> SweepRun`` — many checkpoints under one total budget;
* ``place_checkpoint(model, *, run, step, ...) -> PlaceRun`` — one checkpoint of a training run into its run
  folder (the hook for training loops); ``read_run(run) -> RunHistory`` reads the folder back;
  ``watch(directory, *, reference, ...) -> RunHistory`` places every checkpoint saved into a folder;
* ``evaluate(model, *, tasks=..., suites=..., task_dir=...) -> EvaluationRun`` — DCLM / Gadre scores;
* ``backtest(reference, plan) -> BacktestRun`` — leave-one-out reliability of placement on a reference;
* ``build_reference(models, *, name, ...) -> BuiltReference`` — a live reference from real models;
* ``import_reference(source, *, format, name)``, ``export(source, *, format, output)`` (Every Eval Ever records),
  ``dior(reference)``, ``render_report(run_dir)``,
  ``aggregate(scores, *, suites)``, ``check_tasks(task_dir)``, ``fit_scaling(runs, *, predict)``,
  ``lm_eval(model, *, tasks)`` — one for every other command (``docs/api.md`` lists which);
* ``rank_intervals(reference, *, confidence_level=0.95, simultaneous=True)`` — every reference model's rank
  interval and the groups of models the reference cannot tell apart;
* ``load_reference(name_or_folder)``, ``load_plan(name_or_file)``, ``Budget(max_examples=...)``;
  ``EngineOptions(dtype=..., device=..., batch_size=...)``, the device options of every live call (``engine=``).

``model`` is a spec string (``"replay:MODEL_ID"``, ``"[NAME=]hf:PATH_OR_ID"``, ``"[NAME=]gguf:FILE"``), a
:class:`LoadedModel`, or an already loaded ``transformers`` model with ``tokenizer=`` and ``identity=``
(scored in place in eval mode under ``torch.inference_mode()``, handed back in its own mode). Every
bad value is refused with an :class:`InputError` naming the option, the value and what is allowed,
the same line the command line prints. Guide and examples: ``docs/api.md``.

Importing flasheval is light (no torch): the API is loaded when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from flasheval.errors import FlashevalError, InputError
from flasheval.version import __version__

if TYPE_CHECKING:  # what the lazy attributes below resolve to
    from flasheval.api import (
        AggregateRun,
        DiorRun,
        EngineOptions,
        EvaluationSummary,
        LivePlacement,
        LmEvalRun,
        ScalingFit,
        TaskFileCheck,
        TaskScore,
        aggregate,
        check_tasks,
        dior,
        fit_scaling,
        import_reference,
        export,
        ExportedRecords,
        lm_eval,
        render_report,
        BacktestRun,
        BuiltReference,
        EvaluationRun,
        PlaceRun,
        Progress,
        RunCheckpoint,
        RunHistory,
        SweepRun,
        backtest,
        build_reference,
        evaluate,
        place,
        place_checkpoint,
        read_run,
        rank_intervals,
        RankIntervals,
        sweep,
        watch,
    )
    from flasheval.engine.hf.in_memory import LoadedModel
    from flasheval.placement.results import Budget, PlacementResult
    from flasheval.sweeps.schedule import SweepResult
    from flasheval.placement.tiers import TierPlan
    from flasheval.placement.tiers import load_tier_plan as load_plan
    from flasheval.reference import ReferenceLeaderboard, load_reference
    from flasheval.reference.importing import ImportedReference
    from flasheval.reference.writing import WrittenReference
    from flasheval.reference.matrices import DroppedModel
    from flasheval.reference.manifest import ReferenceManifest
    from flasheval.reference.intervals import ModelInterval
    from flasheval.lmeval.settings import LmEvalSettings, TaskSettings
    from flasheval.report import ReportFiles
    from flasheval.evaluation.example_records import ExampleRecord
    from flasheval.placement.results import StageRecord, Compute, Timing
    from flasheval.placement.tiers import Tier
    from flasheval.sweeps.schedule import CheckpointResult, SweepStage, OrderEntry
    from flasheval.analysis.backtest import BacktestResult, BacktestRow, MethodSummary, SeedSummary
    from flasheval.analysis.dior import DiorReport
    from flasheval.stats.dior import DiorSummary
    from flasheval.stats.dior_pool import LeaderChange
    from flasheval.engine.base import Backend, BackendInfo
    from flasheval.sweeps.executor import Executor, InProcessExecutor
    from flasheval.cluster.executor import RayExecutor
    from flasheval.sweeps.rounds import Round, RoundRequest

_LAZY: dict[str, tuple[str, str]] = {
    "place": ("flasheval.api", "place"),
    "PlaceRun": ("flasheval.api", "PlaceRun"),
    "sweep": ("flasheval.api", "sweep"),
    "SweepRun": ("flasheval.api", "SweepRun"),
    "place_checkpoint": ("flasheval.api", "place_checkpoint"),
    "read_run": ("flasheval.api", "read_run"),
    "RunHistory": ("flasheval.api", "RunHistory"),
    "RunCheckpoint": ("flasheval.api", "RunCheckpoint"),
    "watch": ("flasheval.api", "watch"),
    "evaluate": ("flasheval.api", "evaluate"),
    "EvaluationRun": ("flasheval.api", "EvaluationRun"),
    "backtest": ("flasheval.api", "backtest"),
    "BacktestRun": ("flasheval.api", "BacktestRun"),
    "build_reference": ("flasheval.api", "build_reference"),
    "BuiltReference": ("flasheval.api", "BuiltReference"),
    "Progress": ("flasheval.api", "Progress"),
    "LivePlacement": ("flasheval.api", "LivePlacement"),
    "EvaluationSummary": ("flasheval.api", "EvaluationSummary"),
    "TaskScore": ("flasheval.api", "TaskScore"),
    "import_reference": ("flasheval.api", "import_reference"),
    "export": ("flasheval.api", "export"),
    "ExportedRecords": ("flasheval.api", "ExportedRecords"),
    "dior": ("flasheval.api", "dior"),
    "DiorRun": ("flasheval.api", "DiorRun"),
    "rank_intervals": ("flasheval.api", "rank_intervals"),
    "RankIntervals": ("flasheval.api", "RankIntervals"),
    "render_report": ("flasheval.api", "render_report"),
    "aggregate": ("flasheval.api", "aggregate"),
    "AggregateRun": ("flasheval.api", "AggregateRun"),
    "check_tasks": ("flasheval.api", "check_tasks"),
    "TaskFileCheck": ("flasheval.api", "TaskFileCheck"),
    "fit_scaling": ("flasheval.api", "fit_scaling"),
    "ScalingFit": ("flasheval.api", "ScalingFit"),
    "lm_eval": ("flasheval.api", "lm_eval"),
    "LmEvalRun": ("flasheval.api", "LmEvalRun"),
    "EngineOptions": ("flasheval.api", "EngineOptions"),
    "load_reference": ("flasheval.reference", "load_reference"),
    "ReferenceLeaderboard": ("flasheval.reference", "ReferenceLeaderboard"),
    "load_plan": ("flasheval.placement.tiers", "load_tier_plan"),
    "TierPlan": ("flasheval.placement.tiers", "TierPlan"),
    "Budget": ("flasheval.placement.results", "Budget"),
    "PlacementResult": ("flasheval.placement.results", "PlacementResult"),
    "SweepResult": ("flasheval.sweeps.schedule", "SweepResult"),
    "LoadedModel": ("flasheval.engine.hf.in_memory", "LoadedModel"),
    # the values inside what the API returns (tests/test_api_exports.py finds them from the annotations)
    "ImportedReference": ("flasheval.reference.importing", "ImportedReference"),
    "WrittenReference": ("flasheval.reference.writing", "WrittenReference"),
    "DroppedModel": ("flasheval.reference.matrices", "DroppedModel"),
    "ReferenceManifest": ("flasheval.reference.manifest", "ReferenceManifest"),
    "ModelInterval": ("flasheval.reference.intervals", "ModelInterval"),
    "LmEvalSettings": ("flasheval.lmeval.settings", "LmEvalSettings"),
    "TaskSettings": ("flasheval.lmeval.settings", "TaskSettings"),
    "ReportFiles": ("flasheval.report", "ReportFiles"),
    "ExampleRecord": ("flasheval.evaluation.example_records", "ExampleRecord"),
    "StageRecord": ("flasheval.placement.results", "StageRecord"),
    "Compute": ("flasheval.placement.results", "Compute"),
    "Timing": ("flasheval.placement.results", "Timing"),
    "Tier": ("flasheval.placement.tiers", "Tier"),
    "CheckpointResult": ("flasheval.sweeps.schedule", "CheckpointResult"),
    "SweepStage": ("flasheval.sweeps.schedule", "SweepStage"),
    "OrderEntry": ("flasheval.sweeps.schedule", "OrderEntry"),
    "BacktestResult": ("flasheval.analysis.backtest", "BacktestResult"),
    "BacktestRow": ("flasheval.analysis.backtest", "BacktestRow"),
    "MethodSummary": ("flasheval.analysis.backtest", "MethodSummary"),
    "SeedSummary": ("flasheval.analysis.backtest", "SeedSummary"),
    "DiorReport": ("flasheval.analysis.dior", "DiorReport"),
    "DiorSummary": ("flasheval.stats.dior", "DiorSummary"),
    "LeaderChange": ("flasheval.stats.dior_pool", "LeaderChange"),
    # what the API takes: a backend as the model (place, evaluate, sweep, build_reference, lm_eval), a sweep's executor
    "Backend": ("flasheval.engine.base", "Backend"),
    "BackendInfo": ("flasheval.engine.base", "BackendInfo"),
    "Executor": ("flasheval.sweeps.executor", "Executor"),
    "InProcessExecutor": ("flasheval.sweeps.executor", "InProcessExecutor"),
    "RayExecutor": ("flasheval.cluster.executor", "RayExecutor"),
    "Round": ("flasheval.sweeps.rounds", "Round"),
    "RoundRequest": ("flasheval.sweeps.rounds", "RoundRequest"),
}

__all__ = [*_LAZY, "FlashevalError", "InputError", "__version__"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'flasheval' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
