"""``flasheval.import_reference``: a reference from results users have (long parquet, lm-eval sample logs).

The one path behind ``flasheval reference import``: a random-baselines file is read here, then
:func:`flasheval.reference.importing.import_reference` streams the source into the reference folder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from flasheval.checks import check_flag, check_name, check_output
from flasheval.errors import InputError
from flasheval.reference import ImportedReference
from flasheval.reference.importing import check_import_options
from flasheval.reference.importing import import_reference as import_into_folder
from flasheval.stats.ranking import check_aggregate

__all__ = ["import_reference"]


def _check_import(source_path: object, *, format: object, name: object, output: object, suite: object,
                  include_path: object, aggregate: object, higher_is_better: object, random_baselines: object,
                  force: object) -> None:
    """:func:`import_reference`'s arguments checked before the baselines file or the source is read (scipy's
    ``_bootstrap_iv`` shape); the manifest's free texts and ``metric`` are strings the manifest checks."""
    check_import_options(source_path, format, suite, include_path)
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
    _check_import(source_path, format=format, name=name, output=output, suite=suite, include_path=include_path,
                  aggregate=aggregate,
                  higher_is_better=higher_is_better, random_baselines=random_baselines, force=force)
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
                              force=force)
