"""``flasheval watch DIR --reference R``: a thin shell over :func:`flasheval.watch`.

Places every checkpoint a training run saves into ``DIR`` (Hugging Face ``save_pretrained`` folders such
as ``checkpoint-500``, ``*.gguf`` files with the step in their name), in step order, into one run folder
(default ``DIR/flasheval-run``); ``--once`` places what is complete now and exits, otherwise it looks
again every ``--poll`` seconds until Ctrl-C (exit code 130, every finished record kept).

A checkpoint removed by the run's rotation before it is placed is skipped with one line; one that fails to
load is recorded in ``RUN/failed.json`` with its reason and tried again at the next ``--retries`` looks; neither
stops the others. ``--once`` exits 0 when every checkpoint complete now was placed or was gone, and 1 (the
summary, then one error line naming each failed step and its reason) when one failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flasheval.api.watch import DEFAULT_RUN_DIR, FAILED_FILE, UnplacedCheckpoint, unplaced_checkpoints, watch
from flasheval.cli._options import (
    add_executor_options,
    add_live_options,
    add_lmeval_live_options,
    add_placement_options,
    add_progress_options,
    budget_from,
    engine_from,
    executor_from,
    step_printer,
)
from flasheval.runs.folder import placed_steps

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("watch", help="place every checkpoint saved into a folder, in step order, into "
                                                 "one run folder (--once: what is there now)")
    parser.add_argument("directory", metavar="DIR", help="the folder the training run saves its checkpoints into")
    parser.add_argument("--reference", required=True, help="reference name or folder (a built live reference)")
    parser.add_argument("--run", help=f"the run folder (default: DIR/{DEFAULT_RUN_DIR})")
    parser.add_argument("--once", action="store_true", help="place the checkpoints complete now, then exit")
    parser.add_argument("--poll", type=float, default=30.0, help="seconds between looks (default: %(default)s)")
    parser.add_argument("--settle", type=float, default=60.0,
                        help="a checkpoint is placed once its files have not changed for this long (default: "
                             "%(default)s s)")
    parser.add_argument("--retries", type=int, default=3,
                        help="a checkpoint that fails to load is tried again at each of the next RETRIES looks "
                             "(default: %(default)s; --once: tried once)")
    parser.add_argument("--simultaneous", type=int, metavar="K",
                        help="planned number of checkpoints: the level is split over K so that all K intervals "
                             "cover together")
    add_placement_options(parser, seed_help="default: the reference's build seed", budget="per checkpoint")
    add_live_options(parser)
    add_lmeval_live_options(parser)
    add_executor_options(parser)
    add_progress_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.run) if args.run is not None else Path(args.directory) / DEFAULT_RUN_DIR
    try:
        history = watch(args.directory, reference=args.reference, run=args.run, once=args.once, poll_seconds=args.poll,
                        settle_seconds=args.settle, retries=args.retries, plan=args.tiers,
                        simultaneous=args.simultaneous, seed=args.seed, aggregate=args.aggregate, missing=args.missing,
                        budget=budget_from(args.max_examples, args.max_tokens, args.max_flops,
                                           max_seconds=args.max_seconds),
                        n_parameters=args.n_parameters, task_dir=args.task_dir, include_path=args.include_path,
                        num_fewshot=args.num_fewshot, engine=engine_from(args), progress=step_printer(args),
                        executor=executor_from(args))
    except KeyboardInterrupt:
        failed = [u for u in unplaced_checkpoints(run_dir) if not u.gone]
        print(f"flasheval: stopped watching; the {len(placed_steps(run_dir))} checkpoints placed are kept in {run_dir} "
              f"(run the same command to go on){_failures(failed, run_dir)}", file=sys.stderr, flush=True)
        return 130
    unplaced = unplaced_checkpoints(history.path)
    failed = [u for u in unplaced if not u.gone]
    gone = ", ".join(str(u.step) for u in unplaced if u.gone)
    print(f"run {history.name}: {len(history.checkpoints)} checkpoints placed (steps "
          f"{', '.join(str(c.step) for c in history.checkpoints)})"
          + (f"; skipped, gone before placed: steps {gone}" if gone else "")
          + (f"; failed: steps {', '.join(str(u.step) for u in failed)}" if failed else "")
          + f"; record: {history.path}; `flasheval report {history.path}` draws rank against step", flush=True)
    if failed:
        print(f"flasheval: error: {len(failed)} checkpoint{'s' if len(failed) > 1 else ''} not placed"
              f"{_failures(failed, history.path)}", file=sys.stderr)
        return 1
    return 0


def _failures(failed: list[UnplacedCheckpoint], run_dir: Path) -> str:
    """``: step 30 (checkpoint-30): REASON; ... (recorded in RUN/failed.json)`` (``""``: none failed)."""
    if not failed:
        return ""
    return (": " + "; ".join(f"step {u.step} ({u.checkpoint}): {u.reason}" for u in failed)
            + f" (recorded in {run_dir / FAILED_FILE})")
