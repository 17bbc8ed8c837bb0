"""What a placement records and returns: its budget, each stage's decision and record, the compute, the result.

Frozen value types and nothing else (validation, a stage's log line, savings derived from the
compute spent); :func:`flasheval.placement.controller.place` fills them, the stop rule
(:mod:`flasheval.placement.stop_rule`) returns a :class:`Decision`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from flasheval.errors import InputError

__all__ = ["Budget", "Decision", "StageRecord", "Compute", "PlacementResult", "STATUSES"]

STATUSES: tuple[str, ...] = ("resolved", "unresolved at budget")


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """Caps on one placement; ``None`` = no cap."""

    max_examples: int | None = None
    """Examples scored in total (all datasets)."""
    max_tokens: int | None = None
    """Tokens processed in total (needs a scorer that reports tokens)."""
    max_flops: float | None = None
    """Estimated FLOPs, ``2 x parameters x tokens`` (needs parameters and tokens)."""

    def __post_init__(self) -> None:
        for name in ("max_examples", "max_tokens", "max_flops"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
                raise InputError(f"must be a positive number, got {value!r}", field="--" + name.replace("_", "-"))

    @property
    def capped(self) -> bool:
        """Whether any cap is set (a run may then end before the rule stops it)."""
        return any(v is not None for v in (self.max_examples, self.max_tokens, self.max_flops))

    def exceeded_by(self, *, examples: int, tokens: float | None, flops: float | None) -> str | None:
        """Which cap the projected totals would exceed, in words (``None`` when within budget)."""
        if self.max_examples is not None and examples > self.max_examples:
            return f"{examples} examples > budget {self.max_examples}"
        if self.max_tokens is not None and tokens is not None and tokens > self.max_tokens:
            return f"~{tokens:.3g} tokens > budget {self.max_tokens:.3g}"
        if self.max_flops is not None and flops is not None and flops > self.max_flops:
            return f"~{flops:.3g} FLOPs > budget {self.max_flops:.3g}"
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
class PlacementResult:
    """Outcome of :func:`~flasheval.placement.controller.place`."""

    model_id: str
    reference: str
    plan: str
    seed: int
    status: str
    """``resolved`` or ``unresolved at budget``."""
    reason: str
    rank: int | None
    """Placed rank among the ``n_models + 1`` (``None`` if the budget allowed no stage)."""
    interval: tuple[int, int]
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
