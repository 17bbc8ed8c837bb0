"""The checkpoints a training run has saved into a folder: which, at what step, and whether complete.

What counts as a checkpoint (the direct entries of the folder only):

* a Hugging Face ``save_pretrained`` folder: ``config.json`` and weights (``*.safetensors`` or
  ``pytorch_model*.bin``, sharded ones with their index json). Its step is read from its name
  (``checkpoint-500``, ``step-500``, ``step500``, ``global_step500``, ``..._step_500``), else from its
  ``trainer_state.json``'s ``global_step``; a folder with neither is not a checkpoint;
* a ``*.gguf`` file whose name holds the step (``model-step-500.gguf``).

A checkpoint is complete when every file it needs is there (config and weights; every shard the index
names; for a Trainer's ``checkpoint-*`` folder, ``trainer_state.json``, which the Trainer writes last) and
none of its files has changed for ``settle_seconds`` (a file still being written keeps changing).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FoundCheckpoint", "find_checkpoints", "step_of_name"]

_STEP = re.compile(r"(?:^|[^a-z])(?:checkpoint|global_step|step)[-_]?(\d+)", re.IGNORECASE)
_WEIGHTS = ("*.safetensors", "pytorch_model*.bin")
_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_TRAINER_STATE = "trainer_state.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class FoundCheckpoint:
    """One checkpoint found in the watched folder."""

    step: int
    path: Path
    kind: str
    """``hf`` (a ``save_pretrained`` folder) or ``gguf`` (one file)."""
    waiting_for: str = ""
    """Why it is not complete yet (``""``: complete)."""

    @property
    def complete(self) -> bool:
        return not self.waiting_for

    @property
    def spec(self) -> str:
        """The model spec that places it (``hf:PATH`` / ``gguf:PATH``)."""
        return f"{self.kind}:{self.path}"


def step_of_name(name: str) -> int | None:
    """The training step a checkpoint's name holds, if any.

    Examples
    --------
    >>> [step_of_name(n) for n in ("checkpoint-500", "step-20", "step7", "global_step300", "run_step_9.gguf", "final")]
    [500, 20, 7, 300, 9, None]
    """
    matches = list(_STEP.finditer(Path(name).stem if name.endswith(".gguf") else name))
    return int(matches[-1].group(1)) if matches else None


def _trainer_step(folder: Path) -> int | None:
    try:
        step = json.loads((folder / _TRAINER_STATE).read_text(encoding="utf-8")).get("global_step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None


def _missing_files(folder: Path) -> str:
    """What a ``save_pretrained`` folder still lacks (``""``: nothing)."""
    if not (folder / "config.json").is_file():
        return "config.json"
    for index in _INDEXES:
        if (folder / index).is_file():
            try:
                shards = set(json.loads((folder / index).read_text(encoding="utf-8"))["weight_map"].values())
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                return f"a readable {index}"
            missing = sorted(s for s in shards if not (folder / s).is_file())
            if missing:
                return f"shards {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}"
            break
    else:
        if not any(next(folder.glob(pattern), None) for pattern in _WEIGHTS):
            return "weights (*.safetensors or pytorch_model*.bin)"
    if folder.name.startswith("checkpoint-") and not (folder / _TRAINER_STATE).is_file():
        return _TRAINER_STATE
    return ""


def _last_change(path: Path) -> float:
    """The newest modification time of ``path`` (a file) or of the files directly in it (a folder)."""
    if path.is_file():
        return path.stat().st_mtime
    times = [path.stat().st_mtime]
    with os.scandir(path) as entries:
        times += [e.stat().st_mtime for e in entries if e.is_file()]
    return max(times)


def find_checkpoints(folder: str | os.PathLike[str], *, settle_seconds: float = 0.0,
                     skip: Path | None = None, now: float | None = None) -> tuple[FoundCheckpoint, ...]:
    """The checkpoints directly in ``folder``, sorted by step (module docstring: what counts, when complete).

    ``skip``: an entry to ignore (the run folder, when it lies inside ``folder``). ``now``: the time the
    settling is measured against (default: now).
    """
    now = time.time() if now is None else now
    found = []
    for entry in sorted(Path(folder).iterdir()):
        if skip is not None and entry.resolve() == skip.resolve():
            continue
        if entry.is_file() and entry.name.endswith(".gguf"):
            step, kind, waiting = step_of_name(entry.name), "gguf", ""
        elif entry.is_dir() and ((entry / "config.json").is_file() or step_of_name(entry.name) is not None):
            step, kind = step_of_name(entry.name), "hf"
            step = _trainer_step(entry) if step is None else step
            waiting = _missing_files(entry)
        else:
            continue
        if step is None:
            continue
        try:
            if not waiting and now - _last_change(entry) < settle_seconds:
                waiting = f"its files to stop changing for {settle_seconds:g} s"
        except FileNotFoundError:  # removed while looking (a trainer rotating its checkpoints)
            continue
        found.append(FoundCheckpoint(step=step, path=entry, kind=kind, waiting_for=waiting))
    return tuple(sorted(found, key=lambda c: (c.step, c.path.name)))
