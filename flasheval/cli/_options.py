"""Options more than one subcommand takes, declared once so their names, defaults and help agree."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from flasheval.api.options import EngineOptions
from flasheval.api.progress import Progress
from flasheval.errors import InputError
from flasheval.placement.results import Budget
from flasheval.reference import MISSING_POLICIES
from flasheval.stats.ranking import AGGREGATES

__all__ = ["add_live_options", "add_lmeval_live_options", "budget_from", "add_progress_options", "step_printer",
           "progress_bar_from", "add_device_map_options", "engine_from", "remember_defaults", "changed_settings",
           "add_executor_options", "executor_from", "without_executor_options"]


def remember_defaults(parser: argparse.ArgumentParser, *names: str) -> None:
    """Keep the defaults of the options ``names`` (destinations) that decide a command's result, for
    :func:`changed_settings`. Call after the options are added."""
    parser.set_defaults(result_defaults={name: parser.get_default(name) for name in names})


def changed_settings(args: argparse.Namespace) -> dict[str, object]:
    """The result-deciding options (:func:`remember_defaults`) that ``args`` sets to other than their default,
    as given: what makes a command's default output folder its own
    (:func:`flasheval.records.run_record.default_run_folder`; ``place --seed 1`` does not land in ``place``'s folder)."""
    defaults = getattr(args, "result_defaults", {})
    return {name: getattr(args, name) for name, default in defaults.items() if getattr(args, name) != default}


def add_progress_options(parser: argparse.ArgumentParser) -> None:
    """``-q`` / ``--quiet``: no step lines and no progress bars, only the final summary and errors.

    Without it, every long command prints one line per step to stdout as the step finishes (a
    placement stage, a sweep round, a built or held-out model, a backtest seed), flushed, with its
    count and the seconds elapsed, and draws per-batch bars on stderr when stderr is a terminal.
    """
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print only the final summary and errors: no step lines, no progress bars")


def step_printer(args: argparse.Namespace, *, indent: str = "  ",
                 steps: tuple[str, ...] | None = None) -> Callable[[Progress], None] | None:
    """The ``progress=`` callback of a command: each step's line on stdout, flushed (``None`` with ``--quiet``).

    ``start`` lines are printed as they are; the others indented under them, with the seconds
    elapsed since the command's call started. ``steps``: only these kinds (default: all).
    """
    if args.quiet:
        return None

    def show(p: Progress) -> None:
        if steps is not None and p.step not in steps:
            return
        if p.step == "start":
            print(p.message, flush=True)
        else:
            print(f"{indent}{p.message}{_timing(p)}", flush=True)

    return show


def _timing(p: Progress) -> str:
    """`` (elapsed 12.3 s)``, and ``, about 40 s left`` where the steps of a known count take similar time
    (models of a build or a backtest, seeds), not for stages and rounds, which may stop any time."""
    if p.elapsed is None:
        return ""
    left = ""
    if p.step in ("model", "seed") and p.done and p.total and p.done < p.total:
        left = f", about {p.elapsed / p.done * (p.total - p.done):.0f} s left"
    return f" (elapsed {p.elapsed:.1f} s{left})"


def add_executor_options(parser: argparse.ArgumentParser) -> None:
    """``--executor ray`` and the Ray cluster's options (docs/cluster.md)."""
    parser.add_argument("--executor", choices=("in-process", "ray"), default="in-process",
                        help="where models are scored: this process (default) or Ray actors, one model each "
                             "(pip install 'flasheval[ray]')")
    parser.add_argument("--ray-address", metavar="ADDR",
                        help="the Ray cluster's head (HOST:PORT, ray://HOST:10001, auto; default: RAY_ADDRESS, "
                             "else a Ray started here)")
    parser.add_argument("--cpus-per-model", type=float, default=1.0, metavar="N", help="Ray: CPUs per actor (1)")
    parser.add_argument("--gpus-per-model", type=float, default=0.0, metavar="N", help="Ray: GPUs per actor (0)")
    parser.add_argument("--max-models", type=int, metavar="N",
                        help="Ray: most models loaded at once (default: as many as the cluster fits)")


def executor_from(args: argparse.Namespace) -> object:
    """``executor=`` of an API call: ``None`` in this process, else a :class:`~flasheval.cluster.executor.RayExecutor`
    (the Ray options are refused without ``--executor ray``)."""
    from flasheval.cluster.executor import RayExecutor

    if args.executor != "ray":
        given = [o for o, v, d in (("--ray-address", args.ray_address, None), ("--cpus-per-model", args.cpus_per_model,
                 1.0), ("--gpus-per-model", args.gpus_per_model, 0.0), ("--max-models", args.max_models, None))
                 if v != d]
        if given:
            raise InputError("applies to --executor ray only", field=given[0])
        return None
    return RayExecutor(address=args.ray_address, num_cpus=args.cpus_per_model, num_gpus=args.gpus_per_model,
                       max_models=args.max_models, progress=progress_bar_from(args))


EXECUTOR_OPTIONS = ("--executor", "--ray-address", "--cpus-per-model", "--gpus-per-model", "--max-models")


def without_executor_options(argv: list[str]) -> list[str]:
    """``argv`` less the executor's options (where a command ran does not change what it wrote): what a manifest
    records of how a reference was built, the same on Ray as in this process.

    Examples
    --------
    >>> without_executor_options(["build", "--executor", "ray", "--ray-address=h:6379", "--name", "x"])
    ['build', '--name', 'x']
    """
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in EXECUTOR_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(o + "=" for o in EXECUTOR_OPTIONS)):
            out.append(arg)
    return out


