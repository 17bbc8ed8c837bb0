"""Blocks for a training run's folder (:func:`flasheval.read_run`): rank against step, and what each checkpoint cost.

The figure draws each checkpoint's rank and interval (a band) against its step, with the pool's tier
boundaries as lines; the table gives step, rank, interval, tier, status, examples, tokens and seconds
against a full run's examples and tokens (the saving), with the run's total in the last row.
"""

from __future__ import annotations

from collections.abc import Sequence

from flasheval.placement.run_folder import RunCheckpoint, RunHistory
from flasheval.report import figures
from flasheval.report.blocks import Block, Figure, Heading, Paragraph, Table

__all__ = ["run_blocks"]

_HEADER = ("step", "model", "rank", "interval", "tier", "status", "examples", "full run", "saving", "tokens",
           "full run tokens", "tokens saving", "seconds")


def _ratio(full: float | None, spent: float | None) -> str:
    return "-" if not full or not spent else f"{full / spent:.1f}x"


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _row(c: RunCheckpoint) -> tuple[str, ...]:
    return (str(c.step), c.model, "-" if c.rank is None else str(c.rank), f"[{c.interval[0]}, {c.interval[1]}]",
            c.tier or "-", c.status, str(c.examples), str(c.full_examples), _ratio(c.full_examples, c.examples),
            _count(c.tokens), _count(c.full_tokens), _ratio(c.full_tokens, c.tokens),
            "-" if c.seconds is None else f"{c.seconds:.1f}")


def _total(checkpoints: Sequence[RunCheckpoint]) -> tuple[str, ...]:
    """The run's sum: examples, tokens and seconds spent against full runs of every checkpoint."""
    examples, full = sum(c.examples for c in checkpoints), sum(c.full_examples for c in checkpoints)
    known = all(c.tokens is not None and c.full_tokens is not None for c in checkpoints)
    tokens = sum(c.tokens or 0 for c in checkpoints) if known else None
    full_tokens = sum(c.full_tokens or 0.0 for c in checkpoints) if known else None
    seconds = sum(c.seconds for c in checkpoints if c.seconds is not None)
    return ("all", f"{len(checkpoints)} checkpoints", "", "", "", "", str(examples), str(full), _ratio(full, examples),
            _count(tokens), _count(full_tokens), _ratio(full_tokens, tokens),
            f"{seconds:.1f}" if any(c.seconds is not None for c in checkpoints) else "-")


def _coverage(history: RunHistory) -> str:
    level = f"{history.level:.2%}"
    if history.simultaneous is None:
        return (f"each interval at {level} (per checkpoint: over the run's {len(history.checkpoints)} checkpoints "
                "together, some may miss)")
    run_level = 1.0 - (1.0 - history.level) * history.simultaneous
    return (f"each interval at {level}: the run's level {run_level:.0%} split over {history.simultaneous} planned "
            f"checkpoints, so all {history.simultaneous} intervals cover together with probability at least "
            f"{run_level:.0%}")


def run_blocks(history: RunHistory) -> list[Block]:
    """Heading, summary, the rank-against-step figure and the per-checkpoint table of a run."""
    checkpoints = history.checkpoints
    blocks: list[Block] = [
        Heading(text=f"Run {history.name}", level=2),
        Paragraph(text=f"{len(checkpoints)} checkpoints placed on {history.reference} with plan {history.plan} "
                       f"(seed {history.settings.get('seed')}), {_coverage(history)}.")]
    if not checkpoints:
        return blocks
    n_ranks = max(c.n_models for c in checkpoints) + 1
    run = {"name": history.name, "reference": history.reference, "level": history.level, "n_ranks": n_ranks,
           "tiers": [{"first": t.first, "label": t.label} for t in history.tiers[1:] if t.first <= n_ranks],
           "checkpoints": [{"step": c.step, "rank": c.rank, "interval": c.interval, "status": c.status}
                           for c in checkpoints]}
    blocks.append(Figure(name="run-ranks", png=figures.run_ranks(run),
                         caption=f"Rank against step ({history.level:.1%} intervals as a band; dashed: the tier "
                                 "boundaries of the pool)"))
    blocks.append(Heading(text="Checkpoints", level=3))
    blocks.append(Table(header=_HEADER, rows=(*(_row(c) for c in checkpoints), _total(checkpoints))))
    return blocks
