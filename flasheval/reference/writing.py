"""Writing a reference folder: a long frame of per-example scores checked and written atomically.

:func:`write_reference` validates the frame with the rules :func:`~flasheval.reference.leaderboard.load_reference`
applies (and the scores against the metric's range), writes ``scores.parquet`` and ``manifest.json`` into a
temporary sibling folder, loads it back once and renames it into place: a failure leaves no folder behind, and
a failed replacement leaves the old reference whole.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flasheval.errors import InputError
from flasheval.hashing import file_sha256
from flasheval.records import atomic_write_text
from flasheval.reference.leaderboard import (
    _REQUIRED_COLUMNS,
    MANIFEST_FILE,
    SCORES_FILE,
    ReferenceManifest,
    _assemble,
    _check_frame,
    _row,
    _rows,
    _shown,
    load_reference,
)
from flasheval.stats.ranking import check_random_baselines

__all__ = ["UNIT_METRICS", "write_reference"]

UNIT_METRICS = frozenset({
    "acc", "acc_norm", "accuracy", "correct", "exact_match", "quasi_exact_match", "prefix_exact_match",
    "quasi_prefix_exact_match", "final_number_exact_match", "math_equiv", "math_equiv_chain_of_thought",
})
"""Per-example metrics whose scores lie in ``[0, 1]`` (0/1 correctness, accuracy); a score outside is refused."""
_UNIT_WORDS = re.compile(r"0/1|accuracy|correctness|exact[_ ]match", re.IGNORECASE)

def _check_score_range(df: pd.DataFrame, path: Path | None, metric: str) -> None:
    """Refuse a score outside ``[0, 1]`` where the metric is declared or plainly 0/1 (a continuous one passes).

    What declares it: a per-row ``metric`` column naming one of :data:`UNIT_METRICS`; else the
    manifest's ``metric`` text (``0/1``, ``accuracy``, ``correctness``, ``exact match``); else the
    data itself, when every other score is exactly 0 or 1. A ``metric`` text with the word
    ``continuous`` declares the scores unbounded.
    """
    if re.search(r"\bcontinuous\b", metric, re.IGNORECASE):
        return
    score = df["score"].to_numpy(dtype=np.float64)
    outside = (score < 0.0) | (score > 1.0)
    if not outside.any():
        return
    if "metric" in df.columns:
        names = df["metric"].astype(str).to_numpy()
        outside &= np.isin(names, sorted(UNIT_METRICS))
        why = f"metric {names[outside][0]!r} is per-example 0/1 or accuracy" if outside.any() else ""
    elif _UNIT_WORDS.search(metric):
        why = f"the metric is {metric!r}"
    elif np.isin(score[~outside], (0.0, 1.0)).all() and outside.sum() <= max(1, len(score) // 100):
        why = "every other score is 0 or 1"
    else:
        return
    if outside.any():
        row, where = _row(df, outside)
        raise InputError(f"{where}score {_shown(row['score'])} for {row['model']} / {row['dataset']} / "
                         f"{row['example_id']} is outside [0, 1] ({why}; {_rows(outside)}); fix the data, or for a "
                         "continuous metric say so in the metric description (e.g. --metric-description "
                         "'continuous ...')", path=path, field="score")


def write_reference(folder: str | os.PathLike[str], frame: pd.DataFrame, *, name: str, source: str, licence: str,
                    metric: str, higher_is_better: bool = True, aggregate: str = "mean",
                    random_baselines: Mapping[str, float] | None = None, built_with: str = "",
                    build: Mapping[str, Any] | None = None, notes: str = "",
                    input_path: str | os.PathLike[str] | None = None) -> Path:
    """Validate a long frame and write ``scores.parquet`` (zstd) + ``manifest.json`` into ``folder``.

    The frame is validated with the same rules as :func:`load_reference` before anything is
    written (and its scores against the range of ``metric``, :func:`_check_score_range`); it must
    give a usable reference under at least one missing-data policy. The files are written into a
    temporary sibling folder, loaded back once as a check and renamed into place, so a failure
    leaves no folder behind and never a half-written one; an existing reference ``folder`` is
    replaced (files of its own beside the reference's are kept). ``input_path``: the file the
    frame was read from, named by every error (its rows by their 1-based number).
    """
    out = Path(folder)
    where = None if input_path is None else Path(input_path)
    cols = list(_REQUIRED_COLUMNS) + [c for c in ("n_tokens", "metric") if c in frame.columns]
    absent = [c for c in _REQUIRED_COLUMNS if c not in frame.columns]
    if absent:
        raise InputError(f"missing column (columns found: {', '.join(map(str, frame.columns)) or 'none'})",
                         path=where, field=absent[0], allowed=_REQUIRED_COLUMNS)
    df = _check_frame(frame[cols].copy(), where)
    _check_score_range(df, where, metric)
    df = df.drop(columns=[c for c in ("metric",) if c in df.columns])
    df = df.sort_values(["dataset", "model", "example_id"], kind="stable").reset_index(drop=True)
    if df.empty:
        raise InputError("no rows: a reference needs scores of at least 2 models", path=where)
    counts = {str(d): int(n) for d, n in df.groupby("dataset", sort=True)["example_id"].nunique().items()}
    manifest = ReferenceManifest(
        name=name, source=source, licence=licence, metric=metric, higher_is_better=higher_is_better,
        aggregate=aggregate, example_counts=counts, files={SCORES_FILE: ""},
        random_baselines=dict(random_baselines) if random_baselines else None, built_with=built_with,
        build=dict(build) if build else None, notes=notes,
    )
    if aggregate == "centered":
        try:
            check_random_baselines(sorted(counts), random_baselines)
        except InputError as exc:
            raise InputError(f"{exc.reason}: the centered aggregate needs one per dataset (a JSON file "
                             "{dataset: chance score})", field="--random-baselines") from None
    policy = _usable_policy(df, manifest, out, where)
    _check_replaceable(out)
    table = df.astype({"model": "category", "dataset": "category", "score": np.float32})
    tmp = out.parent / f".{out.name}.partial-{secrets.token_hex(4)}"
    try:
        tmp.mkdir(parents=True)
    except OSError as exc:
        raise InputError(f"cannot write the reference here ({exc.strerror or exc})", path=out) from None
    try:
        table.to_parquet(tmp / SCORES_FILE, compression="zstd", index=False)
        manifest = replace(manifest, files={SCORES_FILE: file_sha256(tmp / SCORES_FILE)})
        atomic_write_text(tmp / MANIFEST_FILE, json.dumps(manifest.to_json(), indent=2, sort_keys=True) + "\n")
        load_reference(tmp, missing=policy)
        _move_into_place(tmp, out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise InputError(f"cannot write the reference ({exc.strerror or exc})", path=out) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _usable_policy(df: pd.DataFrame, manifest: ReferenceManifest, out: Path, where: Path | None) -> str:
    """The first missing-data policy that gives a usable reference; the default policy's error if none does."""
    try:
        _assemble(df, manifest, out, "complete-models", source=where)
        return "complete-models"
    except InputError as first:
        try:
            _assemble(df, manifest, out, "common-datasets", source=where)
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