def progress_bar_from(args: argparse.Namespace) -> bool | None:
    """``progress_bar=`` of an API call: ``False`` with ``--quiet``, else ``None`` (shown when stderr is a terminal)."""
    return False if args.quiet else None


def add_placement_options(parser: argparse.ArgumentParser, *, seed_help: str, budget: str) -> None:
    """The options of one placement: plan, seed, aggregate, missing-data policy, budget caps (``budget``: what they
    cap, e.g. ``"in total"``), parameters (``place`` and ``watch``)."""
    parser.add_argument("--tiers", help="tier plan file or name under tiers/ (default: default; into a run folder: "
                        "the run's, which its first placement was given)")
    parser.add_argument("--seed", type=int, help=seed_help)
    parser.add_argument("--aggregate", choices=AGGREGATES, help="default: the reference's")
    parser.add_argument("--missing", choices=MISSING_POLICIES, default="complete-models")
    parser.add_argument("--max-examples", type=int, help=f"budget: examples scored {budget} (> 0)")
    parser.add_argument("--max-tokens", type=int, help=f"budget: tokens processed {budget} (> 0)")
    parser.add_argument("--max-flops", type=float, help=f"budget: estimated FLOPs {budget} (> 0)")
    parser.add_argument("--max-seconds", type=float, help=f"budget: wall seconds {budget}: a stage projected to end "
                        "past it is not started (> 0; live models)")
    parser.add_argument("--n-parameters", type=float, help="model parameters, for the FLOPs estimate (> 0)")


def add_live_options(parser: argparse.ArgumentParser) -> None:
    """``--task-dir``, ``--dtype``, ``--device``, ``--batch-size`` and the device map's options
    (:func:`add_device_map_options`): scoring live models against a built reference.

    Their defaults are ``None`` ("not given"), so an option given where it does not apply (a replayed
    model) is refused rather than ignored.
    """
    parser.add_argument("--task-dir", help="live: task files (default: the folder the reference was built from)")
    parser.add_argument("--dtype", help="live: default and only accepted value: the reference's")
    parser.add_argument("--device", help="live: auto, cpu, cuda, cuda:N (default: auto)")
    parser.add_argument("--batch-size", type=int, help="live: continuations per forward pass (default: chosen for the device)")
    add_device_map_options(parser)


def add_device_map_options(parser: argparse.ArgumentParser) -> None:
    """``--device-map``, ``--max-memory``, ``--offload-folder``: a model larger than one GPU (commands that load one).

    Checked by :func:`flasheval.engine.hf.device_map.device_map_from` (through the API), so the command line
    and the API refuse the same values with the same line; see docs/engine.md, "Models larger than one GPU".
    """
    parser.add_argument("--device-map", metavar="MAP",
                        help="spread the model over the GPUs (then CPU, then disk): auto, balanced, sequential, or a "
                        "JSON object / .json file of module -> GPU index, cpu, disk; under accelerate launch each "
                        "replica gets visible GPUs / processes per node")
    parser.add_argument("--max-memory", metavar="CAPS",
                        help="with a --device-map name: caps per device, e.g. 0=70GiB,1=70GiB,cpu=200GiB (GPU numbers "
                        "count from the replica's first GPU; default: each device's free memory)")
    parser.add_argument("--offload-folder", metavar="DIR",
                        help="with --device-map: folder for layers that fit neither the GPUs nor CPU memory")


def engine_from(args: argparse.Namespace) -> EngineOptions:
    """``engine=`` of an API call: the device options the command has (checked by
    :class:`~flasheval.api.options.EngineOptions`, as for a Python caller)."""
    names = ("dtype", "device", "batch_size", "max_length", "device_map", "max_memory", "offload_folder")
    return EngineOptions(**{name: getattr(args, name) for name in names if hasattr(args, name)})


def add_lmeval_live_options(parser: argparse.ArgumentParser) -> None:
    """``--include-path``, ``--num-fewshot``: scoring live models against an lm-eval reference."""
    parser.add_argument("--include-path", "--include_path", dest="include_path",
                        help="live on an lm-eval reference: custom task YAMLs (default: the reference's)")
    parser.add_argument("--num-fewshot", "--num_fewshot", dest="num_fewshot", type=int,
                        help="live on an lm-eval reference: default and only accepted value: the reference's")


def budget_from(max_examples: int | None, max_tokens: int | None, max_flops: float | None, *,
                max_seconds: float | None = None,
                options: tuple[str, str, str] = ("--max-examples", "--max-tokens", "--max-flops")) -> Budget:
    """The :class:`~flasheval.placement.results.Budget` of the budget options (validated where it is made).

    ``options``: the command's names for the first three (``sweep`` says ``--budget-examples`` ...): a refusal
    names the option the user typed.
    """
    try:
        return Budget(max_examples=max_examples, max_tokens=max_tokens, max_flops=max_flops, max_seconds=max_seconds)
    except InputError as exc:
        names = dict(zip(("--max-examples", "--max-tokens", "--max-flops"), options))
        raise InputError(exc.reason, field=names.get(exc.field or "", exc.field)) from None
