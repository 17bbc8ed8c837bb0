"""Reference leaderboards: per-example scores of a fixed pool of models, validated on load.

A reference lives in a folder ``<name>/`` holding

- ``scores.parquet``: long table, one row per (model, dataset, example): columns ``model``,
  ``dataset``, ``example_id`` (strings), ``score`` (float) and optionally ``n_tokens`` (int,
  tokens the model processed for that example, used for compute accounting in replay);
- ``manifest.json``: source, licence, metric, direction, default aggregate, per-dataset
  example counts, optional random baselines, the sha256 of every data file, how it was built,
  an optional ``build`` dict (settings of a reference built from task suites) and
  ``dropped_models``: the models lacking scores others have, by name (manifests written before
  it existed load without it).

Validation policy (refused in one line naming file, field and value):

- checksums must match the manifest; unknown or missing manifest keys are refused;
- a (model, dataset, example_id) appearing twice is refused;
- a model that has *some* but not all examples of a dataset is refused (missing cells);
- a model that lacks a *whole* dataset is handled by the ``missing`` policy, never silently:
  ``"complete-models"`` (default) keeps the models that have every dataset and lists the others
  as excluded; ``"common-datasets"`` keeps every model and only the datasets all of them have
  (the dropped datasets are listed).

This module reads reference folders, ``scores.parquet`` streamed into per-dataset matrices
(:mod:`flasheval.reference.long_table`); :mod:`flasheval.reference.writing` writes them (with the same
checks), and :mod:`flasheval.reference.importing` reads other formats.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import numpy as np

from flasheval.data_paths import embedded_data_dir, running_from_checkout
from flasheval.errors import InputError, UnknownNameError
from flasheval.hashing import file_sha256
from flasheval.reference.long_table import scan_long_table
from flasheval.reference.manifest import MANIFEST_FILE, ReferenceManifest, read_manifest
from flasheval.reference.matrices import ScoreMatrices
from flasheval.stats.ranking import aggregate as _aggregate
from flasheval.stats.ranking import check_random_baselines, competition_ranks

__all__ = [
    "MISSING_POLICIES",
    "check_missing_policy",
    "ReferenceLeaderboard",
    "RankedModel",
    "reference_folder",
    "load_reference",
    "repo_root",
    "references_root",
    "SCORES_FILE",
]

MISSING_POLICIES: tuple[str, ...] = ("complete-models", "common-datasets")
SCORES_FILE = "scores.parquet"


def repo_root() -> Path:
    """The parent of the ``flasheval`` package folder: the checkout when run from one (in an installed
    wheel, ``site-packages``). Embedded references are found by :func:`references_root`, not here."""
    return Path(__file__).resolve().parents[2]


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
        """Keyword arguments for :func:`flasheval.stats.ranking.aggregate` on this reference.

        The centered aggregate's random baselines are checked here, so that a manifest lacking one is
        refused in one line naming the manifest before anything is scored.
        """
        options = {"kind": kind or self.manifest.aggregate, "higher_is_better": self.higher_is_better,
                   "dataset_names": self.dataset_names, "random_baselines": self.manifest.random_baselines}
        if options["kind"] == "centered":
            try:
                check_random_baselines(self.dataset_names, self.manifest.random_baselines)
            except InputError as exc:
                fix = ("add them to the manifest, or choose another --aggregate" if kind else
                       "add them to the manifest, or set its 'aggregate' to another one")
                raise InputError(f"{exc.reason}: the centered aggregate needs one per dataset; {fix}",
                                 path=None if self.path is None else self.path / MANIFEST_FILE,
                                 field="random_baselines") from None
        return options

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

    def without(self, model_id: str, *more: str) -> ReferenceLeaderboard:
        """The same reference with ``model_id`` (and ``more``) removed from the pool (leave-one-out, held-out sets)."""
        dropped = {model_id, *more}
        for m in dropped:
            self.index(m)  # an unknown id: one line naming the reference's models
        keep = np.array([m not in dropped for m in self.model_ids])
        return replace(
            self,
            model_ids=tuple(m for m in self.model_ids if m not in dropped),
            scores=tuple(s[keep] for s in self.scores),
            n_tokens=tuple(None if t is None else t[keep] for t in self.n_tokens),
        )

    def model_rows(self, model_id: str) -> tuple[tuple[np.ndarray, np.ndarray | None], ...]:
        """Per dataset, the (scores, n_tokens) rows of one pool model."""
        i = self.index(model_id)
        return tuple((s[i], None if t is None else t[i]) for s, t in zip(self.scores, self.n_tokens))


def references_root(override: str | os.PathLike[str] | None = None) -> Path:
    """Where a new reference folder is written: ``override``, else ``$FLASHEVAL_REFERENCES``, else
    ``<checkout>/reference_rankings`` when running from a checkout, else ``./reference_rankings`` in
    the working folder (an installed package's own folder is package data, never written to)."""
    if override or os.environ.get("FLASHEVAL_REFERENCES"):
        return Path(override or os.environ["FLASHEVAL_REFERENCES"])
    return embedded_data_dir("reference_rankings") if running_from_checkout() else Path("reference_rankings")


def _search_roots() -> list[Path]:
    """Where a reference named by ``NAME`` is looked for, in order: ``$FLASHEVAL_REFERENCES``, the default
    folder new references are written to (:func:`references_root`), the embedded references."""
    roots = [Path(p) for p in (os.environ.get("FLASHEVAL_REFERENCES"),) if p]
    for root in (references_root(), embedded_data_dir("reference_rankings")):
        if root not in roots:
            roots.append(root)
    return roots


def reference_folder(name: str | os.PathLike[str], *, field: str = "--reference") -> Path:
    """Folder of a reference: a path, else ``NAME`` under the first of :func:`_search_roots` that has it
    (``$FLASHEVAL_REFERENCES``, ``./reference_rankings`` for an installed package, the embedded references).
    ``field``: how errors name the value (``NAME`` for ``reference show``, whose reference is positional)."""
    if not isinstance(name, (str, os.PathLike)) or not os.fspath(name).strip():
        raise InputError(f"expected a reference name or folder, got {name!r}", field=field)
    direct = Path(name)
    if direct.is_dir():
        return direct
    if direct.is_file():
        raise InputError(f"a file, not a reference folder; name the folder that holds {MANIFEST_FILE} "
                         f"({direct.parent})", path=direct, field=field)
    roots = _search_roots()
    for root in roots:
        if (root / str(name)).is_dir():
            return root / str(name)
    known = sorted({p.name for root in roots if root.is_dir() for p in root.iterdir() if (p / MANIFEST_FILE).is_file()})
    raise UnknownNameError("reference", str(name), known, field=field)


def load_reference(name: str | os.PathLike[str], *, missing: str = "complete-models") -> ReferenceLeaderboard:
    """Load and validate a reference by name or path (see the module docstring for the policy).

    ``scores.parquet`` is read in streamed batches into one float64 matrix per dataset
    (:func:`~flasheval.reference.long_table.scan_long_table`): memory is about the matrices.

    Raises
    ------
    InputError
        On a checksum mismatch, duplicate rows, missing cells, unknown manifest keys, counts that
        disagree with the manifest; :class:`UnknownNameError` for an unknown name or policy.
    """
    return _load(name, missing=missing, dtype=np.float64)


def check_missing_policy(missing: object) -> str:
    """``missing`` if it names a missing-data policy (:data:`MISSING_POLICIES`); refused in one line otherwise."""
    if not isinstance(missing, str) or missing not in MISSING_POLICIES:
        raise UnknownNameError("missing-data policy", missing, MISSING_POLICIES, field="--missing")  # type: ignore[arg-type]
    return missing


def _load(name: str | os.PathLike[str], *, missing: str, dtype: type) -> ReferenceLeaderboard:
    """:func:`load_reference` with scores of ``dtype`` (float32: the writer's read-back check, half the memory)."""
    check_missing_policy(missing)
    folder = reference_folder(name)
    manifest = read_manifest(folder / MANIFEST_FILE)
    scores_path = folder / SCORES_FILE
    if SCORES_FILE not in manifest.files:
        raise InputError(f"no checksum for {SCORES_FILE}", path=folder / MANIFEST_FILE, field="files")
    for fname, digest in manifest.files.items():
        fpath = folder / fname
        if not fpath.is_file():
            raise InputError("data file listed in the manifest is missing", path=fpath)
        try:
            actual = file_sha256(fpath)
        except OSError as exc:
            raise InputError(f"cannot read ({exc.strerror or exc})", path=fpath) from None
        if actual != digest:
            raise InputError(f"checksum mismatch (manifest says sha256 {digest[:12]}...); the file was changed "
                             "or corrupted", path=fpath)
    return _assemble(scan_long_table(scores_path, dtype=dtype), manifest, folder, missing)


def _pool_problem(name: str, missing: str, all_models: list[str], data_sets: list[str],
                  has: dict[str, set[str]]) -> str:
    """Why the ``missing`` policy leaves fewer than 2 models or no dataset, the models it drops, and what fixes it."""
    lacking = {m: [d for d in data_sets if m not in has[d]] for m in all_models}
    complete = [m for m in all_models if not lacking[m]]
    common = [d for d in data_sets if len(has[d]) == len(all_models)]
    if len(all_models) < 2:
        return f"reference {name!r} needs at least 2 models, the data has {len(all_models)} ({', '.join(all_models)})"
    mixed = "the rows mix model sets (e.g. several suites in one file): keep one (reference import --suite)"
    if missing == "complete-models":
        dropped = [m for m in all_models if lacking[m]]
        shown = "; ".join(f"{m} lacks {', '.join(lacking[m][:3])}{' ...' if len(lacking[m]) > 3 else ''}"
                          for m in dropped[:3]) + (f"; and {len(dropped) - 3} more" if len(dropped) > 3 else "")
        fix = (f"--missing common-datasets keeps all {len(all_models)} models on the {len(common)} datasets they all "
               f"have ({', '.join(common[:4])}{' ...' if len(common) > 4 else ''})" if common
               else f"no dataset has every model either: {mixed}")
        return (f"reference {name!r} needs at least 2 models with every dataset; the 'complete-models' policy keeps "
                f"{len(complete)} of {len(all_models)} (dropped {len(dropped)}: {shown}); {fix}")
    coverage = ", ".join(f"{d} {len(has[d])}" for d in data_sets[:4]) + (" ..." if len(data_sets) > 4 else "")
    fix = (f"--missing complete-models keeps the {len(complete)} models with every dataset" if len(complete) >= 2
           else mixed)
    return (f"reference {name!r}: the 'common-datasets' policy keeps no dataset, none has all {len(all_models)} "
            f"models (models per dataset: {coverage}); {fix}")


def pool(matrices: ScoreMatrices, name: str, missing: str, *, where: Path | None = None
         ) -> tuple[int, tuple[str, ...], tuple[tuple[str, str], ...]]:
    """What the ``missing`` policy keeps: ``(n_pool_models, kept datasets, excluded)``.

    Under ``complete-models`` the pool is the leading ``n_pool_models`` rows of the matrices (the models with
    every dataset, :class:`~flasheval.reference.matrices.Layout`); under ``common-datasets`` every model.
    Refuses, naming ``where``, a policy that leaves fewer than 2 models or no dataset.
    """
    models, data_sets = list(matrices.model_ids), list(matrices.dataset_names)
    present = matrices.present
    if missing == "complete-models":
        n_pool, kept = matrices.n_complete, tuple(data_sets)
        excluded = tuple(sorted(
            (models[i], "no scores on " + ", ".join(d for j, d in enumerate(data_sets) if not present[i, j]))
            for i in range(n_pool, len(models))))
    else:
        n_pool = len(models)
        kept = tuple(d for j, d in enumerate(data_sets) if present[:, j].all())
        excluded = tuple((d, f"only {int(present[:, j].sum())} of {len(models)} models")
                         for j, d in enumerate(data_sets) if d not in kept)
    if n_pool < 2 or not kept:
        has = {d: {models[i] for i in np.flatnonzero(present[:, j])} for j, d in enumerate(data_sets)}
        raise InputError(_pool_problem(name, missing, sorted(models), data_sets, has), path=where)
    return n_pool, kept, excluded


def _check_models(m: ScoreMatrices, manifest: ReferenceManifest, folder: Path) -> None:
    """Refuse a manifest that names models the score table does not hold, or that misses some it holds.

    ``dropped_models`` must list exactly the models with missing cells; a built reference's ``build.models``
    exactly the models in the table.
    """
    where = folder / MANIFEST_FILE
    in_data = set(m.model_ids)
    if manifest.dropped_models is not None:
        listed = {str(d["model"]) for d in manifest.dropped_models}
        incomplete = set(m.model_ids[m.n_complete:])
        for models, problem in ((listed - in_data, f"is not in {SCORES_FILE}, but the manifest's dropped_models lists it"),
                                (listed & in_data - incomplete, f"has every score in {SCORES_FILE}, but the manifest's "
                                                                "dropped_models lists it"),
                                (incomplete - listed, f"lacks scores in {SCORES_FILE}, but the manifest's dropped_models "
                                                      "does not list it")):
            if models:
                raise InputError(f"model {sorted(models)[0]!r} {problem} ({len(models)} such)", path=where,
                                 field="dropped_models")
    built = manifest.build.get("models") if isinstance(manifest.build, Mapping) else None
    if isinstance(built, Mapping) and built:
        for only, side in ((set(built) - in_data, "the manifest's build.models, not in " + SCORES_FILE),
                           (in_data - set(built), SCORES_FILE + ", not in the manifest's build.models")):
            if only:
                raise InputError(f"model {sorted(only)[0]!r} is in {side} ({len(only)} such)", path=where,
                                 field="build")


def _assemble(matrices: ScoreMatrices, manifest: ReferenceManifest, folder: Path, missing: str) -> ReferenceLeaderboard:
    """The leaderboard of checked matrices (read from ``folder``) under the ``missing`` policy."""
    m = matrices
    if set(m.dataset_names) != set(manifest.example_counts):
        raise InputError(f"datasets in the data {list(m.dataset_names)} differ from the manifest's "
                         f"{sorted(manifest.example_counts)}", path=folder / MANIFEST_FILE, field="example_counts")
    for dataset, ids in zip(m.dataset_names, m.example_ids):
        if len(ids) != int(manifest.example_counts[dataset]):
            raise InputError(f"dataset {dataset!r} has {len(ids)} examples, manifest says "
                             f"{manifest.example_counts[dataset]}", path=folder / MANIFEST_FILE, field="example_counts")
    _check_models(m, manifest, folder)
    n_pool, kept, excluded = pool(m, manifest.name, missing, where=folder)
    if missing == "complete-models":  # the leading rows, already in name order: views, no copy
        rows: slice | np.ndarray = slice(0, n_pool)
        model_ids = m.model_ids[:n_pool]
    else:  # every model, in name order (the complete ones lead the matrices' rows)
        rows = np.argsort(np.array(m.model_ids, dtype=object), kind="stable")
        model_ids = tuple(m.model_ids[i] for i in rows)
        if (rows == np.arange(len(rows))).all():
            rows = slice(None)
    index = [m.dataset_names.index(d) for d in kept]
    reference = ReferenceLeaderboard(
        name=manifest.name, manifest=manifest, model_ids=model_ids, dataset_names=kept,
        example_ids=tuple(m.example_ids[j] for j in index), scores=tuple(m.scores[j][rows] for j in index),
        n_tokens=tuple(None if m.n_tokens[j] is None else m.n_tokens[j][rows] for j in index),
        excluded=excluded, missing_policy=missing, path=folder,
    )
    reference.aggregate_options()  # the manifest's own aggregate can be computed (its random baselines)
    return reference
