"""``flasheval.build_reference``: score real models on the same examples and write a reference from them.

The one path behind ``flasheval reference build``, for both engines: ``flasheval`` (DCLM-format
task suites, :class:`~flasheval.reference.build_setups.TaskFileBuild`) and ``lm-eval`` (lm-eval tasks through
lm-eval's task code, :class:`~flasheval.reference.build_setups.LmEvalTaskBuild`), scored by one loop
(:func:`flasheval.reference.building.build_models`). Every check that needs no weights runs first; every
model goes through one results store (a killed build resumes); the reference folder and the build log are
written only once every model is scored, by the main process of a launch, with the same files and fields
from either engine.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.api.options import EngineOptions, engine_options
from flasheval.api.progress import ProgressCallback, Reporter, check_progress
from flasheval.cluster.executor import RayExecutor, resolve_executor
from flasheval.checks import check_dtype, check_flag, check_n_examples, check_name, check_output, check_seed
from flasheval.engine.coordination.distributed import check_distributed, is_main, processes
from flasheval.engine.base import Backend
from flasheval.engine.loading import BackendModel
from flasheval.engine.specs import NamedModel, check_model_files, parse_named_models
from flasheval.errors import InputError
from flasheval.reference.build_setups import LmEvalTaskBuild, TaskFileBuild
from flasheval.reference.building import BuildSetup, build_models, write_build
from flasheval.reference.scoring.live import LiveOptions
from flasheval.records.run_record import prepare_output
from flasheval.reference import MANIFEST_FILE, ReferenceLeaderboard, load_reference, references_root
from flasheval.tasks import load_live_tasks, load_suite

__all__ = ["BuiltReference", "build_reference", "ENGINES"]

ENGINES = ("flasheval", "lm-eval")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class BuiltReference:
    """What :func:`build_reference` returns."""

    path: Path
    """The reference folder written."""
    reference: ReferenceLeaderboard | None
    """The reference, read back (``None`` on the other processes of a launch)."""
    seconds: Mapping[str, float]
    """Per model, wall seconds (load included)."""
    computed: Mapping[str, int]
    """Per model, requests computed now (the rest came from the store)."""
    store_dir: Path
    log_path: Path | None = None
    """The build log (``build.json`` in the work folder; ``None`` on the other processes of a launch)."""


def _model_reporter(report: Reporter) -> Any:
    """The build's ``on_model``: a ``model`` event as each model is scored."""

    def on_model(model_id: str, done: int, total: int, seconds: float, computed: int) -> None:
        how = f"{computed} requests computed" if computed else "every request from the store, weights not loaded"
        report("model", f"model {done}/{total} {model_id}: scored in {seconds:.1f} s ({how})", done=done, total=total,
               seconds=seconds)

    return on_model


def _models(models: Sequence[Any]) -> tuple[NamedModel | BackendModel, ...]:
    if isinstance(models, str) or not models:
        raise InputError("give a non-empty list of model specs", field="--models")
    given = [BackendModel(backend=m) if isinstance(m, Backend) else m for m in models]  # an opened backend
    if not all(isinstance(m, (str, NamedModel, BackendModel)) for m in given):
        raise InputError("a reference is built from model specs ([NAME=]hf:... / gguf:...), NamedModel objects or "
                         "opened backends (flasheval.engine.base.Backend)", field="--models")
    parsed = iter(parse_named_models([m for m in given if isinstance(m, str)]))
    named = tuple(next(parsed) if isinstance(m, str) else m for m in given)
    ids = [m.model_id for m in named]
    dup = sorted({m for m in ids if ids.count(m) > 1})
    if dup:
        raise InputError(f"model names {dup} appear twice (name them with NAME=SPEC or BackendModel(name=...))",
                         field="--models")
    if len(named) < 2:  # before any model is scored: a reference ranks models against each other
        raise InputError(f"a reference needs at least 2 models, got {len(named)} ({', '.join(m.model_id for m in named)})",
                         field="--models")
    return named


def _task_names(suite: str, tasks: Any) -> tuple[str, ...]:
    names = load_suite(suite).task_names
    if not tasks:
        return names
    wanted = tuple(t.strip() for t in (tasks.split(",") if isinstance(tasks, str) else tasks) if t.strip())
    outside = [t for t in wanted if t not in names]
    if outside or not wanted:
        raise InputError(f"tasks {outside} are not in suite {suite!r}", field="--tasks", allowed=names)
    return wanted


