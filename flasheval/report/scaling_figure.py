"""The figure of a ``scaling`` run record: fitted runs, fitted curves with bootstrap bands, predictions.

One row per training dataset: left, loss against compute (log axis) with one curve per token
multiplier; right (when an error law was fitted), average top-1 error against loss. Fitted runs are
filled circles, predicted runs are stars with their interval as an error bar, and a predicted run's
measured value (when known) is a hollow square (in the error panel, at the run's measured loss). Pure: payload in, Figure out (Agg backend).
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from flasheval.atomic import atomic_file  # noqa: E402
from flasheval.errors import InputError  # noqa: E402

__all__ = ["scaling_figure", "save_scaling_figure"]


def _predictions(payload: dict, dataset: str | None, quantity: str) -> list[dict]:
    return [p for p in payload["predictions"] if p["dataset"] == dataset and p["quantity"] == quantity]


def _draw_predictions(ax: Axes, preds: list[dict], x_key: str, actual_x_key: str | None = None) -> None:
    for p in preds:
        x = p[x_key]
        actual_x = x if actual_x_key is None else p[actual_x_key]
        ax.errorbar([x], [p["predicted"]], yerr=[[p["predicted"] - p["low"]], [p["high"] - p["predicted"]]],
                    fmt="*", markersize=12, color="crimson", capsize=3, zorder=4)
        if p["actual"] is not None and actual_x is not None:
            ax.plot([actual_x], [p["actual"]], "s", mfc="none", mec="black", markersize=8, zorder=5)
        ax.annotate(p["model_id"], (x, p["predicted"]), textcoords="offset points", xytext=(5, 5), fontsize=7)


def _loss_panel(ax: Axes, fit: dict, payload: dict) -> None:
    for i, curve in enumerate(fit.get("loss_curves", [])):
        color = f"C{i}"
        ax.plot(curve["x"], curve["predicted"], color=color, label=f"fit, M={curve['multiplier']:g}")
        ax.fill_between(curve["x"], curve["low"], curve["high"], color=color, alpha=0.15, linewidth=0)
    runs = fit["loss_law"]["fit_runs"]
    ax.plot([r["compute"] for r in runs], [r["loss"] for r in runs], "o", color="black", label="fitted runs")
    _draw_predictions(ax, _predictions(payload, fit["dataset"], "loss"), "compute")
    ax.set_xscale("log")
    ax.set_xlabel("compute C = 6ND (FLOPs)")
    ax.set_ylabel(f"loss ({payload['loss_column']})")
    ax.set_title(f"{fit['dataset'] or 'all runs'}: loss law ({fit['loss_law']['method']})", fontsize=9)
    ax.legend(fontsize=7)


def _error_panel(ax: Axes, fit: dict, payload: dict) -> None:
    curve = fit["error_curve"]
    ax.plot(curve["x"], curve["predicted"], color="C0", label="fit")
    ax.fill_between(curve["x"], curve["low"], curve["high"], color="C0", alpha=0.15, linewidth=0)
    runs = fit["error_law"]["fit_runs"]
    ax.plot([r["loss"] for r in runs], [r["error"] for r in runs], "o", color="black", label="fitted runs")
    # A predicted run sits at its predicted loss; its measured error at its measured loss (if known).
    losses = {p["model_id"]: p for p in _predictions(payload, fit["dataset"], "loss")}
    preds = [dict(p, loss=losses[p["model_id"]]["predicted"], actual_loss=losses[p["model_id"]]["actual"])
             for p in _predictions(payload, fit["dataset"], "error")]
    _draw_predictions(ax, preds, "loss", "actual_loss")
    ax.set_xlabel(f"loss ({payload['loss_column']})")
    ax.set_ylabel(f"avg top-1 error ({'+'.join(fit['error_law']['columns'])})")
    ax.set_title("error law", fontsize=9)
    ax.legend(fontsize=7)


def scaling_figure(payload: dict) -> Figure:
    """Draw a ``scaling`` record payload (as written by ``flasheval scaling fit``) and return the Figure.

    Raises
    ------
    InputError
        The payload has no fits (not a ``scaling`` record, or an empty one).
    """
    fits = payload.get("fits") if isinstance(payload, dict) else None
    if not fits:
        raise InputError("scaling record has no fits to draw", field="payload.fits")
    n_cols = 2 if any("error_law" in f for f in fits) else 1
    fig, axes = plt.subplots(len(fits), n_cols, figsize=(6 * n_cols, 4 * len(fits)), squeeze=False)
    for row, fit in enumerate(fits):
        _loss_panel(axes[row][0], fit, payload)
        if n_cols == 2:
            if "error_law" in fit:
                _error_panel(axes[row][1], fit, payload)
            else:
                axes[row][1].set_axis_off()
    fig.tight_layout()
    return fig


def save_scaling_figure(payload: dict, path: str | PathLike[str]) -> Path:
    """Render :func:`scaling_figure` to a PNG at ``path`` and close the figure."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig = scaling_figure(payload)
    try:
        with atomic_file(target, binary=True) as fh:
            fig.savefig(fh, format="png", dpi=110)
    finally:
        plt.close(fig)
    return target
