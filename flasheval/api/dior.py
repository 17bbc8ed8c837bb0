"""``flasheval.dior``: how reliable each benchmark design decision is on a reference (Perlitz et al.'s DIoR).

The one path behind ``flasheval dior``: every value is checked here (an unknown decision is refused),
then :func:`flasheval.placement.dior.run_dior` runs the decisions and the record is written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.api.resolve import resolve_reference
from flasheval.checks import check_n_resamples, check_output, check_seed, name_list
from flasheval.errors import InputError
from flasheval.placement.dior import DEFAULT_SIZES, DiorReport, run_dior
from flasheval.records import prepare_output, write_record
from flasheval.reference import ReferenceLeaderboard
from flasheval.stats.dior import DECISIONS

__all__ = ["DiorRun", "dior", "DIOR_FILE"]

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
    twice = sorted({v for v in values if list(values).count(v) > 1})
    if twice:
        raise InputError(f"{twice[0]} listed twice in {list(values)}", field=field)
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
        Examples per dataset for the examples decision (each >= 1, none twice; sorted).
    dataset_counts
        Datasets drawn with replacement for the datasets decision (default: all of them).
    aggregate, missing
        Aggregate over datasets (default: the reference's) and the missing-data policy.
    n_instantiations, confidence_level, seed
        Instantiations per decision (20 to :data:`flasheval.checks.MAX_RESAMPLES`), the interval's level (in
        [0.5, 1)), the seed.
    output
        Folder for the record ``dior.json`` (``None``: none written).
    """
    chosen = name_list(decisions, field="--decision", what="decision")
    unknown = [d for d in chosen if d not in DECISIONS]
    if unknown:
        raise InputError(f"unknown decision {unknown[0]!r}", field="--decision", allowed=DECISIONS)
    sizes = tuple(sorted(_counts(sizes, field="--sizes", what="sizes")))
    if dataset_counts is not None:
        dataset_counts = _counts(dataset_counts, field="--dataset-counts", what="dataset counts")
    if isinstance(n_instantiations, bool) or not isinstance(n_instantiations, int) or n_instantiations < 20:
        raise InputError(f"need at least 20 instantiations for a 95% bound, got {n_instantiations}",
                         field="--n-instantiations")
    check_n_resamples(n_instantiations, field="--n-instantiations", minimum=20)
    if isinstance(confidence_level, bool) or not isinstance(confidence_level, (int, float)) \
            or not (math.isfinite(confidence_level) and 0.5 <= confidence_level < 1):
        raise InputError(f"must be in [0.5, 1), got {confidence_level}", field="--confidence-level")
    check_seed(seed)
    check_output(output)
    ref = resolve_reference(reference, missing=missing)
    if output is not None:  # before the statistics run: an unwritable folder is refused now
        prepare_output(output, record=DIOR_FILE)
    report = run_dior(ref, decisions=chosen, sizes=sizes, dataset_counts=dataset_counts, aggregate_kind=aggregate,
                      n_instantiations=n_instantiations, confidence_level=confidence_level, seed=seed)
    if output is None:
        return DiorRun(report=report)
    path = write_record(Path(output) / DIOR_FILE, kind="dior", payload=report.to_json())
    return DiorRun(report=report, record_path=path)
