"""``EngineOptions``: how a live model runs, the device options every live call shares.

:func:`flasheval.place`, :func:`flasheval.sweep`, :func:`flasheval.evaluate`,
:func:`flasheval.build_reference` and :func:`flasheval.lm_eval` take ``engine=EngineOptions(...)``
instead of repeating these options in each signature. Each option is checked when the object is
made (one line naming its command-line spelling), and refused by a call where it does not apply (a
replayed model runs nothing; ``max_length`` only where a command has ``--max-length``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.checks import LOAD_DTYPES, check_count, check_dtype
from flasheval.engine.hf.device_map import DeviceMap, device_map_from
from flasheval.engine.devices import check_device
from flasheval.errors import InputError

__all__ = ["EngineOptions", "engine_options"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineOptions:
    """The device options of a live call; ``None`` everywhere means each call's default.

    >>> EngineOptions(device="cpu", batch_size=8).batch_size
    8
    >>> EngineOptions(batch_size=0)
    Traceback (most recent call last):
    ...
    flasheval.errors.InputError: field '--batch-size': must be an integer >= 1, got 0
    """

    dtype: str | None = None
    """``auto``, ``float32``, ``bfloat16``, ``float16`` (default: ``auto`` for ``evaluate``, the reference's for
    ``place`` / ``sweep``, which accept no other, ``float32`` for ``build_reference`` and ``lm_eval``)."""
    device: str | None = None
    """``auto`` (default), ``cpu``, ``cuda``, ``cuda:N``; not for in-memory models (they stay where they are)."""
    batch_size: int | None = None
    """Continuations per forward pass (default 32)."""
    max_length: int | None = None
    """Most tokens per sequence (default: the model's); ``evaluate`` and ``lm_eval`` only."""
    device_map: str | Mapping[Any, Any] | DeviceMap | None = None
    """A model larger than one GPU: ``auto``, ``balanced``, ``sequential`` or a mapping of module -> device
    (:func:`flasheval.engine.hf.device_map.device_map_from`)."""
    max_memory: str | Mapping[Any, Any] | None = None
    """With a ``device_map`` name: caps per device (``"0=70GiB,cpu=200GiB"``)."""
    offload_folder: str | Path | None = None
    """With a ``device_map``: a folder for layers that fit neither the GPUs nor CPU memory."""

    def __post_init__(self) -> None:
        if self.dtype is not None:
            check_dtype(self.dtype, allowed=LOAD_DTYPES)
        if self.batch_size is not None:
            check_count(self.batch_size, field="--batch-size")
        if self.max_length is not None:
            check_count(self.max_length, field="--max-length")
        check_device(self.device)
        self.placement  # noqa: B018 - the device map's options are checked together, now

    @property
    def placement(self) -> DeviceMap | None:
        """The checked device map (``None``: the model loads on one device)."""
        return device_map_from(self.device_map, max_memory=self.max_memory, offload_folder=self.offload_folder,
                               device=self.device)

    def given(self) -> dict[str, Any]:
        """The options set (not ``None``), by name."""
        return {name: getattr(self, name) for name in self.__slots__ if getattr(self, name) is not None}  # type: ignore[attr-defined]

    def refuse(self, why: str, *names: str) -> None:
        """Refuse, in one line naming it, the first of ``names`` that is set (``why``: where it applies)."""
        for name in names:
            if getattr(self, name) is not None:
                raise InputError(f"applies to {why}", field="--" + name.replace("_", "-"))


def engine_options(engine: object) -> EngineOptions:
    """``engine`` itself, or the defaults for ``None``; anything else is refused in one line."""
    if engine is None:
        return EngineOptions()
    if not isinstance(engine, EngineOptions):
        raise InputError(f"expected EngineOptions, got {type(engine).__name__}", field="engine")
    return engine
