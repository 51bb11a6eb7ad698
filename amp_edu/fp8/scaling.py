"""From a tensor's largest magnitude (its *amax*) to the fp8 *scale* that makes it fit.

fp8 has a tiny range (e4m3: ±448, e5m2: ±57344) and only 3 or 2 mantissa bits, so a tensor is
never cast as it is: it is first multiplied by a scale chosen so that its largest magnitude lands
on the format's largest finite value::

    amax  = max |x|                      (over the whole tensor, or along one axis)
    scale = fp8_max / max(amax, EPS)     (computed in float64, stored as float32)
    x_fp8 = saturate(x * scale)          (see :mod:`amp_edu.fp8.cast`)
    x    ≈ x_fp8 / scale                 (what the scaled matmul undoes)

``EPS`` (1e-12, torchao's value) keeps a tensor of zeros from giving ``scale = inf`` and then
``0 * inf = NaN``. The float64 division is what torchao does so that eager and compiled code
round the same way.

With ``power_of_2=True`` the scale is rounded *down* to a power of two: multiplying by ``2^k``
only changes the exponent, so scaling and unscaling are exact and the only rounding left is the
cast itself. Rounding down (never up) keeps ``amax * scale <= fp8_max``.

The fp8 constants come from :mod:`amp_edu.formats`, the course's single owner of format facts.
"""

from __future__ import annotations

import torch

from .. import formats
from ..validate import check_int

__all__ = ["EPS", "FP8_DTYPES", "fp8_max", "amax", "amax_to_scale", "round_down_to_power_of_2",
           "tensor_to_scale"]

EPS = 1e-12
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def fp8_max(fp8_dtype: torch.dtype) -> float:
    """Largest finite value of an fp8 dtype (448 for e4m3fn, 57344 for e5m2), from amp_edu.formats."""
    if fp8_dtype not in FP8_DTYPES:
        raise ValueError(f"fp8_dtype must be one of {FP8_DTYPES}, got {fp8_dtype!r}")
    return formats.get(fp8_dtype).max


def amax(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``max |x|``: a 0-dim tensor for ``dim=None`` (per tensor), else along ``dim`` with keepdim.

    Computed in ``x``'s own dtype (exact: a max picks one of the values, it rounds nothing).
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {type(x).__name__}"
                        + (f" of dtype {x.dtype}" if isinstance(x, torch.Tensor) else ""))
    with torch.no_grad():
        if dim is None:
            return torch.max(torch.abs(x))
        return torch.amax(torch.abs(x), dim=check_int(dim, "dim (or None)"), keepdim=True)


def round_down_to_power_of_2(scale: torch.Tensor) -> torch.Tensor:
    """``2^floor(log2(scale))``: the largest power of two not above ``scale`` (float32 in, out)."""
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
        raise TypeError("scale must be a float32 tensor")
    return torch.exp2(torch.floor(torch.log2(scale)))


def amax_to_scale(amax: torch.Tensor, fp8_dtype: torch.dtype, power_of_2: bool = False) -> torch.Tensor:
    """``fp8_max / max(amax, EPS)`` in float64, returned as float32 (rounded down to 2^k if asked)."""
    if not isinstance(amax, torch.Tensor):
        raise TypeError(f"amax must be a tensor, got {type(amax).__name__}")
    with torch.no_grad():
        scale = (fp8_max(fp8_dtype) / torch.clamp(amax.to(torch.float64), min=EPS)).to(torch.float32)
        return round_down_to_power_of_2(scale) if power_of_2 else scale


def tensor_to_scale(x: torch.Tensor, fp8_dtype: torch.dtype, dim: int | None = None,
                    power_of_2: bool = False) -> torch.Tensor:
    """The current (dynamic) scale of ``x``: per tensor (``dim=None``) or one per slice along ``dim``."""
    return amax_to_scale(amax(x, dim), fp8_dtype, power_of_2)
