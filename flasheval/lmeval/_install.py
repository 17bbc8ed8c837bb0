"""The one place that imports lm-evaluation-harness, and says how to install it when it is missing."""

from __future__ import annotations

from types import ModuleType

from flasheval.errors import InputError

__all__ = ["LM_EVAL_VERSION", "INSTALL_HINT", "require_lm_eval", "installed_lm_eval_version"]

LM_EVAL_VERSION = "0.4.13"
"""The lm-evaluation-harness release the bridge follows and is tested with (pinned in the ``lm-eval`` extra)."""

INSTALL_HINT = 'pip install -e ".[lm-eval]"  (or: pip install "lm-eval[hf]==0.4.13")'


def require_lm_eval() -> ModuleType:
    """``lm_eval``, imported; a one-line :class:`~flasheval.errors.InputError` with the install command if absent."""
    try:
        import lm_eval
    except ImportError:
        raise InputError(f"lm-evaluation-harness is not installed; install it with: {INSTALL_HINT}") from None
    return lm_eval


def installed_lm_eval_version() -> str:
    """The installed lm-eval's version (after :func:`require_lm_eval`)."""
    from importlib.metadata import version

    require_lm_eval()
    return version("lm_eval")
