"""Blocks for a training run's folder (:func:`flasheval.read_run`): rank against step, and what each checkpoint cost.

The figure (:mod:`~flasheval.report.run_figure`) draws each checkpoint's rank and interval at its step, with
the pool's tier boundaries as lines; the table gives step, rank, interval, tier, status, examples, tokens and
seconds against a full run's examples and tokens (the saving), with the run's total in the last row. The
seconds are each placement's own work; the one-time start-up a process pays in its first placement (importing
torch, transformers, the model's architecture) has its own column, so the first checkpoint is not shown as
costing many times the others.

Tiers are shown within the pool: a plan's tier is clipped to the ranks ``1..n_models + 1`` (``5-9`` on a
6-rank pool reads ``5-6``; ``20+`` on a 25-rank pool reads ``20-25``) and a tier wholly beyond them is left
out. A placement that did not resolve is never given its point rank's tier: its tier column names the tiers
its interval spans and says ``unresolved``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flasheval.runs.folder import RunCheckpoint, RunHistory
from flasheval.placement.tiers import Tier
from flasheval.report.blocks import Block, Figure, Heading, Paragraph, Table
from flasheval.report.figures import parse_tier_label
from flasheval.report.run_figure import run_ranks

__all__ = ["run_blocks", "run_figure_data", "pool_tiers", "tier_text"]

_HEADER = ("step", "model", "rank", "interval", "tier", "status", "examples", "full run", "saving", "tokens",
           "full run tokens", "tokens saving", "seconds", "start-up seconds")


def _ratio(full: float | None, spent: float | None) -> str:
    return "-" if not full or not spent else f"{full / spent:.1f}x"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _label(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def pool_tiers(tiers: Sequence[Tier], n_ranks: int) -> list[tuple[int, int]]:
    """Each tier's ranks within a pool of ``n_ranks`` (``last`` clipped, open ends closed); tiers beyond it dropped.

    Examples
    --------
    >>> from flasheval.placement.tiers import Tier
    >>> plan = [Tier(first=1, last=1, resolution=0), Tier(first=2, last=4, resolution=1),
    ...         Tier(first=5, last=9, resolution=2), Tier(first=10, last=None, resolution=3)]
    >>> pool_tiers(plan, 6)
    [(1, 1), (2, 4), (5, 6)]
    """
    return [(t.first, n_ranks if t.last is None else min(t.last, n_ranks)) for t in tiers if t.first <= n_ranks]


def tier_text(c: RunCheckpoint, tiers: Sequence[Tier]) -> str:
    """The tier column of checkpoint ``c``: its tier within its pool, or, unresolved, the tiers its interval spans.

    Examples
    --------
    >>> from dataclasses import replace
    >>> from pathlib import Path
    >>> from flasheval.placement.tiers import Tier
    >>> plan = (Tier(first=1, last=1, resolution=0), Tier(first=2, last=4, resolution=1),
    ...         Tier(first=5, last=9, resolution=2))
    >>> from flasheval.placement.results import Compute, PlacementResult
    >>> placed = PlacementResult(model_id="m", reference="r", plan="p", seed=0, status="unresolved at budget",
    ...                          reason="", rank=1, interval=(1, 5), confidence_level=0.95, tier="1", resolution=0,
    ...                          n_models=5, stages=(), compute=Compute(n_examples=1, full_examples=2, n_tokens=None,
    ...                                                                 full_tokens=None, flops=None, full_flops=None))
    >>> c = RunCheckpoint(step=1, placement=placed, record_path=Path("p"))
    >>> resolved = replace(placed, rank=6, interval=(6, 6), tier="5-9", status="resolved")
    >>> tier_text(c, plan), tier_text(replace(c, placement=resolved), plan)
    ('1 to 5-6 (unresolved)', '5-6')
    """
    if c.rank is None or c.tier is None:
        return "-"
    n_ranks = c.n_models + 1
    if c.status == "resolved":
        first, last = parse_tier_label(c.tier)
        return _label(first, n_ranks if last is None else min(last, n_ranks))
    lo, hi = c.interval
    spanned = [_label(*t) for t in pool_tiers(tiers, n_ranks) if t[1] >= lo and t[0] <= hi]
    if not spanned:
        return "unresolved"
    return f"{spanned[0]} (unresolved)" if len(spanned) == 1 else f"{spanned[0]} to {spanned[-1]} (unresolved)"


def _row(c: RunCheckpoint, tiers: Sequence[Tier]) -> tuple[str, ...]:
    return (str(c.step), c.model_id, "-" if c.rank is None else str(c.rank), f"[{c.interval[0]}, {c.interval[1]}]",
            tier_text(c, tiers), c.status, str(c.n_examples), str(c.full_examples), _ratio(c.full_examples, c.n_examples),
            _count(c.n_tokens), _count(c.full_tokens), _ratio(c.full_tokens, c.n_tokens),
            _seconds(c.seconds), _seconds(c.import_seconds))


def _total(checkpoints: Sequence[RunCheckpoint]) -> tuple[str, ...]:
    """The run's sum: examples, tokens and seconds spent against full runs of every checkpoint."""
    examples, full = sum(c.n_examples for c in checkpoints), sum(c.full_examples for c in checkpoints)
    known = all(c.n_tokens is not None and c.full_tokens is not None for c in checkpoints)
    tokens = sum(c.n_tokens or 0 for c in checkpoints) if known else None
    full_tokens = sum(c.full_tokens or 0.0 for c in checkpoints) if known else None
    seconds = sum(c.seconds for c in checkpoints if c.seconds is not None)
    imports = [c.import_seconds for c in checkpoints if c.import_seconds is not None]
    return ("all", f"{len(checkpoints)} checkpoints", "", "", "", "", str(examples), str(full), _ratio(full, examples),
            _count(tokens), _count(full_tokens), _ratio(full_tokens, tokens),
            f"{seconds:.1f}" if any(c.seconds is not None for c in checkpoints) else "-",
            _seconds(sum(imports) if imports else None))


