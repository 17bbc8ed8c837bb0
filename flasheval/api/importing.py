"""``flasheval.import_reference``: a reference from results users have (long parquet, lm-eval sample logs).

The one path behind ``flasheval reference import``: a random-baselines file is read here, then
:func:`flasheval.reference.importing.import_reference` streams the source into the reference folder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from flasheval.errors import InputError
from flasheval.reference import ImportedReference
from flasheval.reference.importing import import_reference as import_into_folder

__all__ = ["import_reference"]


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
