"""Throughput figures of a scoring run, set against the hardware's limit (pure Python).

A decoder's forward pass costs about ``2 x parameters`` floating-point operations per token
(one multiply and one add per weight; attention's extra cost is small at these lengths and
is left out), so ``2 x parameters x tokens / seconds`` is the achieved FLOP/s. Divided by
the device's peak, it says how far a run is from the limit.
"""

from __future__ import annotations

__all__ = ["FLOPS_PER_PARAMETER_TOKEN", "forward_flops", "throughput"]

FLOPS_PER_PARAMETER_TOKEN = 2.0
"""Floating-point operations per parameter per token of a forward pass (one multiply, one add)."""


def forward_flops(n_parameters: float | None, n_tokens: float | None) -> float | None:
    """Estimated FLOPs of forward passes over ``n_tokens`` tokens: ``2 x n_parameters x n_tokens``.

    The one place the estimate is written: a placement's compute, its budget check, a sweep's, an
    evaluation's summary and :func:`throughput` all call it. ``None`` when either count is unknown.

    Examples
    --------
    >>> forward_flops(1_000_000, 5_000), forward_flops(None, 5_000), forward_flops(1_000_000, None)
    (10000000000.0, None, None)
    """
    if n_parameters is None or n_tokens is None:
        return None
    return FLOPS_PER_PARAMETER_TOKEN * float(n_parameters) * float(n_tokens)


def throughput(*, n_examples: int, n_tokens: int, seconds: float, n_parameters: int | None,
               peak_flops: float | None = None) -> dict[str, float | int | None]:
    """Examples/s, tokens/s and achieved FLOP/s (``2 x n_parameters x n_tokens / seconds``).

    Parameters
    ----------
    n_examples, n_tokens
        Examples scored and tokens the model ran for them (each shared context once).
    seconds
        Wall-clock scoring time; figures are ``None`` when it is not positive.
    n_parameters
        Model parameters (``None`` when unknown: no FLOP/s).
    peak_flops
        The device's peak FLOP/s in the run's dtype; adds ``fraction_of_peak``.

    Examples
    --------
    >>> throughput(n_examples=10, n_tokens=5_000, seconds=2.0, n_parameters=1_000_000, peak_flops=1e10)
    {'n_tokens': 5000, 'examples_per_second': 5.0, 'tokens_per_second': 2500.0, 'flops_per_second': 5000000000.0, 'fraction_of_peak': 0.5}
    """
    timed = seconds > 0
    work = forward_flops(n_parameters or None, n_tokens)
    flops = work / seconds if timed and work is not None else None
    figures: dict[str, float | int | None] = {
        "n_tokens": n_tokens,
        "examples_per_second": n_examples / seconds if timed else None,
        "tokens_per_second": n_tokens / seconds if timed else None,
        "flops_per_second": flops,
    }
    if peak_flops is not None:
        figures["fraction_of_peak"] = flops / peak_flops if flops is not None else None
    return figures
