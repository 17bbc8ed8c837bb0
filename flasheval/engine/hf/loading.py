"""Load a Hugging Face causal LM (local folder, local GGUF file or hub id) into an :class:`~flasheval.engine.hf.backend.HFBackend`.

Resolves the device and dtype, reads the config and computes the fingerprint the results store
keys on (:func:`plan_hf_load`: no weights read), then loads the model and tokenizer
(:func:`load_planned`); :func:`load_hf_backend` does both. The fingerprint covers the run settings
(:class:`~flasheval.engine.hf.fingerprint.RunSettings`): the attention implementation is resolved on an
empty (meta-device) copy of the model when the plan is made, and the weights load with exactly that
one. With a device map (:mod:`~flasheval.engine.hf.device_map`) the model is spread over this replica's
GPUs, CPU memory and disk by ``from_pretrained`` instead of moved to one device; the fingerprint is
that of a load on the map's main device type. torch, transformers and accelerate are imported inside
the functions only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.checks import LOAD_DTYPES
from flasheval.engine.hf.device_map import DeviceMap, ProcessLayout
from flasheval.engine.hf.fingerprint import RunSettings
from flasheval.engine.hf.backend import HFBackend
from flasheval.engine.hf.forward import default_pad_multiple
from flasheval.errors import BackendError

__all__ = ["DTYPES", "HFLoadPlan", "plan_hf_load", "run_settings", "model_settings", "load_tokenizer",
           "gguf_tokenizer_type", "load_planned", "load_hf_backend"]

logger = logging.getLogger(__name__)


DTYPES = LOAD_DTYPES  # the one list (flasheval.checks)
"""Accepted ``dtype`` names; ``auto`` is float32 on CPU and bfloat16 on GPUs that support it."""


def _resolve_device(device: str, layout: ProcessLayout) -> Any:
    """``auto``: under several processes the local process's GPU (its index among the machine's processes),
    alone the current CUDA device (the one a training job set), else the CPU."""
    import torch

    from flasheval.engine.devices import check_device

    check_device(device)  # one line for cuda on a CPU build, a GPU index too high, an unknown name
    if device == "auto":
        if torch.cuda.is_available():
            index = layout.local_process_index if layout.world_size > 1 else torch.cuda.current_device()
            return torch.device("cuda", index % torch.cuda.device_count())
        return torch.device("cpu")
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise BackendError(f"unknown device {device!r} (e.g. cpu, cuda, cuda:1, auto)") from exc


def _resolve_dtype(dtype: str, device: Any) -> tuple[Any, str]:
    import torch

    if dtype not in DTYPES:
        raise BackendError(f"unknown dtype {dtype!r} (allowed: {', '.join(DTYPES)})")
    if dtype == "auto":
        dtype = "bfloat16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    return getattr(torch, dtype), dtype


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class HFLoadPlan:
    """Everything about a model that is known before its weights load: where it is, how it runs, its fingerprint.

    Made by :func:`plan_hf_load` from the config alone (no weights are read), so a caller can tell
    which stored results are the model's before deciding to load it (:func:`load_planned`).
    """

    source: str
    """The local folder (or the folder holding ``gguf_file``), or the hub id."""
    gguf_file: str | None
    revision: str | None
    device: Any
    """The ``torch.device`` the model runs on."""
    torch_dtype: Any
    dtype_name: str
    """The resolved dtype (``auto`` made concrete)."""
    max_length: int
    fingerprint: str
    """What keys the model's results: its files, dtype, maximum length, scoring version and :attr:`settings`."""
    previous_fingerprint: str
    """The key of earlier releases (the same without :attr:`settings`): their stored results are adopted once."""
    settings: RunSettings
    """Device type, attention implementation, library versions and padding multiple the model runs with."""
    n_parameters: int
    """Parameters of the model (tied weights once), counted on an empty copy: no weights are read."""
    config: Any
    """The model's ``transformers`` config (read from ``config.json`` or the GGUF's metadata)."""
    placement: Any = None
    """With a device map: this replica's :class:`~flasheval.engine.hf.device_map.ReplicaPlacement` (``device`` is
    then its main device); ``None``: the model loads on ``device``."""
    gguf_key: str | None = None
    """A GGUF file's SHA-256 when the GGUF cache is on (:func:`~flasheval.engine.hf.gguf_cache.content_key`)."""
    converted: str | None = None
    """The GGUF file's converted folder in the cache, read instead of the file (:mod:`flasheval.engine.hf.gguf_cache`)."""


