"""Blocks (headings, tables, figures) for each kind of run record; the only place that rounds.

One function per kind turns a record's payload into :mod:`~flasheval.report.blocks`. The
payload fields read here are those written by ``place`` and ``backtest``
(:mod:`flasheval.placement.controller`, :mod:`flasheval.analysis.backtest`), ``sweep`` (:mod:`flasheval.sweeps.schedule`)
and ``dior`` (:mod:`flasheval.analysis.dior`). ``evaluate`` records get their per-task accuracies,
suite aggregates (partial ones labelled), validation losses and compute, then a table of their
top-level values. ``scaling`` records are drawn by ``flasheval.report.scaling_figure`` when that module
exists (it provides ``scaling_figure(payload) -> bytes | matplotlib Figure``).
"""

from __future__ import annotations

import importlib
import io
import logging
from collections.abc import Callable, Mapping
from typing import Any

from flasheval.errors import FlashevalError
from flasheval.records.run_record import RunRecord
from flasheval.report import figures
from flasheval.report.blocks import Block, Figure, Heading, Paragraph, Table, VectorFigure
from flasheval.report.rank_figure import pool_intervals, reference_intervals_svg

__all__ = ["KNOWN_KINDS", "evaluate_summary_blocks", "dtype_comparison_blocks", "record_blocks"]

logger = logging.getLogger(__name__)


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) >= 1e4 else f"{value:.{digits}f}"
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"[{value[0]}, {value[1]}]"
    return str(value)


