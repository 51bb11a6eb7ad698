"""Casting to fp8 with a scale, and back.

``x.float() * scale`` is rounded to the fp8 grid (round to nearest even, by torch's cast). Values
that land beyond the format's largest finite value are *saturated* to ±max first: without that,
e5m2 turns them into ±inf, and e4m3fn (which has no inf) into NaN on torch < 2.12 (torch ≥ 2.12
saturates e4m3fn casts by itself; see :mod:`amp_edu.formats`). With a current scale nothing
exceeds max; with a *delayed* scale (one computed from earlier steps) a new outlier can, and
saturating is what keeps it finite.

:class:`Float8Tensor` keeps the fp8 bits with the scale that made them and the dtype they came
from, which is everything a scaled matmul needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..validate import check_int
from .config import Granularity
from .scaling import fp8_max, tensor_to_scale

__all__ = ["Float8Tensor", "to_fp8_saturated", "cast_to_float8", "quantize_dequantize"]


@dataclass(frozen=True)
class Float8Tensor:
    """fp8 ``data`` with the float32 ``scale`` it was multiplied by and its original dtype.

    ``axiswise_dim`` None: ``scale`` is 0-dim (per tensor); ``d``: one scale per slice along
    ``d`` (keepdim, broadcastable to ``data``; on a matrix ``1`` is one per row, ``0`` one per
    column). The value it stands for is ``data / scale`` (:meth:`dequantize`).
    """

    data: torch.Tensor
    scale: torch.Tensor
    orig_dtype: torch.dtype
    axiswise_dim: int | None = None

    @property
    def granularity(self) -> Granularity:
        return Granularity.TENSORWISE if self.axiswise_dim is None else Granularity.AXISWISE

    def dequantize(self) -> torch.Tensor:
        return (self.data.to(torch.float32) / self.scale).to(self.orig_dtype)

    def t(self) -> "Float8Tensor":
        """The transpose (a 2-D view); a per-row scale becomes a per-column one."""
        if self.axiswise_dim is None:
            return Float8Tensor(self.data.t(), self.scale, self.orig_dtype)
        return Float8Tensor(self.data.t(), self.scale.t(), self.orig_dtype, 1 - self.axiswise_dim)

    @property
    def shape(self):
        return self.data.shape


def to_fp8_saturated(x: torch.Tensor, fp8_dtype: torch.dtype) -> torch.Tensor:
    """Clamp to ``[-fp8_max, fp8_max]``, then cast: overflow becomes ±max, never inf or NaN."""
    m = fp8_max(fp8_dtype)
    return x.clamp(min=-m, max=m).to(fp8_dtype)


def cast_to_float8(x: torch.Tensor, fp8_dtype: torch.dtype, scale: torch.Tensor | None = None, *,
                   dim: int | None = None, power_of_2: bool = False) -> Float8Tensor:
    """``saturate(x.float() * scale)`` in ``fp8_dtype``, with ``scale`` from ``x`` when not given.

    ``dim=None`` computes one scale for the tensor; ``dim=d`` one per slice along ``d`` (the amax
    is taken over ``d``: ``dim=-1`` on a matrix gives one scale per row). ``x`` is not modified.
    A given ``scale`` is per tensor (0-dim) unless ``dim`` says along which dim it varies.
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError("x must be a floating-point tensor")
    if dim is not None:
        dim = check_int(dim, "dim (or None)", min=-x.dim(), max=x.dim() - 1) % x.dim()
    if scale is None:
        scale = tensor_to_scale(x, fp8_dtype, dim=dim, power_of_2=power_of_2)
    elif not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
        raise TypeError("scale must be a float32 tensor (or None to compute it from x)")
    elif dim is None and scale.dim() != 0:
        raise ValueError(f"a per-tensor scale is 0-dim, got shape {tuple(scale.shape)}; pass dim= for "
                         "one scale per slice")
    with torch.no_grad():
        data = to_fp8_saturated(x.to(torch.float32) * scale, fp8_dtype)
    return Float8Tensor(data, scale, x.dtype, dim)


def quantize_dequantize(x: torch.Tensor, fp8_dtype: torch.dtype = torch.float8_e4m3fn, *,
                        dim: int | None = None, power_of_2: bool = False) -> torch.Tensor:
    """``x`` after a round trip through fp8 (float32): what a scaled fp8 cast keeps of it."""
    q = cast_to_float8(x, fp8_dtype, dim=dim, power_of_2=power_of_2)
    return q.data.to(torch.float32) / q.scale
