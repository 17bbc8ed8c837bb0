"""DIoR analysis of a reference leaderboard: the three decisions and the findings drawn from them.

Thin orchestration around the pure statistics of :mod:`flasheval.stats.dior`: take the score
matrices of a :class:`~flasheval.reference.ReferenceLeaderboard`, run the requested decisions
with independent seeded streams, and condense the curves into the three findings the
``dior`` command prints (examples vs datasets, where the gain per example flattens, whether
mean win rate can change the leader when a weak model is added).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from flasheval.errors import InputError
from flasheval.hashing import derive_seed
from flasheval.reference import ReferenceLeaderboard
from flasheval.stats.dior import DECISIONS, DiorSummary, dior_datasets, dior_examples, kendall_tau_b
from flasheval.stats.dior_pool import LeaderChange, dior_pool, find_leader_changes
from flasheval.stats.ranking import AGGREGATES

__all__ = ["DEFAULT_SIZES", "FLAT_GAIN_PER_100", "DiorReport", "run_dior", "flattening_size", "examples_equivalent"]

DEFAULT_SIZES: tuple[int, ...] = (10, 20, 50, 100, 200, 300, 500, 1000)
"""Examples per dataset tried by the ``examples`` decision unless ``--sizes`` is given."""
FLAT_GAIN_PER_100 = 0.01
"""The reliability curve counts as flat once 100 more examples per dataset add less than this to tau's lower bound."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DiorReport:
    """Everything ``flasheval dior`` computes (the ``dior`` record's payload)."""

    reference: str
    aggregate: str
    model_ids: tuple[str, ...]
    dataset_names: tuple[str, ...]
    seed: int
    n_instantiations: int
    confidence_level: float
    examples: tuple[DiorSummary, ...]
    datasets: tuple[DiorSummary, ...]
    pool: tuple[DiorSummary, ...]
    """One per aggregate: reliability under random sub-pools."""
    aggregate_tau: dict[str, float]
    """Full-data Kendall tau between each aggregate's ranking and the reference aggregate's."""
    leader_changes: tuple[LeaderChange, ...]
    n_pools_tried: int
    weak_models: tuple[str, ...]
    findings: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in ("reference", "aggregate", "seed", "n_instantiations", "confidence_level",
                                             "aggregate_tau", "n_pools_tried", "findings")}
        out["model_ids"], out["dataset_names"] = list(self.model_ids), list(self.dataset_names)
        out["weak_models"] = list(self.weak_models)
        for key in ("examples", "datasets", "pool"):
            out[key] = [asdict(s) for s in getattr(self, key)]
        out["leader_changes"] = [self._change_json(c) for c in self.leader_changes[:20]]
        out["n_leader_changes"] = len(self.leader_changes)
        return out

    def _change_json(self, change: LeaderChange) -> dict[str, Any]:
        ids = self.model_ids
        return {"pool_size": len(change.pool), "pool": [ids[i] for i in change.pool], "added": ids[change.added],
                "leader_before": ids[change.leader_before], "leader_after": ids[change.leader_after]}


def flattening_size(summaries: Sequence[DiorSummary], *, gain_per_100: float = FLAT_GAIN_PER_100) -> int | None:
    """The first size after which 100 more examples per dataset gain less than ``gain_per_100`` in tau's lower bound.

    Examples
    --------
    >>> mk = lambda s, t: DiorSummary(decision="examples", size=s, aggregate="mean", n_instantiations=1,
    ...     tau_lower=t, tau_median=t, tau_mean=t, confidence_level=0.95, top_two_swap_rate=0.0)
    >>> flattening_size([mk(100, 0.8), mk(200, 0.9), mk(300, 0.905), mk(500, 0.91)])
    200
    """
    ordered = sorted(summaries, key=lambda s: s.size)
    for a, b in zip(ordered, ordered[1:]):
        if (b.tau_lower - a.tau_lower) / (b.size - a.size) * 100 < gain_per_100:
            return a.size
    return None


def examples_equivalent(examples: Sequence[DiorSummary], tau_lower: float) -> int | None:
    """The smallest examples-per-dataset size whose reliability reaches ``tau_lower`` (``None``: below every size)."""
    reached = [s.size for s in sorted(examples, key=lambda s: s.size) if s.tau_lower >= tau_lower]
    return reached[0] if reached else None


def _candidate_pools(values: np.ndarray, weak: np.ndarray, n_random: int, rng: np.random.Generator) -> np.ndarray:
    """Pools searched for a leader change: the full pool less each weak model, top-k prefixes, random halves."""
    n = len(values)
    order = np.argsort(-values, kind="stable")
    pools = [np.ones(n, dtype=bool)]
    for w in weak:
        p = np.ones(n, dtype=bool)
        p[w] = False
        pools.append(p)
    for k in range(2, n):
        p = np.zeros(n, dtype=bool)
        p[order[:k]] = True
        pools.append(p)
    pools.extend(rng.random((n_random, n)) < 0.5)
    return np.array(pools)


