"""Writing a reference folder: score matrices (or a long frame) checked and written atomically.

:func:`write_scores` validates :class:`~flasheval.reference.matrices.ScoreMatrices` with the rules
:func:`~flasheval.reference.leaderboard.load_reference` applies (and the scores against the metric's range),
writes ``scores.parquet`` (streamed, one row group per block of rows) and ``manifest.json`` into a
temporary sibling folder, loads it back once and renames it into place: a failure leaves no folder behind,
and a failed replacement leaves the old reference whole. :func:`write_reference` does the same for a long
frame in memory. The manifest lists, by name, the models the default policy leaves out (``dropped_models``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flasheval.errors import InputError
from flasheval.hashing import file_sha256
from flasheval.atomic import atomic_write_text
from flasheval.reference.leaderboard import SCORES_FILE, _load, pool
from flasheval.reference.manifest import MANIFEST_FILE, ReferenceManifest
from flasheval.reference.long_table import frame_matrices, write_long_table
from flasheval.reference.matrices import UNIT_METRICS, DroppedModel, ScoreMatrices, shown, such_rows
from flasheval.stats.ranking import check_random_baselines

__all__ = ["UNIT_METRICS", "WrittenReference", "write_reference", "write_scores"]

_UNIT_WORDS = re.compile(r"0/1|accuracy|correctness|exact[_ ]match", re.IGNORECASE)


@dataclass(frozen=True, slots=True, kw_only=True)
class WrittenReference:
    """What was written: the folder, and the pool as the written missing-data policy loads it."""

    path: Path
    n_models: int
    dataset_names: tuple[str, ...]
    n_examples: int
    excluded: tuple[tuple[str, str], ...]
    """``(model or dataset, reason)`` the policy leaves out."""
    missing_policy: str
    """``complete-models``, or ``common-datasets`` where fewer than 2 models have every dataset."""
    dropped_models: tuple[DroppedModel, ...]
    """Models lacking scores others have (left out by ``complete-models``), as the manifest lists them."""


def _check_score_range(matrices: ScoreMatrices, path: Path | None, metric: str) -> None:
    """Refuse a score outside ``[0, 1]`` where the metric is declared or plainly 0/1 (a continuous one passes).

    What declares it: a per-row ``metric`` naming one of :data:`UNIT_METRICS`; else the manifest's
    ``metric`` text (``0/1``, ``accuracy``, ``correctness``, ``exact match``); else the data itself,
    when every other score is exactly 0 or 1. A ``metric`` text with the word ``continuous`` declares
    the scores unbounded.
    """
    r = matrices.score_range
    if re.search(r"\bcontinuous\b", metric, re.IGNORECASE) or not r.n_outside:
        return
    if r.has_metric:
        row, n = r.first_unit_outside, r.n_unit_outside
        why = f"metric {row.metric!r} is per-example 0/1 or accuracy" if row else ""
    elif _UNIT_WORDS.search(metric):
        row, n, why = r.first_outside, r.n_outside, f"the metric is {metric!r}"
    elif r.others_binary and r.n_outside <= max(1, r.n_rows // 100):
        row, n, why = r.first_outside, r.n_outside, "every other score is 0 or 1"
    else:
        return
    if row is not None:
        raise InputError(f"{row.where}score {shown(row.score)} for {row.model} / {row.dataset} / {row.example_id} is "
                         f"outside [0, 1] ({why}; {such_rows(n)}); fix the data, or for a continuous metric say so in "
                         "the metric description (e.g. --metric-description 'continuous ...')", path=path,
                         field="score")


def _check_names(matrices: ScoreMatrices, where: Path | None) -> None:
    """Refuse an empty model or dataset name, or one with a control character (a newline breaks every listing and
    record of it), spaces around it, or a character that does not print (a look-alike of another name)."""
    for field, names in (("model", matrices.model_ids), ("dataset", matrices.dataset_names)):
        for name in names:
            if not name.strip() or name != name.strip() or not name.isprintable():
                raise InputError(f"{field} name {name!r} is empty, has spaces around it or a character that does not "
                                 "print (a newline, a control or zero-width character); fix the name in the data",
                                 path=where, field=field)


def write_reference(folder: str | os.PathLike[str], frame: pd.DataFrame, *, name: str, source: str, licence: str,
                    metric: str, higher_is_better: bool = True, aggregate: str = "mean",
                    random_baselines: Mapping[str, float] | None = None, built_with: str = "",
                    build: Mapping[str, Any] | None = None, notes: str = "",
                    input_path: str | os.PathLike[str] | None = None) -> Path:
    """Validate a long frame and write ``scores.parquet`` (zstd) + ``manifest.json`` into ``folder``.

    The frame becomes score matrices (:func:`~flasheval.reference.long_table.frame_matrices`, with the
    checks of :func:`load_reference`) and is written by :func:`write_scores`. ``input_path``: the file
    the frame was read from, named by every error (its rows by their 1-based number, or by the frame's
    ``FILE:LINE`` index labels).
    """
    matrices = frame_matrices(frame, path=None if input_path is None else Path(input_path))
    return write_scores(folder, matrices, name=name, source=source, licence=licence, metric=metric,
                        higher_is_better=higher_is_better, aggregate=aggregate, random_baselines=random_baselines,
                        built_with=built_with, build=build, notes=notes).path


def write_scores(folder: str | os.PathLike[str], matrices: ScoreMatrices, *, name: str, source: str, licence: str,
                 metric: str, higher_is_better: bool = True, aggregate: str = "mean",
                 random_baselines: Mapping[str, float] | None = None, built_with: str = "",
                 build: Mapping[str, Any] | None = None, notes: str = "") -> WrittenReference:
    """Validate score matrices and write them as the reference ``folder`` (see the module docstring).

    Everything is checked before anything is written: the scores against the range of ``metric``
    (:func:`_check_score_range`), the centered aggregate's random baselines, and that at least one
    missing-data policy gives a usable reference. The written folder is then loaded back once (float32,
    streamed) before it is renamed into place; an existing reference ``folder`` is replaced (files of
    its own beside the reference's are kept). Errors name ``matrices.source``, the input.

    Returns
    -------
    WrittenReference
        The folder and the pool as loaded back, with the models the default policy drops, by name.
    """
    out = Path(folder)
    where = matrices.source
    _check_names(matrices, where)
    _check_score_range(matrices, where, metric)
    if not matrices.n_rows:
        raise InputError("no rows: a reference needs scores of at least 2 models", path=where)
    dropped = matrices.dropped_models()
    counts = {d: len(ids) for d, ids in zip(matrices.dataset_names, matrices.example_ids)}
    manifest = ReferenceManifest(
        name=name, source=source, licence=licence, metric=metric, higher_is_better=higher_is_better,
        aggregate=aggregate, example_counts=counts, files={SCORES_FILE: ""},
        random_baselines=dict(random_baselines) if random_baselines else None, built_with=built_with,
        build=dict(build) if build else None, notes=notes, dropped_models=tuple(d.to_json() for d in dropped),
    )
    if aggregate == "centered":
        try:
            check_random_baselines(sorted(counts), random_baselines)
        except InputError as exc:
            raise InputError(f"{exc.reason}: the centered aggregate needs one per dataset (a JSON file "
                             "{dataset: chance score})", field="--random-baselines") from None
    policy = _usable_policy(matrices, name, where or out)
    _check_replaceable(out)
    tmp = out.parent / f".{out.name}.partial-{secrets.token_hex(4)}"
    try:
        tmp.mkdir(parents=True)
    except OSError as exc:
        raise InputError(f"cannot write the reference here ({exc.strerror or exc})", path=out) from None
    try:
        write_long_table(tmp / SCORES_FILE, matrices)
        manifest = replace(manifest, files={SCORES_FILE: file_sha256(tmp / SCORES_FILE)})
        atomic_write_text(tmp / MANIFEST_FILE, json.dumps(manifest.to_json(), indent=2, sort_keys=True) + "\n")
        back = _load(tmp, missing=policy, dtype=np.float32)
        _move_into_place(tmp, out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise InputError(f"cannot write the reference ({exc.strerror or exc})", path=out) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return WrittenReference(path=out, n_models=back.n_models, dataset_names=back.dataset_names,
                            n_examples=sum(len(e) for e in back.example_ids), excluded=back.excluded,
                            missing_policy=policy, dropped_models=dropped)


def _usable_policy(matrices: ScoreMatrices, name: str, where: Path) -> str:
    """The first missing-data policy that gives a usable reference; the default policy's error if none does."""
    try:
        pool(matrices, name, "complete-models", where=where)
        return "complete-models"
    except InputError as first:
        try:
            pool(matrices, name, "common-datasets", where=where)
        except InputError:
            raise first from None
    return "common-datasets"


def _check_replaceable(out: Path) -> None:
    """Refuse to replace something that is not a reference folder (a file, a folder of other things)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise InputError("exists and is not a folder; choose another name or output folder", path=out)
    names = {p.name for p in out.iterdir()}
    if names and MANIFEST_FILE not in names and not names <= {SCORES_FILE}:
        raise InputError(f"folder exists and holds no reference ({len(names)} other entries); choose another name "
                         "or output folder, or empty it", path=out)


def _move_into_place(tmp: Path, out: Path) -> None:
    """Rename the written folder ``tmp`` to ``out``, replacing a reference there (its other files are kept)."""
    if not out.exists():
        os.rename(tmp, out)
        return
    for entry in out.iterdir():
        if entry.name not in (SCORES_FILE, MANIFEST_FILE):
            (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, tmp / entry.name)
    old = out.parent / f".{out.name}.old-{secrets.token_hex(4)}"
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)