def build_reference(
    models: Sequence[str | NamedModel | Backend],
    *,
    name: str,
    harness: str = "flasheval",
    suite: str | None = None,
    tasks: str | Sequence[str] | None = None,
    task_dir: str | Path | None = None,
    include_path: str | Path | None = None,
    num_fewshot: int | None = None,
    fewshot_seed: int = 1234,
    metric: str | None = None,
    n_examples: int | None = None,
    seed: int = 1234,
    engine: EngineOptions | None = None,
    prefix_space: bool = True,
    output: str | Path | None = None,
    work_dir: str | Path | None = None,
    force: bool = False,
    argv: Sequence[str] | None = None,
    progress: ProgressCallback | None = None,
    distributed: str = "main",
    executor: RayExecutor | str | None = None,
) -> BuiltReference:
    """Score every model on the same examples and write the reference ``name``.

    Parameters
    ----------
    models
        ``[NAME=]hf:PATH_OR_ID`` / ``[NAME=]gguf:FILE`` specs (or :class:`~flasheval.engine.specs.NamedModel`), or
        opened backends (:class:`~flasheval.engine.base.Backend`, named by their spec; or
        :class:`~flasheval.engine.loading.BackendModel` with ``name=``), each scored as it was opened.
    name
        The reference's name (its folder under ``output``).
    harness
        Which harness scores the tasks (``engine`` is how the models run): ``flasheval``: a DCLM-format
        ``suite`` (``tasks`` a subset) from ``task_dir``. ``lm-eval``: lm-eval task names
        in ``tasks``, with ``include_path``, ``num_fewshot``, ``fewshot_seed`` and ``metric``.
    n_examples, seed
        Examples per task: the first N of the order seeded by ``seed`` (default: all).
    engine
        How the models run (:class:`~flasheval.api.options.EngineOptions`): ``dtype`` (default ``float32``;
        pinned in the reference, placements must use it; ``auto`` is refused), ``device``, ``batch_size``
        (default 32), and ``device_map`` / ``max_memory`` / ``offload_folder`` for models larger than one GPU
        (not recorded in the reference: they do not change the scores).
    prefix_space
        ``flasheval`` engine: prepend a space to continuations (``False`` for SentencePiece-only pools).
    output, work_dir, force
        Where ``name/`` is written (default ``$FLASHEVAL_REFERENCES`` or ``reference_rankings/``); the results
        store and build log ``build.json``, from either engine (default ``runs/reference-build-NAME``); overwrite
        an existing reference.
    argv
        The command's arguments, recorded in the manifest as how it was built (default: this call).
    progress
        Called with a :class:`~flasheval.api.progress.Progress` when the build starts and as each model is
        scored (step ``model``: models done and in all, its seconds; a model every request of which is in
        the store is never loaded).
    distributed
        ``"main"`` (default) or ``"all"``: who scores (section "Distributed" below; docs/engine.md, "Several processes").
    executor
        ``None`` / ``"in-process"`` (default): the models in turn in this process. ``"ray"`` or a
        :class:`~flasheval.cluster.executor.RayExecutor`: every model at once on a Ray cluster, one actor per model
        (specs only), the files written here equal to a build in this process, seconds aside (docs/cluster.md).

    Distributed
    -----------
    ``distributed="main"``: only the calling process scores, with no collective and ``torch.distributed`` untouched
    (rank 0 of a training job may call alone while the others carry on). ``"all"``: collective; every process of the
    caller's default group makes this same call, the work is split across them and every process gets the same
    result (refused in one line when no group is initialised). Only the main process writes the reference and the build log; the others return ``reference=None`` once it is written.
    """
    check_distributed(distributed)
    if harness not in ENGINES:
        raise InputError(f"unknown harness {harness!r}", field="--harness", allowed=ENGINES)
    check_n_examples(n_examples)
    engine = engine_options(engine)
    dtype = check_dtype(engine.dtype or "float32", why=" (a reference pins its dtype)")
    engine.refuse("evaluate and lm_eval only (a reference's models are scored as it records)", "max_length")
    device, batch_size, placement = engine.device, engine.batch_size, engine.placement
    check_seed(seed)
    check_name(name, what="reference name")
    check_output(output, field="--output")
    check_output(work_dir, field="--work-dir")
    check_flag(force, field="--force")
    check_flag(prefix_space, field="--no-prefix-space")
    check_progress(progress)
    remote = resolve_executor(executor)
    named = _models(models)
    if remote is not None and (distributed != "main" or not all(isinstance(m, NamedModel) for m in named)):
        raise InputError("the Ray executor opens every model from its spec, from one process (distributed='main'); "
                         "an opened backend is scored in this process", field="executor")
    out = references_root(None if output is None else str(output)) / name
    if (out / MANIFEST_FILE).exists() and not force:
        raise InputError("reference already exists (use --force to overwrite)", path=out)
    work = Path(work_dir or Path("runs") / f"reference-build-{name}")
    report = Reporter(progress)
    recorded = ("flasheval " + " ".join(shlex.quote(a) for a in argv)) if argv is not None \
        else f"flasheval.build_reference(name={name!r})"
    if harness == "lm-eval":
        setup: BuildSetup = _lmeval_setup(named, tasks, include_path=include_path, num_fewshot=num_fewshot,
                                          fewshot_seed=fewshot_seed, metric=metric, n_examples=n_examples, seed=seed,
                                          dtype=dtype, suite=suite, task_dir=task_dir, prefix_space=prefix_space)
    else:
        setup = _task_file_setup(named, tasks, suite=suite, task_dir=task_dir, include_path=include_path,
                                 num_fewshot=num_fewshot, metric=metric, n_examples=n_examples, seed=seed, dtype=dtype,
                                 prefix_space=prefix_space)
    _check_writable(out, work)
    state = processes(distributed)
    report.is_main = is_main(state)
    report("start", f"building {name}: {len(named)} models x {setup.describe_tasks()}"
                    + ("" if remote is None else " " + remote.describe()))
    result = build_models(setup, named, store_dir=work / "store", state=state, on_model=_model_reporter(report),
                          options=LiveOptions(device=device, batch_size=batch_size, device_map=placement),
                          executor=remote)
    log = None
    if report.is_main:
        log = write_build(out, result, setup, name=name, work_dir=work, built_with=recorded)
    if state is not None:
        state.wait_for_everyone("waiting for the main process to write the reference")
    return BuiltReference(path=out, reference=load_reference(out) if report.is_main else None, seconds=result.seconds,
                          computed=result.computed, store_dir=work / "store", log_path=log)


