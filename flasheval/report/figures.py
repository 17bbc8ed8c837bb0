"""Matplotlib figures for run records, returned as PNG bytes.

Uses :class:`matplotlib.figure.Figure` with the Agg canvas directly (never ``pyplot``), so no
global figure state and no display is touched. Every function takes a record's payload
(plain JSON types) and returns PNG bytes. Ranks are drawn with rank 1 at the top.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg", force=False)
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

__all__ = ["placement_stages", "leaderboard_with_new_model", "sweep_intervals", "backtest_scatter",
           "dior_reliability", "parse_tier_label"]

_NEW = "#d62728"
_POOL = "#1f77b4"
_BAND = "#bbbbbb"


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def parse_tier_label(label: str) -> tuple[int, int | None]:
    """``"1"`` -> (1, 1), ``"5-9"`` -> (5, 9), ``"20+"`` -> (20, None).

    Examples
    --------
    >>> parse_tier_label("5-9"), parse_tier_label("20+"), parse_tier_label("1")
    ((5, 9), (20, None), (1, 1))
    """
    m = re.fullmatch(r"(\d+)(?:-(\d+)|(\+))?", label.strip())
    if m is None:
        raise ValueError(f"not a tier label: {label!r}")
    first = int(m.group(1))
    if m.group(3):
        return first, None
    return first, int(m.group(2)) if m.group(2) else first


def placement_stages(payload: Mapping[str, Any]) -> bytes:
    """Rank interval after each stage against the examples spent so far."""
    stages = payload["stages"]
    spent = [sum(s["n_examples"]) for s in stages]
    ranks = [s["rank"] for s in stages]
    lo = [s["rank"] - s["interval"][0] for s in stages]
    hi = [s["interval"][1] - s["rank"] for s in stages]
    fig = Figure(figsize=(6.4, 3.8))
    ax = fig.add_subplot()
    ax.errorbar(spent, ranks, yerr=[lo, hi], fmt="o-", color=_NEW, capsize=4, label="rank and interval")
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(spent)
    ax.set_xticklabels([f"{x}\n({s['stage_size'] or 'all'}/ds)" for x, s in zip(spent, stages)], fontsize=7)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(max(s["interval"][1] for s in stages) + 1, 0.5)
    ax.set_xlabel("examples spent, all datasets (examples per dataset), log scale")
    ax.set_ylabel(f"rank among {payload['n_models'] + 1}")
    ax.set_title(f"{payload['model_id']}: rank interval per stage")
    ax.grid(alpha=0.3)
    return _png(fig)


def leaderboard_with_new_model(pool: Sequence[tuple[str, float]], *, model_id: str, rank: int,
                               interval: Sequence[int], value_label: str) -> bytes:
    """The reference ranking (best first) with the new model inserted at its rank and its interval shaded."""
    n = len(pool) + 1
    rows: list[tuple[str, float | None]] = list(pool[:rank - 1]) + [(model_id, None)] + list(pool[rank - 1:])
    fig = Figure(figsize=(7.0, max(3.0, 0.17 * n + 1.0)))
    ax = fig.add_subplot()
    ax.axhspan(interval[0] - 0.5, interval[1] + 0.5, color=_NEW, alpha=0.12, label=f"interval [{interval[0]}, {interval[1]}]")
    for position, (name, value) in enumerate(rows, start=1):
        if value is None:
            ax.axhline(position, color=_NEW, lw=1.5)
        else:
            ax.barh(position, value, color=_POOL, height=0.7)
    ax.set_yticks(range(1, n + 1))
    ax.set_yticklabels([f"{i}. {name}" for i, (name, _) in enumerate(rows, start=1)], fontsize=6)
    ax.get_yticklabels()[rank - 1].set_color(_NEW)
    ax.get_yticklabels()[rank - 1].set_fontweight("bold")
    ax.set_ylim(n + 0.7, 0.3)
    ax.set_xlabel(value_label)
    ax.set_title(f"{model_id} placed at rank {rank} of {n}")
    ax.legend(loc="lower right", fontsize=7)
    return _png(fig)


def sweep_intervals(payload: Mapping[str, Any]) -> bytes:
    """Every checkpoint's rank interval on the reference, best first, with tier boundaries."""
    rows = sorted(payload["checkpoints"], key=lambda c: (c["rank"] if c["rank"] is not None else 10**9, c["model_id"]))
    n_total = payload["n_models"] + 1
    fig = Figure(figsize=(7.0, max(3.0, 0.32 * len(rows) + 1.2)))
    ax = fig.add_subplot()
    for boundary in payload.get("tier_boundaries", []):
        ax.axvline(boundary - 0.5, color=_BAND, ls="--", lw=0.8)
    for y, c in enumerate(rows):
        color = _NEW if c["status"] == "resolved" else "#ff7f0e" if c["status"].startswith("unresolved") else "#7f7f7f"
        lo, hi = c["interval"]
        ax.plot([lo, hi], [y, y], color=color, lw=3, solid_capstyle="butt", alpha=0.6)
        if c["rank"] is not None:
            ax.plot([c["rank"]], [y], "o", color=color)
        truth = payload.get("truth", {}).get(c["model_id"])
        if truth is not None:
            ax.plot([truth], [y], "x", color="black", ms=7, label="full-data rank (backtest)" if y == 0 else None)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{c['model_id']} ({c['status']})" for c in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0.5, n_total + 0.5)
    ax.set_xlabel(f"rank among {n_total} (reference pool + the checkpoint); dashed: tier boundaries")
    ax.set_title(f"sweep on {payload['reference']}: {len(rows)} checkpoints")
    ax.grid(axis="x", alpha=0.3)
    if payload.get("truth"):
        ax.legend(loc="upper right", fontsize=7)
    return _png(fig)


