"""Import per-example results from other formats into a reference leaderboard folder.

:func:`import_reference` is the one path behind ``flasheval reference import``: it reads the input
streamed into per-dataset score matrices (float32, what a reference stores) and writes the reference
(:func:`~flasheval.reference.writing.write_scores`). Peak memory is about the matrices plus one batch
of parquet rows or one model's lm-eval logs, whatever the number of rows, models or lines; the models
that lack scores others have are listed by name in the manifest (``dropped_models``) and in the result.

Formats
-------
``long-parquet``
    A parquet file with columns ``model``, ``dataset``, ``example_id``, ``score`` (and
    optionally ``n_tokens``), e.g. ``shared/data/reference/*/instances.parquet``; rows can be
    restricted to one ``suite`` column value.
``lm-eval-samples``
    The output folder of lm-evaluation-harness run with ``--log_samples``: files
    ``samples_<task>_<timestamp>.jsonl`` (one JSON object per example with ``doc_id`` and one
    key per metric), either directly in the folder (one model) or in one sub-folder per model.
    The model id is the ``model_name`` of the ``results_*.json`` beside the samples when there is
    one, else the folder name. The dataset is ``<task>``; the example id is ``doc_id``; the
    score is the chosen metric (default: the first of ``acc``, ``exact_match``, ``acc_norm``
    present). When a task was logged twice for a model, the newest file (by timestamp in the
    name) wins. :func:`read_lm_eval_settings` reads, from the ``results_*.json`` files, what a
    live placement needs to score a new model the same way (task configs, few-shot count and
    seed, lm-eval version; :class:`flasheval.lmeval.settings.LmEvalSettings`). Both are read in one
    pass, model by model and line by line (:mod:`flasheval.reference.lmeval_logs`).
``every-eval-ever``
    Every Eval Ever records (schema 0.3.0): aggregate logs (``*.json``) and their instance-level lines
    (``*.jsonl``), a folder of them or one log (:mod:`flasheval.reference.every_eval_ever`). The dataset is an
    evaluation result's ``evaluation_name``, the example id its ``sample_id``, the score ``evaluation.score``
    (``token_usage.total_tokens`` as the token count when every line has it); the metric and its direction are
    the records' (``metric_config``). A result without instance-level data is refused unless a missing-data
    policy is named (``missing``); the manifest's ``source`` says who made the records with what.

:func:`read_long_parquet` and :func:`read_lm_eval_samples` return the same rows as a data frame, for
data small enough to hold as one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from flasheval.checks import check_name, check_output
from flasheval.errors import InputError, UnknownNameError
from flasheval.lmeval.settings import LmEvalSettings
from flasheval.reference.every_eval_ever import EveryEvalEver, scan_every_eval_ever
from flasheval.reference.leaderboard import MISSING_POLICIES, pool, references_root
from flasheval.reference.manifest import MANIFEST_FILE
from flasheval.reference.lmeval_logs import scan_lm_eval_samples
from flasheval.reference.long_table import LONG_COLUMNS, scan_long_table
from flasheval.reference.matrices import to_frame
from flasheval.reference.writing import WrittenReference, write_scores

__all__ = ["IMPORT_FORMATS", "ImportedReference", "check_import_options", "import_reference", "read_long_parquet", "read_lm_eval_samples",
           "read_lm_eval_settings"]

IMPORT_FORMATS: tuple[str, ...] = ("long-parquet", "lm-eval-samples", "every-eval-ever")
_LONG_COLUMNS = LONG_COLUMNS


def read_long_parquet(path: str | Path, *, suite: str | None = None) -> pd.DataFrame:
    """Rows of a long-format parquet file, optionally only those with ``suite == suite``.

    The rows keep the file's row numbers as their index (0-based), so a bad row found later is
    named by its place in the file; a ``metric`` column (per-row metric name) is kept too, for the
    score-range check of :func:`~flasheval.reference.write_reference`, and a ``suite`` column, so an
    error can name the suites a file mixes. The whole file is read into memory: :func:`import_reference`
    streams it instead (:func:`~flasheval.reference.long_table.scan_long_table`).
    """
    p = Path(path)
    if not p.is_file():
        raise InputError("file not found", path=p)
    try:
        df = pd.read_parquet(p)
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", path=p) from None
    except Exception as exc:  # pyarrow raises many types for a non-parquet file
        raise InputError(f"not a readable parquet file ({type(exc).__name__}: {exc})", path=p) from None
    absent = [c for c in _LONG_COLUMNS if c not in df.columns]
    if absent:
        raise InputError(f"missing column{'s' if len(absent) > 1 else ''} {', '.join(map(repr, absent))} (columns "
                         f"found: {', '.join(map(str, df.columns)) or 'none'}); a long table needs "
                         f"{', '.join(_LONG_COLUMNS)}", path=p, field=absent[0])
    if suite is not None:
        if "suite" not in df.columns:
            raise InputError("--suite given but the file has no 'suite' column", path=p, field="suite")
        suites = sorted(map(str, df["suite"].unique()))
        if suite not in suites:
            raise UnknownNameError("suite", suite, suites, path=p)
        df = df[df["suite"].astype(str) == suite]
    keep = [c for c in (*_LONG_COLUMNS, "n_tokens", "metric", "suite") if c in df.columns]
    return df[keep]


def read_lm_eval_samples(folder: str | Path, *, metric: str | None = None) -> pd.DataFrame:
    """Long rows (``model``, ``dataset``, ``example_id``, ``score``, ``metric``) of an lm-evaluation-harness
    ``--log_samples`` output folder (see the module docstring), after every check of the streamed import."""
    logs = scan_lm_eval_samples(folder, metric=metric, dtype=np.float64)
    frame = to_frame(logs.matrices)
    return frame.assign(metric=frame["dataset"].map(dict(logs.metrics)))


def read_lm_eval_settings(folder: str | Path, *, metric: str | None = None,
                          include_path: str = "") -> tuple[LmEvalSettings | None, str]:
    """What a live placement must reproduce, from the ``results_*.json`` beside the samples.

    Returns ``(settings, "")``, or ``(None, reason)`` when a model folder has no results file, or
    one without task configs or lm-eval version (the reference then serves replay only). Models whose
    task configs, few-shot settings, lm-eval versions or prompts differ are refused: their scores would
    not be paired. The logs are read (and checked) as :func:`import_reference` reads them.
    """
    logs = scan_lm_eval_samples(folder, metric=metric, include_path=include_path)
    return logs.settings, logs.no_settings


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportedReference:
    """An imported reference: what was written, and for lm-eval logs the task settings recorded."""

    written: WrittenReference
    settings: LmEvalSettings | None = None
    """lm-eval: the task settings recorded for live placement (``None``: replay only, see ``no_settings``)."""
    no_settings: str = ""
    """lm-eval: why no settings were recorded."""


def check_import_options(source_path: object, source_format: object, suite: object, include_path: object,
                         missing: object = None) -> None:
    """The source's path and format, and the options that apply to one format only, checked before anything is
    read (:func:`flasheval.import_reference` calls it before it reads a baselines file)."""
    if not isinstance(source_path, (str, os.PathLike)) or not str(source_path).strip():
        raise InputError(f"expected the path of a parquet file, an lm-eval output folder or Every Eval Ever records, "
                         f"got {source_path!r}",
                         field="SOURCE")
    if source_format not in IMPORT_FORMATS:
        raise UnknownNameError("import format", source_format, IMPORT_FORMATS, field="--format")
    for option, value, applies in (("--suite", suite, "long-parquet"), ("--include-path", include_path,
                                                                        "lm-eval-samples"),
                                   ("--missing", missing, "every-eval-ever")):
        if value is not None and source_format != applies:
            raise InputError(f"applies to --format {applies} only", field=option)
    if missing is not None and missing not in MISSING_POLICIES:
        raise UnknownNameError("missing-data policy", missing, MISSING_POLICIES, field="--missing")


def import_reference(source_path: str | os.PathLike[str], *, source_format: str, name: str,
                     output: str | os.PathLike[str] | None = None, suite: str | None = None,
                     metric: str | None = None, source: str = "", licence: str = "unknown",
                     metric_description: str = "", higher_is_better: bool = True, aggregate: str = "mean",
                     random_baselines: Mapping[str, float] | None = None, include_path: str | None = None,
                     notes: str = "", force: bool = False, missing: str | None = None) -> ImportedReference:
    """Read a long parquet file, an lm-eval ``--log_samples`` folder or Every Eval Ever records, streamed, and write
    it as reference ``name``.

    Parameters
    ----------
    source_path
        The parquet file (``source_format="long-parquet"``), the lm-eval output folder (``"lm-eval-samples"``), or
        a folder of Every Eval Ever records or one log (``"every-eval-ever"``).
    source_format
        One of :data:`IMPORT_FORMATS`.
    name
        The reference's name: the folder ``NAME/`` written under ``output`` (default
        :func:`~flasheval.reference.references_root`).
    suite
        long-parquet: keep only the rows with this ``suite`` value.
    metric
        lm-eval: the per-sample metric key (default: ``acc``, ``exact_match``, ``acc_norm``); every-eval-ever:
        import only the results of this ``metric_id`` (needed where one dataset is scored with two metrics).
    metric_description
        The manifest's ``metric`` (default: ``metric``, else ``"score"``); see
        :func:`~flasheval.reference.writing.write_scores` for the score-range check it drives.
    include_path
        lm-eval: the folder of the custom task YAMLs the logs were made with (recorded for placement).
    force
        Replace an existing reference ``name``.
    missing
        every-eval-ever: ``None`` refuses a result without instance-level data; ``complete-models`` or
        ``common-datasets`` leaves it out (the model lacks that dataset) and checks that policy gives a pool.
    higher_is_better
        The scores' direction; every-eval-ever: must be the records' (``metric_config.lower_is_better``).

    The other parameters go to the manifest. Peak memory is about the float32 score matrices twice (the
    import and the written reference read back once) plus one batch or one model's logs.
    """
    check_import_options(source_path, source_format, suite, include_path, missing)
    check_name(name, what="reference name")
    check_output(output, field="--output")
    out = references_root(output) / name
    if (out / MANIFEST_FILE).exists() and not force:
        raise InputError("reference already exists (use --force to overwrite)", path=out)
    build, settings, why = None, None, ""
    if source_format == "long-parquet":
        matrices = scan_long_table(source_path, suite=suite, dtype=np.float32)
    elif source_format == "every-eval-ever":
        eee = scan_every_eval_ever(source_path, metric=metric, missing=missing, dtype=np.float32)
        _check_every_eval_ever(eee, higher_is_better, name, missing)
        matrices, source = eee.matrices, source or f"{eee.provenance}; read from {source_path}"
        metric_description = metric_description or _metrics_text(eee.metrics)
        if eee.skipped:  # named in the manifest: a model left out is not lost silently
            notes = (f"{notes} " if notes else "") + (f"Left out under --missing {missing} (no instance-level data): "
                                                      f"{', '.join(eee.skipped)}.")
    else:
        include = str(Path(include_path).resolve()) if include_path else ""
        logs = scan_lm_eval_samples(source_path, metric=metric, include_path=include, dtype=np.float32)
        matrices, settings, why = logs.matrices, logs.settings, logs.no_settings
        build = None if settings is None else settings.to_json()
    built = f"flasheval reference import --format {source_format} {Path(source_path).name}" + (
        f" --suite {suite}" if suite else "") + (f" --metric {metric}" if metric else "") + (
        f" --missing {missing}" if missing else "")
    try:
        written = write_scores(out, matrices, name=name, source=source or str(source_path), licence=licence,
                               metric=metric_description or metric or "score", higher_is_better=higher_is_better,
                               aggregate=aggregate, random_baselines=random_baselines, built_with=built, build=build,
                               notes=notes)
    except InputError as exc:
        if suite is None and len(matrices.suites) > 1 and "--suite" in exc.reason:
            raise InputError(f"{exc.reason}; the file's suites: {', '.join(matrices.suites)}", path=exc.path,
                             line=exc.line, field=exc.field) from None
        raise
    return ImportedReference(written=written, settings=settings, no_settings=why)


def _metrics_text(metrics: Mapping[str, str]) -> str:
    """The manifest's ``metric`` from Every Eval Ever records: the one metric, or each dataset's."""
    names = sorted(set(metrics.values()))
    if len(names) == 1:
        return f"{names[0]} (Every Eval Ever metric_id)"
    return "Every Eval Ever metric_id per dataset: " + "; ".join(f"{d}: {m}" for d, m in metrics.items())


def _check_every_eval_ever(eee: EveryEvalEver, higher_is_better: bool, name: str, missing: str | None) -> None:
    """The direction given against the records', and the missing-data policy named against the pool it leaves."""
    if eee.higher_is_better != higher_is_better:
        says = "lower" if eee.higher_is_better is False else "higher"
        raise InputError(f"the records say {says} is better (metric_config.lower_is_better "
                         f"{not eee.higher_is_better}); {'pass' if says == 'lower' else 'leave out'} --lower-is-better",
                         path=eee.matrices.source, field="--lower-is-better")
    if missing is not None:
        pool(eee.matrices, name, missing, where=eee.matrices.source)
