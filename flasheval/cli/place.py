"""``flasheval place``: a thin shell over :func:`flasheval.place`.

Model specs: ``replay:MODEL_ID`` replays a model recorded in the reference itself, held out
of the pool. With no ``--model`` the default replay model of the reference is placed
(``meta/llama-3-70b`` on ``helm_lite``: mid-table, needs several stages). Live specs
``[NAME=]gguf:FILE`` / ``[NAME=]hf:PATH_OR_ID`` run the model now against a built reference
(DCLM-format task files or lm-eval tasks, as the reference records); a mismatch of seed, dtype,
task files or lm-eval settings is refused in one line before the model loads. ``--run RUN --step N``
places a training run's checkpoint into the run's folder (:func:`flasheval.place_checkpoint`).
"""

from __future__ import annotations

import argparse

from flasheval.api.place import PlaceRun, place
from flasheval.api.runs import place_checkpoint
from flasheval.cli._options import (
    add_live_options,
    add_lmeval_live_options,
    add_placement_options,
    add_progress_options,
    budget_from,
    changed_settings,
    engine_from,
    remember_defaults,
    step_printer,
)
from flasheval.errors import InputError
from flasheval.placement.results import PlacementResult
from flasheval.records.run_record import default_run_folder
from flasheval.reference import load_reference

__all__ = ["register", "run", "DEFAULT_REPLAY_MODEL", "format_summary", "format_timing", "format_neighbours"]

DEFAULT_REPLAY_MODEL = "meta/llama-3-70b"
"""Model placed by ``flasheval place`` with no arguments (held out of ``helm_lite``)."""

RESULT_OPTIONS = ("tiers", "seed", "aggregate", "missing", "max_examples", "max_tokens", "max_flops", "max_seconds",
                  "n_parameters", "task_dir", "dtype", "include_path", "num_fewshot")
