"""Scaling granularity: one fp32 scale per tensor, per row, per 1×128 tile or per 128×128 block.

The same rule as :mod:`amp_edu.fp8.scaling` (``scale = fp8_max / amax``), applied to smaller
groups of elements. The smaller the group, the less one outlier costs: it only shrinks the scale
of its own group, and every other group keeps the full fp8 range for its own values.

* per tensor: torchao's ``tensorwise`` recipe, TE's current/delayed scaling;
* per row: torchao's ``rowwise`` recipe (scales also rounded to powers of two there);
* 1×128 tiles (activations) and 128×128 blocks (weights): DeepSeek-V3's fine-grained fp8
  (arXiv:2412.19437, section 3.3), TE's ``Float8BlockScaling``;
* 32-element MX blocks with e8m0 scales: :mod:`amp_edu.fp8.mx`.

:func:`roundtrip` runs any of them (``SCHEMES``) on a 2-D tensor, so one plot can compare them.
"""

from __future__ import annotations

import torch

from .cast import to_fp8_saturated
from .mx import mx_roundtrip
from .scaling import amax_to_scale

__all__ = ["block_roundtrip", "roundtrip", "SCHEMES", "relative_error"]

SCHEMES = ("per-tensor", "row-wise", "1x128", "128x128", "MX-32")


def block_roundtrip(x: torch.Tensor, block: tuple[int, int], fp8_dtype: torch.dtype = torch.float8_e4m3fn,
                    power_of_2: bool = False) -> torch.Tensor:
    """``x`` (2-D) cast to fp8 with one scale per ``block = (rows, cols)`` tile and back (float32).

    ``block`` must divide ``x``'s shape; ``(m, n)`` is per tensor, ``(1, n)`` per row.
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or not x.is_floating_point():
        raise ValueError("x must be a 2-D floating-point tensor")
    (m, n), (bm, bn) = x.shape, block
    if bm < 1 or bn < 1 or m % bm or n % bn:
        raise ValueError(f"block {block} must divide the shape {tuple(x.shape)}")
    tiles = x.to(torch.float32).reshape(m // bm, bm, n // bn, bn)
    amax = tiles.abs().amax(dim=(1, 3), keepdim=True)
    scale = amax_to_scale(amax, fp8_dtype, power_of_2)
    q = to_fp8_saturated(tiles * scale, fp8_dtype).to(torch.float32) / scale
    return q.reshape(m, n)


def roundtrip(x: torch.Tensor, scheme: str, fp8_dtype: torch.dtype = torch.float8_e4m3fn) -> torch.Tensor:
    """``x`` through fp8 under one of :data:`SCHEMES` and back (float32). MX-32 uses e4m3 elements."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    m, n = x.shape
    if scheme == "MX-32":
        return mx_roundtrip(x, "fp8_e4m3", 32)
    block = {"per-tensor": (m, n), "row-wise": (1, n), "1x128": (1, 128), "128x128": (128, 128)}[scheme]
    return block_roundtrip(x, block, fp8_dtype)


def relative_error(x: torch.Tensor, q: torch.Tensor, exclude: torch.Tensor | None = None) -> float:
    """``||q - x|| / ||x||`` (float64), over the elements where ``exclude`` is False."""
    x, q = x.double(), q.double()
    if exclude is not None:
        x, q = x[~exclude], q[~exclude]
    return float((q - x).norm() / x.norm().clamp_min(1e-300))
