"""``PlacementCallback``: place the model a Hugging Face ``Trainer`` trains, every N steps or when it saves.

A ``transformers.TrainerCallback`` over :func:`flasheval.place_checkpoint`, the generic hook a hand-written
loop calls itself: at step ``N`` it places the model the Trainer holds (unwrapped as the engine unwraps it:
:func:`flasheval.engine.hf.in_memory.unwrap`), as checkpoint ``N`` of the run folder ``run``, and logs the
result through the Trainer's own ``log``, so the placement lands in ``state.log_history`` and reaches every
callback the Trainer reports to (``report_to``: W&B, TensorBoard, ...) as the Trainer is configured::

    trainer = Trainer(model=model, args=args, train_dataset=data, processing_class=tokenizer)
    placement = attach(trainer, reference, run="runs/demo", every=50, plan="default")
    trainer.train()

The callback is made for its Trainer, as TRL's callbacks are (``PlacementCallback(reference, trainer=trainer,
...)`` then ``trainer.add_callback``; :func:`attach` does both): a callback is handed neither its Trainer nor
the others (the ``report_to`` integrations come first in the Trainer's list, so no ``on_log`` of a later
callback can add to what they receive), and the placement's metrics go through ``trainer.log``. A callback
without its Trainer is refused when it is made; one run by another Trainer than its own, when training begins.

Under the Trainer's data parallelism, ``distributed="main"`` (the default) places on the world's process
zero only, with no collective (the other processes carry on training and wait at the next all-reduce);
``"all"`` places on every process together, the examples split among them (a collective: each process's
callback calls it at the same step). A sharded model (FSDP, DeepSpeed ZeRO-3) computes every forward pass on
all processes together: with ``"main"`` it is refused in one line naming ``distributed="all"`` (when the
callback is made, and again as training begins, once the Trainer has wrapped the model). Importing this
module does not import transformers: the class is made on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flasheval.engine.coordination.distributed import check_distributed
from flasheval.errors import InputError
from flasheval.integrations.placing import METRIC_PREFIX, check_options, note_waiting, place_step, placement_metrics

__all__ = ["PlacementCallback", "attach", "placement_metrics", "METRIC_PREFIX"]


class _PlacementHooks:
    """A ``transformers.TrainerCallback`` that places the model every ``every`` steps and/or when the Trainer saves.

    Parameters
    ----------
    reference
        The reference to place on (a name, a folder or a loaded reference), as :func:`flasheval.place` takes.
    trainer
        The ``transformers.Trainer`` (or a subclass: TRL's) that runs the callback: its model is placed and its
        ``log`` carries the metrics. Required (:func:`attach` makes the callback and adds it to the Trainer).
    run
        The run folder: every placement is one checkpoint of it, at the Trainer's ``global_step``
        (:func:`flasheval.read_run` reads it back, ``flasheval report RUN`` draws rank against step).
    every
        Place when ``global_step`` is a multiple of it (``on_step_end``).
    on_save
        Place when the Trainer saves a checkpoint (``on_save``), once per step whatever else asked.
    distributed
        ``"main"``: only the world's process zero places, no collective; ``"all"``: every process places
        together (collective; every process gets the same result). One process alone: the same result.
    tokenizer
        Default: the Trainer's ``processing_class``.
    **place_kwargs
        Every other keyword of :func:`flasheval.place_checkpoint` (``plan``, ``budget``, ``seed``,
        ``simultaneous``, ``task_dir``, ``progress``, ...), forwarded as is.

    Notes
    -----
    Add it to its Trainer (``trainer.add_callback``, or :func:`attach`); training refuses to start when another
    Trainer runs it. The model placed is the Trainer's ``model_wrapped`` (what the Trainer trains: DDP, FSDP,
    DeepSpeed's engine) unwrapped as the engine unwraps it, so an FSDP1 wrapper stays the runner (it gathers the
    parameters) and a sharded model is placed in lockstep under ``distributed="all"``; under ``"main"`` it is
    refused. :attr:`placements` holds what this process placed, by step.
    """

    def __init__(self, reference: Any, *, trainer: Any = None, run: str | Path, every: int | None = None,
                 on_save: bool = False, distributed: str = "main", tokenizer: Any = None,
                 **place_kwargs: Any) -> None:
        check_options(run=run, every=every, on_save=on_save, distributed=distributed, place_kwargs=place_kwargs,
                      own=("trainer",), decided="the Trainer's model, its global_step, the run's NAME/step-N")
        _check_trainer(trainer)
        if distributed == "main":
            _refuse_sharded(trainer)
        _check_placement(trainer, reference, run, tokenizer, distributed, place_kwargs)
        self.reference, self.run, self.every, self.on_save_checkpoint = reference, Path(run), every, on_save
        self.distributed, self.tokenizer, self.place_kwargs = distributed, tokenizer, dict(place_kwargs)
        self._trainer = trainer
        self._placements: dict[int, Any] = {}

    @property
    def trainer(self) -> Any:
        """The Trainer the callback was made for."""
        return self._trainer

    @property
    def placements(self) -> Mapping[int, Any]:
        """Every :class:`~flasheval.api.place.PlaceRun` this process got, by step (none on the other processes
        under ``distributed="main"``)."""
        return dict(self._placements)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Refuse, before the first step rather than at the first placement, to train under another Trainer than
        the callback's own (the placements would reach neither that Trainer's log history nor its trackers),
        with ``distributed="all"`` and no process group, or with ``"main"`` and a model the Trainer has sharded
        (on every process alike: the Trainer has wrapped the model by now)."""
        if not any(c is self for c in self._trainer.callback_handler.callbacks):
            raise InputError("the callback was made for another Trainer than the one that runs it: "
                             "attach(trainer, reference, run=...) makes it for a Trainer and adds it there",
                             field="trainer")
        check_distributed(self.distributed)
        if self.distributed == "main":
            _refuse_sharded(self._trainer)
        if self.distributed == "main" and state.is_world_process_zero and "max_seconds" not in self.place_kwargs:
            note_waiting("PlacementCallback")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Place at every multiple of ``every``; with ``on_save``, also at a step the Trainer is about to save
        (its flow callback has set ``should_save``), before it writes the checkpoint, so that the checkpoint's
        ``trainer_state.json`` holds the placement (and ``resume_from_checkpoint`` keeps it in ``log_history``)."""
        if (self.every is not None and state.global_step % self.every == 0) or \
                (self.on_save_checkpoint and control.should_save):
            self._place(state, control, kwargs)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """With ``on_save``: place before an end-of-epoch save (``save_strategy="epoch"``), as at a step."""
        if self.on_save_checkpoint and control.should_save:
            self._place(state, control, kwargs)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """With ``on_save``: a save decided after the step's callbacks ran (``save_strategy="best"``) is placed
        now, and the placement written into the checkpoint's ``trainer_state.json`` as well."""
        if self.on_save_checkpoint and self._place(state, control, kwargs):
            _amend_saved_state(args, state)

    def _place(self, state: Any, control: Any, kwargs: dict[str, Any]) -> bool:
        """Place step ``global_step`` unless done already or another process places it; whether it placed."""
        step = state.global_step
        if step in self._placements or (self.distributed == "main" and not state.is_world_process_zero):
            return False
        if self.distributed == "main":
            _refuse_sharded(self._trainer)
        tokenizer = next((t for t in (self.tokenizer, kwargs.get("processing_class"), kwargs.get("tokenizer"))
                          if t is not None), None)
        if tokenizer is None:
            raise InputError("the Trainer has no processing_class: give the callback tokenizer=", field="tokenizer")
        # the Trainer's model_wrapped, unwrapped as the engine unwraps it (an FSDP1 wrapper stays: it gathers)
        result, metrics = place_step(self._trainer.model_wrapped, run=self.run, step=step, reference=self.reference,
                                     tokenizer=tokenizer, distributed=self.distributed, place_kwargs=self.place_kwargs)
        self._placements[step] = result
        _log_unsteered(self._trainer, control, metrics)
        return True


