"""``PlacementCallback``: place the Hugging Face model a ``lightning.Trainer`` trains, every N steps or when it saves.

A ``lightning.pytorch.Callback`` over :func:`flasheval.place_checkpoint`, as the Trainer callback
(:mod:`flasheval.integrations.transformers`) is for the Hugging Face ``Trainer``: at step ``N``
(``trainer.global_step``) it places the causal LM the ``LightningModule`` holds as checkpoint ``N`` of the run
folder ``run``, and logs the same numbers under the same names
(:func:`~flasheval.integrations.placing.placement_metrics`: ``flasheval/rank``, ``flasheval/rank_lo``, ...)
through every logger of the Trainer (``trainer.loggers``: TensorBoard, CSV, W&B, ...), at that step::

    module = MyLightningModule(model=AutoModelForCausalLM.from_pretrained(...))   # holds it as module.model
    placement = PlacementCallback(reference, run="runs/demo", model="model", tokenizer=tokenizer, every=50,
                                  plan="default")
    lightning.Trainer(callbacks=[placement], max_steps=1000).fit(module, loader)

Nothing is guessed: ``model=`` names the ``LightningModule`` attribute (a dotted path: ``"backbone.lm"``) that holds
the Hugging Face causal LM, read at each placement (so the module a strategy has put there is the one placed), and
``tokenizer=`` is its tokenizer (a ``LightningModule`` has no standard place for one).

Under ``strategy="ddp"`` every process runs its own callback at the same steps, and ``distributed`` says who
places, as for the Trainer callback: ``"main"`` (the default) places on global rank zero only, with no
collective (the other processes train on to their next collective and wait there); ``"all"`` places on every
process together, the examples split among them (a collective, entered by every process's callback at the same
step). Only global rank zero logs, through the loggers' ``log_metrics`` (no collective; ``LightningModule.log`` is
not used: it cannot log from ``on_save_checkpoint``, and it logs at Lightning's ``log_every_n_steps``, not at the
placement's step). Importing this module does not import lightning: the class is made on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flasheval.engine.coordination.distributed import check_distributed
from flasheval.errors import InputError
from flasheval.integrations.placing import METRIC_PREFIX, check_options, note_waiting, place_step, placement_metrics

__all__ = ["PlacementCallback", "placement_metrics", "METRIC_PREFIX"]


class _PlacementHooks:
    """A ``lightning.pytorch.Callback`` that places the module's causal LM every ``every`` steps and/or at every save.

    Parameters
    ----------
    reference
        The reference to place on (a name, a folder or a loaded reference), as :func:`flasheval.place` takes.
    run
        The run folder: every placement is one checkpoint of it, at the Trainer's ``global_step``
        (:func:`flasheval.read_run` reads it back, ``flasheval report RUN`` draws rank against step).
    model
        The name of the ``LightningModule`` attribute that holds the Hugging Face causal LM (``"model"`` for
        ``self.model``; a dotted path for a nested one), read at each placement.
    tokenizer
        The causal LM's tokenizer (required).
    every
        Place when ``global_step`` is a multiple of it (``on_train_batch_end``, after the optimizer step).
    on_save
        Place when the Trainer saves a checkpoint (``on_save_checkpoint``: ``ModelCheckpoint`` or
        ``trainer.save_checkpoint``), once per step whatever else asked. Lightning calls no callback at a
        weights-only save: a ``ModelCheckpoint(save_weights_only=True)`` is refused with ``on_save`` as training begins.
    distributed
        ``"main"``: only global rank zero places, no collective; ``"all"``: every process places together
        (collective; every process gets the same result). One process alone: the same result.
    **place_kwargs
        Every other keyword of :func:`flasheval.place_checkpoint` (``plan``, ``budget``, ``seed``,
        ``simultaneous``, ``max_seconds``, ``task_dir``, ``progress``, ...), forwarded as is.

    Notes
    -----
    As training begins (``on_fit_start``, on every process alike, before the first step) the callback refuses, in
    one line, a ``model`` the module does not hold or that is not a Hugging Face model, ``"all"`` without a process
    group, ``"main"`` with a sharded model (Lightning's FSDP, model-parallel or DeepSpeed ZeRO-3 strategy, or a
    module sharded already: its forward passes run on every process together), and every argument
    :func:`flasheval.place_checkpoint` would refuse. The model is placed unwrapped as the engine unwraps it
    (:func:`flasheval.engine.hf.in_memory.unwrap`), in eval mode and handed back in the mode it came in.
    :attr:`placements` holds what this process placed, by step.
    """

    def __init__(self, reference: Any, *, run: str | Path, model: str, tokenizer: Any, every: int | None = None,
                 on_save: bool = False, distributed: str = "main", **place_kwargs: Any) -> None:
        check_options(run=run, every=every, on_save=on_save, distributed=distributed, place_kwargs=place_kwargs,
                      own=(), decided="the LightningModule's model=, the Trainer's global_step, the run's NAME/step-N")
        if not isinstance(model, str) or not all(part.isidentifier() for part in model.split(".")):
            raise InputError(f"expected the name of the LightningModule attribute that holds the Hugging Face "
                             f"causal LM (\"model\" for self.model), got {model!r}", field="model")
        if tokenizer is None:
            raise InputError("give the causal LM's tokenizer: a LightningModule has no standard place for one",
                             field="tokenizer")
        self.reference, self.run, self.every, self.on_save = reference, Path(run), every, on_save
        self.model, self.tokenizer, self.distributed = model, tokenizer, distributed
        self.place_kwargs = dict(place_kwargs)
        self._placements: dict[int, Any] = {}

    @property
    def placements(self) -> Mapping[int, Any]:
        """Every :class:`~flasheval.api.place.PlaceRun` this process got, by step (none on the other processes
        under ``distributed="main"``)."""
        return dict(self._placements)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """Refuse, before the first step rather than at the first placement (on every process alike: the strategy
        has wrapped the model by now), what the first placement would refuse (class docstring, Notes)."""
        held = _held_model(pl_module, self.model)
        check_distributed(self.distributed)
        if self.distributed == "main":
            _refuse_sharded(trainer, held)
        if self.on_save:
            _refuse_weights_only(trainer)
        from flasheval.api.runs import check_hook
        from flasheval.engine.hf.in_memory import unwrap

        # what the first placement checks before it writes: values, the reference and plan read, the budget against
        # the plan, the run folder's settings (the Trainer callback's check, run when it is made)
        check_hook(unwrap(held)[0], run=self.run, step=trainer.global_step, reference=self.reference,
                   tokenizer=self.tokenizer, place_kwargs={**self.place_kwargs, "distributed": self.distributed})
        if self.distributed == "main" and trainer.is_global_zero and "max_seconds" not in self.place_kwargs:
            note_waiting("lightning PlacementCallback")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Place at every multiple of ``every``, once the optimizer has stepped (``global_step`` counts steps: under
        gradient accumulation the batches after a step share its number, and the step is placed once)."""
        step = trainer.global_step
        if self.every is not None and step > 0 and step % self.every == 0:
            self._place(trainer, pl_module)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """With ``on_save``: place the step being saved (Lightning builds the checkpoint on every process, so under
        ``"all"`` every process enters the placement together)."""
        if self.on_save:
            self._place(trainer, pl_module)

    def _place(self, trainer: Any, pl_module: Any) -> None:
        """Place step ``global_step`` unless done already or another process places it; global rank zero logs it."""
        step = trainer.global_step
        if step in self._placements or (self.distributed == "main" and not trainer.is_global_zero):
            return
        held = _held_model(pl_module, self.model)
        if self.distributed == "main":
            _refuse_sharded(trainer, held)
        result, metrics = place_step(held, run=self.run, step=step, reference=self.reference,
                                     tokenizer=self.tokenizer, distributed=self.distributed,
                                     place_kwargs=self.place_kwargs)
        self._placements[step] = result
        if trainer.is_global_zero:  # the loggers write on rank zero only; no collective
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=step)