def _tier_bands(ax: Any, rows: Sequence[Mapping[str, Any]], n: int) -> None:
    """Shade, for each tier of placed ranks, the full-data ranks its resolution allows."""
    tiers = sorted({(parse_tier_label(r["tier"]), r["resolution"]) for r in rows})
    for (first, last), k in tiers:
        top = n if last is None else last
        ys = [first - 0.5, top + 0.5]
        ax.fill_betweenx(ys, [y - k - 0.5 for y in ys], [y + k + 0.5 for y in ys], color=_BAND, alpha=0.35, lw=0)
        ax.axhline(first - 0.5, color=_BAND, lw=0.6)
        label = f"{first}" if last == first else f"{first}+" if last is None else f"{first}-{last}"
        ax.text(n - 0.2, first - 0.3, f"tier {label}: {'exact' if k == 0 else f'+-{k}'}", fontsize=6, ha="right",
                va="top", color="#444444")


def backtest_scatter(payload: Mapping[str, Any], method: str = "adaptive", zoom: int = 20) -> bytes:
    """Placed rank against full-data rank, intervals as bars, each tier's allowed band shaded; right: the top ``zoom``."""
    rows = payload["rows"][method]
    n = max(max(r["full_rank"], r["interval"][1]) for r in rows) + 1
    fig = Figure(figsize=(11.0, 5.4))
    for panel, limit in enumerate((n, min(zoom, n))):
        ax = fig.add_subplot(1, 2, panel + 1)
        shown = [r for r in rows if r["full_rank"] <= limit]
        _tier_bands(ax, rows, limit)
        full = [r["full_rank"] for r in shown]
        placed = [r["placed_rank"] for r in shown]
        err = [[r["placed_rank"] - r["interval"][0] for r in shown], [r["interval"][1] - r["placed_rank"] for r in shown]]
        ok = [r["within"] for r in shown]
        ax.errorbar(full, placed, yerr=err, fmt="none", ecolor=_POOL, alpha=0.45, lw=1)
        ax.scatter([f for f, o in zip(full, ok) if o], [p for p, o in zip(placed, ok) if o], s=14, color=_POOL,
                   label="within resolution", zorder=3)
        ax.scatter([f for f, o in zip(full, ok) if not o], [p for p, o in zip(placed, ok) if not o], s=30, color=_NEW,
                   marker="x", label="outside resolution", zorder=3)
        ax.plot([0.5, limit], [0.5, limit], color="black", lw=0.6)
        ax.set_xlim(0.5, limit)
        ax.set_ylim(limit, 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("full-data rank (among the other models)")
        ax.set_ylabel("placed rank")
        ax.set_title("all models" if panel == 0 else f"top {limit} (full-data rank)")
        ax.legend(loc="lower left", fontsize=7)
    fig.suptitle(f"backtest on {payload['reference']} ({method}): placed vs full-data rank; grey: allowed by the tier")
    return _png(fig)


def dior_reliability(payload: Mapping[str, Any]) -> bytes:
    """Left: reliability (Kendall tau bounds) against examples per dataset; right: the gain per 100 examples."""
    examples = sorted(payload["examples"], key=lambda s: s["size"])
    fig = Figure(figsize=(11.0, 4.2))
    ax, gain_ax = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    sizes = [s["size"] for s in examples]
    lower = [s["tau_lower"] for s in examples]
    level = f"{payload['confidence_level']:.0%}"
    ax.plot(sizes, lower, "o-", color=_POOL, label=f"examples: lower bound of {level} interval")
    ax.plot(sizes, [s["tau_median"] for s in examples], "o:", color=_POOL, alpha=0.6, label="examples: median")
    for s in payload.get("datasets", []):
        ax.axhline(s["tau_lower"], color=_NEW, ls="--", label=f"datasets resampled (k={s['size']}): lower bound")
    for s in payload.get("pool", []):
        if s["aggregate"] == "win_rate":
            ax.axhline(s["tau_lower"], color="#2ca02c", ls="-.", label="win rate, random sub-pools: lower bound")
    flat = payload.get("findings", {}).get("flattening_size")
    for axis in (ax, gain_ax):
        if flat:
            axis.axvline(flat, color=_BAND, lw=1)
        axis.grid(alpha=0.3)
        axis.set_xlabel("examples per dataset")
    if flat:
        ax.annotate(f"flat after {flat}/dataset", (flat, ax.get_ylim()[1]), xytext=(4, -12), textcoords="offset points",
                    fontsize=7, color="#555555")
    ax.set_ylabel("Kendall tau vs full-data ranking")
    ax.set_title(f"DIoR on {payload['reference']} ({payload['aggregate']}, {payload['n_instantiations']} draws)")
    ax.legend(loc="lower right", fontsize=7)
    mids = [(a + b) / 2 for a, b in zip(sizes, sizes[1:])]
    gains = [(lb - la) / (b - a) * 100 for a, b, la, lb in zip(sizes, sizes[1:], lower, lower[1:])]
    widths = [(b - a) * 0.9 for a, b in zip(sizes, sizes[1:])]
    gain_ax.bar(mids, [max(g, 1e-4) for g in gains], width=widths, color=_POOL, alpha=0.7)
    gain_ax.set_yscale("log")  # the gains span two orders of magnitude; non-positive gains are drawn at 1e-4
    threshold = payload.get("findings", {}).get("flat_gain_per_100")
    if threshold:
        gain_ax.axhline(threshold, color=_NEW, ls="--", label=f"flat: < {threshold} per 100 examples")
        gain_ax.legend(loc="upper right", fontsize=7)
    gain_ax.set_ylabel("gain in tau's lower bound per 100 more examples")
    gain_ax.set_title("reliability gained per example")
    return _png(fig)

