"""``flasheval scaling fit``: fit scaling laws on small runs and predict large ones.

Fits Gadre et al.'s (2024) loss law L(C, M) and error law Err(L) per training dataset on the runs
selected by ``--fit-max-compute`` / ``--fit-column``, predicts each ``--predict`` run with a bootstrap
interval, prints prediction, interval, actual value and relative prediction error, and writes a
``scaling`` run record (and, with ``--plot``, a PNG of the fit).
"""

from __future__ import annotations

import argparse

from flasheval.api.scaling import fit_scaling
from flasheval.stats.scaling import LOSS_FIT_METHODS

__all__ = ["register", "run", "format_predictions"]



def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``scaling fit`` to the CLI."""
    parser = subparsers.add_parser("scaling", help="scaling-law fits: predict a large run from small ones")
    sub = parser.add_subparsers(dest="scaling_command", metavar="SUBCOMMAND", required=True)
    fit = sub.add_parser("fit", help="fit loss(C, M) and error(loss) on small runs, predict large runs")
    fit.add_argument("--runs", nargs="+", required=True, metavar="FILE",
                     help="runs table(s): CSV, parquet, JSON or flasheval run records")
    fit.add_argument("--predict", nargs="+", required=True, metavar="RUN",
                     help="run ids of the table, or NAME=PARAMS:TOKENS for a run not trained yet")
    fit.add_argument("--fit-max-compute", type=float, metavar="FLOPS", help="loss-law fit runs: compute <= this")
    fit.add_argument("--error-fit-max-compute", type=float, metavar="FLOPS",
                     help="error-law fit runs: compute <= this (default: --fit-max-compute)")
    fit.add_argument("--fit-column", metavar="COL", help="boolean column selecting loss-law fit runs")
    fit.add_argument("--error-fit-column", metavar="COL", help="boolean column selecting error-law fit runs")
    fit.add_argument("--loss-column", metavar="COL", help="validation loss column (default: loss_c4_val or loss)")
    fit.add_argument("--error-column", metavar="COL[,COL...]",
                     help="error column, or several to average (default: the first of err_avg17, gadre-17, err_avg46, "
                          "gadre-46, error, err_avg present)")
    fit.add_argument("--no-error", action="store_true", help="fit and predict the loss only")
    fit.add_argument("--dataset", help="fit and predict only runs trained on this dataset")
    fit.add_argument("--method", default="gadre2024", choices=LOSS_FIT_METHODS,
                     help="loss-law fit: the paper's procedure (default) or our Huber variant")
    fit.add_argument("--n-resamples", type=int, default=1000, help="bootstrap resamples of the fit runs")
    fit.add_argument("--confidence-level", type=float, default=0.95)
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument("--output", default="runs/scaling-fit.json", help="run record to write")
    fit.add_argument("--plot", nargs="?", const="", metavar="PNG",
                     help="also save the figure (default: beside --output, .png)")
    fit.set_defaults(func=run)


def format_predictions(payload: dict) -> str:
    """The predictions as an aligned text table (the only place numbers are rounded)."""
    pct = round(100 * payload["confidence_level"])
    header = ("dataset", "run", "quantity", "predicted", f"{pct}% interval", "actual", "rel. error", "fitted")
    lines = [header]
    for p in payload["predictions"]:
        lines.append((
            str(p["dataset"] or "-"), p["model_id"], p["quantity"], f"{p['predicted']:.4f}",
            f"[{p['low']:.4f}, {p['high']:.4f}]",
            "-" if p["actual"] is None else f"{p['actual']:.4f}",
            "-" if p["relative_error"] is None else f"{100 * p['relative_error']:.2f}%",
            "yes" if p["in_fit"] else "no",
        ))
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in lines)


def _format_fits(payload: dict) -> str:
    out = []
    for fit in payload["fits"]:
        law = fit["loss_law"]
        p = law["parameters"]
        out.append(f"{fit['dataset'] or 'all runs'}: loss law ({law['method']}) on {len(law['fit_runs'])} runs: "
                   f"E={p['E']:.4g} a={p['a']:.4g} b={p['b']:.4g} eta={p['eta']:.4g}; "
                   f"bootstrap {law['bootstrap']['n_resamples']} resamples, {law['bootstrap']['n_failed']} failed")
        if "error_law" in fit:
            e = fit["error_law"]
            q = e["parameters"]
            out.append(f"{'':{len(fit['dataset'] or 'all runs')}}  error law ({'+'.join(e['columns'])}) on "
                       f"{len(e['fit_runs'])} runs: epsilon={q['epsilon']:.4g} k={q['k']:.4g} gamma={q['gamma']:.4g}; "
                       f"bootstrap {e['bootstrap']['n_resamples']} resamples, {e['bootstrap']['n_failed']} failed")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    """Fit, predict, print, record, optionally plot."""
    fit = fit_scaling(
        args.runs, predict=args.predict, fit_max_compute=args.fit_max_compute,
        error_fit_max_compute=args.error_fit_max_compute, fit_column=args.fit_column,
        error_fit_column=args.error_fit_column, loss_column=args.loss_column, error_column=args.error_column,
        error=not args.no_error, dataset=args.dataset, method=args.method, n_resamples=args.n_resamples,
        confidence_level=args.confidence_level, seed=args.seed, output=args.output,
        plot=False if args.plot is None else (args.plot or True))
    print(_format_fits(dict(fit.payload)))
    print(format_predictions(dict(fit.payload)))
    print(f"record: {fit.record_path}")
    if fit.plot_path is not None:
        print(f"plot: {fit.plot_path}")
    return 0
