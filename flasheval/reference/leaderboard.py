"""Reference leaderboards: per-example scores of a fixed pool of models, validated on load.

A reference lives in a folder ``<name>/`` holding

- ``scores.parquet``: long table, one row per (model, dataset, example): columns ``model``,
  ``dataset``, ``example_id`` (strings), ``score`` (float) and optionally ``n_tokens`` (int,
  tokens the model processed for that example, used for compute accounting in replay);
- ``manifest.json``: source, licence, metric, direction, default aggregate, per-dataset
  example counts, optional random baselines, the sha256 of every data file, how it was built
  and an optional ``build`` dict (settings of a reference built from task suites).

Validation policy (refused in one line naming file, field and value):

- checksums must match the manifest; unknown or missing manifest keys are refused;
- a (model, dataset, example_id) appearing twice is refused;
- a model that has *some* but not all examples of a dataset is refused (missing cells);
- a model that lacks a *whole* dataset is handled by the ``missing`` policy, never silently:
  ``"complete-models"`` (default) keeps the models that have every dataset and lists the others
  as excluded; ``"common-datasets"`` keeps every model and only the datasets all of them have
  (the dropped datasets are listed).

This is the only module that reads or writes reference files (imports from other formats are
in :mod:`flasheval.reference.importing`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flasheval.errors import InputError, UnknownNameError
from flasheval.hashing import file_sha256
from flasheval.records import atomic_write_text
from flasheval.stats.ranking import aggregate as _aggregate
from flasheval.stats.ranking import check_aggregate, competition_ranks

__all__ = [
    "MISSING_POLICIES",
    "ReferenceManifest",
    "ReferenceLeaderboard",
    "RankedModel",
    "resolve_reference",
    "load_reference",
    "write_reference",
    "repo_root",
    "references_root",
    "MANIFEST_FILE",
    "SCORES_FILE",
]

FORMAT_VERSION = 1
MISSING_POLICIES: tuple[str, ...] = ("complete-models", "common-datasets")
SCORES_FILE = "scores.parquet"
MANIFEST_FILE = "manifest.json"
_REQUIRED_COLUMNS = ("model", "dataset", "example_id", "score")
_MANIFEST_KEYS = {
    "format_version", "name", "source", "licence", "metric", "higher_is_better", "aggregate",
    "example_counts", "random_baselines", "files", "built_with", "build", "notes",
}
_MANIFEST_REQUIRED = {"format_version", "name", "source", "licence", "metric", "higher_is_better",
                      "aggregate", "example_counts", "files"}


def repo_root() -> Path:
    """The parent of the ``flasheval`` package folder (the checkout, installed editable)."""
    return Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ReferenceManifest:
    """What ``manifest.json`` says about a reference."""

    name: str
    """Short name of the reference (the folder name)."""
    source: str
    """Where the numbers come from (repository, commit, paper)."""
    licence: str
    """Licence of the underlying data."""
    metric: str
    """What ``score`` measures, in words."""
    higher_is_better: bool
    """Direction of ``score``."""
    aggregate: str
    """Default aggregate over datasets (see :mod:`flasheval.stats.ranking`)."""
    example_counts: Mapping[str, int]
    """Number of distinct examples per dataset."""
    files: Mapping[str, str]
    """sha256 of each data file, by file name."""
    random_baselines: Mapping[str, float] | None = None
    """Chance-level score per dataset, for the centered aggregate."""
    built_with: str = ""
    """How the reference was built (command, conversion)."""
    build: Mapping[str, Any] | None = None
    """Build settings for references built from task suites (free-form)."""
    notes: str = ""
    """Caveats a user should read."""
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        check_aggregate(self.aggregate)
        if not self.example_counts:
            raise InputError("no datasets", field="example_counts")

    def to_json(self) -> dict[str, Any]:
        """The manifest as a JSON-ready dict."""
        return {k: (dict(v) if isinstance(v, Mapping) else v) for k in sorted(_MANIFEST_KEYS)
                if (v := getattr(self, k)) is not None}


@dataclass(frozen=True, slots=True, kw_only=True)
class RankedModel:
    """One row of a reference ranking."""

    rank: int
    """Competition rank (1 = best)."""
    model_id: str
    value: float
    """The aggregate."""
    dataset_means: tuple[float, ...]
    """Per-dataset mean score, in the leaderboard's dataset order."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ReferenceLeaderboard:
    """A validated pool of reference models with per-example scores.

    Score matrices are per dataset, ``(n_models, n_examples)``, rows in ``model_ids`` order and
    columns in ``example_ids[d]`` order (sorted ids).
    """

    name: str
    manifest: ReferenceManifest
    model_ids: tuple[str, ...]
    """Models in the pool (after the missing-data policy)."""
    dataset_names: tuple[str, ...]
    example_ids: tuple[tuple[str, ...], ...]
    """Example ids of each dataset (sorted)."""
    scores: tuple[np.ndarray, ...]
    """Per dataset, float64 ``(n_models, n_examples)``."""
    n_tokens: tuple[np.ndarray | None, ...]
    """Per dataset, int64 ``(n_models, n_examples)`` tokens processed, or ``None``."""
    excluded: tuple[tuple[str, str], ...] = ()
    """``(model_id or dataset, reason)`` left out by the missing-data policy."""
    missing_policy: str = "complete-models"
    path: Path | None = None

    def __post_init__(self) -> None:
        if len(self.model_ids) < 2:
            raise InputError(f"reference {self.name!r} needs at least 2 models, has {len(self.model_ids)}")
        if not self.dataset_names:
            raise InputError(f"reference {self.name!r} has no dataset every model covers")
        for d, s in zip(self.dataset_names, self.scores):
            if s.shape[0] != len(self.model_ids):
                raise ValueError(f"scores of {d} have {s.shape[0]} rows for {len(self.model_ids)} models")

    @property
    def n_models(self) -> int:
        return len(self.model_ids)

    @property
    def higher_is_better(self) -> bool:
        return self.manifest.higher_is_better

    def index(self, model_id: str) -> int:
        """Row of ``model_id``; :class:`UnknownNameError` if it is not in the pool."""
        try:
            return self.model_ids.index(model_id)
        except ValueError:
            raise UnknownNameError(f"model in reference {self.name!r}", model_id, self.model_ids) from None

    def dataset_means(self) -> np.ndarray:
        """Per-dataset mean scores, ``(n_models, n_datasets)``."""
        return np.stack([s.mean(axis=1) for s in self.scores], axis=1)

    def aggregate_values(self, kind: str | None = None) -> np.ndarray:
        """The aggregate of each pool model on the full data, ``(n_models,)``."""
        return _aggregate(self.dataset_means(), **self.aggregate_options(kind))

    def aggregate_options(self, kind: str | None = None) -> dict[str, Any]:
        """Keyword arguments for :func:`flasheval.stats.ranking.aggregate` on this reference."""
        return {"kind": kind or self.manifest.aggregate, "higher_is_better": self.higher_is_better,
                "dataset_names": self.dataset_names, "random_baselines": self.manifest.random_baselines}

    def ranking_higher_is_better(self, kind: str | None = None) -> bool:
        """Direction of the aggregate ``kind`` (win rate is always higher-is-better)."""
        return True if (kind or self.manifest.aggregate) == "win_rate" else self.higher_is_better

    def ranking(self, kind: str | None = None) -> tuple[RankedModel, ...]:
        """The full-data ranking of the pool, best first."""
        values = self.aggregate_values(kind)
        ranks = competition_ranks(values, higher_is_better=self.ranking_higher_is_better(kind))
        means = self.dataset_means()
        order = np.lexsort((np.array(self.model_ids), ranks))
        return tuple(RankedModel(rank=int(ranks[i]), model_id=self.model_ids[i], value=float(values[i]),
                                 dataset_means=tuple(float(x) for x in means[i])) for i in order)

    def without(self, model_id: str) -> ReferenceLeaderboard:
        """The same reference with ``model_id`` removed from the pool (for leave-one-out)."""
        keep = np.array([m != model_id for m in self.model_ids])
        if keep.all():
            self.index(model_id)
        return replace(
            self,
            model_ids=tuple(m for m in self.model_ids if m != model_id),
            scores=tuple(s[keep] for s in self.scores),
            n_tokens=tuple(None if t is None else t[keep] for t in self.n_tokens),
        )

    def model_rows(self, model_id: str) -> tuple[tuple[np.ndarray, np.ndarray | None], ...]:
        """Per dataset, the (scores, n_tokens) rows of one pool model."""
        i = self.index(model_id)
        return tuple((s[i], None if t is None else t[i]) for s, t in zip(self.scores, self.n_tokens))