def plan_hf_load(
    target: str,
    *,
    gguf_file: str | None = None,
    revision: str | None = None,
    dtype: str = "auto",
    device: str = "auto",
    max_length: int | None = None,
    device_map: DeviceMap | None = None,
    pad_multiple: int | None = None,
    layout: ProcessLayout | None = None,
) -> HFLoadPlan:
    """Resolve device and dtype, read the config and compute the fingerprint, without loading any weights.

    Arguments as for :func:`load_hf_backend` (``pad_multiple``: see :class:`~flasheval.engine.hf.backend.HFBackend`,
    ``None``: by the resolved dtype;
    ``layout``: this process among those scoring together, for ``device="auto"`` and a device map's GPU slice);
    raises the same one-line :class:`BackendError` s for a
    missing path, an unreadable config or an unpinned hub model (and an ``InputError`` for a device map
    naming a GPU this replica does not have).
    """
    from flasheval.engine.base import SCORING_VERSION
    from flasheval.engine.hf.fingerprint import hub_commit, model_fingerprint, path_digest
    from flasheval.engine.hf.gguf_cache import content_key, converted_folder

    path = Path(target).expanduser()
    is_local = path.exists() or target.startswith(("/", ".", "~")) or gguf_file is not None
    if is_local:
        weights = path / gguf_file if gguf_file else path
        if not weights.exists():
            raise BackendError(f"model path {str(weights)!r} does not exist")
        if gguf_file is None and not (path / "config.json").is_file():
            raise BackendError(f"model folder {str(path)!r} has no config.json (for a GGUF file use gguf:FILE)")
    placement = None
    if device_map is None:
        torch_device = _resolve_device(device, layout or ProcessLayout())
    else:
        import torch

        from flasheval.engine.hf.device_map import device_map_from, plan_replica

        device_map_from(device_map, device=device)  # a device map with an explicit device is refused
        placement = plan_replica(device_map, layout)
        torch_device = torch.device(placement.main_device)
    torch_dtype, dtype_name = _resolve_dtype(dtype, torch_device)
    source = str(path) if is_local else target
    gguf_key = content_key(path / gguf_file) if gguf_file else None
    converted = converted_folder(gguf_key, dtype_name) if gguf_key else None
    config = _from_pretrained("AutoConfig", *_files(source, gguf_file, converted), revision)
    resolved_max = int(max_length or getattr(config, "max_position_embeddings", None) or 2048)
    commit = None
    if not is_local:
        commit = hub_commit(target, revision) or getattr(config, "_commit_hash", None)
        if commit is None:
            raise BackendError(f"cannot tell which commit of hub model {target!r} was loaded (no refs/"
                               f"{revision or 'main'} in the hub cache); name one: hf:{target}@<commit>")
    identity = dict(source="local" if is_local else f"hub:{target}",
                    content_digest=path_digest(path / gguf_file if gguf_file else path) if is_local else None,
                    revision=commit, dtype=dtype_name, max_length=resolved_max, scoring_version=SCORING_VERSION)
    n_parameters, attention = _empty_copy(config, source)
    multiple = default_pad_multiple(dtype_name) if pad_multiple is None else pad_multiple
    settings = run_settings(device=torch_device, attn_implementation=attention, pad_multiple=multiple)
    return HFLoadPlan(source=source, gguf_file=gguf_file, revision=revision, device=torch_device,
                      torch_dtype=torch_dtype, dtype_name=dtype_name, max_length=resolved_max,
                      fingerprint=model_fingerprint(**identity, settings=settings),
                      previous_fingerprint=model_fingerprint(**identity), settings=settings,
                      n_parameters=n_parameters, config=config, placement=placement,
                      gguf_key=gguf_key, converted=None if converted is None else str(converted))


def run_settings(*, device: Any, attn_implementation: str, pad_multiple: int) -> RunSettings:
    """The :class:`~flasheval.engine.hf.fingerprint.RunSettings` of a model run on ``device`` (a ``torch.device``)
    with ``attn_implementation`` by this process's torch and transformers."""
    import torch
    import transformers

    return RunSettings(device_type=device.type, attn_implementation=str(attn_implementation),
                       torch_version=str(torch.__version__), transformers_version=str(transformers.__version__),
                       pad_multiple=pad_multiple)


def model_settings(model: Any, *, pad_multiple: int) -> RunSettings:
    """The run settings of a model already loaded (one the caller holds): where its inputs go, the attention
    transformers gave it, this process's libraries."""
    from flasheval.engine.hf.device_map import input_device

    return run_settings(device=input_device(model), attn_implementation=model.config._attn_implementation,
                        pad_multiple=pad_multiple)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "*.model", "*.tiktoken")
