"""MX block scaling (OCP Microscaling Formats v1.0): 32 elements share one power-of-two scale.

Per-tensor and per-row scales are float32 numbers chosen for thousands of values at once; one
outlier shrinks the scale for all of them. The OCP MX specification (v1.0, 2023) makes the
block small and the scale cheap: every run of ``k = 32`` consecutive elements along the last
dim shares one scale stored as **e8m0** — 8 exponent bits, no sign, no mantissa: a power of two
``2^(e - 127)`` (``torch.float8_e8m0fnu``; the field 255 is NaN). Elements are fp8 (e4m3/e5m2),
fp6 or **fp4 e2m1** (±{0, 0.5, 1, 1.5, 2, 3, 4, 6}).

The spec's conversion (section 6.3), for one block ``V``::

    shared_exp = floor(log2(max |V|)) - emax_elem      # emax_elem: 8 (e4m3), 15 (e5m2), 2 (e2m1)
    X          = 2^shared_exp                          # clamped to e8m0's range 2^-127 .. 2^127
    P_i        = quantize_elem(V_i / X)                # round to nearest even, saturate at ±max

so the largest element lands in the element format's top binade ``[2^emax, 2^(emax+1))``.
Values between the format's max (448, 57344 or 6) and ``2^(emax+1)`` saturate: that is
the spec's choice (torchao's ``ScaleCalculationMode.FLOOR``; its other modes round up instead).
A block of zeros takes the smallest scale. The value a block stands for is ``P_i * X``.

Format facts (maxima, the e2m1 grid) come from :mod:`amp_edu.formats`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..formats import get_format, quantize
from ..validate import check_int

__all__ = ["MX_ELEMENTS", "MXTensor", "shared_exponent", "mx_quantize", "mx_dequantize",
           "mx_roundtrip", "E8M0_BIAS"]

E8M0_BIAS = get_format("fp8_e8m0").bias          # 127: e8m0's field e stands for 2^(e - 127)
MX_ELEMENTS = ("fp8_e4m3", "fp8_e5m2", "fp4_e2m1")


def _elem(elem: str):
    if elem not in MX_ELEMENTS:
        raise ValueError(f"elem must be one of {MX_ELEMENTS}, got {elem!r}")
    return get_format(elem)


def _emax(fmt) -> int:
    """Exponent of the largest normal binade: floor(log2(max)) (8 for e4m3, 15 e5m2, 2 e2m1)."""
    return math.frexp(fmt.max)[1] - 1


@dataclass(frozen=True)
class MXTensor:
    """``elements`` (float32 values on the element grid), ``exponents`` (int32 shared exponent of
    each block, unbiased), the element format name and the block size."""

    elements: torch.Tensor
    exponents: torch.Tensor
    elem: str
    block_size: int

    @property
    def scales_e8m0(self) -> torch.Tensor:
        """The shared scales as torch's e8m0 dtype (biased field ``exponent + 127``)."""
        return (self.exponents + E8M0_BIAS).to(torch.uint8).view(torch.float8_e8m0fnu)

    def bits_per_element(self) -> float:
        """Storage cost: the element width plus 8 scale bits spread over the block."""
        return get_format(self.elem).bits + 8 / self.block_size


def shared_exponent(block_amax: torch.Tensor, elem: str) -> torch.Tensor:
    """``floor(log2(amax)) - emax_elem`` clamped to [-127, 127], int32; a zero block gives -127."""
    f = _elem(elem)
    a = block_amax.to(torch.float32)
    _, e = torch.frexp(a)                      # a = m * 2^e, 0.5 <= m < 1: floor(log2 a) = e - 1
    exp = torch.where(a > 0, e.to(torch.int32) - 1, torch.full_like(e, -E8M0_BIAS, dtype=torch.int32))
    return torch.clamp(exp - _emax(f), min=-E8M0_BIAS, max=E8M0_BIAS)


def mx_quantize(x: torch.Tensor, elem: str = "fp8_e4m3", block_size: int = 32) -> MXTensor:
    """Blocks of ``block_size`` along the last dim (which it must divide), one e8m0 scale each."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError("x must be a floating-point tensor")
    block_size = check_int(block_size, "block_size", min=1)
    if x.dim() == 0 or x.shape[-1] % block_size:
        raise ValueError(f"the last dim of shape {tuple(x.shape)} must be a multiple of block_size={block_size}")
    f = _elem(elem)
    blocks = x.to(torch.float32).reshape(*x.shape[:-1], x.shape[-1] // block_size, block_size)
    exps = shared_exponent(blocks.abs().amax(dim=-1, keepdim=True), elem)
    scaled = (blocks * torch.exp2(-exps.to(torch.float32))).clamp(-f.max, f.max)
    if f.dtype is not None:                    # fp8 elements: torch's own cast
        elements = scaled.to(f.dtype).to(torch.float32)
    else:                                      # fp4 e2m1 has no castable torch dtype
        elements = quantize(scaled, f).to(torch.float32)
    elements = elements.reshape(x.shape)
    return MXTensor(elements, exps.squeeze(-1), elem, block_size)


def mx_dequantize(q: MXTensor) -> torch.Tensor:
    """``P_i * 2^shared_exp`` for every element (float32, the original shape)."""
    k = q.block_size
    blocks = q.elements.reshape(*q.elements.shape[:-1], -1, k)
    return (blocks * torch.exp2(q.exponents.to(torch.float32)).unsqueeze(-1)).reshape(q.elements.shape)


def mx_roundtrip(x: torch.Tensor, elem: str = "fp8_e4m3", block_size: int = 32) -> torch.Tensor:
    """``x`` after an MX cast and back (float32)."""
    return mx_dequantize(mx_quantize(x, elem, block_size))
