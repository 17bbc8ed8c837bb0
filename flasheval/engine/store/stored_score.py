"""A per-example score as the results store keeps it (a sweep checkpoint's scores, kind ``score``).

The store's other records are a model's request results (:mod:`flasheval.types`); a sweep keeps each
checkpoint's per-example scores in its run folder's store, one shard per checkpoint, under
:func:`score_key` (:mod:`flasheval.sweeps.store`).
"""

from __future__ import annotations

import dataclasses

__all__ = ["StoredScore", "score_key"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StoredScore:
    """One example's score for one model, stored under :func:`score_key` (a sweep's per-example scores)."""

    task_name: str
    example_id: str
    score: float
    n_tokens: int | None = None
    """Tokens the model processed for the example, when known."""


def score_key(task_name: str, example_id: str) -> str:
    r"""The store key of an example's :class:`StoredScore` (task names hold no tab).

    Examples
    --------
    >>> score_key("helm_lite/math", "algebra:3")
    'score\thelm_lite/math\talgebra:3'
    """
    return f"score\t{task_name}\t{example_id}"
