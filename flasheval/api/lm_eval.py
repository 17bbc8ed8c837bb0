"""``flasheval.lm_eval``: run lm-evaluation-harness tasks with flasheval's engine as the model.

The one path behind ``flasheval lm-eval``: lm-eval's ``run`` with the model replaced by a flasheval
spec: the same task options and output files (lm-eval's ``EvaluationTracker``), and flasheval's
engine underneath (shared-context scoring, a crash-safe results store, data parallelism over the caller's
processes with ``distributed="all"``). lm-eval is imported only when the call runs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.api.options import EngineOptions, engine_options
from flasheval.checks import LOAD_DTYPES, check_dtype, check_flag, check_limit, check_output, check_seed, name_list
from flasheval.engine import NamedModel, check_model_files, parse_named_models
from flasheval.engine.base import Backend
from flasheval.engine.loading import BackendModel
from flasheval.engine.coordination.distributed import check_distributed, processes
from flasheval.errors import InputError
from flasheval.records.run_record import default_run_folder

__all__ = ["LmEvalRun", "lm_eval"]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class LmEvalRun:
    """What :func:`lm_eval` returns."""

    results: Mapping[str, Any] | None
    """lm-eval's results (``None`` on the other processes of a launch)."""
    n_requests: int
    n_computed: int
    """Requests computed now (the rest came from the store)."""
    store: Path
    seconds: float
    is_main_process: bool = True


def lm_eval(
    model: str | Backend,
    *,
    tasks: str | Sequence[str],
    include_path: str | Path | None = None,
    num_fewshot: int | None = None,
    fewshot_seed: int = 1234,
    limit: float | None = None,
    log_samples: bool = False,
    output: str | Path | None = None,
    store: str | Path | None = None,
    engine: EngineOptions | None = None,
    progress: bool | None = None,
    distributed: str = "main",
) -> LmEvalRun:
    """Run the lm-eval ``tasks`` with ``model`` (``[NAME=]hf:PATH_OR_ID`` / ``[NAME=]gguf:FILE``, or an opened
    :class:`~flasheval.engine.base.TokenBackend` such as ``open_backend(spec)``'s, scored as it was opened: lm-eval's
    maximum length then defaults to one less than the backend's).

    Parameters
    ----------
    tasks
        lm-eval task names, a list or ``"t1,t2"``.
    include_path, num_fewshot, fewshot_seed, limit, log_samples, output
        lm-eval's options: custom task YAMLs, few-shot count (default: each task's), the few-shot sampler's
        seed, the first N docs (or a fraction) per task, per-sample logs (needs ``output``), and the
        folder of lm-eval's output files (``None``: none written; lm-eval's own ``--output_path``).
    store
        The results store (default ``OUTPUT/store``, else ``runs/lm-eval-MODEL/store``).
    engine
        How the model runs (:class:`~flasheval.api.options.EngineOptions`; dtype default ``float32``,
        device ``auto``, batches sized for the device (``engine.batching.auto_limits``), ``max_length`` default
        the model config's).
    progress
        A bar on stderr per forward batch: ``None`` shows it when stderr is a terminal, ``True``/``False``
        (:func:`~flasheval.api.progress.split_progress`; lm-eval's runs send no events, so no callable).
    distributed
        ``"main"`` (default) or ``"all"``: who scores (section "Distributed" below; docs/engine.md, "Several processes").

    Distributed
    -----------
    ``distributed="main"``: only the calling process scores, with no collective and ``torch.distributed`` untouched
    (rank 0 of a training job may call alone while the others carry on). ``"all"``: collective; every process of the
    caller's default group makes this same call, the work is split across them and every process gets the same
    result (refused in one line when no group is initialised). Only the main process writes ``output`` and gets ``results``; the others get ``results=None``.
    """
    check_distributed(distributed)
    from flasheval.lmeval import require_lm_eval

    check_limit(limit)
    check_seed(fewshot_seed, field="--fewshot-seed")  # flasheval's spellings; the CLI names an option as typed
    check_seed(num_fewshot, field="--num-fewshot")  # a count >= 0, as a seed is
    check_output(output, field="--output-path")
    if progress is not None and not isinstance(progress, bool):
        raise InputError(f"must be True, False or None (a bar per forward batch), got {type(progress).__name__}",
                         field="progress")
    check_output(store, field="--store")
    check_flag(log_samples, field="--log-samples")
    engine = engine_options(engine)
    if log_samples and not output:
        raise InputError("--log-samples needs --output-path (where lm-eval writes the samples)", field="--log-samples")
    names = name_list(tasks, field="--tasks", what="task", unique=False)
    named: NamedModel | BackendModel
    if isinstance(model, (Backend, BackendModel)):  # an opened backend: scored as it is, its own dtype and device
        named = model if isinstance(model, BackendModel) else BackendModel(backend=model)
        fixed = [n for n in engine.given() if n not in ("dtype", "max_length")]
        if fixed:
            raise InputError("an opened backend runs as it is (its device and batch size)",
                             field="--" + fixed[0].replace("_", "-"))
        dtype = check_dtype(engine.dtype, allowed=LOAD_DTYPES) if engine.dtype else "auto"
    elif isinstance(model, str):
        named = parse_named_models([model], field="--model")[0]
        dtype = check_dtype(engine.dtype or "float32", allowed=LOAD_DTYPES)
        check_model_files([named], field="--model")
    else:
        raise InputError(f"expected a model spec ([NAME=]hf:... / gguf:...) or an opened backend, got "
                         f"{type(model).__name__}", field="--model")
    require_lm_eval()  # every argument checked first: a bad one is named whether or not lm-eval is installed
    placement = engine.placement
    from flasheval.lmeval.loading import open_lmeval_model
    from flasheval.lmeval.tasks import make_task_manager, run_tasks

    manager = make_task_manager(None if include_path is None else str(include_path), names)
    folder = Path(store or (Path(output) / "store" if output else
                            default_run_folder("lm-eval", named.model_id) / "store"))
    start = time.perf_counter()
    opened = open_lmeval_model(named, folder, dtype=dtype, device=engine.device or "auto",
                               batch_size=engine.batch_size, max_length=engine.max_length,
                               progress_bar=progress, device_map=placement, state=processes(distributed))
    tracker = None
    if output and opened.is_main_process:
        from lm_eval.loggers import EvaluationTracker

        tracker = EvaluationTracker(output_path=str(output))
    try:
        results = run_tasks(opened.lm, list(names), task_manager=manager, num_fewshot=num_fewshot, limit=limit,
                            fewshot_seed=fewshot_seed, log_samples=log_samples, evaluation_tracker=tracker,
                            model_args=f"pretrained={named.model_id}")
    finally:
        opened.close()
    main = opened.is_main_process and results is not None
    if main and tracker is not None:
        samples = results.pop("samples", None)
        tracker.save_results_aggregated(results=results, samples=samples)
        if log_samples and samples:
            for task_name in results["configs"]:
                tracker.save_results_samples(task_name=task_name, samples=samples[task_name])
    return LmEvalRun(results=results if main else None, n_requests=opened.lm.n_requests,
                     n_computed=opened.cached.n_computed, store=folder, seconds=time.perf_counter() - start,
                     is_main_process=opened.is_main_process)