def _leader_search(reference: ReferenceLeaderboard, kind: str, n_random: int,
                   seed: int) -> tuple[tuple[LeaderChange, ...], int, np.ndarray]:
    """Leader changes under mean win rate; weak = the bottom half of the ranking under ``kind``."""
    values = reference.aggregate_values(kind)
    direction = reference.ranking_higher_is_better(kind)
    oriented = values if direction else -values
    weak = np.argsort(-oriented, kind="stable")[reference.n_models // 2:]
    pools = _candidate_pools(oriented, weak, n_random, np.random.default_rng(derive_seed(seed, "dior", "pools")))
    changes = find_leader_changes(reference.dataset_means(), pools, weak, higher_is_better=reference.higher_is_better)
    # largest pools first: the most natural case is adding one weak model to (nearly) the whole pool
    return tuple(sorted(changes, key=lambda c: (-len(c.pool), c.added))), len(pools), weak


def _findings(report_parts: dict[str, Any]) -> dict[str, Any]:
    examples, datasets = report_parts["examples"], report_parts["datasets"]
    findings: dict[str, Any] = {}
    if examples:
        findings["flattening_size"] = flattening_size(examples)
        findings["flat_gain_per_100"] = FLAT_GAIN_PER_100
    if examples and datasets:
        full_resample = max(datasets, key=lambda s: s.size)
        findings["datasets_tau_lower"] = full_resample.tau_lower
        findings["examples_equivalent_of_datasets"] = examples_equivalent(examples, full_resample.tau_lower)
    changes = report_parts["leader_changes"]
    if changes is not None:
        findings["win_rate_leader_change_found"] = bool(changes)
    return findings


def run_dior(
    reference: ReferenceLeaderboard,
    *,
    decisions: Sequence[str] = DECISIONS,
    sizes: Sequence[int] = DEFAULT_SIZES,
    dataset_counts: Sequence[int] | None = None,
    aggregate_kind: str | None = None,
    n_instantiations: int = 1000,
    confidence_level: float = 0.95,
    seed: int = 0,
) -> DiorReport:
    """Run the DIoR decisions on ``reference`` (see :mod:`flasheval.stats.dior` for each decision).

    An unknown decision name is refused (:class:`~flasheval.errors.InputError`), never ignored.
    """
    decisions = (decisions,) if isinstance(decisions, str) else tuple(decisions)  # one name, not its letters
    unknown = [d for d in decisions if d not in DECISIONS]
    if unknown:
        raise InputError(f"unknown decision {unknown[0]!r}", field="--decision", allowed=DECISIONS)
    kind = aggregate_kind or reference.manifest.aggregate
    options = reference.aggregate_options(kind)
    counts = tuple(dataset_counts or (len(reference.dataset_names),))
    common = {"n_instantiations": n_instantiations, "confidence_level": confidence_level}
    parts: dict[str, Any] = {"examples": (), "datasets": (), "pool": (), "leader_changes": None}
    if "examples" in decisions:
        parts["examples"] = dior_examples(reference.scores, sizes, aggregate_options=options,
                                          rng=derive_seed(seed, "dior", "examples"), **common)
    if "datasets" in decisions:
        parts["datasets"] = dior_datasets(reference.dataset_means(), counts, aggregate_options=options,
                                          rng=derive_seed(seed, "dior", "datasets"), **common)
    tau_by_aggregate: dict[str, float] = {}
    weak: np.ndarray = np.array([], dtype=np.int64)
    n_pools = 0
    if "aggregate" in decisions:
        usable = [a for a in AGGREGATES if a != "centered" or (reference.manifest.random_baselines and reference.higher_is_better)]
        parts["pool"] = tuple(dior_pool(reference.dataset_means(), aggregate_options=reference.aggregate_options(a),
                                        rng=derive_seed(seed, "dior", "pool", a), **common) for a in usable)
        base = reference.aggregate_values(kind)
        tau_by_aggregate = {a: float(kendall_tau_b(base, reference.aggregate_values(a))) for a in usable}
        parts["leader_changes"], n_pools, weak = _leader_search(reference, kind, n_instantiations, seed)
    findings = _findings(parts)
    if len(weak):
        ranks = {r.model_id: r.rank for r in reference.ranking(kind)}
        findings["weak_rank"] = {reference.model_ids[i]: ranks[reference.model_ids[i]] for i in weak}
    return DiorReport(
        reference=reference.name, aggregate=kind, model_ids=reference.model_ids, dataset_names=reference.dataset_names,
        seed=seed, n_instantiations=n_instantiations, confidence_level=confidence_level, examples=parts["examples"],
        datasets=parts["datasets"], pool=parts["pool"], aggregate_tau=tau_by_aggregate,
        leader_changes=parts["leader_changes"] or (), n_pools_tried=n_pools,
        weak_models=tuple(reference.model_ids[i] for i in weak), findings=findings,
    )
