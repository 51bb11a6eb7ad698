"""The fate of a value: what storing it in a format does to it (zero, flush, subnormal, normal,
overflow, or it was not finite), for one number or every element of a tensor."""

from __future__ import annotations

import math
import numbers

import torch

from .format import FP32, Format, get
from .rounding import _as_float, _past_max, quantize

__all__ = ["FATES", "fate", "fate_counts"]


FATES = ("zero", "flush", "subnormal", "normal", "overflow", "nonfinite")
"""What storing a value does to it, in order of magnitude:

* ``zero``: it was 0 and stays 0 (e8m0 has no zero: there 0 becomes 2^-127, ``normal``);
* ``flush``: a nonzero value rounded to 0 (underflow: below half the smallest subnormal);
* ``subnormal``: it lands below the smallest normal, with fewer significant bits;
* ``normal``: a normal value, relative error at most eps/2 (in e8m0, whose smallest value is
  2^-127, tiny values are rounded *up* to it, and count as normal);
* ``overflow``: finite, but too large: it becomes inf, NaN or (saturating formats) ±max;
* ``nonfinite``: it was already inf or NaN.
"""


def _storable(x: torch.Tensor, f: Format) -> torch.Tensor:
    """``x`` (float32) stored in ``f`` and read back as float32, through torch's own cast where
    ``f`` has a castable dtype (fast, and equal to :func:`quantize`, which the tests prove)."""
    if f.dtype is not None and f.bits < 32:
        return x.to(f.dtype).to(torch.float32)
    if f is FP32:
        return x
    return quantize(torch.nan_to_num(x.double(), nan=0.0), f).to(torch.float32)


def fate(x, fmt="fp16", scale: float = 1.0):
    """What storing ``x × scale`` in ``fmt`` does to it: an entry of :data:`FATES`.

    ``x`` is a real number (the answer is a str) or a floating tensor (the answer is an int8
    tensor of indices into :data:`FATES`, one per element, same shape). The product ``x × scale``
    is formed in float32, like a scaled fp32 gradient, then cast to ``fmt`` (anything
    :func:`get` accepts).

    >>> fate(1e-8, "fp16"), fate(1e-6, "fp16"), fate(7e4, "fp16"), fate(7e4, "bf16")
    ('flush', 'subnormal', 'overflow', 'normal')
    """
    f = get(fmt)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a number, got {type(scale).__name__}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be finite and > 0, got {scale}")
    if isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
        x = x.detach()
        return _fate_tensor(x, x.float() * float(scale), f)
    xv = torch.tensor([_as_float(x)], dtype=torch.float64)
    return FATES[int(_fate_tensor(xv, (xv * float(scale)).float(), f)[0])]


def _fate_tensor(x: torch.Tensor, y: torch.Tensor, f: Format) -> torch.Tensor:
    """Fates of the values ``x`` whose float32 product with the scale is ``y``."""
    q = _storable(torch.where(torch.isfinite(y), y, torch.zeros_like(y)), f)
    out = torch.full(x.shape, FATES.index("normal"), dtype=torch.int8, device=x.device)
    if f.subnormals:
        out[q.abs() < f.smallest_normal] = FATES.index("subnormal")
    out[(q == 0) & (x != 0)] = FATES.index("flush")
    if f.has_zero:                       # e8m0 has no zero: 0 is stored as 2^-127, a normal
        out[x == 0] = FATES.index("zero")
    out[_past_max(y.abs(), f) & torch.isfinite(x)] = FATES.index("overflow")
    out[~torch.isfinite(x)] = FATES.index("nonfinite")
    return out


def fate_counts(x, fmt="fp16", scale: float = 1.0) -> dict[str, int]:
    """``{fate: how many elements}`` of the tensor ``x × scale`` stored in ``fmt``, every fate
    of :data:`FATES` present (0 where none)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a floating-point tensor, got {type(x).__name__}")
    counts = torch.bincount(fate(x, fmt, scale).reshape(-1).long().cpu(), minlength=len(FATES)).tolist()
    return dict(zip(FATES, counts))
