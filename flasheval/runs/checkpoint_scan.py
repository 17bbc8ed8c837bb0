"""The checkpoints a training run has saved into a folder: which, at what step, and whether complete.

What counts as a checkpoint (the direct entries of the folder only):

* a Hugging Face ``save_pretrained`` folder: ``config.json`` and weights (``*.safetensors`` or
  ``pytorch_model*.bin``, sharded ones with their index json). Its step is read from its name
  (``checkpoint-500``, ``step-500``, ``step500``, ``global_step500``, ``..._step_500``), else from its
  ``trainer_state.json``'s ``global_step``; a folder with neither is not a checkpoint;
* a ``*.gguf`` file whose name holds the step (``model-step-500.gguf``).

A checkpoint is complete when every file it needs is there (config and weights; every shard the index
names; for a Trainer's ``checkpoint-*`` folder, ``trainer_state.json``, which the Trainer writes last),
every weights file is as long as its own header says (a writer that pauses longer than the settling time
leaves a file that is still short), and none of its files has changed for ``settle_seconds`` (a file still
being written keeps changing). The lengths are read from the headers only, never from the tensor data:

* ``.safetensors``: 8 bytes (the header's length ``N``), the JSON header, then the data; the file ends at
  ``8 + N + max(data_offsets end)``;
* ``.gguf``: the header lists every tensor's offset, shape and type; the data starts at the header's end
  rounded up to ``general.alignment`` (32 when not given) and ends after the furthest tensor.

A file too mangled to state its length (not a header these readers know) is not waited for: its loader says
what is wrong. ``pytorch_model*.bin`` files (pickles) state no length: for them the settling time decides.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import time
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

from flasheval.runs.folder import MAX_STEP  # a checkpoint whose name holds a larger step is found, never placed

__all__ = ["FoundCheckpoint", "find_checkpoints", "examine_checkpoint", "short_file", "step_of_name"]

_STEP = re.compile(r"(?:^|[^a-z])(?:checkpoint|global_step|step)[-_]?(\d+)", re.IGNORECASE)
_WEIGHTS = ("*.safetensors", "pytorch_model*.bin")
_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_TRAINER_STATE = "trainer_state.json"
_SAFETENSORS_MAX_HEADER = 100_000_000  # the safetensors format's own limit on its JSON header
_GGUF_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUFValueType -> bytes
_GGUF_STRING, _GGUF_ARRAY, _GGUF_UINT32 = 8, 9, 4
_GGUF_MAX_ITEMS = 1 << 32  # more tensors, keys or array items than this: not a header, garbage


@dataclass(frozen=True, slots=True, kw_only=True)
class FoundCheckpoint:
    """One checkpoint found in the watched folder."""

    step: int
    path: Path
    """Absolute (a vanished folder's spec can never be read as a hub id)."""
    kind: str
    """``hf`` (a ``save_pretrained`` folder) or ``gguf`` (one file)."""
    waiting_for: str = ""
    """Why it is not complete yet (``""``: complete)."""
    problem: str = ""
    """Why it is not placed as it is, however long the watcher waits (``""``: none): another checkpoint of the
    folder holds the same step (``step-5`` beside ``global_step5``, ``step-02`` beside ``step-2``)."""

    @property
    def complete(self) -> bool:
        return not self.waiting_for and not self.problem

    @property
    def spec(self) -> str:
        """The model spec that places it (``hf:PATH`` / ``gguf:PATH``, the path absolute)."""
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
    return step if isinstance(step, int) and not isinstance(step, bool) and 0 <= step <= MAX_STEP else None


class _Cut(Exception):
    """The file ends inside its header: the writer has not written it all yet."""


class _Header:
    """A file's leading bytes, read in chunks as a header is parsed field by field (never the tensor data)."""

    def __init__(self, file: BinaryIO, order: str, offset: int, size: int) -> None:
        self._file, self._order, self._size = file, order, size
        self._data, self._pos, self._base = b"", 0, offset

    @property
    def offset(self) -> int:
        return self._base + self._pos

    def skip(self, n: int) -> None:
        if self.offset + n > self._size:
            raise _Cut
        if self._pos + n <= len(self._data):
            self._pos += n
        else:  # past what is read: move on without reading it (a long array of numbers)
            self._file.seek(self.offset + n)
            self._data, self._pos, self._base = b"", 0, self.offset + n

    def take(self, n: int) -> bytes:
        if self.offset + n > self._size:
            raise _Cut
        if self._pos + n > len(self._data):
            self._data = self._data[self._pos:] + self._file.read(max(n, 1 << 20))
            self._base, self._pos = self._base + self._pos, 0
        self._pos += n
        return self._data[self._pos - n:self._pos]

    def number(self, code: str) -> int:
        return struct.unpack(self._order + code, self.take(struct.calcsize(code)))[0]

    def count(self) -> int:
        n = self.number("Q")
        if n >= _GGUF_MAX_ITEMS:
            raise ValueError(f"{n} items")
        return n

    def skip_value(self, kind: int) -> None:
        if kind in _GGUF_SCALAR_BYTES:
            self.skip(_GGUF_SCALAR_BYTES[kind])
        elif kind == _GGUF_STRING:
            self.skip(self.count())
        elif kind == _GGUF_ARRAY:
            item, n = self.number("I"), self.count()
            if item in _GGUF_SCALAR_BYTES:
                self.skip(n * _GGUF_SCALAR_BYTES[item])
            else:
                for _ in range(n):
                    self.skip_value(item)
        else:
            raise ValueError(f"value type {kind}")


def _gguf_length(file: BinaryIO, size: int) -> int | None:
    """The length of the complete GGUF file from its header (``None``: no header this reader knows).

    Raises ``_Cut`` when the file ends inside its header.
    """
    from gguf import GGML_QUANT_SIZES  # a dependency of flasheval; imported only when a .gguf is looked at

    head = file.read(8)
    if not b"GGUF".startswith(head[:4]):
        return None
    if len(head) < 8:
        raise _Cut
    order = next((o for o in "<>" if struct.unpack(o + "I", head[4:])[0] in (2, 3)), None)
    if head[:4] != b"GGUF" or order is None:  # version 1 (2023, no longer written) states no 64-bit counts
        return None
    header = _Header(file, order, 8, size)
    n_tensors, n_keys = header.count(), header.count()
    alignment = 32
    for _ in range(n_keys):
        key, kind = header.take(header.count()), header.number("I")
        if key == b"general.alignment" and kind == _GGUF_UINT32:
            alignment = header.number("I")
        else:
            header.skip_value(kind)
    end = 0
    for _ in range(n_tensors):
        header.skip(header.count())  # the tensor's name
        shape = [header.number("Q") for _ in range(header.number("I"))]
        block, size = GGML_QUANT_SIZES[header.number("I")]  # KeyError: a type this gguf does not know
        end = max(end, header.number("Q") + math.prod(shape) // block * size)
    if alignment <= 0:
        return None
    return -(-header.offset // alignment) * alignment + end


def _safetensors_length(file: BinaryIO, size: int) -> int | None:
    """The length of the complete ``.safetensors`` file from its header (``None``: no header this reader knows).

    Raises ``_Cut`` when the file ends inside its header.
    """
    head = file.read(8)
    if len(head) < 8:
        return None  # 1 to 7 bytes hold no length (an empty file is caught before): its loader says what it is
    n = struct.unpack("<Q", head)[0]
    if n > _SAFETENSORS_MAX_HEADER:
        return None
    if size < 8 + n:
        raise _Cut
    text = file.read(n)
    header = json.loads(text)  # ValueError: not a header
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    if not all(isinstance(e, int) for e in ends):
        return None
    return 8 + n + max(ends, default=0)


def short_file(path: Path) -> str:
    """Why the weights file ``path`` is not complete yet, from its own header (``""``: as long as it says).

    An empty file, a file that ends inside its header and a file shorter than its header says are not
    complete; a ``.safetensors`` or ``.gguf`` whose header cannot be read is left to its loader (``""``).
    """
    read = _gguf_length if path.name.endswith(".gguf") else _safetensors_length
    try:
        file = path.open("rb")
    except FileNotFoundError:
        raise  # removed while looking: not a checkpoint any more
    except OSError:  # unreadable (permissions): its loader says so, and the watcher records it
        return ""
    with file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            return f"{path.name} to be written (it is empty)"
        try:
            length = read(file, size)
        except _Cut:
            return f"{path.name} to be written (it ends inside its header, at {size:,} bytes)"
        except (ValueError, KeyError, TypeError, AttributeError, IndexError, struct.error):
            return ""
    if length is not None and size < length:
        return f"{path.name} to reach {length:,} bytes (its header's length; it has {size:,})"
    return ""


def _missing_files(folder: Path) -> str:
    """What a ``save_pretrained`` folder still lacks (``""``: nothing)."""
    if not (folder / "config.json").is_file():
        return "config.json"
    for index in _INDEXES:
        if (folder / index).is_file():
            try:
                weights = sorted(set(json.loads((folder / index).read_text(encoding="utf-8"))["weight_map"].values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                return f"a readable {index}"
            missing = [s for s in weights if not (folder / s).is_file()]
            if missing:
                return f"shards {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}"
            break
    else:
        weights = sorted({p.name for pattern in _WEIGHTS for p in folder.glob(pattern)})
        if not weights:
            return "weights (*.safetensors or pytorch_model*.bin)"
    for name in weights:
        short = short_file(folder / name) if name.endswith(".safetensors") else ""
        if short:
            return short
    if folder.name.startswith("checkpoint-") and not (folder / _TRAINER_STATE).is_file():
        return _TRAINER_STATE
    from flasheval.engine.hf.loading import TOKENIZER_FILES, has_tokenizer_files

    if not has_tokenizer_files(folder):  # save_pretrained of the model, then of its tokenizer: not there yet
        return f"its tokenizer ({', '.join(TOKENIZER_FILES)}: saved beside the weights, tokenizer.save_pretrained)"
    return ""


def _last_change(path: Path) -> float:
    """The newest modification time of ``path`` (a file) or of the files directly in it (a folder)."""
    if path.is_file():
        return path.stat().st_mtime
    times = [path.stat().st_mtime]
    with os.scandir(path) as entries:
        times += [e.stat().st_mtime for e in entries if e.is_file()]
    return max(times)


def examine_checkpoint(entry: str | os.PathLike[str], *, settle_seconds: float = 0.0,
                       now: float | None = None) -> FoundCheckpoint | None:
    """``entry`` (a folder or a ``.gguf`` file) as a checkpoint, complete or not; ``None``: not one (or gone).

    The watcher also asks this after a checkpoint failed to load: a checkpoint no longer complete then was
    being removed or rewritten while it loaded.
    """
    path = Path(os.path.abspath(entry))
    try:
        if path.is_file() and path.name.endswith(".gguf"):
            step, kind, waiting = step_of_name(path.name), "gguf", ""
            if step is not None:
                waiting = short_file(path)
        elif path.is_dir() and ((path / "config.json").is_file() or step_of_name(path.name) is not None):
            step, kind = step_of_name(path.name), "hf"
            step = _trainer_step(path) if step is None else step
            waiting = "" if step is None else _missing_files(path)
        else:
            return None
        if step is None:
            return None
        if not waiting and (time.time() if now is None else now) - _last_change(path) < settle_seconds:
            waiting = f"its files to stop changing for {settle_seconds:g} s"
    except FileNotFoundError:  # removed while looking (a trainer rotating its checkpoints)
        return None
    problem = "" if step <= MAX_STEP else f"its step {step} is beyond {MAX_STEP} (2**63 - 1): not a training step"
    return FoundCheckpoint(step=step, path=path, kind=kind, waiting_for=waiting, problem=problem)


def find_checkpoints(folder: str | os.PathLike[str], *, settle_seconds: float = 0.0, skip: Path | None = None,
                     now: float | None = None, skip_steps: Collection[int] = ()) -> tuple[FoundCheckpoint, ...]:
    """The checkpoints directly in ``folder``, sorted by step (module docstring: what counts, when complete).

    ``skip``: an entry to ignore (the run folder, when it lies inside ``folder``). ``now``: the time the
    settling is measured against (default: now). ``skip_steps``: steps left out unexamined (the watcher's
    placed ones: their headers are not read again at every look).
    """
    now = time.time() if now is None else now
    found: dict[int, list[FoundCheckpoint]] = {}
    skipped = None if skip is None else os.path.realpath(skip)  # realpath: a symlink loop is a path, not an error
    for entry in sorted(Path(os.path.abspath(folder)).iterdir()):
        if os.path.realpath(entry) == skipped or step_of_name(entry.name) in skip_steps:
            continue
        checkpoint = examine_checkpoint(entry, settle_seconds=settle_seconds, now=now)
        if checkpoint is not None and checkpoint.step not in skip_steps:
            found.setdefault(checkpoint.step, []).append(checkpoint)
    return tuple(c for step in sorted(found) for c in _one_per_step(found[step]))


def _one_per_step(same: list[FoundCheckpoint]) -> list[FoundCheckpoint]:
    """The checkpoints of one step, each with its ``problem`` when there are several: which is the step's is not
    for the watcher to guess (two records of one step, or one silently dropped)."""
    if len(same) == 1:
        return same
    names = " and ".join(c.path.name for c in same)
    problem = (f"{len(same)} checkpoints hold step {same[0].step} ({names}): none is placed until one is left "
               "(rename or move the others)")
    return [replace(c, problem=problem) for c in same]