def attach(trainer: Any, reference: Any, *, run: str | Path, **options: Any) -> Any:
    """Make a :class:`PlacementCallback` for ``trainer``, add it to the Trainer's callbacks and return it.

    ``attach(trainer, reference, run=..., **options)`` is ``trainer.add_callback(PlacementCallback(reference,
    trainer=trainer, run=..., **options))``: ``options`` are the callback's (``every``, ``on_save``,
    ``distributed``, ``tokenizer``) and every other keyword of :func:`flasheval.place_checkpoint`, each refused in
    one line here, before training starts.

    Returns
    -------
    PlacementCallback
        The callback added: its :attr:`~PlacementCallback.placements` are what this process placed.
    """
    callback = _callback_class()(reference, trainer=trainer, run=run, **options)
    trainer.add_callback(callback)
    return callback


def _check_trainer(trainer: Any) -> None:
    """Refuse, in one line naming :func:`attach`, a callback made without the Trainer that runs it."""
    from transformers import Trainer

    if not isinstance(trainer, Trainer):
        got = "none" if trainer is None else type(trainer).__name__
        raise InputError(f"the callback needs the transformers.Trainer that runs it, got {got}: "
                         "attach(trainer, reference, run=...) makes it for the Trainer and adds it", field="trainer")


def _check_placement(trainer: Any, reference: Any, run: Any, tokenizer: Any, distributed: str,
                     place_kwargs: dict[str, Any]) -> None:
    """Refuse, when the callback is made, what its first placement would refuse (:func:`flasheval.api.runs.check_hook`
    on the Trainer's model and tokenizer: a bad value, an unknown reference or plan, a budget below the plan's first
    look, other settings than the run folder's), rather than stopping training at that placement."""
    from flasheval.api.runs import check_hook
    from flasheval.engine.hf.in_memory import unwrap

    tokenizer = tokenizer if tokenizer is not None else trainer.processing_class
    if tokenizer is None:
        raise InputError("the Trainer has no processing_class: give the callback tokenizer=", field="tokenizer")
    check_hook(unwrap(trainer.model_wrapped)[0], run=run, reference=reference, tokenizer=tokenizer,
               place_kwargs={**place_kwargs, "distributed": distributed})