def _held_model(pl_module: Any, path: str) -> Any:
    """The module's attribute ``path`` (dotted), refused in one line unless it is there and a Hugging Face model."""
    from flasheval.engine.hf.in_memory import unwrap

    held = pl_module
    for part in path.split("."):
        try:
            held = getattr(held, part)
        except AttributeError:
            raise InputError(f"{type(pl_module).__name__} has no attribute {path!r}: give model= the name of the "
                             "LightningModule attribute that holds the Hugging Face causal LM", field="model") from None
    from transformers import PreTrainedModel

    if not isinstance(unwrap(held)[1], PreTrainedModel):
        raise InputError(f"{type(pl_module).__name__}.{path} is a {type(held).__name__}, not a Hugging Face "
                         "(transformers) causal LM: give model= the attribute that holds one", field="model")
    return held


def _refuse_sharded(trainer: Any, held: Any) -> None:
    """Refuse ``distributed="main"`` for a sharded model (a group of more than one process only): the strategy
    shards it (Lightning's FSDP or model-parallel strategy, DeepSpeed ZeRO-3), or the module is sharded already."""
    from lightning.pytorch.strategies import DeepSpeedStrategy, FSDPStrategy, ModelParallelStrategy

    from flasheval.engine.hf.in_memory import check_sharded_placement, unwrap

    strategy = trainer.strategy
    zero3 = isinstance(strategy, DeepSpeedStrategy) and \
        (strategy.config or {}).get("zero_optimization", {}).get("stage") == 3
    sharded = zero3 or isinstance(strategy, (FSDPStrategy, ModelParallelStrategy))
    check_sharded_placement(unwrap(held)[0], "main", sharded=sharded)


def _refuse_weights_only(trainer: Any) -> None:
    """Refuse ``on_save`` with a weights-only ``ModelCheckpoint``: Lightning calls no callback's
    ``on_save_checkpoint`` for those saves, so they would not be placed."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    if any(isinstance(c, ModelCheckpoint) and c.save_weights_only for c in trainer.checkpoint_callbacks):
        raise InputError("a ModelCheckpoint(save_weights_only=True) saves without calling any callback's "
                         "on_save_checkpoint, so on_save=True would place none of its checkpoints: save full "
                         "checkpoints, or place with every=N", field="on_save")


def __getattr__(name: str) -> Any:
    # The class derives from lightning.pytorch.Callback; it is made when first asked for, so importing flasheval
    # (or this module) does not import lightning.
    if name != "PlacementCallback":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _callback_class()


def _callback_class() -> Any:
    """``PlacementCallback``, made once (from :class:`_PlacementHooks` and ``lightning.pytorch.Callback``)."""
    if "PlacementCallback" in globals():
        return globals()["PlacementCallback"]
    try:
        from lightning.pytorch import Callback
    except ImportError:
        raise InputError('the Lightning callback needs lightning, which is not installed; install it with: '
                         'pip install -e ".[lightning]"  (or: pip install "lightning>=2.6")') from None
    made = type("PlacementCallback", (_PlacementHooks, Callback),
                {"__module__": __name__, "__qualname__": "PlacementCallback", "__doc__": _PlacementHooks.__doc__})
    globals()["PlacementCallback"] = made
    return made
