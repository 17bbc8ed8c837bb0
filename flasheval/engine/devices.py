"""The ``--device`` option: checked against this machine's torch build before any model loads.

``auto`` and ``cpu`` always pass; ``cuda`` and ``cuda:N`` need a CUDA build of torch and (for
``N``) that many GPUs; ``mps`` needs Apple's backend. Anything else is refused in one line listing
the forms accepted. torch is imported only to check a GPU device, inside the function.
"""

from __future__ import annotations

import re

from flasheval.errors import InputError

__all__ = ["DEVICE_FORMS", "check_device"]

DEVICE_FORMS = ("auto", "cpu", "cuda", "cuda:N", "mps")
_CUDA = re.compile(r"^cuda(?::(\d+))?$")


def check_device(device: object, *, field: str = "--device") -> None:
    """Refuse a device this machine cannot run on (``None`` passes: the caller's default).

    Raises
    ------
    InputError
        An unknown device name, ``cuda`` on a torch build without CUDA or without a visible GPU,
        ``cuda:N`` with ``N`` at or above the number of GPUs, ``mps`` where it is not available.
    """
    if device is None:
        return
    if not isinstance(device, str) or not device.strip():
        raise InputError(f"must be a device name, got {device!r}", field=field, allowed=DEVICE_FORMS)
    if device in ("auto", "cpu"):
        return
    cuda = _CUDA.match(device)
    if cuda is None and device != "mps":
        raise InputError(f"unknown device {device!r}", field=field, allowed=DEVICE_FORMS)
    import torch

    if device == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise InputError("mps is not available on this machine; use --device cpu", field=field)
        return
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:  # ROCm builds say "cuda" too
        raise InputError(f"{device}: this torch build has no CUDA (torch {torch.__version__}); use --device cpu or "
                         "install the CUDA build, see docs/install.md", field=field)
    n_gpus = torch.cuda.device_count()
    if n_gpus == 0:
        raise InputError(f"{device}: torch {torch.__version__} has CUDA but sees no GPU (check the driver and "
                         "CUDA_VISIBLE_DEVICES); use --device cpu", field=field)
    if cuda.group(1) is not None and int(cuda.group(1)) >= n_gpus:  # type: ignore[union-attr]
        raise InputError(f"{device}: this machine has {n_gpus} GPU{'s' if n_gpus > 1 else ''} "
                         f"(cuda:0{f' to cuda:{n_gpus - 1}' if n_gpus > 1 else ''})", field=field)
