"""Mixed precision around a model held in memory: score it as its weights are, never under the training's autocast.

In a training job what computes is often a wrapper, not the parameters: accelerate's ``prepare`` with
``mixed_precision="bf16"`` or ``"fp16"`` (which the Trainer's ``bf16=True`` / ``fp16=True`` use) replaces the
model's ``forward`` by one that runs under ``torch.autocast`` and casts the outputs back to float32; a hand-written
loop may call flasheval from inside a ``torch.autocast`` block. Scored as they are, the model's matrix products
would run in bf16 (or fp16) while its parameters, and so the record's dtype, say float32: another model's numbers
than the reference's models and the saved checkpoint give.

:func:`without_autocast` scores the model as its weights are: for the block it puts back each module's own
``forward`` under a forward that a ``torch.autocast`` decorator wraps (accelerate keeps the original as
``_original_forward``; any wrapper chain that holds an autocast decorator is looked through), turns off an
autocast the caller's code has entered, and restores both after, so training goes on in the mixed precision it
had. The record's dtype is then the dtype that computed: the parameters'. Only the module's own attribute is
touched, never a global flag, and nothing is changed when no autocast is found.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from types import MethodType
from typing import Any

__all__ = ["without_autocast", "autocast_wrapped", "MixedPrecision"]

logger = logging.getLogger(__name__)

_MAX_DEPTH = 32
"""Wrappers looked through on one ``forward`` at most (accelerate adds two; decorators a few)."""


class MixedPrecision:
    """What was found around one model: the autocast dtypes of its wrapped forwards and of the caller's block."""

    def __init__(self) -> None:
        self.wrapped: list[str] = []
        self.ambient: str | None = None

    def describe(self) -> str:
        parts = [f"its forward runs under {d} autocast (mixed precision: accelerate, Trainer bf16/fp16)"
                 for d in dict.fromkeys(self.wrapped)]
        if self.ambient is not None:
            parts.append(f"it was called inside a {self.ambient} torch.autocast block")
        return "; ".join(parts)


def _autocast_dtype(function: Any) -> str | None:
    """The dtype of the ``torch.autocast`` a decorator layer runs under (its closure holds the autocast), if any."""
    import torch

    for cell in getattr(function, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, torch.autocast) and getattr(value, "_enabled", True):
            return str(value.fast_dtype).removeprefix("torch.")
    return None


def autocast_wrapped(module: Any) -> tuple[Any, str] | None:
    """``(forward, dtype)``: the forward under the innermost autocast layer of ``module``'s own ``forward``
    attribute (bound to ``module`` when that attribute was a method) and the autocast's dtype; ``None`` when the
    module's forward is not an instance attribute or holds no autocast layer."""
    given = vars(module).get("forward") if hasattr(module, "__dict__") else None
    if given is None:
        return None
    bound = isinstance(given, MethodType)
    layer, below, dtype = (given.__func__ if bound else given), None, None
    for _ in range(_MAX_DEPTH):
        found = _autocast_dtype(layer)
        if found is not None and hasattr(layer, "__wrapped__"):
            below, dtype = layer.__wrapped__, found
        layer = getattr(layer, "__wrapped__", None)
        if layer is None:
            break
    if below is None or dtype is None:
        return None
    return (MethodType(below, module) if bound else below), dtype


def _device_type(model: Any) -> str:
    first = next(iter(model.parameters()), None)
    return "cpu" if first is None or first.device.type == "meta" else first.device.type


def _ambient_dtype(device: str) -> str | None:
    """The dtype of an autocast the caller has entered on ``device`` (``None``: none is on)."""
    import torch

    try:
        on, dtype = torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)
    except (TypeError, AttributeError):  # torch < 2.4: the per-device functions had other names
        cpu = device == "cpu"
        on = torch.is_autocast_cpu_enabled() if cpu else torch.is_autocast_enabled()
        dtype = torch.get_autocast_cpu_dtype() if cpu else torch.get_autocast_gpu_dtype()
    return str(dtype).removeprefix("torch.") if on else None


@contextmanager
def without_autocast(model: Any, *, inside: Sequence[Any] = (), name: str = "the model") -> Iterator[MixedPrecision]:
    """Run the block with ``model``'s forward as its weights compute: no autocast wrapper, no caller's autocast.

    ``model`` and each module of ``inside`` (what its wrappers hold: :func:`~flasheval.engine.hf.in_memory.unwrap`)
    whose ``forward`` attribute wraps a ``torch.autocast`` decorator gets the forward under it for the block; an
    autocast the caller entered on the model's device type is turned off for the block. Both are put back after, whatever happens in the block.

    Examples
    --------
    >>> import torch
    >>> layer = torch.nn.Linear(2, 2)
    >>> layer.forward = torch.autocast("cpu", dtype=torch.bfloat16)(layer.forward)
    >>> with without_autocast(layer) as found:
    ...     layer(torch.ones(1, 2)).dtype
    torch.float32
    >>> found.wrapped, layer(torch.ones(1, 2)).dtype
    (['bfloat16'], torch.bfloat16)
    """
    import torch

    found = MixedPrecision()
    with ExitStack() as stack:
        modules: list[Any] = []
        for module in (model, *inside):
            if all(module is not m for m in modules):
                modules.append(module)
        for module in modules:
            unwrapped = autocast_wrapped(module)
            if unwrapped is None:
                continue
            forward, dtype = unwrapped
            found.wrapped.append(dtype)
            stack.callback(setattr, module, "forward", vars(module)["forward"])
            module.forward = forward
        device = _device_type(model)
        ambient = _ambient_dtype(device)
        if ambient is not None:
            found.ambient = ambient
            stack.enter_context(torch.autocast(device, enabled=False))
        if found.wrapped or found.ambient:
            logger.info("%s: %s: scored as its weights are, autocast off for the scoring (put back after)", name,
                        found.describe())
        yield found
