"""The API of the commands that place nothing: :func:`dior`, :func:`import_reference`, :func:`render_report`.

Each is the one path behind its command (``flasheval dior``, ``flasheval reference import``,
``flasheval report``): every value is checked here, so the command line and a Python caller refuse
the same values with the same line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.api.resolve import resolve_reference
from flasheval.checks import check_seed, name_list
from flasheval.errors import InputError
from flasheval.placement.dior import DEFAULT_SIZES, DiorReport, run_dior
from flasheval.records import write_record
from flasheval.reference import ImportedReference, ReferenceLeaderboard
from flasheval.reference.importing import import_reference as import_into_folder
from flasheval.report import ReportFiles
from flasheval.report import render_report as render_records
from flasheval.stats.dior import DECISIONS

__all__ = ["DiorRun", "dior", "import_reference", "render_report", "DIOR_FILE"]

DIOR_FILE = "dior.json"


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class DiorRun:
    """What :func:`dior` returns."""

    report: DiorReport
    """Every decision's reliability table and the findings."""
    record_path: Path | None = None
    """``OUTPUT/dior.json`` (``None`` without ``output``)."""


def _counts(values: Any, *, field: str, what: str) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise InputError(f"give a non-empty list of {what}, got {values!r}", field=field)
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
        raise InputError(f"{what} must be >= 1, got {list(values)}", field=field)
    return tuple(values)


def dior(
    reference: str | Path | ReferenceLeaderboard = "helm_lite",
    *,
    decisions: str | Sequence[str] = DECISIONS,
    sizes: Sequence[int] = DEFAULT_SIZES,
    dataset_counts: Sequence[int] | None = None,
    aggregate: str | None = None,
    missing: str = "complete-models",
    n_instantiations: int = 1000,
    confidence_level: float = 0.95,
    seed: int = 0,
    output: str | Path | None = None,
) -> DiorRun:
    """How reliable each benchmark design decision is on ``reference`` (Perlitz et al.'s DIoR).

    Parameters
    ----------
    reference
        Name, folder or :class:`~flasheval.reference.ReferenceLeaderboard`.
    decisions
        Out of :data:`flasheval.stats.dior.DECISIONS` (``examples``, ``datasets``, ``aggregate``): a list or
        ``"a,b"``; an unknown name is refused.
    sizes
        Examples per dataset for the examples decision (each >= 1; sorted, duplicates dropped).
    dataset_counts
        Datasets drawn with replacement for the datasets decision (default: all of them).
    aggregate, missing
        Aggregate over datasets (default: the reference's) and the missing-data policy.
    n_instantiations, confidence_level, seed
        Instantiations per decision (>= 20), the interval's level (in [0.5, 1)), the seed.
    output
        Folder for the record ``dior.json`` (``None``: none written).
    """
    chosen = name_list(decisions, field="--decision", what="decision")
    unknown = [d for d in chosen if d not in DECISIONS]
    if unknown:
        raise InputError(f"unknown decision {unknown[0]!r}", field="--decision", allowed=DECISIONS)
    sizes = tuple(sorted(set(_counts(sizes, field="--sizes", what="sizes"))))
    if dataset_counts is not None:
        dataset_counts = _counts(dataset_counts, field="--dataset-counts", what="dataset counts")
    if isinstance(n_instantiations, bool) or not isinstance(n_instantiations, int) or n_instantiations < 20:
        raise InputError(f"need at least 20 instantiations for a 95% bound, got {n_instantiations}",
                         field="--n-instantiations")
    if isinstance(confidence_level, bool) or not isinstance(confidence_level, (int, float)) \
            or not (math.isfinite(confidence_level) and 0.5 <= confidence_level < 1):
        raise InputError(f"must be in [0.5, 1), got {confidence_level}", field="--confidence-level")
    check_seed(seed)
    ref = resolve_reference(reference, missing=missing)
    report = run_dior(ref, decisions=chosen, sizes=sizes, dataset_counts=dataset_counts, aggregate_kind=aggregate,
                      n_instantiations=n_instantiations, confidence_level=confidence_level, seed=seed)
    if output is None:
        return DiorRun(report=report)
    path = write_record(Path(output) / DIOR_FILE, kind="dior", payload=report.to_json())
    return DiorRun(report=report, record_path=path)


def import_reference(
    source_path: str | Path,
    *,
    format: str,
    name: str,
    output_dir: str | Path | None = None,
    suite: str | None = None,
    metric: str | None = None,
    source: str = "",
    licence: str = "unknown",
    metric_description: str = "",
    higher_is_better: bool = True,
    aggregate: str = "mean",
    random_baselines: Mapping[str, float] | str | Path | None = None,
    include_path: str | Path | None = None,
    notes: str = "",
    force: bool = False,
) -> ImportedReference:
    """Write reference ``name`` from results users have: a long parquet file or lm-eval ``--log_samples`` output.

    Parameters
    ----------
    source_path
        The parquet file (``format="long-parquet"``) or the lm-eval output folder (``"lm-eval-samples"``).
    random_baselines
        ``{dataset: chance score}`` for the centered aggregate, or a JSON file holding one.
    Everything else
        As :func:`flasheval.reference.importing.import_reference` (the manifest's fields, the metric,
        ``force`` to overwrite); see ``docs/`` and ``flasheval reference import --help``.
    """
    if isinstance(random_baselines, (str, Path)):
        try:
            random_baselines = json.loads(Path(random_baselines).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"cannot read random baselines ({exc})", path=random_baselines) from None
    return import_into_folder(source_path, source_format=format, name=name, output_dir=output_dir, suite=suite,
                              metric=metric, source=source, licence=licence, metric_description=metric_description,
                              higher_is_better=higher_is_better, aggregate=aggregate,
                              random_baselines=random_baselines,
                              include_path=None if include_path is None else str(include_path), notes=notes,
                              force=force)


def render_report(path: str | Path) -> ReportFiles:
    """Render the run records at ``path`` (a run folder's ``*.json`` records, or one record file) as
    ``report.md``, ``figures/`` and one self-contained ``report.html`` beside them.

    Named ``render_report``, not ``report``: ``flasheval.report`` is the report package.
    """
    if not isinstance(path, (str, Path)):
        raise InputError(f"expected a folder or a record file, got {type(path).__name__}", field="RUN_DIR")
    return render_records(path)