"""The files a saved tokenizer holds its vocabulary in, one at least (fast, SentencePiece, BPE, WordPiece and
tiktoken tokenizers); ``tokenizer_config.json`` alone is not one."""


def has_tokenizer_files(folder: Path) -> bool:
    """Whether a ``save_pretrained`` folder holds a tokenizer's vocabulary (:data:`TOKENIZER_FILES`)."""
    return any(any(folder.glob(pattern)) for pattern in TOKENIZER_FILES)


def load_tokenizer(plan: HFLoadPlan) -> Any:
    """The planned model's tokenizer (cheap next to the weights).

    From a GGUF file, ``AutoTokenizer`` parses the file's metadata once more for the config it picks the
    tokenizer class by (even when given one): 26-44 s of Gemma-3-270M's 262k-token vocabulary, 24 s of
    Qwen2.5's. Where transformers maps the planned config's model type to a tokenizer class, naming it
    (``tokenizer_type``) skips that parse: the same class from the same file, its ``tokenizer.json``,
    special tokens and init arguments equal (checked for Gemma-3 and Qwen2.5; docs/engine.md).
    """
    folder, gguf_file = _files(plan.source, plan.gguf_file, plan.converted)
    if plan.gguf_file is None and plan.converted is None and Path(folder).is_dir() \
            and not has_tokenizer_files(Path(folder)):
        raise BackendError(f"cannot load model {folder!r}: it holds no tokenizer (none of "
                           f"{', '.join(TOKENIZER_FILES)}); save the model's tokenizer beside its weights "
                           "(tokenizer.save_pretrained(folder))")
    return _from_pretrained("AutoTokenizer", folder, gguf_file, plan.revision,
                            **(gguf_tokenizer_type(plan.config) if gguf_file else {}))


def gguf_tokenizer_type(config: Any) -> dict[str, str]:
    """``{"tokenizer_type": model_type}`` where transformers maps ``config``'s model type to a tokenizer
    class, else ``{}`` (``AutoTokenizer`` then reads the class from the file, as without it).

    Examples
    --------
    >>> import transformers
    >>> gguf_tokenizer_type(transformers.Qwen2Config()), gguf_tokenizer_type(transformers.LlamaConfig())
    ({'tokenizer_type': 'qwen2'}, {})
    """
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    model_type = getattr(config, "model_type", None)
    return {"tokenizer_type": model_type} if TOKENIZER_MAPPING_NAMES.get(model_type) else {}


def _files(source: str, gguf_file: str | None, converted: str | None) -> tuple[str, str | None]:
    """``(folder, gguf_file)`` transformers reads: the converted folder of a GGUF file when the cache has one
    (:mod:`flasheval.engine.hf.gguf_cache`), else the model's own files."""
    return (converted, None) if converted is not None else (source, gguf_file)


