"""Tier plans: which rank resolution each part of the leaderboard needs, and when to stop.

A plan is data (``tiers/*.yaml``), validated on load; unknown keys are refused. Fields:

``name``, ``description``
    Free text.
``stop_rule``
    ``window`` (the default plan's): stop when the interval ``[lo, hi]`` fits a window of the
    tier's width: some rank ``r`` in it has ``r - k_r <= lo`` and ``hi <= r + k_r``, with ``k_r``
    the resolution of the tier holding ``r``; the placement reported is that ``r`` (the one
    nearest the point rank), so whenever the interval covers the full-data rank the placement is
    within its tier's resolution. An interval that reaches a ``maximal`` tier must be that single rank. A narrow but lopsided interval stops; an interval across a
    tier boundary is judged with the tier of the rank it would report.
    ``interval`` (the previous rule): stop when the bootstrap interval ``[lo, hi]`` of the rank lies within
    ``[r - k, r + k]`` around the point rank ``r``, with ``k`` the resolution of the tier
    holding ``r`` (``maximal`` = 0: the interval is the single rank ``r``).
    ``flash_helm`` (compatibility): the paper's fixed schedule; stop when the point rank's
    tier has ``stop_stage`` at or below the current stage.
``confidence_level``
    Overall two-sided level of the reported interval.
``correction``
    How the error ``alpha = 1 - confidence_level`` is spent across the looks (stages) of one
    run. ``pocock`` (the lean and flash_helm plans'): repeated confidence intervals with one Pocock constant
    for every look, computed from the joint law of the nested looks on this reference (its
    dataset sizes, the finite-population factor and the pool's spreads;
    :mod:`flasheval.stats.sequential`): every look's interval covers at once with probability
    ``confidence_level`` under the normal approximation, exactly rather than by a bound.
    ``bonferroni`` (each look at ``alpha / K``, ``K`` = the looks that can err: a look where every
    example is scored cannot), ``geometric`` (look ``j`` at ``alpha / 2**(j+1)``, which sums below
    ``alpha`` for any K): the per-look errors sum to at most ``alpha``, so by the union bound every
    look's interval covers at once with probability at least ``confidence_level``. With these
    three the interval reported at a data-dependent stop covers at that level whatever the stop
    rule (coverage under optional stopping by construction). ``calibrated`` (the default plan's;
    ``window`` rule only, no ``min_stage``): one constant for every look, the smallest with which the interval at the
    STOP misses with probability at most ``alpha`` for every true position, found by simulating the
    window rule at this reference's looks under the same normal model
    (:mod:`flasheval.placement.calibration`; never above Pocock's, never below Pocock's at ``2 alpha``,
    a bound no valid constant passes); the guarantee holds up to Monte Carlo error, and a run with
    a budget cap uses Pocock's constant instead (:func:`flasheval.placement.looks.for_budget`). ``none``: each
    look at ``alpha``; the level then holds per look only.
``pool_scale``
    Optional: the pool size (ranks) the tiers are written for. For a pool of ``n`` ranks
    (reference models + the new one) with ``n > pool_scale``, every tier's last rank and every
    resolution is multiplied by ``n / pool_scale`` and rounded; a ``maximal`` tier keeps its
    ranks (:meth:`TierPlan.for_pool`). Absent: the tiers are used as written.
``estimator``
    ``control-variate`` (default) or ``paired``: how the new model's full-data mean is estimated
    from its subsample (see :mod:`flasheval.stats.bootstrap`).
``allocation``
    ``uniform`` (default: every dataset gets the stage's size) or ``neyman-cost`` (the same cost
    per look split across datasets by Neyman allocation with per-example token costs; see
    :mod:`flasheval.placement.allocation`).
``n_resamples``
    Bootstrap replicates per look: an integer from 100 to :data:`flasheval.checks.MAX_RESAMPLES` (100,000;
    the bootstrap holds an ``n_resamples x n_models`` array per look, so the ceiling keeps memory sane).
``stages``
    Strictly increasing examples per dataset, the last one ``all``.
``tiers``
    Contiguous rank ranges from 1, last one open (``null``), each with ``resolution``
    (``maximal`` or an integer k >= 1), for ``flash_helm`` ``stop_stage`` (a stage), and
    optionally ``min_stage`` (``interval`` rule: no stop in this tier before that stage; a
    guard for the top rank, where a few perfect answers make small-sample bootstraps overconfident).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from flasheval.checks import MAX_RESAMPLES, check_confidence_level, check_n_resamples
from flasheval.data_paths import embedded_data_dir
from flasheval.errors import ConfigError, InputError, UnknownNameError
from flasheval.placement.allocation import ALLOCATIONS
from flasheval.stats.bootstrap import ESTIMATORS
from flasheval.stats.sequential import pocock_level

__all__ = ["STOP_RULES", "CORRECTIONS", "Tier", "TierPlan", "load_tier_plan", "resolve_tier_plan", "plan_to_json",
           "plan_from_json"]

STOP_RULES: tuple[str, ...] = ("window", "interval", "flash_helm")
CORRECTIONS: tuple[str, ...] = ("none", "bonferroni", "geometric", "pocock", "calibrated")
_PLAN_KEYS = ("name", "description", "stop_rule", "confidence_level", "correction", "estimator", "n_resamples",
              "stages", "tiers", "pool_scale", "allocation")
_TIER_KEYS = ("ranks", "resolution", "stop_stage", "min_stage")


@dataclass(frozen=True, slots=True, kw_only=True)
class Tier:
    """A contiguous range of ranks and the resolution it needs."""

    first: int
    """Best rank in the tier."""
    last: int | None
    """Worst rank in the tier; ``None`` = open-ended."""
    resolution: int
    """Allowed distance from the point rank (0 = maximal: exactly one rank)."""
    stop_stage: int | None = None
    """``flash_helm`` rule: the stage (examples per dataset; ``None`` = all) at which it stops."""
    min_stage: int | None = None
    """``interval`` rule: the smallest stage (examples per dataset) at which a model in this tier may stop."""

    def __post_init__(self) -> None:
        if self.first < 1 or (self.last is not None and self.last < self.first):
            raise ValueError(f"bad rank range {self.first}..{self.last}")
        if self.resolution < 0:
            raise ValueError("resolution must be >= 0")

    @property
    def label(self) -> str:
        """``"1"``, ``"2-4"`` or ``"20+"``."""
        if self.last is None:
            return f"{self.first}+"
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"

    def contains(self, rank: int) -> bool:
        return rank >= self.first and (self.last is None or rank <= self.last)

    def overlaps(self, lo: int, hi: int) -> bool:
        return hi >= self.first and (self.last is None or lo <= self.last)


@dataclass(frozen=True, slots=True, kw_only=True)
class TierPlan:
    """A validated tier plan (see the module docstring for the fields)."""

    name: str
    stop_rule: str
    confidence_level: float
    correction: str
    n_resamples: int
    stages: tuple[int | None, ...]
    """Examples per dataset at each stage; ``None`` = all."""
    tiers: tuple[Tier, ...]
    estimator: str = "control-variate"
    """How the new model's full-data mean is estimated (``control-variate`` or ``paired``)."""
    description: str = ""
    pool_scale: int | None = None
    """Pool size (ranks) the tiers are written for; larger pools scale them (:meth:`for_pool`)."""
    allocation: str = "uniform"
    """How a look's examples are split across datasets (``uniform`` or ``neyman-cost``)."""

    def __post_init__(self) -> None:
        check_n_resamples(self.n_resamples)
        if self.pool_scale is not None and self.pool_scale < 2:
            raise ValueError(f"pool_scale must be >= 2, got {self.pool_scale}")
        if self.allocation not in ALLOCATIONS:
            raise UnknownNameError("allocation", self.allocation, ALLOCATIONS)
        if self.stop_rule not in STOP_RULES:
            raise UnknownNameError("stop_rule", self.stop_rule, STOP_RULES)
        if self.correction not in CORRECTIONS:
            raise UnknownNameError("correction", self.correction, CORRECTIONS)
        if self.estimator not in ESTIMATORS:
            raise UnknownNameError("estimator", self.estimator, ESTIMATORS)
        if self.correction == "calibrated" and self.stop_rule != "window":
            raise ValueError(f"correction 'calibrated' is calibrated to the window rule; stop_rule is {self.stop_rule!r}")
        if self.correction == "calibrated" and any(t.min_stage is not None for t in self.tiers):
            raise ValueError("correction 'calibrated' assumes the rule may stop at every look: drop min_stage")

    def tier_for(self, rank: int) -> Tier:
        """The tier holding ``rank``."""
        for tier in self.tiers:
            if tier.contains(rank):
                return tier
        raise ValueError(f"rank {rank} is in no tier")

    def for_pool(self, n_ranks: int) -> TierPlan:
        """The plan with its tiers scaled to a pool of ``n_ranks`` ranks (unchanged without ``pool_scale``).

        The scale is ``s = max(1, n_ranks / pool_scale)``: each tier's last rank becomes
        ``round(last * s)`` and its resolution ``round(k * s)``; a ``maximal`` tier keeps its size.
        The result has ``pool_scale`` unset, so scaling twice is a no-op.

        Examples
        --------
        >>> plan = load_tier_plan("default")
        >>> [t.label for t in plan.for_pool(40).tiers], [t.resolution for t in plan.for_pool(40).tiers]
        (['1', '2-4', '5-9', '10-19', '20+'], [0, 1, 2, 3, 4])
        >>> [t.label for t in plan.for_pool(200).tiers], [t.resolution for t in plan.for_pool(200).tiers]
        (['1', '2-20', '21-45', '46-95', '96+'], [0, 5, 10, 15, 20])
        """
        from dataclasses import replace

        if self.pool_scale is None:
            return self
        scale = max(1.0, n_ranks / self.pool_scale)
        tiers, first = [], 1
        for tier in self.tiers:
            last = None
            if tier.last is not None:
                last = first + (tier.last - tier.first) if tier.resolution == 0 else max(first, round(tier.last * scale))
            tiers.append(replace(tier, first=first, last=last, resolution=round(tier.resolution * scale)))
            first = (last or 0) + 1
        return replace(self, tiers=tuple(tiers), pool_scale=None)

    def look_levels(self, variances: Sequence[float]) -> tuple[float, ...]:
        """Two-sided level of each look's interval under the plan's correction.

        ``variances[k]`` is the variance (any common scale) of look ``k``'s estimate of the
        aggregate, non-increasing over the looks; 0 = every example scored (that look cannot err
        and takes no share of the error). :func:`flasheval.placement.looks.look_plan` computes
        them from a reference.

        Examples
        --------
        >>> plan = load_tier_plan("default")
        >>> uniform = [1.0 / s for s in plan.stages[:-1]] + [0.0]  # datasets larger than every stage
        >>> round(plan.look_levels(uniform)[0], 4)  # Pocock's constant for these 18 looks: z = 2.75
        0.994
        >>> from dataclasses import replace
        >>> round(replace(plan, correction="bonferroni").look_levels(uniform)[0], 5)  # 0.05 / 18
        0.99722
        """
        alpha = 1.0 - self.confidence_level
        erring = sum(1 for v in variances if v > 0)
        if self.correction in ("pocock", "calibrated"):  # calibrated: Pocock's is its upper bound; look_plan calibrates
            return (pocock_level(variances, self.confidence_level),) * len(variances)
        if self.correction == "bonferroni":
            return (1.0 - alpha / max(1, erring),) * len(variances)
        if self.correction == "geometric":
            return tuple(1.0 - alpha / 2.0 ** (j + 1) for j in range(len(variances)))
        return (self.confidence_level,) * len(variances)