def references_root(override: str | os.PathLike[str] | None = None) -> Path:
    """Where a new reference folder is written: ``override``, else ``$FLASHEVAL_REFERENCES``, else
    ``<repo>/reference_rankings``."""
    return Path(override or os.environ.get("FLASHEVAL_REFERENCES") or repo_root() / "reference_rankings")


def resolve_reference(name: str | os.PathLike[str]) -> Path:
    """Folder of a reference: a path, ``$FLASHEVAL_REFERENCES/NAME`` or ``<repo>/reference_rankings/NAME``."""
    direct = Path(name)
    if direct.is_dir():
        return direct
    roots = [Path(p) for p in (os.environ.get("FLASHEVAL_REFERENCES"),) if p] + [repo_root() / "reference_rankings"]
    for root in roots:
        if (root / str(name)).is_dir():
            return root / str(name)
    known = sorted({p.name for root in roots if root.is_dir() for p in root.iterdir() if (p / MANIFEST_FILE).is_file()})
    raise UnknownNameError("reference", str(name), known)


def _read_manifest(path: Path) -> ReferenceManifest:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("manifest not found", path=path) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc})", path=path) from None
    if not isinstance(data, dict):
        raise InputError("manifest must be a JSON object", path=path)
    unknown = sorted(set(data) - _MANIFEST_KEYS)
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r}", path=path, field=unknown[0], allowed=sorted(_MANIFEST_KEYS))
    missing = sorted(_MANIFEST_REQUIRED - set(data))
    if missing:
        raise InputError("missing key", path=path, field=missing[0])
    if data["format_version"] != FORMAT_VERSION:
        raise InputError(f"unsupported format_version {data['format_version']!r}", path=path,
                         field="format_version", allowed=[FORMAT_VERSION])
    if not isinstance(data["higher_is_better"], bool):
        raise InputError("must be true or false", path=path, field="higher_is_better")
    try:
        return ReferenceManifest(**data)
    except InputError as exc:
        raise InputError(exc.reason, path=path, field=exc.field or "aggregate") from None


