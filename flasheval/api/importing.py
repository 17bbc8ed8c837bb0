"""``flasheval.import_reference``: a reference from results users have (long parquet, lm-eval sample logs, Every Eval
Ever records); ``flasheval.export``: flasheval's results as Every Eval Ever records.

The one path behind ``flasheval reference import``: a random-baselines file is read here, then
:func:`flasheval.reference.importing.import_reference` streams the source into the reference folder. The one path
behind ``flasheval export``: :func:`flasheval.interop.sources.read_sources` reads a placement, an evaluation, a run
folder or an lm-eval output folder, :func:`flasheval.interop.every_eval_ever.write_records` writes the records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from flasheval.checks import check_flag, check_name, check_output
from flasheval.errors import InputError, UnknownNameError
from flasheval.interop.every_eval_ever import write_records
from flasheval.interop.sources import read_sources
from flasheval.reference import ImportedReference, ReferenceLeaderboard
from flasheval.reference.importing import check_import_options
from flasheval.reference.importing import import_reference as import_into_folder
from flasheval.stats.ranking import check_aggregate

__all__ = ["EXPORT_FORMATS", "ExportedRecords", "export", "import_reference"]

EXPORT_FORMATS: tuple[str, ...] = ("every-eval-ever",)


def _check_import(source_path: object, *, format: object, name: object, output: object, suite: object,
                  include_path: object, aggregate: object, higher_is_better: object, random_baselines: object,
                  force: object, missing: object = None) -> None:
    """:func:`import_reference`'s arguments checked before the baselines file or the source is read (scipy's
    ``_bootstrap_iv`` shape); the manifest's free texts and ``metric`` are strings the manifest checks."""
    check_import_options(source_path, format, suite, include_path, missing)
    check_name(name, what="reference name")
    check_output(output, field="--output")
    check_aggregate(aggregate)
    check_flag(higher_is_better, field="--lower-is-better")
    check_flag(force, field="--force")
    if random_baselines is not None and not isinstance(random_baselines, (Mapping, str, Path)):
        raise InputError(f"expected {{dataset: chance score}} or a JSON file of one, got "
                         f"{type(random_baselines).__name__}", field="--random-baselines")


def import_reference(
    source_path: str | Path,
    *,
    format: str,
    name: str,
    output: str | Path | None = None,
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
    missing: str | None = None,
) -> ImportedReference:
    """Write reference ``name`` from results users have: a long parquet file, lm-eval ``--log_samples`` output or
    Every Eval Ever records.

    Parameters
    ----------
    source_path
        The parquet file (``format="long-parquet"``), the lm-eval output folder (``"lm-eval-samples"``), or a folder
        of Every Eval Ever records or one of its logs (``"every-eval-ever"``).
    missing
        every-eval-ever: a result without instance-level data is refused (``None``), or left out under the
        missing-data policy named (``"complete-models"``, ``"common-datasets"``).
    random_baselines
        ``{dataset: chance score}`` for the centered aggregate, or a JSON file holding one.
    Everything else
        As :func:`flasheval.reference.importing.import_reference` (the manifest's fields, the metric,
        ``force`` to overwrite); see ``docs/`` and ``flasheval reference import --help``.
    """
    _check_import(source_path, format=format, name=name, output=output, suite=suite, include_path=include_path,
                  aggregate=aggregate,
                  higher_is_better=higher_is_better, random_baselines=random_baselines, force=force, missing=missing)
    if isinstance(random_baselines, (str, Path)):
        if not str(random_baselines).strip():
            raise InputError("empty path; name a JSON file of {dataset: chance score}", field="--random-baselines")
        try:
            random_baselines = json.loads(Path(random_baselines).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:  # unreadable, not JSON, not UTF-8 text
            raise InputError(f"cannot read random baselines ({exc})", path=random_baselines,
                             field="--random-baselines") from None
    return import_into_folder(source_path, source_format=format, name=name, output=output, suite=suite,
                              metric=metric, source=source, licence=licence, metric_description=metric_description,
                              higher_is_better=higher_is_better, aggregate=aggregate,
                              random_baselines=random_baselines,
                              include_path=None if include_path is None else str(include_path), notes=notes,
                              force=force, missing=missing)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExportedRecords:
    """What :func:`export` wrote."""

    output: Path
    logs: tuple[Path, ...]
    """One aggregate log per model (its instance lines beside it, ``<uuid>_samples.jsonl``)."""
    model_ids: tuple[str, ...]
    n_examples: int
    """Instance lines written: every scored example of every model."""


def export(source: str | Path, *, format: str, output: str | Path, reference: str | Path | ReferenceLeaderboard | None = None,
           organization: str = "unknown") -> ExportedRecords:
    """Write a placement, an evaluation, a run's checkpoints or an lm-eval output folder as Every Eval Ever records.

    Parameters
    ----------
    source
        A ``place`` or ``evaluate`` record (or its folder), a run folder, or an lm-eval ``--log_samples`` folder.
    format
        One of :data:`EXPORT_FORMATS`.
    output
        The folder the records go to, in the datastore's layout (``data/BENCHMARK/DEVELOPER/MODEL/UUID.json``
        and ``UUID_samples.jsonl``); the same source exported again replaces its own files.
    reference
        The reference a replayed placement was made on, where its name alone does not find it (its examples
        and scores are the reference's).
    organization
        ``source_metadata.source_organization_name``: who provides the records.

    Each model's log holds every dataset's mean score (with its standard error) and, in
    ``eval_library.additional_details``, a placement's rank, ``rank_interval``, tier and compute; its instance
    lines every example scored with its score (``docs/interop.md``).
    """
    if not isinstance(source, (str, Path)) or not str(source).strip():
        raise InputError(f"expected the path of a record, a run folder or an lm-eval output folder, got {source!r}",
                         field="SOURCE")
    if format not in EXPORT_FORMATS:
        raise UnknownNameError("export format", format, EXPORT_FORMATS, field="--format")
    check_output(output, field="--output")
    if output is None:
        raise InputError("required: the folder the records go to", field="--output")
    if reference is not None and not isinstance(reference, (str, Path, ReferenceLeaderboard)):
        raise InputError(f"expected a reference name, folder or ReferenceLeaderboard, got {type(reference).__name__}",
                         field="--reference")
    if not isinstance(organization, str) or not organization.strip():
        raise InputError(f"expected a non-empty name, got {organization!r}", field="--organization")
    evaluations = read_sources(source, reference=reference)
    if not evaluations:
        raise InputError("nothing to export (a run folder without placed checkpoints)", path=source)
    logs = write_records(evaluations, output, organization=organization)
    return ExportedRecords(output=Path(output), logs=logs, model_ids=tuple(e.model_id for e in evaluations),
                           n_examples=sum(len(d.example_ids) for e in evaluations for d in e.datasets))