def _tiers_dir() -> Path:
    return embedded_data_dir("tiers")


def resolve_tier_plan(name: str | os.PathLike[str]) -> Path:
    """A plan file: an existing path, or ``NAME.yaml`` among the embedded plans (``<repo>/tiers/`` in a
    checkout, the installed package's copy otherwise: :func:`flasheval.data_paths.embedded_data_dir`)."""
    direct = Path(name)
    if direct.is_file():
        return direct
    candidate = _tiers_dir() / f"{name}.yaml"
    if candidate.is_file():
        return candidate
    known = sorted(p.stem for p in _tiers_dir().glob("*.yaml"))
    raise UnknownNameError("tier plan", str(name), known)


def _stage(value: Any, path: Path, where: str) -> int | None:
    if value == "all":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"stage must be a positive integer or 'all', got {value!r}", path=path, field=where)
    return value


def _tier(raw: Any, i: int, path: Path, stop_rule: str) -> Tier:
    where = f"tiers[{i}]"
    if not isinstance(raw, dict):
        raise ConfigError("must be a mapping", path=path, field=where)
    unknown = sorted(set(raw) - set(_TIER_KEYS))
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}", path=path, field=where, allowed=_TIER_KEYS)
    ranks = raw.get("ranks")
    if not (isinstance(ranks, list) and len(ranks) == 2 and isinstance(ranks[0], int)
            and (ranks[1] is None or isinstance(ranks[1], int))):
        raise ConfigError("ranks must be [first, last] with last an integer or null", path=path, field=f"{where}.ranks")
    res = raw.get("resolution")
    if res == "maximal":
        res = 0
    if isinstance(res, bool) or not isinstance(res, int) or res < 1 and raw.get("resolution") != "maximal":
        raise ConfigError(f"resolution must be 'maximal' or an integer >= 1, got {raw.get('resolution')!r}",
                          path=path, field=f"{where}.resolution")
    if stop_rule == "flash_helm" and "stop_stage" not in raw:
        raise ConfigError("the flash_helm stop rule needs stop_stage on every tier", path=path, field=f"{where}.stop_stage")
    stop = _stage(raw["stop_stage"], path, f"{where}.stop_stage") if "stop_stage" in raw else None
    min_stage = _stage(raw["min_stage"], path, f"{where}.min_stage") if "min_stage" in raw else None
    try:
        return Tier(first=ranks[0], last=ranks[1], resolution=res, stop_stage=stop, min_stage=min_stage)
    except ValueError as exc:
        raise ConfigError(str(exc), path=path, field=f"{where}.ranks") from None