def _task_file_setup(models: Sequence[NamedModel], tasks: Any, *, suite: str | None, task_dir: Any, include_path: Any,
                     num_fewshot: int | None, metric: str | None, n_examples: int | None, seed: int, dtype: str,
                     prefix_space: bool) -> TaskFileBuild:
    """Engine ``flasheval``: every check of its options, then the suite's tasks loaded from ``task_dir``."""
    for option, value in (("include_path", include_path), ("num_fewshot", num_fewshot), ("metric", metric)):
        if value is not None:
            raise InputError("applies to --engine lm-eval only", field="--" + option.replace("_", "-"))
    for option, value in (("suite", suite), ("task_dir", task_dir)):
        if not value:
            raise InputError("required with --engine flasheval", field="--" + option.replace("_", "-"))
    task_list = load_live_tasks(_task_names(str(suite), tasks), str(task_dir))
    check_model_files([m for m in models if isinstance(m, NamedModel)])
    return TaskFileBuild(suite=load_suite(str(suite)), tasks=tuple(task_list), seed=seed, n_examples=n_examples,
                         dtype=dtype, prefix_space=prefix_space, task_dir=str(Path(str(task_dir)).resolve()))


def _lmeval_setup(models: Sequence[NamedModel], tasks: Any, *, include_path: Any, num_fewshot: int | None,
                  fewshot_seed: int, metric: str | None, n_examples: int | None, seed: int, dtype: str,
                  suite: str | None, task_dir: Any, prefix_space: bool) -> LmEvalTaskBuild:
    """Engine ``lm-eval``: every check of its options, then lm-eval's tasks and each one's docs."""
    from flasheval.lmeval import require_lm_eval

    for option, value in (("suite", suite), ("task_dir", task_dir)):
        if value is not None:
            raise InputError("applies to --engine flasheval only (lm-eval tasks come from --tasks)",
                             field="--" + option.replace("_", "-"))
    if not prefix_space:
        raise InputError("applies to --engine flasheval only (lm-eval tokenizes by its own rules)",
                         field="--no-prefix-space")
    names = [t.strip() for t in (tasks.split(",") if isinstance(tasks, str) else tasks or ()) if t.strip()]
    if not names:
        raise InputError("name the lm-eval tasks to score (comma-separated)", field="--tasks")
    check_seed(fewshot_seed, field="--fewshot-seed")  # as lm_eval checks them; the CLI names them as typed
    check_seed(num_fewshot, field="--num-fewshot")  # a count >= 0, as a seed is
    check_model_files([m for m in models if isinstance(m, NamedModel)])
    require_lm_eval()
    include = str(Path(include_path).resolve()) if include_path else None
    return LmEvalTaskBuild.create(names, include_path=include, num_fewshot=num_fewshot, fewshot_seed=fewshot_seed,
                                  n_examples=n_examples, seed=seed, metric=metric, dtype=dtype)


def _check_writable(out: Path, work: Path) -> None:
    """Before any model is scored: the work folder (results store, log) and the reference's parent folder can be written."""
    prepare_output(work, field="--work-dir")
    prepare_output(out.parent, field="--output-root")
