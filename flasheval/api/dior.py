"""``flasheval.dior``: how reliable each benchmark design decision is on a reference (Perlitz et al.'s DIoR).

The one path behind ``flasheval dior``: every value is checked here (an unknown decision is refused),
then :func:`flasheval.analysis.dior.run_dior` runs the decisions and the record is written.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flasheval.api.resolve import check_pool_options, resolve_reference
from flasheval.checks import (check_confidence_level, check_counts, check_flag, check_n_resamples, check_output,
                              check_seed, name_list)
from flasheval.errors import InputError
from flasheval.analysis.dior import DEFAULT_SIZES, DiorReport, run_dior
from flasheval.records.run_record import prepare_output, write_record
from flasheval.reference import ReferenceLeaderboard
from flasheval.stats.dior import DECISIONS

__all__ = ["DiorRun", "dior", "DIOR_FILE", "MAX_DATASET_COUNT"]

logger = logging.getLogger(__name__)

DIOR_FILE = "dior.json"


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class DiorRun:
    """What :func:`dior` returns."""

    report: DiorReport
    """Every decision's reliability table and the findings."""
    record_path: Path | None = None
    """``OUTPUT/dior.json`` (``None`` without ``output``)."""


MAX_DATASET_COUNT = 1_000_000
"""Most datasets one instantiation of the datasets decision may draw: far past any benchmark (drawing 60,000 of
helm_lite's 6 datasets already gives tau's lower bound 0.997), and the draw's counts are C longs."""


def _sizes(given: tuple[int, ...] | None, ref: ReferenceLeaderboard) -> tuple[int, ...]:
    """The sizes ``given`` (checked), sorted, those past the reference's largest dataset clipped to it (there every
    dataset is kept whole: the full benchmark), said in one note; ``None``: :data:`DEFAULT_SIZES` up to that size."""
    largest = max(int(np.shape(s)[1]) for s in ref.scores)
    if given is None:
        return tuple(sorted({min(s, largest) for s in DEFAULT_SIZES}))
    past = [s for s in sorted(given) if s > largest]
    if past:
        logger.warning("note: --sizes %s: past the largest dataset of %s (%d examples), tried as %d (every dataset "
                       "whole)", ", ".join(map(str, past)), ref.name, largest, largest)
    return tuple(sorted({min(s, largest) for s in given}))


def dior(
    reference: str | Path | ReferenceLeaderboard = "helm_lite",
    *,
    decisions: str | Sequence[str] = DECISIONS,
    sizes: Sequence[int] | None = None,
    dataset_counts: Sequence[int] | None = None,
    aggregate: str | None = None,
    missing: str = "complete-models",
    n_instantiations: int = 1000,
    confidence_level: float = 0.95,
    seed: int = 0,
    output: str | Path | None = None,
    force: bool = False,
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
        Examples per dataset for the examples decision (each >= 1, none twice; sorted). A dataset with at most
        ``S`` examples is kept whole, so sizes past the largest dataset are tried as its size, with a note.
        ``None``: :data:`~flasheval.analysis.dior.DEFAULT_SIZES` up to the largest dataset.
    dataset_counts
        Datasets drawn with replacement for the datasets decision, each from 1 to :data:`MAX_DATASET_COUNT`
        (default: as many as the reference has).
    aggregate, missing
        Aggregate over datasets (default: the reference's) and the missing-data policy.
    n_instantiations, confidence_level, seed
        Instantiations per decision (20 to :data:`flasheval.checks.MAX_RESAMPLES`), the interval's level (in
        [0.5, 1)), the seed.
    output
        Folder for the record ``dior.json`` (``None``: none written).
    force
        Replace a ``dior.json`` in ``output`` that another command wrote, or one written with other settings
        (reference, decisions, sizes, dataset counts, aggregate, missing-data policy, instantiations, level, seed;
        refused without it; a record of the same settings is replaced with a note).
    """
    chosen = name_list(decisions, field="--decision", what="decision")
    unknown = [d for d in chosen if d not in DECISIONS]
    if unknown:
        raise InputError(f"unknown decision {unknown[0]!r}", field="--decision", allowed=DECISIONS)
    given = None if sizes is None else check_counts(sizes, field="--sizes", what="sizes")
    if dataset_counts is not None:
        dataset_counts = check_counts(dataset_counts, field="--dataset-counts", what="dataset counts",
                                      maximum=MAX_DATASET_COUNT)
    check_n_resamples(n_instantiations, field="--n-instantiations", minimum=20)  # 20: a 95% bound needs them
    confidence_level = check_confidence_level(confidence_level)
    check_seed(seed)
    check_output(output)
    check_pool_options(aggregate, missing)
    check_flag(force, field="force")
    ref = resolve_reference(reference, missing=missing)
    sizes = _sizes(given, ref)
    settings = {"reference": ref.name, "decisions": list(chosen),  # sizes and counts where their decision runs
                "sizes": list(sizes) if "examples" in chosen else None,
                "dataset_counts": list(dataset_counts) if dataset_counts and "datasets" in chosen else None,
                "aggregate": aggregate,
                "missing": missing, "n_instantiations": n_instantiations, "confidence_level": confidence_level,
                "seed": seed}
    if output is not None:  # before the statistics run: an unwritable folder, another run's record, refused now
        prepare_output(output, record=DIOR_FILE, kind="dior", force=force, settings=settings)
    report = run_dior(ref, decisions=chosen, sizes=sizes, dataset_counts=dataset_counts, aggregate_kind=aggregate,
                      n_instantiations=n_instantiations, confidence_level=confidence_level, seed=seed)
    if output is None:
        return DiorRun(report=report)
    path = write_record(Path(output) / DIOR_FILE, kind="dior", payload=report.to_json(), settings=settings)
    return DiorRun(report=report, record_path=path)
