"""Results stored before fingerprints covered the run settings: adopted once, by the first run that opens them.

Earlier releases keyed a model's results by a fingerprint of its files, dtype, maximum length and
scoring version (:func:`~flasheval.engine.hf.fingerprint.model_fingerprint` without ``settings``); the
device type, attention implementation, torch and transformers versions and padding multiple that
computed them were recorded nowhere. Today's fingerprint covers them
(:class:`~flasheval.engine.hf.fingerprint.RunSettings`), so a result is served only to a run with the
settings it was computed under.

The policy for a store written before (documented in ``docs/engine.md``, "Fingerprints"): its results
are **migrated once**. The first run that opens the model's results under the new key adopts the old
shard: every record is rewritten under the run's fingerprint (checksum included), the old shard is
renamed ``<h>.jsonl.adopted`` (kept, safe to delete), and one warning says how many results were adopted
and that runs under other settings compute them again. From then on they are served only where the
settings equal the adopting run's. Why adopt rather than refuse: an old record does not say which
settings computed it, and a store is nearly always reopened where it was written (the same machine, the
same libraries); recomputing every stored result would throw away the GPU hours a store exists to keep,
while serving old records to every setting forever would keep the silent mix this key closes. A run
under other settings that opens the store after the adoption finds nothing of the model and computes.

Under a data-parallel launch only the main process adopts, before any process reads the store.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from flasheval.engine.store.journal import append_lines
from flasheval.engine.store.shards import (
    LEGACY_FILE,
    encode_record,
    fsync_dir,
    load_shard,
    lock_shard,
    migrate_legacy,
    shard_path,
)
from flasheval.errors import BackendError

__all__ = ["ADOPTED_SUFFIX", "adopt_shard"]

logger = logging.getLogger(__name__)

ADOPTED_SUFFIX = ".adopted"
"""Appended to an old shard's name once its records are adopted under the new key."""


def adopt_shard(folder: str | os.PathLike[str], *, previous: str, fingerprint: str) -> int:
    """Move model ``previous``'s results (an earlier release's key) under ``fingerprint`` in store ``folder``, once.

    An earlier release's single ``results.jsonl`` is first split into shards
    (:func:`~flasheval.engine.store.shards.migrate_legacy`). Records the new shard already holds are kept
    (an interrupted adoption simply runs again). Costs two ``stat`` s when there is nothing to adopt.

    Returns
    -------
    int
        The number of results adopted (0: nothing to adopt).

    Raises
    ------
    BackendError
        When another run writes model ``fingerprint`` into ``folder`` (opening its store would be refused too).
        Another run holding the old shard (a run of an earlier release writing it, another run adopting it)
        is not an error: nothing is adopted now, with a warning.

    Examples
    --------
    >>> import tempfile
    >>> from flasheval.engine.store.results import ResultStore
    >>> from flasheval.types import RollingLoglikelihoodResult
    >>> folder = tempfile.mkdtemp()
    >>> with ResultStore(folder, fingerprint="old") as store:
    ...     store.put_many([("k", RollingLoglikelihoodResult(task_name="t", example_id="0", logprob_sum=-1.0,
    ...                                                       n_tokens=1, n_bytes=3))])
    >>> adopt_shard(folder, previous="old", fingerprint="new"), adopt_shard(folder, previous="old", fingerprint="gpu")
    (1, 0)
    >>> [len(ResultStore(folder, fingerprint=key, writer=False)) for key in ("new", "old")]
    [1, 0]
    """
    folder = Path(folder)
    old = shard_path(folder, previous)
    if previous == fingerprint or not (old.exists() or (folder / LEGACY_FILE).exists()):
        return 0
    migrate_legacy(folder)
    try:
        old_lock = lock_shard(folder, previous)
    except BackendError:  # a run of an earlier release writes it, or another run adopts it now: not this run's
        logger.warning("%s: the results stored under this model's earlier key are being written by another run; "
                       "not adopted now (a later run adopts them)", folder)
        return 0
    try:
        new_lock = lock_shard(folder, fingerprint)
        try:
            if not old.exists():  # none of this model's results in the old file, or adopted meanwhile
                return 0
            n_adopted = _move_records(folder, old, previous=previous, fingerprint=fingerprint)
        finally:
            os.close(new_lock)
    finally:
        os.close(old_lock)
    logger.warning("%s: adopted %d results stored by an earlier flasheval release (its key did not record the "
                   "device type, attention implementation, library versions or padding) as computed under this "
                   "run's settings; runs under other settings compute them again; the old file is kept as %s",
                   folder, n_adopted, old.name + ADOPTED_SUFFIX)
    return n_adopted


def _move_records(folder: Path, old: Path, *, previous: str, fingerprint: str) -> int:
    """Append ``old``'s records under ``fingerprint`` to the new shard (durably), then rename ``old``."""
    results = load_shard(old, previous, writer=True)
    new = shard_path(folder, fingerprint)
    have = load_shard(new, fingerprint, writer=True) if new.exists() else {}
    fresh = [encode_record(fingerprint, key, result) for key, result in results.items() if key not in have]
    append_lines(new, fresh)
    fsync_dir(new.parent)
    os.replace(old, old.with_name(old.name + ADOPTED_SUFFIX))
    fsync_dir(old.parent)
    return len(fresh)