def _percent(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _saving(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}x"


def _pool_ranking(reference_name: str, exclude: set[str], aggregate: str | None) -> list[tuple[str, float]] | None:
    """The reference's full-data ranking without ``exclude`` (``None`` if the reference cannot be loaded)."""
    from flasheval.reference import load_reference

    try:
        ref = load_reference(reference_name)
        for model_id in exclude & set(ref.model_ids):
            ref = ref.without(model_id)
        return [(r.model_id, r.value) for r in ref.ranking(aggregate)]
    except FlashevalError as exc:
        logger.warning("leaderboard figure skipped: %s", exc)
        return None


def _place(p: Mapping[str, Any], stem: str) -> list[Block]:
    c = p["compute"]
    res = "maximal" if p.get("resolution") == 0 else f"+-{p.get('resolution')}"
    out: list[Block] = [
        Paragraph(text=f"{p['model_id']} on {p['reference']} ({p['n_models']} reference models, plan {p['plan']}, "
                       f"seed {p['seed']}): {p['status']} ({p['reason']})."),
        Table(header=("rank", f"{p['confidence_level']:.0%} interval", "tier", "examples", "full run", "saving",
                      "tokens saving"),
              rows=((_fmt(p["rank"]), _fmt(p["interval"]), f"{p['tier']} ({res})", str(c["n_examples"]),
                     str(c["full_examples"]), _saving(c.get("example_saving", c.get("saving"))),
                     _saving(c.get("token_saving"))),)),
        *_place_timing(p.get("timing")),
        Heading(text="Stages", level=3),
        Table(header=("stage", "per dataset", "examples", "rank", "interval", "level", "decision", "reason"),
              rows=tuple((str(s["stage"] + 1), _fmt(s["stage_size"] or "all"), str(sum(s["n_examples"])), str(s["rank"]),
                          _fmt(s["interval"]), f"{s['confidence_level']:.2%}", s["decision"], s["reason"])
                         for s in p["stages"])),
    ]
    if p["stages"]:
        out.append(Figure(name=f"{stem}-stages", png=figures.placement_stages(p),
                          caption="Rank interval after each stage against the examples spent (log scale); rank 1 on top."))
    if p.get("neighbours") is not None and p["rank"] is not None:
        told = p["neighbours"]
        out.append(Paragraph(text=(
            "Told apart from every reference model: its interval is one rank." if not told else
            f"Cannot be told from {len(told)} reference model{'s' if len(told) > 1 else ''} (its interval leaves its "
            f"order against each open): {', '.join(told)}.")))
    pool = p.get("leaderboard") or _pool_ranking(p["reference"], {p["model_id"]}, p.get("aggregate"))
    if pool and p["rank"] is not None:
        pairs = [(e[0], e[1]) if isinstance(e, (list, tuple)) else (e["model_id"], e["value"]) for e in pool]
        out.append(Figure(name=f"{stem}-leaderboard", png=figures.leaderboard_with_new_model(
            pairs, model_id=p["model_id"], rank=int(p["rank"]), interval=p["interval"], value_label="full-data aggregate"),
            caption="The reference leaderboard (full-data aggregate) with the placed model inserted at its rank; "
                    "the shaded band is its rank interval."))
    intervals = pool_intervals(p["reference"], {p["model_id"]}, p.get("aggregate")) if p["rank"] is not None else None
    if intervals is not None:
        placed = {"model_id": p["model_id"], "rank": p["rank"], "interval": p["interval"]}
        out.append(VectorFigure(name=f"{stem}-intervals", svg=reference_intervals_svg(
            intervals.to_json()["models"], title=f"{p['reference']} with rank intervals, and {p['model_id']}",
            confidence_level=intervals.confidence_level, placed=placed),
            caption=f"Every reference model's {intervals.confidence_level:.0%} rank interval (simultaneous, from "
                    "the examples' sampling; bands: groups the reference cannot tell apart) and the placed model's "
                    "interval (red): the reference models whose bars cross the red shade are those it cannot be "
                    "told from."))
    return out


def _place_timing(t: Mapping[str, Any] | None) -> list[Block]:
    """A live placement's time (the record's ``timing``), and a full run's at the throughput it measured."""
    if not t:
        return []
    text = (f"Time {t['wall_seconds']:.1f} s: opening and loading the model {t['load_seconds']:.1f} s, forward passes "
            f"{t['scoring_seconds']:.1f} s, outside the model {t['outside_model_seconds']:.1f} s (of it fixing the looks "
            f"{t['looks_seconds']:.1f} s).")
    if t.get("import_seconds"):
        text += (f" Not counted: {t['import_seconds']:.1f} s of the process's one-time start-up (importing modules "
                 "for the first time in it: a later placement in the same process does not pay them).")
    if t.get("full_wall_seconds") is not None:
        text += (f" A full run of these datasets: ~{t['full_wall_seconds']:.0f} s (loading {t['load_seconds']:.0f} s + "
                 f"{t.get('full_run_tokens', t['full_tokens']):,.0f} tokens at the measured "
                 f"{t['tokens_per_second']:.0f} tokens/s), "
                 f"{t['time_saving']:.1f}x the placement's time.")
    return [Paragraph(text=text)]


def _seed_summary(runs: list[Mapping[str, Any]]) -> list[Block]:
    """Per method and figure: every seed's value, the mean and the minimum."""
    rows = []
    for i, summary in enumerate(runs[0]["summaries"]):
        for key, label, fmt in (("share_within", "within resolution", _percent), ("coverage", "coverage", _percent),
                                ("median_saving", "median saving", _saving), ("total_saving", "total saving", _saving)):
            values = [run["summaries"][i][key] for run in runs]
            rows.append((summary["method"], label, *(fmt(v) for v in values), fmt(sum(values) / len(values)),
                         fmt(min(values))))
    seeds = [str(run.get("seed", i)) for i, run in enumerate(runs)]
    return [Paragraph(text=f"Leave-one-out backtest on {runs[0]['reference']} over seeds {', '.join(seeds)} "
                           f"(plan {runs[0]['plan']}): every seed, the mean and the minimum."),
            Table(header=("method", "figure", *(f"seed {s}" for s in seeds), "mean", "min"), rows=tuple(rows))]


def _backtest(p: Mapping[str, Any], stem: str) -> list[Block]:
    if "seeds" in p:  # flasheval backtest --seeds: mean and minimum over the seeds, then one section per seed
        return _seed_summary(p["seeds"]) + [block for i, one in enumerate(p["seeds"])
                                             for block in _backtest(one, f"{stem}-seed{one.get('seed', i)}")]
    rows = tuple((s["method"], str(s["n_models"]), f"{s['share_within']:.1%}", f"{s['coverage']:.1%}",
                  _saving(s["median_saving"]), _saving(s["total_saving"]), f"{s['mean_examples']:.0f}")
                 for s in p["summaries"])
    out: list[Block] = [
        Paragraph(text=f"Leave-one-out backtest on {p['reference']} (plan {p['plan']}, seed {p['seed']}, "
                       f"{p['confidence_level']:.0%} intervals)."),
        Table(header=("method", "models", "within resolution", "coverage", "median saving", "total saving",
                      "mean examples"), rows=rows),
    ]
    for method in ("adaptive",) if "adaptive" in p["rows"] else tuple(p["rows"])[:1]:
        out.append(Figure(name=f"{stem}-{method}", png=figures.backtest_scatter(p, method),
                          caption=f"{method}: placed rank against full-data rank; bars are the intervals, grey bands "
                                  "the resolution each tier allows, crosses the placements outside it."))
    return out


def _budget_text(budget: Mapping[str, Any]) -> str:
    caps = [f"{v:g} {k}" for k, v in budget.items() if v is not None]
    return ", ".join(caps) if caps else "none"


def _sweep(p: Mapping[str, Any], stem: str) -> list[Block]:
    c = p["compute"]
    out: list[Block] = [
        Paragraph(text=f"Sweep of {len(p['checkpoints'])} checkpoints on {p['reference']} (plan {p['plan']}, seed "
                       f"{p['seed']}, budget {_budget_text(p['budget'])}): {c['n_examples']} examples spent of {c['full_examples']} "
                       f"for full runs of all of them (total saving {_saving(c['saving'])}, median over checkpoints "
                       f"{_saving(c.get('median_saving'))})."),
        Table(header=("checkpoint", "rank", "interval", "tier", "status", "examples", "rounds", "saving", "full-data rank"),
              rows=tuple((x["model_id"], _fmt(x["rank"]), _fmt(x["interval"]), _fmt(x["tier"]), x["status"],
                          str(x["n_examples"]), str(x["rounds"]), _saving(x.get("saving")),
                          _fmt(p.get("truth", {}).get(x["model_id"])))
                         for x in sorted(p["checkpoints"], key=lambda x: (x["rank"] or 10**9, x["model_id"])))),
        Figure(name=f"{stem}-intervals", png=figures.sweep_intervals(p),
               caption="Every checkpoint's rank interval on the reference (dot: point rank; red resolved, orange "
                       "unresolved at budget, grey stopped early as clearly low)."),
    ]
    b = p.get("backtest")
    if b:
        out.append(Paragraph(text=(
            f"Backtest (checkpoints replayed from the reference, held out of the pool): the interval covers the "
            f"full-data rank for {b['covered']:.0%} of the checkpoints; "
            + (f"{b['resolved_within_resolution']:.0%} of the {b['n_resolved']} resolved ones lie within their tier's "
               "resolution; " if b.get("resolved_within_resolution") is not None else "")
            + (f"placing them one by one would spend {b['separate_placements_examples']} examples "
               f"({b['separate_placements_examples'] / max(c['n_examples'], 1):.2f}x the sweep)"
               if b.get("separate_placements_examples") else "")
            + (f"; Kendall tau of the order among checkpoints vs the full-data order: {b['order_kendall_tau']:.3f}."
               if b.get("order_kendall_tau") is not None else "."))))
    if p.get("order"):
        out += [Heading(text="Order among the checkpoints (paired on the same examples)", level=3),
                Table(header=("checkpoint", "rank", "interval"),
                      rows=tuple((o["model_id"], str(o["rank"]), _fmt(o["interval"])) for o in p["order"]))]
    return out


def _dior(p: Mapping[str, Any], stem: str) -> list[Block]:
    out: list[Block] = [Paragraph(text=(
        f"DIoR on {p['reference']} ({len(p['model_ids'])} models, {len(p['dataset_names'])} datasets, aggregate "
        f"{p['aggregate']}, {p['n_instantiations']} instantiations): reliability is the lower bound of the "
        f"{p['confidence_level']:.0%} interval of Kendall tau against the full-data ranking."))]
    header = ("decision", "size", "aggregate", "tau lower", "tau median", "top-2 swap")
    rows = tuple((s["decision"], str(s["size"]) if s["decision"] != "aggregate" else "random sub-pools", s["aggregate"],
                  f"{s['tau_lower']:.3f}", f"{s['tau_median']:.3f}", _percent(s["top_two_swap_rate"]))
                 for key in ("examples", "datasets", "pool") for s in p.get(key, []))
    out.append(Table(header=header, rows=rows))
    f = p.get("findings", {})
    notes = []
    if "examples_equivalent_of_datasets" in f:
        eq = f["examples_equivalent_of_datasets"]
        notes.append(f"Resampling the datasets (tau lower {f['datasets_tau_lower']:.3f}) is "
                     + (f"less reliable than keeping only {eq} random examples per dataset." if eq is not None
                        else "more reliable than every number of examples per dataset tried."))
    if "flattening_size" in f:
        notes.append(f"Reliability flattens after {f['flattening_size']} examples per dataset." if f["flattening_size"]
                     else "Reliability still grows at the largest size tried.")
    if "win_rate_leader_change_found" in f:
        changes = p.get("leader_changes", [])
        notes.append(f"Mean win rate changes the leader when one weak model is added in {p['n_leader_changes']} of the "
                     f"pools searched; e.g. a pool of {changes[0]['pool_size']} models, adding {changes[0]['added']}: "
                     f"{changes[0]['leader_before']} -> {changes[0]['leader_after']}." if changes
                     else f"No leader change by adding one weak model in {p['n_pools_tried']} pools searched.")
    out += [Paragraph(text=n) for n in notes]
    if p.get("examples"):
        out.append(Figure(name=f"{stem}-reliability", png=figures.dior_reliability(p),
                          caption="Reliability against examples per dataset; dashed: resampling the datasets."))
    return out


def _suite_status(s: Mapping[str, Any]) -> str:
    if not s["partial"]:
        return f"complete ({s['n_tasks']} tasks)"
    no_data = s.get("without_data") or []
    others = [t for t in s["missing"] if t not in no_data]
    return (f"PARTIAL: {s['n_tasks']} of {s['n_suite_tasks']} tasks" + (f"; no data: {', '.join(no_data)}" if no_data else "")
            + ("" if not others else f"; not selected: {', '.join(others) if len(others) <= 3 else len(others)}"))


def _nats(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


def dtype_comparison_blocks(c: Mapping[str, Any]) -> list[Block]:
    """The ``dtype_comparison`` block of an ``evaluate`` record: per task, flips and log-likelihood differences."""
    run, other = c["dtype"], c["compare_dtype"]
    rows = tuple((name, str(t["n_examples"]), f"{t['accuracy']:.4f}", f"{t['compare_accuracy']:.4f}",
                  str(t["n_prediction_changed"]), str(t["n_correct_to_wrong"]), str(t["n_wrong_to_correct"]),
                  _nats(t["max_abs_delta_logprob"]), _nats(t["median_abs_delta_logprob"]))
                 for name, t in c["tasks"].items())
    header = ("task", "examples", f"accuracy {run}", f"accuracy {other}", "predictions changed",
              f"correct in {other} -> wrong", f"wrong in {other} -> correct", "max |dLL|", "median |dLL|")
    stored = c["n_requests_from_store"]
    return [Table(header=header, rows=rows), Paragraph(text=(
        f"Weights in {run} against {other} on the same examples (|dLL|: per choice, nats); the {other} run "
        f"computed {c['n_requests_computed']} requests in {c['scoring_seconds']:.1f} s"
        + (f", {stored} served from the store" if stored else "") + "."))]


def evaluate_summary_blocks(p: Mapping[str, Any]) -> list[Block]:
    """Per-task accuracies, suite aggregates (partial ones labelled), validation losses and compute of an ``evaluate`` record."""
    out: list[Block] = []
    tasks = p.get("tasks") or {}
    if tasks:
        out.append(Table(header=("task", "examples", "accuracy", "s.e."),
                         rows=tuple((name, str(t["n_examples"]), f"{t['accuracy']:.4f}",
                                     "-" if t.get("standard_error") is None else f"{t['standard_error']:.4f}")
                                    for name, t in tasks.items())))
    suites = p.get("suites") or {}
    if suites:
        out.append(Table(header=("suite", "aggregate", "value", "s.e.", "baselines", "status"),
                         rows=tuple((("PARTIAL " if s["partial"] else "") + name, s["aggregate"], f"{s['value']:.4f}",
                                     "-" if s.get("standard_error") is None else f"{s['standard_error']:.4f}",
                                     s["baselines"] if s["aggregate"] == "centered_mean" else "-", _suite_status(s))
                                    for name, s in suites.items())))
    validation = p.get("validation") or {}
    if validation:
        out.append(Table(header=("held-out file", "documents", "tokens", "bytes", "nats/token", "bits/byte"),
                         rows=tuple((name, str(v["n_documents"]), str(v["n_tokens"]), str(v["n_bytes"]),
                                     f"{v['mean_nll']:.4f}", f"{v['bits_per_byte']:.4f}")
                                    for name, v in validation.items())))
    comparison = p.get("dtype_comparison")
    if comparison:
        out.extend(dtype_comparison_blocks(comparison))
    c = p.get("compute")
    if c:
        out.append(Paragraph(text=(
            f"Compute: {c['n_examples']} examples, {c['n_tokens']:,} tokens"
            + ("" if c.get("flops") is None else f", {c['flops']:.3g} FLOPs (2 x {c['n_parameters']:,} parameters x tokens)")
            + (f"; held-out text {c['heldout_n_tokens']:,} tokens" if c.get("heldout_n_tokens") else "")
            + ("" if c.get("wall_seconds") is None else f"; wall time {c['wall_seconds']:.1f} s "
               + (f"(opening and loading the model {c['load_seconds']:.1f} s, scoring {c['scoring_seconds']:.1f} s)"
                  if p.get("model_loaded", True) else
                  "(weights not loaded: the store answered every request; "
                  f"opening the model {c['load_seconds']:.1f} s)"))
            + ".")))
    return out


def _evaluate(p: Mapping[str, Any], stem: str) -> list[Block]:
    out = evaluate_summary_blocks(p)
    rows = tuple((str(k), _fmt(v)) for k, v in p.items() if not isinstance(v, (dict, list)))
    out.append(Table(header=("field", "value"), rows=rows) if rows else Paragraph(text="(no scalar fields)"))
    return out


def _scaling(p: Mapping[str, Any], stem: str) -> list[Block]:
    out = _evaluate(p, stem)
    try:
        module = importlib.import_module("flasheval.report.scaling_figure")
    except ImportError:
        return out + [Paragraph(text="(scaling figure not available in this flasheval)")]
    picture = module.scaling_figure(p)
    if not isinstance(picture, bytes):  # a matplotlib Figure
        buffer = io.BytesIO()
        picture.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
        picture = buffer.getvalue()
    return out + [Figure(name=f"{stem}-scaling", png=picture, caption="Scaling fit.")]


_BUILDERS: dict[str, Callable[[Mapping[str, Any], str], list[Block]]] = {
    "place": _place, "backtest": _backtest, "sweep": _sweep, "dior": _dior, "evaluate": _evaluate, "scaling": _scaling,
}
KNOWN_KINDS: tuple[str, ...] = tuple(sorted(_BUILDERS))
"""Record kinds ``flasheval report`` renders."""


def record_blocks(record: RunRecord, stem: str) -> list[Block]:
    """Heading plus the kind's blocks for one record; ``stem`` names its figure files."""
    head = Heading(text=f"{record.kind}: {record.path.name}", level=2)
    meta = Paragraph(text=f"flasheval {record.flasheval_version}, {record.created_utc}"
                          + (f", command: {' '.join(record.argv)}" if record.argv else ""))
    try:
        body = _BUILDERS[record.kind](record.payload, stem)
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as exc:  # a payload edited by hand
        from flasheval.errors import InputError

        raise InputError(f"{record.kind} record lacks or mangles field {exc}", path=record.path, field="payload") from None
    return [head, meta, *body]
