"""What a placement records and returns: its budget, each stage's decision and record, the compute, the result.

Frozen value types and nothing else (validation, a stage's log line, savings derived from the
compute spent); :func:`flasheval.placement.controller.place` fills them, the stop rule
(:mod:`flasheval.placement.stop_rule`) returns a :class:`Decision`, :func:`flasheval.place` measures a
live placement's :class:`Timing`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from flasheval.checks import check_positive
from flasheval.records.schemas import check_payload

__all__ = ["Budget", "Decision", "StageRecord", "Compute", "Timing", "PlacementResult", "Placed", "STATUSES"]

STATUSES: tuple[str, ...] = ("resolved", "clearly low", "unresolved at budget")
"""How a placement ended: its stop rule stopped it; racing stopped it (a sweep's checkpoint whose interval lies at or
below the racing rank, :attr:`~flasheval.placement.controller.Course.low_rank`); or the budget could not pay for
its next look."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """Caps on one placement; ``None`` = no cap."""

    max_examples: int | None = None
    """Examples scored in total (all datasets)."""
    max_tokens: int | None = None
    """Tokens processed in total (needs a scorer that reports tokens)."""
    max_flops: float | None = None
    """Estimated FLOPs, ``2 x parameters x tokens`` (needs parameters and tokens)."""
    max_seconds: float | None = None
    """Wall seconds of one placement, from its call: a stage whose end is projected past it (the seconds so far
    plus its new examples at the latest stage's seconds per example) is not started. The first stage always
    runs (nothing projects it). Inside a training job: below the process group's timeout, which the other
    processes' next collective waits for under ``distributed="main"``. Not reproducible from run to run, as
    the machine's speed is not; not for sweeps (their budget is shared by many placements)."""

    def __post_init__(self) -> None:
        for name in ("max_examples", "max_tokens", "max_flops", "max_seconds"):
            value = getattr(self, name)
            check_positive(value, field="--" + name.replace("_", "-"))  # the one rule for a budget's caps
            if isinstance(value, np.generic):  # a numpy scalar kept as its Python value (records, hashes, JSON)
                object.__setattr__(self, name, value.item())

    @property
    def capped(self) -> bool:
        """Whether any cap is set (a run may then end before the rule stops it)."""
        return any(v is not None for v in (self.max_examples, self.max_tokens, self.max_flops, self.max_seconds))

    def exceeded_by(self, *, examples: int, tokens: float | None, flops: float | None,
                    seconds: float | None = None) -> str | None:
        """Which cap the projected totals would exceed, in words (``None`` when within budget)."""
        if self.max_examples is not None and examples > self.max_examples:
            return f"{examples} examples > budget {self.max_examples}"
        if self.max_tokens is not None and tokens is not None and tokens > self.max_tokens:
            return f"~{tokens:.3g} tokens > budget {self.max_tokens:.3g}"
        if self.max_flops is not None and flops is not None and flops > self.max_flops:
            return f"~{flops:.3g} FLOPs > budget {self.max_flops:.3g}"
        if self.max_seconds is not None and seconds is not None and seconds > self.max_seconds:
            return f"~{seconds:.3g} s > budget {self.max_seconds:.3g} s"
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What to do after a stage."""

    stop: bool
    reason: str
    """Why, in words (printed in the stage's log line)."""
    rank: int | None = None
    """The placement to report when it differs from the point rank (``window`` rule: a rank
    consistent with the interval); ``None`` = the point rank."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StageRecord:
    """One stage of a placement (one log line)."""

    stage: int
    """0-based index into the plan's stages."""
    stage_size: int | None
    """Examples per dataset asked for (``None`` = all)."""
    n_examples: tuple[int, ...]
    """Examples scored so far per dataset (capped at the dataset's size)."""
    rank: int
    """The placement: the point rank, or at a ``window`` stop the rank consistent with the interval."""
    mid_rank: float
    interval: tuple[int, int]
    confidence_level: float
    """Level of this look's interval (after the plan's multiple-look correction)."""
    tier: str
    resolution: int
    decision: str
    """``stop`` or ``escalate``."""
    reason: str

    def log_line(self, n_stages: int) -> str:
        size = "all" if self.stage_size is None else self.stage_size
        res = "maximal" if self.resolution == 0 else f"+-{self.resolution}"
        return (f"stage {self.stage + 1}/{n_stages} ({size}/dataset): {sum(self.n_examples)} examples, rank {self.rank} "
                f"[{self.interval[0]}, {self.interval[1]}] @{self.confidence_level:.2%}, tier {self.tier} ({res}), "
                f"{self.decision}: {self.reason}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Compute:
    """Compute actually spent and the saving versus scoring every example."""

    n_examples: int
    full_examples: int
    """Examples in the whole reference (all datasets)."""
    n_tokens: int | None
    """Tokens reported by the scorer (``None`` if it reports none)."""
    full_tokens: float | None
    """Tokens of a full run, extrapolated per dataset from the tokens per example seen."""
    flops: float | None
    """``2 x n_parameters x n_tokens``."""
    full_flops: float | None

    @property
    def saving(self) -> float:
        """Full-run examples (tokens, when known) divided by those spent."""
        return self.token_saving or self.example_saving

    @property
    def example_saving(self) -> float:
        """Full-run examples divided by the examples spent."""
        return self.full_examples / max(self.n_examples, 1)

    @property
    def token_saving(self) -> float | None:
        """Full-run tokens divided by the tokens spent (``None`` unless the scorer reports tokens)."""
        return self.full_tokens / self.n_tokens if self.n_tokens and self.full_tokens else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """Where a live placement's wall time went, and what a full run would take at the throughput it measured.

    The projection is in tokens, not examples: examples of different datasets differ in length, and a
    placement's sample (the same number per dataset) mixes the datasets otherwise than a full run does,
    while the model's cost per token hardly depends on the dataset. It counts the model's forward passes
    and its load; a full run's own work outside the model (prompts, store, records) is left out.

    Examples
    --------
    >>> t = Timing(wall_seconds=60.0, load_seconds=40.0, scoring_seconds=18.0, scored_tokens=1800,
    ...            looks_seconds=0.5, full_tokens=9000.0)
    >>> t.outside_model_seconds, t.tokens_per_second, t.full_scoring_seconds, t.full_wall_seconds, t.time_saving
    (2.0, 100.0, 90.0, 130.0, 2.1666666666666665)
    """

    wall_seconds: float
    """The whole placement: the reference's checks, opening the model, every stage (record writing and
    :attr:`import_seconds` excluded)."""
    load_seconds: float
    """Opening the model (config, tokenizer, fingerprint) and loading its weights (:attr:`import_seconds`
    excluded)."""
    scoring_seconds: float
    """Seconds in the model's forward passes (the backend's ``forward_seconds``)."""
    scored_tokens: int
    """Tokens those passes ran (0 when the results store answered every request)."""
    looks_seconds: float
    """Fixing the looks before the first stage (with ``correction: calibrated``: calibrating the constant);
    part of :attr:`outside_model_seconds`."""
    full_tokens: float | None
    """Tokens of a full run (:attr:`Compute.full_tokens`, counted per example)."""
    shared_tokens: int | None = None
    """Tokens of :attr:`full_tokens` a full run does not run: contexts that several of its examples share (Winograd's
    and Winogrande's twin sentences), counted once per example but run once per call
    (:meth:`~flasheval.reference.scoring.scorers.LiveScorer.shared_context_tokens`); ``None``: not counted (a
    scorer that cannot tell, or nothing ran)."""
    import_seconds: float = 0.0
    """The process's one-time start-up the placement paid apart from its own work: importing modules for the
    first time in the process (torch, transformers, the model's architecture, lm-eval;
    :mod:`~flasheval.placement.import_clock`). A later placement in the same process pays none."""

    def __post_init__(self) -> None:
        for name in ("wall_seconds", "load_seconds", "scoring_seconds", "looks_seconds", "import_seconds"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.scored_tokens < 0:
            raise ValueError(f"scored_tokens must be >= 0, got {self.scored_tokens}")
        if self.shared_tokens is not None and self.shared_tokens < 0:
            raise ValueError(f"shared_tokens must be >= 0, got {self.shared_tokens}")

    @property
    def outside_model_seconds(self) -> float:
        """Wall seconds neither in the model's forward passes nor in its load (prompts, tokenization,
        store, bootstrap, looks)."""
        return max(0.0, self.wall_seconds - self.load_seconds - self.scoring_seconds)

    @property
    def tokens_per_second(self) -> float | None:
        """Tokens per second of forward passes (``None`` when nothing ran)."""
        return self.scored_tokens / self.scoring_seconds if self.scored_tokens and self.scoring_seconds > 0 else None

    @property
    def full_run_tokens(self) -> float | None:
        """Tokens a full run's forward passes run: :attr:`full_tokens` less :attr:`shared_tokens` (the shared count is
        exact, the per-example one extrapolated; never below 0), the unit of :attr:`scored_tokens`."""
        return None if self.full_tokens is None else max(0.0, self.full_tokens - (self.shared_tokens or 0))

    @property
    def full_scoring_seconds(self) -> float | None:
        """Seconds a full run's forward passes would take: :attr:`full_run_tokens` at :attr:`tokens_per_second`."""
        rate, tokens = self.tokens_per_second, self.full_run_tokens
        return None if rate is None or tokens is None else tokens / rate

    @property
    def full_wall_seconds(self) -> float | None:
        """A full run: the same load plus :attr:`full_scoring_seconds`."""
        scoring = self.full_scoring_seconds
        return None if scoring is None else self.load_seconds + scoring

    @property
    def time_saving(self) -> float | None:
        """:attr:`full_wall_seconds` divided by the placement's :attr:`wall_seconds`."""
        full = self.full_wall_seconds
        return None if full is None or self.wall_seconds <= 0 else full / self.wall_seconds

    def to_json(self) -> dict[str, Any]:
        """The record's ``timing`` entry: the measured fields and the derived ones."""
        names = ("wall_seconds", "load_seconds", "scoring_seconds", "scored_tokens", "looks_seconds", "full_tokens",
                 "shared_tokens", "full_run_tokens", "import_seconds", "outside_model_seconds", "tokens_per_second",
                 "full_scoring_seconds", "full_wall_seconds", "time_saving")
        return {name: getattr(self, name) for name in names}


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementResult:
    """Outcome of :func:`~flasheval.placement.controller.place`."""

    model_id: str
    reference: str
    plan: str
    seed: int
    status: str
    """One of :data:`STATUSES`: ``resolved``, ``clearly low`` (racing, in a sweep) or ``unresolved at budget``."""
    reason: str
    rank: int | None
    """Placed rank among the ``n_models + 1``: the last look's (``None`` if the budget allowed no stage)."""
    interval: tuple[int, int]
    """The last look's interval (``(1, n_models + 1)`` if the budget allowed no stage)."""
    confidence_level: float
    """Overall level of the interval (the plan's), whatever the per-look level."""
    tier: str | None
    resolution: int | None
    n_models: int
    stages: tuple[StageRecord, ...]
    compute: Compute

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (the ``place`` record's payload)."""
        from dataclasses import asdict

        out = asdict(self)
        out["compute"]["saving"] = self.compute.saving
        out["compute"]["example_saving"] = self.compute.example_saving
        out["compute"]["token_saving"] = self.compute.token_saving
        return out

    @classmethod
    def from_json(cls, payload: Mapping[str, Any]) -> PlacementResult:
        """The result a ``place`` record's payload holds: the inverse of :meth:`to_json`.

        Keys :meth:`to_json` derives (``compute.saving``, ``example_saving``, ``token_saving``) and those the
        record adds beside the result (``aggregate``, ``timing``, ``live``, ``leaderboard``, ...) are ignored;
        numbers are kept as the record holds them. Compute's token and FLOPs counts, optional in the ``place``
        schema, are ``None`` when absent.

        Raises
        ------
        InputError
            The payload does not fit the ``place`` schema (:mod:`flasheval.records.schemas`): one line naming
            the field.
        """
        check_payload("place", payload if isinstance(payload, dict) else dict(payload), path=None)
        stages = tuple(StageRecord(
            stage=s["stage"], stage_size=s["stage_size"], n_examples=tuple(s["n_examples"]), rank=s["rank"],
            mid_rank=s["mid_rank"], interval=(s["interval"][0], s["interval"][1]),
            confidence_level=s["confidence_level"], tier=s["tier"], resolution=s["resolution"],
            decision=s["decision"], reason=s["reason"]) for s in payload["stages"])
        c = payload["compute"]
        compute = Compute(n_examples=c["n_examples"], full_examples=c["full_examples"], n_tokens=c.get("n_tokens"),
                          full_tokens=c.get("full_tokens"), flops=c.get("flops"), full_flops=c.get("full_flops"))
        low, high = payload["interval"]
        return cls(model_id=payload["model_id"], reference=payload["reference"], plan=payload["plan"],
                   seed=payload["seed"], status=payload["status"], reason=payload["reason"], rank=payload["rank"],
                   interval=(low, high), confidence_level=payload["confidence_level"], tier=payload["tier"],
                   resolution=payload["resolution"], n_models=payload["n_models"], stages=stages, compute=compute)


class Placed:
    """What holds a placement (``placement``: a :class:`PlacementResult`) reads its outcome through these: a sweep's
    checkpoint, a run's checkpoint, a ``place`` run. One definition of each, read-only (replace ``placement`` to
    change one)."""

    __slots__ = ()
    placement: PlacementResult

    @property
    def model_id(self) -> str:
        return self.placement.model_id

    @property
    def status(self) -> str:
        """One of :data:`STATUSES`."""
        return self.placement.status

    @property
    def reason(self) -> str:
        return self.placement.reason

    @property
    def rank(self) -> int | None:
        """The rank placed (``None`` only when no stage ran within the budget)."""
        return self.placement.rank

    @property
    def interval(self) -> tuple[int, int]:
        return self.placement.interval

    @property
    def confidence_level(self) -> float:
        return self.placement.confidence_level

    @property
    def tier(self) -> str | None:
        return self.placement.tier

    @property
    def resolution(self) -> int | None:
        return self.placement.resolution

    @property
    def n_models(self) -> int:
        """Reference models in the pool it was placed among (ranks run from 1 to ``n_models + 1``)."""
        return self.placement.n_models

    @property
    def n_examples(self) -> int:
        return self.placement.compute.n_examples

    @property
    def full_examples(self) -> int:
        """Examples of a full run of the reference's datasets."""
        return self.placement.compute.full_examples

    @property
    def n_tokens(self) -> int | None:
        return self.placement.compute.n_tokens

    @property
    def full_tokens(self) -> float | None:
        return self.placement.compute.full_tokens

    @property
    def flops(self) -> float | None:
        return self.placement.compute.flops
