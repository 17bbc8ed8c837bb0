"""Seeded, nested per-task example orders.

Every consumer that needs "the first N examples" of a task (``evaluate --n-examples``, the
placement controller's stages, ``reference build``) takes a prefix of ONE seeded permutation
of the task's example ids. Stage k is therefore a prefix of stage k+1 (nested subsamples,
as HELM does), and the order depends only on ``(seed, task_name)`` and the set of ids, never
on the process count, batch size or the order the ids were read in.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flasheval.hashing import derive_seed

__all__ = ["example_order", "nested_prefix"]


def example_order(example_ids: Sequence[str], *, seed: int, task_name: str) -> tuple[str, ...]:
    """The seeded permutation of ``example_ids`` for ``task_name``.

    The ids are sorted first, so the permutation does not depend on input order.

    Parameters
    ----------
    example_ids
        Distinct example ids of one task (dataset).
    seed
        The run's seed.
    task_name
        The task (dataset) name; different tasks get independent permutations.

    Examples
    --------
    >>> ids = [f"{i:04d}" for i in range(10)]
    >>> example_order(ids, seed=0, task_name="t") == example_order(ids[::-1], seed=0, task_name="t")
    True
    >>> sorted(example_order(ids, seed=0, task_name="t")) == ids
    True
    """
    ordered = sorted(example_ids)
    if len(set(ordered)) != len(ordered):
        raise ValueError(f"example ids of task {task_name!r} are not distinct")
    rng = np.random.default_rng(derive_seed(seed, task_name))
    perm = rng.permutation(len(ordered))
    return tuple(ordered[i] for i in perm)


def nested_prefix(order: Sequence[str], n_examples: int | None) -> tuple[str, ...]:
    """The first ``n_examples`` of ``order`` (all of it when ``None`` or larger than it).

    Examples
    --------
    >>> nested_prefix(("c", "a", "b"), 2)
    ('c', 'a')
    >>> nested_prefix(("c", "a", "b"), None)
    ('c', 'a', 'b')
    """
    if n_examples is None:
        return tuple(order)
    if n_examples < 0:
        raise ValueError(f"n_examples must be >= 0, got {n_examples}")
    return tuple(order[:n_examples])