def _coverage(history: RunHistory) -> str:
    level = f"{history.confidence_level:.2%}"
    if history.simultaneous is None:
        return (f"each interval at {level} (per checkpoint: over the run's {len(history.checkpoints)} checkpoints "
                "together, some may miss)")
    run_level = 1.0 - (1.0 - history.confidence_level) * history.simultaneous
    return (f"each interval at {level}: the run's level {run_level:.0%} split over {history.simultaneous} planned "
            f"checkpoints, so all {history.simultaneous} intervals cover together with probability at least "
            f"{run_level:.0%}")


def run_figure_data(history: RunHistory) -> dict[str, Any]:
    """What :func:`~flasheval.report.run_figure.run_ranks` draws for ``history`` (tiers clipped to the pool)."""
    n_ranks = max(c.n_models for c in history.checkpoints) + 1
    return {"name": history.name, "reference": history.reference, "level": history.confidence_level, "n_ranks": n_ranks,
            "tiers": [{"first": first, "last": last, "label": _label(first, last)}
                      for first, last in pool_tiers(history.tiers, n_ranks)],
            "checkpoints": [{"step": c.step, "rank": c.rank, "interval": c.interval, "status": c.status}
                            for c in history.checkpoints]}


def run_blocks(history: RunHistory) -> list[Block]:
    """Heading, summary, the rank-against-step figure and the per-checkpoint table of a run."""
    checkpoints = history.checkpoints
    blocks: list[Block] = [
        Heading(text=f'Training run "{history.name}"', level=2),
        Paragraph(text=f"{len(checkpoints)} checkpoints placed on {history.reference} with plan {history.plan} "
                       f"(seed {history.settings.get('seed')}), {_coverage(history)}.")]
    if not checkpoints:
        return blocks
    blocks.append(Figure(name="run-ranks", png=run_ranks(run_figure_data(history)),
                         caption=f"Rank against step: each checkpoint's rank (open: unresolved) and its "
                                 f"{history.confidence_level:.1%} interval, drawn at its own step only; dashed: the tier "
                                 "boundaries of the pool"))
    blocks.append(Heading(text="Checkpoints", level=3))
    blocks.append(Table(header=_HEADER, rows=(*(_row(c, history.tiers) for c in checkpoints), _total(checkpoints))))
    return blocks
