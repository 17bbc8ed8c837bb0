"""A training run's rank against step, drawn as exactly what each checkpoint's record says.

Each placed checkpoint is a point at its rank and a vertical bar over its interval's ranks, at its own step
only: nothing is drawn between steps, because no placement was made there (a band filled from one checkpoint
to the next would claim ranks at steps never placed). A one-rank interval (``[5, 5]``) is a bar of zero height,
marked by its caps, not widened to a rank's cell. The pool's tier boundaries are dashed lines, each tier
labelled with its ranks within the pool (the caller clips them). The legend sits below the axes, outside
them, so it never hides a bar.

Artists carry a ``gid`` saying what they draw (``interval``, ``rank``, ``unresolved``, ``tier-boundary``,
``tier-label``) so tests read the drawn data rather than the pixels.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg", force=False)
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from flasheval.report.figures import _png  # noqa: E402

__all__ = ["run_ranks_figure", "run_ranks"]

_NEW = "#d62728"
_POOL = "#1f77b4"


def _draw_tiers(ax: Any, tiers: list[Mapping[str, Any]]) -> None:
    """Dashed boundaries above every tier but the first, and each tier's label beside its middle, right of the
    axes (at its middle, not its edge: a one-rank tier 1 and the next tier's label would overlap on a large pool)."""
    for tier in tiers:
        if tier["first"] > 1:
            ax.axhline(tier["first"] - 0.5, color=_POOL, ls="--", lw=0.8, alpha=0.6, gid="tier-boundary")
        ax.text(1.0, (tier["first"] + tier["last"]) / 2, f" tier {tier['label']}", transform=ax.get_yaxis_transform(),
                fontsize=6, va="center", ha="left", color=_POOL, gid="tier-label")


def run_ranks_figure(run: Mapping[str, Any]) -> Figure:
    """The figure (not yet rendered): see the module docstring.

    Parameters
    ----------
    run
        ``name``, ``reference``, ``level``, ``n_ranks`` (ranks in the pool with the checkpoint), ``tiers``
        (``first``, ``last`` and ``label`` of each tier, already clipped to ``1..n_ranks``) and ``checkpoints``
        (``step``, ``rank``, ``interval``, ``status``) in step order; a checkpoint without a rank is not drawn.
    """
    placed = [c for c in run["checkpoints"] if c["rank"] is not None]
    steps = [c["step"] for c in placed]
    ranks = [c["rank"] for c in placed]
    fig = Figure(figsize=(7.0, 4.4), layout="constrained")
    ax = fig.add_subplot()
    if placed:
        drawn = ax.errorbar(steps, ranks, yerr=[[r - c["interval"][0] for r, c in zip(ranks, placed)],
                                                [c["interval"][1] - r for r, c in zip(ranks, placed)]],
                            fmt="none", ecolor=_NEW, elinewidth=2, capsize=7, capthick=1.5, alpha=0.55,
                            label=f"{run['level']:.1%} interval (at its step only)")
        drawn.lines[2][0].set_gid("interval")
        resolved = [c for c in placed if c["status"] == "resolved"]
        others = [c for c in placed if c["status"] != "resolved"]
        if resolved:
            ax.plot([c["step"] for c in resolved], [c["rank"] for c in resolved], "o", ls="none", ms=5, color=_NEW,
                    label="placed rank", gid="rank")
        if others:
            ax.plot([c["step"] for c in others], [c["rank"] for c in others], "o", ls="none", ms=5, mfc="white",
                    color=_NEW, label="placed rank, unresolved (tier not met)", gid="unresolved")
    _draw_tiers(ax, run["tiers"])
    ax.set_ylim(run["n_ranks"] + 0.5, 0.5)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("training step")
    ax.set_ylabel(f"rank among {run['n_ranks']} (reference pool + the checkpoint)")
    ax.set_title(f'Training run "{run["name"]}" on {run["reference"]}: rank against step; dashed: tier boundaries',
                 fontsize=10)
    ax.grid(alpha=0.3)
    if placed:
        fig.legend(loc="outside lower center", ncols=3, fontsize=7, frameon=False)
    return fig


def run_ranks(run: Mapping[str, Any]) -> bytes:
    """:func:`run_ranks_figure` as PNG bytes."""
    return _png(run_ranks_figure(run))