def _check_structure(plan: TierPlan, path: Path) -> None:
    stages = plan.stages
    if not stages or stages[-1] is not None:
        raise ConfigError("the last stage must be 'all'", path=path, field="stages")
    sized = [s for s in stages[:-1]]
    if any(s is None for s in sized) or sized != sorted(set(sized)):  # type: ignore[type-var]
        raise ConfigError(f"stages must be strictly increasing integers, then 'all', got {list(stages)}",
                          path=path, field="stages")
    expected = 1
    for i, tier in enumerate(plan.tiers):
        if tier.first != expected:
            raise ConfigError(f"tiers must be contiguous from rank 1; tier {i} starts at {tier.first}, expected {expected}",
                              path=path, field=f"tiers[{i}].ranks")
        if tier.last is None and i != len(plan.tiers) - 1:
            raise ConfigError("only the last tier can be open-ended", path=path, field=f"tiers[{i}].ranks")
        expected = (tier.last or 0) + 1
        if tier.min_stage is not None and tier.min_stage not in stages:
            raise ConfigError(f"min_stage {tier.min_stage} is not a stage", path=path, field=f"tiers[{i}].min_stage",
                              allowed=[("all" if s is None else s) for s in stages])
        if tier.stop_stage is not None and tier.stop_stage not in stages:
            raise ConfigError(f"stop_stage {tier.stop_stage} is not a stage", path=path, field=f"tiers[{i}].stop_stage",
                              allowed=[("all" if s is None else s) for s in stages])
    if not plan.tiers or plan.tiers[-1].last is not None:
        raise ConfigError("the last tier must be open-ended (ranks: [k, null])", path=path, field="tiers")