def _refuse_sharded(trainer: Any) -> None:
    """Refuse ``distributed="main"`` for a sharded model: its forward passes are collective (FSDP gathers the
    parameters from every process, as DeepSpeed ZeRO-3 does), so process zero alone would wait forever for the
    others. Sharded: the Trainer is set to wrap it in FSDP or ZeRO-3, or the model it holds is sharded already
    (:func:`~flasheval.engine.hf.in_memory.is_sharded` of it, unwrapped as the engine unwraps it)."""
    from flasheval.engine.hf.in_memory import check_sharded_placement, unwrap

    plugin = trainer.accelerator.state.deepspeed_plugin if trainer.is_deepspeed_enabled else None
    zero3 = plugin is not None and plugin.zero_stage == 3
    check_sharded_placement(unwrap(trainer.model_wrapped)[0], "main", sharded=trainer.is_fsdp_enabled or zero3)


def _log_unsteered(trainer: Any, control: Any, metrics: dict[str, float]) -> None:
    """``trainer.log(metrics)`` (``log_history`` and every ``report_to`` integration), with every flag of the
    Trainer's ``control`` as it was before the call.

    The Trainer's ``on_log`` handler clears ``should_log``, and other callbacks' ``on_log`` may set flags too; the
    Trainer acts on them on every process alike (a logging step gathers the loss from all processes). Under
    ``distributed="main"`` only process zero logs a placement: a flag changed there alone would make it skip the
    step's loss gather while the others enter it (a collective mismatch), and even in one process the step's
    loss log would be lost. So a placement's log steers nothing: the flags are put back as they were.
    """
    from dataclasses import fields

    before = {flag.name: getattr(control, flag.name) for flag in fields(control)}
    try:
        trainer.log(metrics)
    finally:
        for name, value in before.items():
            setattr(control, name, value)


def _amend_saved_state(args: Any, state: Any) -> None:
    """Write ``state`` (with the placement just logged) over the ``trainer_state.json`` of checkpoint
    ``global_step``, on the process that writes the Trainer's checkpoints, where that file exists."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    path = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}" / "trainer_state.json"
    if args.should_save and path.is_file():
        state.save_to_json(str(path))


def __getattr__(name: str) -> Any:
    # The class derives from transformers.TrainerCallback; it is made when first asked for, so importing
    # flasheval (or this module) does not import transformers.
    if name != "PlacementCallback":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _callback_class()


def _callback_class() -> Any:
    """``PlacementCallback``, made once (from :class:`_PlacementHooks` and ``transformers.TrainerCallback``)."""
    if "PlacementCallback" in globals():
        return globals()["PlacementCallback"]
    from transformers import TrainerCallback

    made = type("PlacementCallback", (_PlacementHooks, TrainerCallback),
                {"__module__": __name__, "__qualname__": "PlacementCallback", "__doc__": _PlacementHooks.__doc__})
    globals()["PlacementCallback"] = made
    return made
