"""Reference leaderboards: the per-example score matrices placement ranks a new model against.

* :mod:`~flasheval.reference.leaderboard` — the data model (:class:`ReferenceLeaderboard`), the
  one reader of reference folders, and its validation (:mod:`~flasheval.reference.writing` writes them);
* :mod:`~flasheval.reference.manifest`    — ``manifest.json``: :class:`ReferenceManifest` and its reader;
* :mod:`~flasheval.reference.importing`   — other formats in (a long parquet table, lm-eval ``--log_samples``),
  streamed into per-dataset score matrices (:mod:`~flasheval.reference.matrices`,
  :mod:`~flasheval.reference.long_table`, :mod:`~flasheval.reference.lmeval_logs`);
* :mod:`~flasheval.reference.build`       — what a reference built on a task suite pins: its examples, its settings
  (the loop that scores the models, for both engines, is :mod:`flasheval.reference.building`);
* :mod:`~flasheval.reference.live`        — what a built reference pins, and the check that a live run reproduces it;
* :mod:`~flasheval.reference.lmeval_live` — the same for lm-eval references (a build's docs and settings, check).

The leaderboard and import APIs are re-exported here; ``build`` and ``live`` run models and are
imported from their modules.
"""

from flasheval.reference.importing import (
    IMPORT_FORMATS,
    ImportedReference,
    import_reference,
    read_lm_eval_samples,
    read_lm_eval_settings,
    read_long_parquet,
)
from flasheval.reference.leaderboard import (
    MISSING_POLICIES,
    SCORES_FILE,
    RankedModel,
    ReferenceLeaderboard,
    load_reference,
    references_root,
    repo_root,
    reference_folder,
)
from flasheval.reference.manifest import MANIFEST_FILE, ReferenceManifest
from flasheval.reference.writing import write_reference

__all__ = [
    "IMPORT_FORMATS",
    "ImportedReference",
    "MANIFEST_FILE",
    "MISSING_POLICIES",
    "SCORES_FILE",
    "RankedModel",
    "ReferenceLeaderboard",
    "ReferenceManifest",
    "import_reference",
    "load_reference",
    "read_lm_eval_samples",
    "read_lm_eval_settings",
    "read_long_parquet",
    "references_root",
    "repo_root",
    "reference_folder",
    "write_reference",
]
