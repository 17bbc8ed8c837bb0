"""A sweep's run folder: its settings, its lock, one results-store shard per checkpoint, an old layout migrated.

A run folder holds ``sweep-config.json`` (the settings, :func:`check_config`), ``shards/`` (each
checkpoint's per-example scores in the engine's results store, :mod:`flasheval.sweeps.store`),
``models/<name>/`` (a live checkpoint's request store) and ``sweep.json`` (the record). The process
that writes it holds ``folder.lock`` (:func:`flasheval.engine.store.shards.lock_folder`) from opening to
the end, so a second sweep on the same folder is refused in one line before it reads or writes
anything; rerunning the same command after a crash resumes from the stores, and other settings in the
same folder are refused in one line. A run folder of store format 1 (one ``scores.jsonl`` for every
checkpoint, as earlier releases wrote) is migrated once when it is opened with the same settings: every score
goes into its checkpoint's shard as it was (nothing recomputed), the old file is kept as
``scores.jsonl.migrated`` and the settings are rewritten with format 2.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flasheval.engine.coordination.distributed import main_decides
from flasheval.engine.store.results import ResultStore
from flasheval.engine.store.shards import FOLDER_LOCK, SHARDS_DIR, fsync_dir, lock_folder
from flasheval.errors import InputError
from flasheval.reference.scoring.scorers import ExampleScorer
from flasheval.sweeps.store import StoredScorer, read_legacy_scores, score_fingerprint
from flasheval.atomic import atomic_write_text

__all__ = ["CONFIG_FILE", "LEGACY_STORE_FILE", "STORE_FORMAT", "RECORD_FILE", "MODELS_DIR", "RunFolder",
           "check_config", "open_run_folder"]

logger = logging.getLogger(__name__)

CONFIG_FILE = "sweep-config.json"
LEGACY_STORE_FILE = "scores.jsonl"
"""The one results file of a run folder of store format 1 (migrated into shards when opened)."""
STORE_FORMAT = 2
"""Version of the run folder layout: 2 = a results-store shard per checkpoint; 1 (``scores.jsonl``) is migrated,
any other is refused."""
RECORD_FILE = "sweep.json"
MODELS_DIR = "models"
"""Folder of the run folder that holds one request store per live checkpoint."""


def _saved_config(path: Path) -> dict[str, Any]:
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", path=path) from None
    except ValueError as exc:  # not JSON, or not UTF-8 text
        raise InputError(f"not valid JSON ({exc})", path=path) from None
    if not isinstance(saved, dict) or saved.get("store_format") not in (1, STORE_FORMAT):
        found = saved.get("store_format") if isinstance(saved, dict) else None
        raise InputError(f"run folder from an incompatible flasheval (sweep store format {found!r}, this flasheval "
                         f"reads {STORE_FORMAT} and migrates 1); use a new --output", path=path, field="store_format")
    return saved


def check_config(out: Path, config: dict[str, Any]) -> None:
    """Write the settings on a fresh run; on a resume refuse different settings in one line, and migrate a run
    folder of store format 1 (the caller holds the folder's lock)."""
    path = out / CONFIG_FILE
    if not path.exists():
        for leftover in (LEGACY_STORE_FILE, SHARDS_DIR):
            if (out / leftover).exists():
                raise InputError(f"results store without {CONFIG_FILE}; use a new --output", path=out / leftover)
        atomic_write_text(path, json.dumps(config, indent=2, sort_keys=True) + "\n")
        return
    saved = _saved_config(path)
    for key in sorted((set(config) | set(saved)) - {"store_format"}):
        if saved.get(key) != config.get(key):
            raise InputError(f"this run folder holds a sweep with other settings ({saved.get(key)!r} here, "
                             f"{config.get(key)!r} now); rerun with the same arguments to resume, or use a new --output",
                             path=path, field=key)
    if saved["store_format"] != STORE_FORMAT:
        _migrate(out)
        atomic_write_text(path, json.dumps({**saved, "store_format": STORE_FORMAT}, indent=2, sort_keys=True) + "\n")


def _migrate(out: Path) -> None:
    """Move ``scores.jsonl`` into one shard per checkpoint (each score as it was), then rename it.

    Each shard is fsync-ed before the old file is renamed; keys a shard already holds are skipped, so a
    migration killed half way simply runs again.
    """
    old = out / LEGACY_STORE_FILE
    if not old.exists():  # killed after the rename, before the settings were rewritten
        return
    by_model = read_legacy_scores(old)
    for model_id, scores in by_model.items():
        store = ResultStore(out, fingerprint=score_fingerprint(model_id), folder_locked=True)
        store.put_many(list(scores.items()))
        store.close()
    fsync_dir(out / SHARDS_DIR)
    os.replace(old, out / (LEGACY_STORE_FILE + ".migrated"))
    fsync_dir(out)
    logger.warning("%s: migrated %d scores of %d checkpoints into %s/ (one results-store shard per checkpoint); the old "
                   "file is kept as %s.migrated", old, sum(map(len, by_model.values())), len(by_model),
                   out / SHARDS_DIR, LEGACY_STORE_FILE)


class RunFolder:
    """An open run folder: each checkpoint's results store, and the folder's lock (the main process's).

    Attributes
    ----------
    stores
        ``{model_id: store}`` of every checkpoint's per-example scores.
    n_stored
        Scores already stored when the folder was opened (a resume when > 0).
    """

    def __init__(self, out: Path, stores: dict[str, ResultStore], lock_fd: int | None) -> None:
        self.out = out
        self.stores = stores
        self._lock_fd = lock_fd
        self.n_stored = sum(len(s) for s in stores.values())

    def __len__(self) -> int:
        return sum(len(s) for s in self.stores.values())

    def scorer(self, model_id: str, inner: ExampleScorer) -> StoredScorer:
        """``inner`` behind checkpoint ``model_id``'s store."""
        return StoredScorer(inner, self.stores[model_id])

    def defer_sync(self) -> None:
        """Write and flush each batch at once but fsync only in :meth:`sync` (scores that cost nothing to redo)."""
        for store in self.stores.values():
            store.sync_each = False

    def sync(self) -> None:
        """``fsync`` every store's batches written since the last sync."""
        for store in self.stores.values():
            store.sync()

    def close(self) -> None:
        """Sync, close the stores and release the folder's lock."""
        self.sync()
        for store in self.stores.values():
            store.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _take(out: Path) -> int:
    fd = lock_folder(out)
    if fd is None:
        raise InputError(f"another sweep is running in this run folder (it holds {FOLDER_LOCK}); wait for it to "
                         "finish, or use a new --output", path=out)
    return fd


def open_run_folder(out: Path, config: dict[str, Any], model_ids: Sequence[str], state: Any = None) -> RunFolder:
    """Take the run folder's lock, check its settings (:func:`check_config`) and open every checkpoint's store.

    Under ``accelerate launch`` (``state`` of several processes) only the main process reads and
    writes the folder: it takes the lock, checks the settings and loads the stores, and hands the other
    processes its verdict and the stored scores (their stores never touch a file), so every process runs
    the same rounds even without a shared filesystem.
    """
    opened: list[RunFolder] = []

    def read() -> dict[str, dict[str, Any]]:
        fd = _take(out)
        try:
            check_config(out, config)
            stores = {m: ResultStore(out, fingerprint=score_fingerprint(m), folder_locked=True) for m in model_ids}
        except BaseException:
            os.close(fd)
            raise
        opened.append(RunFolder(out, stores, fd))
        return {m: s.results() for m, s in stores.items()}

    contents = main_decides(state, read, what="reading the sweep's run folder")
    if opened:
        return opened[0]
    return RunFolder(out, {m: ResultStore(out, fingerprint=score_fingerprint(m), writer=False, contents=contents[m])
                           for m in model_ids}, None)