def _empty_copy(config: Any, source: str) -> tuple[int, str]:
    """Parameters and attention implementation of the model ``config`` describes, from an empty (meta-device)
    copy: no weights are read. The parameters equal the loaded model's ``parameters()`` (tied weights once);
    the attention implementation is the one transformers resolves for this config here (the weights then load
    with it). The config itself is left as it was."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(copy.deepcopy(config))
    except Exception as exc:  # noqa: BLE001 - an architecture transformers cannot build is a user error here
        raise BackendError(f"cannot build model {source!r} from its config: {type(exc).__name__}: "
                           f"{str(exc).strip()[:300]}") from exc
    return int(sum(p.numel() for p in model.parameters())), str(model.config._attn_implementation)


def load_planned(plan: HFLoadPlan, *, tokenizer: Any = None, batch_size: int | None = None,
                 share_context: bool = True, source: str | None = None) -> HFBackend:
    """Load the weights of ``plan`` (and its tokenizer, unless given) into an :class:`HFBackend` (``source``: the
    spec the plan was made from, :attr:`~flasheval.engine.base.BackendInfo.source`).

    ``tokenizer`` must be the plan's own (:func:`load_tokenizer` of ``plan``, as the deferred backend loads it for
    planning): the first load of a GGUF file keeps it in the converted folder with the weights, whoever loaded it.
    """
    if plan.gguf_key is not None and plan.converted is None:  # converted since the plan was made (an earlier load
        from dataclasses import replace  # of this process, e.g. before a release, or another process): read that

        from flasheval.engine.hf.gguf_cache import converted_folder

        folder = converted_folder(plan.gguf_key, plan.dtype_name)
        plan = plan if folder is None else replace(plan, converted=str(folder))
    if tokenizer is None:
        tokenizer = load_tokenizer(plan)
    placed: dict[str, Any] = {}
    if plan.placement is not None:
        from flasheval.engine.hf.device_map import load_kwargs

        placed = load_kwargs(plan.placement)
    model = _from_pretrained("AutoModelForCausalLM", *_files(plan.source, plan.gguf_file, plan.converted),
                             plan.revision, config=plan.config, dtype=plan.torch_dtype,
                             attn_implementation=plan.settings.attn_implementation, **placed)
    if plan.gguf_key is not None and plan.converted is None and plan.placement is None:
        from flasheval.engine.hf.gguf_cache import write_converted

        write_converted(plan.gguf_key, plan.dtype_name, model=model, config=plan.config, tokenizer=tokenizer,
                        source=f"{plan.source}/{plan.gguf_file}")
    if plan.placement is None:
        model.to(plan.device)
    model.eval()
    if model.config._attn_implementation != plan.settings.attn_implementation:  # a guard: loaded with the plan's
        raise BackendError(f"model {plan.source!r} loaded with attention {model.config._attn_implementation!r}, "
                           f"not the planned {plan.settings.attn_implementation!r}")
    where = plan.device if plan.placement is None else _describe_map(getattr(model, "hf_device_map", None), plan)
    logger.info("loaded %s on %s in %s (fingerprint %s)", plan.source, where, plan.dtype_name, plan.fingerprint)
    return HFBackend(model, tokenizer, fingerprint=plan.fingerprint, batch_size=batch_size, max_length=plan.max_length,
                     share_context=share_context, pad_multiple=plan.settings.pad_multiple,
                     previous_fingerprint=plan.previous_fingerprint, source=source)


def load_hf_backend(
    target: str,
    *,
    gguf_file: str | None = None,
    revision: str | None = None,
    dtype: str = "auto",
    device: str = "auto",
    batch_size: int | None = None,
    max_length: int | None = None,
    share_context: bool = True,
    device_map: DeviceMap | None = None,
) -> HFBackend:
    """Load a local HF folder, a local GGUF file or a hub id and wrap it in an :class:`HFBackend`.

    Parameters
    ----------
    target
        A local model folder (with ``config.json``), a folder holding ``gguf_file``, or a hub id.
    gguf_file
        File name of a GGUF checkpoint inside ``target`` (dequantized by transformers).
    revision
        Hub branch, tag or commit (hub ids only).
    dtype, device
        See :data:`DTYPES`; ``device`` is ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
    batch_size, max_length, share_context
        Passed to :class:`HFBackend`.
    device_map
        Spread the model over this replica's GPUs, CPU memory and disk
        (:func:`~flasheval.engine.hf.device_map.device_map_from`); ``device`` must then be ``auto``.

    Raises
    ------
    BackendError
        The path does not exist, the files do not load (corrupt or unsupported), or the hub
        cannot be reached.
    """
    plan = plan_hf_load(target, gguf_file=gguf_file, revision=revision, dtype=dtype, device=device,
                        max_length=max_length, device_map=device_map)
    return load_planned(plan, batch_size=batch_size, share_context=share_context)


def _from_pretrained(auto_class: str, source: str, gguf_file: str | None, revision: str | None,
                     **extra: Any) -> Any:
    """``transformers.<auto_class>.from_pretrained`` of the model's files; any failure is one line."""
    import transformers

    kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    if revision is not None:
        kwargs["revision"] = revision
    try:
        return getattr(transformers, auto_class).from_pretrained(source, **kwargs, **extra)
    except Exception as exc:  # noqa: BLE001 - any load failure (corrupt file, offline hub) is a user error here
        reason = " ".join(str(exc).split()) or type(exc).__name__  # every line: a first one may end in "one of:"
        where = f"{source}/{gguf_file}" if gguf_file else source
        if "offload_folder" in str(exc) and "offload_folder" not in extra:
            reason = ("some layers fit neither the GPUs nor CPU memory and must be written to disk: "
                      "give --offload-folder DIR")
        reason = reason if len(reason) <= 300 else reason[:299] + "…"
        raise BackendError(f"cannot load model {where!r}: {type(exc).__name__}: {reason}") from exc


def _describe_map(hf_device_map: dict[str, Any] | None, plan: HFLoadPlan) -> str:
    """``cuda:0 (12 modules), cuda:1 (13), disk (2)``: where a dispatched model's modules went."""
    if not hf_device_map:
        return str(plan.device)
    counts: dict[str, int] = {}
    for place in hf_device_map.values():
        name = f"cuda:{place}" if isinstance(place, int) else str(place)
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{name} ({n}{' modules' if i == 0 else ''})" for i, (name, n) in enumerate(counts.items()))