def load_tier_plan(name: str | os.PathLike[str]) -> TierPlan:
    """Load and validate a tier plan by path or name; :class:`ConfigError` names file, field and value."""
    path = resolve_tier_plan(name)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:  # unreadable (permissions, a folder, an I/O error): one line naming the file
        raise ConfigError(f"cannot read the tier plan ({exc.strerror or exc})", path=path) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start + 1})", path=path) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(f"not valid YAML ({getattr(exc, 'problem', exc)})", path=path,
                          line=None if mark is None else mark.line + 1) from None
    if not isinstance(raw, dict):
        raise ConfigError("a tier plan must be a mapping", path=path)
    unknown = sorted(set(raw) - set(_PLAN_KEYS))
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}", path=path, field=unknown[0], allowed=_PLAN_KEYS)
    for key in ("name", "stop_rule", "stages", "tiers"):
        if key not in raw:
            raise ConfigError("missing key", path=path, field=key)
    level = raw.get("confidence_level", 0.95)
    try:
        check_confidence_level(level, field="confidence_level")
    except InputError as exc:  # the one rule and message, as a fault of the plan file
        raise ConfigError(exc.reason, path=path, field="confidence_level") from None
    pool_scale = raw.get("pool_scale")
    if pool_scale is not None and (isinstance(pool_scale, bool) or not isinstance(pool_scale, int) or pool_scale < 2):
        raise ConfigError(f"must be an integer >= 2 (the pool size the tiers are written for), got {pool_scale!r}",
                          path=path, field="pool_scale")
    n_res = raw.get("n_resamples", 1000)
    if isinstance(n_res, bool) or not isinstance(n_res, int) or not 100 <= n_res <= MAX_RESAMPLES:
        raise ConfigError(f"must be an integer from 100 to {MAX_RESAMPLES} (the ceiling keeps the bootstrap's memory "
                          f"sane), got {n_res!r}", path=path, field="n_resamples")
    stop_rule = str(raw["stop_rule"])
    for key, allowed, default in (("stop_rule", STOP_RULES, None), ("correction", CORRECTIONS, "none"),
                                  ("estimator", ESTIMATORS, "control-variate"), ("allocation", ALLOCATIONS, "uniform")):
        if raw.get(key, default) not in allowed:
            raise ConfigError(f"unknown value {raw.get(key)!r}", path=path, field=key, allowed=allowed)
    if raw.get("correction") == "calibrated" and stop_rule != "window":
        raise ConfigError(f"'calibrated' is calibrated to the window rule, not {stop_rule!r}", path=path, field="correction")
    if raw.get("correction") == "calibrated" and any(isinstance(t, dict) and "min_stage" in t for t in raw.get("tiers") or []):
        raise ConfigError("'calibrated' assumes the rule may stop at every look: drop min_stage", path=path,
                          field="correction")
    if not isinstance(raw["stages"], list) or not isinstance(raw["tiers"], list):
        raise ConfigError("stages and tiers must be lists", path=path, field="stages" if not isinstance(raw["stages"], list) else "tiers")
    plan = TierPlan(
        name=str(raw["name"]), description=str(raw.get("description", "")), stop_rule=stop_rule,
        confidence_level=float(level), correction=str(raw.get("correction", "none")), n_resamples=n_res,
        estimator=str(raw.get("estimator", "control-variate")), pool_scale=pool_scale,
        allocation=str(raw.get("allocation", "uniform")),
        stages=tuple(_stage(s, path, f"stages[{i}]") for i, s in enumerate(raw["stages"])),
        tiers=tuple(_tier(t, i, path, stop_rule) for i, t in enumerate(raw["tiers"])),
    )
    _check_structure(plan, path)
    return plan


def plan_to_json(plan: TierPlan) -> dict[str, Any]:
    """``plan`` as JSON values (what :func:`plan_from_json` reads back to an equal plan): a run folder keeps the
    plan its first placement was given, so a later placement into the run may leave it out.

    Examples
    --------
    >>> plan = load_tier_plan("default")
    >>> plan_from_json(plan_to_json(plan)) == plan
    True
    """
    import json
    from dataclasses import asdict

    return json.loads(json.dumps(asdict(plan)))  # tuples as lists: equal to what run.json reads back


def plan_from_json(raw: Any, *, path: Path | None = None, field: str = "plan_spec") -> TierPlan:
    """The :class:`TierPlan` :func:`plan_to_json` wrote; :class:`ConfigError` (one line naming ``path`` and
    ``field``) for anything else."""
    try:
        fields = dict(raw)
        fields["stages"] = tuple(fields["stages"])
        fields["tiers"] = tuple(Tier(**tier) for tier in fields["tiers"])
        return TierPlan(**fields)
    except (TypeError, ValueError, KeyError) as exc:
        raise ConfigError(f"not a tier plan as flasheval writes one ({exc})", path=path, field=field) from None