def _check_frame(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    for col in _REQUIRED_COLUMNS:
        if col not in df.columns:
            raise InputError("missing column", path=path, field=col, allowed=_REQUIRED_COLUMNS)
    df = df.astype({"model": str, "dataset": str, "example_id": str})
    score = pd.to_numeric(df["score"], errors="coerce")
    bad = ~np.isfinite(score.to_numpy(dtype=np.float64))
    if bad.any():
        row = df[bad].iloc[0]
        raise InputError(f"non-numeric or non-finite score for {row['model']} / {row['dataset']} / "
                         f"{row['example_id']} ({int(bad.sum())} rows)", path=path, field="score")
    df = df.assign(score=score.astype(np.float64))
    dup = df.duplicated(["model", "dataset", "example_id"])
    if dup.any():
        row = df[dup].iloc[0]
        raise InputError(f"duplicate row for model {row['model']!r}, dataset {row['dataset']!r}, example "
                         f"{row['example_id']!r} ({int(dup.sum())} duplicates)", path=path)
    return df


def _dataset_matrix(group: pd.DataFrame, dataset: str, path: Path) -> tuple[tuple[str, ...], np.ndarray, list[str], np.ndarray | None]:
    """Dense ``(models, examples)`` matrix of one dataset; refuses partial model coverage."""
    ids = tuple(sorted(group["example_id"].unique()))
    models = sorted(group["model"].unique())
    counts = group.groupby("model", sort=True).size()
    partial = counts[counts != len(ids)]
    if len(partial):
        m = partial.index[0]
        raise InputError(f"model {m!r} has {int(partial.iloc[0])} of the {len(ids)} examples of dataset "
                         f"{dataset!r} (missing cells; {len(partial)} such models)", path=path)
    wide = group.pivot(index="model", columns="example_id", values="score").loc[models, list(ids)]
    tokens = None
    if "n_tokens" in group.columns:
        tokens = group.pivot(index="model", columns="example_id", values="n_tokens").loc[models, list(ids)]
        tokens = tokens.to_numpy(dtype=np.int64)
    return ids, wide.to_numpy(dtype=np.float64), models, tokens


def load_reference(name: str | os.PathLike[str], *, missing: str = "complete-models") -> ReferenceLeaderboard:
    """Load and validate a reference by name or path (see the module docstring for the policy).

    Raises
    ------
    InputError
        On a checksum mismatch, duplicate rows, missing cells, unknown manifest keys, counts that
        disagree with the manifest; :class:`UnknownNameError` for an unknown name or policy.
    """
    if missing not in MISSING_POLICIES:
        raise UnknownNameError("missing-data policy", missing, MISSING_POLICIES)
    folder = resolve_reference(name)
    manifest = _read_manifest(folder / MANIFEST_FILE)
    scores_path = folder / SCORES_FILE
    if SCORES_FILE not in manifest.files:
        raise InputError(f"no checksum for {SCORES_FILE}", path=folder / MANIFEST_FILE, field="files")
    for fname, digest in manifest.files.items():
        fpath = folder / fname
        if not fpath.is_file():
            raise InputError("data file listed in the manifest is missing", path=fpath)
        if file_sha256(fpath) != digest:
            raise InputError(f"checksum mismatch (manifest says sha256 {digest[:12]}...); the file was changed "
                             "or corrupted", path=fpath)
    df = _check_frame(pd.read_parquet(scores_path), scores_path)
    return _assemble(df, manifest, folder, missing)


def _assemble(df: pd.DataFrame, manifest: ReferenceManifest, folder: Path, missing: str) -> ReferenceLeaderboard:
    scores_path = folder / SCORES_FILE
    data_sets = sorted(df["dataset"].unique())
    if set(data_sets) != set(manifest.example_counts):
        raise InputError(f"datasets in the data {data_sets} differ from the manifest's "
                         f"{sorted(manifest.example_counts)}", path=folder / MANIFEST_FILE, field="example_counts")
    per_dataset = {}
    for dataset, group in df.groupby("dataset", sort=True):
        ids, mat, models, tokens = _dataset_matrix(group, dataset, scores_path)
        if len(ids) != int(manifest.example_counts[dataset]):
            raise InputError(f"dataset {dataset!r} has {len(ids)} examples, manifest says "
                             f"{manifest.example_counts[dataset]}", path=folder / MANIFEST_FILE, field="example_counts")
        per_dataset[dataset] = (ids, mat, models, tokens)
    all_models = sorted(df["model"].unique())
    has = {d: set(v[2]) for d, v in per_dataset.items()}
    excluded: list[tuple[str, str]] = []
    if missing == "complete-models":
        pool = [m for m in all_models if all(m in has[d] for d in data_sets)]
        for m in all_models:
            lacking = [d for d in data_sets if m not in has[d]]
            if lacking:
                excluded.append((m, f"no scores on {', '.join(lacking)}"))
        kept = data_sets
    else:
        pool = all_models
        kept = [d for d in data_sets if len(has[d]) == len(all_models)]
        excluded = [(d, f"only {len(has[d])} of {len(all_models)} models") for d in data_sets if d not in kept]
    scores, tokens = [], []
    for d in kept:
        ids, mat, models, tok = per_dataset[d]
        rows = [models.index(m) for m in pool]
        scores.append(mat[rows])
        tokens.append(None if tok is None else tok[rows])
    return ReferenceLeaderboard(
        name=manifest.name, manifest=manifest, model_ids=tuple(pool), dataset_names=tuple(kept),
        example_ids=tuple(per_dataset[d][0] for d in kept), scores=tuple(scores), n_tokens=tuple(tokens),
        excluded=tuple(excluded), missing_policy=missing, path=folder,
    )


def write_reference(folder: str | os.PathLike[str], frame: pd.DataFrame, *, name: str, source: str, licence: str,
                    metric: str, higher_is_better: bool = True, aggregate: str = "mean",
                    random_baselines: Mapping[str, float] | None = None, built_with: str = "",
                    build: Mapping[str, Any] | None = None, notes: str = "") -> Path:
    """Validate a long frame and write ``scores.parquet`` (zstd) + ``manifest.json`` into ``folder``.

    The frame is validated with the same rules as :func:`load_reference` before anything is
    written; the written reference is loaded back once as a check.
    """
    out = Path(folder)
    cols = list(_REQUIRED_COLUMNS) + (["n_tokens"] if "n_tokens" in frame.columns else [])
    df = _check_frame(frame[cols].copy(), out / SCORES_FILE)
    df = df.sort_values(["dataset", "model", "example_id"], kind="stable").reset_index(drop=True)
    for d, g in df.groupby("dataset", sort=True):
        _dataset_matrix(g, str(d), out / SCORES_FILE)
    counts = {str(d): int(n) for d, n in df.groupby("dataset", sort=True)["example_id"].nunique().items()}
    table = df.astype({"model": "category", "dataset": "category", "score": np.float32})
    out.mkdir(parents=True, exist_ok=True)
    table.to_parquet(out / SCORES_FILE, compression="zstd", index=False)
    manifest = ReferenceManifest(
        name=name, source=source, licence=licence, metric=metric, higher_is_better=higher_is_better,
        aggregate=aggregate, example_counts=counts, files={SCORES_FILE: file_sha256(out / SCORES_FILE)},
        random_baselines=dict(random_baselines) if random_baselines else None, built_with=built_with,
        build=dict(build) if build else None, notes=notes,
    )
    atomic_write_text(out / MANIFEST_FILE, json.dumps(manifest.to_json(), indent=2, sort_keys=True) + "\n")
    load_reference(out)
    return out