"""The options whose non-default values give a placement its own default folder (they decide its result)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("place", help="place a model on a reference leaderboard (escalating subsamples)")
    parser.add_argument("--model", default=f"replay:{DEFAULT_REPLAY_MODEL}",
                        help="replay:MODEL_ID (a reference model, held out of the pool), or a live model "
                        "[NAME=]gguf:FILE / hf:PATH_OR_ID on a built reference; default: %(default)s")
    parser.add_argument("--reference", help="reference name or folder (default: helm_lite; with --run: the run's)")
    add_placement_options(parser, seed_help="default: 0 (replay), the reference's build seed (live)",
                          budget="in total")
    parser.add_argument("--output", help="output folder (default: runs/place-<reference>-<model>/, with 8 hex digits "
                        "of the exact names and settings appended where a name has characters a folder name cannot "
                        "keep or an option that decides the result (plan, seed, budget, ...) is not its default)")
    parser.add_argument("--force", action="store_true",
                        help="replace a record in the output folder that another model or command wrote")
    parser.add_argument("--run", help="a training run's folder: the record lands in RUN/checkpoints/step-N/ and the "
                        "results in the run's one store (flasheval.place_checkpoint); with --step")
    parser.add_argument("--step", type=int, help="with --run: the checkpoint's training step (an integer >= 0)")
    add_live_options(parser)
    add_lmeval_live_options(parser)
    add_progress_options(parser)
    remember_defaults(parser, *RESULT_OPTIONS)
    parser.set_defaults(func=run, runs_models=True)


def format_summary(result: PlacementResult) -> str:
    """Readable multi-line summary of a placement."""
    c = result.compute
    res = "maximal" if result.resolution == 0 else f"+-{result.resolution}"
    placed = (f"  rank {result.rank} of {result.n_models + 1}, {result.confidence_level:.0%} interval "
              f"[{result.interval[0]}, {result.interval[1]}], tier {result.tier} ({res})")
    if result.rank is None:  # the budget allowed no stage (flasheval.place refuses such a budget up front)
        placed = f"  not placed: no stage ran within the budget, so there is no rank (any of 1 to {result.n_models + 1})"
    lines = [
        f"{result.model_id} on {result.reference} ({result.n_models} reference models, plan {result.plan}, seed {result.seed})",
        f"  status: {result.status} ({result.reason})",
        placed,
        f"  examples: {c.n_examples} of {c.full_examples} "
        + ("(none scored)" if c.n_examples == 0 else f"({c.example_saving:.1f}x saving)")
        + ("" if c.n_tokens is None else f"; tokens {c.n_tokens}"
           + ("" if c.token_saving is None else f" ({c.token_saving:.1f}x saving)"))
        + ("" if c.flops is None else f"; ~{c.flops:.3g} FLOPs"),
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from flasheval.api.models import resolve_model

    budget = budget_from(args.max_examples, args.max_tokens, args.max_flops, max_seconds=args.max_seconds)
    model = resolve_model(args.model)
    options = dict(plan=args.tiers, budget=budget, seed=args.seed, aggregate=args.aggregate, missing=args.missing,
                   n_parameters=args.n_parameters, task_dir=args.task_dir, include_path=args.include_path,
                   num_fewshot=args.num_fewshot, engine=engine_from(args), progress=step_printer(args),
                   distributed=args.distributed)
    if (args.run is None) != (args.step is None):
        raise InputError("--run and --step go together: give both (a run's checkpoint) or neither",
                         field="--run" if args.run is None else "--step")
    if args.run is not None:
        for flag, given in (("--output", args.output is not None), ("--force", args.force)):
            if given:
                raise InputError("not with --run (the run folder holds the record and the results)", field=flag)
        outcome = place_checkpoint(model, run=args.run, step=args.step, reference=args.reference, **options)
    else:
        options["plan"] = "default" if args.tiers is None else args.tiers
        reference = load_reference("helm_lite" if args.reference is None else args.reference, missing=args.missing)
        output = args.output if args.output is not None else default_run_folder("place", reference.name,
                                                                                  model.model_id,
                                                                                  settings=changed_settings(args))
        outcome = place(model, reference, output=output, force=args.force, **options)
    if outcome.record_path is not None:  # not on the other processes of a launch
        print_placed(outcome)
    return 0


def print_placed(outcome: PlaceRun) -> None:
    """The summary after the stages: rank, interval, savings, the answer (replay), timings and the record."""
    result = outcome.placement
    print(format_summary(result))
    if result.rank is not None:
        print(f"  {format_neighbours(outcome.neighbours, result.interval)}")
    if outcome.full_data_rank is not None:
        inside = "inside" if result.interval[0] <= outcome.full_data_rank <= result.interval[1] else "OUTSIDE"
        print(f"  full-data rank (every example scored): {outcome.full_data_rank}, {inside} the interval")
        print(f"  record: {outcome.record_path}")
    elif outcome.live is not None:
        print(f"  {format_timing(outcome)}; record: {outcome.record_path}")


def format_neighbours(neighbours: tuple[str, ...] | list[str], interval: tuple[int, int] | list[int]) -> str:
    """Which reference models the interval cannot order the placed model against (one line)."""
    if not neighbours:
        return "told apart from every reference model (its interval is one rank)"
    lo, hi = interval
    shown = ", ".join(neighbours[:4]) + (f" and {len(neighbours) - 4} more" if len(neighbours) > 4 else "")
    return (f"cannot be told from {len(neighbours)} reference model{'s' if len(neighbours) > 1 else ''} (those ranked "
            f"{lo}-{hi - 1} of the pool, each of which it could stand above or below): {shown}")


def format_timing(outcome: PlaceRun) -> str:
    """A live placement's time, where it went, and a full run's at the throughput measured (one line)."""
    live, t = outcome.live, outcome.timing
    wall = (0.0 if live is None else live.seconds) if t is None else t.wall_seconds
    if live is not None and not live.model_loaded:
        return f"time {wall:.0f} s (model not loaded: every request was in the store)"
    line = f"time {wall:.0f} s (opening and loading the model {0.0 if live is None else live.load_seconds:.0f} s"
    if t is not None:
        line += f", model {t.scoring_seconds:.1f} s, outside the model {t.outside_model_seconds:.1f} s"
    line += f"; {0 if live is None else live.requests_computed} requests computed)"
    if t is None or t.full_wall_seconds is None:
        return line
    return (line + f"; a full run of these datasets ~{t.full_wall_seconds:.0f} s (loading {t.load_seconds:.0f} s + "
            f"{t.full_run_tokens:,.0f} tokens at the measured {t.tokens_per_second:.0f} tokens/s): ~{t.time_saving:.1f}x")
